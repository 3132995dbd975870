package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/tombstone"
	"github.com/google/uuid"
)

// ErrFenced is wrapped when another writer advanced one of the batch's
// partitions in the table since this applier read it: this instance lost
// those partitions (a rebalance, or it is a zombie). The batch is dropped
// and the caller re-seeks from the table.
var ErrFenced = errors.New("fenced: another writer advanced a partition of this batch")

// Batch is what one commit applies: the row changes of one table and the
// Kafka span each partition covered (including records that were skipped
// or quarantined, so the positions move past them too).
type Batch struct {
	Changes []*Change
	Ranges  map[checkpoint.TopicPartition]checkpoint.Range
	// TopicIDs are the Kafka topic IDs of the topics the batch was read
	// from (as Kafka's tools print them), when the brokers send them: the
	// commit records those the table lacks (TopicsDomain) and refuses to
	// record positions of a topic whose recorded ID differs.
	TopicIDs map[string]string
	// Records counts what was read, by outcome, for commitInfo.
	Read, Skipped, Quarantined int
}

// Result is the outcome of one committed batch.
type Result struct {
	Version int64
	Counts  Counts
	Files   struct{ Added, Removed int }
	// Durations times the stages for metrics: Plan is reduce, plan and
	// the data files written; Commit is the Delta log commit; Checkpoint
	// is the log checkpoint reported with this result (Checkpointed).
	Durations struct{ Plan, Commit, Checkpoint time.Duration }
	// Checkpointed says a log checkpoint ended since the previous result:
	// that of CheckpointVersion (every delta.checkpointInterval-th
	// version), written in the background while this batch was applied
	// (or, by a TableApplier without an engine, during this commit);
	// CheckpointErr is its failure. The batches stand either way: readers
	// replay more of the log until a later checkpoint lands.
	Checkpointed      bool
	CheckpointVersion int64
	CheckpointErr     error
	// CheckpointSkipped says this commit's version was a checkpoint
	// version but the previous checkpoint was still being written: the
	// next checkpoint version's covers it.
	CheckpointSkipped bool
	// Keys and Tombstones are the rows the table holds after the commit
	// (every key's row, and those soft-deleted), from the key index.
	Keys, Tombstones int
	// LogFiles and LogRemoved are the data files of the table's log state
	// after the commit: live (add actions) and removed (remove actions
	// the log keeps until delta.deletedFileRetentionDuration, which every
	// log checkpoint carries and the writer's snapshot holds in memory).
	// A merge-on-read commit removes and re-adds each file whose deletion
	// vector it changes, so LogRemoved grows by the files a commit
	// touches until the retention expires them.
	LogFiles, LogRemoved int
}

// setCheckpoint reports a log checkpoint's outcome with r.
func (r *Result) setCheckpoint(o delta.CheckpointOutcome) {
	r.Checkpointed, r.CheckpointVersion, r.CheckpointErr = true, o.Version, o.Err
	r.Durations.Checkpoint = o.Took
}

// TableApplier applies batches to one Delta table. It is not safe for
// concurrent use: one goroutine owns a table.
type TableApplier struct {
	// checkpointDone, when set, receives the outcome of a log checkpoint
	// written during a commit (the engine's tables write theirs in the
	// background, delta.BackgroundCheckpoints, and it receives those too).
	checkpointDone func(delta.CheckpointOutcome)
	name           string
	pipeline       string
	table          *delta.Table
	newFiles       func(*Layout) (RowFiles, error)
	rf             RowFiles // for the current layout
	keyNames       []string
	clock          func() time.Time
	mode           MergeMode
	fold           bool              // merge-on-read batches fold small and hollow files
	props          map[string]string // table properties to set (SetTableProperties)
	// onStage, when set, is told each stage a batch enters, on the
	// applying goroutine: stagePlan (reduce, plan, data files), then
	// stageCommit (the log commit).
	onStage func(stage string)

	snap   *delta.Snapshot // nil until the table exists
	layout *Layout
	index  *KeyIndex
	// evolved is set when the layout gained columns the table's schema
	// lacks; the next commit carries the new schema.
	evolved bool
	// progress, when set, follows a key index build (Open).
	progress BuildProgress
	// broken is set when a refresh failed to reopen the table: the key
	// index may describe no version of it, so batches are refused until
	// Open succeeds.
	broken error

	// positions caches Positions for posSnap: the engine asks for every
	// record it routes, and parsing every txn per record would be work
	// done again and again on the hot path.
	positions checkpoint.Positions
	posSnap   *delta.Snapshot
	// topicIDs caches TopicIDs for topicIDsSnap, as positions does.
	topicIDs     map[string]string
	topicIDsErr  error
	topicIDsSnap *delta.Snapshot
}

