package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// Table properties the checkpoint and log cleanup read, with the protocol's
// defaults.
const (
	propDeletedFileRetention = "delta.deletedFileRetentionDuration"
	propLogRetention         = "delta.logRetentionDuration"
	propExpiredLogCleanup    = "delta.enableExpiredLogCleanup"

	defaultDeletedFileRetention = 7 * 24 * time.Hour
	defaultLogRetention         = 30 * 24 * time.Hour
)

// WriteCheckpoint writes a classic single-file Parquet checkpoint of snap,
// then _last_checkpoint.
//
// The checkpoint holds protocol, metaData, every txn (cdcapply's Kafka
// positions: they are never expired here, whatever
// delta.setTransactionRetentionDuration says, because dropping one would
// lose exactly-once), the live domainMetadata, every live add and the
// tombstones whose deletionTimestamp is within
// delta.deletedFileRetentionDuration (default one week).
//
// The file is created with put-if-absent: a checkpoint of a version is the
// same state whoever writes it, so finding one already there is success,
// and a reader never sees a half-written file.
func WriteCheckpoint(ctx context.Context, store storage.Storage, snap *Snapshot) error {
	return writeCheckpoint(ctx, store, snap, time.Now())
}

// writeCheckpoint is WriteCheckpoint with the clock that decides which
// tombstones have expired.
func writeCheckpoint(ctx context.Context, store storage.Storage, snap *Snapshot, now time.Time) error {
	retention, err := tableDuration(snap.Metadata.Configuration, propDeletedFileRetention, defaultDeletedFileRetention)
	if err != nil {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	rows, nAdd := checkpointRows(snap, now.Add(-retention).UnixMilli())
	data, err := encodeCheckpoint(rows)
	if err != nil {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	p := ckptClassicPath(snap.Version)
	if err := store.WriteIfAbsent(ctx, p, data); err != nil && !errors.Is(err, storage.ErrExist) {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	// The hint must never move back: a slow writer finishing the checkpoint
	// of an older version leaves a newer hint alone.
	cur, err := readLastCheckpoint(ctx, store)
	if err != nil {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	if cur != nil && cur.Version > snap.Version {
		return nil
	}
	size, adds := int64(len(data)), int64(nAdd)
	lc := &LastCheckpoint{Version: snap.Version, Size: int64(len(rows)), SizeInBytes: &size, NumOfAddFiles: &adds}
	if err := writeLastCheckpoint(ctx, store, lc); err != nil {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	return nil
}

// checkpointRows turns a snapshot into checkpoint rows, one action each:
// protocol, metaData, (checkpointMetadata), txns and domains by name, adds
// by path, then the tombstones deleted at or after minDeletion (Unix ms).
// It also returns the number of adds.
func checkpointRows(snap *Snapshot, minDeletion int64) ([]ckptRow, int) {
	files := snap.Files()
	tombs := snap.Tombstones()
	txns := snap.Txns()
	domains := snap.Domains()
	rows := make([]ckptRow, 0, 3+len(txns)+len(domains)+len(files)+len(tombs))

	p := snap.Protocol
	rv, wv := int32(p.MinReaderVersion), int32(p.MinWriterVersion)
	rows = append(rows, ckptRow{Protocol: &ckptProtocol{
		MinReaderVersion: &rv, MinWriterVersion: &wv,
		ReaderFeatures: p.ReaderFeatures, WriterFeatures: p.WriterFeatures,
	}})
	m := &snap.Metadata
	rows = append(rows, ckptRow{Metadata: &ckptMetadata{
		ID: &m.ID, Name: optStr(m.Name), Description: optStr(m.Description),
		Format:       &ckptFormat{Provider: &m.Format.Provider, Options: nonNilMap(m.Format.Options)},
		SchemaString: &m.SchemaString, PartitionColumns: nonNilSlice(m.PartitionColumns),
		Configuration: nonNilMap(m.Configuration), CreatedTime: m.CreatedTime,
	}})
	// A table with V2 checkpoints enabled may still use the classic name,
	// but then the file must say which version it is (V2 spec).
	if contains(p.WriterFeatures, "v2Checkpoint") {
		v := snap.Version
		rows = append(rows, ckptRow{CheckpointMetadata: &ckptCheckpointMetadata{Version: &v}})
	}
	for _, id := range sortedKeys(txns) {
		t := txns[id]
		rows = append(rows, ckptRow{Txn: &ckptTxn{AppID: &t.AppID, Version: &t.Version, LastUpdated: t.LastUpdated}})
	}
	for _, name := range sortedKeys(domains) {
		d := domains[name]
		rows = append(rows, ckptRow{DomainMetadata: &ckptDomain{Domain: &d.Domain, Configuration: &d.Configuration, Removed: &d.Removed}})
	}
	// One backing array for the adds: 100k small allocations would cost
	// more than the encoding.
	adds := make([]ckptAdd, len(files))
	for i, a := range files {
		adds[i] = ckptAdd{
			Path: &a.Path, PartitionValues: nonNilMap(a.PartitionValues), Size: &a.Size,
			ModificationTime: &a.ModificationTime, DataChange: &falseValue,
			Tags: a.Tags, DeletionVector: ckptDV(a.DeletionVector), BaseRowID: a.BaseRowID,
			DefaultRowCommitVersion: a.DefaultRowCommitVersion, Stats: optStr(a.Stats),
			ClusteringProvider: optStr(a.ClusteringProvider),
		}
		rows = append(rows, ckptRow{Add: &adds[i]})
	}
	for _, r := range tombs {
		// A tombstone without a deletion time counts as deleted at the
		// epoch, as Spark reads it: expired.
		var ts int64
		if r.DeletionTimestamp != nil {
			ts = *r.DeletionTimestamp
		}
		if ts < minDeletion {
			continue
		}
		rows = append(rows, ckptRow{Remove: &ckptRemove{
			Path: &r.Path, DeletionTimestamp: r.DeletionTimestamp, DataChange: &falseValue,
			ExtendedFileMetadata: r.ExtendedFileMetadata, PartitionValues: r.PartitionValues, Size: r.Size,
			Tags: r.Tags, DeletionVector: ckptDV(r.DeletionVector), BaseRowID: r.BaseRowID,
			DefaultRowCommitVersion: r.DefaultRowCommitVersion,
		}})
	}
	return rows, len(files)
}

// encodeCheckpoint writes rows as a Snappy-compressed Parquet file (Spark's
// default codec, readable everywhere).
func encodeCheckpoint(rows []ckptRow) ([]byte, error) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[ckptRow](&buf, parquet.Compression(&parquet.Snappy))
	if _, err := w.Write(rows); err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return buf.Bytes(), nil
}

// The ckpt* types below are the checkpoint's Parquet schema as Spark writes
// it: one nullable struct column per action kind, every field nullable, maps
// as MAP key_value groups and string lists as LIST. Pointers mark the
// nullable fields; parquet-go writes a nil pointer, map or slice as null.
// Values point into the snapshot's own actions, so building a row copies no
// strings.
type ckptRow struct {
	Txn                *ckptTxn                `parquet:"txn"`
	Add                *ckptAdd                `parquet:"add"`
	Remove             *ckptRemove             `parquet:"remove"`
	Metadata           *ckptMetadata           `parquet:"metaData"`
	Protocol           *ckptProtocol           `parquet:"protocol"`
	DomainMetadata     *ckptDomain             `parquet:"domainMetadata"`
	CheckpointMetadata *ckptCheckpointMetadata `parquet:"checkpointMetadata"`
}

type ckptTxn struct {
	AppID       *string `parquet:"appId"`
	Version     *int64  `parquet:"version"`
	LastUpdated *int64  `parquet:"lastUpdated"`
}

type ckptDeletionVector struct {
	StorageType    *string `parquet:"storageType"`
	PathOrInlineDv *string `parquet:"pathOrInlineDv"`
	Offset         *int32  `parquet:"offset"`
	SizeInBytes    *int32  `parquet:"sizeInBytes"`
	Cardinality    *int64  `parquet:"cardinality"`
	MaxRowIndex    *int64  `parquet:"maxRowIndex"`
}

type ckptAdd struct {
	Path                    *string             `parquet:"path"`
	PartitionValues         map[string]*string  `parquet:"partitionValues,optional"`
	Size                    *int64              `parquet:"size"`
	ModificationTime        *int64              `parquet:"modificationTime"`
	DataChange              *bool               `parquet:"dataChange"`
	Tags                    map[string]string   `parquet:"tags,optional"`
	DeletionVector          *ckptDeletionVector `parquet:"deletionVector"`
	BaseRowID               *int64              `parquet:"baseRowId"`
	DefaultRowCommitVersion *int64              `parquet:"defaultRowCommitVersion"`
	Stats                   *string             `parquet:"stats"`
	ClusteringProvider      *string             `parquet:"clusteringProvider"`
}

type ckptRemove struct {
	Path                    *string             `parquet:"path"`
	DeletionTimestamp       *int64              `parquet:"deletionTimestamp"`
	DataChange              *bool               `parquet:"dataChange"`
	ExtendedFileMetadata    *bool               `parquet:"extendedFileMetadata"`
	PartitionValues         map[string]*string  `parquet:"partitionValues,optional"`
	Size                    *int64              `parquet:"size"`
	Tags                    map[string]string   `parquet:"tags,optional"`
	DeletionVector          *ckptDeletionVector `parquet:"deletionVector"`
	BaseRowID               *int64              `parquet:"baseRowId"`
	DefaultRowCommitVersion *int64              `parquet:"defaultRowCommitVersion"`
}

type ckptFormat struct {
	Provider *string           `parquet:"provider"`
	Options  map[string]string `parquet:"options,optional"`
}

type ckptMetadata struct {
	ID               *string           `parquet:"id"`
	Name             *string           `parquet:"name"`
	Description      *string           `parquet:"description"`
	Format           *ckptFormat       `parquet:"format"`
	SchemaString     *string           `parquet:"schemaString"`
	PartitionColumns []string          `parquet:"partitionColumns,optional,list"`
	Configuration    map[string]string `parquet:"configuration,optional"`
	CreatedTime      *int64            `parquet:"createdTime"`
}

type ckptProtocol struct {
	MinReaderVersion *int32   `parquet:"minReaderVersion"`
	MinWriterVersion *int32   `parquet:"minWriterVersion"`
	ReaderFeatures   []string `parquet:"readerFeatures,optional,list"`
	WriterFeatures   []string `parquet:"writerFeatures,optional,list"`
}

type ckptDomain struct {
	Domain        *string `parquet:"domain"`
	Configuration *string `parquet:"configuration"`
	Removed       *bool   `parquet:"removed"`
}

type ckptCheckpointMetadata struct {
	Version *int64            `parquet:"version"`
	Tags    map[string]string `parquet:"tags,optional"`
}

// falseValue is what dataChange points at: a checkpoint changes no data.
var falseValue = false

func ckptDV(d *DeletionVector) *ckptDeletionVector {
	if d == nil {
		return nil
	}
	return &ckptDeletionVector{StorageType: &d.StorageType, PathOrInlineDv: &d.PathOrInlineDv, Offset: d.Offset,
		SizeInBytes: &d.SizeInBytes, Cardinality: &d.Cardinality, MaxRowIndex: d.MaxRowIndex}
}

// optStr maps "" (absent in the JSON form) to null.
func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nonNilMap returns m, or an empty map for nil: the protocol requires these
// maps, and readers treat a null one differently from an empty one.
func nonNilMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// tableDuration reads a duration table property in Delta's interval syntax
// ("interval 7 days", "interval 1 week", "interval 36 hours"), or returns
// def when the property is not set.
func tableDuration(conf map[string]string, key string, def time.Duration) (time.Duration, error) {
	s, ok := conf[key]
	if !ok {
		return def, nil
	}
	d, err := parseInterval(s)
	if err != nil {
		return 0, fmt.Errorf("read table property %s: %w", key, err)
	}
	return d, nil
}

// parseInterval parses Spark's calendar interval syntax as Delta uses it
// for retention properties: "interval" followed by number-unit pairs.
// Months and years have no fixed length and are refused, as Delta does.
func parseInterval(s string) (time.Duration, error) {
	f := strings.Fields(strings.ToLower(strings.TrimSpace(s)))
	if len(f) > 0 && f[0] == "interval" {
		f = f[1:]
	}
	if len(f) == 0 || len(f)%2 != 0 {
		return 0, fmt.Errorf("parse interval %q: want \"interval <n> <unit>...\"", s)
	}
	units := map[string]time.Duration{
		"nanosecond": time.Nanosecond, "microsecond": time.Microsecond, "millisecond": time.Millisecond,
		"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
	}
	var total time.Duration
	for i := 0; i < len(f); i += 2 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse interval %q: %w", s, err)
		}
		u, ok := units[strings.TrimSuffix(f[i+1], "s")]
		if !ok {
			return 0, fmt.Errorf("parse interval %q: unit %q not supported", s, f[i+1])
		}
		total += time.Duration(n) * u
	}
	if total < 0 {
		return 0, fmt.Errorf("parse interval %q: negative", s)
	}
	return total, nil
}
