package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/maintenance"
	"github.com/cdcapply/cdcapply/tombstone"
)

// morTable streams 60 keys in six files in merge-on-read mode, then
// updates and deletes keys of every file, so that each file carries a
// deletion vector. It returns the stream and the expected rows.
func morTable(t *testing.T, ts time.Time) (string, *opstest.Stream, map[int64]string) {
	t.Helper()
	dir := t.TempDir()
	s := opstest.NewStream(t, dir, apply.MergeOnRead, true)
	want := map[int64]string{}
	seq := uint64(1)
	for f := int64(0); f < 6; f++ {
		var cs []*apply.Change
		for i := int64(0); i < 10; i++ {
			id := f*10 + i
			cs = append(cs, opstest.Change(id, seq, "c", fmt.Sprintf("v%d", id), ts, 0))
			want[id] = fmt.Sprintf("%d v%d false", id, id)
		}
		s.Apply(cs...)
		seq++
	}
	for round := int64(0); round < 3; round++ {
		var cs []*apply.Change
		for f := int64(0); f < 6; f++ {
			id := f*10 + round*3
			if round == 2 {
				cs = append(cs, opstest.Change(id, seq, "d", "", ts, 0))
				want[id] = strings.Replace(want[id], "false", "true", 1)
				continue
			}
			cs = append(cs, opstest.Change(id, seq, "u", fmt.Sprintf("r%d", round), ts, 0))
			want[id] = fmt.Sprintf("%d r%d false", id, round)
		}
		s.Apply(cs...)
		seq++
	}
	snap := s.A.Snapshot()
	withDV := 0
	for _, a := range snap.Files() {
		if a.DeletionVector != nil {
			withDV++
		}
	}
	if withDV < 6 {
		t.Fatalf("set-up left %d files with deletion vectors, want at least 6", withDV)
	}
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("set-up table\n%v\nwant\n%v", got, sorted(want))
	}
	return dir, s, want
}

func sorted(m map[int64]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestOptimizeMergeOnReadTable compacts a table whose files carry deletion
// vectors: the hidden rows are dropped, no vector stays, the rows are the
// same, and the merge-on-read stream goes on after it.
func TestOptimizeMergeOnReadTable(t *testing.T) {
	ctx := context.Background()
	dir, s, want := morTable(t, opstest.Now.Add(-time.Hour))
	tbl := delta.Open(storage.NewLocal(dir))
	res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.NumFiles() != 1 || snap.Files()[0].DeletionVector != nil || res.Rows != 60 {
		t.Fatalf("after optimize %d files (first with vector %v), %d rows: want one file of the 60 live rows, no vector",
			snap.NumFiles(), snap.Files()[0].DeletionVector, res.Rows)
	}
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("after optimize\n%v\nwant\n%v", got, sorted(want))
	}
	s.Reopen()
	s.Apply(opstest.Change(4, 100, "u", "after", opstest.Now, 0), opstest.Change(61, 100, "c", "new", opstest.Now, 0))
	want[4], want[61] = "4 after false", "61 new false"
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("stream after optimize\n%v\nwant\n%v", got, sorted(want))
	}
}

// TestOptimizeDeletedShare rewrites a file on its own once its deletion
// vector hides at least DeletedRatio of its rows, even when it is not
// small, and leaves a file below the ratio alone.
func TestOptimizeDeletedShare(t *testing.T) {
	ctx := context.Background()
	dir, _, want := morTable(t, opstest.Now.Add(-time.Hour))
	tbl := delta.Open(storage.NewLocal(dir))
	// Every original file hides 3 of its 10 rows (30%); the batch files
	// hide none. With a target size below every file, only the ratio
	// picks files.
	res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{TargetSize: 1, DeletedRatio: 0.25, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 6 || res.Rows != 42 {
		t.Fatalf("groups %v, rows %d: want the 6 files hiding 30%% rewritten alone, 42 rows kept", res.Groups, res.Rows)
	}
	snap, _ := tbl.Snapshot(ctx)
	for _, a := range snap.Files() {
		if a.DeletionVector != nil {
			t.Fatalf("file %s still has a deletion vector", a.Path)
		}
	}
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("after optimize\n%v\nwant\n%v", got, sorted(want))
	}
	again, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{TargetSize: 1, DeletedRatio: 0.25, Logger: discard})
	if err != nil || len(again.Groups) != 0 {
		t.Fatalf("second optimize: %+v %v, want nothing to do", again, err)
	}
}

