package delta

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// commitPath is the storage path of the JSON commit of version v.
func commitPath(v int64) string { return fmt.Sprintf("%s/%020d.json", LogDir, v) }

// parseCommitName reports whether base is a commit file name, N.json with
// N zero-padded to 20 digits, and returns N.
func parseCommitName(base string) (int64, bool) {
	if len(base) != 25 || !strings.HasSuffix(base, ".json") {
		return 0, false
	}
	v, err := strconv.ParseInt(base[:20], 10, 64)
	if err != nil || v < 0 || base[0] == '+' || base[0] == '-' {
		return 0, false
	}
	return v, true
}

// ckptSet is one complete checkpoint found in the listing: the single file
// of a classic or V2 checkpoint, or every part of a multi-part one.
type ckptSet struct {
	version int64
	paths   []string
	parts   int    // >0 for multi-part
	uuid    string // V2 top-level file
	modTime time.Time
}

// logListing is _delta_log taken apart: commits and complete checkpoints.
type logListing struct {
	commits map[int64]storage.FileInfo
	ckpts   map[int64][]ckptSet
	// minCommit and maxCommit bound the listed commits; -1 when there are none.
	minCommit, maxCommit int64
	// latest is the newest version any listed commit or checkpoint reflects.
	latest int64
	// times caches commitTime's monotonic commit times.
	times map[int64]int64
}

func (l *logListing) empty() bool { return len(l.commits) == 0 && len(l.ckpts) == 0 }

// listLog lists _delta_log. Only files directly in it count: sidecars and
// other folders below it are not commits or checkpoints, temporary files of
// unfinished writes are skipped, and multi-part checkpoints count only once
// all of their parts are listed.
func (t *Table) listLog(ctx context.Context) (*logListing, error) {
	infos, err := t.store.List(ctx, LogDir)
	if err != nil {
		return nil, fmt.Errorf("list log of table %s: %w", t.Location(), err)
	}
	l := &logListing{commits: map[int64]storage.FileInfo{}, ckpts: map[int64][]ckptSet{},
		minCommit: -1, maxCommit: -1, latest: -1}
	type multiKey struct {
		version int64
		parts   int
	}
	multi := map[multiKey]map[int]storage.FileInfo{}
	for _, fi := range infos {
		base, ok := strings.CutPrefix(fi.Path, LogDir+"/")
		if !ok || strings.Contains(base, "/") || storage.IsTemp(base) {
			continue
		}
		if v, ok := parseCommitName(base); ok {
			l.commits[v] = fi
			if l.minCommit < 0 || v < l.minCommit {
				l.minCommit = v
			}
			l.maxCommit = max(l.maxCommit, v)
			l.latest = max(l.latest, v)
			continue
		}
		n, ok := ckptParseName(base)
		if !ok {
			continue
		}
		if n.parts > 0 {
			k := multiKey{n.version, n.parts}
			if multi[k] == nil {
				multi[k] = map[int]storage.FileInfo{}
			}
			multi[k][n.part] = fi
			continue
		}
		l.ckpts[n.version] = append(l.ckpts[n.version],
			ckptSet{version: n.version, paths: []string{fi.Path}, uuid: n.uuid, modTime: fi.ModTime})
	}
	for k, parts := range multi {
		if len(parts) != k.parts {
			continue // incomplete: a writer died midway or is still writing
		}
		set := ckptSet{version: k.version, parts: k.parts}
		for i := 1; i <= k.parts; i++ {
			set.paths = append(set.paths, parts[i].Path)
			if parts[i].ModTime.After(set.modTime) {
				set.modTime = parts[i].ModTime
			}
		}
		l.ckpts[k.version] = append(l.ckpts[k.version], set)
	}
	for v := range l.ckpts {
		l.latest = max(l.latest, v)
	}
	return l, nil
}

// candidates returns the complete checkpoints at or below target, newest
// first; at one version the one hint names comes first, then classic, then
// V2, then multi-part (fewest reads first).
func (l *logListing) candidates(target int64, hint *LastCheckpoint) []ckptSet {
	var out []ckptSet
	for v, sets := range l.ckpts {
		if v <= target {
			out = append(out, sets...)
		}
	}
	rank := func(c ckptSet) int {
		switch {
		case hint != nil && hint.Version == c.version && hintNames(hint, c):
			return 0
		case c.parts == 0 && c.uuid == "":
			return 1
		case c.uuid != "":
			return 2
		}
		return 3
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].version != out[j].version {
			return out[i].version > out[j].version
		}
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i].paths[0] < out[j].paths[0]
	})
	return out
}