// NewTableApplier opens the applier of a table; Open must be called before
// use. newFiles gives the data file access for a layout (it changes when
// the table is created or its schema evolves).
func NewTableApplier(name, pipeline string, table *delta.Table, newFiles func(*Layout) (RowFiles, error), keyNames []string, clock func() time.Time) *TableApplier {
	if clock == nil {
		clock = time.Now
	}
	return &TableApplier{name: name, pipeline: pipeline, table: table, newFiles: newFiles, keyNames: keyNames, clock: clock, fold: foldDefault}
}

// SetBuildProgress sets what follows each key index build: Open (the
// engine's start, a resync, a refresh that rebuilds) reads every file of
// the table, minutes at hundreds of millions of rows.
func (a *TableApplier) SetBuildProgress(p BuildProgress) { a.progress = p }

// SetFolding turns merge-on-read folding on (the default) or off: with it
// off, a table keeps one file per batch and deletion vectors on the older
// ones until optimize compacts them (tests of optimize build such tables).
func (a *TableApplier) SetFolding(on bool) { a.fold = on }

// SetTableProperties sets Delta table properties (delta.CheckTableProperty
// says which may be set): in the table's metadata when a batch creates it,
// and by the next commit to an existing table whose values differ (a
// metadata change: other writers of the table rebuild their key index
// once).
func (a *TableApplier) SetTableProperties(props map[string]string) error {
	for k, v := range props {
		if err := delta.CheckTableProperty(k, v); err != nil {
			return fmt.Errorf("table %s: %w", a.name, err)
		}
	}
	a.props = props
	return nil
}

// propsToSet reports whether conf lacks a property SetTableProperties set
// or holds another value for it.
func (a *TableApplier) propsToSet(conf map[string]string) bool {
	for k, v := range a.props {
		if got, ok := conf[k]; !ok || got != v {
			return true
		}
	}
	return false
}

// SetMergeMode chooses how batches write rows that replace stored ones
// (copy-on-write when never called). Merge-on-read needs data files that
// take deletion vectors; the first merge-on-read commit to an existing
// table adds the deletionVectors feature to its protocol.
func (a *TableApplier) SetMergeMode(m MergeMode) error {
	switch m {
	case "", CopyOnWrite:
		a.mode = CopyOnWrite
	case MergeOnRead:
		a.mode = MergeOnRead
	default:
		return fmt.Errorf("table %s: unknown merge mode %q", a.name, m)
	}
	return nil
}

// Open loads the table's latest snapshot and builds the key index. A
// missing table is fine: it is created by the first batch.
func (a *TableApplier) Open(ctx context.Context) error {
	snap, err := a.table.Snapshot(ctx)
	if errors.Is(err, delta.ErrNoTable) {
		a.snap, a.layout, a.index, a.rf, a.broken = nil, nil, nil, nil, nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("open table %s: %w", a.name, err)
	}
	keys, err := tableKeyColumns(snap.Metadata, a.keyNames)
	if err != nil {
		return fmt.Errorf("open table %s at %s: %w", a.name, a.table.Location(), err)
	}
	layout, err := LayoutFromTable(snap.Schema, keys)
	if err != nil {
		return fmt.Errorf("open table %s at %s: %w", a.name, a.table.Location(), err)
	}
	rf, err := a.newFiles(layout)
	if err != nil {
		return fmt.Errorf("open table %s: %w", a.name, err)
	}
	ix, err := buildKeyIndex(ctx, layout, snap, rf, a.progress)
	if err != nil {
		return fmt.Errorf("open table %s: %w", a.name, err)
	}
	a.snap, a.layout, a.index, a.rf, a.evolved, a.broken = snap, layout, ix, rf, false, nil
	if f, ok := rf.(fileForgetter); ok {
		// The data files kept open are shared with the previous layout's
		// (the engine's table keeps one cache): close those the table
		// does not hold now.
		f.retainFiles(func(path string) bool { _, live := ix.byPath[path]; return live })
	}
	return nil
}

