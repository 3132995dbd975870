package apply

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// setInlineDVLimit sets the inline deletion vector limit for a test and
// returns the restore function.
func setInlineDVLimit(n int) func() {
	old := inlineDVLimit
	inlineDVLimit = n
	return func() { inlineDVLimit = old }
}

// noFold turns merge-on-read folding off for a test of the deletion
// vector mechanics (its tables' files are all small) and returns the
// restore function.
func noFold() func() {
	foldDefault = false
	return func() { foldDefault = true }
}

// dvKinds counts the live files with an inline and with a file deletion vector.
func dvKinds(t *testing.T, store storage.Storage) (inline, file int) {
	t.Helper()
	snap, err := delta.Open(store).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range snap.Files() {
		switch {
		case a.DeletionVector == nil:
		case a.DeletionVector.StorageType == dv.StorageInline:
			inline++
		default:
			file++
		}
	}
	return inline, file
}

// morStream is a longer orders stream than crashStream: 40 keys, creates,
// updates and deletes, and updates that leave the status unavailable
// (TOAST), so merge-on-read must read stored rows for some keys and not
// for others.
func morStream(n int, seed uint64) ([]*Change, ordersOracle) {
	rng := rand.New(rand.NewPCG(seed, 7))
	oracle := ordersOracle{}
	var out []*Change
	for i := 0; i < n; i++ {
		id := rng.IntN(40)
		op := []string{"c", "u", "u", "u", "d", "t"}[rng.IntN(6)]
		status := fmt.Sprintf("s%d", i+1)
		if op == "t" { // an update whose status is unchanged and not sent
			c := refChange(int64(id), uint64(i+1), "u", status, int64(i))
			c.Values[1] = schema.Unavailable
			out = append(out, c)
			oracle.applyUnavailable(id)
			continue
		}
		out = append(out, refChange(int64(id), uint64(i+1), op, status, int64(i)))
		oracle.apply(id, op, status)
	}
	return out, oracle
}

// applyUnavailable is an update that keeps the stored status (NULL for a
// key never seen) and revives a tombstone.
func (o ordersOracle) applyUnavailable(id int) {
	r, ok := o[id]
	if !ok {
		r.status = "<nil>"
	}
	r.deleted = false
	o[id] = r
}

// readDirect reads every live row of a table with datafile.Read (the
// table reader's own deletion vector path, not the applier's) as
// "id status deleted".
func readDirect(t *testing.T, store storage.Storage) []string {
	t.Helper()
	ctx := context.Background()
	snap, err := delta.Open(store).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range snap.Files() {
		rec, err := datafile.Read(ctx, store, l, a)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := arrowToRows(rec, 2)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			status := "<nil>"
			if !r.Values[1].IsNull() {
				status = r.Values[1].S
			}
			out = append(out, fmt.Sprintf("%d %s %v", r.Values[0].I, status, r.Deleted))
		}
	}
	sort.Strings(out)
	return out
}

// TestMergeOnReadMatchesOracle applies a stream in merge-on-read mode,
// reopening the applier halfway (the key index is then built from files
// with deletion vectors, through a log checkpoint), and checks the table
// read two ways (the applier's rows and datafile.Read) equals the oracle
// and equals the same stream applied copy-on-write.
func TestMergeOnReadMatchesOracle(t *testing.T) {
	for _, limit := range []int{1024, 40} {
		t.Run(fmt.Sprintf("inline-limit-%d", limit), func(t *testing.T) {
			defer setInlineDVLimit(limit)()
			defer noFold()()
			ctx := context.Background()
			stream, oracle := morStream(400, 11)
			mor := storage.NewLocal(t.TempDir())
			if err := runFromMode(ctx, mor, stream[:200], 9, MergeOnRead); err != nil {
				t.Fatal(err)
			}
			if err := runFromMode(ctx, mor, stream, 9, MergeOnRead); err != nil {
				t.Fatal(err)
			}
			cow := storage.NewLocal(t.TempDir())
			if err := runFromMode(ctx, cow, stream, 9, CopyOnWrite); err != nil {
				t.Fatal(err)
			}
			want := oracle.rows()
			requireOracleTable(t, "merge-on-read table", mor, int64(len(stream)), want)
			if c, _ := tableState(t, cow); fmt.Sprint(c) != fmt.Sprint(want) {
				t.Fatalf("copy-on-write table:\n got %v\nwant %v", c, want)
			}
			inline, file := dvKinds(t, mor)
			t.Logf("live files with inline / file deletion vectors: %d / %d", inline, file)
			if inline+file == 0 || (limit == 40 && file == 0) {
				t.Fatalf("inline %d file %d deletion vectors: merge-on-read wrote none of the kind under test", inline, file)
			}
			snap, err := delta.Open(mor).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !hasDeletionVectors(snap.Protocol) || snap.Metadata.Configuration[enableDVProperty] != "true" {
				t.Fatalf("protocol %+v, configuration %v: want the deletionVectors feature enabled", snap.Protocol, snap.Metadata.Configuration)
			}
		})
	}
}

