package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
)

// ckptCommit writes actions as commit v with put-if-absent, as a writer would.
func ckptCommit(t testing.TB, store storage.Storage, v int64, acts ...Action) {
	t.Helper()
	data, err := EncodeActions(acts)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteIfAbsent(context.Background(), fmt.Sprintf("%s/%020d.json", LogDir, v), data); err != nil {
		t.Fatal(err)
	}
}

func ckptStr(s string) *string { return &s }

// ckptRow is one row of the test tables' data files.
type ckptDataRow struct {
	ID   int64  `parquet:"id"`
	Name string `parquet:"name"`
}

// ckptDataFile writes a small Parquet data file with ids [from, from+n) and
// returns its add action (stats included, as a writer would give them).
func ckptDataFile(t testing.TB, dir, rel string, part *string, from, n int64, mtime int64) *Add {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[ckptDataRow](&buf)
	rows := make([]ckptDataRow, n)
	for i := range rows {
		rows[i] = ckptDataRow{ID: from + int64(i), Name: fmt.Sprintf("name-%d", from+int64(i))}
	}
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	stats := fmt.Sprintf(`{"numRecords":%d,"minValues":{"id":%d},"maxValues":{"id":%d},"nullCount":{"id":0}}`, n, from, from+n-1)
	return &Add{Path: EncodePath(rel), PartitionValues: map[string]*string{"p": part}, Size: int64(buf.Len()),
		ModificationTime: mtime, DataChange: true, Stats: stats}
}

const ckptTestSchema = `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},` +
	`{"name":"name","type":"string","nullable":true,"metadata":{}},{"name":"p","type":"string","nullable":true,"metadata":{}}]}`

// ckptBuildTable writes a partitioned table over several commits: adds
// (one with a null partition value, one with a space in its path), two
// apps' txns updated over time, a domain set then removed and another
// kept, and removes, one deleted long ago. It returns the table directory
// and its last version.
func ckptBuildTable(t testing.TB, now time.Time) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	ms := now.UnixMilli()
	created := ms - 1000
	ckptCommit(t, store, 0,
		Action{CommitInfo: &CommitInfo{Timestamp: ms, Operation: "CREATE TABLE"}},
		Action{Protocol: &Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"domainMetadata"}}},
		Action{Metadata: &Metadata{ID: "c0ffee00-0000-4000-8000-000000000001", Name: "orders", Format: Format{Provider: "parquet", Options: map[string]string{}},
			SchemaString: ckptTestSchema, PartitionColumns: []string{"p"}, CreatedTime: &created,
			Configuration: map[string]string{"delta.checkpointInterval": "100", "delta.deletedFileRetentionDuration": "interval 2 days"}}},
	)
	var id int64
	v := int64(1)
	for ; v <= 6; v++ {
		part := ckptStr(fmt.Sprintf("p%d", v%3))
		if v == 4 {
			part = nil
		}
		rel := fmt.Sprintf("p=%s/part-%05d.parquet", deref(part, "__HIVE_DEFAULT_PARTITION__"), v)
		if v == 5 {
			rel = fmt.Sprintf("p=p2/part %05d with space.parquet", v)
		}
		add := ckptDataFile(t, dir, rel, part, id, 10, ms-int64(10-v)*1000)
		id += 10
		lu := ms - int64(10-v)
		ckptCommit(t, store, v,
			Action{CommitInfo: &CommitInfo{Timestamp: ms, Operation: "WRITE"}},
			Action{Add: add},
			Action{Txn: &Txn{AppID: fmt.Sprintf("topic-%d", v%2), Version: v * 100, LastUpdated: &lu}},
		)
	}
	ckptCommit(t, store, v,
		Action{DomainMetadata: &DomainMetadata{Domain: "cdcapply.kept", Configuration: `{"a":1}`}},
		Action{DomainMetadata: &DomainMetadata{Domain: "cdcapply.gone", Configuration: `{}`}},
	)
	v++
	ckptCommit(t, store, v, Action{DomainMetadata: &DomainMetadata{Domain: "cdcapply.gone", Configuration: `{}`, Removed: true}})
	v++
	recent := ms - int64(time.Hour/time.Millisecond)
	old := ms - int64(3*24*time.Hour/time.Millisecond)
	size := int64(100)
	ckptCommit(t, store, v,
		Action{Remove: &Remove{Path: "p=p1/part-00001.parquet", DeletionTimestamp: &recent, DataChange: true,
			PartitionValues: map[string]*string{"p": ckptStr("p1")}, Size: &size}},
		Action{Remove: &Remove{Path: "p=p2/part-00002.parquet", DeletionTimestamp: &old, DataChange: true}},
	)
	return dir, v
}

