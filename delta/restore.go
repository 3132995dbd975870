package delta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// ErrFilesMissing is matched by a *MissingFilesError: files a version
// needs are gone from storage (vacuum removed them), so that version
// cannot be read or restored.
var ErrFilesMissing = errors.New("data files of the version are missing")

// ErrOffsetsGone is matched by a *OffsetGapError: restoring would rewind
// an application to a position its source no longer holds.
var ErrOffsetsGone = errors.New("rewound positions are no longer held by the source")

// MissingFilesError lists the files of a version that storage lacks.
type MissingFilesError struct {
	Table   string
	Version int64
	// Files are the missing paths relative to the table root, sorted.
	Files []string
}

// Error names the version and the missing files (the first ten, then a count).
func (e *MissingFilesError) Error() string {
	shown := e.Files
	more := ""
	if len(shown) > 10 {
		shown, more = shown[:10], fmt.Sprintf(" and %d more", len(e.Files)-10)
	}
	return fmt.Sprintf("table %s version %d: %d of its files are missing from storage (removed by vacuum?): %s%s",
		e.Table, e.Version, len(e.Files), strings.Join(shown, ", "), more)
}

// Is matches ErrFilesMissing.
func (e *MissingFilesError) Is(target error) bool { return target == ErrFilesMissing }

// OffsetGap is one application whose rewound position is gone.
type OffsetGap struct {
	AppID string
	// Version is the position the restore rewinds to (for cdcapply the
	// next Kafka offset to apply); LogStart the earliest one still held.
	Version, LogStart int64
}

// OffsetGapError lists the applications a restore would rewind to
// positions the source no longer holds.
type OffsetGapError struct {
	Table string
	Gaps  []OffsetGap
}

// Error names each application and the range of positions that are gone.
func (e *OffsetGapError) Error() string {
	parts := make([]string, len(e.Gaps))
	for i, g := range e.Gaps {
		parts[i] = fmt.Sprintf("%s needs %d but the source starts at %d (%d..%d are gone)", g.AppID, g.Version, g.LogStart, g.Version, g.LogStart-1)
	}
	return fmt.Sprintf("restore table %s: replay after the restore would skip records: %s", e.Table, strings.Join(parts, "; "))
}

// Is matches ErrOffsetsGone.
func (e *OffsetGapError) Is(target error) bool { return target == ErrOffsetsGone }

// RestoreTarget names the version to restore: Version, or with
// ByTimestamp the latest version committed at or before Timestamp.
type RestoreTarget struct {
	Version     int64
	Timestamp   time.Time
	ByTimestamp bool
}

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// LogStarts maps an application id (a txn appId) to the earliest
	// position its source still holds (for cdcapply a Kafka partition's
	// log-start offset). An application rewound below it is refused with a
	// *OffsetGapError unless AcceptGap. Applications not in the map are
	// not checked.
	LogStarts map[string]int64
	// AcceptGap restores even when rewound positions are gone: the replay
	// will then start at the log start and the gap is lost.
	AcceptGap bool
	// DryRun computes and checks the restore without committing.
	DryRun bool
	// Logger receives the audit line; slog.Default() when nil.
	Logger *slog.Logger
}

// RestoreResult is what a restore committed (or, dry, would commit).
type RestoreResult struct {
	// Version is the new version (-1 on a dry run); Restored the version
	// whose state it holds; From the version it replaced.
	Version, Restored, From int64
	// FilesRemoved and FilesRestored count the data actions;
	// BytesRemoved and BytesRestored their sizes.
	FilesRemoved, FilesRestored int
	BytesRemoved, BytesRestored int64
	// Txns are the rewound positions per application (only those that
	// change), and Gaps those below their source's log start (accepted).
	Txns map[string]int64
	Gaps []OffsetGap
	// Domains are the metadata domains set back or removed.
	Domains []string
}