// TestMergeOnReadCostFollowsBatch checks the point of merge-on-read: a
// batch of full-image updates to keys spread over many files reads no data
// file and rewrites none; it adds one file of new rows and replaces each
// touched file's add with a deletion vector.
func TestMergeOnReadCostFollowsBatch(t *testing.T) {
	defer noFold()() // its 10 files are small: this test is about the vectors
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	counting := &countingRowFiles{}
	newFiles := func(l *Layout) (RowFiles, error) {
		rf, err := NewParquetRowFiles(store, l)
		counting.ParquetRowFiles = rf
		return counting, err
	}
	a := openMergeOnRead(t, store, newFiles)
	off := int64(0)
	apply := func(changes ...*Change) *Result {
		t.Helper()
		b := &Batch{Changes: changes, Read: len(changes), Ranges: rng(off, off+int64(len(changes)))}
		off += int64(len(changes))
		res, err := a.Apply(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for f := 0; f < 10; f++ { // ten files of ten keys
		var cs []*Change
		for i := 0; i < 10; i++ {
			cs = append(cs, refChange(int64(f*10+i), 1, "c", "new", off+int64(i)))
		}
		apply(cs...)
	}
	counting.reads.Store(0)
	var cs []*Change
	for f := 0; f < 10; f++ {
		cs = append(cs, refChange(int64(f*10+3), 2, "u", "paid", off+int64(f)))
	}
	res := apply(cs...)
	if counting.reads.Load() != 0 || res.Files.Added != 11 || res.Files.Removed != 10 || res.Counts.Update != 10 {
		t.Fatalf("full-image updates into 10 files: %d data file reads, %+v files, counts %+v; want 0 reads, 11 added (10 vectors + 1 new), 10 removed",
			counting.reads.Load(), res.Files, res.Counts)
	}
	// A delete needs the stored values for its tombstone: its file is read.
	res = apply(refChange(55, 3, "d", "", off))
	if counting.reads.Load() != 1 || res.Counts.Delete != 1 {
		t.Fatalf("a delete: %d data file reads, counts %+v; want 1 read", counting.reads.Load(), res.Counts)
	}
	rows, _ := tableState(t, store)
	want := ordersOracle{}
	for id := 0; id < 100; id++ {
		want.apply(id, "c", "new")
	}
	for f := 0; f < 10; f++ {
		want.apply(f*10+3, "u", "paid")
	}
	want.apply(55, "d", "")
	if fmt.Sprint(rows) != fmt.Sprint(want.rows()) {
		t.Fatalf("table\n got %v\nwant %v", rows, want.rows())
	}
}

type countingRowFiles struct {
	*ParquetRowFiles
	reads atomic.Int64 // ReadRowsAt runs on several goroutines
}

func (c *countingRowFiles) ReadRows(ctx context.Context, add *delta.Add) ([]Row, error) {
	c.reads.Add(1)
	return c.ParquetRowFiles.ReadRows(ctx, add)
}

func (c *countingRowFiles) ReadRowsAt(ctx context.Context, add *delta.Add, rows []int64, need [][]int) ([]Row, error) {
	c.reads.Add(1)
	return c.ParquetRowFiles.ReadRowsAt(ctx, add, rows, need)
}

// TestMergeOnReadUpgradesCopyOnWriteTable switches an existing
// copy-on-write table (reader version 1) to merge-on-read: the first
// commit that writes a deletion vector adds the feature to the protocol,
// and switching back to copy-on-write rewrites files without their
// vectors (the rows they hid stay gone).
func TestMergeOnReadUpgradesCopyOnWriteTable(t *testing.T) {
	ctx := context.Background()
	stream, oracle := morStream(150, 5)
	store := storage.NewLocal(t.TempDir())
	if err := runFromMode(ctx, store, stream[:50], 7, CopyOnWrite); err != nil {
		t.Fatal(err)
	}
	snap, err := delta.Open(store).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Protocol.MinReaderVersion != 1 {
		t.Fatalf("copy-on-write table protocol %+v, want reader 1", snap.Protocol)
	}
	if err := runFromMode(ctx, store, stream[:100], 7, MergeOnRead); err != nil {
		t.Fatal(err)
	}
	if inline, file := dvKinds(t, store); inline+file == 0 {
		t.Fatal("no deletion vector after merge-on-read batches")
	}
	if err := runFromMode(ctx, store, stream, 7, CopyOnWrite); err != nil {
		t.Fatal(err)
	}
	requireOracleTable(t, "table", store, int64(len(stream)), oracle.rows())
	snap, err = delta.Open(store).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hasDeletionVectors(snap.Protocol) {
		t.Fatalf("protocol %+v lacks deletionVectors after merge-on-read commits", snap.Protocol)
	}
}

// TestMergeOnReadTruncate applies a source TRUNCATE to a table whose files
// carry deletion vectors: the rewrite drops the hidden rows and the key
// index follows the rows that moved, so later changes land on the right
// rows.
func TestMergeOnReadTruncate(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	stream, _ := morStream(120, 9)
	if err := runFromMode(ctx, store, stream, 11, MergeOnRead); err != nil {
		t.Fatal(err)
	}
	newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.SetMergeMode(MergeOnRead); err != nil {
		t.Fatal(err)
	}
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	n := int64(len(stream))
	trunc := &Change{Seq: seqBytes(1000), Pos: Position{"orders", 0, n}}
	if _, err := a.Truncate(ctx, trunc, &Batch{Read: 1, Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: n, Next: n + 1}}}); err != nil {
		t.Fatal(err)
	}
	var after []*Change
	for id := 0; id < 40; id += 3 {
		after = append(after, refChange(int64(id), 2000, "u", "back", n+1+int64(len(after))))
	}
	b := &Batch{Changes: after, Read: len(after), Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: n + 1, Next: n + 1 + int64(len(after))}}}
	if _, err := a.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, _ := tableState(t, store)
	live := map[string]bool{}
	for _, r := range got {
		var id int
		var status string
		var deleted bool
		fmt.Sscanf(r, "%d %s %v", &id, &status, &deleted)
		if id%3 == 0 {
			if status != "back" || deleted {
				t.Errorf("key %d after truncate and update: %q", id, r)
			}
		} else if !deleted {
			t.Errorf("key %d after truncate: %q, want a tombstone", id, r)
		}
		live[fmt.Sprint(id)] = true
	}
	if len(got) != len(live) {
		t.Errorf("%d rows for %d keys: a key is doubled: %v", len(got), len(live), got)
	}
	if direct := readDirect(t, store); fmt.Sprint(direct) != fmt.Sprint(got) {
		t.Fatalf("datafile.Read differs:\n%v\n%v", direct, got)
	}
}

