package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// Table properties the checkpoint and log cleanup read, with the protocol's
// defaults.
const (
	propDeletedFileRetention = "delta.deletedFileRetentionDuration"
	propLogRetention         = "delta.logRetentionDuration"
	propCheckpointInterval   = "delta.checkpointInterval"
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
	cutoff, err := tombstoneCutoff(snap, now)
	if err != nil {
		return fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	_, _, err = writeCheckpointCutoff(ctx, store, snap, cutoff)
	return err
}

// tombstoneCutoff is the deletion time (Unix ms) before which snap's
// tombstones have expired at now: delta.deletedFileRetentionDuration
// (default one week) earlier.
func tombstoneCutoff(snap *Snapshot, now time.Time) (int64, error) {
	retention, err := tableDuration(snap.Metadata.Configuration, propDeletedFileRetention, defaultDeletedFileRetention)
	if err != nil {
		return 0, err
	}
	return now.Add(-retention).UnixMilli(), nil
}

// writeCheckpointCutoff writes snap's checkpoint with the tombstones
// deleted at or after cutoff (checkpointActions). It returns the
// checkpoint's file and the number of removes it holds, for the writer's
// later snapshots to spill to (Snapshot.rebased).
func writeCheckpointCutoff(ctx context.Context, store storage.Storage, snap *Snapshot, cutoff int64) (path string, removes int, err error) {
	// The file is encoded straight into storage, a row group at a time
	// (storage.WriteFrom): a checkpoint holds every unexpired remove, so
	// at a week's retention it can be far larger than anything else the
	// writer holds.
	var nAdd, nRemove, rows int
	p := ckptClassicPath(snap.Version)
	size, err := storage.WriteFrom(ctx, store, p, true, func(w io.Writer) error {
		cw := newCkptWriter(w)
		var err error
		if nAdd, nRemove, err = checkpointRows(ctx, snap, cutoff, cw.add, cw.splice); err != nil {
			return err
		}
		if err := cw.finish(ctx, store); err != nil {
			return err
		}
		rows = cw.rows
		return nil
	})
	if err != nil && !errors.Is(err, storage.ErrExist) {
		return "", 0, fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	// The hint must never move back: a slow writer finishing the checkpoint
	// of an older version leaves a newer hint alone.
	cur, err := readLastCheckpoint(ctx, store)
	if err != nil {
		return "", 0, fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	if cur != nil && cur.Version > snap.Version {
		return p, nRemove, nil
	}
	adds := int64(nAdd)
	lc := &LastCheckpoint{Version: snap.Version, Size: int64(rows), SizeInBytes: &size, NumOfAddFiles: &adds}
	if err := writeLastCheckpoint(ctx, store, lc); err != nil {
		return "", 0, fmt.Errorf("write checkpoint %d: %w", snap.Version, err)
	}
	return p, nRemove, nil
}

// writeCheckpointOf is writeCheckpointCutoff for the table's writer:
// when the checkpoint snap reads its older removes from is gone (another
// writer's log cleanup deleted it), it writes from a fresh load of the
// same version instead, which reads them from a newer checkpoint. The
// writer's snapshots then rebase on the checkpoint written, so one such
// fallback heals them.
func (t *Table) writeCheckpointOf(ctx context.Context, snap *Snapshot, cutoff int64) (path string, removes int, err error) {
	path, removes, err = writeCheckpointCutoff(ctx, t.store, snap, cutoff)
	if err == nil || !errors.Is(err, errSpillGone) {
		return path, removes, err
	}
	fresh, lerr := t.load(ctx, snap.Version)
	if lerr != nil {
		return "", 0, fmt.Errorf("%w; reloading the version: %w", err, lerr)
	}
	return writeCheckpointCutoff(ctx, t.store, fresh, cutoff)
}

// checkpointRows hands emit the actions of a snapshot's checkpoint in
// order: protocol, metaData, (checkpointMetadata), txns and domains by
// name, adds by path, the tombstones held in memory by path, then those
// of the checkpoint the snapshot spilled to, read back as they come;
// only tombstones deleted at or after minDeletion (Unix ms). A row group
// of the spilled checkpoint whose removes are all kept goes to splice
// instead, when it is not nil and takes it (copied whole into the new
// checkpoint). It returns the number of adds and of removes.
func checkpointRows(ctx context.Context, snap *Snapshot, minDeletion int64, emit func(*Action) error, splice func(*ckptGroup) bool) (nAdd, nRemove int, err error) {
	p, m := snap.Protocol, snap.Metadata
	head := []Action{{Protocol: &p}, {Metadata: &m}}
	// A table with V2 checkpoints enabled may still use the classic name,
	// but then the file must say which version it is (V2 spec).
	if contains(p.WriterFeatures, FeatureV2Checkpoint) {
		head = append(head, Action{CheckpointMetadata: &CheckpointMetadata{Version: snap.Version}})
	}
	txns := snap.Txns()
	for _, id := range sortedKeys(txns) {
		t := txns[id]
		head = append(head, Action{Txn: &t})
	}
	domains := snap.Domains()
	for _, name := range sortedKeys(domains) {
		d := domains[name]
		head = append(head, Action{DomainMetadata: &d})
	}
	for i := range head {
		if err := emit(&head[i]); err != nil {
			return 0, 0, err
		}
	}
	for _, a := range snap.Files() {
		if err := emit(&Action{Add: a}); err != nil {
			return 0, 0, err
		}
		nAdd++
	}
	// A tombstone without a deletion time counts as deleted at the
	// epoch, as Spark reads it: expired.
	kept := func(r *Remove) bool {
		var ts int64
		if r.DeletionTimestamp != nil {
			ts = *r.DeletionTimestamp
		}
		return ts >= minDeletion
	}
	held := make([]*Remove, 0, snap.tombstones.len())
	snap.tombstones.each(func(_ FileKey, r *Remove) bool {
		held = append(held, r)
		return true
	})
	slices.SortFunc(held, func(a, b *Remove) int { return strings.Compare(a.Path, b.Path) })
	for _, r := range held {
		if kept(r) {
			if err := emit(&Action{Remove: r}); err != nil {
				return 0, 0, err
			}
			nRemove++
		}
	}
	if snap.spill == nil {
		return nAdd, nRemove, nil
	}
	var take func(*ckptGroup, []*Remove) bool
	if splice != nil {
		take = func(g *ckptGroup, keys []*Remove) bool {
			if slices.ContainsFunc(keys, func(r *Remove) bool { return !kept(r) }) || !splice(g) {
				return false
			}
			nRemove += len(keys)
			return true
		}
	}
	var emitErr error
	err = snap.rangeSpilledGroups(ctx, take, func(rms []*Remove) bool {
		for _, r := range rms {
			if kept(r) {
				if emitErr = emit(&Action{Remove: r}); emitErr != nil {
					return false
				}
				nRemove++
			}
		}
		return true
	})
	if err == nil {
		err = emitErr
	}
	return nAdd, nRemove, err
}

// ckptSchema is the checkpoint's Parquet schema, declared by the ckptRow
// types below.
var ckptSchema = parquet.SchemaOf(new(ckptRow))

// ckptLeaves is the number of leaf columns under each top-level column, in
// schema order: what a row of another action kind fills with nulls.
var ckptLeaves = func() map[string]int {
	var count func(n parquet.Node) int
	count = func(n parquet.Node) int {
		if n.Leaf() {
			return 1
		}
		c := 0
		for _, f := range n.Fields() {
			c += count(f)
		}
		return c
	}
	out := map[string]int{}
	for _, f := range ckptSchema.Fields() {
		out[f.Name()] = count(f)
	}
	return out
}()

// ckptRowGroup is the number of rows per row group of the checkpoints
// this package writes: parquet-go holds a row group's pages until it is
// flushed, and a spilled snapshot reads the removes back a row group at
// a time, so both stay bounded however many removes the checkpoint holds.
// A variable for the tests.
var ckptRowGroup = 65536

// ckptWriter encodes a Snappy-compressed (Spark's default codec, readable
// everywhere) Parquet checkpoint, one row per action, one action at a
// time, in row groups of ckptRowGroup rows, each written to its writer
// once complete.
//
// Values are built with their levels set by hand rather than through
// parquet-go's reflection writer, which allocates per map, pointer and
// value: 1.2M allocations for a 100k-file table against a few thousand
// here, in a process that keeps running pipelines while it checkpoints.
// TestEncodeCheckpointMatchesReflection keeps the two writers' output equal.
type ckptWriter struct {
	w       *parquet.Writer
	out     *ckptOut // what w writes to
	spliced []*ckptGroup
	e       ckptEncoder
	ncol    int
	rows    int  // rows added
	batched int  // rows in e.cols not yet handed to the column writers
	grouped int  // rows in the current row group
	removes bool // a remove was added: the rows are removes from here on
}

func newCkptWriter(w io.Writer) *ckptWriter {
	ncol := len(ckptSchema.Columns())
	cw := &ckptWriter{ncol: ncol, e: ckptEncoder{cols: make([][]parquet.Value, ncol), absent: ckptAbsent}, out: &ckptOut{w: w}}
	cw.w = parquet.NewWriter(cw.out, ckptSchema, parquet.Compression(&parquet.Snappy))
	return cw
}

// add encodes one action as a row.
func (cw *ckptWriter) add(a *Action) error {
	// The removes (which come last) start a row group of their own, so
	// that the next checkpoint can copy their full groups whole (splice)
	// rather than finding each beside the adds.
	if a.Remove != nil && !cw.removes {
		cw.removes = true
		if cw.grouped > 0 {
			if err := cw.flushBatch(); err != nil {
				return err
			}
			if err := cw.w.Flush(); err != nil {
				return fmt.Errorf("encode checkpoint: %w", err)
			}
			cw.grouped = 0
		}
	}
	cw.e.col = 0
	cw.e.action(a)
	if cw.e.col != cw.ncol {
		return fmt.Errorf("encode checkpoint: action %d filled %d of %d columns", cw.rows, cw.e.col, cw.ncol)
	}
	cw.rows++
	cw.batched++
	cw.grouped++
	// Values go straight into per-column batches, written a column at a
	// time: parquet-go's row path would split every row back into its 59
	// columns one value at a time.
	if cw.batched == 1024 || cw.grouped == ckptRowGroup {
		if err := cw.flushBatch(); err != nil {
			return err
		}
	}
	if cw.grouped == ckptRowGroup {
		if err := cw.w.Flush(); err != nil {
			return fmt.Errorf("encode checkpoint: %w", err)
		}
		cw.grouped = 0
	}
	return nil
}

func (cw *ckptWriter) flushBatch() error {
	for c, w := range cw.w.ColumnWriters() {
		if _, err := w.WriteRowValues(cw.e.cols[c]); err != nil {
			return fmt.Errorf("encode checkpoint: %w", err)
		}
		cw.e.cols[c] = cw.e.cols[c][:0]
	}
	cw.batched = 0
	return nil
}

// finish writes the last row group and the footer; with row groups to
// splice, it copies them after the encoded ones (finishSpliced).
func (cw *ckptWriter) finish(ctx context.Context, store storage.Storage) error {
	if err := cw.flushBatch(); err != nil {
		return err
	}
	if len(cw.spliced) > 0 {
		return cw.finishSpliced(ctx, store)
	}
	if err := cw.w.Close(); err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	return nil
}

// ckptEncoder encodes checkpoint rows into per-column value batches. Its
// methods append the value(s) of one leaf column of the current row and
// move to the next column; d is always the definition level at which the
// field's parent group is present, so a null field is written at d and a
// set one at d+1 (deeper for maps and lists).
type ckptEncoder struct {
	cols   [][]parquet.Value // values of the current batch, per leaf column
	col    int               // the leaf column of the current row being filled
	kvs    []ckptKV          // scratch for sorting map entries
	absent []parquet.Value   // ckptAbsent
}

// ckptAbsent holds, per leaf column, the null at definition level 0: the
// value of every leaf of an action kind a row is not (a remove row's
// add, metaData, protocol, txn... columns, most of its 59). Made once
// rather than levelled for every row.
var ckptAbsent = func() []parquet.Value {
	out := make([]parquet.Value, len(ckptSchema.Columns()))
	for c := range out {
		out[c] = parquet.NullValue().Level(0, 0, c)
	}
	return out
}()

func (e *ckptEncoder) put(v parquet.Value, rep, def int) {
	e.cols[e.col] = append(e.cols[e.col], v.Level(rep, def, e.col))
}

func (e *ckptEncoder) nulls(n, d int) {
	if d == 0 {
		for c := e.col; c < e.col+n; c++ {
			e.cols[c] = append(e.cols[c], e.absent[c])
		}
		e.col += n
		return
	}
	for i := 0; i < n; i++ {
		e.put(parquet.NullValue(), 0, d)
		e.col++
	}
}

// ckptBytes views a string's bytes without copying; parquet-go copies the
// value into its column buffer before WriteRows returns and never writes
// through it.
func ckptBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (e *ckptEncoder) str(s string, d int) {
	e.put(parquet.ByteArrayValue(ckptBytes(s)), 0, d+1)
	e.col++
}

// optStr writes "" (absent in the JSON form) as null.
func (e *ckptEncoder) optStr(s string, d int) {
	if s == "" {
		e.nulls(1, d)
		return
	}
	e.str(s, d)
}

func (e *ckptEncoder) i64(n int64, d int) {
	e.put(parquet.Int64Value(n), 0, d+1)
	e.col++
}

func (e *ckptEncoder) i64p(p *int64, d int) {
	if p == nil {
		e.nulls(1, d)
		return
	}
	e.i64(*p, d)
}

func (e *ckptEncoder) i32(n int32, d int) {
	e.put(parquet.Int32Value(n), 0, d+1)
	e.col++
}

func (e *ckptEncoder) boolean(b bool, d int) {
	e.put(parquet.BooleanValue(b), 0, d+1)
	e.col++
}

func (e *ckptEncoder) boolp(p *bool, d int) {
	if p == nil {
		e.nulls(1, d)
		return
	}
	e.boolean(*p, d)
}

// ckptKV is one map entry; val is nil for a null value.
type ckptKV struct {
	key string
	val *string
}

// entries returns m's entries sorted by key, in the encoder's scratch
// slice. Most maps here (partition values) have one entry: no sort then.
func (e *ckptEncoder) entries(m map[string]*string) []ckptKV {
	e.kvs = e.kvs[:0]
	for k, v := range m {
		e.kvs = append(e.kvs, ckptKV{k, v})
	}
	if len(e.kvs) > 1 {
		sort.Slice(e.kvs, func(i, j int) bool { return e.kvs[i].key < e.kvs[j].key })
	}
	return e.kvs
}

// plainEntries is entries for maps with non-null values.
func (e *ckptEncoder) plainEntries(m map[string]string) []ckptKV {
	e.kvs = e.kvs[:0]
	for k, v := range m {
		e.kvs = append(e.kvs, ckptKV{k, &v})
	}
	if len(e.kvs) > 1 {
		sort.Slice(e.kvs, func(i, j int) bool { return e.kvs[i].key < e.kvs[j].key })
	}
	return e.kvs
}

// nullableMap writes a map<string,string> with nullable values (key and
// value columns). A nil map is null when null is true, else empty.
func (e *ckptEncoder) nullableMap(m map[string]*string, d int, null bool) {
	if m == nil && null {
		e.nulls(2, d)
		return
	}
	if len(m) == 0 {
		e.nulls(2, d+1)
		return
	}
	e.mapEntries(e.entries(m), d)
}

func (e *ckptEncoder) mapEntries(kvs []ckptKV, d int) {
	for i, x := range kvs {
		e.put(parquet.ByteArrayValue(ckptBytes(x.key)), min(i, 1), d+2)
	}
	e.col++
	for i, x := range kvs {
		if x.val != nil {
			e.put(parquet.ByteArrayValue(ckptBytes(*x.val)), min(i, 1), d+3)
		} else {
			e.put(parquet.NullValue(), min(i, 1), d+2)
		}
	}
	e.col++
}

// plainMap is nullableMap for maps whose values are never null.
func (e *ckptEncoder) plainMap(m map[string]string, d int, null bool) {
	if m == nil && null {
		e.nulls(2, d)
		return
	}
	if len(m) == 0 {
		e.nulls(2, d+1)
		return
	}
	e.mapEntries(e.plainEntries(m), d)
}

// list writes a list<string>; a nil list is null when null is true, else
// empty.
func (e *ckptEncoder) list(l []string, d int, null bool) {
	switch {
	case l == nil && null:
		e.nulls(1, d)
	case len(l) == 0:
		e.nulls(1, d+1)
	default:
		for i, s := range l {
			e.put(parquet.ByteArrayValue(ckptBytes(s)), min(i, 1), d+3)
		}
		e.col++
	}
}

func (e *ckptEncoder) dv(v *DeletionVector, d int) {
	if v == nil {
		e.nulls(6, d)
		return
	}
	d++
	e.str(v.StorageType, d)
	e.str(v.PathOrInlineDv, d)
	if v.Offset != nil {
		e.i32(*v.Offset, d)
	} else {
		e.nulls(1, d)
	}
	e.i32(v.SizeInBytes, d)
	e.i64(v.Cardinality, d)
	e.i64p(v.MaxRowIndex, d)
}

// action writes one row: the action's own column group, nulls in the
// others, in the order the ckptRow fields declare.
func (e *ckptEncoder) action(a *Action) {
	if t := a.Txn; t != nil {
		e.str(t.AppID, 1)
		e.i64(t.Version, 1)
		e.i64p(t.LastUpdated, 1)
	} else {
		e.nulls(ckptLeaves["txn"], 0)
	}
	if f := a.Add; f != nil {
		e.str(f.Path, 1)
		e.nullableMap(f.PartitionValues, 1, false)
		e.i64(f.Size, 1)
		e.i64(f.ModificationTime, 1)
		e.boolean(false, 1) // a checkpoint changes no data
		e.plainMap(f.Tags, 1, true)
		e.dv(f.DeletionVector, 1)
		e.i64p(f.BaseRowID, 1)
		e.i64p(f.DefaultRowCommitVersion, 1)
		e.optStr(f.Stats, 1)
		e.optStr(f.ClusteringProvider, 1)
	} else {
		e.nulls(ckptLeaves["add"], 0)
	}
	if r := a.Remove; r != nil {
		e.str(r.Path, 1)
		e.i64p(r.DeletionTimestamp, 1)
		e.boolean(false, 1)
		e.boolp(r.ExtendedFileMetadata, 1)
		e.nullableMap(r.PartitionValues, 1, true)
		e.i64p(r.Size, 1)
		e.plainMap(r.Tags, 1, true)
		e.dv(r.DeletionVector, 1)
		e.i64p(r.BaseRowID, 1)
		e.i64p(r.DefaultRowCommitVersion, 1)
	} else {
		e.nulls(ckptLeaves["remove"], 0)
	}
	if m := a.Metadata; m != nil {
		e.str(m.ID, 1)
		e.optStr(m.Name, 1)
		e.optStr(m.Description, 1)
		e.str(m.Format.Provider, 2)
		e.plainMap(m.Format.Options, 2, false)
		e.str(m.SchemaString, 1)
		e.list(m.PartitionColumns, 1, false)
		e.plainMap(m.Configuration, 1, false)
		e.i64p(m.CreatedTime, 1)
	} else {
		e.nulls(ckptLeaves["metaData"], 0)
	}
	if p := a.Protocol; p != nil {
		e.i32(int32(p.MinReaderVersion), 1)
		e.i32(int32(p.MinWriterVersion), 1)
		// Absent, not empty, before table features (reader 3 / writer 7).
		e.list(p.ReaderFeatures, 1, true)
		e.list(p.WriterFeatures, 1, true)
	} else {
		e.nulls(ckptLeaves["protocol"], 0)
	}
	if dm := a.DomainMetadata; dm != nil {
		e.str(dm.Domain, 1)
		e.str(dm.Configuration, 1)
		e.boolean(dm.Removed, 1)
	} else {
		e.nulls(ckptLeaves["domainMetadata"], 0)
	}
	if cm := a.CheckpointMetadata; cm != nil {
		e.i64(cm.Version, 1)
		e.plainMap(cm.Tags, 1, true)
	} else {
		e.nulls(ckptLeaves["checkpointMetadata"], 0)
	}
}

// The ckpt* types below declare the checkpoint's Parquet schema as Spark
// writes it: one nullable struct column per action kind, every field
// nullable, maps as MAP key_value groups with nullable values and string
// lists as three-level LISTs with nullable elements. Only their types are
// used (ckptSchema); encodeCheckpoint fills the columns in the order the
// fields are declared here.
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
	Tags                    map[string]*string  `parquet:"tags,optional"`
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
	Tags                    map[string]*string  `parquet:"tags,optional"`
	DeletionVector          *ckptDeletionVector `parquet:"deletionVector"`
	BaseRowID               *int64              `parquet:"baseRowId"`
	DefaultRowCommitVersion *int64              `parquet:"defaultRowCommitVersion"`
}

type ckptFormat struct {
	Provider *string            `parquet:"provider"`
	Options  map[string]*string `parquet:"options,optional"`
}

type ckptMetadata struct {
	ID               *string            `parquet:"id"`
	Name             *string            `parquet:"name"`
	Description      *string            `parquet:"description"`
	Format           *ckptFormat        `parquet:"format"`
	SchemaString     *string            `parquet:"schemaString"`
	PartitionColumns []*string          `parquet:"partitionColumns,optional,list"`
	Configuration    map[string]*string `parquet:"configuration,optional"`
	CreatedTime      *int64             `parquet:"createdTime"`
}

type ckptProtocol struct {
	MinReaderVersion *int32    `parquet:"minReaderVersion"`
	MinWriterVersion *int32    `parquet:"minWriterVersion"`
	ReaderFeatures   []*string `parquet:"readerFeatures,optional,list"`
	WriterFeatures   []*string `parquet:"writerFeatures,optional,list"`
}

type ckptDomain struct {
	Domain        *string `parquet:"domain"`
	Configuration *string `parquet:"configuration"`
	Removed       *bool   `parquet:"removed"`
}

type ckptCheckpointMetadata struct {
	Version *int64             `parquet:"version"`
	Tags    map[string]*string `parquet:"tags,optional"`
}

// SettableProperties are the table properties a cdcapply pipeline may
// set on its tables (CheckTableProperty): the ones this package's writer
// honors and that enable no feature it does not write.
var SettableProperties = []string{propDeletedFileRetention, propLogRetention, propCheckpointInterval}

// CheckTableProperty says whether a pipeline may set key to value: a
// retention in Delta's interval syntax longer than zero, a checkpoint
// interval of at least one commit. Other properties may turn on what this
// writer does not do (appendOnly, change data feed, column mapping) and
// are refused.
func CheckTableProperty(key, value string) error {
	switch key {
	case propDeletedFileRetention, propLogRetention:
		d, err := parseInterval(value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if d <= 0 {
			return fmt.Errorf("%s: %q is not a positive interval", key, value)
		}
	case propCheckpointInterval:
		if n, err := strconv.ParseInt(value, 10, 64); err != nil || n < 1 {
			return fmt.Errorf("%s: %q is not a positive number of commits", key, value)
		}
	default:
		return fmt.Errorf("%s is not a property cdcapply sets (it sets %s)", key, strings.Join(SettableProperties, ", "))
	}
	return nil
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