// forget closes the kept-open data files among paths, which left the
// table: a vacuum that deletes them frees their disk space at once.
func (a *TableApplier) forget(paths []string) {
	if f, ok := a.rf.(fileForgetter); ok && len(paths) > 0 {
		f.forgetFiles(paths)
	}
}

// Positions returns the table's Kafka positions (next offset per partition).
// The result is shared: callers must not modify it.
func (a *TableApplier) Positions() checkpoint.Positions {
	if a.positions == nil || a.posSnap != a.snap {
		a.positions, a.posSnap = checkpoint.Restore(a.snap, a.pipeline), a.snap
	}
	return a.positions
}

// TopicIDs returns the Kafka topic IDs recorded in the table
// (TopicsDomain), nil before any is. The result is shared: callers must
// not modify it.
func (a *TableApplier) TopicIDs() (map[string]string, error) {
	if a.topicIDsSnap != a.snap || a.snap == nil {
		a.topicIDs, a.topicIDsErr = RecordedTopicIDs(a.snap)
		a.topicIDsSnap = a.snap
	}
	return a.topicIDs, a.topicIDsErr
}

// Layout returns the table's layout, nil before the table exists.
func (a *TableApplier) Layout() *Layout { return a.layout }

// Snapshot returns the applier's current snapshot, nil before the table exists.
func (a *TableApplier) Snapshot() *delta.Snapshot { return a.snap }

// SetLayout fixes the layout of a table that does not exist yet, from the
// first batch's schema; the first commit creates the table with it.
func (a *TableApplier) SetLayout(l *Layout) error {
	if a.snap != nil {
		return fmt.Errorf("set layout of table %s: the table exists", a.name)
	}
	rf, err := a.newFiles(l)
	if err != nil {
		return fmt.Errorf("set layout of table %s: %w", a.name, err)
	}
	a.layout, a.index, a.rf = l, NewKeyIndex(l), rf
	return nil
}

// Evolve extends the layout with new source columns (additive schema
// policy): they are appended, nullable, and join the table's schema in the
// next commit, together with the data that first carries them. Rows of
// older files read the new columns as NULL.
func (a *TableApplier) Evolve(cols []delta.StructField) error {
	if a.layout == nil {
		return fmt.Errorf("evolve table %s: no layout yet", a.name)
	}
	source := append(append([]delta.StructField(nil), a.layout.Source...), cols...)
	for i := len(a.layout.Source); i < len(source); i++ {
		source[i].Nullable = true
	}
	l, err := NewLayout(source, a.layout.KeyNames())
	if err != nil {
		return fmt.Errorf("evolve table %s: %w", a.name, err)
	}
	rf, err := a.newFiles(l)
	if err != nil {
		return fmt.Errorf("evolve table %s: %w", a.name, err)
	}
	a.layout, a.rf = l, rf
	a.index.layout = l
	a.evolved = a.snap != nil
	return nil
}

// Refreshed is what a Refresh found: other writers' commits between
// From and To, and how the key index caught up with them.
type Refreshed struct {
	From, To int64
	// Rebuilt says the table was reopened and its key index built again
	// from every file, for Reason; otherwise the index caught up with the
	// changed files alone (CatchUp).
	Rebuilt bool
	Reason  string
	CatchUp CatchUpStats
	Took    time.Duration
}

