package datafile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// flatLayout has a column of every type the direct reader decodes.
func flatLayout() Layout {
	return Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: false},
		{Name: "i", Type: delta.Integer, Nullable: true},
		{Name: "s", Type: delta.String, Nullable: true},
		{Name: "b", Type: delta.Binary, Nullable: true},
		{Name: "f", Type: delta.Float, Nullable: true},
		{Name: "d", Type: delta.Double, Nullable: true},
		{Name: "ok", Type: delta.Boolean, Nullable: true},
		{Name: "m", Type: delta.DecimalType{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "big", Type: delta.DecimalType{Precision: 30, Scale: 4}, Nullable: true},
		{Name: "ts", Type: delta.Timestamp, Nullable: true},
		{Name: "day", Type: delta.Date, Nullable: true},
		{Name: "gone", Type: delta.String, Nullable: true}, // NULL in every row
	}}, NumIndexedCols: 32}
}

// flatRecord fills flatLayout's columns with n rows whose NULLs come in
// every pattern the definition levels encode: scattered (bit-packed
// runs), long runs of NULLs and of values (RLE runs), none, all.
func flatRecord(t testing.TB, l Layout, n int) arrow.RecordBatch {
	t.Helper()
	sc, err := ArrowSchema(l.Schema)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	for i := range n {
		null := func(k int) bool { return i%k == 0 || (i >= 3000 && i < 3700) }
		b.Field(0).(*array.Int64Builder).Append(int64(i) * 3)
		if null(7) {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.Int32Builder).Append(int32(-i))
		}
		if null(5) {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), i%13)))
		}
		if i%2 == 1 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.BinaryBuilder).Append([]byte{byte(i), byte(i >> 8), 0})
		}
		b.Field(4).(*array.Float32Builder).Append(float32(i) / 4)
		if null(3) {
			b.Field(5).AppendNull()
		} else {
			b.Field(5).(*array.Float64Builder).Append(float64(i) * 1.5)
		}
		if null(11) {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.BooleanBuilder).Append(i%3 == 1)
		}
		b.Field(7).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i)*100 - 7))
		if null(4) {
			b.Field(8).AppendNull()
		} else {
			b.Field(8).(*array.Decimal128Builder).Append(decimal128.FromI64(-int64(i) * 1_000_003))
		}
		b.Field(9).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(i) * 1_000_001))
		b.Field(10).(*array.Date32Builder).Append(arrow.Date32(i % 20000))
		b.Field(11).AppendNull()
	}
	return b.NewRecordBatch()
}

// readBothWays reads rows with the direct reader and with parquet-go's
// page path, checks both agree, and returns the values with how many
// column chunks the direct reader served.
func readBothWays(t *testing.T, st storage.Storage, l Layout, add *delta.Add, rows []int64) ([][]schema.Value, int64) {
	t.Helper()
	direct, served := readDirect(t, st, l, add, rows)
	directPages = false
	defer func() { directPages = true }()
	viaPQ, err := ReadValuesAt(context.Background(), st, l, add, rows)
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, l, rows, direct, viaPQ, "parquet-go")
	return direct, served
}

// readDirect reads rows with ReadValuesAt and returns the values with how
// many column chunks the direct reader served.
func readDirect(t *testing.T, st storage.Storage, l Layout, add *delta.Add, rows []int64) ([][]schema.Value, int64) {
	t.Helper()
	before := directChunksRead.Load()
	got, err := ReadValuesAt(context.Background(), st, l, add, rows)
	if err != nil {
		t.Fatal(err)
	}
	return got, directChunksRead.Load() - before
}

// sameValues fails unless got and want (ReadValuesAt's columns of rows)
// are equal.
func sameValues(t *testing.T, l Layout, rows []int64, got, want [][]schema.Value, of string) {
	t.Helper()
	for c := range want {
		for k := range rows {
			if !reflect.DeepEqual(got[c][k], want[c][k]) {
				t.Fatalf("%s, row %d: direct %v, %s %v", l.Schema.Fields[c].Name, rows[k], got[c][k], of, want[c][k])
			}
		}
	}
}

// readLz4Checked reads rows of an LZ4_RAW file, which only the direct
// reader reads (ReadValuesAt declines LZ4 chunks to parquet-go's page
// path), and checks them against the same rows of twin, the same record
// written uncompressed and read both ways.
func readLz4Checked(t *testing.T, st storage.Storage, l Layout, add, twin *delta.Add, rows []int64) ([][]schema.Value, int64) {
	t.Helper()
	got, served := readDirect(t, st, l, add, rows)
	want, _ := readBothWays(t, st, l, twin, rows)
	sameValues(t, l, rows, got, want, "uncompressed twin")
	directPages = false
	defer func() { directPages = true }()
	if _, err := ReadValuesAt(context.Background(), st, l, add, rows); !errors.Is(err, ErrNoPointRead) {
		t.Fatalf("parquet-go's page path on an LZ4 file: %v, want ErrNoPointRead", err)
	}
	return got, served
}

