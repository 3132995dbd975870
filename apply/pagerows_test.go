package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// allFlatTypes is an engine table with a source column of every flat type
// the engine writes.
func allFlatTypes(t testing.TB) *Layout {
	t.Helper()
	l, err := NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long},
		{Name: "b", Type: delta.Boolean, Nullable: true},
		{Name: "i8", Type: delta.Byte, Nullable: true},
		{Name: "i16", Type: delta.Short, Nullable: true},
		{Name: "i32", Type: delta.Integer, Nullable: true},
		{Name: "f32", Type: delta.Float, Nullable: true},
		{Name: "f64", Type: delta.Double, Nullable: true},
		{Name: "d5", Type: delta.DecimalType{Precision: 5, Scale: 2}, Nullable: true},
		{Name: "d15", Type: delta.DecimalType{Precision: 15, Scale: 3}, Nullable: true},
		{Name: "d25", Type: delta.DecimalType{Precision: 25, Scale: 4}, Nullable: true},
		{Name: "s", Type: delta.String, Nullable: true},
		{Name: "bin", Type: delta.Binary, Nullable: true},
		{Name: "date", Type: delta.Date, Nullable: true},
		{Name: "ts", Type: delta.Timestamp, Nullable: true},
		{Name: "ntz", Type: delta.TimestampNTZ, Nullable: true},
	}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func allFlatRow(i int) Row {
	dec := func(unscaled int64, hi int64, scale int32) schema.Value {
		return schema.Value{Kind: schema.KindDecimal, I: unscaled, Hi: hi, Scale: scale}
	}
	neg := int64(0)
	if i%2 == 1 {
		neg = -1
	}
	v := []schema.Value{
		schema.Int(int64(i)),
		schema.Bool(i%2 == 0),
		schema.Int(int64(int8(i))),
		schema.Int(int64(int16(i * 7))),
		schema.Int(int64(-i * 1000)),
		schema.Float(float64(float32(i) + 0.25)),
		schema.Float(float64(i)/3 - 1),
		dec(int64(i*101-999), map[bool]int64{true: -1, false: 0}[i*101-999 < 0], 2),
		dec(int64(i)*123456789012*(1+2*neg), neg, 3),
		dec(int64(i)<<40, int64(i%5)-2, 4),
		schema.String(strings.Repeat("ü", i%40) + fmt.Sprint(i)),
		schema.Bytes([]byte{byte(i), 0, 0xff}),
		schema.Int(int64(19000 + i)),
		schema.Int(1_700_000_000_000_000 + int64(i)*1001),
		schema.Int(1_700_000_000_000_000 - int64(i)*7),
	}
	for c := 1; c < len(v); c++ {
		if (i+c)%3 == 0 {
			v[c] = schema.Null
		}
	}
	r := Row{Values: v, Seq: []byte{0, byte(i >> 8), byte(i)}, Deleted: i%4 == 0, AppliedMicros: int64(i) + 5}
	if i%5 != 0 {
		r.SourceTsMicros = int64(i) * 10
	}
	return r
}

// countingStore counts the bytes read from data files, whole or in parts.
type countingStore struct {
	storage.Storage
	bytes atomic.Int64
}

func (c *countingStore) Read(ctx context.Context, p string) ([]byte, error) {
	b, err := c.Storage.Read(ctx, p)
	if strings.HasSuffix(p, ".parquet") {
		c.bytes.Add(int64(len(b)))
	}
	return b, err
}

func (c *countingStore) Open(ctx context.Context, p string) (storage.File, error) {
	f, err := c.Storage.(storage.RangeReader).Open(ctx, p)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, n: &c.bytes}, nil
}

type countingFile struct {
	storage.File
	n *atomic.Int64
}

func (f *countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	f.n.Add(int64(n))
	return n, err
}

// TestReadRowsAtPagesMatchGroups: the page-index read of stored rows
// gives exactly the rows the row-group read gives, for every flat type
// with NULLs, for sparse, dense and boundary row sets; and it reads far
// less of a large file than the file's size.
func TestReadRowsAtPagesMatchGroups(t *testing.T) {
	t.Run("delta-length", func(t *testing.T) { testReadRowsAtPagesMatchGroups(t) })
	t.Run("plain", func(t *testing.T) {
		testReadRowsAtPagesMatchGroups(t, datafile.PlainValues(), datafile.Compression(datafile.Snappy))
	})
}

