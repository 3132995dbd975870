package delta

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/heapprobe"
)

// benchTable creates a table whose one data commit adds n files, with
// checkpoints off so that only commits are measured.
func benchTable(b *testing.B, n int) (*Table, *Snapshot) {
	b.Helper()
	tbl, snap := createTable(b, storage.NewLocal(b.TempDir()), map[string]string{"delta.checkpointInterval": "1000000"})
	tx := tbl.Begin(snap)
	for i := 0; i < n; i++ {
		tx.Add(fakeAdd(fmt.Sprintf("part-%07d", i)))
	}
	c, err := tx.Commit(context.Background(), "WRITE", nil)
	if err != nil {
		b.Fatal(err)
	}
	return tbl, c.Snapshot
}

// BenchmarkCommit measures one small commit (two adds, a remove and a txn,
// like one cdcapply batch) on a table of 1k and 100k files, including the
// put-if-absent write with its fsyncs and the post-commit snapshot.
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			ctx := context.Background()
			tbl, snap := benchTable(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx := tbl.Begin(snap)
				tx.ReadTxn("orders-0")
				tx.Add(fakeAdd(fmt.Sprintf("new-%d-a", i)), fakeAdd(fmt.Sprintf("new-%d-b", i)))
				// Remove what the previous commit added: the table keeps its size.
				victim, ok := tx.ReadFile(fakeAdd("part-0000000").Key())
				if i > 0 {
					victim, ok = tx.ReadFile(fakeAdd(fmt.Sprintf("new-%d-a", i-1)).Key())
				}
				if !ok {
					b.Fatalf("commit %d: file to remove is gone", i)
				}
				tx.RemoveFile(victim, true)
				tx.SetTxn("orders-0", int64(i))
				c, err := tx.Commit(ctx, "WRITE", nil)
				if err != nil {
					b.Fatal(err)
				}
				snap = c.Snapshot
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

// BenchmarkPostCommitSnapshot isolates building the next snapshot after a
// small commit on 100k files: derive (layered maps) against copying the
// file map, the cost derive avoids.
func BenchmarkPostCommitSnapshot(b *testing.B) {
	const n = 100_000
	st := newReplayState()
	st.protocol = &Protocol{MinReaderVersion: 1, MinWriterVersion: 2}
	m := testMetadata(nil)
	st.metadata = &m
	for i := 0; i < n; i++ {
		a := fakeAdd(fmt.Sprintf("part-%07d", i))
		st.files[a.Key()] = a
	}
	base, err := st.snapshot(Open(storage.NewLocal(b.TempDir())), 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("derive", func(b *testing.B) {
		b.ReportAllocs()
		snap := base
		for i := 0; i < b.N; i++ {
			victim, _ := snap.File(FileKey{Path: fmt.Sprintf("part-%07d.parquet", i%n)})
			actions := []Action{{Add: fakeAdd(fmt.Sprint("new-", i))}, {Remove: &Remove{Path: victim.Path}},
				{Txn: &Txn{AppID: "orders-0", Version: int64(i)}}}
			next, err := snap.derive("bench", snap.Version+1, 0, actions)
			if err != nil {
				b.Fatal(err)
			}
			snap = next
		}
	})
	b.Run("copy-map", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			files := make(map[FileKey]*Add, n)
			base.files.each(func(k FileKey, a *Add) bool {
				files[k] = a
				return true
			})
			if len(files) != n {
				b.Fatal("short copy")
			}
		}
	})
}

// BenchmarkSnapshotLoad measures loading the latest snapshot of a table of
// 10k and 100k files from a classic checkpoint plus five JSON commits.
func BenchmarkSnapshotLoad(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			ctx := context.Background()
			tbl, snap := benchTable(b, n)
			if err := WriteCheckpoint(ctx, tbl.store, snap); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				tx := tbl.Begin(snap)
				tx.Add(fakeAdd(fmt.Sprint("after-", i)))
				c, err := tx.Commit(ctx, "WRITE", nil)
				if err != nil {
					b.Fatal(err)
				}
				snap = c.Snapshot
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := Open(tbl.store).Snapshot(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if got.NumFiles() != n+5 || got.CheckpointVersion() != 1 {
					b.Fatalf("loaded %d files from checkpoint %d", got.NumFiles(), got.CheckpointVersion())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
		})
	}
}

