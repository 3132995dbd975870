package datafile

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pq "github.com/parquet-go/parquet-go"
	pqsnappy "github.com/parquet-go/parquet-go/compress/snappy"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/cdcapply/cdcapply/bench/wordtext"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/heapprobe"
)

// benchRows is the size of one benchmark batch: a typical micro-batch.
const benchRows = 100_000

// benchLayout is the 10-column row of the benchmarks: a CDC-style table
// with keys, strings, a timestamp, a decimal and a flag.
func benchLayout() Layout {
	return Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long},
		{Name: "account", Type: delta.Integer, Nullable: true},
		{Name: "seq", Type: delta.Long, Nullable: true},
		{Name: "name", Type: delta.String, Nullable: true},
		{Name: "city", Type: delta.String, Nullable: true},
		{Name: "updated_at", Type: delta.Timestamp, Nullable: true},
		{Name: "amount", Type: delta.DecimalType{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "deleted", Type: delta.Boolean, Nullable: true},
		{Name: "score", Type: delta.Double, Nullable: true},
		{Name: "note", Type: delta.String, Nullable: true},
	}}, NumIndexedCols: 32}
}

var cities = []string{"Lisbon", "Osaka", "Quito", "Tromsø", "Accra", "Perth", "Lyon", "Austin"}

func benchRecord(tb testing.TB, n int) arrow.RecordBatch {
	sc, err := ArrowSchema(benchLayout().Schema)
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i) * 7919)
		b.Field(1).(*array.Int32Builder).Append(int32(i % 5000))
		b.Field(2).(*array.Int64Builder).Append(int64(i) + 1_000_000)
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("customer-%07d", i))
		b.Field(4).(*array.StringBuilder).Append(cities[i%len(cities)])
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(base + int64(i)*1234))
		b.Field(6).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i%100000) * 37))
		b.Field(7).(*array.BooleanBuilder).Append(i%17 == 0)
		b.Field(8).(*array.Float64Builder).Append(float64(i) / 7)
		if i%4 == 0 {
			b.Field(9).AppendNull()
		} else {
			b.Field(9).(*array.StringBuilder).Append("note " + cities[(i/3)%len(cities)])
		}
	}
	return b.NewRecordBatch()
}

// cpuTime is the process's user+system CPU time. The benchmarks report
// rows per CPU second next to rows per wall second because the machines
// they run on are shared: CPU time hardly moves with the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds rows/s and rows/cpu-s for rows rows per iteration.
func report(b *testing.B, rows int, cpuStart time.Duration) {
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	if cpu := cpuTime() - cpuStart; cpu > 0 {
		b.ReportMetric(float64(rows*b.N)/cpu.Seconds(), "rows/cpu-s")
	}
}

// discard is storage that keeps nothing, so write benchmarks measure
// encoding and stats, not the disk.
type discard struct{ storage.Storage }

func (discard) WriteIfAbsent(context.Context, string, []byte) error { return nil }

// BenchmarkWrite measures Write (Parquet encoding with parquet-go, plus
// stats) in rows per second, with each codec in parquet-go's default 256
// KiB pages, and as merge-on-read files are written: LZ4_RAW in 32 KiB
// pages, byte arrays PLAIN. Those go to a storage that keeps nothing,
// except merge-on-read/local: a local directory, each file deleted once
// written (the system's page cache then reuses its pages), fsync included.
func BenchmarkWrite(b *testing.B) {
	mor := []WriteOption{Compression(Lz4Raw), PageBytes(32 << 10), PlainValues()}
	for _, c := range []struct {
		name  string
		opts  []WriteOption
		local bool
	}{
		{string(Zstd), []WriteOption{Compression(Zstd)}, false},
		{string(Snappy), []WriteOption{Compression(Snappy)}, false},
		{string(Lz4Raw), []WriteOption{Compression(Lz4Raw)}, false},
		{"merge-on-read", mor, false},
		{"merge-on-read/local", mor, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			rec := benchRecord(b, benchRows)
			defer rec.Release()
			l := benchLayout()
			ctx := context.Background()
			var st storage.Storage = discard{}
			dir := b.TempDir()
			if c.local {
				st = storage.NewLocal(dir)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				add, err := Write(ctx, st, l, rec, nil, c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if c.local {
					if err := os.Remove(filepath.Join(dir, add.Path)); err != nil {
						b.Fatal(err)
					}
				}
			}
			report(b, benchRows, cpu0)
		})
	}
}

