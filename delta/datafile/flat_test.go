package datafile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// flatExtraLayout adds to flatLayout the types it lacks: small integers,
// a narrow decimal, and floats holding NaN, zeros of both signs and
// infinities (one column only NaN or NULL).
func flatExtraLayout() Layout {
	l := flatLayout()
	l.Schema.Fields = append(l.Schema.Fields,
		delta.StructField{Name: "i8", Type: delta.Byte, Nullable: true},
		delta.StructField{Name: "i16", Type: delta.Short, Nullable: true},
		delta.StructField{Name: "small", Type: delta.DecimalType{Precision: 9, Scale: 3}, Nullable: true},
		delta.StructField{Name: "odd", Type: delta.Double, Nullable: true},
		delta.StructField{Name: "nan", Type: delta.Float, Nullable: true},
		delta.StructField{Name: "zmin", Type: delta.Double, Nullable: true}, // least value zero
		delta.StructField{Name: "zmax", Type: delta.Double, Nullable: true}, // greatest value zero
	)
	return l
}

func flatExtraRecord(t testing.TB, n int) arrow.RecordBatch {
	base := flatRecord(t, flatLayout(), n)
	defer base.Release()
	sc, err := ArrowSchema(flatExtraLayout().Schema)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.DefaultAllocator
	i8, i16 := array.NewInt8Builder(mem), array.NewInt16Builder(mem)
	small := array.NewDecimal128Builder(mem, sc.Field(int(base.NumCols())+2).Type.(*arrow.Decimal128Type))
	odd, nan := array.NewFloat64Builder(mem), array.NewFloat32Builder(mem)
	zmin, zmax := array.NewFloat64Builder(mem), array.NewFloat64Builder(mem)
	neg := math.Copysign(0, -1)
	odds := []float64{math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), -2.5, 7}
	for i := range n {
		i8.Append(int8(i))
		if i%6 == 0 {
			i16.AppendNull()
		} else {
			i16.Append(int16(-i))
		}
		small.Append(decimal128.FromI64(int64(i*37 - 50_000)))
		odd.Append(odds[i%len(odds)])
		zmin.Append([]float64{0, 1, neg, 2}[i%4])
		zmax.Append([]float64{neg, -1, 0}[i%3])
		if i%2 == 0 {
			nan.AppendNull()
		} else {
			nan.Append(float32(math.NaN()))
		}
	}
	cols := append([]arrow.Array(nil), base.Columns()...)
	for _, b := range []array.Builder{i8, i16, small, odd, nan, zmin, zmax} {
		cols = append(cols, b.NewArray())
		b.Release()
	}
	return array.NewRecordBatch(sc, cols, int64(n))
}