// Refresh catches up with commits other writers made since the applier's
// snapshot (a tombstone purge, a compaction, a restore, another instance):
// the key index must describe the table as it is, or a purged key would
// still look stored. Own commits advance the snapshot as they land, so a
// quiet table costs one log listing and returns nil. When the schema and
// protocol are unchanged, the key index reads only the files the other
// commits added (KeyIndex.CatchUp); otherwise, or when that finds two
// rows for one key, the table is reopened (a whole rebuild). Columns the
// layout gained but the table has not committed yet are kept.
func (a *TableApplier) Refresh(ctx context.Context) (*Refreshed, error) {
	started := time.Now()
	if a.snap == nil {
		if _, err := a.table.Snapshot(ctx); errors.Is(err, delta.ErrNoTable) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("refresh table %s: %w", a.name, err)
		}
		r := &Refreshed{From: -1, Rebuilt: true, Reason: "another writer created the table"}
		return a.rebuilt(ctx, r, started)
	}
	latest, err := a.table.Update(ctx, a.snap)
	if err != nil {
		return nil, fmt.Errorf("refresh table %s: %w", a.name, err)
	}
	if latest.Version == a.snap.Version {
		return nil, nil
	}
	r := &Refreshed{From: a.snap.Version, To: latest.Version}
	switch {
	case a.index == nil || a.layout == nil:
		r.Reason = "no key index yet"
	case !reflect.DeepEqual(latest.Metadata, a.snap.Metadata):
		r.Reason = "the table's metadata changed"
	case !reflect.DeepEqual(latest.Protocol, a.snap.Protocol):
		r.Reason = "the table's protocol changed"
	default:
		st, err := a.index.CatchUp(ctx, latest, a.rf)
		r.CatchUp = st
		a.forget(st.gone)
		if err == nil {
			a.snap = latest
			r.Took = time.Since(started)
			return r, nil
		}
		// The index is between two versions now: rebuild it.
		r.Reason = err.Error()
	}
	r.Rebuilt = true
	return a.rebuilt(ctx, r, started)
}

// Reload brings the applier to the table's latest version after its
// batch was dropped (a conflict, fencing, a failed write: the engine's
// resync) or its partitions were assigned again (another instance may
// have written meanwhile). A failed commit leaves the key index as it was
// before the batch, so catching up with the commits since (Refresh) is
// enough and a large table is not read whole again for every conflict or
// rebalance; the table is reopened when the applier's state cannot be
// trusted (a failed refresh), when the layout has columns the table lacks
// (a batch that evolved the schema was dropped: it is read again and
// evolves again) or when the table did not exist.
func (a *TableApplier) Reload(ctx context.Context) (*Refreshed, error) {
	var reason string
	switch {
	case a.broken != nil:
		reason = "a refresh failed to reopen it"
	case a.snap == nil || a.index == nil:
		reason = "no table was open"
	case a.evolved:
		reason = "the dropped batch changed the schema"
	default:
		return a.Refresh(ctx)
	}
	started := time.Now()
	from := int64(-1)
	if a.snap != nil {
		from = a.snap.Version
	}
	if err := a.Open(ctx); err != nil {
		return nil, err
	}
	if a.snap == nil {
		return nil, nil
	}
	return &Refreshed{From: from, To: a.snap.Version, Rebuilt: true, Reason: reason, Took: time.Since(started)}, nil
}

// rebuilt reopens the table for Refresh. On failure the applier refuses
// batches until Open succeeds: its key index may describe no version.
func (a *TableApplier) rebuilt(ctx context.Context, r *Refreshed, started time.Time) (*Refreshed, error) {
	if err := a.reopenKeeping(ctx); err != nil {
		if r.Reason != "" {
			err = fmt.Errorf("%w (reopened because %s)", err, r.Reason)
		}
		a.broken = err
		return nil, err
	}
	if a.snap != nil {
		r.To = a.snap.Version
	}
	r.Took = time.Since(started)
	return r, nil
}