// BenchmarkWriteParquetGo encodes the same record with parquet-go (its
// row API and its column-buffer API) and no stats: the comparison that
// decided which library writes our files (see design-notes).
func BenchmarkWriteParquetGo(b *testing.B) {
	rec := benchRecord(b, benchRows)
	defer rec.Release()
	for _, codec := range []Codec{Zstd, Snappy} {
		for _, mode := range []string{"rows", "columns"} {
			b.Run(string(codec)+"/"+mode, func(b *testing.B) {
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if _, err := encodeParquetGo(rec, codec, mode == "columns"); err != nil {
						b.Fatal(err)
					}
				}
				report(b, benchRows, cpu0)
			})
		}
	}
	for _, codec := range []Codec{Zstd, Snappy} {
		b.Run("pqarrow/"+string(codec), func(b *testing.B) {
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				rec.Retain()
				if _, err := encodePqarrow(rec, writeOptions{codec: codec, rowGroup: 1 << 20}); err != nil {
					b.Fatal(err)
				}
			}
			report(b, benchRows, cpu0)
		})
		b.Run("datafile/"+string(codec), func(b *testing.B) {
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				rec.Retain()
				if err := encodeParquetTo(new(bytes.Buffer), rec, writeOptions{codec: codec, rowGroup: 1 << 20}); err != nil {
					b.Fatal(err)
				}
			}
			report(b, benchRows, cpu0)
		})
	}
}

// BenchmarkRead measures Read of one 100k-row file in rows per second.
func BenchmarkRead(b *testing.B) {
	rec := benchRecord(b, benchRows)
	defer rec.Release()
	st := storage.NewLocal(b.TempDir())
	l := benchLayout()
	ctx := context.Background()
	add, err := Write(ctx, st, l, rec, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		out, err := Read(ctx, st, l, add)
		if err != nil {
			b.Fatal(err)
		}
		if out.NumRows() != benchRows {
			b.Fatalf("read %d rows", out.NumRows())
		}
		out.Release()
	}
	report(b, benchRows, cpu0)
}

