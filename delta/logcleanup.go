package delta

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// CleanupExpiredLogs deletes the commit and checkpoint files the protocol
// allows to delete ("Metadata Cleanup"): those older than
// delta.logRetentionDuration (default 30 days), and only below a checkpoint
// that itself is old enough, so every version still in the retention window
// can be reconstructed. Nothing at or after that checkpoint is touched, and
// nothing after snap's version. delta.enableExpiredLogCleanup=false turns
// it off.
//
// The steps, as the protocol gives them:
//  1. cutOffTimestamp is midnight UTC of the day now minus the retention.
//  2. cutOffCommit is the newest commit whose timestamp is not after it
//     (file modification times, made monotonic in version order as Spark
//     does, so one clock-skewed file cannot expose later versions; in-commit
//     timestamps are not consulted).
//  3. cutOffCheckpoint is the newest complete checkpoint not newer than
//     cutOffCommit; without one there is nothing to do. (Not newer than
//     the checkpoint snap reads its older removes from, either.)
//  4. Delete commits, checkpoints and .crc files below it, and log
//     compaction files starting at or below it, oldest version first so a
//     crash midway leaves a log that still starts somewhere valid.
//  5. Delete V2 sidecars that no remaining checkpoint references and that
//     are themselves older than cutOffTimestamp (a sidecar younger than that
//     may belong to a checkpoint being written right now).
func CleanupExpiredLogs(ctx context.Context, store storage.Storage, snap *Snapshot, now time.Time) error {
	cutoff, ok, err := logCutoff(snap, now)
	if !ok || err != nil {
		return err
	}
	_, err = cleanupBelow(ctx, store, snap, cutoff)
	return err
}

// logCutoff is step 1: the cut-off timestamp, and whether cleanup is on.
func logCutoff(snap *Snapshot, now time.Time) (time.Time, bool, error) {
	if strings.EqualFold(snap.Metadata.Configuration[propExpiredLogCleanup], "false") {
		return time.Time{}, false, nil
	}
	retention, err := tableDuration(snap.Metadata.Configuration, propLogRetention, defaultLogRetention)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("clean up log: %w", err)
	}
	return now.Add(-retention).UTC().Truncate(24 * time.Hour), true, nil
}

// cleanupMemo is the cut-off a table's last cleanup finished at. The
// cut-off moves once a day (midnight UTC), and what a cleanup deletes
// depends only on it: commits older than it are not written any more, nor
// checkpoints at their versions. So a writer lists the log for cleanup once
// a day, not after every checkpoint (every tenth commit), where a listing
// reads every commit the retention keeps.
type cleanupMemo struct {
	mu   sync.Mutex // guards done
	done time.Time
}

// cleanupExpiredLogs is CleanupExpiredLogs, done once a cut-off.
func (t *Table) cleanupExpiredLogs(ctx context.Context, snap *Snapshot) error {
	cutoff, ok, err := logCutoff(snap, t.opts.clock())
	if !ok || err != nil {
		return err
	}
	t.cleaned.mu.Lock()
	done := t.cleaned.done.Equal(cutoff)
	t.cleaned.mu.Unlock()
	if done {
		return nil
	}
	complete, err := cleanupBelow(ctx, t.store, snap, cutoff)
	if err == nil && complete {
		t.cleaned.mu.Lock()
		t.cleaned.done = cutoff
		t.cleaned.mu.Unlock()
	}
	return err
}

// cleanupBelow is steps 2-5 at cutoff. complete is false when it left
// files a later cleanup at the same cut-off may delete (held back for
// snap's spilled removes).
func cleanupBelow(ctx context.Context, store storage.Storage, snap *Snapshot, cutoff time.Time) (complete bool, err error) {
	infos, err := store.List(ctx, LogDir)
	if err != nil {
		return false, fmt.Errorf("clean up log: %w", err)
	}
	l := listLogFiles(infos, snap.Version)

	// Stop at the first commit younger than the cut-off: a later commit
	// with an older (skewed) time counts as no older than it, which is
	// what making the times monotonic in version order amounts to.
	cutCommit := int64(-1)
	for _, c := range l.commits {
		if c.info.ModTime.After(cutoff) {
			break
		}
		cutCommit = c.version
	}
	cutCkpt := int64(-1)
	for v, set := range l.complete {
		if set && v <= cutCommit && v > cutCkpt {
			cutCkpt = v
		}
	}
	// The checkpoint snap reads its older removes back from (Snapshot.
	// spill) stays, with what follows it, until a later cleanup: the
	// writer's next snapshots rebase on the newer checkpoint first.
	complete = true
	if sp := snap.spill; sp != nil && sp.version < cutCkpt && l.complete[sp.version] {
		cutCkpt, complete = sp.version, false
	}
	if cutCkpt < 0 {
		return complete, nil
	}

	var doomed []cleanupFile
	for _, f := range l.files {
		if f.version < cutCkpt || (f.compacted && f.version <= cutCkpt) {
			doomed = append(doomed, f)
		}
	}
	sort.SliceStable(doomed, func(i, j int) bool { return doomed[i].version < doomed[j].version })
	for _, f := range doomed {
		if err := store.Delete(ctx, f.info.Path); err != nil {
			return false, fmt.Errorf("clean up log: %w", err)
		}
	}
	if err := cleanupSidecars(ctx, store, l, cutCkpt, cutoff); err != nil {
		return false, fmt.Errorf("clean up log: %w", err)
	}
	return complete, nil
}