// hintNames reports whether _last_checkpoint describes checkpoint c.
func hintNames(h *LastCheckpoint, c ckptSet) bool {
	switch {
	case h.V2Checkpoint != nil:
		return c.uuid != "" && strings.HasSuffix(c.paths[0], "/"+h.V2Checkpoint.Path)
	case h.Parts != nil && *h.Parts > 1:
		return c.parts == *h.Parts
	}
	return c.parts == 0 && c.uuid == ""
}

// needCommits checks that every commit in [from, to] is listed. A hole below
// the oldest listed commit means the log was cleaned up; a hole above it
// means the log is broken.
func (l *logListing) needCommits(t *Table, from, to int64) error {
	for v := from; v <= to; v++ {
		if _, ok := l.commits[v]; ok {
			continue
		}
		if l.minCommit < 0 || v < l.minCommit {
			return errorf(t, ErrVersionNotFound,
				"load version %d: commit %d is gone (log cleaned up) and no checkpoint covers it", to, v)
		}
		return fmt.Errorf("load version %d of table %s: versions not contiguous: commit %d missing between %d and %d",
			to, t.Location(), v, l.minCommit, l.maxCommit)
	}
	return nil
}

// commitTime is the commit time of version v in Unix ms from file
// modification times, made strictly increasing over the listed commits
// (a later commit whose file looks older is given its predecessor's time
// plus 1ms), so that time travel is well defined on copied tables.
func (l *logListing) commitTime(v int64) (int64, bool) {
	if _, ok := l.commits[v]; !ok {
		return 0, false
	}
	if l.times == nil {
		l.times = make(map[int64]int64, len(l.commits))
		prev := int64(-1 << 62)
		var prevV int64 = -2
		for w := l.minCommit; w <= l.maxCommit; w++ {
			fi, ok := l.commits[w]
			if !ok {
				continue
			}
			ts := fi.ModTime.UnixMilli()
			if prevV == w-1 && ts <= prev {
				ts = prev + 1
			}
			l.times[w], prev, prevV = ts, ts, w
		}
	}
	ts, ok := l.times[v]
	return ts, ok
}

func errorf(t *Table, sentinel error, format string, args ...any) error {
	return fmt.Errorf(format+" (table %s): %w", append(args, t.Location(), sentinel)...)
}

// load replays the log to version target, or to the latest version when
// target is negative.
func (t *Table) load(ctx context.Context, target int64) (*Snapshot, error) {
	l, err := t.listLog(ctx)
	if err != nil {
		return nil, err
	}
	return t.loadFrom(ctx, l, target)
}

func (t *Table) loadFrom(ctx context.Context, l *logListing, target int64) (*Snapshot, error) {
	if l.empty() {
		return nil, errorf(t, ErrNoTable, "load table: no commits or checkpoints under %s", LogDir)
	}
	if target < 0 {
		target = l.latest
	}
	if target > l.latest {
		return nil, errorf(t, ErrVersionNotFound, "load version %d: latest version is %d", target, l.latest)
	}
	cands := l.candidates(target, nil)
	if len(cands) > 1 && cands[0].version == cands[1].version {
		// The listing is authoritative for which checkpoints exist and are
		// complete (Storage.List cannot start at a name, so the hint cannot
		// shorten it); the hint only says which of two complete checkpoints
		// of one version its writer meant.
		hint, err := readLastCheckpoint(ctx, t.store)
		if err != nil {
			return nil, fmt.Errorf("load table %s: %w", t.Location(), err)
		}
		if hint != nil {
			cands = l.candidates(target, hint)
		}
	}
	var ckptErrs []error
	for _, c := range cands {
		if err := l.needCommits(t, c.version+1, target); err != nil {
			return nil, err
		}
		// The checkpoint's removes stay in it (Snapshot.spill): they are
		// counted, not decoded, and only the commits' after it are held.
		actions, removes, err := readCheckpointActions(ctx, t.store, c.version, c.paths, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("load table %s: %w", t.Location(), ctx.Err())
			}
			// A damaged checkpoint is skipped for an older one or the
			// commits: it is a cache of the log, not the log.
			ckptErrs = append(ckptErrs, err)
			continue
		}
		st := newReplayState()
		// Nearly all checkpoint actions are adds: size for them up front.
		st.files = make(map[FileKey]*Add, len(actions))
		st.applyAll(actions)
		st.spill = &spilledTombstones{store: t.store, version: c.version, paths: c.paths, n: removes}
		return t.replayCommits(ctx, l, st, &c, target)
	}
	if err := l.needCommits(t, 0, target); err != nil {
		if len(ckptErrs) > 0 {
			return nil, fmt.Errorf("%w; unreadable checkpoints: %w", err, errors.Join(ckptErrs...))
		}
		return nil, err
	}
	return t.replayCommits(ctx, l, newReplayState(), nil, target)
}