// reopenKeeping reopens the table and re-applies pending new columns.
func (a *TableApplier) reopenKeeping(ctx context.Context) error {
	var pending []delta.StructField
	if a.layout != nil {
		pending = append(pending, a.layout.Source...)
	}
	if err := a.Open(ctx); err != nil {
		return err
	}
	if a.layout == nil {
		return nil
	}
	var extra []delta.StructField
	for _, f := range pending {
		if _, ok := a.layout.Column(f.Name); !ok {
			extra = append(extra, f)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	return a.Evolve(extra)
}

// LateBeyondHorizon splits off the changes the table must refuse after a
// tombstone purge: a change for a key the table no longer holds whose
// source commit time is older than the purge horizon. Its key may have
// been a purged tombstone, and inserting it would resurrect a deleted row;
// the caller quarantines it (tombstone.ReasonLateBeyondHorizon).
func (a *TableApplier) LateBeyondHorizon(changes []*Change) (late, kept []*Change) {
	if a.snap == nil || a.index == nil {
		return nil, changes
	}
	g := tombstone.NewGuard(a.snap)
	if _, active := g.Horizon(); !active {
		return nil, changes
	}
	kept = changes[:0:0]
	for _, c := range changes {
		if !c.tombstone && !a.index.has(c.Key) && g.Refuse(c.SourceTsMicros) {
			late = append(late, c)
			continue
		}
		kept = append(kept, c)
	}
	return late, kept
}

// Apply commits one batch: reduce, plan against the key index, write data
// files, then one Delta commit holding the data actions, one txn per
// partition and a commitInfo with the counts and offset ranges. Positions
// must continue exactly where the table's txn left them: a partition the
// table already advanced past the batch's start is fenced.
func (a *TableApplier) Apply(ctx context.Context, b *Batch) (*Result, error) {
	if a.broken != nil {
		return nil, fmt.Errorf("apply to table %s: not reopened after a failed refresh: %w", a.name, a.broken)
	}
	if a.layout == nil {
		return nil, fmt.Errorf("apply to table %s: no layout: the table does not exist and no schema is known", a.name)
	}
	tx := a.table.Begin(a.snap)
	if err := a.checkPositions(tx, b); err != nil {
		return nil, err
	}
	a.enter(stagePlan)
	now := a.clock()
	started := time.Now()
	plan, err := a.index.PlanBatch(ctx, Reduce(b.Changes), a.rf, now.UnixMicro(), a.mode, a.fold)
	if err != nil {
		return nil, fmt.Errorf("apply to table %s: %w", a.name, err)
	}
	planned := time.Since(started)
	res, err := a.commit(ctx, tx, b, plan, now, "MERGE")
	if res != nil {
		res.Durations.Plan = planned
	}
	return res, err
}

// Truncate applies a source TRUNCATE (the batch holds just its record):
// every live row older than the truncate becomes a tombstone at its
// sequence, in one commit with the partition's position. The caller
// commits everything read before the truncate first.
func (a *TableApplier) Truncate(ctx context.Context, c *Change, b *Batch) (*Result, error) {
	if a.broken != nil {
		return nil, fmt.Errorf("truncate table %s: not reopened after a failed refresh: %w", a.name, a.broken)
	}
	if a.layout == nil {
		return nil, fmt.Errorf("truncate table %s: the table does not exist yet", a.name)
	}
	tx := a.table.Begin(a.snap)
	if err := a.checkPositions(tx, b); err != nil {
		return nil, err
	}
	a.enter(stagePlan)
	now := a.clock()
	plan, err := a.index.PlanTruncate(ctx, a.rf, c.Seq, c.SourceTsMicros, now.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("truncate table %s: %w", a.name, err)
	}
	return a.commit(ctx, tx, b, plan, now, "DELETE")
}

// enter reports that the batch entered stage.
func (a *TableApplier) enter(stage string) {
	if a.onStage != nil {
		a.onStage(stage)
	}
}

// checkPositions reads the batch's partitions' txns into the transaction
// (so a concurrent advance conflicts) and fences a batch that starts
// before the table's position.
func (a *TableApplier) checkPositions(tx *delta.Transaction, b *Batch) error {
	for tp, r := range b.Ranges {
		txn, ok := tx.ReadTxn(checkpoint.AppID(a.pipeline, tp))
		if ok && r.From < txn.Version {
			return fmt.Errorf("apply to table %s: %s: batch starts at offset %d but the table is at %d: %w", a.name, tp, r.From, txn.Version, ErrFenced)
		}
	}
	return nil
}

// commit writes a plan, the batch's positions and commitInfo as one commit.
func (a *TableApplier) commit(ctx context.Context, tx *delta.Transaction, b *Batch, plan *Plan, now time.Time, op string) (*Result, error) {
	if a.snap == nil {
		schemaString, err := delta.SchemaString(a.layout.Schema())
		if err != nil {
			return nil, fmt.Errorf("create table %s: %w", a.name, err)
		}
		created := now.UnixMilli()
		conf := map[string]string{keyColumnsProperty: keyColumnsValue(a.layout.KeyNames())}
		for k, v := range a.props {
			conf[k] = v
		}
		if a.mode == MergeOnRead {
			tx.SetProtocol(tableProtocolDV)
			conf[enableDVProperty] = "true"
		} else {
			tx.SetProtocol(tableProtocol)
		}
		tx.SetMetadata(delta.Metadata{ID: uuid.NewString(), Name: a.name, Format: delta.Format{Provider: "parquet", Options: map[string]string{}},
			SchemaString: schemaString, PartitionColumns: []string{}, CreatedTime: &created, Configuration: conf})
	}
	enableDV := false
	if a.snap != nil && plan.DeletionVectors && !hasDeletionVectors(a.snap.Protocol) {
		p, err := withDeletionVectors(a.snap.Protocol)
		if err != nil {
			return nil, fmt.Errorf("apply to table %s: merge-on-read: %w", a.name, err)
		}
		tx.SetProtocol(p)
		enableDV = true
	}
	setProps := a.snap != nil && a.propsToSet(a.snap.Metadata.Configuration)
	if a.evolved || enableDV || setProps {
		md := a.snap.Metadata
		if enableDV || setProps {
			conf := make(map[string]string, len(md.Configuration)+len(a.props)+1)
			for k, v := range md.Configuration {
				conf[k] = v
			}
			if enableDV {
				conf[enableDVProperty] = "true"
			}
			for k, v := range a.props {
				conf[k] = v
			}
			md.Configuration = conf
		}
		if a.evolved {
			schemaString, err := delta.SchemaString(a.layout.Schema())
			if err != nil {
				return nil, fmt.Errorf("evolve table %s: %w", a.name, err)
			}
			md.SchemaString = schemaString
		}
		tx.SetMetadata(md)
	}
	if err := a.recordTopicIDs(tx, b); err != nil {
		return nil, err
	}
	for _, old := range plan.Removes {
		tx.RemoveFile(old, true)
	}
	tx.Add(plan.Adds...)
	for _, act := range checkpoint.Txns(a.pipeline, b.Ranges, now) {
		tx.SetTxn(act.Txn.AppID, act.Txn.Version)
	}
	if a.snap == nil {
		op = "CREATE TABLE AS SELECT"
	}
	a.enter(stageCommit)
	started := time.Now()
	committed, err := tx.Commit(ctx, op, a.commitParams(b, plan))
	took := time.Since(started)
	if err != nil {
		// A conflict, or running out of retries over winners that did
		// not conflict (a zombie far behind, the live writer's commits
		// on other partitions first), is a fence when another writer
		// advanced one of this batch's partitions.
		lost := errors.Is(err, delta.ErrConflict) || errors.Is(err, delta.ErrRetriesExhausted)
		if lost && a.advancedElsewhere(ctx, b) {
			return nil, fmt.Errorf("apply to table %s: %w: %w", a.name, ErrFenced, err)
		}
		return nil, fmt.Errorf("apply to table %s: %w", a.name, err)
	}
	a.snap = committed.Snapshot
	a.evolved = false
	err = a.index.Apply(plan)
	if err == nil {
		gone := make([]string, 0, len(plan.Removes))
		for _, r := range plan.Removes {
			if _, kept := a.index.byPath[r.Path]; !kept { // not a new vector on the same file
				gone = append(gone, r.Path)
			}
		}
		a.forget(gone)
	}
	if err == nil && committed.Retries > 0 {
		// Other writers' commits landed first (a purge, an optimize of
		// files this batch did not touch, another instance's partitions)
		// and the snapshot has them: the index follows their files too,
		// or its next batch would find a purged file named.
		var st CatchUpStats
		st, err = a.index.CatchUp(ctx, a.snap, a.rf)
		a.forget(st.gone)
	}
	if err != nil {
		// The commit landed; only the index is wrong: rebuild it.
		if oerr := a.Open(ctx); oerr != nil {
			return nil, fmt.Errorf("apply to table %s: committed version %d, then %w; reopening: %w", a.name, committed.Version, err, oerr)
		}
	}
	res := &Result{Version: committed.Version, Counts: plan.Counts, Keys: a.index.Len(), Tombstones: a.index.Tombstones(),
		LogFiles: committed.Snapshot.NumFiles(), LogRemoved: committed.Snapshot.NumTombstones()}
	res.Files.Added, res.Files.Removed = len(plan.Adds), len(plan.Removes)
	res.Durations.Commit = took
	res.CheckpointSkipped = committed.CheckpointSkipped
	if committed.Checkpointed && !committed.CheckpointBackground {
		out := delta.CheckpointOutcome{Version: committed.Version, Took: committed.CheckpointTook, Err: committed.CheckpointErr}
		if a.checkpointDone != nil {
			a.checkpointDone(out)
		} else {
			res.setCheckpoint(out)
		}
	}
	return res, nil
}

// commitParams records the batch in commitInfo.operationParameters: the
// record accounting (read = applied + stale + skipped + quarantined) and
// the offset range of each partition, so the log alone explains a version.
func (a *TableApplier) commitParams(b *Batch, p *Plan) map[string]any {
	tps := make([]checkpoint.TopicPartition, 0, len(b.Ranges))
	for tp := range b.Ranges {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, checkpoint.TopicPartition.Compare)
	ranges := make([]map[string]any, 0, len(tps))
	for _, tp := range tps {
		r := b.Ranges[tp]
		ranges = append(ranges, map[string]any{"topic": tp.Topic, "partition": tp.Partition, "from": r.From, "next": r.Next})
	}
	return map[string]any{
		"pipeline":           a.pipeline,
		"recordsRead":        b.Read,
		"recordsApplied":     p.Counts.AppliedRecords,
		"recordsStale":       p.Counts.StaleRecords,
		"recordsSkipped":     b.Skipped,
		"recordsQuarantined": b.Quarantined,
		"rowsInserted":       p.Counts.Insert,
		"rowsUpdated":        p.Counts.Update,
		"rowsDeleted":        p.Counts.Delete,
		"rowsRevived":        p.Counts.Revive,
		"keysStale":          p.Counts.Stale,
		"unresolvedColumns":  p.Counts.Unresolved,
		"offsets":            ranges,
	}
}

// recordTopicIDs adds to tx the topic IDs of b that the table has not
// recorded, and refuses b when one differs from the recorded ID: its
// positions belong to another topic of the same name. A table whose
// protocol lacks domainMetadata (created before cdcapply gave new tables
// the feature, and never purged) records none.
func (a *TableApplier) recordTopicIDs(tx *delta.Transaction, b *Batch) error {
	if len(b.TopicIDs) == 0 || a.snap != nil && !hasDomainMetadata(a.snap.Protocol) {
		return nil
	}
	recorded, err := a.TopicIDs()
	if err != nil {
		return fmt.Errorf("apply to table %s: %w", a.name, err)
	}
	d, ok, err := topicIDsToRecord(a.name, recorded, b.TopicIDs, a.Positions())
	if err != nil {
		return err
	}
	if ok {
		tx.SetDomain(d)
	}
	return nil
}

// tableProtocol is what new tables get: readable by every reader (reader
// version 1) and with the domainMetadata writer feature from the start, so
// the first tombstone purge (which records its horizon as domain metadata)
// does not change the protocol under a running stream.
var tableProtocol = delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 7,
	WriterFeatures: []string{"appendOnly", "invariants", "domainMetadata"}}

// tableProtocolDV is what new merge-on-read tables get: the
// deletionVectors feature on both sides (reader version 3, so readers
// without deletion vector support refuse the table instead of returning
// deleted rows).
var tableProtocolDV = delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
	ReaderFeatures: []string{delta.FeatureDeletionVectors},
	WriterFeatures: []string{"appendOnly", "invariants", "domainMetadata", delta.FeatureDeletionVectors}}