// TestMergeOnReadReadByDeltaRS reads a merge-on-read table (inline and
// file deletion vectors, a log checkpoint) with delta-rs's query engine, a
// reader we did not write: its rows must equal the oracle.
func TestMergeOnReadReadByDeltaRS(t *testing.T) {
	defer setInlineDVLimit(40)()
	defer noFold()()
	ctx := context.Background()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	stream, oracle := morStream(300, 21)
	if err := runFromMode(ctx, store, stream, 9, MergeOnRead); err != nil {
		t.Fatal(err)
	}
	inline, file := dvKinds(t, store)
	if inline == 0 || file == 0 {
		t.Fatalf("inline %d, file %d deletion vectors: want both kinds", inline, file)
	}
	// A batch writes its file vectors into one file: some live vector
	// must sit past the first offset of its file for delta-rs to find.
	snap, err := delta.Open(store).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, a := range snap.Files() {
		if d := a.DeletionVector; d != nil && d.Offset != nil && *d.Offset > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no deletion vector shares its file with another: the multi-vector file is not under test")
	}
	res, got := queryEngineRows(t, dir)
	if fmt.Sprint(got) != fmt.Sprint(oracle.rows()) {
		t.Fatalf("delta-rs (query engine) reads version %d as\n%v\nwant\n%v", res.Version, got, oracle.rows())
	}
	switch p := res.PyarrowRows.(type) {
	case string:
		t.Logf("DeltaTable.to_pyarrow_table() refuses the table: %s", p)
	case []any:
		// A reader that ignores deletion vectors would return the hidden
		// rows too; it must refuse the table instead.
		if len(p) != len(got) {
			t.Fatalf("DeltaTable.to_pyarrow_table() returns %d rows, the oracle has %d: deleted rows leak", len(p), len(got))
		}
	}
}