// TestReadRowsAtLz4NotDirect: stored rows of an LZ4_RAW file the direct
// page reader does not read (DELTA_LENGTH_BYTE_ARRAY text, as parquet-go
// and other writers write it) come from its row groups, as written:
// parquet-go's page path is not used for LZ4, whose pages it can read as
// zeros.
func TestReadRowsAtLz4NotDirect(t *testing.T) {
	ctx := context.Background()
	const n = 10000
	rf, rows, add := writeAllFlat(t, storage.NewLocal(t.TempDir()), n, datafile.PageBytes(4096), datafile.Compression(datafile.Lz4Raw))
	at := []int64{0, 1, 2999, 3000, 4567, n - 1}
	if _, err := rf.readRowsAtPages(ctx, add, at, nil); !errors.Is(err, datafile.ErrNoPointRead) {
		t.Fatalf("page read of an LZ4 file the direct reader declines: %v, want ErrNoPointRead", err)
	}
	got, err := rf.ReadRowsAt(ctx, add, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range at {
		if fmt.Sprint(got[i].Values) != fmt.Sprint(rows[r].Values) || !bytes.Equal(got[i].Seq, rows[r].Seq) {
			t.Fatalf("row %d: read %v %x, wrote %v %x", r, got[i].Values, got[i].Seq, rows[r].Values, rows[r].Seq)
		}
	}
}

// writeAllFlat writes n rows of every flat type (allFlatRow) as one file
// of 3000-row groups, with opts after those.
func writeAllFlat(t *testing.T, store storage.Storage, n int, opts ...datafile.WriteOption) (*ParquetRowFiles, []Row, *delta.Add) {
	t.Helper()
	rf, err := NewParquetRowFiles(store, allFlatTypes(t), append([]datafile.WriteOption{datafile.RowGroupRows(3000)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = allFlatRow(i)
	}
	add, err := rf.WriteRows(context.Background(), rows)
	if err != nil {
		t.Fatal(err)
	}
	return rf, rows, add
}

func testReadRowsAtPagesMatchGroups(t *testing.T, opts ...datafile.WriteOption) {
	ctx := context.Background()
	store := &countingStore{Storage: storage.NewLocal(t.TempDir())}
	const n = 30000
	rf, rows, add := writeAllFlat(t, store, n, append([]datafile.WriteOption{datafile.PageBytes(512)}, opts...)...)
	rng := rand.New(rand.NewPCG(1, 2))
	sets := [][]int64{{0}, {n - 1}, {2999, 3000, 3001}, {0, 1, 2, 3, 4, 5}}
	var every2, sparse []int64
	for i := int64(0); i < n; i += 2 {
		every2 = append(every2, i)
	}
	for i := int64(0); i < n; i++ {
		if rng.IntN(100) == 0 {
			sparse = append(sparse, i)
		}
	}
	sets = append(sets, every2, sparse)
	for _, at := range sets {
		got, err := rf.readRowsAtPages(ctx, add, at, nil)
		if err != nil {
			t.Fatalf("page read of %d rows: %v", len(at), err)
		}
		want, err := rf.readRowsAtGroups(ctx, add, at)
		if err != nil {
			t.Fatal(err)
		}
		for i := range at {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("row %d: page read %+v, row-group read %+v", at[i], got[i], want[i])
			}
			if fmt.Sprint(got[i].Values) != fmt.Sprint(rows[at[i]].Values) {
				t.Fatalf("row %d: read %v, wrote %v", at[i], got[i].Values, rows[at[i]].Values)
			}
		}
	}
	// Rows asked for some columns get their key and those, and nothing
	// else: their other values unavailable, their engine columns unset.
	l := allFlatTypes(t)
	at := sets[len(sets)-1]
	need := make([][]int, len(at))
	for i := range need {
		switch i % 3 {
		case 0:
			need[i] = []int{i % len(l.Source)}
		case 1:
			need[i] = []int{1, len(l.Source) - 1}
		}
	}
	got, err := rf.readRowsAtPages(ctx, add, at, need)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range at {
		wrote := rows[r]
		if need[i] == nil {
			if fmt.Sprint(got[i].Values) != fmt.Sprint(wrote.Values) || !bytes.Equal(got[i].Seq, wrote.Seq) {
				t.Fatalf("row %d, every column: read %v %x, wrote %v %x", r, got[i].Values, got[i].Seq, wrote.Values, wrote.Seq)
			}
			continue
		}
		want := map[int]bool{}
		for _, k := range l.Key {
			want[k] = true
		}
		for _, c := range need[i] {
			want[c] = true
		}
		for c, v := range got[i].Values {
			switch {
			case want[c] && fmt.Sprint(v) != fmt.Sprint(wrote.Values[c]):
				t.Fatalf("row %d column %d: read %v, wrote %v", r, c, v, wrote.Values[c])
			case !want[c] && !v.IsUnavailable():
				t.Fatalf("row %d column %d: read %v, not asked for", r, c, v)
			}
		}
		if got[i].Seq != nil || got[i].AppliedMicros != 0 || got[i].Pos != r {
			t.Fatalf("row %d, some columns: engine columns %x %d, pos %d", r, got[i].Seq, got[i].AppliedMicros, got[i].Pos)
		}
	}
	// The last row of a row group: reached through the offset index it
	// costs the footer and a page per column (measured: 5% of the file);
	// scanning the group's pages from its start, as without the offset
	// index, reads over a tenth (measured: 11%).
	store.bytes.Store(0)
	if _, err := rf.readRowsAtPages(ctx, add, []int64{14999}, nil); err != nil {
		t.Fatal(err)
	}
	if read := store.bytes.Load(); read*15 > add.Size {
		t.Errorf("reading one row read %d bytes of a %d-byte file: want a few pages, under a 15th", read, add.Size)
	}
	for _, bad := range [][]int64{{n}, {4, 2}, {3, 3}, {-1}} {
		if _, err := rf.readRowsAtPages(ctx, add, bad, nil); err == nil || !strings.Contains(err.Error(), add.Path) {
			t.Fatalf("rows %v: err %v, want an error naming %s", bad, err, add.Path)
		}
	}
}

// TestReadValuesAtConformance reads random rows of every data file of the
// shared conformance tables (written by Spark and delta-rs: dictionary
// pages, v1 pages, other writers' page sizes and types) with
// datafile.ReadValuesAt and compares them with datafile.Read of the whole
// file; a file it does not read must say ErrNoPointRead. Enough files must
// be compared for the test to mean something.
func TestReadValuesAtConformance(t *testing.T) {
	root := filepath.Join("..", "..", "shared", "delta-conformance", "kernel-data")
	if d := os.Getenv("DELTA_CONFORMANCE"); d != "" {
		root = filepath.Join(d, "kernel-data")
	}
	dirs, err := os.ReadDir(root)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no conformance tables: %v", err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	compared, declined := 0, 0
	why := map[string]int{} // table and reason -> files declined
	for _, d := range dirs {
		tdir := filepath.Join(root, d.Name())
		if _, err := os.Stat(filepath.Join(tdir, "_delta_log")); err != nil {
			continue
		}
		st := storage.NewLocal(tdir)
		snap, err := delta.Open(st).Snapshot(ctx)
		if err != nil {
			continue // tables this module does not open are covered elsewhere
		}
		l, err := datafile.LayoutOf(&snap.Metadata)
		if err != nil {
			continue
		}
		for _, add := range snap.Files() {
			plain := *add
			plain.DeletionVector = nil
			rec, err := datafile.Read(ctx, st, l, &plain)
			if err != nil {
				continue
			}
			nrows := int(rec.NumRows())
			var at []int64
			for r := 0; r < nrows; r++ {
				if r == 0 || r == nrows-1 || rng.IntN(3) == 0 {
					at = append(at, int64(r))
				}
			}
			got, err := datafile.ReadValuesAt(ctx, st, l, &plain, at)
			if errors.Is(err, datafile.ErrNoPointRead) {
				declined++
				why[d.Name()+": "+err.Error()]++
				rec.Release()
				continue
			}
			if err != nil {
				t.Fatalf("%s %s: %v", d.Name(), add.Path, err)
			}
			for c := range got {
				col := rec.Column(c)
				for i, r := range at {
					want, err := valueAt(col, int(r))
					if err != nil {
						t.Fatalf("%s %s: %v", d.Name(), add.Path, err)
					}
					if !reflect.DeepEqual(got[c][i], want) {
						t.Fatalf("%s %s column %s row %d: point read %+v, whole-file read %+v", d.Name(), add.Path, l.Schema.Fields[c].Name, r, got[c][i], want)
					}
				}
			}
			rec.Release()
			compared++
		}
	}
	t.Logf("compared %d files, %d declined (ErrNoPointRead): %v", compared, declined, why)
	if compared < 15 {
		t.Fatalf("only %d conformance files compared: the test would not mean much", compared)
	}
}

// BenchmarkReadRowsAt reads 1% (and, under sparse/, 0.05%) of a 100k-row
// merge-on-read file's rows (random, ascending), as a batch's deletes and
// TOAST placeholders ask, through the page index and through row groups,
// on the same file (file-bytes: its size):
//
//	go test ./apply -run XXX -bench ReadRowsAt -count 6
func BenchmarkReadRowsAt(b *testing.B) {
	ctx := context.Background()
	rf, rows := scaleRowFiles(b, storage.NewLocal(b.TempDir()))
	n := int64(len(rows))
	add, err := rf.WriteRows(ctx, rows)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	// 1%: a 1M-row table's batch, rows sharing pages; sparse (0.05%):
	// about one row a text page, as a batch's stored rows spread over a
	// 10M-row table.
	for _, density := range []struct {
		name string
		one  int
	}{{"", 100}, {"sparse/", 2000}} {
		var at []int64
		for i := range n {
			if rng.IntN(density.one) == 0 {
				at = append(at, i)
			}
		}
		benchReadRowsAt(b, rf, add, at, density.name)
	}
}

func benchReadRowsAt(b *testing.B, rf *ParquetRowFiles, add *delta.Add, at []int64, prefix string) {
	ctx := context.Background()
	cache := datafile.NewFileCache(pointFilesOpen)
	defer cache.Close()
	for _, path := range []struct {
		name string
		read func(context.Context, *delta.Add, []int64) ([]Row, error)
	}{
		{"pages", func(ctx context.Context, add *delta.Add, at []int64) ([]Row, error) {
			return rf.readRowsAtPages(ctx, add, at, nil)
		}},
		{"pages-one-column", func(ctx context.Context, add *delta.Add, at []int64) ([]Row, error) {
			need := make([][]int, len(at))
			for i := range need {
				need[i] = []int{len(scaleLayout.Source) - 1} // the last column, as a TOASTed value
			}
			return rf.readRowsAtPages(ctx, add, at, need)
		}},
		{"pages-cached", func(ctx context.Context, add *delta.Add, at []int64) ([]Row, error) {
			// The file kept open, its footer parsed, as the engine's
			// FileCache keeps a table's files.
			rf.points = cache
			defer func() { rf.points = nil }()
			return rf.readRowsAtPages(ctx, add, at, nil)
		}},
		{"row-groups", rf.readRowsAtGroups},
	} {
		b.Run(prefix+path.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				got, err := path.read(ctx, add, at)
				if err != nil || len(got) != len(at) {
					b.Fatalf("%d rows, err %v", len(got), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(at)), "ns/row")
			b.ReportMetric(float64(add.Size), "file-bytes")
		})
	}
}

// TestMergeOnReadFileCodecs: a merge-on-read data file stores its
// fixed-width source columns uncompressed and its text and engine
// columns with MergeOnReadCodec (LZ4_RAW), its text in pages of at most
// MergeOnReadTextPageRows rows.
func TestMergeOnReadFileCodecs(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	rf, err := NewParquetRowFiles(store, scaleLayout, MergeOnReadFileOptions(scaleLayout)...)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]Row, 3000)
	for i := range rows {
		rows[i] = Row{Values: scaleValues(int64(i), 1), Seq: pgSeq(1), SourceTsMicros: 5, AppliedMicros: 1}
	}
	add, err := rf.WriteRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.Read(ctx, add.Path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]format.CompressionCodec{
		"id": format.Uncompressed, "customer_id": format.Uncompressed, "amount": format.Uncompressed,
		"quantity": format.Uncompressed, "created_at": format.Uncompressed, "updated_at": format.Uncompressed,
		"flag": format.Uncompressed, "status": format.Lz4Raw, "note": format.Lz4Raw, "region": format.Lz4Raw,
		ColSeq: format.Lz4Raw, ColDeleted: format.Lz4Raw, ColSourceTs: format.Lz4Raw, ColAppliedAt: format.Lz4Raw,
	}
	cols := pf.Schema().Columns()
	if len(cols) != len(want) {
		t.Fatalf("%d columns, want %d", len(cols), len(want))
	}
	for _, rg := range pf.Metadata().RowGroups {
		for c, cc := range rg.Columns {
			if w, ok := want[cols[c][0]]; !ok || cc.MetaData.Codec != w {
				t.Fatalf("column %s: codec %v, want %v", cols[c][0], cc.MetaData.Codec, w)
			}
		}
	}
	// Text pages end at MergeOnReadTextPageRows rows; the short text
	// columns would otherwise fill a 32 KiB page with all 3,000.
	textPages := 0
	for k, oi := range pf.OffsetIndexes() {
		c := k % len(cols)
		if pf.Schema().Columns()[c][0] == "id" || pf.Metadata().RowGroups[k/len(cols)].Columns[c].MetaData.Type != format.ByteArray {
			continue
		}
		locs := oi.PageLocations
		for p := range locs {
			end := pf.Metadata().RowGroups[k/len(cols)].NumRows
			if p+1 < len(locs) {
				end = locs[p+1].FirstRowIndex
			}
			if rows := end - locs[p].FirstRowIndex; rows > MergeOnReadTextPageRows {
				t.Fatalf("column %s: a text page of %d rows, want at most %d", cols[c][0], rows, MergeOnReadTextPageRows)
			}
			textPages++
		}
	}
	if min := 4 * (len(rows) / MergeOnReadTextPageRows); textPages < min {
		t.Fatalf("%d text pages in 4 text columns of %d rows, want at least %d", textPages, len(rows), min)
	}
}

