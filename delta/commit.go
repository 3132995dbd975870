package delta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/google/uuid"
)

// ErrCommitUnknown is wrapped by a Commit error when the commit file may
// or may not have been written (a storage error other than "exists" on the
// write, and the outcome could not be read back). The caller must re-read
// the table, for cdcapply its txn actions, before doing anything else.
// Every other Commit error means nothing was committed.
var ErrCommitUnknown = errors.New("commit outcome unknown")

// ErrRetriesExhausted is wrapped when a commit lost more races to
// non-conflicting commits than MaxCommitRetries allows. Nothing was
// committed; the transaction may be rebuilt on a fresh snapshot.
var ErrRetriesExhausted = errors.New("commit retries exhausted")

// Transaction collects the actions of one commit and records what it read,
// so that a lost race can be judged by the protocol's conflict rules. It is
// not safe for concurrent use and commits at most once.
type Transaction struct {
	table *Table
	read  *Snapshot // nil when the transaction creates the table

	protocol *Protocol
	metadata *Metadata
	adds     []*Add
	removes  map[FileKey]*Remove
	// removeOrder keeps removes in call order for a stable commit file.
	removeOrder []FileKey
	txns        map[string]Txn
	txnOrder    []string
	domains     map[string]DomainMetadata

	readTxns  map[string]bool
	readFiles map[FileKey]bool
	readPreds []func(*Add) bool
	readAll   bool
	done      bool
}

// Begin starts a transaction on snap, or, with a nil snap, one that creates
// the table (it must then set a protocol and metadata).
func (t *Table) Begin(snap *Snapshot) *Transaction {
	return &Transaction{table: t, read: snap, removes: map[FileKey]*Remove{}, txns: map[string]Txn{},
		domains: map[string]DomainMetadata{}, readTxns: map[string]bool{}, readFiles: map[FileKey]bool{}}
}

func (tx *Transaction) readVersion() int64 {
	if tx.read == nil {
		return -1
	}
	return tx.read.Version
}

// Snapshot returns the snapshot the transaction reads (nil when creating).
func (tx *Transaction) Snapshot() *Snapshot { return tx.read }

// ReadTxn returns the latest txn of appID in the snapshot and records the
// read: a concurrent commit of a txn for appID makes this commit fail with
// ErrConcurrentTransaction.
func (tx *Transaction) ReadTxn(appID string) (Txn, bool) {
	tx.readTxns[appID] = true
	if tx.read == nil {
		return Txn{}, false
	}
	return tx.read.Txn(appID)
}

// ReadFiles returns the snapshot's live files that match (all files when
// match is nil) and records the read: a concurrent removal of one of them
// fails the commit with ErrConcurrentDeleteRead, a concurrent data-changing
// add of a file that matches with ErrConcurrentAppend. match must be a pure
// function of the add action (partition values, stats).
func (tx *Transaction) ReadFiles(match func(*Add) bool) []*Add {
	if match == nil {
		tx.readAll = true
	} else {
		tx.readPreds = append(tx.readPreds, match)
	}
	if tx.read == nil {
		return nil
	}
	var out []*Add
	tx.read.rangeFiles(func(a *Add) bool {
		if match == nil || match(a) {
			out = append(out, a)
			tx.readFiles[keyOf(a.Key())] = true
		}
		return true
	})
	return out
}

// ReadFile returns one live file of the snapshot and records the read like
// ReadFiles, for a caller that found the file by other means (an index).
func (tx *Transaction) ReadFile(k FileKey) (*Add, bool) {
	tx.readFiles[keyOf(k)] = true
	if tx.read == nil {
		return nil, false
	}
	return tx.read.File(k)
}

// Add adds data files.
func (tx *Transaction) Add(adds ...*Add) { tx.adds = append(tx.adds, adds...) }

// Remove removes data files. A removed file counts as read.
func (tx *Transaction) Remove(removes ...*Remove) {
	for _, r := range removes {
		k := keyOf(r.Key())
		if _, dup := tx.removes[k]; !dup {
			tx.removeOrder = append(tx.removeOrder, k)
		}
		tx.removes[k] = r
		tx.readFiles[k] = true
	}
}