// TestFlatWriterMatchesParquetGo writes the same records with the flat
// writer and with parquet-go (several codecs, small pages, several row
// groups, raw fixed-width columns, no rows, one row) and checks that
// arrow-go reads the same record from both, that parquet-go reads the
// flat file's footer as the one it writes (schema, column orders, types,
// codecs, counts, null counts), and that every bound the flat file gives
// (chunk statistics and the column index of every page) bounds the page's
// values, which parquet-go reads back page by page.
func TestFlatWriterMatchesParquetGo(t *testing.T) {
	ctx := context.Background()
	l := flatExtraLayout()
	for _, c := range []struct {
		name string
		n    int
		opts []WriteOption
	}{
		{"lz4", 10_000, []WriteOption{PlainValues(), Compression(Lz4Raw), PageBytes(512), RowGroupRows(4096), RawFixedWidth("id", "i", "m", "big", "s")}},
		{"snappy", 5000, []WriteOption{PlainValues(), Compression(Snappy), PageBytes(2048)}},
		{"uncompressed", 3000, []WriteOption{PlainValues(), Compression(Uncompressed), RowGroupRows(1000)}},
		{"seven groups", 7000, []WriteOption{PlainValues(), Compression(Lz4Raw), PageBytes(1024), RowGroupRows(1000)}}, // each slot of groups in flight reused
		{"zstd", 2000, []WriteOption{PlainValues(), Compression(Zstd)}},
		{"one row", 1, []WriteOption{PlainValues(), Compression(Lz4Raw)}},
		{"no rows", 0, []WriteOption{PlainValues(), Compression(Lz4Raw)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := storage.NewLocal(t.TempDir())
			rec := flatExtraRecord(t, c.n)
			defer rec.Release()
			if !flatWritable(rec, writeOptions{plain: true}) {
				t.Fatal("the test record is not one the flat writer writes")
			}
			write := func(flat bool) *delta.Add {
				flatWriter = flat
				defer func() { flatWriter = true }()
				rec.Retain()
				add, err := Write(ctx, st, l, rec, nil, c.opts...)
				if err != nil {
					t.Fatal(err)
				}
				return add
			}
			ours, theirs := write(true), write(false)
			got, err := Read(ctx, st, l, ours)
			if err != nil {
				t.Fatalf("arrow-go reads the flat file: %v", err)
			}
			defer got.Release()
			want, err := Read(ctx, st, l, theirs)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			if !array.RecordApproxEqual(got, want, array.WithNaNsEqual(true), array.WithAbsTolerance(0)) {
				t.Fatalf("the flat file reads back as\n%v\nparquet-go's as\n%v", got, want)
			}
			if ours.Stats != theirs.Stats {
				t.Errorf("stats %s, parquet-go's file %s", ours.Stats, theirs.Stats)
			}
			fo, fp := openPQ(t, st, ours), openPQ(t, st, theirs)
			mo, mp := fo.Metadata(), fp.Metadata()
			if !reflect.DeepEqual(mo.Schema, mp.Schema) || !reflect.DeepEqual(mo.ColumnOrders, mp.ColumnOrders) || mo.NumRows != mp.NumRows || mo.Version != mp.Version {
				t.Fatalf("footer: schema %+v orders %+v rows %d version %d\nparquet-go's: %+v %+v %d %d", mo.Schema, mo.ColumnOrders, mo.NumRows, mo.Version, mp.Schema, mp.ColumnOrders, mp.NumRows, mp.Version)
			}
			if len(mo.RowGroups) != len(mp.RowGroups) {
				t.Fatalf("%d row groups, parquet-go's %d", len(mo.RowGroups), len(mp.RowGroups))
			}
			for g := range mo.RowGroups {
				if mo.RowGroups[g].NumRows != mp.RowGroups[g].NumRows {
					t.Errorf("row group %d: %d rows, parquet-go's %d", g, mo.RowGroups[g].NumRows, mp.RowGroups[g].NumRows)
				}
				for k := range mo.RowGroups[g].Columns {
					a, b := mo.RowGroups[g].Columns[k].MetaData, mp.RowGroups[g].Columns[k].MetaData
					if a.Type != b.Type || a.Codec != b.Codec || a.NumValues != b.NumValues || !reflect.DeepEqual(a.PathInSchema, b.PathInSchema) || a.Statistics.NullCount != b.Statistics.NullCount {
						t.Errorf("row group %d column %v: type %v codec %v values %d nulls %d; parquet-go's %v %v %d %d", g, a.PathInSchema, a.Type, a.Codec, a.NumValues, a.Statistics.NullCount, b.Type, b.Codec, b.NumValues, b.Statistics.NullCount)
					}
				}
			}
			checkBounds(t, fo)
			checkZeroBounds(t, fo)
			// Byte array bounds in the column index are cut to 16 bytes,
			// as parquet-go cuts them (the strings run to 21 bytes).
			for g, rg := range fo.RowGroups() {
				for k, cc := range rg.ColumnChunks() {
					if ci, err := cc.ColumnIndex(); err == nil && cc.Type().Kind() == pq.ByteArray {
						for p := range ci.NumPages() {
							if l := max(len(ci.MinValue(p).ByteArray()), len(ci.MaxValue(p).ByteArray())); l > indexBoundBytes {
								t.Fatalf("row group %d column %d page %d: a %d-byte bound in the column index", g, k, p, l)
							}
						}
					}
				}
			}
		})
	}
}