// wholeStore hides a storage's range reads: every read is of a whole file.
type wholeStore struct{ storage.Storage }

// TestKeyIndexBuildReadsOnlyKeyColumns: a key index build reads the key,
// sequence and deleted columns of each file through the storage's range
// reads, a fraction of a file whose other column is wide, and builds the
// same index as a storage that reads whole files.
func TestKeyIndexBuildReadsOnlyKeyColumns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := &countingStore{Storage: storage.NewLocal(dir)}
	a := NewTableApplier("orders", "p", delta.Open(store), func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(refLayout); err != nil {
		t.Fatal(err)
	}
	letters := rand.New(rand.NewPCG(3, 4))
	const n = 20000
	changes := make([]*Change, n)
	for i := range changes {
		wide := make([]byte, 300)
		for j := range wide {
			wide[j] = byte('a' + letters.IntN(26))
		}
		changes[i] = refChange(int64(i), uint64(i+1), "c", string(wide), int64(i))
	}
	if _, err := a.Apply(ctx, &Batch{Changes: changes, Read: n, Ranges: rng(0, n)}); err != nil {
		t.Fatal(err)
	}
	files, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".parquet") {
			size += f.Size
		}
	}
	store.bytes.Store(0)
	ix, err := BuildKeyIndex(ctx, refLayout, a.Snapshot(), mustRowFiles(t, store, refLayout))
	if err != nil {
		t.Fatal(err)
	}
	if read := store.bytes.Load(); read == 0 || read > size/4 {
		t.Fatalf("the build read %d bytes of %d bytes of data files: want under a quarter", read, size)
	}
	whole := wholeStore{storage.NewLocal(dir)}
	ref, err := BuildKeyIndex(ctx, refLayout, a.Snapshot(), mustRowFiles(t, whole, refLayout))
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != n || ref.Len() != n {
		t.Fatalf("indexes hold %d and %d keys, want %d", ix.Len(), ref.Len(), n)
	}
	for i := range n {
		key := EncodeKey([]schema.Value{schema.Int(int64(i)), schema.Null}, refLayout.Key)
		got, ok1 := ix.lookup(key)
		want, ok2 := ref.lookup(key)
		if !ok1 || !ok2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("key %d: %+v %v, whole-file build %+v %v", i, got, ok1, want, ok2)
		}
	}
}

