package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Action is one line of a Delta commit file: exactly one of its fields is set.
// Unknown action kinds in files written by others are kept in Unknown so a
// reader can refuse or ignore them knowingly.
type Action struct {
	Protocol           *Protocol           `json:"protocol,omitempty"`
	Metadata           *Metadata           `json:"metaData,omitempty"`
	Add                *Add                `json:"add,omitempty"`
	Remove             *Remove             `json:"remove,omitempty"`
	Txn                *Txn                `json:"txn,omitempty"`
	CommitInfo         *CommitInfo         `json:"commitInfo,omitempty"`
	DomainMetadata     *DomainMetadata     `json:"domainMetadata,omitempty"`
	CDC                *CDC                `json:"cdc,omitempty"`
	CheckpointMetadata *CheckpointMetadata `json:"checkpointMetadata,omitempty"`
	Sidecar            *Sidecar            `json:"sidecar,omitempty"`
}

// Protocol is the protocol action: the reader and writer versions and, from
// reader 3 / writer 7, the named table features.
type Protocol struct {
	MinReaderVersion int      `json:"minReaderVersion"`
	MinWriterVersion int      `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

// Format is metaData.format.
type Format struct {
	Provider string            `json:"provider"`
	Options  map[string]string `json:"options"`
}

// Metadata is the metaData action.
type Metadata struct {
	ID               string            `json:"id"`
	Name             string            `json:"name,omitempty"`
	Description      string            `json:"description,omitempty"`
	Format           Format            `json:"format"`
	SchemaString     string            `json:"schemaString"`
	PartitionColumns []string          `json:"partitionColumns"`
	CreatedTime      *int64            `json:"createdTime,omitempty"`
	Configuration    map[string]string `json:"configuration"`
}

// Schema parses SchemaString.
func (m *Metadata) Schema() (StructType, error) { return ParseSchema(m.SchemaString) }

// MarshalJSON writes an unset partitionColumns, configuration or
// format.options as empty rather than null: the protocol requires them,
// and delta-rs refuses to load a commit whose partitionColumns is null
// (found by the interop test's time travel over an unpartitioned table).
func (m Metadata) MarshalJSON() ([]byte, error) {
	type plain Metadata // no methods: no recursion
	m.fillRequired()
	return json.Marshal(plain(m))
}

// fillRequired sets an unset partitionColumns, configuration or
// format.options to empty: the JSON form always has them.
func (m *Metadata) fillRequired() {
	if m.PartitionColumns == nil {
		m.PartitionColumns = []string{}
	}
	if m.Configuration == nil {
		m.Configuration = map[string]string{}
	}
	if m.Format.Options == nil {
		m.Format.Options = map[string]string{}
	}
}

// DeletionVector is the deletion vector descriptor of an add or remove.
type DeletionVector struct {
	// StorageType is "u" (relative path from a UUID), "i" (inline) or "p" (absolute path).
	StorageType    string `json:"storageType"`
	PathOrInlineDv string `json:"pathOrInlineDv"`
	Offset         *int32 `json:"offset,omitempty"`
	SizeInBytes    int32  `json:"sizeInBytes"`
	Cardinality    int64  `json:"cardinality"`
	MaxRowIndex    *int64 `json:"maxRowIndex,omitempty"`
}

// UniqueID identifies the deletion vector as the protocol defines it:
// storage type, path or inline data, and "@offset" when there is one.
func (d *DeletionVector) UniqueID() string {
	if d == nil {
		return ""
	}
	id := d.StorageType + d.PathOrInlineDv
	if d.Offset != nil {
		id += fmt.Sprintf("@%d", *d.Offset)
	}
	return id
}

// Add is the add action: a data file that is part of the table.
type Add struct {
	Path                    string             `json:"path"`
	PartitionValues         map[string]*string `json:"partitionValues"`
	Size                    int64              `json:"size"`
	ModificationTime        int64              `json:"modificationTime"`
	DataChange              bool               `json:"dataChange"`
	Stats                   string             `json:"stats,omitempty"`
	Tags                    map[string]string  `json:"tags,omitempty"`
	DeletionVector          *DeletionVector    `json:"deletionVector,omitempty"`
	BaseRowID               *int64             `json:"baseRowId,omitempty"`
	DefaultRowCommitVersion *int64             `json:"defaultRowCommitVersion,omitempty"`
	ClusteringProvider      string             `json:"clusteringProvider,omitempty"`
}

// Key is the file's identity for reconciliation: path and deletion vector id.
func (a *Add) Key() FileKey { return FileKey{Path: a.Path, DV: a.DeletionVector.UniqueID()} }

// Remove is the remove action: a logical file deletion (a tombstone of the log).
type Remove struct {
	Path                    string             `json:"path"`
	DeletionTimestamp       *int64             `json:"deletionTimestamp,omitempty"`
	DataChange              bool               `json:"dataChange"`
	ExtendedFileMetadata    *bool              `json:"extendedFileMetadata,omitempty"`
	PartitionValues         map[string]*string `json:"partitionValues,omitempty"`
	Size                    *int64             `json:"size,omitempty"`
	Stats                   string             `json:"stats,omitempty"`
	Tags                    map[string]string  `json:"tags,omitempty"`
	DeletionVector          *DeletionVector    `json:"deletionVector,omitempty"`
	BaseRowID               *int64             `json:"baseRowId,omitempty"`
	DefaultRowCommitVersion *int64             `json:"defaultRowCommitVersion,omitempty"`
}

// Key is the file's identity for reconciliation: path and deletion vector id.
func (r *Remove) Key() FileKey { return FileKey{Path: r.Path, DV: r.DeletionVector.UniqueID()} }

// FileKey is the (path, deletion vector id) pair add and remove reconcile on.
type FileKey struct {
	Path string
	DV   string
}

// Txn is the application transaction action: the latest version of an
// application (for cdcapply, one Kafka topic-partition) committed to the table.
type Txn struct {
	AppID       string `json:"appId"`
	Version     int64  `json:"version"`
	LastUpdated *int64 `json:"lastUpdated,omitempty"`
}

// DomainMetadata is the domainMetadata action.
type DomainMetadata struct {
	Domain        string `json:"domain"`
	Configuration string `json:"configuration"`
	Removed       bool   `json:"removed"`
}

// CDC is the cdc action: a change data file, read and carried, never applied.
type CDC struct {
	Path            string             `json:"path"`
	PartitionValues map[string]*string `json:"partitionValues"`
	Size            int64              `json:"size"`
	DataChange      bool               `json:"dataChange"`
	Tags            map[string]string  `json:"tags,omitempty"`
}

// CheckpointMetadata is the checkpointMetadata action of a V2 checkpoint.
type CheckpointMetadata struct {
	Version int64             `json:"version"`
	Tags    map[string]string `json:"tags,omitempty"`
}

// Sidecar is the sidecar action of a V2 checkpoint.
type Sidecar struct {
	Path             string            `json:"path"`
	SizeInBytes      int64             `json:"sizeInBytes"`
	ModificationTime int64             `json:"modificationTime"`
	Tags             map[string]string `json:"tags,omitempty"`
}

// CommitInfo is the commitInfo action. The protocol leaves its content open;
// the fields below are the ones cdcapply writes and reads, Other keeps the
// rest of what other writers put there.
type CommitInfo struct {
	Timestamp           int64          `json:"timestamp"`
	InCommitTimestamp   *int64         `json:"inCommitTimestamp,omitempty"`
	Operation           string         `json:"operation"`
	OperationParameters map[string]any `json:"operationParameters,omitempty"`
	ReadVersion         *int64         `json:"readVersion,omitempty"`
	IsolationLevel      string         `json:"isolationLevel,omitempty"`
	IsBlindAppend       *bool          `json:"isBlindAppend,omitempty"`
	OperationMetrics    map[string]any `json:"operationMetrics,omitempty"`
	EngineInfo          string         `json:"engineInfo,omitempty"`
	TxnID               string         `json:"txnId,omitempty"`
	// Other holds keys not named above, written back as they were.
	Other map[string]json.RawMessage `json:"-"`
}

type commitInfoAlias CommitInfo

var commitInfoKeys = map[string]bool{"timestamp": true, "inCommitTimestamp": true, "operation": true,
	"operationParameters": true, "readVersion": true, "isolationLevel": true, "isBlindAppend": true,
	"operationMetrics": true, "engineInfo": true, "txnId": true}

// MarshalJSON writes the named fields, then Other.
func (c CommitInfo) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(commitInfoAlias(c))
	if err != nil || len(c.Other) == 0 {
		return b, err
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	for _, k := range sortedKeys(c.Other) {
		if commitInfoKeys[k] {
			continue
		}
		kb, _ := json.Marshal(k)
		buf.WriteByte(',')
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(c.Other[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the named fields and keeps the rest in Other.
func (c *CommitInfo) UnmarshalJSON(b []byte) error {
	var a commitInfoAlias
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for k := range commitInfoKeys {
		delete(all, k)
	}
	if len(all) > 0 {
		a.Other = all
	}
	*c = CommitInfo(a)
	return nil
}

// ParseActions parses a newline-delimited JSON commit file. Blank lines are
// skipped; a line that is not valid JSON is an error naming the line.
func ParseActions(data []byte) ([]Action, error) {
	var out []Action
	line := 0
	for len(data) > 0 {
		line++
		i := bytes.IndexByte(data, '\n')
		var l []byte
		if i < 0 {
			l, data = data, nil
		} else {
			l, data = data[:i], data[i+1:]
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		var a Action
		if err := json.Unmarshal(l, &a); err != nil {
			return nil, fmt.Errorf("parse action on line %d: %w", line, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// EncodeActions writes actions as newline-delimited JSON.
func EncodeActions(actions []Action) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range actions {
		if err := enc.Encode(&actions[i]); err != nil {
			return nil, fmt.Errorf("encode action %d: %w", i, err)
		}
	}
	return buf.Bytes(), nil
}

// EncodePath turns a slash-separated relative file path into the
// percent-encoded URI form add.path and remove.path carry.
func EncodePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// DecodePath turns an action's path URI into a path relative to the table
// root. Absolute URIs (file:///..., s3://...) are returned as such with
// abs=true; the caller decides whether it can reach them.
func DecodePath(uri string) (p string, abs bool, err error) {
	if i := strings.Index(uri, ":"); i > 0 && !strings.Contains(uri[:i], "/") {
		u, err := url.Parse(uri)
		if err != nil {
			return "", false, fmt.Errorf("decode path %q: %w", uri, err)
		}
		if u.Scheme == "file" {
			return u.Path, true, nil
		}
		return uri, true, nil
	}
	s, err := url.PathUnescape(uri)
	if err != nil {
		return "", false, fmt.Errorf("decode path %q: %w", uri, err)
	}
	return s, false, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