// RemoveFile removes a live file, carrying its size, partition values,
// tags and deletion vector into the remove action as the protocol
// recommends (extendedFileMetadata), with the deletion time now. Stats
// are left out (optional in a remove): a file re-added with a new
// deletion vector is removed at every change, and its stats would make
// up most of the log's and the checkpoints' tombstones.
func (tx *Transaction) RemoveFile(a *Add, dataChange bool) {
	ts := tx.table.opts.clock().UnixMilli()
	size := a.Size
	ext := true
	tx.Remove(&Remove{Path: a.Path, DeletionTimestamp: &ts, DataChange: dataChange, ExtendedFileMetadata: &ext,
		PartitionValues: a.PartitionValues, Size: &size, Tags: a.Tags, DeletionVector: a.DeletionVector,
		BaseRowID: a.BaseRowID, DefaultRowCommitVersion: a.DefaultRowCommitVersion})
}

// SetTxn records appID's new version. Writing a txn counts as reading it:
// setting an application's version without knowing its latest one could
// move it backwards, so a concurrent txn of appID is always a conflict.
func (tx *Transaction) SetTxn(appID string, version int64) {
	ts := tx.table.opts.clock().UnixMilli()
	if _, dup := tx.txns[appID]; !dup {
		tx.txnOrder = append(tx.txnOrder, appID)
	}
	tx.txns[appID] = Txn{AppID: appID, Version: version, LastUpdated: &ts}
	tx.readTxns[appID] = true
}

// SetDomain writes a domainMetadata action (Removed drops the domain).
func (tx *Transaction) SetDomain(d DomainMetadata) { tx.domains[d.Domain] = d }

// SetMetadata replaces the table metadata. A metadata change reads the
// whole table: any concurrent data change conflicts with it.
func (tx *Transaction) SetMetadata(m Metadata) {
	tx.metadata = &m
	tx.readAll = true
}

// SetProtocol replaces the protocol; like SetMetadata it reads the whole table.
func (tx *Transaction) SetProtocol(p Protocol) {
	tx.protocol = &p
	tx.readAll = true
}

// Committed describes a successful commit.
type Committed struct {
	// Version is the table version the commit created.
	Version int64
	// Snapshot is the table right after the commit, derived from the read
	// snapshot, the concurrent commits it was retried past and its own
	// actions, without replaying the log.
	Snapshot *Snapshot
	// Retries counts the concurrent commits this one was retried past.
	Retries int
	// Checkpointed is set when the version is a checkpoint version
	// (delta.checkpointInterval): the commit then also wrote the log
	// checkpoint and cleaned up expired log files, which took
	// CheckpointTook of the commit's time.
	Checkpointed   bool
	CheckpointTook time.Duration
	// CheckpointErr is a failure of the log checkpoint or cleanup after the
	// commit; the commit itself stands.
	CheckpointErr error
	// With BackgroundCheckpoints, a checkpoint version's checkpoint is
	// started instead (Checkpointed and CheckpointBackground set; its
	// outcome goes to the option's function), or skipped because the
	// previous one is still running (CheckpointSkipped).
	CheckpointBackground bool
	CheckpointSkipped    bool
}

// blindAppend reports whether the transaction only adds data without
// reading any: such a commit never conflicts on data.
func (tx *Transaction) blindAppend() bool {
	if tx.readAll || len(tx.readPreds) > 0 || len(tx.readFiles) > 0 || len(tx.removes) > 0 ||
		tx.metadata != nil || tx.protocol != nil {
		return false
	}
	for _, a := range tx.adds {
		if !a.DataChange {
			return false
		}
	}
	return true
}