// enableDVProperty is the table property that lets writers create
// deletion vectors.
const enableDVProperty = "delta.enableDeletionVectors"

func hasDeletionVectors(p delta.Protocol) bool {
	return p.MinReaderVersion == 3 && p.MinWriterVersion == 7 &&
		slices.Contains(p.ReaderFeatures, delta.FeatureDeletionVectors) && slices.Contains(p.WriterFeatures, delta.FeatureDeletionVectors)
}

// withDeletionVectors adds the deletionVectors feature to a table-features
// protocol (writer 7, reader 1 or 3). Legacy protocols imply feature sets
// that would have to be listed one by one; they are refused.
func withDeletionVectors(p delta.Protocol) (delta.Protocol, error) {
	if p.MinWriterVersion != 7 || (p.MinReaderVersion != 1 && p.MinReaderVersion != 3) {
		return p, fmt.Errorf("protocol %d/%d: the deletionVectors feature can be added only to a table-features protocol (writer 7, reader 1 or 3)", p.MinReaderVersion, p.MinWriterVersion)
	}
	out := delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: append([]string(nil), p.ReaderFeatures...), WriterFeatures: append([]string(nil), p.WriterFeatures...)}
	if !slices.Contains(out.ReaderFeatures, delta.FeatureDeletionVectors) {
		out.ReaderFeatures = append(out.ReaderFeatures, delta.FeatureDeletionVectors)
	}
	if !slices.Contains(out.WriterFeatures, delta.FeatureDeletionVectors) {
		out.WriterFeatures = append(out.WriterFeatures, delta.FeatureDeletionVectors)
	}
	return out, nil
}