// Restore makes the table's state that of an older version in one commit
// (operation RESTORE), so that readers see version N's rows and an
// application that keeps its positions in txn actions resumes from where
// it stood at N:
//
//   - files live now but not at N are removed, files live at N but not now
//     are added again, both with dataChange=true;
//   - every txn is set back to its version at N; an application with no
//     txn at N gets version 0, which for cdcapply means "from the start of
//     the partition" (a txn cannot be deleted from a Delta table, and 0 is
//     the position a partition the table never saw starts from);
//   - metadata domains other than the protocol's own (delta.*) are set
//     back to N's (removed when N had none): cdcapply's purge horizon
//     describes the rows of N, not of the versions after it;
//   - the metadata is set back when it changed after N; the protocol is
//     kept (it never goes down).
//
// Before committing, every file of N (and its deletion vector) must exist
// in storage: vacuum may have deleted them while statistics in the log
// still describe their rows. Missing files fail with *MissingFilesError.
// A concurrent commit of any txn (the stream) makes the restore conflict,
// and after the restore the stream's next commit conflicts on its txn and
// must re-read its positions from the table.
func Restore(ctx context.Context, t *Table, target RestoreTarget, opts RestoreOptions) (*RestoreResult, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cur, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("restore table %s: %w", t.Location(), err)
	}
	var old *Snapshot
	if target.ByTimestamp {
		old, err = t.SnapshotAsOf(ctx, target.Timestamp)
	} else {
		old, err = t.SnapshotAt(ctx, target.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("restore table %s: %w", t.Location(), err)
	}
	if old.Version >= cur.Version {
		return nil, fmt.Errorf("restore table %s: version %d is not older than the latest version %d", t.Location(), old.Version, cur.Version)
	}
	missing, err := MissingFiles(ctx, t, old)
	if err != nil {
		return nil, fmt.Errorf("restore table %s to version %d: %w", t.Location(), old.Version, err)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("restore table %s to version %d: %w", t.Location(), old.Version,
			&MissingFilesError{Table: t.Location(), Version: old.Version, Files: missing})
	}

	res := &RestoreResult{Version: -1, Restored: old.Version, From: cur.Version, Txns: map[string]int64{}}
	tx := t.Begin(cur)
	for _, a := range cur.Files() {
		if _, ok := old.File(a.Key()); !ok {
			tx.RemoveFile(a, true)
			res.FilesRemoved++
			res.BytesRemoved += a.Size
		}
	}
	for _, a := range old.Files() {
		if _, ok := cur.File(a.Key()); !ok {
			back := *a
			back.DataChange = true
			tx.Add(&back)
			res.FilesRestored++
			res.BytesRestored += a.Size
		}
	}
	curTxns := cur.Txns()
	for _, app := range sortedKeys(curTxns) {
		want := int64(0)
		if o, ok := old.Txn(app); ok {
			want = o.Version
		}
		if want == curTxns[app].Version {
			continue
		}
		tx.SetTxn(app, want)
		res.Txns[app] = want
		if start, ok := opts.LogStarts[app]; ok && want < start {
			res.Gaps = append(res.Gaps, OffsetGap{AppID: app, Version: want, LogStart: start})
		}
	}
	if len(res.Gaps) > 0 && !opts.AcceptGap {
		return nil, fmt.Errorf("restore table %s to version %d: %w (accept the gap to restore anyway)",
			t.Location(), old.Version, &OffsetGapError{Table: t.Location(), Gaps: res.Gaps})
	}
	curDomains, oldDomains := cur.Domains(), old.Domains()
	for _, name := range sortedKeys(curDomains) {
		if strings.HasPrefix(name, "delta.") {
			continue
		}
		if o, ok := oldDomains[name]; !ok {
			tx.SetDomain(DomainMetadata{Domain: name, Configuration: curDomains[name].Configuration, Removed: true})
			res.Domains = append(res.Domains, name)
		} else if o.Configuration != curDomains[name].Configuration {
			tx.SetDomain(o)
			res.Domains = append(res.Domains, name)
		}
	}
	for _, name := range sortedKeys(oldDomains) {
		if _, ok := curDomains[name]; !ok && !strings.HasPrefix(name, "delta.") {
			tx.SetDomain(oldDomains[name])
			res.Domains = append(res.Domains, name)
		}
	}
	if !sameMetadata(old.Metadata, cur.Metadata) {
		tx.SetMetadata(old.Metadata)
	}
	sort.Slice(res.Gaps, func(i, j int) bool { return res.Gaps[i].AppID < res.Gaps[j].AppID })
	if opts.DryRun {
		return res, nil
	}
	params := map[string]any{"version": old.Version, "numRemovedFile": res.FilesRemoved, "numRestoredFile": res.FilesRestored,
		"removedFilesSize": res.BytesRemoved, "restoredFilesSize": res.BytesRestored, "numOfFilesAfterRestore": old.NumFiles(),
		"rewoundTxns": res.Txns}
	if target.ByTimestamp {
		params["timestamp"] = target.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	if len(res.Gaps) > 0 {
		params["acceptedGaps"] = len(res.Gaps)
	}
	c, err := tx.Commit(ctx, "RESTORE", params)
	if err != nil {
		return nil, fmt.Errorf("restore table %s to version %d: %w", t.Location(), old.Version, err)
	}
	res.Version = c.Version
	log.Info("restore", "table", t.Location(), "version", c.Version, "restored", old.Version, "from", cur.Version,
		"filesRemoved", res.FilesRemoved, "filesRestored", res.FilesRestored, "txnsRewound", len(res.Txns), "gapsAccepted", len(res.Gaps))
	return res, nil
}

// MissingFiles returns the files snap needs (live data files and their
// deletion vectors) that are absent from the table's storage, sorted. It
// lists the table once rather than reading each file. A version whose
// files are missing cannot be read or restored; status reports use it to
// say which versions are really available.
func MissingFiles(ctx context.Context, t *Table, snap *Snapshot) ([]string, error) {
	infos, err := t.store.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("check files of version %d: %w", snap.Version, err)
	}
	have := make(map[string]bool, len(infos))
	for _, fi := range infos {
		have[fi.Path] = true
	}
	need, err := referencedFiles(ctx, snap, false, 0)
	if err != nil {
		return nil, fmt.Errorf("check files of version %d: %w", snap.Version, err)
	}
	var missing []string
	for p := range need {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// sameMetadata compares what a restore would change in the metadata.
func sameMetadata(a, b Metadata) bool {
	if a.ID != b.ID || a.SchemaString != b.SchemaString || strings.Join(a.PartitionColumns, "\x00") != strings.Join(b.PartitionColumns, "\x00") ||
		len(a.Configuration) != len(b.Configuration) {
		return false
	}
	for k, v := range a.Configuration {
		if w, ok := b.Configuration[k]; !ok || w != v {
			return false
		}
	}
	return true
}