// replayCommits applies the commits after base (or from version 0) up to
// target and checks the result.
func (t *Table) replayCommits(ctx context.Context, l *logListing, st *replayState, base *ckptSet, target int64) (*Snapshot, error) {
	start := int64(0)
	st.checkpointVersion = -1
	if base != nil {
		start = base.version + 1
		st.checkpointVersion = base.version
	}
	var lastInfo *CommitInfo
	for v := start; v <= target; v++ {
		actions, err := t.readCommit(ctx, v)
		if err != nil {
			return nil, err
		}
		st.applyAll(actions)
		if v == target {
			lastInfo = firstCommitInfo(actions)
		}
	}
	snap, err := st.snapshot(t, target)
	if err != nil {
		return nil, err
	}
	// The commit time: the in-commit timestamp when the table has them,
	// else the commit file's (monotonic) modification time, else, for a
	// version that only a checkpoint holds, the checkpoint's. A commit that
	// should carry an in-commit timestamp and does not falls back to file
	// times too: the time does not change what the snapshot holds, so it
	// is no reason to refuse the table.
	if ict, from := inCommitTimestamps(snap.Protocol, snap.Metadata); ict && target >= from {
		if lastInfo == nil {
			if _, ok := l.commits[target]; ok {
				actions, err := t.readCommit(ctx, target)
				if err != nil {
					return nil, err
				}
				lastInfo = firstCommitInfo(actions)
			}
		}
		if lastInfo != nil && lastInfo.InCommitTimestamp != nil {
			snap.Timestamp = *lastInfo.InCommitTimestamp
			return snap, nil
		}
	}
	if ts, ok := l.commitTime(target); ok {
		snap.Timestamp = ts
	} else if base != nil {
		snap.Timestamp = base.modTime.UnixMilli()
	}
	return snap, nil
}

// readCommit reads and parses the JSON commit of version v.
func (t *Table) readCommit(ctx context.Context, v int64) ([]Action, error) {
	data, err := t.store.Read(ctx, commitPath(v))
	if err != nil {
		return nil, fmt.Errorf("read commit %d of table %s: %w", v, t.Location(), err)
	}
	actions, err := ParseActions(data)
	if err != nil {
		return nil, fmt.Errorf("parse commit %d of table %s: %w", v, t.Location(), err)
	}
	return actions, nil
}

// updateByProbe is Update without a listing of the log: it asks for the
// commits after snap's by name, one at a time, until one is missing. A
// listing reads every commit the log retention keeps (30 days by
// default: at a commit a second 2.6 million names, and 200,000 took 0.6 s
// on a local disk), and a writer updates before every batch. ok is false
// when the probe cannot tell (snap's own commit is gone, or the log
// replaced it: a table deleted and created again, a cleaned-up log), and
// Update falls back to the listing, which sees what happened.
func (t *Table) updateByProbe(ctx context.Context, snap *Snapshot) (next *Snapshot, ok bool, err error) {
	var commits [][]Action
	// The commits' times as logListing.commitTime makes them: the file's,
	// kept above the previous commit's.
	ts := snap.Timestamp
	for v := snap.Version + 1; ; v++ {
		fi, err := storage.Stat(ctx, t.store, commitPath(v))
		if errors.Is(err, storage.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("update table %s: %w", t.Location(), err)
		}
		actions, err := t.readCommit(ctx, v)
		if err != nil {
			return nil, false, err
		}
		commits = append(commits, actions)
		ts = max(fi.ModTime.UnixMilli(), ts+1)
	}
	if len(commits) == 0 {
		// Nothing newer; snap's own commit must still be there, or the
		// log is no longer the one snap was read from.
		if _, err := storage.Stat(ctx, t.store, commitPath(snap.Version)); err != nil {
			if errors.Is(err, storage.ErrNotExist) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("update table %s: %w", t.Location(), err)
		}
		return snap, true, nil
	}
	latest := snap.Version + int64(len(commits))
	next, err = snap.derive(t.Location(), latest, 0, commits...)
	if err != nil {
		return nil, false, err
	}
	if ict, from := inCommitTimestamps(next.Protocol, next.Metadata); ict && next.Version >= from {
		if ci := firstCommitInfo(commits[len(commits)-1]); ci != nil && ci.InCommitTimestamp != nil {
			next.Timestamp = *ci.InCommitTimestamp
		}
	} else {
		next.Timestamp = ts
	}
	return next, true, nil
}

