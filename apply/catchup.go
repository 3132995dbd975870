package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/cdcapply/cdcapply/delta"
)

// errTwoRows is wrapped when a catch-up finds a key in a file another
// writer added while the index places it in a file that is still live:
// two rows for one key. Only a rebuild can tell which is the table's
// (BuildKeyIndex refuses such a table with both files named).
var errTwoRows = errors.New("a key is in two live files")

// CatchUpStats is what KeyIndex.CatchUp did.
type CatchUpStats struct {
	// FilesRemoved and FilesAdded count the data files (a new deletion
	// vector on a file counts as one of each) the other commits changed.
	FilesRemoved, FilesAdded int
	// RowsRead are the added files' live rows; KeysAdded the keys among
	// them the index did not hold (a restore bringing purged tombstones
	// back, another instance's new keys); KeysDropped the keys the table
	// no longer holds (purged tombstones, rows a restore undid).
	RowsRead, KeysAdded, KeysDropped int
	// gone are the paths of the removed files the snapshot does not hold
	// under another deletion vector: files that left the table.
	gone []string
}

// CatchUp brings the index from the files it places keys in to the files
// of snap, a later snapshot of the same table after other writers'
// commits (a purge, an optimize, a restore): it reads the key, sequence
// and deleted columns of the files snap added, points their keys there,
// and drops the keys whose file snap removed without adding them again.
// The cost follows the files those commits touched, not the table, and no
// second index is built beside this one.
//
// The layout must be snap's (the caller checks that the schema did not
// change). An error leaves the index between the two snapshots: the
// caller must rebuild it (BuildKeyIndex) before using it.
func (ix *KeyIndex) CatchUp(ctx context.Context, snap *delta.Snapshot, rf RowFiles) (CatchUpStats, error) {
	var st CatchUpStats
	gone := make([]bool, len(ix.files))
	var removed []string
	for id, add := range ix.files {
		if add == nil {
			continue
		}
		if _, live := snap.File(delta.FileKey{Path: add.Path, DV: add.DeletionVector.UniqueID()}); live {
			continue
		}
		gone[id] = true
		st.FilesRemoved++
		removed = append(removed, add.Path)
		delete(ix.byPath, add.Path)
		ix.files[id] = nil
	}
	isGone := func(f fileID) bool { return f >= 0 && int(f) < len(gone) && gone[f] }
	for _, add := range snap.Files() {
		if _, known := ix.byPath[add.Path]; known {
			continue // the same path with the same vector: unchanged
		}
		st.FilesAdded++
		id := ix.addFile(add)
		err := readFileKeys(ctx, ix.layout, rf, add, func(key string, seq []byte, deleted bool, pos int64) error {
			st.RowsRead++
			i, ok := ix.find(key)
			if !ok {
				st.KeysAdded++
				return ix.insert(key, seq, deleted, id, pos)
			}
			if f := ix.entries.at(i).file; !isGone(f) {
				return fmt.Errorf("%w: key %s is in %s and in %s", errTwoRows, ix.renderKey(key), ix.pathOf(f), add.Path)
			}
			return ix.set(i, seq, deleted, id, pos)
		})
		if err != nil {
			return st, fmt.Errorf("catch up the key index with version %d: %w", snap.Version, err)
		}
	}
	if st.FilesRemoved == 0 {
		return st, nil
	}
	for _, p := range removed {
		if _, again := ix.byPath[p]; !again {
			st.gone = append(st.gone, p)
		}
	}
	dropped, err := ix.dropKeys(isGone)
	st.KeysDropped = dropped
	if err != nil {
		return st, fmt.Errorf("catch up the key index with version %d: %w", snap.Version, err)
	}
	ix.compactFiles()
	return st, nil
}

// dropKeys drops every key whose file gone says left the table and
// returns how many. A few are removed one by one (remove: the cost
// follows them, not the index); when they are at least an eighth of the
// index (a purge of most tombstones, a restore to an early version), the
// kept entries are packed down in one pass and the slot table is built
// again, which costs a pass over the index but not a probe run per key.
// Either way the slot table then shrinks to what the keys left need once
// it is four times that: a large purge returns the index's memory to
// what a restart would build, instead of keeping the slots of the keys
// the table held before.
func (ix *KeyIndex) dropKeys(gone func(fileID) bool) (int, error) {
	dropped := 0
	for i := range ix.entries.n {
		if gone(ix.entries.at(i).file) {
			dropped++
		}
	}
	if dropped == 0 {
		return 0, nil
	}
	if dropped*8 < ix.entries.n {
		for i := 0; i < ix.entries.n; {
			if !gone(ix.entries.at(i).file) {
				i++
				continue
			}
			// The last entry moves to i: look at i again.
			if err := ix.remove(i); err != nil {
				return 0, err
			}
		}
		if size := slotsFor(ix.entries.n); len(ix.slots) >= 4*size {
			ix.rehash(size)
		}
		return dropped, nil
	}
	kept := 0
	for i := range ix.entries.n {
		e := *ix.entries.at(i)
		if !gone(e.file) {
			*ix.entries.at(kept) = e
			kept++
			continue
		}
		key, seq := ix.record(i)
		ix.garbage += recordLen(len(key), len(seq))
		if e.off&deletedBit != 0 {
			ix.tombstones--
		}
	}
	for ix.entries.n > kept {
		ix.entries.pop()
	}
	size := slotsFor(kept)
	if len(ix.slots) < 4*size {
		size = len(ix.slots) // not sparse enough to shrink: rebuilt in place of the same size
	}
	ix.rehash(size)
	if ix.garbage > 1<<20 && ix.garbage > ix.arena.size()/2 {
		return dropped, ix.compact()
	}
	return dropped, nil
}

// pathOf names a file for messages.
func (ix *KeyIndex) pathOf(f fileID) string {
	if f >= 0 && int(f) < len(ix.files) && ix.files[f] != nil {
		return ix.files[f].Path
	}
	return fmt.Sprintf("file #%d", f)
}