func sampleRows(n int, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, seed))
	rows := []int64{0, 1, 2999, 3000, 3001, 3699, 3700}
	for i := int64(3701); i < int64(n); i++ {
		if rng.IntN(40) == 0 {
			rows = append(rows, i)
		}
	}
	return append(rows, int64(n-1))
}

// TestReadValuesAtDirect: files we write PLAIN (merge-on-read's options,
// Snappy, LZ4_RAW or uncompressed, in small pages and several row groups) are
// read by the direct page reader, with the values parquet-go's page path
// reads and the values written: from Local's memory mapping and with
// ReadAt.
func TestReadValuesAtDirect(t *testing.T) {
	for _, codec := range []Codec{Snappy, Lz4Raw, Uncompressed} {
		for _, mapped := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/mapped=%v", codec, mapped), func(t *testing.T) {
				testReadValuesAtDirect(t, codec, mapped)
			})
		}
	}
}

// unmapped is a storage whose files hide their mapping, so that pages are
// read with ReadAt.
type unmapped struct{ *storage.Local }

func (u unmapped) Open(ctx context.Context, p string) (storage.File, error) {
	f, err := u.Local.Open(ctx, p)
	return struct{ storage.File }{f}, err
}

func testReadValuesAtDirect(t *testing.T, codec Codec, mapped bool) {
	const n = 10_000
	local := storage.NewLocal(t.TempDir())
	var st storage.Storage = unmapped{local}
	if mapped {
		st = local
	}
	l := flatLayout()
	add, err := Write(context.Background(), st, l, flatRecord(t, l, n), nil, PlainValues(), Compression(codec), PageBytes(512), RowGroupRows(4096))
	if err != nil {
		t.Fatal(err)
	}
	read := func(rows []int64) ([][]schema.Value, int64) { return readBothWays(t, st, l, add, rows) }
	if codec == Lz4Raw {
		twin, err := Write(context.Background(), st, l, flatRecord(t, l, n), nil, PlainValues(), Compression(Uncompressed), PageBytes(512), RowGroupRows(4096))
		if err != nil {
			t.Fatal(err)
		}
		read = func(rows []int64) ([][]schema.Value, int64) { return readLz4Checked(t, st, l, add, twin, rows) }
	}
	f, err := storage.Open(context.Background(), st, add.Path)
	if err != nil {
		t.Fatal(err)
	}
	m, isMapped := f.(storage.Mapped)
	if isMapped = isMapped && m.Mapped() != nil; isMapped != mapped {
		t.Fatalf("file mapped: %v, want %v", isMapped, mapped)
	}
	f.Close()
	rows := sampleRows(n, 1)
	got, served := read(rows)
	// 12 columns, 3 row groups, each holding rows asked for.
	if served != 36 {
		t.Fatalf("the direct reader served %d of the 36 column chunks", served)
	}
	for k, r := range rows {
		i := int(r)
		wantS := schema.String(fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), i%13)))
		if i%5 == 0 || (i >= 3000 && i < 3700) {
			wantS = schema.Null
		}
		if got[0][k] != schema.Int(r*3) || !reflect.DeepEqual(got[2][k], wantS) || got[11][k] != schema.Null {
			t.Fatalf("row %d: id %v s %v gone %v, want %d %v NULL", r, got[0][k], got[2][k], got[11][k], r*3, wantS)
		}
	}
}

// TestReadValuesAtDirectDeclines: a file in DELTA_LENGTH_BYTE_ARRAY (our
// copy-on-write files), zstd or with dictionaries is read by parquet-go's
// page path, with the same values.
func TestReadValuesAtDirectDeclines(t *testing.T) {
	const n = 5000
	st := storage.NewLocal(t.TempDir())
	l := flatLayout()
	add, err := Write(context.Background(), st, l, flatRecord(t, l, n), nil, Compression(Snappy), PageBytes(512), RowGroupRows(4096))
	if err != nil {
		t.Fatal(err)
	}
	rows := sampleRows(n, 2)
	_, served := readBothWays(t, st, l, add, rows)
	// The three byte array columns are declined, the others PLAIN: 9
	// columns in 2 row groups.
	if served != 18 {
		t.Fatalf("the direct reader served %d column chunks, want 18", served)
	}
	zadd, err := Write(context.Background(), st, l, flatRecord(t, l, n), nil, PlainValues(), PageBytes(512))
	if err != nil {
		t.Fatal(err)
	}
	if _, served := readBothWays(t, st, l, zadd, rows); served != 0 {
		t.Fatalf("the direct reader read %d pages of a zstd file", served)
	}
}

