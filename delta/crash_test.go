package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// crashSteps is the length of the crash test's commit sequence; with the
// default interval it writes a log checkpoint at version 10.
const crashSteps = 15

// crashStep commits step i of the sequence on snap: two new data files
// (written to storage first, as the apply engine does), the removal of a
// file added three steps before, the application's txn at version i, a
// second application every other step, and a domain at step 5. Everything
// is a function of i and the table, so a resumed run repeats it exactly.
func crashStep(ctx context.Context, tbl *Table, store storage.Storage, snap *Snapshot, i int64) (*Snapshot, error) {
	tx := tbl.Begin(snap)
	if last, ok := tx.ReadTxn("app"); ok && last.Version >= i {
		return nil, fmt.Errorf("step %d already applied (app at %d)", i, last.Version)
	}
	for _, s := range []string{"a", "b"} {
		p := fmt.Sprintf("data/f%02d-%s.parquet", i, s)
		if err := store.Write(ctx, p, []byte(p)); err != nil {
			return nil, err
		}
		a := fakeAdd(strings.TrimSuffix(p, ".parquet"))
		tx.Add(a)
	}
	if i > 3 {
		k := fakeAdd(fmt.Sprintf("data/f%02d-a", i-3)).Key()
		a, ok := tx.ReadFile(k)
		if !ok {
			return nil, fmt.Errorf("step %d: file %s of step %d is gone", i, k.Path, i-3)
		}
		tx.RemoveFile(a, true)
	}
	tx.SetTxn("app", i)
	if i%2 == 0 {
		tx.SetTxn("app2", i/2)
	}
	if i == 5 {
		tx.SetDomain(DomainMetadata{Domain: "cdcapply.test", Configuration: `{"step":5}`})
	}
	c, err := tx.Commit(ctx, "WRITE", map[string]any{"step": i})
	if err != nil {
		return nil, err
	}
	if c.CheckpointErr != nil && errors.Is(c.CheckpointErr, storage.ErrCrashed) {
		return nil, c.CheckpointErr
	}
	return c.Snapshot, nil
}

// runCrashSequence brings the table to step `upto`, resuming after whatever
// step the table's txn says was applied last: the idempotent restart.
func runCrashSequence(ctx context.Context, tbl *Table, store storage.Storage, upto int64) (*Snapshot, error) {
	snap, err := tbl.Snapshot(ctx)
	if errors.Is(err, ErrNoTable) {
		tx := tbl.Begin(nil)
		tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
		tx.SetMetadata(testMetadata(map[string]string{"delta.checkpointInterval": "5"}))
		c, cerr := tx.Commit(ctx, "CREATE TABLE", nil)
		if cerr != nil {
			return nil, cerr
		}
		snap, err = c.Snapshot, nil
	}
	if err != nil {
		return nil, err
	}
	for {
		next := int64(1)
		if t, ok := snap.Txn("app"); ok {
			next = t.Version + 1
		}
		if next > upto {
			return snap, nil
		}
		if snap, err = crashStep(ctx, tbl, store, snap, next); err != nil {
			return nil, err
		}
	}
}

