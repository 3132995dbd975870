package delta

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupportedFeature is wrapped by every refusal of a table's protocol:
// a reader or writer version, or a named table feature, that this package
// does not implement. Callers branch on it to stop one table loudly.
var ErrUnsupportedFeature = errors.New("unsupported table feature")

// The table features this package knows by name. Names are the protocol's.
const (
	FeatureAppendOnly        = "appendOnly"
	FeatureInvariants        = "invariants"
	FeatureCheckConstraints  = "checkConstraints"
	FeatureChangeDataFeed    = "changeDataFeed"
	FeatureGeneratedColumns  = "generatedColumns"
	FeatureColumnMapping     = "columnMapping"
	FeatureIdentityColumns   = "identityColumns"
	FeatureDeletionVectors   = "deletionVectors"
	FeatureTimestampNTZ      = "timestampNtz"
	FeatureTypeWidening      = "typeWidening"
	FeatureTypeWideningPre   = "typeWidening-preview"
	FeatureV2Checkpoint      = "v2Checkpoint"
	FeatureVacuumProtocol    = "vacuumProtocolCheck"
	FeatureDomainMetadata    = "domainMetadata"
	FeatureInCommitTimestamp = "inCommitTimestamp"
	FeatureRowTracking       = "rowTracking"
	FeatureClustering        = "clustering"
	FeatureVariantType       = "variantType"
	FeatureIcebergCompatV1   = "icebergCompatV1"
	FeatureIcebergCompatV2   = "icebergCompatV2"
)

// readFeatures are the reader features log replay and the data file reader
// honour. A reader feature missing here makes the table unreadable to us.
var readFeatures = map[string]bool{
	FeatureDeletionVectors: true,
	FeatureColumnMapping:   true,
	FeatureTimestampNTZ:    true,
	FeatureTypeWidening:    true,
	FeatureTypeWideningPre: true,
	FeatureV2Checkpoint:    true,
	FeatureVacuumProtocol:  true,
}

// writeFeatures are the writer features a Transaction honours. Features that
// are safe only while unused (invariants) are checked separately against the
// schema. inCommitTimestamp is written on tables that have it from their
// creation or already enabled; enabling it on a table with history is
// refused in Transaction.validate. columnMapping stays out until data files are written with physical
// names; v2Checkpoint stays out because log checkpoints are written classic
// only, which a table with delta.checkpointPolicy=v2 forbids.
var writeFeatures = map[string]bool{
	FeatureAppendOnly:        true,
	FeatureInvariants:        true,
	FeatureTimestampNTZ:      true,
	FeatureDomainMetadata:    true,
	FeatureDeletionVectors:   true,
	FeatureVacuumProtocol:    true,
	FeatureInCommitTimestamp: true,
}

// legacyWriterFeatures lists the features each legacy writer version
// (before table features, writer 2..6) implies, cumulatively.
var legacyWriterFeatures = [...][]string{
	2: {FeatureAppendOnly, FeatureInvariants},
	3: {FeatureCheckConstraints},
	4: {FeatureChangeDataFeed, FeatureGeneratedColumns},
	5: {FeatureColumnMapping},
	6: {FeatureIdentityColumns},
}

// checkRead returns an error wrapping ErrUnsupportedFeature when a reader
// must not read a table with protocol p.
func checkRead(location string, p Protocol) error {
	switch {
	case p.MinReaderVersion < 1 || p.MinReaderVersion > 3:
		return fmt.Errorf("read table %s: reader version %d: %w", location, p.MinReaderVersion, ErrUnsupportedFeature)
	case p.MinReaderVersion == 3:
		for _, f := range p.ReaderFeatures {
			if !readFeatures[f] {
				return fmt.Errorf("read table %s: reader feature %q: %w", location, f, ErrUnsupportedFeature)
			}
		}
	}
	// Reader 1 needs nothing; reader 2 implies columnMapping, which we read.
	return nil
}