// ReadCommit returns the actions of the JSON commit of version v, in file
// order, including commitInfo and cdc actions.
func (t *Table) ReadCommit(ctx context.Context, v int64) ([]Action, error) {
	return t.readCommit(ctx, v)
}

func firstCommitInfo(actions []Action) *CommitInfo {
	for i := range actions {
		if actions[i].CommitInfo != nil {
			return actions[i].CommitInfo
		}
	}
	return nil
}

// keyOf is the key add and remove actions reconcile on: FileKey with the
// path's file-scheme spellings made one. Writers have recorded the same
// local file as "/p", "file:/p" and "file:///p" (Spark's canonicalized
// paths); all three are "/p" here. Relative paths, the only ones this
// package writes, are unchanged, so for them keyOf(a.Key()) == a.Key().
func keyOf(k FileKey) FileKey {
	switch {
	case strings.HasPrefix(k.Path, "file:///"):
		k.Path = k.Path[len("file://"):]
	case strings.HasPrefix(k.Path, "file:/"):
		k.Path = k.Path[len("file:"):]
	}
	return k
}

// replayState accumulates actions in plain maps while the log is replayed;
// snapshot hands the maps to an immutable Snapshot.
type replayState struct {
	files             map[FileKey]*Add
	tombstones        map[FileKey]*Remove
	txns              map[string]Txn
	domains           map[string]DomainMetadata
	protocol          *Protocol
	metadata          *Metadata
	checkpointVersion int64
	spill             *spilledTombstones
}

func newReplayState() *replayState {
	return &replayState{files: map[FileKey]*Add{}, tombstones: map[FileKey]*Remove{},
		txns: map[string]Txn{}, domains: map[string]DomainMetadata{}, checkpointVersion: -1}
}

// tombstone is what a snapshot keeps of a remove: everything but its
// statistics. Tombstones stay until the retention period ends (a week by
// default) and checkpoints carry them, while a remove's stats are
// optional and used by nothing after the file is gone. A table whose
// files get new deletion vectors removes and re-adds them at every
// change, so its tombstones grow by the files touched per commit; stats
// were three quarters of each (about 1.2 KB of 1.5 KB in a 14-column
// table), which made a long merge-on-read run's memory grow.
func tombstone(r *Remove) *Remove {
	if r.Stats == "" {
		return r
	}
	t := *r
	t.Stats = ""
	return &t
}

// applyAll applies actions in order: the protocol's reconciliation rules.
// cdc, commitInfo and the V2 checkpoint's own actions change no state.
func (st *replayState) applyAll(actions []Action) {
	for i := range actions {
		a := &actions[i]
		switch {
		case a.Add != nil:
			k := keyOf(a.Add.Key())
			st.files[k] = a.Add
			delete(st.tombstones, k)
		case a.Remove != nil:
			k := keyOf(a.Remove.Key())
			delete(st.files, k)
			st.tombstones[k] = tombstone(a.Remove)
		case a.Txn != nil:
			st.txns[a.Txn.AppID] = *a.Txn
		case a.DomainMetadata != nil:
			if a.DomainMetadata.Removed {
				delete(st.domains, a.DomainMetadata.Domain)
			} else {
				st.domains[a.DomainMetadata.Domain] = *a.DomainMetadata
			}
		case a.Protocol != nil:
			st.protocol = a.Protocol
		case a.Metadata != nil:
			st.metadata = a.Metadata
		}
	}
}

func (st *replayState) snapshot(t *Table, version int64) (*Snapshot, error) {
	if st.protocol == nil {
		return nil, fmt.Errorf("load version %d of table %s: no protocol action in the log", version, t.Location())
	}
	if st.metadata == nil {
		return nil, fmt.Errorf("load version %d of table %s: no metaData action in the log", version, t.Location())
	}
	snap := &Snapshot{
		Version:           version,
		Protocol:          *st.protocol,
		Metadata:          *st.metadata,
		files:             newLayered(st.files),
		tombstones:        newLayered(st.tombstones),
		spill:             st.spill,
		txns:              st.txns,
		domains:           st.domains,
		checkpointVersion: st.checkpointVersion,
	}
	if err := snap.check(t.Location()); err != nil {
		return nil, err
	}
	return snap, nil
}

