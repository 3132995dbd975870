package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// removesIn returns the removes a checkpoint file holds, as path ->
// deletion time.
func removesIn(t *testing.T, store storage.Storage, version int64) map[string]int64 {
	t.Helper()
	acts, err := readCheckpoint(context.Background(), store, version, []string{ckptClassicPath(version)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, a := range acts {
		if r := a.Remove; r != nil {
			if _, dup := out[r.Path]; dup {
				t.Fatalf("checkpoint %d holds %s twice", version, r.Path)
			}
			out[r.Path] = *r.DeletionTimestamp
		}
	}
	return out
}

// tombstoneTimes is tombstonesOf as path -> deletion time.
func tombstoneTimes(t *testing.T, s *Snapshot) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, r := range tombstonesOf(t, s) {
		if _, dup := out[r.Path]; dup {
			t.Fatalf("version %d: tombstone %s listed twice", s.Version, r.Path)
		}
		out[r.Path] = *r.DeletionTimestamp
	}
	return out
}

// TestTombstonesSpillToCheckpoint: a writer's snapshot holds in memory only
// the removes of the commits since its last checkpoint landed; the older
// ones are read back from that checkpoint when the next one is written.
// The model is the test's own: every remove with its deletion time, a
// re-added file's remove cancelled, and at each checkpoint those older
// than the retention dropped. Each checkpoint, the writer's tombstones
// and a fresh load must all equal it. Re-adding a file the checkpoint
// holds as removed (restore does that) and removing it again are the
// cases the read-back must reconcile.
func TestTombstonesSpillToCheckpoint(t *testing.T) {
	// Row groups of 7 rows: the checkpoints are read back and written a
	// row group at a time, across many of them.
	defer func(n int) { ckptRowGroup = n }(ckptRowGroup)
	ckptRowGroup = 7
	for _, bg := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "background"}[bg], func(t *testing.T) {
			ctx := context.Background()
			store := storage.NewLocal(t.TempDir())
			now := time.UnixMilli(1_800_000_000_000)
			opts := []Option{Clock(func() time.Time { return now })}
			if bg {
				opts = append(opts, BackgroundCheckpoints(nil))
			}
			const retention = time.Hour
			tbl, snap := createTable(t, store, map[string]string{"delta.deletedFileRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "5"}, opts...)
			model := map[string]int64{} // removed path -> deletion time
			removedAdds := map[string]*Add{}
			lastCkpt := int64(-1)
			spilled := false
			copied := 0
			const commits = 60
			for i := 1; i <= commits; i++ {
				now = now.Add(4 * time.Minute)
				tx := tbl.Begin(snap)
				// Three files replaced a commit: a remove each.
				for j, a := range snap.Files() {
					if j == 3 {
						break
					}
					tx.RemoveFile(a, true)
					model[a.Path] = now.UnixMilli()
					removedAdds[a.Path] = a
				}
				for j := 0; j < 3; j++ {
					tx.Add(fakeAdd(fmt.Sprintf("f%03d-%d", i, j)))
				}
				// Every 7th commit re-adds a file removed 8 commits ago (in
				// a checkpoint by now), which cancels the checkpoint's
				// remove; the next commit removes it again (the oldest
				// files go first), which replaces it with a newer one.
				if i%7 == 0 && i > 8 {
					p := fmt.Sprintf("f%03d-0.parquet", i-9)
					if a := removedAdds[p]; a != nil {
						if _, still := model[p]; still {
							tx.Add(a)
							delete(model, p)
						}
					}
				}
				c, err := tx.Commit(ctx, "WRITE", nil)
				if err != nil {
					t.Fatal(err)
				}
				tbl.WaitCheckpoints()
				if c.CheckpointErr != nil {
					t.Fatalf("checkpoint at %d: %v", c.Version, c.CheckpointErr)
				}
				if c.Checkpointed {
					cutoff := now.Add(-retention).UnixMilli()
					for p, ts := range model {
						if ts < cutoff {
							delete(model, p)
						}
					}
					if n := len(model) + len(snap.Files()) + 5; n > 3*ckptRowGroup && ckptRowGroups(t, store, c.Version) < 3 {
						t.Fatalf("checkpoint %d of %d rows in fewer than 3 row groups of %d", c.Version, n, ckptRowGroup)
					}
					if got := removesIn(t, store, c.Version); !reflect.DeepEqual(got, model) {
						t.Fatalf("checkpoint %d holds removes %v, want %v", c.Version, sortedKeys(got), sortedKeys(model))
					}
					copiedGroups, copiedRows, encoded := ckptCopied(t, store, c.Version)
					if copiedRows+encoded != len(model) {
						t.Fatalf("checkpoint %d: %d removes copied in %d groups and %d encoded, %d kept", c.Version, copiedRows, copiedGroups, encoded, len(model))
					}
					copied += copiedRows
					lastCkpt = c.Version
				}
				snap = c.Snapshot
				if got := tombstoneTimes(t, snap); !reflect.DeepEqual(got, model) {
					t.Fatalf("version %d: the writer's tombstones %v, want %v", snap.Version, sortedKeys(got), sortedKeys(model))
				}
				// The count is exact once the snapshot rebased on the last
				// checkpoint, unless this commit re-added a removed file.
				rebasedNow := (!bg && c.Checkpointed) || (bg && snap.Version%5 == 1 && i%7 != 0)
				if n := snap.NumTombstones(); n < len(model) || (rebasedNow && n != len(model)) {
					t.Fatalf("version %d: NumTombstones %d, %d kept", snap.Version, n, len(model))
				}
				// In memory: the removes of the commits after the last
				// checkpoint the writer's snapshot knows of (the one of
				// this very commit once the next commit sees it landed,
				// in the background).
				since := snap.Version - lastCkpt
				if bg && since == 0 {
					since = 5
				}
				if lastCkpt >= 0 {
					if n := snap.tombstones.len(); n > int(3*since) {
						t.Fatalf("version %d: %d removes held in memory, %d commits after checkpoint %d", snap.Version, n, since, lastCkpt)
					}
					if snap.spill != nil && snap.spill.n > 0 {
						spilled = true
					}
				}
				// A reader loading the table (from its last checkpoint)
				// finds the same tombstones.
				fresh, err := Open(store).Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := tombstoneTimes(t, fresh); !reflect.DeepEqual(got, model) {
					t.Fatalf("version %d reloaded: tombstones %v, want %v", fresh.Version, sortedKeys(got), sortedKeys(model))
				}
				sameState(t, fmt.Sprintf("commit %d", i), snap, fresh)
			}
			if !spilled || lastCkpt < 50 {
				t.Fatalf("no removes spilled (last checkpoint %d): the test exercised nothing", lastCkpt)
			}
			if copied == 0 {
				t.Fatal("no checkpoint copied a row group of removes from the one before: the test exercised only encoding")
			}
		})
	}
}