func openPQ(t *testing.T, st storage.Storage, add *delta.Add) *pq.File {
	t.Helper()
	data, err := st.Read(context.Background(), add.Path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("parquet-go opens the file: %v", err)
	}
	return f
}

// checkBounds reads every page of f and checks the chunk statistics and
// the page's column index entry against its values.
func checkBounds(t *testing.T, f *pq.File) {
	t.Helper()
	for g, rg := range f.RowGroups() {
		for k, cc := range rg.ColumnChunks() {
			md := f.Metadata().RowGroups[g].Columns[k].MetaData
			typ := cc.Type()
			ci, ciErr := cc.ColumnIndex()
			pages := cc.Pages()
			p := 0
			for {
				page, err := pages.ReadPage()
				if err != nil {
					break
				}
				vals := make([]pq.Value, page.NumValues())
				n, _ := page.Values().ReadValues(vals)
				for _, v := range vals[:n] {
					if v.IsNull() || (v.Kind() == pq.Double && math.IsNaN(v.Double())) || (v.Kind() == pq.Float && math.IsNaN(float64(v.Float()))) {
						continue
					}
					if md.Statistics.MinValue != nil && (typ.Compare(v, typ.Kind().Value(md.Statistics.MinValue)) < 0 || typ.Compare(v, typ.Kind().Value(md.Statistics.MaxValue)) > 0) {
						t.Fatalf("row group %d column %v: %v outside the chunk's bounds", g, md.PathInSchema, v)
					}
					if ciErr == nil && (ci.NullPage(p) || typ.Compare(v, ci.MinValue(p)) < 0 || typ.Compare(v, ci.MaxValue(p)) > 0) {
						t.Fatalf("row group %d column %v page %d: %v outside the column index's bounds [%v, %v] (null page %v)", g, md.PathInSchema, p, v, ci.MinValue(p), ci.MaxValue(p), ci.NullPage(p))
					}
				}
				pq.Release(page)
				p++
			}
			pages.Close()
			if ciErr == nil && ci.NumPages() != p {
				t.Fatalf("row group %d column %v: column index of %d pages, %d read", g, md.PathInSchema, ci.NumPages(), p)
			}
			if oi, err := cc.OffsetIndex(); err != nil || oi.NumPages() != p {
				t.Fatalf("row group %d column %v: offset index %v (%v), %d pages read", g, md.PathInSchema, oi, err, p)
			}
		}
	}
}

// checkZeroBounds: a float bound that is zero is -0.0 when a minimum and
// +0.0 when a maximum (Parquet's rule, so that it bounds zeros of both
// signs), in the chunk statistics and in the column index.
func checkZeroBounds(t *testing.T, f *pq.File) {
	t.Helper()
	zero := func(b []byte, wantNeg bool) bool {
		if len(b) != 8 {
			return true
		}
		x := math.Float64frombits(binary.LittleEndian.Uint64(b))
		return x != 0 || math.Signbit(x) == wantNeg
	}
	for g, rg := range f.Metadata().RowGroups {
		for k, cc := range rg.Columns {
			md := cc.MetaData
			if md.Type != format.Double {
				continue
			}
			if !zero(md.Statistics.MinValue, true) || !zero(md.Statistics.MaxValue, false) {
				t.Errorf("row group %d column %v: zero bounds of the wrong sign: %x %x", g, md.PathInSchema, md.Statistics.MinValue, md.Statistics.MaxValue)
			}
			ci, err := f.RowGroups()[g].ColumnChunks()[k].ColumnIndex()
			if err != nil {
				continue
			}
			for p := range ci.NumPages() {
				if ci.NullPage(p) {
					continue
				}
				if lo, hi := ci.MinValue(p).Double(), ci.MaxValue(p).Double(); (lo == 0 && !math.Signbit(lo)) || (hi == 0 && math.Signbit(hi)) {
					t.Errorf("row group %d column %v page %d: zero bounds of the wrong sign: %v %v", g, md.PathInSchema, p, lo, hi)
				}
			}
		}
	}
}

