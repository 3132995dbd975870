package datafile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcapply/cdcapply/delta"
)

// ColumnMapping is a table's delta.columnMapping.mode.
type ColumnMapping string

// The column mapping modes of the protocol.
const (
	MappingNone ColumnMapping = "none"
	MappingName ColumnMapping = "name"
	MappingID   ColumnMapping = "id"
)

// Metadata keys of a schema field under column mapping.
const (
	keyPhysicalName = "delta.columnMapping.physicalName"
	keyFieldID      = "delta.columnMapping.id"
)

// defaultIndexedCols is the protocol's default for
// delta.dataSkippingNumIndexedCols.
const defaultIndexedCols = 32

// Layout is what Read and Write need to know of a table: its logical
// schema, which columns are partition columns (kept in the log, not in
// the files), how logical names map to the names in the files, and which
// columns get statistics.
type Layout struct {
	Schema           delta.StructType
	PartitionColumns []string
	Mapping          ColumnMapping
	// NumIndexedCols is how many leaf columns get statistics, in schema
	// order; negative means all of them.
	NumIndexedCols int
	// StatsColumns, when set, names the columns (dotted paths of logical
	// names) that get statistics instead of the first NumIndexedCols.
	StatsColumns []string
}

// LayoutOf reads a Layout from a table's metadata action.
func LayoutOf(m *delta.Metadata) (Layout, error) {
	schema, err := m.Schema()
	if err != nil {
		return Layout{}, fmt.Errorf("read table layout: %w", err)
	}
	l := Layout{Schema: schema, PartitionColumns: m.PartitionColumns, Mapping: MappingNone, NumIndexedCols: defaultIndexedCols}
	switch mode := m.Configuration["delta.columnMapping.mode"]; mode {
	case "", "none":
	case "name":
		l.Mapping = MappingName
	case "id":
		l.Mapping = MappingID
	default:
		return Layout{}, fmt.Errorf("read table layout: unknown delta.columnMapping.mode %q", mode)
	}
	if v, ok := m.Configuration["delta.dataSkippingNumIndexedCols"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < -1 {
			return Layout{}, fmt.Errorf("read table layout: delta.dataSkippingNumIndexedCols %q: want an integer >= -1", v)
		}
		l.NumIndexedCols = n
	}
	if v := m.Configuration["delta.dataSkippingStatsColumns"]; strings.TrimSpace(v) != "" {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				l.StatsColumns = append(l.StatsColumns, strings.Trim(c, "`"))
			}
		}
	}
	return l, nil
}

func (l Layout) isPartition(name string) bool {
	for _, p := range l.PartitionColumns {
		if strings.EqualFold(p, name) {
			return true
		}
	}
	return false
}

// physicalName is the name a field has inside data files (and in the
// stats and partitionValues keys): its logical name unless column mapping
// gives it a physical one.
func (l Layout) physicalName(f delta.StructField) string {
	if l.Mapping == MappingNone {
		return f.Name
	}
	if s, ok := f.Metadata[keyPhysicalName].(string); ok && s != "" {
		return s
	}
	return f.Name
}

// fieldID is the Parquet field id of f under column mapping, or -1.
func fieldID(f delta.StructField) int {
	switch v := f.Metadata[keyFieldID].(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	}
	return -1
}
