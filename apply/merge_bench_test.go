package apply

import (
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/google/uuid"
)

// pgSeq is an 18-byte sequence key shaped like PostgreSQL's
// (lastCommitLsn, lsn): a presence byte and eight bytes for each.
func pgSeq(v uint64) []byte {
	b := make([]byte, 0, 18)
	b = append(b, 1)
	b = binary.BigEndian.AppendUint64(b, v)
	b = append(b, 1)
	return binary.BigEndian.AppendUint64(b, v)
}

// genRowFiles is a table held nowhere: ReadRows makes a file's rows on
// demand (fresh allocations, as a real read does), so what stays live
// after a key index is built is the index alone.
type genRowFiles struct {
	perFile int
}

func (g genRowFiles) ReadRows(ctx context.Context, add *delta.Add) ([]Row, error) {
	f, err := strconv.Atoi(add.Path)
	if err != nil {
		return nil, err
	}
	rows := make([]Row, g.perFile)
	vals := make([]schema.Value, 2*g.perFile)
	for i := range rows {
		id := int64(f*g.perFile + i)
		rows[i].Values = vals[2*i : 2*i+2 : 2*i+2]
		rows[i].Values[0], rows[i].Values[1] = schema.Int(id), schema.String("status")
		rows[i].Seq = pgSeq(uint64(id) + 1)
	}
	return rows, nil
}

func (g genRowFiles) WriteRows(ctx context.Context, rows []Row) (*delta.Add, error) {
	return nil, fmt.Errorf("genRowFiles is read-only")
}

// genSnapshot is a snapshot of files "0".."files-1" (a real log in a temp
// directory, one commit), read by genRowFiles.
func genSnapshot(b testing.TB, files int) *delta.Snapshot {
	b.Helper()
	ctx := context.Background()
	tbl := delta.Open(storage.NewLocal(b.TempDir()))
	tx := tbl.Begin(nil)
	schemaString, err := delta.SchemaString(refLayout.Schema())
	if err != nil {
		b.Fatal(err)
	}
	tx.SetProtocol(tableProtocol)
	tx.SetMetadata(delta.Metadata{ID: uuid.NewString(), Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString: schemaString, PartitionColumns: []string{}, Configuration: map[string]string{}})
	for f := 0; f < files; f++ {
		tx.Add(&delta.Add{Path: strconv.Itoa(f), PartitionValues: map[string]*string{}, Size: 1, ModificationTime: 1, DataChange: true})
	}
	c, err := tx.Commit(ctx, "WRITE", nil)
	if err != nil {
		b.Fatal(err)
	}
	return c.Snapshot
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkKeyIndex builds the key index of a table of 1M keys (integer
// keys, 18-byte PostgreSQL-shaped sequences) from rows made in memory, and
// reports the heap the finished index holds per key and the build time per
// key. Rows are generated, not decoded, so this is the index's own cost.
func BenchmarkKeyIndex(b *testing.B) {
	const files, perFile = 100, 10_000
	const keys = files * perFile
	ctx := context.Background()
	snap := genSnapshot(b, files)
	rf := genRowFiles{perFile: perFile}
	var bytesPerKey float64
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		cpu0 := cpuTime()
		ix, err := BuildKeyIndex(ctx, refLayout, snap, rf)
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - cpu0
		b.StopTimer()
		after := heapInUse()
		if ix.Len() != keys {
			b.Fatalf("index holds %d keys, want %d", ix.Len(), keys)
		}
		bytesPerKey = float64(after-before) / keys
		runtime.KeepAlive(ix)
		b.StartTimer()
	}
	b.ReportMetric(bytesPerKey, "bytes/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/keys, "cpu-ns/key")
}

// BenchmarkKeyIndexBuildPeak builds the key index of a 10M-key table
// (integer keys, 18-byte sequences, rows made in memory, files without
// row counts so nothing is reserved) and reports the heap's peak while it
// builds, over what the heap held before, sampled every 2 ms, and what
// the finished index holds. Growth that copies a buffer holds both
// copies until the collector frees the old one: the peak, not the index,
// is what a memory limit must leave room for.
//
//	go test ./apply -run XXX -bench KeyIndexBuildPeak -benchtime 1x -count 3
func BenchmarkKeyIndexBuildPeak(b *testing.B) {
	const files, perFile = 1000, 10_000
	ctx := context.Background()
	snap := genSnapshot(b, files)
	rf := genRowFiles{perFile: perFile}
	var peakMiB, liveMiB float64
	for b.Loop() {
		var ix *KeyIndex
		var err error
		peak, live := heapPeak(func() { ix, err = BuildKeyIndex(ctx, refLayout, snap, rf) })
		if err != nil {
			b.Fatal(err)
		}
		if ix.Len() != files*perFile {
			b.Fatalf("index holds %d keys, want %d", ix.Len(), files*perFile)
		}
		peakMiB, liveMiB = float64(peak)/(1<<20), float64(live)/(1<<20)
		runtime.KeepAlive(ix)
	}
	b.ReportMetric(peakMiB, "peak-MiB")
	b.ReportMetric(liveMiB, "live-MiB")
}

// heapPeak runs fn and returns the heap's peak while it ran (sampled every
// 2 ms) and what the heap held after it and a collection, both over what
// the heap held before.
func heapPeak(fn func()) (peak, live uint64) {
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	metrics.Read(heap)
	base := heap[0].Value.Uint64()
	var top atomic.Uint64
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		s := []metrics.Sample{{Name: heap[0].Name}}
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > top.Load() {
				top.Store(v)
			}
		}
	}()
	fn()
	close(done)
	<-sampled
	runtime.GC()
	metrics.Read(heap)
	return top.Load() - min(base, top.Load()), heap[0].Value.Uint64() - min(base, heap[0].Value.Uint64())
}