// cleanupFile is one file of _delta_log that cleanup may delete.
type cleanupFile struct {
	info    storage.FileInfo
	version int64
	// compacted marks a log compaction file; version is its start version.
	compacted bool
	// ckpt is set for checkpoint files.
	ckpt *ckptName
}

type cleanupCommit struct {
	version int64
	info    storage.FileInfo
}

// cleanupListing is _delta_log sorted for cleanup, limited to versions up
// to the snapshot's.
type cleanupListing struct {
	commits  []cleanupCommit // by version
	files    []cleanupFile   // commits, checkpoints, .crc, compaction files
	complete map[int64]bool  // versions with a complete checkpoint
	sidecars []storage.FileInfo
}

func listLogFiles(infos []storage.FileInfo, maxVersion int64) *cleanupListing {
	l := &cleanupListing{complete: map[int64]bool{}}
	type multiKey struct {
		version int64
		parts   int
	}
	multi := map[multiKey]int{}
	for _, fi := range infos {
		rest, ok := strings.CutPrefix(fi.Path, LogDir+"/")
		if !ok || storage.IsTemp(path.Base(fi.Path)) {
			continue
		}
		if dir, name, nested := strings.Cut(rest, "/"); nested {
			if dir == "_sidecars" && !strings.Contains(name, "/") {
				l.sidecars = append(l.sidecars, fi)
			}
			continue
		}
		if v, ok := parseCommitName(rest); ok {
			if v <= maxVersion {
				l.commits = append(l.commits, cleanupCommit{v, fi})
				l.files = append(l.files, cleanupFile{info: fi, version: v})
			}
			continue
		}
		if n, ok := ckptParseName(rest); ok {
			if n.version > maxVersion {
				continue
			}
			l.files = append(l.files, cleanupFile{info: fi, version: n.version, ckpt: &n})
			if n.parts == 0 {
				l.complete[n.version] = true
			} else {
				k := multiKey{n.version, n.parts}
				multi[k]++
				if multi[k] == n.parts {
					l.complete[n.version] = true
				}
			}
			continue
		}
		if v, ok := cleanupVersionPrefix(rest, ".crc"); ok && v <= maxVersion {
			l.files = append(l.files, cleanupFile{info: fi, version: v})
			continue
		}
		if start, end, ok := parseCompactedName(rest); ok && end <= maxVersion {
			l.files = append(l.files, cleanupFile{info: fi, version: start, compacted: true})
		}
	}
	sort.Slice(l.commits, func(i, j int) bool { return l.commits[i].version < l.commits[j].version })
	return l
}

// cleanupVersionPrefix parses "<20-digit version><suffix>".
func cleanupVersionPrefix(base, suffix string) (int64, bool) {
	s, ok := strings.CutSuffix(base, suffix)
	if !ok || len(s) != 20 || !ckptDigits(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

// parseCompactedName parses a log compaction file name,
// "<start>.<end>.compacted.json".
func parseCompactedName(base string) (start, end int64, ok bool) {
	s, found := strings.CutSuffix(base, ".compacted.json")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(s, ".")
	if !found || len(a) != 20 || len(b) != 20 || !ckptDigits(a) || !ckptDigits(b) {
		return 0, 0, false
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < x {
		return 0, 0, false
	}
	return x, y, true
}

// cleanupSidecars deletes sidecar files no checkpoint at or after cutCkpt
// references, when they are older than cutoff.
func cleanupSidecars(ctx context.Context, store storage.Storage, l *cleanupListing, cutCkpt int64, cutoff time.Time) error {
	if len(l.sidecars) == 0 {
		return nil
	}
	referenced := map[string]bool{}
	for _, f := range l.files {
		// Any checkpoint file may carry sidecar actions; multi-part ones
		// predate sidecars and never do.
		if f.ckpt == nil || f.version < cutCkpt || f.ckpt.parts != 0 {
			continue
		}
		acts, _, err := ckptReadFile(ctx, store, f.info.Path, nil, true)
		if err != nil {
			return err
		}
		for _, a := range acts {
			if a.Sidecar == nil {
				continue
			}
			p, err := ckptSidecarPath(a.Sidecar.Path)
			if err != nil {
				return err
			}
			referenced[p] = true
		}
	}
	for _, fi := range l.sidecars {
		if referenced[fi.Path] || !fi.ModTime.Before(cutoff) {
			continue
		}
		if err := store.Delete(ctx, fi.Path); err != nil {
			return err
		}
	}
	return nil
}