// TestReadRowsAt reads chosen rows of a data file written in row groups
// of 8 rows, with a deletion vector: the rows come back with their values
// and physical index, only the row groups holding them are decoded, and
// asking for a row the vector hides, one past the end, or indexes out of
// order fails naming the file.
func TestReadRowsAt(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	rf, err := NewParquetRowFiles(store, refLayout, datafile.RowGroupRows(8))
	if err != nil {
		t.Fatal(err)
	}
	var rows []Row
	for i := 0; i < 50; i++ {
		c := refChange(int64(i), 1, "c", fmt.Sprintf("s%d", i), int64(i))
		rows = append(rows, Row{Values: c.Values, Seq: c.Seq, SourceTsMicros: 1, AppliedMicros: 2})
	}
	add, err := rf.WriteRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	adds, err := rf.DeleteRows(ctx, []Deletion{{File: add, Rows: []int64{3, 7}}})
	if err != nil {
		t.Fatal(err)
	}
	add = adds[0]
	at := []int64{0, 4, 17, 23, 49}
	got, err := rf.ReadRowsAt(ctx, add, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(at) {
		t.Fatalf("got %d rows, want %d", len(got), len(at))
	}
	// Rows 0 and 4 share group 0, 17 and 23 share group 2, 49 is in
	// group 6 (2 rows): 8+8+2 rows decoded.
	rec, _, err := datafile.ReadRowGroupsOf(ctx, store, rf.file, add, at)
	if err != nil {
		t.Fatal(err)
	}
	if rec.NumRows() != 18 {
		t.Fatalf("decoded %d rows for rows %v, want the 18 of their three row groups", rec.NumRows(), at)
	}
	rec.Release()
	for i, want := range at {
		if got[i].Pos != want || fmt.Sprint(got[i].Values) != fmt.Sprint(rows[want].Values) || !bytes.Equal(got[i].Seq, rows[want].Seq) {
			t.Fatalf("row %d: got pos %d %v, want pos %d %v", i, got[i].Pos, got[i].Values, want, rows[want].Values)
		}
	}
	for _, bad := range [][]int64{{7}, {50}, {4, 2}, {-1}} {
		if _, err := rf.ReadRowsAt(ctx, add, bad, nil); err == nil || !strings.Contains(err.Error(), add.Path) {
			t.Fatalf("rows %v: err %v, want an error naming %s", bad, err, add.Path)
		}
	}
}

// TestMergeOnReadChecksStoredRowKey: merge-on-read reads a stored row at
// the position the key index gives; an index that is wrong about it must
// stop the batch, not copy another key's values into a tombstone.
func TestMergeOnReadChecksStoredRowKey(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	a := openMergeOnRead(t, store, func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) })
	var cs []*Change
	for i := 0; i < 5; i++ {
		cs = append(cs, refChange(int64(i), 1, "c", "new", int64(i)))
	}
	if _, err := a.Apply(ctx, &Batch{Changes: cs, Read: 5, Ranges: rng(0, 5)}); err != nil {
		t.Fatal(err)
	}
	del := refChange(2, 2, "d", "", 5)
	at, ok := a.index.find(del.Key)
	if !ok {
		t.Fatal("key 2 not in the index")
	}
	a.index.entries.at(at).row = 3 // key 3's row
	_, err := a.Apply(ctx, &Batch{Changes: []*Change{del}, Read: 1, Ranges: rng(5, 6)})
	if err == nil || !strings.Contains(err.Error(), "lacks key") {
		t.Fatalf("delete with a wrong index entry: err %v, want the file to lack the key", err)
	}
}