// BenchmarkCheckpointTombstones writes the checkpoint of a table of 130
// files that carries many tombstones, the shape of a merge-on-read
// stream's table after a while at the default retention (every commit
// removes and re-adds the files whose deletion vectors it changes). It
// is the cost a checkpoint version's commit pays on top of the commit.
// spilled=true writes it from a snapshot that holds none of them in
// memory but reads them back from the previous checkpoint.
//
//	go test ./delta -run XXX -bench CheckpointTombstones -count 6
func BenchmarkCheckpointTombstones(b *testing.B) {
	for _, c := range []struct {
		n       int
		spilled bool
	}{{20_000, false}, {20_000, true}, {200_000, false}, {200_000, true}, {1_000_000, true}} {
		n, spilled := c.n, c.spilled
		b.Run(fmt.Sprintf("tombstones=%d/spilled=%v", n, spilled), func(b *testing.B) {
			ctx := context.Background()
			store := storage.NewLocal(b.TempDir())
			tbl, snap := createTable(b, store, map[string]string{"delta.checkpointInterval": "1000000"})
			tx := tbl.Begin(snap)
			adds := make([]*Add, n)
			for i := range adds {
				adds[i] = fakeAdd(fmt.Sprintf("gone-%07d", i))
				tx.Add(adds[i])
			}
			c, err := tx.Commit(ctx, "WRITE", nil)
			if err != nil {
				b.Fatal(err)
			}
			tx = tbl.Begin(c.Snapshot)
			for _, a := range adds {
				tx.RemoveFile(a, true)
			}
			for i := 0; i < 130; i++ {
				tx.Add(fakeAdd(fmt.Sprintf("live-%03d", i)))
			}
			if c, err = tx.Commit(ctx, "WRITE", nil); err != nil {
				b.Fatal(err)
			}
			snap = c.Snapshot
			if spilled {
				// One more commit after a checkpoint of the above: its
				// snapshot reads the removes back from that checkpoint.
				p, _, err := writeCheckpointCutoff(ctx, store, snap, 0)
				if err != nil {
					b.Fatal(err)
				}
				snap = snap.rebased(store, snap, []string{p}, n)
				tx = tbl.Begin(snap)
				tx.Add(fakeAdd("one-more"))
				if c, err = tx.Commit(ctx, "WRITE", nil); err != nil {
					b.Fatal(err)
				}
				snap = c.Snapshot
				if snap.tombstones.len() != 0 {
					b.Fatalf("%d removes held in memory, want them all in the checkpoint", snap.tombstones.len())
				}
			}
			if got := len(tombstonesOf(b, snap)); got != n {
				b.Fatalf("%d tombstones, want %d", got, n)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = store.Delete(ctx, ckptClassicPath(snap.Version))
				if _, _, err := writeCheckpointCutoff(ctx, store, snap, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/tombstone")
			b.StopTimer()
			_ = store.Delete(ctx, ckptClassicPath(snap.Version))
			peak := heapprobe.PeakDuring(func() {
				if _, _, err := writeCheckpointCutoff(ctx, store, snap, 0); err != nil {
					b.Fatal(err)
				}
			})
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			if spilled {
				// A restart's load of the table from that checkpoint.
				peak = heapprobe.PeakDuring(func() {
					s, err := Open(store).Snapshot(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if s.CheckpointVersion() != snap.Version || s.NumTombstones() != n {
						b.Fatalf("loaded from checkpoint %d with %d tombstones; want %d and %d", s.CheckpointVersion(), s.NumTombstones(), snap.Version, n)
					}
				})
				b.ReportMetric(float64(peak)/(1<<20), "load-peak-heap-MiB")
			}
		})
	}
}

// BenchmarkTombstoneMemory measures what the writer's snapshot holds per
// removed file: a merge-on-read table of 150 files whose every commit
// gives each file a new deletion vector (RemoveFile, then the file again
// with the new vector, as apply's merge-on-read commits do). It reports
// the live heap per tombstone after 200 such commits (30,000
// tombstones): what a long retention costs in memory per file a commit
// touches. With checkpoints off the snapshot holds every remove; with a
// checkpoint every 10 commits (the default) it holds those since the
// last one and reads the rest back from it (Snapshot.spill).
//
//	go test ./delta -run XXX -bench TombstoneMemory -count 6
func BenchmarkTombstoneMemory(b *testing.B) {
	const files, commits = 150, 200
	for _, interval := range []string{"1000000", "10"} {
		name := "checkpoints=off"
		if interval == "10" {
			name = "checkpoints=every10"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				tbl := Open(storage.NewLocal(b.TempDir()))
				tx := tbl.Begin(nil)
				tx.SetProtocol(Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
					ReaderFeatures: []string{FeatureDeletionVectors}, WriterFeatures: []string{FeatureDeletionVectors}})
				tx.SetMetadata(testMetadata(map[string]string{"delta.enableDeletionVectors": "true", "delta.checkpointInterval": interval}))
				live := make([]*Add, files)
				for i := range live {
					live[i] = fakeAdd(fmt.Sprintf("part-00000-%08d-0000-0000-0000-000000000000-c000.lz4raw", i))
					live[i].Stats = `{"numRecords":65536}`
					tx.Add(live[i])
				}
				c, err := tx.Commit(ctx, "CREATE TABLE", nil)
				if err != nil {
					b.Fatal(err)
				}
				snap := c.Snapshot
				before := heapprobe.Live()
				for v := range commits {
					tx := tbl.Begin(snap)
					for i, a := range live {
						tx.RemoveFile(a, true)
						next := *a
						next.DeletionVector = &DeletionVector{StorageType: "u", PathOrInlineDv: fmt.Sprintf("%020d", v*files+i),
							Offset: new(int32(1)), SizeInBytes: 40, Cardinality: int64(v + 1)}
						live[i] = &next
						tx.Add(&next)
					}
					if c, err = tx.Commit(ctx, "MERGE", nil); err != nil {
						b.Fatal(err)
					}
					if c.CheckpointErr != nil {
						b.Fatal(c.CheckpointErr)
					}
					snap = c.Snapshot
				}
				after := heapprobe.Live()
				if n := snap.NumTombstones(); n != files*commits {
					b.Fatalf("%d tombstones, want %d", n, files*commits)
				}
				b.ReportMetric(float64(after-before)/float64(files*commits), "B/tombstone")
				runtime.KeepAlive(snap)
			}
		})
	}
}