// cpuTime is the process's user plus system CPU time: on a machine shared
// with other work, wall time measures the neighbours as much as the code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The scale benchmark's table: an integer key and nine columns of the
// usual kinds, as the 10-column workload.
var scaleLayout = func() *Layout {
	l, err := NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: false},
		{Name: "customer_id", Type: delta.Long, Nullable: true},
		{Name: "status", Type: delta.String, Nullable: true},
		{Name: "amount", Type: delta.Double, Nullable: true},
		{Name: "quantity", Type: delta.Integer, Nullable: true},
		{Name: "note", Type: delta.String, Nullable: true},
		{Name: "created_at", Type: delta.Timestamp, Nullable: true},
		{Name: "updated_at", Type: delta.Timestamp, Nullable: true},
		{Name: "flag", Type: delta.Boolean, Nullable: true},
		{Name: "region", Type: delta.String, Nullable: true},
	}, []string{"id"})
	if err != nil {
		panic(err)
	}
	return l
}()

var scaleStatuses = []string{"new", "paid", "shipped", "delivered", "returned"}
var scaleRegions = []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south"}

func scaleValues(id int64, version uint64) []schema.Value {
	return []schema.Value{
		schema.Int(id), schema.Int(id % 9973), schema.String(scaleStatuses[(uint64(id)+version)%5]),
		schema.Float(float64(id%100000) / 100), schema.Int(int64(version % 50)),
		schema.String(fmt.Sprintf("order %d version %d", id, version)),
		schema.Int(1_700_000_000_000_000 + id), schema.Int(1_700_000_000_000_000 + id + int64(version)),
		schema.Bool(id%2 == 0), schema.String(scaleRegions[id%5]),
	}
}

const scalePerFile = 100_000