// TestReadValuesAtDirectOtherWriter reads a file arrow-go wrote with
// version 2 data pages, PLAIN values, Snappy and required columns (no
// definition levels), alongside dictionary-encoded columns it declines.
func TestReadValuesAtDirectOtherWriter(t *testing.T) {
	const n = 6000
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: false},
		{Name: "s", Type: delta.String, Nullable: false},
		{Name: "o", Type: delta.String, Nullable: true},
		{Name: "dict", Type: delta.String, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, _ := ArrowSchema(l.Schema)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("s%d", i))
		if i%3 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("o%d", i))
		}
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("d%d", i%4))
	}
	rec := b.NewRecordBatch()
	props := parquet.NewWriterProperties(parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithDataPageSize(300),
		parquet.WithMaxRowGroupLength(2500), parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false),
		parquet.WithDictionaryFor("dict", true), parquet.WithEncoding(parquet.Encodings.Plain), parquet.WithStats(true), parquet.WithPageIndexEnabled(true))
	data, err := arrowGoFile(rec, props)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	if err := st.Write(ctx, "other.parquet", data); err != nil {
		t.Fatal(err)
	}
	add := &delta.Add{Path: "other.parquet", Size: int64(len(data))}
	rows := sampleRows(n, 3)
	got, served := readBothWays(t, st, l, add, rows)
	// id, s and o in 3 row groups; dict is declined.
	if served != 9 {
		t.Fatalf("the direct reader served %d column chunks, want 9", served)
	}
	for k, r := range rows {
		want := []schema.Value{schema.Int(r), schema.String(fmt.Sprintf("s%d", r)), schema.String(fmt.Sprintf("o%d", r)), schema.String(fmt.Sprintf("d%d", r%4))}
		if r%3 == 0 {
			want[2] = schema.Null
		}
		for c := range want {
			if !reflect.DeepEqual(got[c][k], want[c]) {
				t.Fatalf("row %d column %s: %v, want %v", r, l.Schema.Fields[c].Name, got[c][k], want[c])
			}
		}
	}
}

// FuzzDirectPage feeds arbitrary bytes to the page header parser and the
// definition level counter: an error, never a panic or a hang.
func FuzzDirectPage(f *testing.F) {
	f.Add([]byte{0x15, 0x06, 0x15, 0x80, 0x01, 0x15, 0x40, 0x5c, 0x15, 0x02, 0x00}, 5)
	f.Add([]byte{0x03, 0x01, 0x04, 0x00}, 20)
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		_, _, _ = parsePageHeader(b)
		if i >= 0 {
			c := defCursor{rest: b}
			_, _, _ = c.at(i / 2)
			_, _, _ = c.at(i)
		}
		for _, k := range []pq.Kind{pq.Boolean, pq.Int32, pq.Int64, pq.ByteArray, pq.FixedLenByteArray, pq.Double} {
			pg := directPage{rows: 1 << 20, defs: b, values: b, levels: defCursor{rest: b}}
			_, _ = pg.at(max(i, 0)%pg.rows/2, k, 3)
			_, _ = pg.at(max(i, 0)%pg.rows, k, 3)
		}
	})
}

// TestPagesCutByBytes: a wide text column's pages end near PageBytes,
// not every 1024 values (parquet-go's cut when handed a group at once),
// so a point read decompresses little more than a page's worth.
func TestPagesCutByBytes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storage.NewLocal(dir)
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: true},
		{Name: "doc", Type: delta.String, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, _ := ArrowSchema(l.Schema)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	const n, width, page = 5000, 300, 4096
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%0*d", width, i))
	}
	add, err := Write(ctx, st, l, b.NewRecordBatch(), nil, PlainValues(), Compression(Uncompressed), PageBytes(page), RowGroupRows(3000))
	if err != nil {
		t.Fatal(err)
	}
	pf := openWritten(t, st, add)
	docPages := 0
	for g, oi := range pf.OffsetIndexes() {
		if g%2 != 1 { // the doc column's chunks
			continue
		}
		for _, loc := range oi.PageLocations {
			docPages++
			// A page is cut once parquet-go's count of its values passes
			// page bytes (the count leaves out PLAIN's length prefixes,
			// and up to a quarter page is handed over at once): within
			// twice page bytes, where a cut every 1024 values would make
			// 300 KiB pages.
			if loc.CompressedPageSize > 2*page+width+200 {
				t.Fatalf("a doc page of %d bytes; pages are cut at %d", loc.CompressedPageSize, page)
			}
		}
	}
	if min := n * width / (2 * page); docPages < min {
		t.Fatalf("%d doc pages for %d values of %d bytes, want at least %d", docPages, n, width, min)
	}
	got, err := ReadValuesAt(ctx, st, l, add, []int64{0, 2999, 3000, 4999})
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range []int{0, 2999, 3000, 4999} {
		if want := schema.String(fmt.Sprintf("%0*d", width, r)); !reflect.DeepEqual(got[1][k], want) {
			t.Fatalf("row %d: %v", r, got[1][k])
		}
	}
}

