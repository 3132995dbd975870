package delta

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestConcurrentBlindAppends: several writers, each its own Table on one
// directory as separate processes would be, append at once. Every append
// lands exactly once, at its own version, and the versions are contiguous.
func TestConcurrentBlindAppends(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	createTable(t, storage.NewLocal(dir), map[string]string{"delta.checkpointInterval": "1000"})
	const writers, commits = 4, 12
	var wg sync.WaitGroup
	versions := make([][]int64, writers)
	retries := make([]int, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tbl := Open(storage.NewLocal(dir))
			<-start
			for i := 0; i < commits; i++ {
				for {
					snap, err := tbl.Snapshot(ctx)
					if err != nil {
						errs[w] = err
						return
					}
					tx := tbl.Begin(snap)
					tx.Add(fakeAdd(fmt.Sprintf("w%d-%02d", w, i)))
					c, err := tx.Commit(ctx, "WRITE", nil)
					if errors.Is(err, ErrRetriesExhausted) {
						retries[w] += 10
						continue // nothing was written: begin again
					}
					if err != nil {
						errs[w] = err
						return
					}
					retries[w] += c.Retries
					versions[w] = append(versions[w], c.Version)
					break
				}
			}
		}(w)
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	var all []int64
	for _, v := range versions {
		all = append(all, v...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i, v := range all {
		if v != int64(i+1) {
			t.Fatalf("versions %v: want 1..%d each once", all, writers*commits)
		}
	}
	tbl := Open(storage.NewLocal(dir))
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != writers*commits || snap.NumFiles() != writers*commits {
		t.Fatalf("table at version %d with %d files; want %d and %d", snap.Version, snap.NumFiles(), writers*commits, writers*commits)
	}
	seen := map[string]int64{}
	for v := int64(1); v <= snap.Version; v++ {
		for _, a := range mustCommit(t, tbl, v) {
			if a.Add == nil {
				continue
			}
			if prev, dup := seen[a.Add.Path]; dup {
				t.Errorf("file %s committed at %d and %d", a.Add.Path, prev, v)
			}
			seen[a.Add.Path] = v
		}
	}
	if len(seen) != writers*commits {
		t.Errorf("%d distinct files committed, want %d", len(seen), writers*commits)
	}
	t.Logf("lost races retried per writer: %v", retries)
}

// TestConcurrentConflicts: writers that all read one snapshot and then do
// the same conflicting thing at once. Exactly one wins; every other gets
// the typed error of the rule it broke and writes nothing.
func TestConcurrentConflicts(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		build func(tx *Transaction, s *Snapshot, w int)
		want  error
	}{
		{"same application (fencing)", func(tx *Transaction, s *Snapshot, w int) {
			last, _ := tx.ReadTxn("orders-0")
			tx.Add(fakeAdd(fmt.Sprint("w", w)))
			tx.SetTxn("orders-0", last.Version+1)
		}, ErrConcurrentTransaction},
		{"same file removed", func(tx *Transaction, s *Snapshot, w int) {
			a, _ := tx.ReadFile(fakeAdd("seed").Key())
			tx.RemoveFile(a, true)
			tx.Add(fakeAdd(fmt.Sprint("w", w)))
		}, ErrConcurrentDeleteDelete},
		{"metadata change", func(tx *Transaction, s *Snapshot, w int) {
			tx.SetMetadata(testMetadata(map[string]string{"writer": fmt.Sprint(w)}))
		}, ErrMetadataChanged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tbl, snap := createTable(t, storage.NewLocal(dir), nil)
			seed := tbl.Begin(snap)
			seed.Add(fakeAdd("seed"))
			seed.SetTxn("orders-0", 7)
			c, err := seed.Commit(ctx, "WRITE", nil)
			if err != nil {
				t.Fatal(err)
			}
			const writers = 5
			var wg, ready sync.WaitGroup
			errs := make([]error, writers)
			start := make(chan struct{})
			for w := 0; w < writers; w++ {
				wg.Add(1)
				ready.Add(1)
				go func(w int) {
					defer wg.Done()
					tbl := Open(storage.NewLocal(dir))
					s, err := tbl.Snapshot(ctx)
					ready.Done() // every writer reads before any commits
					if err != nil {
						errs[w] = err
						return
					}
					tx := tbl.Begin(s)
					tc.build(tx, s, w)
					<-start
					_, errs[w] = tx.Commit(ctx, "WRITE", nil)
				}(w)
			}
			ready.Wait()
			close(start)
			wg.Wait()
			won := 0
			for w, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, tc.want) || !errors.Is(err, ErrConflict):
					t.Errorf("writer %d: %v; want %v", w, err, tc.want)
				}
			}
			if won != 1 {
				t.Errorf("%d writers won; want exactly 1", won)
			}
			latest, err := Open(storage.NewLocal(dir)).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if latest.Version != c.Version+1 {
				t.Errorf("table at version %d; want %d (one winner)", latest.Version, c.Version+1)
			}
		})
	}
}
