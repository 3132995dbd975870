package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// StatePath is where the engine records a table's halt, relative to the
// table root. The leading underscore keeps it out of Delta readers' and
// vacuum's view, and it lives beside the table so that `cdcapply status`
// run from anywhere sees it without talking to the engine's process.
const StatePath = "_cdcapply/state.json"

// TableState is the engine's last word on a table outside the Delta log.
type TableState struct {
	// Halted is true when the engine stopped the table loudly.
	Halted bool `json:"halted"`
	// Class is the halt's short class (the halted metric's label).
	Class string `json:"class,omitempty"`
	// Reason is the halting error's text.
	Reason string `json:"reason,omitempty"`
	// At is when the engine halted the table.
	At time.Time `json:"at"`
	// Version is the table version the engine had applied when it halted;
	// a later version means the table ran again after the halt.
	Version int64 `json:"version"`
	// ResumedAt is when an engine started applying the table again after
	// the halt (nil: not since). A restarted engine may have nothing to
	// commit for a long while on a quiet table; without this the halt
	// would look current until its first commit.
	ResumedAt *time.Time `json:"resumed_at,omitempty"`
}

// WriteState replaces the table's state file atomically.
func WriteState(ctx context.Context, store storage.Storage, st TableState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode table state: %w", err)
	}
	if err := store.Write(ctx, StatePath, append(b, '\n')); err != nil {
		return fmt.Errorf("write table state: %w", err)
	}
	return nil
}

// ReadState returns the table's recorded state; false when none was
// recorded.
func ReadState(ctx context.Context, store storage.Storage) (TableState, bool, error) {
	b, err := store.Read(ctx, StatePath)
	if errors.Is(err, storage.ErrNotExist) {
		return TableState{}, false, nil
	}
	if err != nil {
		return TableState{}, false, fmt.Errorf("read table state: %w", err)
	}
	var st TableState
	if err := json.Unmarshal(b, &st); err != nil {
		return TableState{}, false, fmt.Errorf("decode table state %s: %w", StatePath, err)
	}
	return st, true, nil
}

// ClearState removes the table's state file (the table runs again).
func ClearState(ctx context.Context, store storage.Storage) error {
	if err := store.Delete(ctx, StatePath); err != nil {
		return fmt.Errorf("clear table state: %w", err)
	}
	return nil
}

// recordResume marks a recorded halt of t as history once Run has opened
// the table again. Like recordHalt it logs a failure to read or write the
// state file instead of returning it: the file only informs `cdcapply
// status`, and the table runs either way.
func (e *Engine) recordResume(ctx context.Context, t *tableRun) {
	st, ok, err := ReadState(ctx, t.store)
	if err == nil && (!ok || !st.Halted || st.ResumedAt != nil) {
		return
	}
	if err == nil {
		now := e.clock().UTC()
		st.ResumedAt = &now
		err = WriteState(ctx, t.store, st)
	}
	if err != nil {
		e.log.Error("record table resumed after a halt", "table", t.cfg.Name, "err", err)
		return
	}
	e.log.Info("table resumed after a recorded halt", "table", t.cfg.Name, "halted_at", st.At, "class", st.Class)
}

// recordHalt writes the halt of t for `cdcapply status`. A failure to
// write it is logged, not returned: the halt itself already happened and
// is logged loudly; the state file only makes it visible from outside.
func (e *Engine) recordHalt(t *tableRun, class string, reason error) {
	var version int64 = -1
	if t.applier != nil {
		if snap := t.applier.Snapshot(); snap != nil {
			version = snap.Version
		}
	}
	st := TableState{Halted: true, Class: class, Reason: reason.Error(), At: e.clock().UTC(), Version: version}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := WriteState(ctx, t.store, st); err != nil {
		e.log.Error("record table halt", "table", t.cfg.Name, "err", err)
	}
}