// TestIndexBounds: a long byte array minimum is cut to its prefix, a long
// maximum to the shortest prefix raised past it (0xff bytes carry), and a
// maximum of only 0xff bytes in its first 16 stays whole.
func TestIndexBounds(t *testing.T) {
	long := []byte("abcdefghijklmnopqrstuvwxyz")
	ff := append(bytes.Repeat([]byte{0xff}, 16), 1)
	for _, c := range []struct {
		in, min, max []byte
	}{
		{[]byte("short"), []byte("short"), []byte("short")},
		{long, []byte("abcdefghijklmnop"), []byte("abcdefghijklmnoq")},
		{append([]byte("abcdefghijklmno"), 0xff, 0xff, 3), append([]byte("abcdefghijklmno"), 0xff), []byte("abcdefghijklmnp")},
		{ff, ff[:16], ff},
	} {
		if got := indexMin(c.in); !bytes.Equal(got, c.min) {
			t.Errorf("min of %q: %q, want %q", c.in, got, c.min)
		}
		got := indexMax(c.in)
		if !bytes.Equal(got, c.max) || bytes.Compare(got, c.in) < 0 {
			t.Errorf("max of %q: %q, want %q (at or above it)", c.in, got, c.max)
		}
	}
}

// failingCodec is LZ4_RAW that fails its fail-th page and after.
type failingCodec struct {
	lz4Raw
	pages, fail atomic.Int64
}

func (c *failingCodec) Encode(dst, src []byte) ([]byte, error) {
	if c.pages.Add(1) >= c.fail.Load() {
		return nil, errors.New("injected codec failure")
	}
	return c.lz4Raw.Encode(dst, src)
}

// TestFlatWriterChunkFailure checks a column chunk that fails in a later
// row group, while other groups are being encoded, fails the write with
// the column's name and leaves no encoding worker running.
func TestFlatWriterChunkFailure(t *testing.T) {
	rec := flatExtraRecord(t, 7000)
	defer rec.Release()
	o := writeOptions{plain: true, page: 1024, rowGroup: 1000, codec: Lz4Raw}
	root := make(group, 0, rec.NumCols())
	for _, f := range rec.Schema().Fields() {
		n, err := parquetNode(f)
		if err != nil {
			t.Fatal(err)
		}
		if n.Leaf() && n.Type().Kind() == pq.ByteArray {
			n = pq.Encoded(n, &pq.Plain)
		}
		root = append(root, field{Node: n, name: f.Name})
	}
	before := runtime.NumGoroutine()
	for _, fail := range []int64{1, 4, 9} { // the first group, a later one, the last ones
		bad := &failingCodec{}
		bad.fail.Store(fail)
		codecs := make([]compress.Codec, len(root))
		for i := range codecs {
			codecs[i] = &lz4Raw{}
		}
		const col = 3
		codecs[col] = bad
		var buf bytes.Buffer
		err := encodeFlat(&offsetWriter{w: &buf}, rec, root, codecs, o)
		if err == nil || !strings.Contains(err.Error(), "injected codec failure") || !strings.Contains(err.Error(), rec.ColumnName(col)) {
			t.Fatalf("page %d of column %s failing: the write returned %v", fail, rec.ColumnName(col), err)
		}
	}
	for range 100 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d goroutines after the failed writes, %d before: encoding workers left running", runtime.NumGoroutine(), before)
}