// scaleTable returns the directory of a cached table of n rows (keys
// 0..n-1, sequence 1, files of 100k rows), building it on first use under
// .cache/bench/ at the repository root. The cache is never written after
// it is complete: runs work on hard-linked copies (cloneTable).
//
// rowGroup > 0 writes Parquet row groups of that many rows (what a
// merge-on-read engine writes), cached apart from the one-group files.
func scaleTable(b *testing.B, n int, rowGroup int64) string {
	b.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".cache", "bench", "merge-scale"))
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("rows-%d-v1", n)
	var opts []datafile.WriteOption
	if rowGroup > 0 {
		// v5: byte arrays PLAIN (datafile.PlainValues), pages cut by bytes
		// and text pages by rows (datafile.TextPageRows), fixed-width
		// source columns raw (datafile.RawFixedWidth).
		name = fmt.Sprintf("rows-%d-rg%d-p%d-t%d-%s-v5", n, rowGroup, MergeOnReadPageBytes, MergeOnReadTextPageRows, MergeOnReadCodec)
		opts = MergeOnReadFileOptions(scaleLayout)
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "_delta_log")); err == nil {
		return dir
	}
	ctx := context.Background()
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	tmp, err := os.MkdirTemp(root, "building-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	store := storage.NewLocal(tmp)
	rf, err := NewParquetRowFiles(store, scaleLayout, opts...)
	if err != nil {
		b.Fatal(err)
	}
	started := time.Now()
	tx := delta.Open(store).Begin(nil)
	schemaString, err := delta.SchemaString(scaleLayout.Schema())
	if err != nil {
		b.Fatal(err)
	}
	tx.SetProtocol(tableProtocol)
	tx.SetMetadata(delta.Metadata{ID: uuid.NewString(), Name: "orders", Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString: schemaString, PartitionColumns: []string{},
		Configuration: map[string]string{keyColumnsProperty: keyColumnsValue(scaleLayout.KeyNames())}})
	seq := pgSeq(1)
	rows := make([]Row, 0, scalePerFile)
	for from := 0; from < n; from += scalePerFile {
		rows = rows[:0]
		for id := from; id < min(from+scalePerFile, n); id++ {
			rows = append(rows, Row{Values: scaleValues(int64(id), 1), Seq: seq, SourceTsMicros: 1_700_000_000_000_000, AppliedMicros: 1_700_000_000_000_000})
		}
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			b.Fatal(err)
		}
		tx.Add(add)
	}
	if _, err := tx.Commit(ctx, "WRITE", nil); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		b.Fatal(err)
	}
	b.Logf("built the %d-row table in %s", n, time.Since(started).Round(time.Millisecond))
	return dir
}

// cloneTable hard-links every file of a cached table into a fresh
// directory beside it (same file system). Data files are never written
// in place and log files are replaced by rename, so the cache is safe.
func cloneTable(b *testing.B, src string) string {
	b.Helper()
	dst, err := os.MkdirTemp(filepath.Dir(src), "run-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dst) })
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return os.Link(p, filepath.Join(dst, rel))
	})
	if err != nil {
		b.Fatal(err)
	}
	return dst
}

// scaleBatch is one batch of changes into a table of keys 0..n-1: 80%
// full-image updates of distinct random existing keys, 20% inserts of new keys
// (from next on), at sequence seq, as one Kafka partition's range.
//
// With stored, one change in five is a delete and one an update whose
// note column is unavailable (a TOAST placeholder): both need the stored
// row's values, which merge-on-read reads from the data files.
func scaleBatch(rng *rand.Rand, n int, size int, next *int64, seq uint64, off int64, stored bool) *Batch {
	changes := make([]*Change, 0, size)
	s := pgSeq(seq)
	picked := make(map[int64]bool, size)
	for i := 0; i < size; i++ {
		var id int64
		if i%5 == 4 {
			id = *next
			*next++
		} else {
			for id = rng.Int64N(int64(n)); picked[id]; id = rng.Int64N(int64(n)) {
			}
			picked[id] = true
		}
		c := &Change{Seq: s, Pos: Position{"orders", 0, off + int64(i)}, SourceTsMicros: 1_700_000_000_000_000 + int64(seq),
			Values: scaleValues(id, seq)}
		switch {
		case stored && i%5 == 1:
			c.Delete = true
			for j := range c.Values {
				if j != scaleLayout.Key[0] {
					c.Values[j] = schema.Unavailable
				}
			}
		case stored && i%5 == 2:
			c.Values[5] = schema.Unavailable
		}
		c.Key = EncodeKey(c.Values, scaleLayout.Key)
		changes = append(changes, c)
	}
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	return &Batch{Changes: changes, Read: size,
		Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: off, Next: off + int64(size)}}}
}