// TestOptimizeRacesMergeOnReadStream: a merge-on-read commit that gives a
// file being compacted a new deletion vector removes that file's add, so
// the compaction conflicts and starts over; and a stream that read the
// table before a compaction conflicts on its next commit (the compaction
// removed the file it meant to replace), is not fenced, and applies
// correctly after it reloads (a catch-up, no rebuild), as the engine's
// resync does.
func TestOptimizeRacesMergeOnReadStream(t *testing.T) {
	ctx := context.Background()
	dir, s, want := morTable(t, opstest.Now.Add(-time.Hour))
	tbl := delta.Open(storage.NewLocal(dir))
	hook := func(ctx context.Context, attempt int) error {
		if attempt == 1 {
			s.Apply(opstest.Change(11, 200, "u", "during", opstest.Now, 0))
		}
		return nil
	}
	res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{BeforeCommit: hook, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("optimize took %d attempts, want 2 (the stream's vector conflicts with the first)", res.Attempts)
	}
	want[11] = "11 during false"
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("after the race\n%v\nwant\n%v", got, sorted(want))
	}

	// The stream's applier read the table before this compaction.
	if _, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{Logger: discard}); err != nil {
		t.Fatal(err)
	}
	_, err = s.A.Apply(ctx, batchOf(s, opstest.Change(12, 300, "u", "late", opstest.Now, 0)))
	if !errors.Is(err, delta.ErrConflict) || errors.Is(err, apply.ErrFenced) {
		t.Fatalf("apply over a stale snapshot: %v, want a conflict that is not fencing", err)
	}
	// As the engine's resync does: the failed commit left the key index
	// as before the batch, so it catches up with the compaction.
	r, err := s.A.Reload(ctx)
	if err != nil || r == nil || r.Rebuilt || r.CatchUp.FilesRemoved == 0 {
		t.Fatalf("reload after the conflict: %+v, %v: want a catch-up with the compaction", r, err)
	}
	s.Apply(opstest.Change(12, 300, "u", "late", opstest.Now, 0))
	want[12] = "12 late false"
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("after resync\n%v\nwant\n%v", got, sorted(want))
	}
}

// TestPurgeShowStatsOnMergeOnReadTable: the table operations read through
// deletion vectors. Tombstone stats count live rows only, show returns the
// rows the stream sees, and a purge removes exactly the tombstones.
func TestPurgeShowStatsOnMergeOnReadTable(t *testing.T) {
	ctx := context.Background()
	old := opstest.Now.Add(-240 * time.Hour)
	dir, s, want := morTable(t, old)
	tbl := delta.Open(storage.NewLocal(dir))
	st, err := tombstone.ReadStats(ctx, tbl, 7*24*time.Hour, opstest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 60 {
		t.Fatalf("tombstone stats count %d rows, want the 60 live ones (hidden rows excluded)", st.Rows)
	}
	shown, err := maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range shown.Values {
		got = append(got, fmt.Sprintf("%s %s %s", *r[0], *r[1], *r[3]))
	}
	sort.Strings(got)
	if !opstest.Same(got, sorted(want)) {
		t.Fatalf("show\n%v\nwant\n%v", got, sorted(want))
	}
	res, err := tombstone.Purge(ctx, tbl, tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour, Now: func() time.Time { return opstest.Now }, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 6 {
		t.Fatalf("purged %d tombstones, want 6", res.Rows)
	}
	for id, r := range want {
		if strings.HasSuffix(r, "true") {
			delete(want, id)
		}
	}
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("after purge\n%v\nwant\n%v", got, sorted(want))
	}
	s.Reopen()
	s.Apply(opstest.Change(5, 400, "u", "post-purge", opstest.Now, 0))
	want[5] = "5 post-purge false"
	if got := opstest.Rows(t, dir); !opstest.Same(got, sorted(want)) {
		t.Fatalf("stream after purge\n%v\nwant\n%v", got, sorted(want))
	}
}

// batchOf is the batch stream.apply would commit, for a test that expects
// the commit to fail.
func batchOf(s *opstest.Stream, changes ...*apply.Change) *apply.Batch {
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	from, _ := s.A.Positions().Next(tp)
	for i, c := range changes {
		c.Pos.Offset = from + int64(i)
	}
	return &apply.Batch{Changes: changes, Read: len(changes),
		Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: from, Next: from + int64(len(changes))}}}
}