// TestRawFixedWidth: with RawFixedWidth the named fixed-width columns'
// chunks are uncompressed, and the byte array columns and the columns not
// named keep the file's codec; the
// direct reader reads every chunk, with parquet-go's values, and a whole
// read gives back the record written.
func TestRawFixedWidth(t *testing.T) {
	const n = 10_000
	ctx := context.Background()
	st, l, rec := flatFile(t, n)
	add, err := Write(ctx, st, l, rec, nil, PlainValues(), RawFixedWidth("id", "i", "s", "f", "d", "ok", "m", "big", "ts"), Compression(Snappy), PageBytes(512), RowGroupRows(4096))
	if err != nil {
		t.Fatal(err)
	}
	pf := openWritten(t, st, add)
	for g, rg := range pf.Metadata().RowGroups {
		for c, cc := range rg.Columns {
			want := format.Uncompressed
			switch pf.Schema().Columns()[c][0] {
			case "s", "b", "gone", "day": // byte arrays, and a column not named
				want = format.Snappy
			}
			if cc.MetaData.Codec != want {
				t.Fatalf("row group %d, column %v: codec %v, want %v", g, cc.MetaData.PathInSchema, cc.MetaData.Codec, want)
			}
		}
	}
	_, served := readBothWays(t, st, l, add, sampleRows(n, 3))
	servedAllAndReadsBack(t, st, l, add, rec, served)
}

// flatFile returns local storage, flatLayout and n rows of flatRecord,
// held until the test ends.
func flatFile(t *testing.T, n int) (storage.Storage, Layout, arrow.RecordBatch) {
	t.Helper()
	l := flatLayout()
	rec := flatRecord(t, l, n)
	rec.Retain()
	t.Cleanup(rec.Release)
	return storage.NewLocal(t.TempDir()), l, rec
}

// servedAllAndReadsBack fails unless the direct reader served all 36
// column chunks of a flatLayout file of three row groups and a whole read
// of the file gives back rec.
func servedAllAndReadsBack(t *testing.T, st storage.Storage, l Layout, add *delta.Add, rec arrow.RecordBatch, served int64) {
	t.Helper()
	if served != 36 {
		t.Fatalf("the direct reader served %d of the 36 column chunks", served)
	}
	back, err := Read(context.Background(), st, l, add)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Release()
	if !array.RecordEqual(back, rec) {
		t.Fatal("the file read back differs from the record written")
	}
}

// openWritten opens the data file of add with parquet-go, for tests that
// look at how it was written.
func openWritten(t testing.TB, st storage.Storage, add *delta.Add) *pq.File {
	t.Helper()
	data, err := st.Read(context.Background(), add.Path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

// TestTextPageRows: with TextPageRows(n) every byte array column's pages
// hold at most n rows and the fixed-width columns' pages are still cut by
// bytes only; the direct reader reads every chunk, with the values of the
// record written uncompressed (read both ways), and a whole read gives
// back the record written.
func TestTextPageRows(t *testing.T) {
	const n, rows = 10_000, 37
	ctx := context.Background()
	st, l, rec := flatFile(t, n)
	opts := []WriteOption{PlainValues(), TextPageRows(rows), PageBytes(4096), RowGroupRows(4096)}
	add, err := Write(ctx, st, l, rec, nil, append(opts, Compression(Lz4Raw))...)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := Write(ctx, st, l, rec, nil, append(opts, Compression(Uncompressed))...)
	if err != nil {
		t.Fatal(err)
	}
	pf := openWritten(t, st, add)
	cols := pf.Schema().Columns()
	groups := pf.Metadata().RowGroups
	for k, oi := range pf.OffsetIndexes() {
		g, c := k/len(cols), k%len(cols)
		locs := oi.PageLocations
		longest := int64(0)
		for p := range locs {
			end := groups[g].NumRows
			if p+1 < len(locs) {
				end = locs[p+1].FirstRowIndex
			}
			longest = max(longest, end-locs[p].FirstRowIndex)
		}
		switch cols[c][0] {
		case "s", "b", "gone": // byte arrays
			if longest > rows {
				t.Fatalf("row group %d, column %s: a page of %d rows, want at most %d", g, cols[c][0], longest, rows)
			}
		case "id", "d", "ts": // 8 bytes a value: about 512 a page
			if longest <= 4*rows {
				t.Fatalf("row group %d, column %s: pages of at most %d rows: fixed-width pages were bounded by rows", g, cols[c][0], longest)
			}
		}
	}
	_, served := readLz4Checked(t, st, l, add, twin, sampleRows(n, 5))
	servedAllAndReadsBack(t, st, l, add, rec, served)
}
