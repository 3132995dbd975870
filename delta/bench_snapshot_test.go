package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// benchCkptTable writes a table of n files in one commit, with the adds a
// real writer produces (partition value, stats of four columns), loads it
// and writes its checkpoint. Checkpoints after commits are off so only the
// one written here exists.
func benchCkptTable(b *testing.B, n int) (storage.Storage, *Snapshot) {
	b.Helper()
	ctx := context.Background()
	store := storage.NewLocal(b.TempDir())
	created := int64(1_700_000_000_000)
	acts := []Action{
		{Protocol: &Protocol{MinReaderVersion: 1, MinWriterVersion: 2}},
		{Metadata: &Metadata{ID: "bench", Format: Format{Provider: "parquet", Options: map[string]string{}},
			SchemaString: `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},` +
				`{"name":"name","type":"string","nullable":true,"metadata":{}},{"name":"seq","type":"long","nullable":true,"metadata":{}},` +
				`{"name":"deleted","type":"boolean","nullable":true,"metadata":{}},{"name":"day","type":"string","nullable":true,"metadata":{}}]}`,
			PartitionColumns: []string{"day"}, CreatedTime: &created,
			Configuration: map[string]string{"delta.checkpointInterval": "1000000"}}},
	}
	for i := 0; i < n; i++ {
		day := fmt.Sprintf("2026-%02d-%02d", 1+i%12, 1+i%28)
		acts = append(acts, Action{Add: &Add{
			Path:            fmt.Sprintf("day=%s/part-%05d-6a3bd1c2-%012d.c000.snappy.parquet", day, i%1000, i),
			PartitionValues: map[string]*string{"day": &day}, Size: 1_000_000 + int64(i), ModificationTime: created + int64(i),
			DataChange: true,
			Stats: fmt.Sprintf(`{"numRecords":%d,"minValues":{"id":%d,"name":"a%d","seq":%d},"maxValues":{"id":%d,"name":"z%d","seq":%d},"nullCount":{"id":0,"name":0,"seq":0,"deleted":0}}`,
				1000+i%100, i*1000, i, i*7, i*1000+999, i, i*7+100),
		}})
	}
	for i := 0; i < 8; i++ {
		lu := created
		acts = append(acts, Action{Txn: &Txn{AppID: fmt.Sprintf("orders-%d", i), Version: int64(i * 1000), LastUpdated: &lu}})
	}
	data, err := EncodeActions(acts)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.WriteIfAbsent(ctx, fmt.Sprintf("%s/%020d.json", LogDir, 0), data); err != nil {
		b.Fatal(err)
	}
	snap, err := Open(store).Snapshot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := WriteCheckpoint(ctx, store, snap); err != nil {
		b.Fatal(err)
	}
	return store, snap
}