// crashDir is a fresh directory for one crash run, on memory-backed storage
// when the machine has it: the test makes thousands of fsyncs.
func crashDir(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "cdcapply-crash-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// TestCrashAtEveryOperation runs the commit sequence, crashing before and
// after each storage operation in turn. After each crash a new process (a
// fresh Table) must find a valid prefix of the sequence — exactly the state
// after some number of commits — having read only files the log
// references, and must resume to the full sequence with no step twice.
func TestCrashAtEveryOperation(t *testing.T) {
	// Real time, fixed: the checkpoint writer expires tombstones against the
	// wall clock, and nothing here is older than its one-week retention.
	now := time.Now()
	t.Run("no-cleanup", func(t *testing.T) { crashAtEveryOperation(t, now, false) })
	// 40 days on, log cleanup after the checkpoints at 5 and 10 finds the
	// commits below them past the 30-day retention and deletes them:
	// crashes hit the deletes. The table checkpoints every 5 versions, so
	// the checkpoint at 10 (and 15) reads the older removes back from the
	// one before it (Snapshot.spill): crashes hit those reads too.
	t.Run("with-cleanup", func(t *testing.T) { crashAtEveryOperation(t, now.Add(40*24*time.Hour), true) })
}

func crashAtEveryOperation(t *testing.T, start time.Time, cleanup bool) {
	ctx := context.Background()
	clock := Clock(func() time.Time { return start })

	// The reference run: the state after each version, and the op count.
	refStore := storage.NewFaulty(storage.NewLocal(crashDir(t)))
	refTbl := Open(refStore, clock)
	var want []*Snapshot
	for k := int64(0); k <= crashSteps; k++ {
		s, err := runCrashSequence(ctx, refTbl, refStore, k)
		if err != nil {
			t.Fatalf("reference run to step %d: %v", k, err)
		}
		// Read now: the reference table's later log cleanup deletes the
		// checkpoints an earlier state reads its removes back from.
		want = append(want, heldSnapshot(t, s))
	}
	if want[crashSteps].Version != crashSteps {
		t.Fatalf("reference run ended at version %d", want[crashSteps].Version)
	}
	counter := storage.NewFaulty(storage.NewLocal(crashDir(t)))
	if _, err := runCrashSequence(ctx, Open(counter, clock), counter, crashSteps); err != nil {
		t.Fatal(err)
	}
	total := counter.Count()
	wroteCkpt, deleted := false, 0
	for _, op := range counter.Ops() {
		wroteCkpt = wroteCkpt || strings.Contains(op.Path, ".checkpoint.")
		if op.Kind == storage.OpDelete {
			deleted++
		}
	}
	if !wroteCkpt {
		t.Fatalf("the sequence wrote no log checkpoint; ops: %v", counter.Ops())
	}
	if cleanup != (deleted > 0) {
		t.Fatalf("log cleanup deleted %d files; want deletes: %v", deleted, cleanup)
	}

	prefixes := map[int64]int{}
	for n := 1; n <= total; n++ {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("op%d-before", n)
			if after {
				name = fmt.Sprintf("op%d-after", n)
			}
			f := storage.NewFaulty(storage.NewLocal(crashDir(t)))
			f.CrashAt(n, after)
			if _, err := runCrashSequence(ctx, Open(f, clock), f, crashSteps); err == nil || !f.Crashed() {
				t.Fatalf("%s: sequence ended without the crash (err %v)", name, err)
			}
			f.Restart()
			mark := f.Count()
			tbl := Open(f, clock) // a new process
			snap, err := tbl.Snapshot(ctx)
			switch {
			case errors.Is(err, ErrNoTable):
				prefixes[-1]++
			case err != nil:
				t.Fatalf("%s: reopen: %v", name, err)
			default:
				prefixes[snap.Version]++
				sameState(t, name+": reopened", snap, want[snap.Version])
				checkReplayReads(t, name, f.Ops()[mark:], snap)
			}
			final, err := runCrashSequence(ctx, tbl, f, crashSteps)
			if err != nil {
				t.Fatalf("%s: resume: %v", name, err)
			}
			sameState(t, name+": resumed", final, want[crashSteps])
			fresh, err := Open(f).Snapshot(ctx)
			if err != nil {
				t.Fatalf("%s: final reopen: %v", name, err)
			}
			sameState(t, name+": final reopen", fresh, want[crashSteps])
			for _, op := range f.Ops() {
				if op.Kind == storage.OpRead && (storage.IsTemp(op.Path) || strings.HasPrefix(op.Path, "data/")) {
					t.Errorf("%s: read %s, which the log never references for replay", name, op.Path)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	// Crashes must have hit commits at many points of the sequence.
	if len(prefixes) < crashSteps {
		t.Errorf("crashes left only %d distinct prefixes: %v", len(prefixes), prefixes)
	}
	t.Logf("%d ops x 2 crash modes; prefixes seen (version: runs): %v", total, prefixes)
}

// checkReplayReads checks what opening the snapshot read: _last_checkpoint,
// the files of the checkpoint it started from, and the commits after it up
// to its version. Anything else (a temporary file, a data file, a commit
// the checkpoint covers, a checkpoint it did not use) is a failure.
func checkReplayReads(t *testing.T, name string, ops []storage.Op, snap *Snapshot) {
	t.Helper()
	for _, op := range ops {
		if op.Kind != storage.OpRead {
			continue
		}
		base := path.Base(op.Path)
		ok := false
		if v, isCommit := parseCommitName(base); isCommit {
			ok = path.Dir(op.Path) == LogDir && v > snap.CheckpointVersion() && v <= snap.Version
		} else if n, isCkpt := ckptParseName(base); isCkpt {
			ok = n.version == snap.CheckpointVersion()
		} else {
			ok = op.Path == lastCheckpointPath
		}
		if !ok {
			t.Errorf("%s: replay to version %d (checkpoint %d) read %s", name, snap.Version, snap.CheckpointVersion(), op.Path)
		}
	}
}