func scaleLargeRows(b *testing.B) int {
	if v := os.Getenv("CDCAPPLY_BENCH_LARGE_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("CDCAPPLY_BENCH_LARGE_ROWS=%q: not a positive row count", v)
		}
		return n
	}
	return 10_000_000
}

// openScale opens an applier on a fresh clone of the cached n-row table.
func openScale(b *testing.B, n int, mode string) *TableApplier {
	b.Helper()
	m, _ := scaleMode(mode)
	var rowGroup int64
	var opts []datafile.WriteOption
	if m == MergeOnRead { // as the engine writes merge-on-read tables
		rowGroup = MergeOnReadRowGroupRows
		opts = MergeOnReadFileOptions(scaleLayout)
	}
	dir := cloneTable(b, scaleTable(b, n, rowGroup))
	store := storage.NewLocal(dir)
	// The engine's caches (engine.go): data files kept open for stored
	// rows, deletion vectors kept for the next batch's union.
	points, vectors := datafile.NewFileCache(pointFilesOpen), newVectorCache()
	b.Cleanup(func() { points.Close() })
	newFiles := func(l *Layout) (RowFiles, error) {
		rf, err := NewParquetRowFiles(store, l, opts...)
		if err != nil {
			return nil, err
		}
		rf.points, rf.vectors = points, vectors
		return rf, nil
	}
	a := NewTableApplier("orders", "bench", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.SetMergeMode(m); err != nil {
		b.Fatal(err)
	}
	started := time.Now()
	if err := a.Open(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Logf("opened the %d-row table (key index built) in %s", n, time.Since(started).Round(time.Millisecond))
	return a
}

// BenchmarkMergeScale is the scale figure of issue 5: the same kind of
// 10k-change batch (80% updates of random existing keys, 20% new keys)
// applied to a 100k-row table and to a 10M-row table (files of 100k rows;
// CDCAPPLY_BENCH_LARGE_ROWS overrides the large size), one of each per
// iteration, in copy-on-write and merge-on-read; merge-on-read-stored
// makes 20% of each batch deletes and 20% updates with a TOAST
// placeholder, so merge-on-read also reads stored rows. It reports the wall and CPU time of each apply (plan, data
// files, commit) and their ratios; opening the tables is not timed. On a
// shared machine the CPU figures are the steadier ones.
//
//	go test ./apply/ -run XXX -bench BenchmarkMergeScale -benchtime 3x
func BenchmarkMergeScale(b *testing.B) {
	for _, mode := range scaleModes {
		b.Run(mode, func(b *testing.B) {
			const small, batch = 100_000, 10_000
			large := scaleLargeRows(b)
			ctx := context.Background()
			as, al := openScale(b, small, mode), openScale(b, large, mode)
			rng := rand.New(rand.NewPCG(5, 5))
			nextS, nextL := int64(small), int64(large)
			var tSmall, tLarge, cSmall, cLarge time.Duration
			var filesSmall, filesLarge int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq, off := uint64(i+2), int64(i*batch)
				_, stored := scaleMode(mode)
				bs := scaleBatch(rng, small, batch, &nextS, seq, off, stored)
				bl := scaleBatch(rng, large, batch, &nextL, seq, off, stored)
				started, cpu0 := time.Now(), cpuTime()
				rs, err := as.Apply(ctx, bs)
				if err != nil {
					b.Fatal(err)
				}
				tSmall += time.Since(started)
				cSmall += cpuTime() - cpu0
				started, cpu0 = time.Now(), cpuTime()
				rl, err := al.Apply(ctx, bl)
				if err != nil {
					b.Fatal(err)
				}
				tLarge += time.Since(started)
				cLarge += cpuTime() - cpu0
				if rs.Counts.Update+rs.Counts.Insert+rs.Counts.Delete+rs.Counts.Revive != batch || rl.Counts.Update+rl.Counts.Insert+rl.Counts.Delete+rl.Counts.Revive != batch {
					b.Fatalf("counts small %+v large %+v, want %d rows each", rs.Counts, rl.Counts, batch)
				}
				filesSmall += rs.Files.Added + rs.Files.Removed
				filesLarge += rl.Files.Added + rl.Files.Removed
			}
			b.ReportMetric(float64(tSmall.Nanoseconds())/float64(b.N), "ns/batch-100k")
			b.ReportMetric(float64(tLarge.Nanoseconds())/float64(b.N), fmt.Sprintf("ns/batch-%s", rowsLabel(large)))
			b.ReportMetric(float64(tLarge)/float64(tSmall), "large/small")
			b.ReportMetric(float64(cSmall.Nanoseconds())/float64(b.N), "cpu-ns/batch-100k")
			b.ReportMetric(float64(cLarge.Nanoseconds())/float64(b.N), fmt.Sprintf("cpu-ns/batch-%s", rowsLabel(large)))
			b.ReportMetric(float64(cLarge)/float64(cSmall), "cpu-large/small")
			b.ReportMetric(float64(filesSmall)/float64(b.N), "actions/batch-100k")
			b.ReportMetric(float64(filesLarge)/float64(b.N), fmt.Sprintf("actions/batch-%s", rowsLabel(large)))
		})
	}
}

func rowsLabel(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return strconv.Itoa(n)
}

// BenchmarkOpenIndex opens cached tables of the scale layout: snapshot
// plus key index built from the data files, what an engine's start, a
// resync or a rebuild waits for. "1M": ten files of 100k rows, one row
// group each; "10M-merge-on-read": a hundred files of 100k rows written
// as merge-on-read writes them (row groups of 8192 rows, 32 KiB pages).
//
//	go test ./apply -run XXX -bench OpenIndex -benchtime 3x -count 6
func BenchmarkOpenIndex(b *testing.B) {
	for _, tc := range []struct {
		name     string
		n        int
		rowGroup int64
		opts     []datafile.WriteOption
	}{
		{"1M", 1_000_000, 0, nil},
		{"10M-merge-on-read", 10_000_000, MergeOnReadRowGroupRows, MergeOnReadFileOptions(scaleLayout)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := scaleTable(b, tc.n, tc.rowGroup)
			store := storage.NewLocal(dir)
			newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l, tc.opts...) }
			ctx := context.Background()
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := NewTableApplier("orders", "bench", delta.Open(store), newFiles, []string{"id"}, nil)
				cpu0 := cpuTime()
				if err := a.Open(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - cpu0
				if a.index.Len() != tc.n {
					b.Fatalf("index holds %d keys, want %d", a.index.Len(), tc.n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tc.n), "ns/key")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(tc.n), "cpu-ns/key")
		})
	}
}