func deref(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// ckptLoad loads the latest snapshot through the package's own replay.
func ckptLoad(t testing.TB, dir string) *Snapshot {
	t.Helper()
	snap, err := Open(storage.NewLocal(dir)).Snapshot(context.Background())
	if err != nil {
		t.Fatalf("load snapshot: %v", err)
	}
	return snap
}

func TestWriteCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	dir, last := ckptBuildTable(t, now)
	store := storage.NewLocal(dir)
	snap := ckptLoad(t, dir)
	if err := writeCheckpoint(ctx, store, snap, now); err != nil {
		t.Fatalf("writeCheckpoint: %v", err)
	}

	acts, err := readCheckpoint(ctx, store, last, []string{ckptClassicPath(last)})
	if err != nil {
		t.Fatalf("readCheckpoint: %v", err)
	}
	got := newCkptState()
	got.apply(acts)

	// Every live file comes back as it was, with dataChange false.
	// Six adds, two of them removed.
	if len(got.files) != snap.NumFiles() || snap.NumFiles() != 4 {
		t.Fatalf("checkpoint has %d files, snapshot %d (want 4)", len(got.files), snap.NumFiles())
	}
	for _, want := range snap.Files() {
		g := got.files[want.Key()]
		w := *want
		w.DataChange = false
		if g == nil || !reflect.DeepEqual(*g, w) {
			t.Errorf("file %s:\ncheckpoint %+v\nsnapshot   %+v", want.Path, g, w)
		}
	}
	// Only the tombstone inside the 2-day retention is kept.
	if len(got.tombstones) != 1 {
		t.Errorf("tombstones %v, want only p=p1/part-00001.parquet", got.tombstones)
	}
	for k, r := range got.tombstones {
		if k.Path != "p=p1/part-00001.parquet" || r.Size == nil || *r.Size != 100 || *r.PartitionValues["p"] != "p1" {
			t.Errorf("tombstone %+v", r)
		}
	}
	if !reflect.DeepEqual(got.txns, snap.Txns()) || len(got.txns) != 2 {
		t.Errorf("txns: checkpoint %v, snapshot %v", got.txns, snap.Txns())
	}
	if !reflect.DeepEqual(got.domains, snap.Domains()) || len(got.domains) != 1 {
		t.Errorf("domains: checkpoint %v, snapshot %v", got.domains, snap.Domains())
	}
	if !reflect.DeepEqual(*got.protocol, snap.Protocol) {
		t.Errorf("protocol: checkpoint %+v, snapshot %+v", *got.protocol, snap.Protocol)
	}
	if !reflect.DeepEqual(*got.metadata, snap.Metadata) {
		t.Errorf("metadata:\ncheckpoint %+v\nsnapshot   %+v", *got.metadata, snap.Metadata)
	}

	lc, err := readLastCheckpoint(ctx, store)
	if err != nil || lc == nil {
		t.Fatalf("readLastCheckpoint: %+v, %v", lc, err)
	}
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ckptClassicPath(last))))
	if err != nil {
		t.Fatal(err)
	}
	if lc.Version != last || lc.Size != int64(len(acts)) || *lc.NumOfAddFiles != 4 || *lc.SizeInBytes != info.Size() || lc.Parts != nil {
		t.Errorf("_last_checkpoint %+v; want version %d size %d adds 4 bytes %d", lc, last, len(acts), info.Size())
	}

	// With the commits before it gone, replay starts from the checkpoint
	// and yields the same state.
	for v := int64(0); v < last; v++ {
		if err := store.Delete(ctx, fmt.Sprintf("%s/%020d.json", LogDir, v)); err != nil {
			t.Fatal(err)
		}
	}
	again := ckptLoad(t, dir)
	if again.CheckpointVersion() != last || again.Version != last {
		t.Fatalf("reloaded at version %d from checkpoint %d", again.Version, again.CheckpointVersion())
	}
	if !reflect.DeepEqual(ckptPaths(again.Files()), ckptPaths(snap.Files())) || !reflect.DeepEqual(again.Txns(), snap.Txns()) {
		t.Errorf("reloaded state differs")
	}
}

func ckptPaths(files []*Add) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// TestWriteCheckpointHintNeverMovesBack: an older checkpoint finished late
// leaves the newer _last_checkpoint alone, and a second write of the same
// version is not an error.
func TestWriteCheckpointHintNeverMovesBack(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	dir, last := ckptBuildTable(t, now)
	store := storage.NewLocal(dir)
	older, err := Open(store).SnapshotAt(ctx, last-1)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(ctx, store, ckptLoad(t, dir), now); err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(ctx, store, older, now); err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(ctx, store, ckptLoad(t, dir), now); err != nil {
		t.Fatalf("rewrite of an existing checkpoint: %v", err)
	}
	lc, err := readLastCheckpoint(ctx, store)
	if err != nil || lc == nil || lc.Version != last {
		t.Fatalf("_last_checkpoint %+v, %v; want version %d", lc, err, last)
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ckptClassicPath(last-1)))); err != nil {
		t.Fatalf("older checkpoint not written: %v", err)
	}
}

// TestWriteCheckpointCrash: a failure at any storage operation of
// WriteCheckpoint leaves a table that loads to the same state (the
// checkpoint is either whole or absent, the hint at worst stale).
func TestWriteCheckpointCrash(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	dir, last := ckptBuildTable(t, now)
	want := ckptLoad(t, dir)
	for op := 1; ; op++ {
		crashed := false
		for _, after := range []bool{false, true} {
			work := ckptCopyTable(t, dir)
			f := storage.NewFaulty(storage.NewLocal(work))
			f.CrashAt(op, after)
			err := writeCheckpoint(ctx, f, want, now)
			if f.Crashed() {
				crashed = true
				if err == nil {
					t.Fatalf("crash at op %d (after=%v) not reported", op, after)
				}
			}
			got := ckptLoad(t, work)
			if got.Version != last || !reflect.DeepEqual(ckptPaths(got.Files()), ckptPaths(want.Files())) || !reflect.DeepEqual(got.Txns(), want.Txns()) {
				t.Fatalf("crash at op %d (after=%v): loaded version %d with %d files", op, after, got.Version, got.NumFiles())
			}
		}
		if !crashed {
			if op < 4 {
				t.Fatalf("only %d storage ops; expected write, read hint, write hint", op-1)
			}
			break
		}
	}
}