// keyColumnsProperty records a table's key columns in its metadata, so a
// table created with the Kafka record key's fields can be reopened without
// configuration and a configuration that names other keys is refused.
const keyColumnsProperty = "cdcapply.keyColumns"

func keyColumnsValue(keys []string) string {
	b, _ := json.Marshal(keys)
	return string(b)
}

// tableKeyColumns reconciles the configured key columns with the table's.
func tableKeyColumns(m delta.Metadata, configured []string) ([]string, error) {
	var stored []string
	if v, ok := m.Configuration[keyColumnsProperty]; ok {
		if err := json.Unmarshal([]byte(v), &stored); err != nil {
			return nil, fmt.Errorf("read %s %q: %w", keyColumnsProperty, v, err)
		}
	}
	switch {
	case len(configured) == 0 && len(stored) == 0:
		return nil, fmt.Errorf("the table has no %s and the configuration names no key_columns", keyColumnsProperty)
	case len(configured) == 0:
		return stored, nil
	case len(stored) > 0 && fmt.Sprint(stored) != fmt.Sprint(configured):
		return nil, fmt.Errorf("key_columns %v differ from the table's key columns %v", configured, stored)
	}
	return configured, nil
}

// advancedElsewhere reports whether another writer moved one of the batch's
// partitions since this applier's snapshot. A conflict can be reported
// under another rule first (the other writer also rewrote our files), but
// it is fencing all the same when our partitions moved.
func (a *TableApplier) advancedElsewhere(ctx context.Context, b *Batch) bool {
	latest, err := a.table.Snapshot(ctx)
	if err != nil {
		return false
	}
	was := checkpoint.Restore(a.snap, a.pipeline)
	now := checkpoint.Restore(latest, a.pipeline)
	for tp := range b.Ranges {
		v0, _ := was.Next(tp)
		if v1, ok := now.Next(tp); ok && v1 > v0 {
			return true
		}
	}
	return false
}