// checkWrite returns an error wrapping ErrUnsupportedFeature when this
// package must not write to a table with protocol p and metadata m. A
// writer must also be able to read the table.
func checkWrite(location string, p Protocol, m Metadata) error {
	if err := checkRead(location, p); err != nil {
		return err
	}
	if p.MinWriterVersion < 1 || p.MinWriterVersion > 7 {
		return fmt.Errorf("write table %s: writer version %d: %w", location, p.MinWriterVersion, ErrUnsupportedFeature)
	}
	schema, err := m.Schema()
	if err != nil {
		return fmt.Errorf("write table %s: %w", location, err)
	}
	if p.MinWriterVersion == 7 {
		// Named features: listed means in force, whatever the properties say.
		for _, f := range p.WriterFeatures {
			if !writeFeatures[f] {
				return fmt.Errorf("write table %s: writer feature %q: %w", location, f, ErrUnsupportedFeature)
			}
			if err := checkActive(location, f, schema, m); err != nil {
				return err
			}
		}
		return nil
	}
	// Legacy versions imply features; the protocol obliges a writer only for
	// the ones the table uses, so each is checked for use.
	for v := 2; v <= p.MinWriterVersion && v < len(legacyWriterFeatures); v++ {
		for _, f := range legacyWriterFeatures[v] {
			if err := checkActive(location, f, schema, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkActive refuses feature f when the table uses it and this package
// cannot honour the use.
func checkActive(location, f string, schema StructType, m Metadata) error {
	refuse := func(why string) error {
		return fmt.Errorf("write table %s: writer feature %q (%s): %w", location, f, why, ErrUnsupportedFeature)
	}
	switch f {
	case FeatureInvariants:
		if col := fieldWithMetadata(schema, "delta.invariants", ""); col != "" {
			return refuse("column " + col + " has an invariant")
		}
	case FeatureCheckConstraints:
		for k := range m.Configuration {
			if strings.HasPrefix(k, "delta.constraints.") {
				return refuse("table has constraint " + k)
			}
		}
	case FeatureChangeDataFeed:
		if strings.EqualFold(m.Configuration["delta.enableChangeDataFeed"], "true") {
			return refuse("delta.enableChangeDataFeed is true")
		}
	case FeatureGeneratedColumns:
		if col := fieldWithMetadata(schema, "delta.generationExpression", ""); col != "" {
			return refuse("column " + col + " is generated")
		}
	case FeatureColumnMapping:
		if mode := m.Configuration["delta.columnMapping.mode"]; mode != "" && mode != "none" {
			return refuse("delta.columnMapping.mode is " + mode)
		}
	case FeatureIdentityColumns:
		if col := fieldWithMetadata(schema, "", "delta.identity."); col != "" {
			return refuse("column " + col + " is an identity column")
		}
	}
	return nil
}

// fieldWithMetadata returns the dotted name of the first field, at any
// depth, whose metadata has key exactly (or a key starting with prefix).
func fieldWithMetadata(s StructType, key, prefix string) string {
	var walk func(t DataType, path string) string
	walk = func(t DataType, path string) string {
		switch t := t.(type) {
		case StructType:
			for _, f := range t.Fields {
				name := f.Name
				if path != "" {
					name = path + "." + f.Name
				}
				for k := range f.Metadata {
					if (key != "" && k == key) || (prefix != "" && strings.HasPrefix(k, prefix)) {
						return name
					}
				}
				if n := walk(f.Type, name); n != "" {
					return n
				}
			}
		case ArrayType:
			return walk(t.ElementType, path+".element")
		case MapType:
			if n := walk(t.KeyType, path+".key"); n != "" {
				return n
			}
			return walk(t.ValueType, path+".value")
		}
		return ""
	}
	return walk(s, "")
}

// appendOnly reports whether the table forbids removing data (delta.appendOnly).
func appendOnly(m Metadata) bool {
	return strings.EqualFold(m.Configuration["delta.appendOnly"], "true")
}

// inCommitTimestamps reports whether commit timestamps come from
// commitInfo.inCommitTimestamp, and from which version on (0 when the table
// had them from its creation).
func inCommitTimestamps(p Protocol, m Metadata) (enabled bool, fromVersion int64) {
	if p.MinWriterVersion < 7 || !contains(p.WriterFeatures, FeatureInCommitTimestamp) {
		return false, 0
	}
	if !strings.EqualFold(m.Configuration["delta.enableInCommitTimestamps"], "true") {
		return false, 0
	}
	var v int64
	if s := m.Configuration["delta.inCommitTimestampEnablementVersion"]; s != "" {
		if _, err := fmt.Sscan(s, &v); err != nil {
			v = 0
		}
	}
	return true, v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