// processCPU is the CPU time the process has used. The benchmarks report
// it per operation next to wall time: on a shared machine wall time
// measures the neighbours as much as the code.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp runs b's loop body under a CPU clock and reports cpu-ms/op.
func cpuPerOp(b *testing.B, body func()) {
	b.ReportAllocs()
	start := processCPU()
	for i := 0; i < b.N; i++ {
		body()
	}
	b.ReportMetric(float64(processCPU()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkCheckpoint measures, for tables of 10k and 100k files:
//   - load: the whole snapshot load (listing, _last_checkpoint, the
//     checkpoint, replay) through Table.Snapshot,
//   - read: readCheckpoint alone (file read and column decoding),
//   - decode-reflect: parquet-go's reflection row reader over the same
//     file, for comparison with the column decoder readCheckpoint uses,
//   - encode: building and encoding the checkpoint Parquet (no I/O),
//   - encode-reflect: the same through parquet-go's reflection writer, for
//     comparison (10k only).
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			ctx := context.Background()
			store, snap := benchCkptTable(b, n)
			paths := []string{ckptClassicPath(0)}
			data, err := store.Read(ctx, paths[0])
			if err != nil {
				b.Fatal(err)
			}
			b.Run("load", func(b *testing.B) {
				cpuPerOp(b, func() {
					s, err := Open(store).Snapshot(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if s.NumFiles() != n || s.CheckpointVersion() != 0 {
						b.Fatalf("loaded %d files from checkpoint %d", s.NumFiles(), s.CheckpointVersion())
					}
				})
			})
			b.Run("read", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				cpuPerOp(b, func() {
					acts, err := readCheckpoint(ctx, store, 0, paths)
					if err != nil {
						b.Fatal(err)
					}
					if len(acts) != n+10 {
						b.Fatalf("%d actions", len(acts))
					}
				})
			})
			b.Run("decode-reflect", func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				buf := make([]ckptRow, 1024)
				cpuPerOp(b, func() {
					r := parquet.NewGenericReader[ckptRow](bytes.NewReader(data))
					rows := 0
					for {
						k, err := r.Read(buf)
						rows += k
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					if err := r.Close(); err != nil {
						b.Fatal(err)
					}
					if rows != n+10 {
						b.Fatalf("%d rows", rows)
					}
				})
			})
			b.Run("encode", func(b *testing.B) {
				cpuPerOp(b, func() {
					acts, _, _, err := checkpointActions(context.Background(), snap, time.Now().Add(-time.Hour).UnixMilli())
					if err != nil {
						b.Fatal(err)
					}
					if _, err := encodeCheckpoint(acts); err != nil {
						b.Fatal(err)
					}
				})
			})
			b.Run("encode-reflect", func(b *testing.B) {
				if n > 10_000 {
					b.Skip("tens of seconds per op at 100k files; the 10k figure makes the point")
				}
				cpuPerOp(b, func() {
					acts, _, _, err := checkpointActions(context.Background(), snap, time.Now().Add(-time.Hour).UnixMilli())
					if err != nil {
						b.Fatal(err)
					}
					rows := make([]ckptRow, len(acts))
					for j, a := range acts {
						rows[j] = ckptRowOf(a)
					}
					var out bytes.Buffer
					w := parquet.NewGenericWriter[ckptRow](&out, parquet.Compression(&parquet.Snappy))
					if _, err := w.Write(rows); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
				})
			})
		})
	}
}

// BenchmarkUpdateLongLog is a writer's catch-up before a batch (Update
// with one new commit) on a log of n commits, the retention's worth of a
// busy table: by probing the next names (what Update does) and by
// listing the log (what it did before, and still does when the probe
// cannot tell). The log's commits are written as files, not through the
// committer, so a long log is quick to make.
func BenchmarkUpdateLongLog(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		ctx := context.Background()
		root := b.TempDir()
		store := storage.NewLocal(root)
		first, err := EncodeActions([]Action{
			{Protocol: &Protocol{MinReaderVersion: 1, MinWriterVersion: 2}},
			{Metadata: &Metadata{ID: "bench", Format: Format{Provider: "parquet", Options: map[string]string{}},
				SchemaString:     `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}`,
				PartitionColumns: []string{}, Configuration: map[string]string{}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := store.WriteIfAbsent(ctx, commitPath(0), first); err != nil {
			b.Fatal(err)
		}
		next := func(v int64) []byte {
			return []byte(fmt.Sprintf(`{"txn":{"appId":"bench","version":%d}}`+"\n", v))
		}
		for v := int64(1); v < int64(n); v++ {
			if err := store.WriteIfAbsent(ctx, commitPath(v), next(v)); err != nil {
				b.Fatal(err)
			}
		}
		tbl := Open(store)
		base, err := tbl.SnapshotAt(ctx, int64(n-2))
		if err != nil {
			b.Fatal(err)
		}
		for _, way := range []struct {
			name   string
			update func(context.Context, *Snapshot) (*Snapshot, error)
		}{{"probe", tbl.Update}, {"list", tbl.updateByListing}} {
			b.Run(fmt.Sprintf("commits=%d/%s", n, way.name), func(b *testing.B) {
				for b.Loop() {
					up, err := way.update(ctx, base)
					if err != nil || up.Version != int64(n-1) {
						b.Fatalf("update to %v: %v", up, err)
					}
				}
			})
		}
	}
}
