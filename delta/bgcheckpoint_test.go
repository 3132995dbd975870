package delta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// heldCheckpoints holds every checkpoint write until release is closed.
type heldCheckpoints struct {
	storage.Storage
	release chan struct{}
	started chan string
}

func (h *heldCheckpoints) WriteIfAbsent(ctx context.Context, path string, data []byte) error {
	if strings.HasSuffix(path, ".checkpoint.parquet") {
		h.started <- path
		<-h.release
	}
	return h.Storage.WriteIfAbsent(ctx, path, data)
}

// TestBackgroundCheckpoint: with BackgroundCheckpoints a checkpoint
// version's commit returns while its checkpoint is still being written,
// the commits after it go on meanwhile, a checkpoint version reached
// while it runs is skipped, and once released the checkpoint lands
// (readers start from it) with its outcome handed over. Each checkpoint's
// start is reported (CheckpointStartHandler) before its write, so while
// it is held, and before its outcome.
func TestBackgroundCheckpoint(t *testing.T) {
	ctx := context.Background()
	held := &heldCheckpoints{Storage: storage.NewLocal(t.TempDir()), release: make(chan struct{}), started: make(chan string, 8)}
	var mu sync.Mutex
	var outcomes []CheckpointOutcome
	var events []string // "start N" and "end N", in the order reported
	tbl, snap := createTable(t, held, map[string]string{"delta.checkpointInterval": "2"},
		BackgroundCheckpoints(func(o CheckpointOutcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			events = append(events, fmt.Sprintf("end %d", o.Version))
			mu.Unlock()
		}),
		CheckpointStartHandler(func(v int64) {
			mu.Lock()
			events = append(events, fmt.Sprintf("start %d", v))
			mu.Unlock()
		}))
	commit := func(i int) *Committed {
		t.Helper()
		c := replaceFiles(t, tbl, snap, i)
		snap = c.Snapshot
		return c
	}
	for i := 1; i <= 5; i++ {
		c := commit(i)
		switch c.Version {
		case 2:
			if !c.Checkpointed || !c.CheckpointBackground || c.CheckpointSkipped {
				t.Fatalf("version 2: %+v, want its checkpoint started in the background", c)
			}
			if p := <-held.started; !strings.Contains(p, "00000000000000000002.checkpoint") {
				t.Fatalf("checkpoint write of %s, want version 2's", p)
			}
		case 4:
			// Version 2's checkpoint is still held: this one is skipped.
			if c.Checkpointed || !c.CheckpointSkipped {
				t.Fatalf("version 4: %+v, want its checkpoint skipped while version 2's runs", c)
			}
		default:
			if c.Checkpointed || c.CheckpointSkipped {
				t.Fatalf("version %d is no checkpoint version: %+v", c.Version, c)
			}
		}
	}
	mu.Lock()
	early, reported := len(outcomes), fmt.Sprint(events)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d outcomes while the checkpoint was held", early)
	}
	if reported != "[start 2]" {
		t.Fatalf("reported %s while version 2's checkpoint was held, want [start 2]", reported)
	}
	// A bounded wait gives up on the held checkpoint and names it.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	v, finished := tbl.WaitCheckpointsUntil(wctx)
	cancel()
	if finished || v != 2 {
		t.Fatalf("WaitCheckpointsUntil while version 2's checkpoint is held = %d, %v; want 2, false", v, finished)
	}
	if _, err := held.Read(ctx, ckptClassicPath(2)); err == nil {
		t.Fatal("version 2's checkpoint exists while its write is held")
	}
	close(held.release)
	if _, finished := tbl.WaitCheckpointsUntil(ctx); !finished {
		t.Fatal("WaitCheckpointsUntil without a deadline returned before the released checkpoint finished")
	}
	if len(outcomes) != 1 || outcomes[0].Version != 2 || outcomes[0].Err != nil || outcomes[0].Took <= 0 {
		t.Fatalf("outcomes %+v, want version 2's, without error", outcomes)
	}
	replayed, err := Open(held.Storage).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if replayed.CheckpointVersion() != 2 {
		t.Errorf("a reader starts from version %d's checkpoint, want 2", replayed.CheckpointVersion())
	}
	sameState(t, "after the background checkpoint", snap, replayed)
	// The next checkpoint version starts one again.
	commit(6)
	if p := <-held.started; !strings.Contains(p, "00000000000000000006.checkpoint") {
		t.Fatalf("checkpoint write of %s, want version 6's", p)
	}
	tbl.WaitCheckpoints()
	if len(outcomes) != 2 || outcomes[1].Version != 6 || outcomes[1].Err != nil {
		t.Fatalf("outcomes %+v, want version 6's second", outcomes)
	}
	if got, want := fmt.Sprint(events), "[start 2 end 2 start 6 end 6]"; got != want {
		t.Fatalf("reported %s, want %s", got, want)
	}
}

// TestBackgroundCheckpointFailure: a background checkpoint that cannot be
// written reaches both the outcome and CheckpointErrorHandler, with its
// version; the commit before it stood.
func TestBackgroundCheckpointFailure(t *testing.T) {
	f := storage.NewFaulty(storage.NewLocal(t.TempDir()))
	f.SetRule(func(op storage.Op) storage.Fault {
		if strings.HasSuffix(op.Path, ".checkpoint.parquet") {
			return storage.Fail
		}
		return storage.Pass
	})
	var outcome CheckpointOutcome
	var handled []int64
	tbl, snap := createTable(t, f, map[string]string{"delta.checkpointInterval": "2"},
		BackgroundCheckpoints(func(o CheckpointOutcome) { outcome = o }),
		CheckpointErrorHandler(func(v int64, err error) { handled = append(handled, v) }))
	for i := 1; i <= 2; i++ {
		snap = replaceFiles(t, tbl, snap, i).Snapshot
	}
	tbl.WaitCheckpoints()
	if outcome.Version != 2 || !errors.Is(outcome.Err, storage.ErrInjected) || !strings.Contains(outcome.Err.Error(), "checkpoint version 2") {
		t.Fatalf("outcome %+v, want version 2's injected failure", outcome)
	}
	if len(handled) != 1 || handled[0] != 2 {
		t.Fatalf("CheckpointErrorHandler saw versions %v, want [2]", handled)
	}
	if got, err := Open(f).Snapshot(context.Background()); err != nil || got.Version != 2 {
		t.Fatalf("table after the failed checkpoint: %v, %v; want version 2", got, err)
	}
}