func TestParseInterval(t *testing.T) {
	cases := map[string]time.Duration{
		"interval 1 week":          7 * 24 * time.Hour,
		"interval 30 days":         30 * 24 * time.Hour,
		"INTERVAL 2 Hours":         2 * time.Hour,
		"interval 1 day 12 hours":  36 * time.Hour,
		"7 days":                   7 * 24 * time.Hour,
		"interval 0 seconds":       0,
		"interval 90 milliseconds": 90 * time.Millisecond,
	}
	for in, want := range cases {
		got, err := parseInterval(in)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "interval", "interval 1 month", "interval x days", "interval -1 days", "interval 1"} {
		if _, err := parseInterval(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

const ckptDeltaRSScript = `
import json, sys
import pyarrow as pa
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
p = dt.protocol()
m = dt.metadata()
out = {
  "version": dt.version(),
  "files": sorted(a["path"] for a in adds),
  "numRecords": sum(a["num_records"] for a in adds),
  "partitions": sorted("%s=%s" % (a["path"], a.get("partition.p")) for a in adds),
  "txns": {app: dt.transaction_version(app) for app in sys.argv[2:]},
  "rows": dt.to_pyarrow_table().num_rows,
  "protocol": [p.min_reader_version, p.min_writer_version, sorted(p.writer_features or [])],
  "id": m.id, "partitionColumns": m.partition_columns, "configuration": m.configuration,
}
print(json.dumps(out))
# Leave without interpreter teardown: native thread pools (pyarrow, the
# Rust runtime) have been seen to abort the process while shutting down.
sys.stdout.flush()
import os
os._exit(0)
`

// TestWriteCheckpointReadByDeltaRS: delta-rs rebuilds the table from our
// checkpoint alone (every commit before it deleted) plus one later commit,
// and sees our files, partition values, app transactions and metadata.
func TestWriteCheckpointReadByDeltaRS(t *testing.T) {
	py := pyenv.Python(t)
	ctx := context.Background()
	now := time.Now()
	dir, last := ckptBuildTable(t, now)
	store := storage.NewLocal(dir)
	if err := writeCheckpoint(ctx, store, ckptLoad(t, dir), now); err != nil {
		t.Fatal(err)
	}
	for v := int64(0); v < last; v++ {
		if err := store.Delete(ctx, fmt.Sprintf("%s/%020d.json", LogDir, v)); err != nil {
			t.Fatal(err)
		}
	}
	// One commit after the checkpoint: delta-rs must combine the two.
	add := ckptDataFile(t, dir, "p=p0/part-after.parquet", ckptStr("p0"), 1000, 7, now.UnixMilli())
	lu := now.UnixMilli()
	ckptCommit(t, store, last+1, Action{Add: add}, Action{Txn: &Txn{AppID: "topic-0", Version: 9999, LastUpdated: &lu}})
	want := ckptLoad(t, dir)
	if want.CheckpointVersion() != last {
		t.Fatalf("our replay did not start from the checkpoint: %d", want.CheckpointVersion())
	}

	apps := []string{"topic-0", "topic-1", "topic-none"}
	cmd := exec.Command(py, append([]string{"-c", ckptDeltaRSScript, dir}, apps...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deltalake: %v\n%s", err, stderr.String())
	}
	var rs struct {
		Version          int64             `json:"version"`
		Files            []string          `json:"files"`
		NumRecords       int64             `json:"numRecords"`
		Partitions       []string          `json:"partitions"`
		Txns             map[string]*int64 `json:"txns"`
		Rows             int64             `json:"rows"`
		Protocol         []any             `json:"protocol"`
		ID               string            `json:"id"`
		PartitionColumns []string          `json:"partitionColumns"`
		Configuration    map[string]string `json:"configuration"`
	}
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("parse deltalake output %s: %v", out, err)
	}

	if rs.Version != want.Version {
		t.Errorf("version: delta-rs %d, ours %d", rs.Version, want.Version)
	}
	var files, parts []string
	var records int64
	for _, f := range want.Files() {
		// delta-rs reports add.path as stored: percent-encoded.
		p := f.Path
		files = append(files, p)
		parts = append(parts, fmt.Sprintf("%s=%s", p, deref(f.PartitionValues["p"], "None")))
		var st struct{ NumRecords int64 }
		if err := json.Unmarshal([]byte(f.Stats), &st); err != nil {
			t.Fatal(err)
		}
		records += st.NumRecords
	}
	sort.Strings(files)
	sort.Strings(parts)
	if !reflect.DeepEqual(rs.Files, files) {
		t.Errorf("files:\ndelta-rs %v\nours     %v", rs.Files, files)
	}
	if !reflect.DeepEqual(rs.Partitions, parts) {
		t.Errorf("partition values:\ndelta-rs %v\nours     %v", rs.Partitions, parts)
	}
	if rs.NumRecords != records || rs.Rows != records || records != 4*10+7 {
		t.Errorf("records: delta-rs stats %d, rows read %d, ours %d", rs.NumRecords, rs.Rows, records)
	}
	for _, app := range apps {
		ours, ok := want.Txn(app)
		theirs := rs.Txns[app]
		if ok != (theirs != nil) || ok && ours.Version != *theirs {
			t.Errorf("txn %s: delta-rs %v, ours %+v (%v)", app, theirs, ours, ok)
		}
	}
	if fmt.Sprint(rs.Protocol) != "[1 7 [domainMetadata]]" {
		t.Errorf("protocol: delta-rs %v", rs.Protocol)
	}
	if rs.ID != want.Metadata.ID || !reflect.DeepEqual(rs.PartitionColumns, want.Metadata.PartitionColumns) ||
		!reflect.DeepEqual(rs.Configuration, want.Metadata.Configuration) {
		t.Errorf("metadata: delta-rs %s %v %v, ours %+v", rs.ID, rs.PartitionColumns, rs.Configuration, want.Metadata)
	}
	if !strings.Contains(string(out), "topic-1") {
		t.Errorf("output lacks the apps asked for: %s", out)
	}
}

// TestWriteCheckpointAllFields round-trips every add and remove field the
// checkpoint schema carries (deletion vectors inline and by path, tags, row
// tracking fields, clustering provider, extendedFileMetadata) through the
// writer and the reader.
func TestWriteCheckpointAllFields(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	ms := now.UnixMilli()
	off := int32(1)
	maxRow := int64(99)
	base, drcv := int64(1000), int64(3)
	size := int64(12)
	ext := true
	ckptCommit(t, store, 0,
		Action{Protocol: &Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
			ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors"}}},
		Action{Metadata: &Metadata{ID: "all-fields", Format: Format{Provider: "parquet", Options: map[string]string{"k": "v"}},
			SchemaString: ckptTestSchema, PartitionColumns: []string{}, Configuration: map[string]string{}}},
	)
	ckptCommit(t, store, 1,
		Action{Add: &Add{Path: "a.parquet", PartitionValues: map[string]*string{}, Size: 10, ModificationTime: ms, DataChange: true,
			Tags:           map[string]string{"INSERTION_TIME": "1", "empty": ""},
			DeletionVector: &DeletionVector{StorageType: "u", PathOrInlineDv: "ab^-aqEH.-t@S}K{vb[*k^", Offset: &off, SizeInBytes: 36, Cardinality: 2, MaxRowIndex: &maxRow},
			BaseRowID:      &base, DefaultRowCommitVersion: &drcv, ClusteringProvider: "liquid"}},
		Action{Add: &Add{Path: "b.parquet", PartitionValues: map[string]*string{}, Size: 11, ModificationTime: ms, DataChange: true,
			DeletionVector: &DeletionVector{StorageType: "i", PathOrInlineDv: "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", SizeInBytes: 40, Cardinality: 6}}},
		Action{Add: &Add{Path: "c.parquet", PartitionValues: map[string]*string{}, Size: 12, ModificationTime: ms, DataChange: true}},
	)
	ckptCommit(t, store, 2,
		Action{Remove: &Remove{Path: "c.parquet", DeletionTimestamp: &ms, DataChange: true, ExtendedFileMetadata: &ext,
			PartitionValues: map[string]*string{}, Size: &size, Tags: map[string]string{"t": "1"}, BaseRowID: &base, DefaultRowCommitVersion: &drcv}},
	)
	snap := ckptLoad(t, dir)
	if err := writeCheckpoint(ctx, store, snap, now); err != nil {
		t.Fatal(err)
	}
	acts, err := readCheckpoint(ctx, store, 2, []string{ckptClassicPath(2)})
	if err != nil {
		t.Fatal(err)
	}
	got := newCkptState()
	got.apply(acts)
	for _, want := range snap.Files() {
		w := *want
		w.DataChange = false
		if g := got.files[want.Key()]; g == nil || !reflect.DeepEqual(*g, w) {
			t.Errorf("add %s:\ncheckpoint %+v\nsnapshot   %+v", want.Path, g, w)
		}
	}
	if len(got.files) != 2 {
		t.Errorf("%d files, want 2", len(got.files))
	}
	for _, want := range tombstonesOf(t, snap) {
		w := *want
		w.DataChange = false
		if g := got.tombstones[want.Key()]; g == nil || !reflect.DeepEqual(*g, w) {
			t.Errorf("remove %s:\ncheckpoint %+v\nsnapshot   %+v", want.Path, g, w)
		}
	}
	if len(got.tombstones) != 1 || !reflect.DeepEqual(*got.protocol, snap.Protocol) || !reflect.DeepEqual(*got.metadata, snap.Metadata) {
		t.Errorf("tombstones %d, protocol %+v, metadata %+v", len(got.tombstones), *got.protocol, *got.metadata)
	}
}

// ckptRowOf is the reference mapping of an action to the checkpoint's
// Parquet row for parquet-go's reflection writer: what encodeCheckpoint
// does by hand, written the obvious way.
func ckptRowOf(a Action) ckptRow {
	f := false
	sp := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	pm := func(m map[string]string, empty bool) map[string]*string {
		if m == nil && !empty {
			return nil
		}
		out := map[string]*string{}
		for k, v := range m {
			v := v
			out[k] = &v
		}
		return out
	}
	pl := func(l []string, empty bool) []*string {
		if l == nil && !empty {
			return nil
		}
		out := []*string{}
		for _, s := range l {
			s := s
			out = append(out, &s)
		}
		return out
	}
	dv := func(d *DeletionVector) *ckptDeletionVector {
		if d == nil {
			return nil
		}
		return &ckptDeletionVector{StorageType: &d.StorageType, PathOrInlineDv: &d.PathOrInlineDv, Offset: d.Offset,
			SizeInBytes: &d.SizeInBytes, Cardinality: &d.Cardinality, MaxRowIndex: d.MaxRowIndex}
	}
	var r ckptRow
	switch {
	case a.Txn != nil:
		t := a.Txn
		r.Txn = &ckptTxn{AppID: &t.AppID, Version: &t.Version, LastUpdated: t.LastUpdated}
	case a.Add != nil:
		x := a.Add
		pv := x.PartitionValues
		if pv == nil {
			pv = map[string]*string{}
		}
		r.Add = &ckptAdd{Path: &x.Path, PartitionValues: pv, Size: &x.Size, ModificationTime: &x.ModificationTime,
			DataChange: &f, Tags: pm(x.Tags, false), DeletionVector: dv(x.DeletionVector), BaseRowID: x.BaseRowID,
			DefaultRowCommitVersion: x.DefaultRowCommitVersion, Stats: sp(x.Stats), ClusteringProvider: sp(x.ClusteringProvider)}
	case a.Remove != nil:
		x := a.Remove
		r.Remove = &ckptRemove{Path: &x.Path, DeletionTimestamp: x.DeletionTimestamp, DataChange: &f,
			ExtendedFileMetadata: x.ExtendedFileMetadata, PartitionValues: x.PartitionValues, Size: x.Size,
			Tags: pm(x.Tags, false), DeletionVector: dv(x.DeletionVector), BaseRowID: x.BaseRowID,
			DefaultRowCommitVersion: x.DefaultRowCommitVersion}
	case a.Metadata != nil:
		m := a.Metadata
		r.Metadata = &ckptMetadata{ID: &m.ID, Name: sp(m.Name), Description: sp(m.Description),
			Format:       &ckptFormat{Provider: &m.Format.Provider, Options: pm(m.Format.Options, true)},
			SchemaString: &m.SchemaString, PartitionColumns: pl(m.PartitionColumns, true),
			Configuration: pm(m.Configuration, true), CreatedTime: m.CreatedTime}
	case a.Protocol != nil:
		p := a.Protocol
		rv, wv := int32(p.MinReaderVersion), int32(p.MinWriterVersion)
		r.Protocol = &ckptProtocol{MinReaderVersion: &rv, MinWriterVersion: &wv,
			ReaderFeatures: pl(p.ReaderFeatures, false), WriterFeatures: pl(p.WriterFeatures, false)}
	case a.DomainMetadata != nil:
		d := a.DomainMetadata
		r.DomainMetadata = &ckptDomain{Domain: &d.Domain, Configuration: &d.Configuration, Removed: &d.Removed}
	case a.CheckpointMetadata != nil:
		c := a.CheckpointMetadata
		r.CheckpointMetadata = &ckptCheckpointMetadata{Version: &c.Version, Tags: pm(c.Tags, false)}
	}
	return r
}

// TestEncodeCheckpointMatchesReflection: the hand-built rows of
// encodeCheckpoint decode to the same actions as parquet-go's reflection
// writer produces from the obvious row structs, over actions that use
// every column (nulls, empty and multi-entry maps, lists, deletion vectors).
func TestEncodeCheckpointMatchesReflection(t *testing.T) {
	now := time.Now()
	dir, _ := ckptBuildTable(t, now)
	snap := ckptLoad(t, dir)
	acts, _, _, err := checkpointActions(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	one, two := int64(1), int32(2)
	ext := false
	a, b := "a", "b"
	acts = append(acts,
		Action{Add: &Add{Path: "dv", PartitionValues: map[string]*string{"x": &a, "y": nil, "z": &b}, Size: 3, ModificationTime: 4,
			Tags:           map[string]string{"k1": "v1", "k0": ""},
			DeletionVector: &DeletionVector{StorageType: "u", PathOrInlineDv: "abc", Offset: &two, SizeInBytes: 5, Cardinality: 6, MaxRowIndex: &one},
			BaseRowID:      &one, DefaultRowCommitVersion: &one, ClusteringProvider: "liquid"}},
		Action{Remove: &Remove{Path: "r", DeletionTimestamp: &one, ExtendedFileMetadata: &ext, Size: &one,
			DeletionVector: &DeletionVector{StorageType: "i", PathOrInlineDv: "xyz", SizeInBytes: 1, Cardinality: 1}}},
		Action{Protocol: &Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{}, WriterFeatures: []string{"a", "b"}}},
		Action{Metadata: &Metadata{ID: "m", Name: "n", Description: "d", SchemaString: "{}"}},
		Action{CheckpointMetadata: &CheckpointMetadata{Version: 9, Tags: map[string]string{"t": "u"}}},
		Action{DomainMetadata: &DomainMetadata{Domain: "x", Removed: true}},
	)
	// Enough rows to cross the encoder's column batches more than once.
	for i := 0; i < 2500; i++ {
		acts = append(acts, Action{Add: &Add{Path: fmt.Sprint("bulk-", i), PartitionValues: map[string]*string{"p": &a},
			Size: int64(i), Stats: fmt.Sprint(`{"numRecords":`, i, `}`)}})
	}
	ours, err := encodeCheckpoint(acts)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]ckptRow, len(acts))
	for i, a := range acts {
		rows[i] = ckptRowOf(a)
	}
	var ref bytes.Buffer
	w := parquet.NewGenericWriter[ckptRow](&ref, parquet.Compression(&parquet.Snappy))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := decodeCkptBytes(ours)
	if err != nil {
		t.Fatalf("decode ours: %v", err)
	}
	want, err := decodeCkptBytes(ref.Bytes())
	if err != nil {
		t.Fatalf("decode reference: %v", err)
	}
	if len(got) != len(acts) || len(want) != len(acts) {
		t.Fatalf("%d actions encoded, %d decoded from ours, %d from the reference", len(acts), len(got), len(want))
	}
	for i := range got {
		g, _ := json.Marshal(got[i])
		r, _ := json.Marshal(want[i])
		if !bytes.Equal(g, r) {
			t.Errorf("action %d:\nours      %s\nreference %s", i, g, r)
		}
	}
	// And the file is what parquet-go's own row reader reads back.
	fr := parquet.NewGenericReader[ckptRow](bytes.NewReader(ours))
	back := make([]ckptRow, len(acts))
	if n, err := fr.Read(back); n != len(acts) || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("reflection reader read %d rows: %v", n, err)
	}
	if dv := back[len(back)-2506]; dv.Add == nil || *dv.Add.PartitionValues["z"] != "b" || dv.Add.PartitionValues["y"] != nil {
		t.Errorf("reflection reader sees add %+v", dv.Add)
	}
}

// TestCheckpointSchemaMatchesSpark compares the schema we write with the
// one Spark 3.5 wrote for a V2 checkpoint (golden/v2-checkpoint-parquet,
// which has every action column): every leaf we write must exist in
// Spark's with the same physical type and repetition, since Spark and
// delta-rs resolve checkpoint columns by name and type. Spark's columns we
// leave out are listed.
func TestCheckpointSchemaMatchesSpark(t *testing.T) {
	dir := ckptTable(t, "golden/v2-checkpoint-parquet")
	matches, err := filepath.Glob(filepath.Join(dir, LogDir, "*.checkpoint.*.parquet"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("spark checkpoint: %v %v", matches, err)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	type leaf struct {
		kind     parquet.Kind
		optional bool
		repeated bool // some ancestor is repeated
	}
	leaves := func(n parquet.Node) map[string]leaf {
		out := map[string]leaf{}
		var walk func(n parquet.Node, path string, rep bool)
		walk = func(n parquet.Node, path string, rep bool) {
			rep = rep || n.Repeated()
			if n.Leaf() {
				out[path] = leaf{n.Type().Kind(), n.Optional(), rep}
				return
			}
			for _, ch := range n.Fields() {
				p := ch.Name()
				if path != "" {
					p = path + "." + p
				}
				walk(ch, p, rep)
			}
		}
		walk(n, "", false)
		return out
	}
	ours, spark := leaves(ckptSchema), leaves(f.Schema())
	for p, l := range ours {
		s, ok := spark[p]
		if !ok {
			t.Errorf("we write %s, Spark has no such column", p)
			continue
		}
		if s.kind != l.kind || s.repeated != l.repeated || (!s.repeated && s.optional != l.optional) {
			t.Errorf("%s: ours %+v, Spark %+v", p, l, s)
		}
	}
	var left []string
	for p := range spark {
		if _, ok := ours[p]; !ok {
			left = append(left, p)
		}
	}
	sort.Strings(left)
	want := []string{"remove.stats", "sidecar.modificationTime", "sidecar.path", "sidecar.sizeInBytes",
		"sidecar.tags.key_value.key", "sidecar.tags.key_value.value"}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("Spark columns we do not write: %v, want %v", left, want)
	}
}

// TestCheckpointReloadProperty: for random histories (adds with random
// partition values, tags, deletion vectors and stats; removes; txns;
// domains set and removed), the table reloaded from our checkpoint alone
// equals the table replayed from its commits: the same files with every
// field, txns, domains, protocol and metadata.
func TestCheckpointReloadProperty(t *testing.T) {
	ctx := context.Background()
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			store := storage.NewLocal(dir)
			now := time.Now()
			ms := now.UnixMilli()
			ckptCommit(t, store, 0,
				Action{Protocol: &Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
					ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors", "domainMetadata"}}},
				Action{Metadata: &Metadata{ID: fmt.Sprint("prop-", seed), Format: Format{Provider: "parquet", Options: map[string]string{}},
					SchemaString: ckptTestSchema, PartitionColumns: []string{"p"}, Configuration: map[string]string{"delta.checkpointInterval": "1000"}}},
			)
			var live []*Add
			pick := func(vals ...string) *string {
				i := rng.Intn(len(vals) + 1)
				if i == len(vals) {
					return nil
				}
				return &vals[i]
			}
			versions := 5 + rng.Intn(10)
			for v := 1; v <= versions; v++ {
				var acts []Action
				for i := rng.Intn(20); i > 0; i-- {
					a := &Add{Path: EncodePath(fmt.Sprintf("p=%d/part %d-%d.parquet", rng.Intn(5), v, i)),
						PartitionValues: map[string]*string{"p": pick("a", "b", "c=d", "ü")}, Size: rng.Int63n(1 << 40),
						ModificationTime: ms - rng.Int63n(1e9), DataChange: true}
					if rng.Intn(2) == 0 {
						a.Stats = fmt.Sprintf(`{"numRecords":%d,"minValues":{"id":%d},"maxValues":{"id":%d},"nullCount":{"id":0}}`, rng.Intn(1e6), rng.Intn(10), 10+rng.Intn(10))
					}
					if rng.Intn(4) == 0 {
						a.Tags = map[string]string{"INSERTION_TIME": fmt.Sprint(rng.Int63()), "x": ""}
					}
					if rng.Intn(4) == 0 {
						off := rng.Int31n(100)
						a.DeletionVector = &DeletionVector{StorageType: "u", PathOrInlineDv: fmt.Sprintf("dv%d-%d", v, i), Offset: &off,
							SizeInBytes: rng.Int31n(1000), Cardinality: rng.Int63n(100)}
					}
					live = append(live, a)
					acts = append(acts, Action{Add: a})
				}
				for i := rng.Intn(4); i > 0 && len(live) > 0; i-- {
					k := rng.Intn(len(live))
					a := live[k]
					live = append(live[:k], live[k+1:]...)
					ts := ms - rng.Int63n(int64(14*24*time.Hour/time.Millisecond))
					acts = append(acts, Action{Remove: &Remove{Path: a.Path, DeletionTimestamp: &ts, DataChange: true,
						PartitionValues: a.PartitionValues, Size: &a.Size, DeletionVector: a.DeletionVector}})
				}
				if rng.Intn(2) == 0 {
					lu := ms
					acts = append(acts, Action{Txn: &Txn{AppID: fmt.Sprintf("topic.%d", rng.Intn(6)), Version: int64(v), LastUpdated: &lu}})
				}
				if rng.Intn(3) == 0 {
					acts = append(acts, Action{DomainMetadata: &DomainMetadata{Domain: fmt.Sprint("d", rng.Intn(3)),
						Configuration: fmt.Sprint(`{"v":`, v, `}`), Removed: rng.Intn(3) == 0}})
				}
				acts = append(acts, Action{CommitInfo: &CommitInfo{Timestamp: ms, Operation: "WRITE"}})
				ckptCommit(t, store, int64(v), acts...)
			}
			want := ckptLoad(t, dir)
			if err := writeCheckpoint(ctx, store, want, now); err != nil {
				t.Fatal(err)
			}
			for v := 0; v <= versions; v++ {
				if err := store.Delete(ctx, fmt.Sprintf("%s/%020d.json", LogDir, v)); err != nil {
					t.Fatal(err)
				}
			}
			got := ckptLoad(t, dir)
			if got.CheckpointVersion() != int64(versions) || got.Version != want.Version {
				t.Fatalf("reloaded version %d from checkpoint %d, want %d", got.Version, got.CheckpointVersion(), want.Version)
			}
			gf, wf := got.Files(), want.Files()
			if len(gf) != len(wf) || len(wf) == 0 || want.NumTombstones() == 0 {
				t.Fatalf("%d files reloaded, %d replayed (%d tombstones): the history must leave both", len(gf), len(wf), want.NumTombstones())
			}
			for i := range wf {
				w := *wf[i]
				w.DataChange = false
				if !reflect.DeepEqual(*gf[i], w) {
					t.Errorf("file %d:\nreloaded %+v\nreplayed %+v", i, *gf[i], w)
				}
			}
			if !reflect.DeepEqual(got.Txns(), want.Txns()) || !reflect.DeepEqual(got.Domains(), want.Domains()) ||
				!reflect.DeepEqual(got.Protocol, want.Protocol) || !reflect.DeepEqual(got.Metadata, want.Metadata) {
				t.Errorf("state differs:\nreloaded %v %v %+v\nreplayed %v %v %+v", got.Txns(), got.Domains(), got.Protocol,
					want.Txns(), want.Domains(), want.Protocol)
			}
			// Tombstones: exactly those within the default one-week retention.
			keep := 0
			for _, r := range tombstonesOf(t, want) {
				if *r.DeletionTimestamp >= now.Add(-defaultDeletedFileRetention).UnixMilli() {
					keep++
				}
			}
			if got.NumTombstones() != keep {
				t.Errorf("%d tombstones reloaded, %d within retention", got.NumTombstones(), keep)
			}
		})
	}
}

