package delta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// LogDir is the name of the transaction log folder under a table root.
const LogDir = "_delta_log"

// Snapshot is the state of a table at one version: what log replay yields.
// A Snapshot is immutable once built and safe to share between goroutines.
type Snapshot struct {
	// Version is the table version this snapshot reflects.
	Version int64
	// Timestamp is the commit time of Version in Unix milliseconds (the
	// in-commit timestamp when the table has one, else the commit file's
	// modification time).
	Timestamp int64
	Protocol  Protocol
	Metadata  Metadata
	// Schema is Metadata's parsed schema.
	Schema StructType

	// files are the live add actions keyed by (path, deletion vector id).
	// It is a layered map shared with the snapshots it derives from: read
	// it through the accessors or rangeFiles, never as a plain map.
	files layered[Add]
	// tombstones are the remove actions held in memory (for checkpoints
	// and vacuum), layered like files: those of the commits replayed or
	// derived after spill's checkpoint, or every one when spill is nil.
	tombstones layered[Remove]
	// spill, when set, is the checkpoint whose removes the snapshot does
	// not hold in memory but reads back when it needs them (the next
	// checkpoint, vacuum). A table whose files get new deletion vectors
	// removes and re-adds them at every change, so a week of retention
	// holds millions of removes; held in memory they grew the writer's
	// heap for the whole retention period.
	spill *spilledTombstones
	// tombstoneCutoff is the deletion time (Unix ms) before which the
	// tombstones have expired, as the writer's last checkpoint found:
	// spilled ones older than it are left out when read back (those in
	// memory were dropped then). 0 when no checkpoint expired any.
	tombstoneCutoff int64
	// txns holds the latest txn action per appId.
	txns map[string]Txn
	// domains holds the live (not removed) domain metadata per domain.
	domains map[string]DomainMetadata
	// checkpointVersion is the version of the checkpoint replay started
	// from, or -1 when it replayed JSON commits only.
	checkpointVersion int64
}

// Files returns the live add actions sorted by path. The slice is new; the
// actions are shared and must not be modified.
func (s *Snapshot) Files() []*Add {
	out := make([]*Add, 0, s.files.len())
	s.files.each(func(_ FileKey, a *Add) bool {
		out = append(out, a)
		return true
	})
	slices.SortFunc(out, func(a, b *Add) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.DeletionVector.UniqueID(), b.DeletionVector.UniqueID())
	})
	return out
}

// NumFiles returns the number of live data files.
func (s *Snapshot) NumFiles() int { return s.files.len() }

// File returns the live add action for a key.
func (s *Snapshot) File(k FileKey) (*Add, bool) {
	return s.files.get(keyOf(k))
}

