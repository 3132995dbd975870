package delta

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// ErrNoTable is returned (wrapped) when a location has no Delta log: no
// commit and no checkpoint under _delta_log. Callers that create tables
// branch on it.
var ErrNoTable = errors.New("no Delta table")

// ErrVersionNotFound is returned (wrapped) when a requested version or
// timestamp is outside what the log can reconstruct: after the latest
// version, or before the earliest one still available after log cleanup.
var ErrVersionNotFound = errors.New("table version not available")

// Table is a Delta table at one storage location. It holds no state of the
// table itself: every Snapshot call reads the log, and a Transaction carries
// the snapshot it was begun from. A Table is safe for concurrent use.
type Table struct {
	store   storage.Storage
	opts    options
	cleaned cleanupMemo
}

// Option configures a Table.
type Option func(*options)

type options struct {
	maxRetries      int
	engineInfo      string
	clock           func() time.Time
	checkpointError func(version int64, err error)
	checkpointStart func(version int64)
	background      *bgCheckpoints // nil: checkpoints on the commit's path
}

// MaxCommitRetries bounds how many times a commit that lost a race to a
// non-conflicting commit is retried at the next version (default 10).
func MaxCommitRetries(n int) Option { return func(o *options) { o.maxRetries = n } }

// EngineVersion sets the version in commitInfo.engineInfo, written as
// "cdcapply/<version>" (default: the main module's version from the build).
func EngineVersion(v string) Option { return func(o *options) { o.engineInfo = "cdcapply/" + v } }

// Clock replaces time.Now for commit timestamps and log cleanup; tests use it.
func Clock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// CheckpointErrorHandler receives failures of the log checkpoint or log
// cleanup that follow a successful commit. They never fail the commit; they
// are also reported in Committed.CheckpointErr, or with
// BackgroundCheckpoints in the outcome.
func CheckpointErrorHandler(f func(version int64, err error)) Option {
	return func(o *options) { o.checkpointError = f }
}

// CheckpointStartHandler is called as a log checkpoint written in the
// background (BackgroundCheckpoints) starts, on the goroutine that writes
// it, before anything is written; its outcome follows, on the same
// goroutine, once it ends. With both, a caller can show a checkpoint in
// progress for as long as it runs, a hung one too. A checkpoint written
// on the commit's path is part of the commit and is not reported here.
func CheckpointStartHandler(f func(version int64)) Option {
	return func(o *options) { o.checkpointStart = f }
}

// Open returns the table at store's location. It does no I/O: a missing
// table shows as ErrNoTable from Snapshot.
func Open(store storage.Storage, opts ...Option) *Table {
	o := options{maxRetries: 10, engineInfo: "cdcapply/" + buildVersion(), clock: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return &Table{store: store, opts: o}
}

// Location names the table's storage location.
func (t *Table) Location() string { return t.store.Location() }

// Snapshot returns the table at its latest version.
func (t *Table) Snapshot(ctx context.Context) (*Snapshot, error) {
	return t.load(ctx, -1)
}

// SnapshotAt returns the table at version v (time travel by version).
func (t *Table) SnapshotAt(ctx context.Context, v int64) (*Snapshot, error) {
	if v < 0 {
		return nil, errorf(t, ErrVersionNotFound, "load version %d: versions start at 0", v)
	}
	return t.load(ctx, v)
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}