// scaleModes are the merge modes BenchmarkMergeScale compares; the
// "-stored" variant's batches have deletes and TOAST placeholders.
var scaleModes = []string{string(CopyOnWrite), string(MergeOnRead), string(MergeOnRead) + "-stored"}

// scaleMode splits a scaleModes name into the merge mode and whether the
// batches need stored values.
func scaleMode(name string) (MergeMode, bool) {
	m, stored := strings.CutSuffix(name, "-stored")
	return MergeMode(m), stored
}

// scaleIndex returns the cached index of keys 0..n-1 (the scale layout,
// one sequence), building it on first use.
func scaleIndex(b *testing.B, n int) *KeyIndex {
	if ix := lookupIndexes[n]; ix != nil {
		return ix
	}
	ix := NewKeyIndex(scaleLayout)
	ix.reserve(n)
	seq := pgSeq(1)
	for i := 0; i < n; i++ {
		if err := ix.upsert(EncodeKey(scaleValues(int64(i), 1), scaleLayout.Key), seq, false, 0, int64(i%100_000)); err != nil {
			b.Fatal(err)
		}
	}
	lookupIndexes[n] = ix
	return ix
}

// lookupIndexes caches the indexes scaleIndex builds, one per size, so
// -count repeats measure lookups, not builds (BenchmarkKeyIndexApply adds
// keys past 2^40 and rewrites sequences in place: the others' lookups are
// unchanged).
var lookupIndexes = map[int]*KeyIndex{}