const ckptDeltaRSRowsScript = `
import json, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
out = []
for path in sys.argv[1:]:
    dt = DeltaTable(path)
    # The DataFusion scan applies deletion vectors; to_pyarrow_table refuses them.
    t = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())
    out.append({"version": dt.version(), "rows": rows})
print(json.dumps(out))
sys.stdout.flush()
import os
os._exit(0)
`

// TestCheckpointOfSparkTablesReadByDeltaRS: tables written by Spark (with
// deletion vectors, partitions, removes, a multi-part checkpoint, every
// primitive type) are checkpointed by us at their latest version, every
// other log file deleted, and delta-rs then reads exactly the rows it
// reads from the original table. A wrong deletion vector descriptor,
// partition value or missing file in our checkpoint shows up as different
// rows or a failed read.
func TestCheckpointOfSparkTablesReadByDeltaRS(t *testing.T) {
	py := pyenv.Python(t)
	ctx := context.Background()
	names := []string{"golden/dv-partitioned-with-checkpoint", "golden/multi-part-checkpoint",
		"golden/data-skipping-basic-stats-all-types-checkpoint", "golden/basic-with-inserts-deletes-checkpoint"}
	var dirs []string
	for _, name := range names {
		orig := ckptTable(t, name)
		dir := ckptCopyTable(t, orig)
		store := storage.NewLocal(dir)
		snap := ckptLoad(t, dir)
		// Keep every tombstone: the tables are years old.
		if err := writeCheckpoint(ctx, store, snap, time.UnixMilli(0)); err != nil {
			t.Fatal(err)
		}
		infos, err := store.List(ctx, LogDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range infos {
			base := strings.TrimPrefix(fi.Path, LogDir+"/")
			if base == "_last_checkpoint" || base == fmt.Sprintf("%020d.checkpoint.parquet", snap.Version) {
				continue
			}
			if err := store.Delete(ctx, fi.Path); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, orig, dir)
	}
	// One Python process for all tables: its start-up dominates.
	cmd := exec.Command(py, append([]string{"-c", ckptDeltaRSRowsScript}, dirs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deltalake: %v\n%s", err, stderr.String())
	}
	var res []struct {
		Version int64    `json:"version"`
		Rows    []string `json:"rows"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(dirs) {
		t.Fatalf("parse deltalake output (%d results): %v", len(res), err)
	}
	for i, name := range names {
		want, got := res[2*i], res[2*i+1]
		if len(want.Rows) == 0 {
			t.Errorf("%s: original table has no rows", name)
		}
		if got.Version != want.Version || !reflect.DeepEqual(got.Rows, want.Rows) {
			t.Errorf("%s: delta-rs from our checkpoint: version %d, %d rows; from the original: version %d, %d rows",
				name, got.Version, len(got.Rows), want.Version, len(want.Rows))
		}
	}
}

// checkpointActions collects checkpointRows' actions: the checkpoint of
// snap as one slice.
func checkpointActions(ctx context.Context, snap *Snapshot, minDeletion int64) (acts []Action, nAdd, nRemove int, err error) {
	nAdd, nRemove, err = checkpointRows(ctx, snap, minDeletion, func(a *Action) error {
		acts = append(acts, *a)
		return nil
	}, nil)
	return acts, nAdd, nRemove, err
}

// encodeCheckpoint encodes actions as a checkpoint file (ckptWriter).
func encodeCheckpoint(acts []Action) ([]byte, error) {
	var buf bytes.Buffer
	w := newCkptWriter(&buf)
	for i := range acts {
		if err := w.add(&acts[i]); err != nil {
			return nil, err
		}
	}
	if err := w.finish(context.Background(), nil); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// countingSink counts the bytes written to it.
type countingSink struct{ n int }

func (c *countingSink) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// TestCkptWriterStreamsRowGroups: the checkpoint writer hands each row
// group to its writer once the group is complete (through parquet-go's
// 32 KiB write buffer), so that writing a checkpoint to storage
// (storage.WriteFrom) never holds the whole file, whose removes grow with
// the table's retention; and the streamed bytes are a checkpoint that
// reads back whole.
func TestCkptWriterStreamsRowGroups(t *testing.T) {
	defer func(n int) { ckptRowGroup = n }(ckptRowGroup)
	ckptRowGroup = 5000
	var buf bytes.Buffer
	sink := &countingSink{}
	cw := newCkptWriter(io.MultiWriter(&buf, sink))
	ts := int64(1_700_000_000_000)
	const n = 50_000
	path := func(i int) string {
		return fmt.Sprintf("part-%05d-%08x-4e5f-6789-abcd-ef0123456789.parquet", i, i*2654435761)
	}
	var atGroup []int // bytes the writer had been handed at each row group's end
	for i := range n {
		r := &Remove{Path: path(i), DeletionTimestamp: &ts, DataChange: true}
		if err := cw.add(&Action{Remove: r}); err != nil {
			t.Fatal(err)
		}
		if (i+1)%ckptRowGroup == 0 {
			atGroup = append(atGroup, sink.n)
		}
	}
	if err := cw.finish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	total := sink.n
	if half := atGroup[len(atGroup)/2-1]; half < total/4 {
		t.Fatalf("half the rows added, the writer had %d of the file's %d bytes: the row groups were held back (by group: %v)", half, total, atGroup)
	}
	if last := atGroup[len(atGroup)-2]; last < total/2 {
		t.Fatalf("all but the last row group added, the writer had %d of the file's %d bytes (by group: %v)", last, total, atGroup)
	}
	acts, err := decodeCkptBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != n || acts[0].Remove == nil || acts[n-1].Remove == nil || acts[n-1].Remove.Path != path(n-1) {
		t.Fatalf("read back %d actions; want the %d removes in order", len(acts), n)
	}
}