// openMergeOnRead opens a merge-on-read applier of the orders layout on
// store.
func openMergeOnRead(t *testing.T, store storage.Storage, newFiles func(*Layout) (RowFiles, error)) *TableApplier {
	t.Helper()
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.SetMergeMode(MergeOnRead); err != nil {
		t.Fatal(err)
	}
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(refLayout); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestMergeOnReadFoldsFiles streams 600 changes over 40 keys in batches of
// 9 in merge-on-read with folding on: each batch adds a small file, and
// folding moves the smallest into later batches' files, so the table ends
// with a handful of files (not ~65) and its rows still equal the oracle,
// through the index rebuilt from the files (which refuses a key in two
// rows), datafile.Read and delta-rs.
func TestMergeOnReadFoldsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	stream, oracle := morStream(600, 5)
	if err := runFromMode(ctx, store, stream, 9, MergeOnRead); err != nil {
		t.Fatal(err)
	}
	want := oracle.rows()
	requireOracleTable(t, "table", store, int64(len(stream)), want)
	snap, err := delta.Open(store).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.Files()); n > foldKeepSmall+2 {
		t.Fatalf("%d live files after %d batches: folding did not bound them", n, len(stream)/9)
	}
	if _, rs := queryEngineRows(t, dir); fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("delta-rs reads\n%v\nwant\n%v", rs, want)
	}
}

// dvTableRead is what testdata/read_dv_table.py prints.
type dvTableRead struct {
	Version     int64            `json:"version"`
	Rows        []map[string]any `json:"rows"`
	PyarrowRows any              `json:"pyarrow_rows"`
}

// queryEngineRows reads an orders table with delta-rs's query engine
// (deletion vectors applied) as sorted "id status deleted" lines.
func queryEngineRows(t *testing.T, dir string) (dvTableRead, []string) {
	t.Helper()
	var res dvTableRead
	runPython(t, filepath.Join("testdata", "read_dv_table.py"), &res, dir)
	got := make([]string, 0, len(res.Rows))
	for _, r := range res.Rows {
		status := "<nil>"
		if s, ok := r["status"].(string); ok {
			status = s
		}
		got = append(got, fmt.Sprintf("%v %s %v", r["id"], status, r[ColDeleted]))
	}
	sort.Strings(got)
	return res, got
}

// requireOracleTable checks a table at the stream's end: its position and
// rows by the snapshot reader, and its rows by datafile.Read, equal want.
func requireOracleTable(t *testing.T, what string, store storage.Storage, pos int64, want []string) {
	t.Helper()
	got, at := tableState(t, store)
	if at != pos || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s at position %d (want %d):\n got %v\nwant %v", what, at, pos, got, want)
	}
	if direct := readDirect(t, store); fmt.Sprint(direct) != fmt.Sprint(want) {
		t.Fatalf("datafile.Read of the %s:\n got %v\nwant %v", what, direct, want)
	}
}