// encodeParquetGo writes rec (the bench layout, flat columns only) with
// parquet-go, converting Arrow values to parquet.Value one by one, which
// is what its API takes for a schema known only at run time.
func encodeParquetGo(rec arrow.RecordBatch, codec Codec, columnar bool) ([]byte, error) {
	group := pq.Group{}
	for i, f := range rec.Schema().Fields() {
		var n pq.Node
		switch f.Type.ID() {
		case arrow.INT64:
			n = pq.Leaf(pq.Int64Type)
		case arrow.INT32:
			n = pq.Leaf(pq.Int32Type)
		case arrow.STRING:
			n = pq.String()
		case arrow.TIMESTAMP:
			n = pq.TimestampAdjusted(pq.Microsecond, true)
		case arrow.DECIMAL128:
			dt := f.Type.(*arrow.Decimal128Type)
			n = pq.Decimal(int(dt.Scale), int(dt.Precision), pq.Int64Type)
		case arrow.BOOL:
			n = pq.Leaf(pq.BooleanType)
		case arrow.FLOAT64:
			n = pq.Leaf(pq.DoubleType)
		default:
			return nil, fmt.Errorf("column %d: %s not in the benchmark", i, f.Type)
		}
		group[f.Name] = pq.Optional(n)
	}
	sc := pq.NewSchema("delta", group)
	leaf := make([]int, rec.NumCols())
	for i, f := range rec.Schema().Fields() {
		lc, _ := sc.Lookup(f.Name)
		leaf[i] = lc.ColumnIndex
	}
	value := func(c, i int) pq.Value {
		col := rec.Column(c)
		if col.IsNull(i) {
			return pq.Value{}.Level(0, 0, leaf[c])
		}
		var v pq.Value
		switch a := col.(type) {
		case *array.Int64:
			v = pq.Int64Value(a.Value(i))
		case *array.Int32:
			v = pq.Int32Value(a.Value(i))
		case *array.String:
			v = pq.ByteArrayValue([]byte(a.Value(i)))
		case *array.Timestamp:
			v = pq.Int64Value(int64(a.Value(i)))
		case *array.Decimal128:
			v = pq.Int64Value(int64(a.Value(i).LowBits()))
		case *array.Boolean:
			v = pq.BooleanValue(a.Value(i))
		case *array.Float64:
			v = pq.DoubleValue(a.Value(i))
		}
		return v.Level(0, 1, leaf[c])
	}
	var cc pq.WriterOption = pq.Compression(&pqzstd.Codec{})
	if codec == Snappy {
		cc = pq.Compression(&pqsnappy.Codec{})
	}
	var out bytes.Buffer
	w := pq.NewWriter(&out, sc, cc)
	n := int(rec.NumRows())
	if columnar {
		buf := pq.NewBuffer(sc)
		cols := buf.ColumnBuffers()
		vals := make([]pq.Value, n)
		for c := 0; c < int(rec.NumCols()); c++ {
			for i := 0; i < n; i++ {
				vals[i] = value(c, i)
			}
			if _, err := cols[leaf[c]].WriteValues(vals); err != nil {
				return nil, err
			}
		}
		if _, err := w.WriteRowGroup(buf); err != nil {
			return nil, err
		}
	} else {
		const chunk = 1024
		rows := make([]pq.Row, 0, chunk)
		for start := 0; start < n; start += chunk {
			rows = rows[:0]
			for i := start; i < min(n, start+chunk); i++ {
				row := make(pq.Row, rec.NumCols())
				for c := range row {
					row[leaf[c]] = value(c, i)
				}
				rows = append(rows, row)
			}
			if _, err := w.WriteRows(rows); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// TestParquetGoEncoderIsFair checks the benchmark's parquet-go encoder
// writes the same rows as Write, so the comparison is of equal work.
func TestParquetGoEncoderIsFair(t *testing.T) {
	rec := benchRecord(t, 1000)
	defer rec.Release()
	l := benchLayout()
	for _, columnar := range []bool{false, true} {
		data, err := encodeParquetGo(rec, Zstd, columnar)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := ReadParquet(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Conform(raw, nil)
		raw.Release()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumCols()); i++ {
			if !array.Equal(got.Column(i), rec.Column(i)) {
				t.Errorf("columnar=%v: column %s differs", columnar, rec.ColumnName(i))
			}
		}
		got.Release()
	}
}

// encodePqarrow is the pqarrow writer Write used before the comparison
// below; it stays here as the other side of BenchmarkWriteParquetGo.
func encodePqarrow(rec arrow.RecordBatch, o writeOptions) ([]byte, error) {
	defer rec.Release()
	codec := compress.Codecs.Zstd
	switch o.codec {
	case Snappy:
		codec = compress.Codecs.Snappy
	case Uncompressed:
		codec = compress.Codecs.Uncompressed
	case Zstd:
	default:
		return nil, fmt.Errorf("unknown codec %q", o.codec)
	}
	props := parquet.NewWriterProperties(
		parquet.WithCompression(codec),
		// Decimals as INT32/INT64 up to precision 18, as the protocol maps them.
		parquet.WithStoreDecimalAsInteger(true),
		// Our own stats go to the log; Parquet page stats stay on for
		// engines that prune row groups.
		parquet.WithStats(true),
		parquet.WithCreatedBy("cdcapply"),
		parquet.WithMaxRowGroupLength(o.rowGroup),
	)
	return arrowGoFile(rec, props)
}

// arrowGoFile writes rec as a Parquet file with arrow-go's pqarrow writer
// and props: another writer's file, for the readers' tests.
func arrowGoFile(rec arrow.RecordBatch, props *parquet.WriterProperties) ([]byte, error) {
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, props, pqarrow.NewArrowWriterProperties())
	if err != nil {
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	if err := w.Write(rec); err != nil {
		w.Close()
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	return buf.Bytes(), nil
}

// BenchmarkReadColumns reads two of the ten columns (key and sequence),
// what the merge needs of a candidate file.
func BenchmarkReadColumns(b *testing.B) {
	rec := benchRecord(b, benchRows)
	defer rec.Release()
	st := storage.NewLocal(b.TempDir())
	l := benchLayout()
	ctx := context.Background()
	add, err := Write(ctx, st, l, rec, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		out, err := Read(ctx, st, l, add, Columns("id", "seq"))
		if err != nil {
			b.Fatal(err)
		}
		if out.NumRows() != benchRows || out.NumCols() != 2 {
			b.Fatalf("read %dx%d", out.NumRows(), out.NumCols())
		}
		out.Release()
	}
	report(b, benchRows, cpu0)
}

// BenchmarkReadValuesAt reads 1% and 0.05% of a 100k-row file's rows
// (random, ascending), as a merge-on-read batch's deletes ask, from files in
// merge-on-read's shape (8192-row groups, 32 KiB Snappy pages): PLAIN
// through the direct page reader and through parquet-go's page path, and
// the DELTA_LENGTH_BYTE_ARRAY file such tables had before (parquet-go);
// cached keeps the file open with its footer and offset indexes parsed
// (FileCache), as the engine does:
//
//	go test ./delta/datafile -run XXX -bench ReadValuesAt -count 6
func BenchmarkReadValuesAt(b *testing.B) {
	ctx := context.Background()
	st := storage.NewLocal(b.TempDir())
	l := flatLayout()
	const n = 100_000
	opts := []WriteOption{Compression(Snappy), PageBytes(32 << 10), RowGroupRows(8192)}
	plain, err := Write(ctx, st, l, flatRecord(b, l, n), nil, append(opts, PlainValues())...)
	if err != nil {
		b.Fatal(err)
	}
	deltaLength, err := Write(ctx, st, l, flatRecord(b, l, n), nil, opts...)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	// 1%: rows share pages; 0.05%: about one row per page, as a batch's
	// stored rows spread over a large table.
	for _, density := range []struct {
		name string
		one  int
	}{{"1pct", 100}, {"0.05pct", 2000}} {
		var at []int64
		for i := int64(0); i < n; i++ {
			if rng.IntN(density.one) == 0 {
				at = append(at, i)
			}
		}
		perColumn := make([][]int64, len(l.Schema.Fields))
		for c := range perColumn {
			perColumn[c] = at
		}
		for _, c := range []struct {
			name   string
			add    *delta.Add
			direct bool
			cache  *FileCache
		}{{"plain-direct", plain, true, nil}, {"plain-direct-cached", plain, true, NewFileCache(4)}, {"plain-parquet-go", plain, false, nil}, {"delta-length-parquet-go", deltaLength, false, nil}} {
			b.Run(density.name+"/"+c.name, func(b *testing.B) {
				directPages = c.direct
				defer func() { directPages = true }()
				defer c.cache.Close()
				for i := 0; i < b.N; i++ {
					got, err := c.cache.ReadColumnsAt(ctx, st, l, c.add, perColumn)
					if err != nil || len(got[0]) != len(at) {
						b.Fatalf("%d rows, err %v", len(got), err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(at)), "ns/row")
			})
		}
	}
}

// BenchmarkComputeStats measures the Delta stats of the benchmark record
// (what Write computes after encoding), per row.
func BenchmarkComputeStats(b *testing.B) {
	rec := benchRecord(b, benchRows)
	defer rec.Release()
	l := benchLayout()
	b.ResetTimer()
	for b.Loop() {
		if s := l.ComputeStats(rec); s.NumRecords != benchRows {
			b.Fatalf("stats of %d rows, want %d", s.NumRecords, benchRows)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
}

// BenchmarkWritePooled writes what a merge-on-read stream writes: mostly
// small files (a batch's changes, 1,000 rows) and now and then a large
// one (a compaction, 100,000 rows), 400 files in all. It reports the
// live heap the reuse pools hold afterwards, which must stay near the
// largest file's size rather than grow with how many buffers ever held
// one (the pools are process-wide: run it alone, -count for spread).
//
//	go test ./delta/datafile -run XXX -bench WritePooled -count 6
func BenchmarkWritePooled(b *testing.B) {
	big := benchRecord(b, benchRows)
	defer big.Release()
	small := big.NewSlice(0, 1000)
	defer small.Release()
	l := benchLayout()
	ctx := context.Background()
	opts := []WriteOption{Compression(Lz4Raw), PageBytes(32 << 10), PlainValues()}
	for b.Loop() {
		// Start from empty pools: two collections drop what they hold.
		runtime.GC()
		runtime.GC()
		before := liveHeap()
		for i := range 400 {
			rec := small
			if i%20 == 19 {
				rec = big
			}
			if _, err := Write(ctx, discard{}, l, rec, nil, opts...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(liveHeap()-before)/(1<<20), "pooled-MiB")
	}
}

// liveHeap is the heap reachable after one collection: the pools' buffers
// survive one (as their victim cache), so they are counted.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkWriteLargeFile writes a file of several row groups (a
// compaction's, say) to a local directory and reports the most heap the
// write held at once (peak-heap-MiB, sampled every 100 µs at GOGC=5)
// beside the file's size: a file streamed into storage holds about one
// row group's pages, not the whole file.
//
//	go test ./delta/datafile -run XXX -bench WriteLargeFile -count 6
func BenchmarkWriteLargeFile(b *testing.B) {
	rec := benchRecord(b, benchRows)
	defer rec.Release()
	l := benchLayout()
	ctx := context.Background()
	dir := b.TempDir()
	st := storage.NewLocal(dir)
	opts := []WriteOption{Compression(Lz4Raw), PageBytes(32 << 10), PlainValues(), RowGroupRows(benchRows / 8)}
	for b.Loop() {
		var add *delta.Add
		peak := heapprobe.PeakDuring(func() {
			var err error
			if add, err = Write(ctx, st, l, rec, nil, opts...); err != nil {
				b.Fatal(err)
			}
		})
		if err := os.Remove(filepath.Join(dir, add.Path)); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(add.Size)/(1<<20), "file-MiB")
	}
}

// docRecord is benchRecord with a doc column of 256 bytes of the bench's
// word text (bench/wordtext, as the workload generator writes it): its
// TOASTed column, which compresses about 1.8x with LZ4.
func docRecord(tb testing.TB, n int) (arrow.RecordBatch, Layout) {
	l := benchLayout()
	l.Schema.Fields = append(l.Schema.Fields, delta.StructField{Name: "doc", Type: delta.String, Nullable: true})
	sc, err := ArrowSchema(l.Schema)
	if err != nil {
		tb.Fatal(err)
	}
	base := benchRecord(tb, n)
	defer base.Release()
	db := array.NewStringBuilder(memory.DefaultAllocator)
	defer db.Release()
	var doc []byte
	for i := range n {
		doc = wordtext.Append(doc[:0], wordtext.Mix(uint64(i)), 256)
		db.Append(string(doc))
	}
	cols := append(append([]arrow.Array{}, base.Columns()...), db.NewArray())
	defer cols[len(cols)-1].Release()
	return array.NewRecordBatch(sc, cols, int64(n)), l
}

// BenchmarkWriteRowGroups writes a merge-on-read change batch's new file
// as the engine does (LZ4_RAW, 32 KiB pages, text pages of at most 256
// rows, 8192-row groups): 32,768 rows of the benchmark row plus a
// 256-byte text doc. It reports the cores the encoding kept busy
// (CPU-seconds per second): a row group's columns are encoded in
// parallel, and the doc column's chunk takes longer than all the others.
func BenchmarkWriteRowGroups(b *testing.B) {
	rec, l := docRecord(b, 32768)
	defer rec.Release()
	opts := []WriteOption{Compression(Lz4Raw), PageBytes(32 << 10), PlainValues(), RowGroupRows(8192), TextPageRows(256)}
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := Write(ctx, discard{}, l, rec, nil, opts...); err != nil {
			b.Fatal(err)
		}
	}
	report(b, 32768, cpu0)
	b.ReportMetric((cpuTime()-cpu0).Seconds()/b.Elapsed().Seconds(), "cores")
}