// Tombstones returns the remove actions kept in the snapshot, sorted by
// path: those held in memory and those of the checkpoint it spilled to,
// read back from storage.
func (s *Snapshot) Tombstones(ctx context.Context) ([]*Remove, error) {
	out := make([]*Remove, 0, s.NumTombstones())
	err := s.rangeTombstones(ctx, func(r *Remove) bool {
		out = append(out, r)
		return true
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *Remove) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Txn returns the latest txn action of appID.
func (s *Snapshot) Txn(appID string) (Txn, bool) {
	t, ok := s.txns[appID]
	return t, ok
}

// Txns returns a copy of the latest txn action per appId.
func (s *Snapshot) Txns() map[string]Txn {
	out := make(map[string]Txn, len(s.txns))
	for k, v := range s.txns {
		out[k] = v
	}
	return out
}

// Domain returns the live domain metadata of a domain.
func (s *Snapshot) Domain(name string) (DomainMetadata, bool) {
	d, ok := s.domains[name]
	return d, ok
}

// Domains returns a copy of the live domain metadata.
func (s *Snapshot) Domains() map[string]DomainMetadata {
	out := make(map[string]DomainMetadata, len(s.domains))
	for k, v := range s.domains {
		out[k] = v
	}
	return out
}

// CheckpointVersion is the version of the checkpoint the snapshot was
// replayed from, or -1.
func (s *Snapshot) CheckpointVersion() int64 { return s.checkpointVersion }

// CheckpointInterval is the table's delta.checkpointInterval: a log
// checkpoint is written at every version it divides (10 unless set).
func (s *Snapshot) CheckpointInterval() int64 { return checkpointInterval(s.Metadata) }

// rangeFiles calls f for each live add action in no particular order until
// f returns false. It copies nothing, unlike Files.
func (s *Snapshot) rangeFiles(f func(*Add) bool) {
	s.files.each(func(_ FileKey, a *Add) bool { return f(a) })
}

// rangeTombstones calls f for each kept remove action, in no particular
// order, until f returns false: those in memory, then the spilled ones
// (rangeSpilled). Reading the spill back is its only error.
func (s *Snapshot) rangeTombstones(ctx context.Context, f func(*Remove) bool) error {
	more := true
	s.tombstones.each(func(_ FileKey, r *Remove) bool {
		more = f(r)
		return more
	})
	if !more || s.spill == nil {
		return nil
	}
	return s.rangeSpilled(ctx, f)
}

// rangeSpilled calls f for each remove of the spilled checkpoint that no
// later action superseded nor the writer's last checkpoint expired, until
// f returns false.
func (s *Snapshot) rangeSpilled(ctx context.Context, f func(*Remove) bool) error {
	return s.rangeSpilledGroups(ctx, nil, func(rms []*Remove) bool {
		for _, r := range rms {
			if !f(r) {
				return false
			}
		}
		return true
	})
}

// rangeSpilledGroups is rangeSpilled a group at a time: f gets the kept
// removes of one row group of the spilled checkpoint (or of a JSON file).
// With take, a Parquet group is first read light (its removes' keys and
// deletion times) and, when it holds removes only and keeps every one of
// them, offered to take with them; a group take takes is neither decoded
// whole nor handed to f.
func (s *Snapshot) rangeSpilledGroups(ctx context.Context, take func(g *ckptGroup, keys []*Remove) bool, f func([]*Remove) bool) error {
	var kept []*Remove
	filter := func(rms []*Remove) []*Remove {
		kept = kept[:0]
		for _, r := range rms {
			if s.tombstoneCutoff > 0 && (r.DeletionTimestamp == nil || *r.DeletionTimestamp < s.tombstoneCutoff) {
				continue
			}
			// A later add of the same file cancels the remove; a later
			// remove, held in memory, replaces it.
			k := keyOf(r.Key())
			if _, live := s.files.get(k); live {
				continue
			}
			if _, newer := s.tombstones.get(k); newer {
				continue
			}
			kept = append(kept, tombstone(r))
		}
		return kept
	}
	var fullErr error
	err := s.spill.eachGroup(ctx, take != nil, func(rms []*Remove, g *ckptGroup) bool {
		kept := filter(rms)
		if g != nil && take != nil && g.removesOnly && len(kept) == len(rms) && take(g, kept) {
			return true
		}
		if g != nil && g.full != nil {
			whole, err := g.full()
			if err != nil {
				fullErr = fmt.Errorf("read the removes of checkpoint %d: read checkpoint file %s: %w", s.spill.version, g.path, err)
				return false
			}
			kept = filter(whole)
		}
		return f(kept)
	})
	if err == nil {
		err = fullErr
	}
	return err
}

// NumTombstones returns the number of remove actions kept in the snapshot:
// those in memory plus those of the spilled checkpoint. It is exact unless
// a file the checkpoint holds as removed was added or removed again since
// (this package's writer never does that: its files and deletion vectors
// have fresh names), or a checkpoint written since has expired some of
// them and the writer's snapshot has not rebased on it yet (until its
// next commit); it then counts those too.
func (s *Snapshot) NumTombstones() int {
	n := s.tombstones.len()
	if s.spill != nil {
		n += s.spill.n
	}
	return n
}

// errSpillGone: the checkpoint a snapshot reads its older removes from
// was deleted, by another writer's log cleanup (this package's keeps it,
// CleanupExpiredLogs). A fresh load of the version reads a newer one.
var errSpillGone = errors.New("the checkpoint is gone")

// spilledTombstones are the removes of one checkpoint, left in storage.
type spilledTombstones struct {
	store   storage.Storage
	version int64    // the checkpoint's version
	paths   []string // its files (readCheckpoint)
	n       int      // removes it holds
}

// eachGroup reads the checkpoint back and calls f with its removes a row
// group at a time (eachCheckpointRemoveGroup, light or not) until f
// returns false.
func (sp *spilledTombstones) eachGroup(ctx context.Context, light bool, f func([]*Remove, *ckptGroup) bool) error {
	err := eachCheckpointRemoveGroup(ctx, sp.store, sp.version, sp.paths, light, f)
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return fmt.Errorf("read the removes of checkpoint %d: %w: %w", sp.version, errSpillGone, err)
		}
		return fmt.Errorf("read the removes of checkpoint %d: %w", sp.version, err)
	}
	return nil
}

