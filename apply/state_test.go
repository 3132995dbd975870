package apply

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestHaltRecordsState checks that Engine.halt leaves the state file that
// `cdcapply status` reads, and that ClearState removes it.
func TestHaltRecordsState(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("x", 3600))
	e := &Engine{clock: func() time.Time { return at }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tr := &tableRun{cfg: TableConfig{Name: "items"}, store: store}
	tr.buf.reset()

	if _, ok, err := ReadState(ctx, store); err != nil || ok {
		t.Fatalf("state before any halt: ok=%v err=%v, want none", ok, err)
	}
	e.halt(tr, "schema", errors.New("table items: incompatible schema change"))
	// A second halt keeps the first reason, as the engine does.
	e.halt(tr, "other", errors.New("second"))
	st, ok, err := ReadState(ctx, store)
	if err != nil || !ok {
		t.Fatalf("state after halt: ok=%v err=%v", ok, err)
	}
	want := TableState{Halted: true, Class: "schema", Reason: "table items: incompatible schema change", At: at.UTC(), Version: -1}
	if st != want {
		t.Fatalf("state = %+v, want %+v", st, want)
	}
	if err := ClearState(ctx, store); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadState(ctx, store); err != nil || ok {
		t.Fatalf("state after clear: ok=%v err=%v, want none", ok, err)
	}
	if err := store.Write(ctx, StatePath, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadState(ctx, store); err == nil {
		t.Fatal("a corrupt state file read without error")
	}
}
