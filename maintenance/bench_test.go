package maintenance_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/maintenance"
	"github.com/cdcapply/cdcapply/tombstone"
)

const (
	benchFiles   = 20
	benchPerFile = 2500
)

var (
	benchOnce sync.Once
	benchDir  string
)

// benchTable builds once a table of 50,000 rows in 20 files, every tenth
// key deleted ten days ago, and returns a fresh copy of it.
func benchTable(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cdcapply-ops-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		s := newStream(b, dir)
		old := opstest.Now.Add(-240 * time.Hour)
		var deletes []*apply.Change
		for f := 0; f < benchFiles; f++ {
			batch := make([]*apply.Change, 0, benchPerFile)
			for i := 0; i < benchPerFile; i++ {
				id := int64(f*benchPerFile + i)
				batch = append(batch, opstest.Change(id, 1, "c", "some status text", old, 0))
				if id%10 == 0 {
					deletes = append(deletes, opstest.Change(id, 2, "d", "", old, 0))
				}
			}
			s.Apply(batch...)
		}
		s.Apply(deletes...)
	})
	dst := filepath.Join(b.TempDir(), "t")
	if err := os.CopyFS(dst, os.DirFS(benchDir)); err != nil {
		b.Fatal(err)
	}
	return dst
}

// BenchmarkPurge purges 5,000 tombstones spread over 20 files of 50,000
// rows: every file is read and rewritten, one commit.
func BenchmarkPurge(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := benchTable(b)
		b.StartTimer()
		res, err := tombstone.Purge(ctx, delta.Open(storage.NewLocal(dir)), tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour,
			Now: func() time.Time { return opstest.Now }, Logger: discard})
		if err != nil || res.Rows != benchFiles*benchPerFile/10 {
			b.Fatalf("purge: %+v %v", res, err)
		}
	}
	b.ReportMetric(float64(benchFiles*benchPerFile/10), "tombstones/op")
}

// BenchmarkOptimize compacts the same 20 files into one.
func BenchmarkOptimize(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := benchTable(b)
		b.StartTimer()
		res, err := maintenance.Optimize(ctx, delta.Open(storage.NewLocal(dir)), maintenance.OptimizeOptions{Logger: discard})
		if err != nil || res.FilesRemoved != benchFiles || res.Rows != benchFiles*benchPerFile {
			b.Fatalf("optimize: %+v %v", res, err)
		}
	}
}

// BenchmarkVacuumDryRun lists and judges the data files of the table
// against a one-hour retention.
func BenchmarkVacuumDryRun(b *testing.B) {
	ctx := context.Background()
	dir := benchTable(b)
	hour := time.Hour
	for i := 0; i < b.N; i++ {
		res, err := delta.Vacuum(ctx, delta.Open(storage.NewLocal(dir)), delta.VacuumOptions{Retention: &hour, Force: true, DryRun: true, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Scanned), "files/op")
	}
}

// TestMain removes the benchmarks' shared table after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}
