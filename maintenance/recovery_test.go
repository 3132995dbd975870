package maintenance_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/maintenance"
)

// TestRestoreThenReplay applies bad data after version N, restores N and
// lets the stream replay the corrected records from the rewound position:
// the table equals the corrected stream's oracle, and the stream that was
// running is fenced rather than committing on top of the restore.
func TestRestoreThenReplay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStream(t, dir)
	ts := opstest.Now.Add(-time.Hour)
	s.Apply(opstest.Change(1, 1, "c", "a", ts, 0), opstest.Change(2, 1, "c", "b", ts, 0))  // version 0, offsets 0..1
	s.Apply(opstest.Change(3, 2, "c", "c", ts, 0))                                         // version 1 = N, offset 2
	s.Apply(opstest.Change(1, 3, "u", "BAD", ts, 0), opstest.Change(2, 3, "d", "", ts, 0)) // versions 2..3: bad data
	s.Apply(opstest.Change(4, 4, "c", "BAD", ts, 0))
	tbl := delta.Open(storage.NewLocal(dir))
	app := checkpoint.AppID("p", checkpoint.TopicPartition{Topic: "orders", Partition: 0})

	res, err := delta.Restore(ctx, tbl, delta.RestoreTarget{Version: 1}, delta.RestoreOptions{LogStarts: map[string]int64{app: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Txns[app] != 3 {
		t.Fatalf("rewound %s to %d, want 3 (the next offset at version 1)", app, res.Txns[app])
	}
	if got, want := opstest.Rows(t, dir), []string{"1 a false", "2 b false", "3 c false"}; !opstest.Same(got, want) {
		t.Fatalf("after restore: %v, want %v", got, want)
	}
	// The running stream still thinks it is at offset 6: its next commit
	// must conflict on its txn, not land on top of the restored table
	// (the engine then re-seeks from the table).
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	_, err = s.A.Apply(ctx, &apply.Batch{Changes: []*apply.Change{opstest.Change(5, 5, "c", "x", ts, 6)},
		Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: 6, Next: 7}}})
	if !errors.Is(err, delta.ErrConcurrentTransaction) {
		t.Fatalf("stale stream commit after restore: err = %v, want a txn conflict", err)
	}
	// It re-reads the table, resumes at offset 3 and replays the corrected
	// records 3.. (the bad ones fixed at the source and re-sent).
	s.Reopen()
	if next, _ := s.A.Positions().Next(tp); next != 3 {
		t.Fatalf("stream resumes at %d, want 3", next)
	}
	s.Apply(opstest.Change(1, 3, "u", "good", ts, 0), opstest.Change(2, 3, "u", "b2", ts, 0))
	s.Apply(opstest.Change(4, 4, "c", "d", ts, 0))
	want := []string{"1 good false", "2 b2 false", "3 c false", "4 d false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("after replay: %v, want %v", got, want)
	}
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs after replay: %v, want %v", got, want)
	}
}

// TestVacuumThenRestore: vacuum refuses a short retention; after a forced
// zero-hour vacuum a restore to an old version fails naming the files
// vacuum removed, and MissingFiles (what status uses) says so too.
func TestVacuumThenRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStream(t, dir)
	ts := opstest.Now.Add(-time.Hour)
	s.Apply(opstest.Change(1, 1, "c", "a", ts, 0))
	s.Apply(opstest.Change(1, 2, "u", "b", ts, 0)) // rewrites version 0's file
	tbl := delta.Open(storage.NewLocal(dir))
	v0, _ := tbl.SnapshotAt(ctx, 0)
	zero := time.Duration(0)

	_, err := delta.Vacuum(ctx, tbl, delta.VacuumOptions{Retention: &zero})
	if !errors.Is(err, delta.ErrRetentionTooShort) {
		t.Fatalf("zero retention without force: %v", err)
	}
	if _, err := delta.Restore(ctx, tbl, delta.RestoreTarget{Version: 0}, delta.RestoreOptions{DryRun: true}); err != nil {
		t.Fatalf("restore before vacuum: %v", err)
	}
	vres, err := delta.Vacuum(ctx, tbl, delta.VacuumOptions{Retention: &zero, Force: true, Now: func() time.Time { return time.Now().Add(time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	oldFile := v0.Files()[0].Path
	if len(vres.Files) != 1 || vres.Files[0] != oldFile {
		t.Fatalf("vacuum deleted %v, want version 0's file %s", vres.Files, oldFile)
	}
	_, err = delta.Restore(ctx, tbl, delta.RestoreTarget{Version: 0}, delta.RestoreOptions{})
	if !errors.Is(err, delta.ErrFilesMissing) || !strings.Contains(err.Error(), oldFile) {
		t.Fatalf("restore after vacuum: err = %v, want ErrFilesMissing naming %s", err, oldFile)
	}
	if missing, err := delta.MissingFiles(ctx, tbl, v0); err != nil || len(missing) != 1 || missing[0] != oldFile {
		t.Fatalf("MissingFiles(version 0) = %v, %v", missing, err)
	}
	if _, err := maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: 0}); !errors.Is(err, delta.ErrFilesMissing) || !strings.Contains(err.Error(), oldFile) {
		t.Fatalf("show version 0 after vacuum: err = %v, want ErrFilesMissing naming %s", err, oldFile)
	}
	if got, want := opstest.Rows(t, dir), []string{"1 b false"}; !opstest.Same(got, want) {
		t.Fatalf("latest version after vacuum: %v, want %v", got, want)
	}
}