func mustRowFiles(t *testing.T, st storage.Storage, l *Layout) RowFiles {
	t.Helper()
	rf, err := NewParquetRowFiles(st, l)
	if err != nil {
		t.Fatal(err)
	}
	return rf
}

// scaleRowFiles returns merge-on-read row files of the scale table's
// layout on store and 100k rows of it.
func scaleRowFiles(b *testing.B, store storage.Storage) (*ParquetRowFiles, []Row) {
	b.Helper()
	rf, err := NewParquetRowFiles(store, scaleLayout, MergeOnReadFileOptions(scaleLayout)...)
	if err != nil {
		b.Fatal(err)
	}
	rows := make([]Row, 100_000)
	for i := range rows {
		rows[i] = Row{Values: scaleValues(int64(i), 1), Seq: pgSeq(1), AppliedMicros: 1}
	}
	return rf, rows
}

// BenchmarkWriteRowsMergeOnRead writes the 100k rows BenchmarkReadRowsAt
// reads, as the engine writes a merge-on-read batch's new file (rows to
// Arrow, encoding, a local file), each file deleted once written:
//
//	go test ./apply -run XXX -bench WriteRowsMergeOnRead -count 6
func BenchmarkWriteRowsMergeOnRead(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	rf, rows := scaleRowFiles(b, storage.NewLocal(dir))
	n := len(rows)
	var size int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			b.Fatal(err)
		}
		size = add.Size
		if err := os.Remove(filepath.Join(dir, add.Path)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
	b.ReportMetric(float64(size), "file-bytes")
}