// TestVacuumKeepsSpilledTombstones: vacuum reads the removes a checkpoint
// holds back from it; the files they name stay until the retention ends,
// and only then go.
func TestVacuumKeepsSpilledTombstones(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	now := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	tbl, snap := createTable(t, store, map[string]string{"delta.deletedFileRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "2"},
		Clock(func() time.Time { return now }))
	write := func(name string) {
		p := filepath.Join(dir, name+".parquet")
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		old := now.Add(-48 * time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 4; i++ {
		now = now.Add(20 * time.Minute)
		write(fmt.Sprintf("f%03d", i)) // the file replaceFiles adds
		snap = replaceFiles(t, tbl, snap, i).Snapshot
	}
	loaded, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.spill == nil || loaded.spill.n != 3 || loaded.tombstones.len() != 0 {
		t.Fatalf("the load of version %d should leave its 3 removes in checkpoint 4: spill %+v, %d in memory", loaded.Version, loaded.spill, loaded.tombstones.len())
	}
	exists := func(i int) bool {
		_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("f%03d.parquet", i)))
		return err == nil
	}
	// Removed 40, 20 and 0 minutes ago: all within the hour.
	if _, err := Vacuum(ctx, tbl, VacuumOptions{Now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		if !exists(i) {
			t.Fatalf("vacuum deleted f%03d, whose remove is within the retention", i)
		}
	}
	// 50 minutes later f001 and f002 were removed over an hour ago.
	now = now.Add(50 * time.Minute)
	if _, err := Vacuum(ctx, tbl, VacuumOptions{Now: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	var left []int
	for i := 1; i <= 4; i++ {
		if exists(i) {
			left = append(left, i)
		}
	}
	sort.Ints(left)
	if !reflect.DeepEqual(left, []int{3, 4}) {
		t.Fatalf("files left after the retention of two removes ended: %v, want f003 (removed 30 minutes ago) and f004 (live)", left)
	}
}

// TestCheckpointAfterSpillGone: another writer's log cleanup deleted the
// checkpoint the writer's snapshot reads its older removes from. The
// writer's next checkpoint is written from a fresh load of its version
// instead of failing at every checkpoint from then on, and its snapshots
// rebase on it.
func TestCheckpointAfterSpillGone(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	tbl, snap := createTable(t, store, map[string]string{"delta.checkpointInterval": "2"})
	model := map[string]bool{}
	replace := func(i int) *Committed {
		for _, a := range snap.Files() {
			model[a.Path] = true
		}
		c := replaceFiles(t, tbl, snap, i)
		if c.CheckpointErr != nil {
			t.Fatalf("checkpoint at %d: %v", c.Version, c.CheckpointErr)
		}
		snap = c.Snapshot
		return c
	}
	for i := 1; i <= 4; i++ {
		replace(i)
	}
	if snap.spill == nil || snap.spill.version != 4 {
		t.Fatalf("version %d should spill to checkpoint 4: %+v", snap.Version, snap.spill)
	}
	// Another writer commits version 5, checkpoints it and cleans up
	// below it, checkpoint 4 included.
	other := Open(store)
	os5, err := other.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range os5.Files() {
		model[a.Path] = true
	}
	c5 := replaceFiles(t, other, os5, 5)
	if err := WriteCheckpoint(ctx, store, c5.Snapshot); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, ckptClassicPath(4)); err != nil {
		t.Fatal(err)
	}
	if snap, err = tbl.Update(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Tombstones(ctx); !errors.Is(err, errSpillGone) {
		t.Fatalf("reading the removes of a deleted checkpoint: %v, want errSpillGone", err)
	}
	c := replace(6) // version 6: a checkpoint version
	if !c.Checkpointed {
		t.Fatal("version 6 wrote no checkpoint")
	}
	got := removesIn(t, store, 6)
	if len(got) != len(model) {
		t.Fatalf("checkpoint 6 holds %d removes, want %d", len(got), len(model))
	}
	for p := range model {
		if _, ok := got[p]; !ok {
			t.Fatalf("checkpoint 6 lacks the remove of %s", p)
		}
	}
	if snap.spill == nil || snap.spill.version != 6 || snap.tombstones.len() != 0 {
		t.Fatalf("the writer's snapshot should spill to checkpoint 6 now: %+v, %d in memory", snap.spill, snap.tombstones.len())
	}
	if n := len(tombstonesOf(t, snap)); n != len(model) {
		t.Fatalf("%d tombstones, want %d", n, len(model))
	}
}

// heldSnapshot returns s with every tombstone read into memory: a state a
// test compares against after the table's log cleanup has deleted the
// checkpoint s reads its older removes from.
func heldSnapshot(t *testing.T, s *Snapshot) *Snapshot {
	t.Helper()
	m := map[FileKey]*Remove{}
	for _, r := range tombstonesOf(t, s) {
		m[keyOf(r.Key())] = r
	}
	c := *s
	c.tombstones, c.spill, c.tombstoneCutoff = newLayered(m), nil, 0
	return &c
}

// ckptRowGroups is the number of row groups of a checkpoint file.
func ckptRowGroups(t *testing.T, store storage.Storage, version int64) int {
	t.Helper()
	return len(openCkptFile(t, store, version).RowGroups())
}

// openCkptFile opens the classic checkpoint file of version.
func openCkptFile(t *testing.T, store storage.Storage, version int64) *parquet.File {
	t.Helper()
	data, err := store.Read(context.Background(), ckptClassicPath(version))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ckptOpenParquet(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ckptCopied counts the row groups of a checkpoint file that were copied
// from the previous checkpoint (ckptWriter.splice: no page index, which
// parquet-go writes for every group it encodes) and their rows, and the
// removes encoded in the file's other groups.
func ckptCopied(t *testing.T, store storage.Storage, version int64) (groups, rows, encodedRemoves int) {
	t.Helper()
	for _, rg := range openCkptFile(t, store, version).Metadata().RowGroups {
		indexed := false
		for _, c := range rg.Columns {
			indexed = indexed || c.ColumnIndexOffset > 0 || c.OffsetIndexOffset > 0
		}
		if indexed {
			continue
		}
		groups++
		rows += int(rg.NumRows)
	}
	acts, err := readCheckpoint(context.Background(), store, version, []string{ckptClassicPath(version)})
	if err != nil {
		t.Fatal(err)
	}
	removes := 0
	for _, a := range acts {
		if a.Remove != nil {
			removes++
		}
	}
	return groups, rows, removes - rows
}

// TestCheckpointCopiesTombstoneGroups: at a retention nothing expires
// within, a merge-on-read shaped stream (each commit moves three files to
// a new deletion vector: a remove of the old one, an add of the same path
// with the new one) piles up tombstones that share their paths with live
// files. Each checkpoint must hold exactly the model's removes (path and
// deletion vector), a fresh load must find them, and the removes each
// checkpoint encodes must stay about a row group and the commits since the
// last checkpoint, whatever the retention holds: the rest are copied whole
// from the previous checkpoint. Without the copy the encoded removes grow
// to every tombstone (300 here).
func TestCheckpointCopiesTombstoneGroups(t *testing.T) {
	defer func(n int) { ckptRowGroup = n }(ckptRowGroup)
	ckptRowGroup = 8
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	now := time.UnixMilli(1_800_000_000_000)
	tbl := Open(store, Clock(func() time.Time { return now }))
	tx := tbl.Begin(nil)
	tx.SetProtocol(Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{FeatureDeletionVectors}, WriterFeatures: []string{FeatureDeletionVectors}})
	tx.SetMetadata(testMetadata(map[string]string{"delta.checkpointInterval": "5", "delta.enableDeletionVectors": "true"}))
	for i := range 4 {
		tx.Add(fakeAdd(fmt.Sprintf("data-%d", i)))
	}
	c, err := tx.Commit(ctx, "CREATE TABLE", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := c.Snapshot
	const perCommit, commits = 3, 100
	model := map[FileKey]int64{}
	maxEncoded, checkpoints := 0, 0
	for i := 1; i <= commits; i++ {
		now = now.Add(time.Minute)
		tx := tbl.Begin(snap)
		files := snap.Files()
		sort.Slice(files, func(a, b int) bool { return files[a].Path < files[b].Path })
		for j := range perCommit {
			old := files[(i+j)%len(files)]
			tx.RemoveFile(old, true)
			model[old.Key()] = now.UnixMilli()
			moved := *old
			off := int32(i*10 + j)
			moved.DeletionVector = &DeletionVector{StorageType: "u", PathOrInlineDv: fmt.Sprintf("dv%07d", i), Offset: &off, SizeInBytes: 40, Cardinality: int64(i)}
			tx.Add(&moved)
		}
		if c, err = tx.Commit(ctx, "MERGE", nil); err != nil {
			t.Fatal(err)
		}
		if c.CheckpointErr != nil {
			t.Fatalf("checkpoint at %d: %v", c.Version, c.CheckpointErr)
		}
		snap = c.Snapshot
		if !c.Checkpointed {
			continue
		}
		checkpoints++
		acts, err := readCheckpoint(ctx, store, c.Version, []string{ckptClassicPath(c.Version)})
		if err != nil {
			t.Fatal(err)
		}
		got := map[FileKey]int64{}
		for _, a := range acts {
			if r := a.Remove; r != nil {
				if _, dup := got[r.Key()]; dup {
					t.Fatalf("checkpoint %d holds %v twice", c.Version, r.Key())
				}
				got[r.Key()] = *r.DeletionTimestamp
			}
		}
		if !reflect.DeepEqual(got, model) {
			t.Fatalf("checkpoint %d holds %d removes, want the model's %d", c.Version, len(got), len(model))
		}
		fresh, err := Open(store).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, fmt.Sprintf("checkpoint %d reloaded", c.Version), fresh, snap)
		_, copied, encoded := ckptCopied(t, store, c.Version)
		if copied+encoded != len(model) {
			t.Fatalf("checkpoint %d: %d copied + %d encoded removes, %d held", c.Version, copied, encoded, len(model))
		}
		maxEncoded = max(maxEncoded, encoded)
		// Encoded: the removes of the commits since the last checkpoint
		// (held in memory), the previous checkpoint's last, small group
		// and the tail of the group they fill.
		if limit := 5*perCommit + 2*ckptRowGroup; encoded > limit {
			t.Fatalf("checkpoint %d encoded %d of its %d removes (copied %d); want at most %d", c.Version, encoded, len(model), copied, limit)
		}
	}
	if checkpoints < 19 || len(model) != commits*perCommit {
		t.Fatalf("%d checkpoints, %d tombstones: the test exercised too little", checkpoints, len(model))
	}
	t.Logf("%d checkpoints, %d tombstones at the end, at most %d encoded by one checkpoint", checkpoints, len(model), maxEncoded)
}

// TestCheckpointCopyCrash: a checkpoint that copies row groups of the one
// before, crashed at each of its storage operations (the read-back, the
// copy's re-open of that file, the write, the hint), leaves a table that
// loads with exactly the tombstones and files of the version, and a
// checkpoint written afterwards holds them too.
func TestCheckpointCopyCrash(t *testing.T) {
	defer func(n int) { ckptRowGroup = n }(ckptRowGroup)
	ckptRowGroup = 8
	ctx := context.Background()
	dir := t.TempDir()
	tbl, snap := createTable(t, storage.NewLocal(dir), map[string]string{"delta.checkpointInterval": "10"})
	for i := 1; i <= 22; i++ {
		tx := tbl.Begin(snap)
		for j, a := range snap.Files() {
			if j == 3 {
				break
			}
			tx.RemoveFile(a, true)
		}
		for j := range 3 {
			tx.Add(fakeAdd(fmt.Sprintf("f%03d-%d", i, j)))
		}
		c, err := tx.Commit(ctx, "WRITE", nil)
		if err != nil {
			t.Fatal(err)
		}
		snap = c.Snapshot
	}
	want := tombstoneTimes(t, snap)
	for op := 1; ; op++ {
		crashed := false
		for _, after := range []bool{false, true} {
			work := ckptCopyTable(t, dir)
			s, err := Open(storage.NewLocal(work)).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.spill == nil || s.Version != 22 {
				t.Fatalf("version %d loaded without a spilled checkpoint", s.Version)
			}
			f := storage.NewFaulty(storage.NewLocal(work))
			f.CrashAt(op, after)
			err = writeCheckpoint(ctx, f, s, time.Now())
			if f.Crashed() {
				crashed = true
				if err == nil {
					t.Fatalf("crash at op %d (after=%v) not reported", op, after)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if _, copied, _ := ckptCopied(t, storage.NewLocal(work), 22); copied == 0 {
				t.Fatal("checkpoint 22 copied no row group: the test crashes nothing new")
			}
			for _, retry := range []bool{false, true} {
				got, err := Open(storage.NewLocal(work)).Snapshot(ctx)
				if err != nil {
					t.Fatalf("crash at op %d (after=%v): load: %v", op, after, err)
				}
				if got.Version != 22 || !reflect.DeepEqual(tombstoneTimes(t, got), want) || !reflect.DeepEqual(ckptPaths(got.Files()), ckptPaths(snap.Files())) {
					t.Fatalf("crash at op %d (after=%v, retried %v): version %d, %d tombstones (want %d)", op, after, retry, got.Version, len(tombstoneTimes(t, got)), len(want))
				}
				// A crash before the checkpoint landed: the next one is
				// written (copying again) and must load the same.
				if !retry && got.CheckpointVersion() != 22 {
					if err := writeCheckpoint(ctx, storage.NewLocal(work), got, time.Now()); err != nil {
						t.Fatalf("checkpoint after the crash at op %d: %v", op, err)
					}
				}
			}
		}
		if !crashed {
			if op < 5 {
				t.Fatalf("only %d storage ops", op-1)
			}
			break
		}
	}
}