// validate checks the transaction against the table it will commit to and
// returns the protocol and metadata in force after it.
func (tx *Transaction) validate() (Protocol, Metadata, error) {
	loc := tx.table.Location()
	var p Protocol
	var m Metadata
	switch {
	case tx.read == nil && (tx.protocol == nil || tx.metadata == nil):
		return p, m, fmt.Errorf("create table %s: a new table needs protocol and metadata", loc)
	case tx.read != nil:
		p, m = tx.read.Protocol, tx.read.Metadata
	}
	if tx.protocol != nil {
		p = *tx.protocol
	}
	if tx.metadata != nil {
		m = *tx.metadata
	}
	if err := checkWrite(loc, p, m); err != nil {
		return p, m, fmt.Errorf("commit: %w", err)
	}
	if tx.metadata != nil {
		schema, err := m.Schema()
		if err != nil {
			return p, m, fmt.Errorf("commit to table %s: %w", loc, err)
		}
		for _, c := range m.PartitionColumns {
			if _, _, ok := schema.Field(c); !ok {
				return p, m, fmt.Errorf("commit to table %s: partition column %q is not in the schema", loc, c)
			}
		}
	}
	if ict, _ := inCommitTimestamps(p, m); ict && tx.read != nil {
		if was, _ := inCommitTimestamps(tx.read.Protocol, tx.read.Metadata); !was {
			// Enabling needs delta.inCommitTimestampEnablementVersion set to
			// the version this commit lands at, unknown until it lands.
			return p, m, fmt.Errorf("commit to table %s: enabling in-commit timestamps on a table with history: %w", loc, ErrUnsupportedFeature)
		}
	}
	if appendOnly(m) {
		for _, k := range tx.removeOrder {
			if tx.removes[k].DataChange {
				return p, m, fmt.Errorf("commit to table %s: remove of %s: table is append-only (delta.appendOnly)", loc, k.Path)
			}
		}
	}
	seen := make(map[FileKey]bool, len(tx.adds))
	for _, a := range tx.adds {
		if a.Path == "" {
			return p, m, fmt.Errorf("commit to table %s: add with an empty path", loc)
		}
		if seen[keyOf(a.Key())] {
			return p, m, fmt.Errorf("commit to table %s: file %s added twice", loc, a.Path)
		}
		seen[keyOf(a.Key())] = true
		if len(a.PartitionValues) != len(m.PartitionColumns) {
			return p, m, fmt.Errorf("commit to table %s: file %s has %d partition values, the table %d partition columns",
				loc, a.Path, len(a.PartitionValues), len(m.PartitionColumns))
		}
		for _, c := range m.PartitionColumns {
			if _, ok := a.PartitionValues[c]; !ok {
				return p, m, fmt.Errorf("commit to table %s: file %s lacks partition value %q", loc, a.Path, c)
			}
		}
	}
	if tx.read != nil {
		for _, k := range tx.removeOrder {
			if _, live := tx.read.File(k); !live {
				return p, m, fmt.Errorf("commit to table %s: remove of %s: not a live file at version %d", loc, k.Path, tx.read.Version)
			}
		}
	}
	return p, m, nil
}

// actions lays out the commit file: commitInfo first (as in-commit
// timestamps will require), then protocol, metadata, domains, txns,
// removes and adds.
func (tx *Transaction) actions(info *CommitInfo) []Action {
	out := make([]Action, 0, 3+len(tx.domains)+len(tx.txns)+len(tx.removes)+len(tx.adds))
	out = append(out, Action{CommitInfo: info})
	if tx.protocol != nil {
		out = append(out, Action{Protocol: tx.protocol})
	}
	if tx.metadata != nil {
		out = append(out, Action{Metadata: tx.metadata})
	}
	for _, d := range sortedKeys(tx.domains) {
		dm := tx.domains[d]
		out = append(out, Action{DomainMetadata: &dm})
	}
	for _, app := range tx.txnOrder {
		t := tx.txns[app]
		out = append(out, Action{Txn: &t})
	}
	for _, k := range tx.removeOrder {
		out = append(out, Action{Remove: tx.removes[k]})
	}
	for _, a := range tx.adds {
		out = append(out, Action{Add: a})
	}
	return out
}

