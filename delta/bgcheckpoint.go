package delta

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CheckpointOutcome is how a log checkpoint written in the background
// (BackgroundCheckpoints) ended: the checkpoint version, the time the
// checkpoint and the log cleanup after it took, and their failure if
// any (the commit stands either way).
type CheckpointOutcome struct {
	Version int64
	Took    time.Duration
	Err     error
}

// BackgroundCheckpoints moves the log checkpoint of a checkpoint version
// (delta.checkpointInterval) and the expired-log cleanup after it off the
// commit's path: Commit returns once the commit has landed, and a
// goroutine writes the checkpoint of that version's snapshot meanwhile,
// then hands done the outcome (on its own goroutine). At most one
// checkpoint runs per Table: a checkpoint version reached while one runs
// is skipped (Committed.CheckpointSkipped), and the next covers it.
// WaitCheckpoints waits for the one running. A crash mid-way loses only
// the checkpoint: it is written whole or not at all, and readers replay
// the log from the previous one.
func BackgroundCheckpoints(done func(CheckpointOutcome)) Option {
	return func(o *options) { o.background = &bgCheckpoints{done: done} }
}

// bgCheckpoints runs a table's background checkpoints, one at a time.
type bgCheckpoints struct {
	done    func(CheckpointOutcome)
	mu      sync.Mutex
	running bool
	version int64 // the running checkpoint's version
	wg      sync.WaitGroup
	// written is the last checkpoint written and not yet taken by a
	// commit, which rebases its snapshot on it (Snapshot.rebased).
	written *writtenCheckpoint
}

// writtenCheckpoint is a checkpoint written in the background: the
// snapshot it was written from, its file and its number of removes.
type writtenCheckpoint struct {
	snap    *Snapshot
	path    string
	removes int
}

// setWritten records a checkpoint that landed.
func (b *bgCheckpoints) setWritten(w *writtenCheckpoint) {
	b.mu.Lock()
	if b.written == nil || b.written.snap.Version < w.snap.Version {
		b.written = w
	}
	b.mu.Unlock()
}

// takeWritten returns the checkpoint recorded by setWritten, once.
func (b *bgCheckpoints) takeWritten() *writtenCheckpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.written
	b.written = nil
	return w
}

// start runs write in the background unless a checkpoint is running
// already (false).
func (b *bgCheckpoints) start(version int64, began func(int64), write func() error) bool {
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		return false
	}
	b.running, b.version = true, version
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		if began != nil {
			began(version)
		}
		started := time.Now()
		err := write()
		out := CheckpointOutcome{Version: version, Took: time.Since(started), Err: err}
		// The outcome is handed over before the next checkpoint may
		// start, so outcomes arrive in version order.
		if b.done != nil {
			b.done(out)
		}
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
	return true
}

// WaitCheckpoints waits for the background checkpoint running, if any
// (BackgroundCheckpoints), and for its outcome to be handed over.
func (t *Table) WaitCheckpoints() {
	if b := t.opts.background; b != nil {
		b.wg.Wait()
	}
}

// WaitCheckpointsUntil is WaitCheckpoints bounded by ctx: it reports true
// once no background checkpoint runs, or false with the running
// checkpoint's version when ctx ends first. That checkpoint goes on; if
// the process exits meanwhile it is lost whole (it is written whole or
// not at all) and readers replay the log from the previous one.
func (t *Table) WaitCheckpointsUntil(ctx context.Context) (version int64, finished bool) {
	b := t.opts.background
	if b == nil {
		return 0, true
	}
	waited := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		return 0, true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Not running any more: its outcome has been handed over.
	return b.version, !b.running
}

// checkpointInBackground starts version's checkpoint of snap with
// tombstones deleted before cutoff left out, and the log cleanup after
// it; ctx's values are kept but not its cancellation (the commit's
// context may end as soon as Commit returns).
func (tx *Transaction) checkpointInBackground(ctx context.Context, snap *Snapshot, cutoff int64) bool {
	t := tx.table
	loc := t.Location()
	bctx := context.WithoutCancel(ctx)
	return t.opts.background.start(snap.Version, t.opts.checkpointStart, func() error {
		path, removes, err := t.writeCheckpointOf(bctx, snap, cutoff)
		if err != nil {
			err = fmt.Errorf("checkpoint version %d of table %s: %w", snap.Version, loc, err)
		} else {
			// The next commit leaves this checkpoint's removes to it.
			t.opts.background.setWritten(&writtenCheckpoint{snap: snap, path: path, removes: removes})
			withCkpt := *snap
			withCkpt.checkpointVersion = snap.Version
			if cerr := t.cleanupExpiredLogs(bctx, &withCkpt); cerr != nil {
				err = fmt.Errorf("clean up log of table %s after version %d: %w", loc, snap.Version, cerr)
			}
		}
		if err != nil && t.opts.checkpointError != nil {
			t.opts.checkpointError(snap.Version, err)
		}
		return err
	})
}