// check refuses a protocol we cannot read and parses the schema.
func (s *Snapshot) check(location string) error {
	if err := checkRead(location, s.Protocol); err != nil {
		return fmt.Errorf("load version %d: %w", s.Version, err)
	}
	schema, err := s.Metadata.Schema()
	if err != nil {
		return fmt.Errorf("load version %d of table %s: %w", s.Version, location, err)
	}
	s.Schema = schema
	return nil
}

// derive returns the snapshot after the commits in order (one slice of
// actions each) are applied to s; s is unchanged. The file maps are
// layered, so the cost is the number of actions plus a bounded overlay,
// not the table's size.
func (s *Snapshot) derive(location string, version, timestamp int64, commits ...[]Action) (*Snapshot, error) {
	next := *s
	next.Version, next.Timestamp = version, timestamp
	files := map[FileKey]*Add{}
	tombs := map[FileKey]*Remove{}
	var txns map[string]Txn
	var domains map[string]DomainMetadata
	changedTable := false
	for _, actions := range commits {
		for i := range actions {
			a := &actions[i]
			switch {
			case a.Add != nil:
				k := keyOf(a.Add.Key())
				files[k] = a.Add
				tombs[k] = nil
			case a.Remove != nil:
				k := keyOf(a.Remove.Key())
				files[k] = nil
				tombs[k] = tombstone(a.Remove)
			case a.Txn != nil:
				if txns == nil {
					txns = copyMap(s.txns)
				}
				txns[a.Txn.AppID] = *a.Txn
			case a.DomainMetadata != nil:
				if domains == nil {
					domains = copyMap(s.domains)
				}
				if a.DomainMetadata.Removed {
					delete(domains, a.DomainMetadata.Domain)
				} else {
					domains[a.DomainMetadata.Domain] = *a.DomainMetadata
				}
			case a.Protocol != nil:
				next.Protocol, changedTable = *a.Protocol, true
			case a.Metadata != nil:
				next.Metadata, changedTable = *a.Metadata, true
			}
		}
	}
	if !changedTable {
		// Protocol and metadata as in s, which was checked already.
		next.files = s.files.with(files)
		next.tombstones = s.tombstones.with(tombs)
		next.txns, next.domains = orMap(txns, s.txns), orMap(domains, s.domains)
		return &next, nil
	}
	next.files = s.files.with(files)
	next.tombstones = s.tombstones.with(tombs)
	if txns != nil {
		next.txns = txns
	}
	if domains != nil {
		next.domains = domains
	}
	if err := next.check(location); err != nil {
		return nil, err
	}
	return &next, nil
}

func orMap[K comparable, V any](m, fallback map[K]V) map[K]V {
	if m != nil {
		return m
	}
	return fallback
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Update returns the table's latest snapshot, reusing snap: only commits
// after snap.Version are read and applied. When the log no longer holds
// them (cleaned up), it replays from a checkpoint instead.
func (t *Table) Update(ctx context.Context, snap *Snapshot) (*Snapshot, error) {
	if next, ok, err := t.updateByProbe(ctx, snap); ok || err != nil {
		return next, err
	}
	return t.updateByListing(ctx, snap)
}

// updateByListing is Update from a listing of the whole log.
func (t *Table) updateByListing(ctx context.Context, snap *Snapshot) (*Snapshot, error) {
	l, err := t.listLog(ctx)
	if err != nil {
		return nil, err
	}
	if l.latest == snap.Version {
		return snap, nil
	}
	if l.latest < snap.Version {
		return nil, fmt.Errorf("update table %s: log is at version %d, behind the snapshot's %d", t.Location(), l.latest, snap.Version)
	}
	for v := snap.Version + 1; v <= l.latest; v++ {
		if _, ok := l.commits[v]; !ok {
			return t.loadFrom(ctx, l, -1)
		}
	}
	commits := make([][]Action, 0, l.latest-snap.Version)
	for v := snap.Version + 1; v <= l.latest; v++ {
		actions, err := t.readCommit(ctx, v)
		if err != nil {
			return nil, err
		}
		commits = append(commits, actions)
	}
	next, err := snap.derive(t.Location(), l.latest, 0, commits...)
	if err != nil {
		return nil, err
	}
	if ict, from := inCommitTimestamps(next.Protocol, next.Metadata); ict && next.Version >= from {
		if ci := firstCommitInfo(commits[len(commits)-1]); ci != nil && ci.InCommitTimestamp != nil {
			next.Timestamp = *ci.InCommitTimestamp
		}
	} else {
		next.Timestamp, _ = l.commitTime(next.Version)
	}
	return next, nil
}