// Commit writes the transaction as the next version with put-if-absent.
// When another commit took that version first, the winner is checked with
// the conflict rules: a conflict returns a *ConflictError, anything else is
// retried at the following version, at most MaxCommitRetries times. Every
// error but one wrapping ErrCommitUnknown means nothing was committed,
// except that a non-nil *Committed always means the version landed.
//
// When the new version is a multiple of delta.checkpointInterval (default
// 10), a log checkpoint is written and expired log files are cleaned up;
// a failure there is reported in Committed.CheckpointErr, not as an error.
func (tx *Transaction) Commit(ctx context.Context, operation string, params map[string]any) (*Committed, error) {
	if tx.done {
		return nil, fmt.Errorf("commit to table %s: transaction already committed", tx.table.Location())
	}
	p, m, err := tx.validate()
	if err != nil {
		return nil, err
	}
	opts := &tx.table.opts
	blind := tx.blindAppend()
	info := &CommitInfo{Operation: operation, OperationParameters: params, IsolationLevel: "Serializable",
		IsBlindAppend: &blind, EngineInfo: opts.engineInfo, TxnID: uuid.NewString()}
	if tx.read != nil {
		rv := tx.read.Version
		info.ReadVersion = &rv
	}
	// With in-commit timestamps each commit's time is the later of now and
	// 1ms after the previous commit's, so commit times never go backwards.
	ict, _ := inCommitTimestamps(p, m)
	prevICT := int64(-1 << 62)
	if ict && tx.read != nil {
		prevICT = tx.read.Timestamp
	}
	var winners [][]Action
	version := tx.readVersion() + 1
	for {
		info.Timestamp = opts.clock().UnixMilli()
		if ict {
			t := max(info.Timestamp, prevICT+1)
			info.InCommitTimestamp = &t
		}
		actions := tx.actions(info)
		data, err := EncodeActions(actions)
		if err != nil {
			return nil, fmt.Errorf("commit to table %s: %w", tx.table.Location(), err)
		}
		err = tx.table.store.WriteIfAbsent(ctx, commitPath(version), data)
		var winner []Action
		if err != nil && !errors.Is(err, storage.ErrExist) {
			// The write may have landed before the error: read it back.
			landed, other, rerr := tx.resolve(ctx, version, info.TxnID)
			switch {
			case rerr != nil:
				return nil, fmt.Errorf("commit version %d to table %s: %w: it may have landed, re-read the table: %w (read back: %w)",
					version, tx.table.Location(), ErrCommitUnknown, err, rerr)
			case landed:
				err = nil
			default:
				winner = other
			}
		}
		if err == nil {
			tx.done = true
			ts := info.Timestamp
			if info.InCommitTimestamp != nil {
				ts = *info.InCommitTimestamp
			}
			return tx.committed(ctx, version, ts, len(winners), winners, actions, p, m)
		}
		if winner == nil {
			winner, err = tx.table.readCommit(ctx, version)
			if err != nil {
				return nil, fmt.Errorf("commit to table %s: read winning commit: %w (not committed)", tx.table.Location(), err)
			}
		}
		if err := tx.checkConflict(version, winner); err != nil {
			return nil, err
		}
		if ci := firstCommitInfo(winner); ci != nil && ci.InCommitTimestamp != nil {
			prevICT = max(prevICT, *ci.InCommitTimestamp)
		}
		winners = append(winners, winner)
		if len(winners) > opts.maxRetries {
			return nil, fmt.Errorf("commit to table %s: lost %d races from version %d: %w (not committed)",
				tx.table.Location(), len(winners), tx.readVersion()+1, ErrRetriesExhausted)
		}
		version++
	}
}

// resolve reads back version after an ambiguous write error: landed when
// the file is ours (same txnId), other when another writer's commit is
// there. An error means the outcome stays unknown.
func (tx *Transaction) resolve(ctx context.Context, version int64, txnID string) (landed bool, other []Action, err error) {
	actions, err := tx.table.readCommit(ctx, version)
	if err != nil {
		return false, nil, err
	}
	if ci := firstCommitInfo(actions); ci != nil && ci.TxnID == txnID {
		return true, nil, nil
	}
	return false, actions, nil
}