// rebased returns s with the tombstones that checkpoint w (the snapshot a
// checkpoint of version w.Version was written from, with n removes)
// holds left to that checkpoint: in memory stay only those of the
// commits after it. s must be a later state of the same table; a
// snapshot that already spills to w's checkpoint or a later one is
// returned as it is.
func (s *Snapshot) rebased(store storage.Storage, w *Snapshot, paths []string, n int) *Snapshot {
	if s.Version < w.Version || (s.spill != nil && s.spill.version >= w.Version) {
		return s
	}
	kept := map[FileKey]*Remove{}
	s.tombstones.each(func(k FileKey, r *Remove) bool {
		// The checkpoint holds the remove when w held the same one:
		// same file, same deletion time.
		if old, ok := w.tombstones.get(k); !ok || !sameDeletion(old, r) {
			kept[k] = r
		}
		return true
	})
	next := *s
	next.tombstones = newLayered(kept)
	next.spill = &spilledTombstones{store: store, version: w.Version, paths: paths, n: n}
	return &next
}

func sameDeletion(a, b *Remove) bool {
	if a.DeletionTimestamp == nil || b.DeletionTimestamp == nil {
		return a.DeletionTimestamp == b.DeletionTimestamp
	}
	return *a.DeletionTimestamp == *b.DeletionTimestamp
}

// layered is an immutable map from FileKey to *T built as a shared base map
// plus a small overlay of changes. Deriving a new version with a few changes
// copies only the overlay, so a commit on a table of 100k files does not
// copy 100k entries; once the overlay outgrows a bound it is folded into a
// new base. A nil value in the overlay marks a key deleted from the base.
type layered[T any] struct {
	base map[FileKey]*T // never written after construction
	over map[FileKey]*T // never written after construction
	n    int            // live entries
}

func (m *layered[T]) len() int { return m.n }

func (m *layered[T]) get(k FileKey) (*T, bool) {
	if v, ok := m.over[k]; ok {
		return v, v != nil
	}
	v, ok := m.base[k]
	return v, ok
}

// each calls f for every live entry until f returns false.
func (m *layered[T]) each(f func(FileKey, *T) bool) {
	for k, v := range m.base {
		if _, shadowed := m.over[k]; shadowed {
			continue
		}
		if !f(k, v) {
			return
		}
	}
	for k, v := range m.over {
		if v != nil && !f(k, v) {
			return
		}
	}
}

// with returns a new map with changes applied (a nil value deletes the key);
// m is left as it was. Its cost is the overlay's size plus the changes',
// and a full copy only when the overlay is folded into the base.
func (m *layered[T]) with(changes map[FileKey]*T) layered[T] {
	if len(changes) == 0 {
		return *m
	}
	out := layered[T]{base: m.base, n: m.n}
	out.over = make(map[FileKey]*T, len(m.over)+len(changes))
	for k, v := range m.over {
		out.over[k] = v
	}
	for k, v := range changes {
		_, had := m.get(k)
		switch {
		case v != nil && !had:
			out.n++
		case v == nil && had:
			out.n--
		}
		if _, inBase := m.base[k]; !inBase && v == nil {
			// Deleting a key the base lacks needs no marker.
			delete(out.over, k)
			continue
		}
		out.over[k] = v
	}
	if len(out.over) > overlayLimit(len(out.base)) {
		out = out.flatten()
	}
	return out
}

// flatten folds the overlay into a new base.
func (m layered[T]) flatten() layered[T] {
	base := make(map[FileKey]*T, m.n)
	m.each(func(k FileKey, v *T) bool {
		base[k] = v
		return true
	})
	return layered[T]{base: base, n: len(base)}
}

// overlayLimit bounds the overlay of a base of n entries. Per commit of c
// changes the overlay copy costs about limit/2 and folding costs n every
// limit/c commits; a limit near sqrt(2cn) keeps both small (1024 entries
// at 100k files instead of copying 100k; measured against 4·sqrt(n) by
// BenchmarkPostCommitSnapshot: 0.21 against 0.31 ms per commit).
func overlayLimit(n int) int {
	l := 4
	for l*l < n {
		l *= 2
	}
	l *= 2
	if l < 256 {
		l = 256
	}
	return l
}

// tombstonesSince returns the tombstones of m deleted at or after cutoff
// (Unix ms), as a checkpoint keeps them (checkpointActions: one without a
// deletion time counts as deleted at the epoch); m itself when none has
// expired.
func tombstonesSince(m *layered[Remove], cutoff int64) layered[Remove] {
	expired := func(r *Remove) bool { return r.DeletionTimestamp == nil || *r.DeletionTimestamp < cutoff }
	some := false
	m.each(func(_ FileKey, r *Remove) bool {
		some = expired(r)
		return !some
	})
	if !some {
		return *m
	}
	kept := make(map[FileKey]*Remove, m.n)
	m.each(func(k FileKey, r *Remove) bool {
		if !expired(r) {
			kept[k] = r
		}
		return true
	})
	return newLayered(kept)
}

// newLayered wraps a plain map the caller hands over and no longer writes.
func newLayered[T any](m map[FileKey]*T) layered[T] {
	return layered[T]{base: m, n: len(m)}
}