// BenchmarkKeyIndexLookup measures what a batch pays per changed key in
// the index: a find plus the entry's state, on indexes of 100k and 10M
// keys (the scale benchmark's sizes). Keys are drawn at random, so the
// large index pays its cache and TLB misses as a real batch does.
//
//	go test ./apply -run XXX -bench KeyIndexLookup -count 6
func BenchmarkKeyIndexLookup(b *testing.B) {
	for _, n := range []int{100_000, 10_000_000} {
		b.Run(rowsLabel(n), func(b *testing.B) {
			ix := scaleIndex(b, n)
			rng := rand.New(rand.NewPCG(7, 7))
			keys := make([]string, 1<<16)
			for i := range keys {
				keys[i] = EncodeKey(scaleValues(rng.Int64N(int64(n)), 1), scaleLayout.Key)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e, ok := ix.lookup(keys[i&(len(keys)-1)])
				if !ok || len(e.seq) == 0 {
					b.Fatal("key not found")
				}
			}
		})
	}
}

// BenchmarkKeyIndexUpsert measures the index's upkeep after a commit
// (KeyIndex.Apply) per key: upserting 1M keys into an index reserved for
// them, first as new keys, then again as updates of the same keys.
//
//	go test ./apply -run XXX -bench KeyIndexUpsert -count 6
func BenchmarkKeyIndexUpsert(b *testing.B) {
	const n = 1_000_000
	keys := randomKeys(n, 3)
	seq := pgSeq(1)
	var insert, update time.Duration
	for b.Loop() {
		b.StopTimer()
		ix := NewKeyIndex(scaleLayout)
		ix.reserve(n)
		b.StartTimer()
		t0 := time.Now()
		for i, k := range keys {
			if err := ix.upsert(k, seq, false, 0, int64(i%100_000)); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for i, k := range keys {
			if err := ix.upsert(k, seq, i%2 == 0, 1, int64(i%100_000)); err != nil {
				b.Fatal(err)
			}
		}
		insert, update = insert+t1.Sub(t0), update+time.Since(t1)
		if ix.Len() != n {
			b.Fatalf("index holds %d keys, want %d", ix.Len(), n)
		}
	}
	b.ReportMetric(float64(insert.Nanoseconds())/float64(b.N*n), "insert-ns/key")
	b.ReportMetric(float64(update.Nanoseconds())/float64(b.N*n), "update-ns/key")
}

// randomKeys is n keys of random ids in the scale table's layout.
func randomKeys(n int, seed uint64) []string {
	keys := make([]string, n)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range keys {
		keys[i] = EncodeKey(scaleValues(rng.Int64(), 1), scaleLayout.Key)
	}
	return keys
}

// BenchmarkKeyIndexGrow measures inserting 1M keys into an index that
// was not reserved for them, as a table's first load through Kafka grows
// it: the slot table doubles from 16 slots twenty times.
//
//	go test ./apply -run XXX -bench KeyIndexGrow -count 6
func BenchmarkKeyIndexGrow(b *testing.B) {
	const n = 1_000_000
	keys := randomKeys(n, 4)
	seq := pgSeq(1)
	for b.Loop() {
		ix := NewKeyIndex(scaleLayout)
		for i, k := range keys {
			if err := ix.upsert(k, seq, false, 0, int64(i%100_000)); err != nil {
				b.Fatal(err)
			}
		}
		if ix.Len() != n {
			b.Fatalf("index holds %d keys, want %d", ix.Len(), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}

// BenchmarkLookupAll measures a batch's index lookups (lookupAll, as
// PlanBatch makes them) per key: 10k reduced keys, 80% held by the index
// and 20% new, each winner a change allocated on its own as routing
// allocates them, on indexes of 100k and 10M keys.
//
//	go test ./apply -run XXX -bench LookupAll -count 6
func BenchmarkLookupAll(b *testing.B) {
	for _, n := range []int{100_000, 10_000_000} {
		b.Run(rowsLabel(n), func(b *testing.B) {
			ix := scaleIndex(b, n)
			rng := rand.New(rand.NewPCG(9, 9))
			const batch = 10_000
			reduced := make([]Reduced, batch)
			for i := range reduced {
				k := rng.Int64N(int64(n))
				if i%5 == 4 {
					k = int64(n) + rng.Int64N(int64(n)) // not in the index
				}
				reduced[i].Winner = &Change{Key: EncodeKey(scaleValues(k, 1), scaleLayout.Key)}
			}
			b.ResetTimer()
			for b.Loop() {
				found := ix.lookupAll(reduced)
				held := 0
				for _, f := range found {
					if f.ok {
						held++
					}
				}
				if held < batch*3/4 || held > batch*4/5 {
					b.Fatalf("%d of %d keys found", held, batch)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
		})
	}
}

// BenchmarkKeyIndexApply measures the index's upkeep after a commit
// (KeyIndex.Apply) per pending entry, as a 10k-change batch leaves it: 80%
// keys planning found (their entries known), 20% new keys, on indexes of
// 100k and 10M keys. Each iteration's new keys are new again.
//
//	go test ./apply -run XXX -bench KeyIndexApply -count 6
func BenchmarkKeyIndexApply(b *testing.B) {
	for _, n := range []int{100_000, 10_000_000} {
		b.Run(rowsLabel(n), func(b *testing.B) {
			ix := scaleIndex(b, n)
			rng := rand.New(rand.NewPCG(11, 11))
			const batch = 10_000
			seq := pgSeq(2) // the length of the stored sequences: updated in place
			next := int64(1 << 40)
			var pending time.Duration
			for b.Loop() {
				b.StopTimer()
				p := newPlan()
				p.pending = make([]pendingEntry, batch)
				for i := range p.pending {
					pe := &p.pending[i]
					pe.seq, pe.file, pe.row = seq, 0, int64(i)
					if i%5 == 4 {
						pe.key = EncodeKey(scaleValues(next, 1), scaleLayout.Key) // never in the bench's indexes
						next++
						continue
					}
					k := EncodeKey(scaleValues(rng.Int64N(int64(n)), 1), scaleLayout.Key)
					at, ok := ix.find(k)
					if !ok {
						b.Fatalf("key %q not in the index", k)
					}
					pe.key, pe.entry = k, at+1
				}
				b.StartTimer()
				t0 := time.Now()
				if err := ix.Apply(p); err != nil {
					b.Fatal(err)
				}
				pending += time.Since(t0)
			}
			b.ReportMetric(float64(pending.Nanoseconds())/float64(b.N*batch), "ns/entry")
		})
	}
}

// BenchmarkRefreshAfterPurge is a stream's table after another writer's
// purge-shaped commit: one 100k-row file of a 1M-row table (the scale
// table, ten files; CDCAPPLY_BENCH_REFRESH_ROWS overrides the size)
// rewritten without 1,000 of its rows. "catch-up" is Refresh (the key
// index reads the one new file and drops the 1,000 keys); "rebuild" is
// what Refresh did before the catch-up existed, the table reopened and
// its index built again from every file. "catch-up-most" and
// "rebuild-most" follow a purge of most of the table instead: nine files
// in ten removed whole. Each reports the wall and CPU time, the bytes
// allocated, the heap's peak over the heap before (which holds the
// applier's index), and the index's slot table after.
//
//	go test ./apply -run XXX -bench RefreshAfterPurge -benchtime 3x -count 6
func BenchmarkRefreshAfterPurge(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("CDCAPPLY_BENCH_REFRESH_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2*scalePerFile {
			b.Fatalf("CDCAPPLY_BENCH_REFRESH_ROWS=%q: want a row count of at least %d", v, 2*scalePerFile)
		}
	}
	ctx := context.Background()
	src := scaleTable(b, n, 0)
	for _, how := range []string{"catch-up", "rebuild", "catch-up-most", "rebuild-most"} {
		most := strings.HasSuffix(how, "-most")
		purged := 1_000
		if most {
			purged = n - n/10
		}
		b.Run(how, func(b *testing.B) {
			var cpu time.Duration
			var allocated, peak uint64
			var slots int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				store := storage.NewLocal(cloneTable(b, src))
				newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
				a := NewTableApplier("orders", "bench", delta.Open(store), newFiles, []string{"id"}, nil)
				if err := a.Open(ctx); err != nil {
					b.Fatal(err)
				}
				if most {
					purgeFiles(b, store, a.Snapshot(), purged/scalePerFile)
				} else {
					purgeShaped(b, store, a.Snapshot(), purged)
				}
				var ms0, ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				b.StartTimer()
				cpu0 := cpuTime()
				var err error
				p, _ := heapPeak(func() {
					if !strings.HasPrefix(how, "rebuild") {
						var r *Refreshed
						if r, err = a.Refresh(ctx); err == nil && (r == nil || r.Rebuilt) {
							err = fmt.Errorf("refresh %+v: not a catch-up", r)
						}
						return
					}
					err = a.reopenKeeping(ctx)
				})
				cpu += cpuTime() - cpu0
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				if err != nil {
					b.Fatal(err)
				}
				if a.index.Len() != n-purged {
					b.Fatalf("index holds %d keys after the purge, want %d", a.index.Len(), n-purged)
				}
				allocated += ms1.TotalAlloc - ms0.TotalAlloc
				peak = max(peak, p)
				slots = len(a.index.slots)
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(allocated)/float64(b.N)/(1<<20), "alloc-MiB/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(slots*8)/(1<<20), "slots-MiB")
		})
	}
}

// purgeFiles commits, as another writer, the removal of the first k files
// of snap (a purge that found nothing but tombstones in them).
func purgeFiles(b *testing.B, store storage.Storage, snap *delta.Snapshot, k int) {
	b.Helper()
	tx := delta.Open(store).Begin(snap)
	for _, add := range snap.Files()[:k] {
		tx.RemoveFile(add, true)
	}
	if _, err := tx.Commit(context.Background(), "DELETE", nil); err != nil {
		b.Fatal(err)
	}
}

// purgeShaped commits, as another writer, the first file of snap
// rewritten without its first n rows.
func purgeShaped(b *testing.B, store storage.Storage, snap *delta.Snapshot, n int) {
	b.Helper()
	ctx := context.Background()
	rf, err := NewParquetRowFiles(store, scaleLayout)
	if err != nil {
		b.Fatal(err)
	}
	old := snap.Files()[0]
	rows, err := rf.ReadRows(ctx, old)
	if err != nil {
		b.Fatal(err)
	}
	add, err := rf.WriteRows(ctx, rows[n:])
	if err != nil {
		b.Fatal(err)
	}
	tx := delta.Open(store).Begin(snap)
	tx.RemoveFile(old, true)
	tx.Add(add)
	if _, err := tx.Commit(ctx, "DELETE", nil); err != nil {
		b.Fatal(err)
	}
}