// committed builds the result of a commit that landed: the new snapshot
// and, on a checkpoint version, the checkpoint and log cleanup.
func (tx *Transaction) committed(ctx context.Context, version, ts int64, retries int, winners [][]Action, ours []Action, p Protocol, m Metadata) (*Committed, error) {
	loc := tx.table.Location()
	var snap *Snapshot
	var err error
	if tx.read == nil {
		st := newReplayState()
		st.applyAll(ours)
		snap, err = st.snapshot(tx.table, version)
		if snap != nil {
			snap.Timestamp = ts
		}
	} else {
		snap, err = tx.read.derive(loc, version, ts, append(winners, ours)...)
	}
	if err != nil {
		// The commit stands; only our view of it failed. Unreachable while
		// validate and the conflict rules hold, but the caller must still
		// learn that the version exists.
		return &Committed{Version: version, Retries: retries},
			fmt.Errorf("commit version %d to table %s: committed, but building its snapshot: %w", version, loc, err)
	}
	if bg := tx.table.opts.background; bg != nil {
		// A checkpoint that landed in the background since the last
		// commit holds the removes up to its version: the snapshot reads
		// them back from it rather than keep them in memory.
		if w := bg.takeWritten(); w != nil {
			snap = snap.rebased(tx.table.store, w.snap, []string{w.path}, w.removes)
		}
	}
	res := &Committed{Version: version, Snapshot: snap, Retries: retries}
	if interval := checkpointInterval(m); version > 0 && version%interval == 0 {
		started := time.Now()
		cutoff, err := tombstoneCutoff(snap, tx.table.opts.clock())
		if err == nil && tx.table.opts.background != nil {
			// The writer's snapshot drops the expired tombstones now: the
			// checkpoint leaves them out whether or not it lands, and so
			// does every later one (the cutoff only moves on).
			withCkpt := *snap
			withCkpt.tombstones = tombstonesSince(&snap.tombstones, cutoff)
			withCkpt.tombstoneCutoff = cutoff
			res.Snapshot = &withCkpt
			if tx.checkpointInBackground(ctx, &withCkpt, cutoff) {
				res.Checkpointed, res.CheckpointBackground = true, true
			} else {
				res.CheckpointSkipped = true
			}
			return res, nil
		}
		var path string
		var removes int
		if err == nil {
			path, removes, err = tx.table.writeCheckpointOf(ctx, snap, cutoff)
		}
		if err != nil {
			res.CheckpointErr = fmt.Errorf("checkpoint version %d of table %s: %w", version, loc, err)
		} else {
			// The snapshot goes on as a reader of the checkpoint would
			// find it: without the tombstones it left out as expired
			// (kept, they stayed in memory for the writer's whole run,
			// whatever delta.deletedFileRetentionDuration said), and
			// with the others left in the checkpoint, not in memory.
			withCkpt := *snap
			withCkpt.checkpointVersion = version
			withCkpt.tombstones = tombstonesSince(&snap.tombstones, cutoff)
			withCkpt.tombstoneCutoff = cutoff
			res.Snapshot = withCkpt.rebased(tx.table.store, &withCkpt, []string{path}, removes)
			if err := tx.table.cleanupExpiredLogs(ctx, res.Snapshot); err != nil {
				res.CheckpointErr = fmt.Errorf("clean up log of table %s after version %d: %w", loc, version, err)
			}
		}
		res.Checkpointed, res.CheckpointTook = true, time.Since(started)
		if res.CheckpointErr != nil && tx.table.opts.checkpointError != nil {
			tx.table.opts.checkpointError(version, res.CheckpointErr)
		}
	}
	return res, nil
}

// checkpointInterval is delta.checkpointInterval, 10 when unset or invalid.
func checkpointInterval(m Metadata) int64 {
	if s, ok := m.Configuration[propCheckpointInterval]; ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 10
}
