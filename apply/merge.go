package apply

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// Row is one stored row: the source columns in layout order and the
// engine columns.
type Row struct {
	Values         []schema.Value
	Seq            []byte
	Deleted        bool
	SourceTsMicros int64 // 0: unknown
	AppliedMicros  int64
	// Pos is the row's physical index in its data file, set by ReadRows
	// (it differs from the row's place in the result once a deletion
	// vector hides earlier rows). Writers ignore it.
	Pos int64
}

// RowFiles reads and writes a table's data files as rows. The apply engine
// only ever sees rows; the implementation owns the columnar format.
type RowFiles interface {
	// ReadRows returns every live row of a data file (rows its deletion
	// vector hides are left out), in file order.
	ReadRows(ctx context.Context, add *delta.Add) ([]Row, error)
	// WriteRows writes rows as one new data file and returns its add action.
	WriteRows(ctx context.Context, rows []Row) (*delta.Add, error)
}

// RowDeleter is the RowFiles capability merge-on-read needs: marking rows
// of a live data file deleted in its deletion vector.
type RowDeleter interface {
	// DeleteRows returns, for each deletion, the add that replaces its
	// file: the same data file with the rows at the given physical indexes
	// added to its deletion vector (the union with the vector it has), or
	// nil when no row of the file stays live (the file is then removed
	// instead). One call takes a batch's files, so their vectors can be
	// written together.
	DeleteRows(ctx context.Context, dels []Deletion) ([]*delta.Add, error)
	// ReadRowsAt returns the rows of a's data file at the given physical
	// indexes (ascending, none hidden by its deletion vector), each with
	// Pos set: merge-on-read needs the stored values of a few rows of a
	// file, not all of them. need, when not nil, says which source
	// columns each row needs (need[i], ascending; nil: every column):
	// the key columns are read too, the row's other values may be left
	// unavailable, and its Seq, Deleted and times unset.
	ReadRowsAt(ctx context.Context, a *delta.Add, rows []int64, need [][]int) ([]Row, error)
}

// Deletion asks for rows of one data file to be hidden.
type Deletion struct {
	File *delta.Add
	Rows []int64
}

// MergeMode is how a batch writes rows that replace stored ones.
type MergeMode string

// The merge modes (write_mode in the configuration).
const (
	// CopyOnWrite rewrites every file holding a changed key whole:
	// readable by every Delta reader, cost grows with the files touched.
	CopyOnWrite MergeMode = "copy-on-write"
	// MergeOnRead writes changed rows to the batch's new file and hides
	// their old versions with deletion vectors: cost grows with the batch;
	// readers need the deletionVectors table feature.
	MergeOnRead MergeMode = "merge-on-read"
)

// fileID numbers live data files inside a key index; a rewrite keeps the
// id and swaps the add, so no key entry moves when its file is rewritten.
type fileID int32

// noFile marks a pending entry whose row goes to the batch's new file,
// whose id is known only once the commit landed.
const noFile fileID = -1

// Counts are the row outcomes of one batch.
type Counts struct {
	Stale, Insert, Update, Delete, Revive int
	// Unresolved counts unavailable columns that no older version could
	// fill and were written as NULL.
	Unresolved int
	// AppliedRecords and StaleRecords account for every change record of
	// the batch: a record is stale when the table already held its
	// sequence or a newer one, applied otherwise (including a record that
	// a newer change of the same batch superseded: it took effect in
	// sequence order, and its values may fill the winner's columns).
	AppliedRecords, StaleRecords int
}

// add adds o's counts to c's.
func (c *Counts) add(o Counts) {
	c.Stale += o.Stale
	c.Insert += o.Insert
	c.Update += o.Update
	c.Delete += o.Delete
	c.Revive += o.Revive
	c.Unresolved += o.Unresolved
	c.AppliedRecords += o.AppliedRecords
	c.StaleRecords += o.StaleRecords
}

// Plan is the effect of one batch on a table: files to remove, files to
// add and the index changes to make once the commit lands.
type Plan struct {
	Removes []*delta.Add
	Adds    []*delta.Add
	Counts  Counts
	// DeletionVectors is set when the plan hides rows with deletion
	// vectors (merge-on-read): the table needs the deletionVectors feature.
	DeletionVectors bool

	// replaced[i] gives the file of id replaced[i].id the add Adds[replaced[i].add].
	replaced []replacement
	// gone are files removed with no replacement (every row moved).
	gone    []fileID
	newFile int // index in Adds of the batch's new file, or -1
	pending []pendingEntry
}

type replacement struct {
	id  fileID
	add int
}

// pendingEntry is an index change the commit makes true.
type pendingEntry struct {
	key     string
	seq     []byte
	deleted bool
	file    fileID // noFile: the batch's new file
	row     int64
	// entry is the key's index entry + 1 when planning found it (0: look
	// the key up). Entries never move, so it stays valid until the commit.
	entry int
}

// changedKey is a change to a key the index holds, with its entry.
type changedKey struct {
	r     *Reduced
	entry int
	e     entryState // the entry as lookupAll decoded it
	// stored: resolving r takes values from the stored row (Reduced.unavailableColumns),
	// decided once by readStored.
	stored bool
}

func newPlan() *Plan { return &Plan{newFile: -1} }

func (p *Plan) replace(id fileID, old, add *delta.Add) {
	p.Removes = append(p.Removes, old)
	if add == nil {
		p.gone = append(p.gone, id)
		return
	}
	p.replaced = append(p.replaced, replacement{id: id, add: len(p.Adds)})
	p.Adds = append(p.Adds, add)
}

// PlanBatch resolves a reduced batch against the table and writes the data
// files the commit will add. Keys whose change is stale touch no file; keys
// the table does not hold go to one new file. A key whose current row is in
// a file is written by mode:
//
//   - copy-on-write: each file holding a changed key is rewritten, every
//     other row of it copied as it was;
//   - merge-on-read: the new row goes to the batch's new file and the old
//     row is marked deleted in its file's deletion vector. The old file is
//     read only when a change needs the stored values (an unavailable
//     column the batch cannot fill, or a delete, whose tombstone keeps
//     the last values); otherwise the index alone resolves the change.
func (ix *KeyIndex) PlanBatch(ctx context.Context, reduced []Reduced, rf RowFiles, appliedMicros int64, mode MergeMode, fold bool) (*Plan, error) {
	if err := ix.fillFromOldKeys(ctx, reduced, rf); err != nil {
		return nil, err
	}
	p := newPlan()
	byFile := map[fileID][]changedKey{}
	var fresh []*Reduced
	found := ix.lookupAll(reduced)
	for i := range reduced {
		r := &reduced[i]
		at, ok, e := found[i].at, found[i].ok, found[i].e
		if w := r.Winner; w.tombstone {
			// A Kafka tombstone deletes the stored row as it is: its
			// sequence is at least the row's. With neither a row nor a
			// change before it in the batch there is nothing to delete.
			switch {
			case !ok && w.Seq == nil, ok && e.deleted && bytes.Compare(w.Seq, e.seq) <= 0:
				p.Counts.Stale++
				p.Counts.StaleRecords += len(r.Changes)
				continue
			case ok && bytes.Compare(w.Seq, e.seq) < 0:
				w.Seq = bytes.Clone(e.seq)
			}
		}
		switch {
		case ok && bytes.Compare(r.Winner.Seq, e.seq) <= 0 && !r.Winner.deletesStored(e.seq, e.deleted):
			p.Counts.Stale++
			p.Counts.StaleRecords += len(r.Changes)
		case ok:
			byFile[e.file] = append(byFile[e.file], changedKey{r: r, entry: at, e: e})
		default:
			fresh = append(fresh, r)
		}
	}
	ids := make([]fileID, 0, len(byFile))
	for id := range byFile {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var rows []Row // the batch's new file
	if mode == MergeOnRead {
		rd, ok := rf.(RowDeleter)
		if !ok {
			return nil, fmt.Errorf("plan batch: merge-on-read needs data files that take deletion vectors")
		}
		planned, err := ix.planFiles(ctx, ids, byFile, rd, appliedMicros)
		if err != nil {
			return nil, err
		}
		// The batch's own rows, sized once; folded rows append to them.
		n := len(fresh)
		for i := range planned {
			n += len(planned[i].rows)
		}
		rows = make([]Row, 0, n)
		p.pending = make([]pendingEntry, 0, n)
		hide := map[fileID][]int64{}
		for i, id := range ids {
			fp := &planned[i]
			base := int64(len(rows))
			rows = append(rows, fp.rows...)
			for _, pe := range fp.pending {
				pe.row += base
				p.pending = append(p.pending, pe)
			}
			p.Counts.add(fp.counts)
			if len(fp.positions) > 0 {
				hide[id] = fp.positions
			}
		}
		for _, r := range fresh {
			row, _ := ix.resolve(r, nil, appliedMicros, &p.Counts)
			p.pending = append(p.pending, pendingEntry{key: r.Winner.Key, seq: row.Seq, deleted: row.Deleted, file: noFile, row: int64(len(rows))})
			rows = append(rows, row)
		}
		fresh = nil
		// Fold small and hollow files into the batch's new file (their
		// rows move there, the files are removed): what keeps a
		// merge-on-read table's files and vectors bounded while it streams.
		var folds []fileID
		if fold {
			folds = ix.foldCandidates(hide, len(rows))
		}
		folded, err := readFolds(ctx, ix, folds, rf)
		if err != nil {
			return nil, err
		}
		for i, id := range folds {
			if rows, err = ix.fold(id, folded[i], hide[id], rows, p); err != nil {
				return nil, err
			}
			delete(hide, id)
		}
		var dels []Deletion
		var delIDs []fileID
		for _, id := range ids {
			if positions, ok := hide[id]; ok {
				dels = append(dels, Deletion{File: ix.files[id], Rows: positions})
				delIDs = append(delIDs, id)
			}
		}
		if len(dels) > 0 {
			// The vectors and the new file are independent: the vectors
			// are encoded and written while the rows are.
			var adds []*delta.Add
			var derr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				adds, derr = rd.DeleteRows(ctx, dels)
			}()
			add, werr := writeNew(ctx, rf, rows)
			<-done
			if derr != nil {
				return nil, fmt.Errorf("plan batch: deletion vectors of %d files: %w", len(dels), derr)
			}
			if werr != nil {
				return nil, werr
			}
			for i, id := range delIDs {
				p.replace(id, dels[i].File, adds[i])
			}
			p.DeletionVectors = true
			p.addNew(add)
			return p, nil
		}
	} else {
		for _, id := range ids {
			if err := ix.planRewrite(ctx, id, byFile[id], rf, appliedMicros, p); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range fresh {
		row, _ := ix.resolve(r, nil, appliedMicros, &p.Counts)
		p.pending = append(p.pending, pendingEntry{key: r.Winner.Key, seq: row.Seq, deleted: row.Deleted, file: noFile, row: int64(len(rows))})
		rows = append(rows, row)
	}
	add, err := writeNew(ctx, rf, rows)
	if err != nil {
		return nil, err
	}
	p.addNew(add)
	return p, nil
}

// writeNew writes the batch's new rows as one file (nil: no rows).
func writeNew(ctx context.Context, rf RowFiles, rows []Row) (*delta.Add, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	add, err := rf.WriteRows(ctx, rows)
	if err != nil {
		return nil, fmt.Errorf("plan batch: write new rows: %w", err)
	}
	return add, nil
}

// addNew makes add, if any, the plan's new file.
func (p *Plan) addNew(add *delta.Add) {
	if add != nil {
		p.newFile = len(p.Adds)
		p.Adds = append(p.Adds, add)
	}
}

// Merge-on-read folding. A streaming merge-on-read table gains a small
// file per batch and deletion vectors on its older files; left alone both
// grow without bound and so does each batch's cost (a vector update per
// touched file, a footer per stored-row read). Each batch therefore moves
// the live rows of a few files into its own new file and removes them:
// files whose vectors hide at least half their rows, and the smallest
// small files while there are more than foldKeepSmall of them. A batch
// moves at most as many rows as it writes itself, so folding at most
// doubles its writes; only when more than foldCatchUp small files have
// piled up (batches far smaller than a file) may it move foldCatchUpRows,
// once in a while. Batches of at least foldSmallRows rows write files
// that are not small, and their files are folded once hollow.
const (
	foldSmallRows   = 1 << 14 // a file under this many rows is small
	foldKeepSmall   = 4       // small files left unfolded
	foldCatchUp     = 32      // small files that let a batch move more
	foldCatchUpRows = 1 << 16 // rows a catching-up batch may move
)

// foldDefault is whether a new TableApplier folds (SetFolding); tests of
// the deletion vector mechanics, whose tables' files are all small, turn
// it off.
var foldDefault = true

// foldCandidates picks the files a batch of batchRows new rows folds.
// hide holds the rows the batch itself hides, by file.
func (ix *KeyIndex) foldCandidates(hide map[fileID][]int64, batchRows int) []fileID {
	type cand struct {
		id         fileID
		rows, live int64
	}
	var small, hollow []cand
	for id, a := range ix.files {
		if a == nil {
			continue
		}
		n := numRecords(a)
		if n <= 0 {
			continue // unknown size: never folded
		}
		hidden := int64(len(hide[fileID(id)]))
		if a.DeletionVector != nil {
			hidden += a.DeletionVector.Cardinality
		}
		c := cand{id: fileID(id), rows: n, live: n - hidden}
		switch {
		case 2*hidden >= n:
			hollow = append(hollow, c)
		case n < foldSmallRows:
			small = append(small, c)
		}
	}
	budget := int64(batchRows)
	if len(small) > foldCatchUp {
		budget = max(budget, foldCatchUpRows)
	}
	var out []fileID
	take := func(c cand) bool {
		if c.live > budget {
			return false
		}
		budget -= c.live
		out = append(out, c.id)
		return true
	}
	sort.Slice(hollow, func(i, j int) bool { return hollow[i].live < hollow[j].live })
	for _, c := range hollow {
		if !take(c) {
			break
		}
	}
	sort.Slice(small, func(i, j int) bool { return small[i].rows < small[j].rows })
	for i := 0; len(small)-i > foldKeepSmall; i++ {
		if !take(small[i]) {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// readFolds reads the live rows of the files a batch folds, on up to
// GOMAXPROCS goroutines: the batch's other work is done by then, so the
// reads would otherwise leave a core idle.
func readFolds(ctx context.Context, ix *KeyIndex, folds []fileID, rf RowFiles) ([][]Row, error) {
	out := make([][]Row, len(folds))
	err := onEveryCore(len(folds), func(i int) error {
		old := ix.files[folds[i]]
		var err error
		if out[i], err = rf.ReadRows(ctx, old); err != nil {
			return fmt.Errorf("plan batch: fold %s: %w", old.Path, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// onEveryCore calls fn(i) for each i in [0, n) on up to GOMAXPROCS
// goroutines and returns the error of the lowest i that failed, after all
// calls have returned.
func onEveryCore(n int, fn func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fold moves file id's live rows (stored, as readFolds read them), except
// those at the positions the batch itself replaces (hidden), to the
// batch's new rows and removes the file. Each moved row must be where the
// index places its key.
func (ix *KeyIndex) fold(id fileID, stored []Row, hidden []int64, rows []Row, p *Plan) ([]Row, error) {
	old := ix.files[id]
	skip := make(map[int64]bool, len(hidden))
	for _, r := range hidden {
		skip[r] = true
	}
	for i := range stored {
		r := &stored[i]
		pos := int64(i)
		if old.DeletionVector != nil {
			pos = r.Pos
		}
		if skip[pos] {
			continue
		}
		key := EncodeKey(r.Values, ix.layout.Key)
		at, ok := ix.find(key)
		if !ok {
			return nil, fmt.Errorf("plan batch: fold %s: row %d holds key %s the index lacks", old.Path, pos, ix.renderKey(key))
		}
		if e := ix.state(at); e.file != id || e.row != pos {
			return nil, fmt.Errorf("plan batch: fold %s: row %d holds key %s, which the index places in file %d row %d", old.Path, pos, ix.renderKey(key), e.file, e.row)
		}
		p.pending = append(p.pending, pendingEntry{key: key, seq: r.Seq, deleted: r.Deleted, file: noFile, row: int64(len(rows)), entry: at + 1})
		r.Pos = 0
		rows = append(rows, *r)
	}
	p.replace(id, old, nil)
	return rows, nil
}

// planRewrite rewrites file id with the batch's changes to it (copy-on-write).
func (ix *KeyIndex) planRewrite(ctx context.Context, id fileID, changed []changedKey, rf RowFiles, appliedMicros int64, p *Plan) error {
	old := ix.files[id]
	rows, err := rf.ReadRows(ctx, old)
	if err != nil {
		return fmt.Errorf("plan batch: %w", err)
	}
	changes := make(map[string]*Reduced, len(changed))
	for _, c := range changed {
		changes[c.r.Winner.Key] = c.r
	}
	for i := range rows {
		moved := old.DeletionVector != nil && rows[i].Pos != int64(i)
		k := EncodeKey(rows[i].Values, ix.layout.Key)
		r, ok := changes[k]
		if !ok && !moved {
			continue
		}
		if ok {
			delete(changes, k)
			stored := &StoredRow{Seq: rows[i].Seq, Deleted: rows[i].Deleted, Values: rows[i].Values}
			if row, kind := ix.resolve(r, stored, appliedMicros, &p.Counts); kind != RowStale { // stale: the index was behind the file: trust the file
				rows[i] = row
			}
		}
		// The rewrite drops rows a deletion vector hid, so rows after
		// them move up: their entries follow.
		p.pending = append(p.pending, pendingEntry{key: k, seq: rows[i].Seq, deleted: rows[i].Deleted, file: id, row: int64(i)})
	}
	if len(changes) > 0 {
		return fmt.Errorf("plan batch: file %s lacks %d key(s) the index places there", old.Path, len(changes))
	}
	add, err := rf.WriteRows(ctx, rows)
	if err != nil {
		return fmt.Errorf("plan batch: rewrite %s: %w", old.Path, err)
	}
	p.replace(id, old, add)
	return nil
}

// lookedUp is a reduced key's index entry, if the index holds the key.
type lookedUp struct {
	at int
	ok bool
	e  entryState
}

// lookupMin is the fewest keys per goroutine lookupAll splits a batch
// into.
const lookupMin = 4096

// lookupGroup is the number of keys findGroup looks up together.
const lookupGroup = 8

// findGroup looks up the winners' keys of rs (at most lookupGroup) into
// out[:len(rs)], in stages across the group: every key's slot, then
// every candidate entry, then every candidate's arena record. Each key's
// lookup is three dependent cache misses (slot, entry, record) in an
// index larger than the cache; within a stage the group's loads do not
// depend on each other, so the processor has them in flight together
// instead of one after another. A key whose first slot is not its own (a
// collision) is looked up again the usual way.
func (ix *KeyIndex) findGroup(rs []Reduced, out []lookedUp) {
	var keys [lookupGroup]string
	var hashes, slots [lookupGroup]uint64
	var cand [lookupGroup]int // entry index + 1 of the first slot if its tag matches, else 0
	var offs [lookupGroup]uint64
	mask := uint64(len(ix.slots) - 1)
	n := len(rs)
	for j := range n {
		keys[j] = rs[j].Winner.Key
	}
	for j := range n {
		hashes[j] = maphash.String(ix.seed, keys[j])
		slots[j] = ix.slots[hashes[j]&mask]
	}
	for j := range n {
		if s := slots[j]; s != 0 && s&^0xffffffff == tagOf(hashes[j]) {
			cand[j] = int(s & 0xffffffff)
			offs[j] = ix.entries.at(cand[j] - 1).off
		}
	}
	for j := range n {
		switch {
		case slots[j] == 0:
			out[j] = lookedUp{} // the probe ends at once: not held
		case cand[j] > 0 && ix.recordKeyIs(offs[j], keys[j]):
			at := cand[j] - 1
			out[j] = lookedUp{at: at, ok: true, e: ix.state(at)}
		default:
			at, ok := ix.find(keys[j])
			out[j] = lookedUp{at: at, ok: ok}
			if ok {
				out[j].e = ix.state(at)
			}
		}
	}
}

// lookupAll finds each reduced key's entry, on up to GOMAXPROCS
// goroutines for a large batch: a lookup in a large index is mostly a
// cache miss, and the index is only read while a batch is planned.
func (ix *KeyIndex) lookupAll(reduced []Reduced) []lookedUp {
	out := make([]lookedUp, len(reduced))
	part := func(from, to int) {
		for i := from; i < to; i += lookupGroup {
			ix.findGroup(reduced[i:min(i+lookupGroup, to)], out[i:])
		}
	}
	n := min(runtime.GOMAXPROCS(0), len(reduced)/lookupMin)
	if n < 2 {
		part(0, len(reduced))
		return out
	}
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() { part(w*len(reduced)/n, (w+1)*len(reduced)/n) })
	}
	wg.Wait()
	return out
}

// filePlan is what a merge-on-read batch does to one of the files it
// touches: the new rows of its changed keys, their pending index entries
// (rows numbered from 0 within rows), the old rows' positions for the
// file's deletion vector and the counts.
type filePlan struct {
	rows      []Row
	pending   []pendingEntry
	positions []int64
	counts    Counts
}

// planFiles plans each file of ids on up to GOMAXPROCS goroutines: reads
// the stored rows its changes need (readStored), then resolves its
// changes (planDeletes), on the goroutine that read them. Decoding pages
// is most of a merge-on-read batch's time when many changes need stored
// values, and files are independent. The index and the file list are
// only read while a batch is planned.
func (ix *KeyIndex) planFiles(ctx context.Context, ids []fileID, byFile map[fileID][]changedKey, rd RowDeleter, appliedMicros int64) ([]filePlan, error) {
	out := make([]filePlan, len(ids))
	err := onEveryCore(len(ids), func(i int) error {
		stored, err := ix.readStored(ctx, ids[i], byFile[ids[i]], rd)
		if err != nil {
			return err
		}
		return ix.planDeletes(ids[i], byFile[ids[i]], stored, appliedMicros, &out[i])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readStored reads the stored rows of file id that its changes need (a
// column left unavailable, a delete), only those columns, and marks the
// changes that take values from them. nil: none needed.
func (ix *KeyIndex) readStored(ctx context.Context, id fileID, changed []changedKey, rd RowDeleter) (map[int64]*Row, error) {
	type wanted struct {
		row  int64
		cols []int // the winner's unavailable columns
	}
	var want []wanted
	for j := range changed {
		// Only a column the winner left unavailable can take its value
		// from the stored row (a delete leaves every non-key column so,
		// and its tombstone keeps the last values; an update leaves a
		// TOASTed column it did not change). A full image needs nothing
		// but the index's sequence and deleted flag.
		if cols := changed[j].r.unavailableColumns(); len(cols) > 0 {
			changed[j].stored = true
			want = append(want, wanted{changed[j].e.row, cols})
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	slices.SortFunc(want, func(a, b wanted) int { return cmp.Compare(a.row, b.row) })
	rows, need := make([]int64, len(want)), make([][]int, len(want))
	for k, w := range want {
		rows[k], need[k] = w.row, w.cols
	}
	fileRows, err := rd.ReadRowsAt(ctx, ix.files[id], rows, need)
	if err != nil {
		return nil, fmt.Errorf("plan batch: %w", err)
	}
	m := make(map[int64]*Row, len(fileRows))
	for j := range fileRows {
		m[fileRows[j].Pos] = &fileRows[j]
	}
	return m, nil
}

// planDeletes moves the batch's changed keys of file id to new rows
// (merge-on-read), taking stored values from stored (readStored's rows of
// that file), into fp: the new rows and the old rows' positions, which the
// file's deletion vector is to hide.
func (ix *KeyIndex) planDeletes(id fileID, changed []changedKey, stored map[int64]*Row, appliedMicros int64, fp *filePlan) error {
	old := ix.files[id]
	fp.positions = make([]int64, 0, len(changed))
	fp.rows = make([]Row, 0, len(changed))
	for _, c := range changed {
		r := c.r
		e := c.e
		st := &StoredRow{Seq: e.seq, Deleted: e.deleted}
		if c.stored {
			fr := stored[e.row]
			if err := ix.checkStoredKey(old, e.row, fr, r.Winner.Key); err != nil {
				return fmt.Errorf("plan batch: %w", err)
			}
			// The index's sequence and flag are the row's (the reader
			// leaves them unset when it reads only some columns).
			st.Values = fr.Values
		}
		row, kind := ix.resolve(r, st, appliedMicros, &fp.counts)
		if kind == RowStale {
			continue
		}
		fp.positions = append(fp.positions, e.row)
		fp.pending = append(fp.pending, pendingEntry{key: r.Winner.Key, seq: row.Seq, deleted: row.Deleted, file: noFile, row: int64(len(fp.rows)), entry: c.entry + 1})
		fp.rows = append(fp.rows, row)
	}
	return nil
}

func (ix *KeyIndex) resolve(r *Reduced, stored *StoredRow, appliedMicros int64, c *Counts) (Row, RowKind) {
	kind, values, unresolved := r.Resolve(stored)
	c.Unresolved += unresolved
	for _, ch := range r.Changes {
		if kind == RowStale || (stored != nil && bytes.Compare(ch.Seq, stored.Seq) <= 0 && (ch != r.Winner || !ch.deletesStored(stored.Seq, stored.Deleted))) {
			c.StaleRecords++
		} else {
			c.AppliedRecords++
		}
	}
	switch kind {
	case RowStale:
		c.Stale++
		return Row{}, kind
	case RowInsert:
		c.Insert++
	case RowUpdate:
		c.Update++
	case RowDelete:
		c.Delete++
	case RowRevive:
		c.Revive++
	}
	return Row{Values: values, Seq: r.Winner.Seq, Deleted: r.Winner.Delete,
		SourceTsMicros: r.Winner.SourceTsMicros, AppliedMicros: appliedMicros}, kind
}

// Apply updates the index after the plan's commit landed.
func (ix *KeyIndex) Apply(p *Plan) error {
	for _, r := range p.replaced {
		delete(ix.byPath, ix.files[r.id].Path)
		ix.files[r.id] = p.Adds[r.add]
		ix.byPath[p.Adds[r.add].Path] = r.id
	}
	for _, id := range p.gone {
		delete(ix.byPath, ix.files[id].Path)
		ix.files[id] = nil
	}
	newID := noFile
	if p.newFile >= 0 {
		newID = ix.addFile(p.Adds[p.newFile])
	}
	for from := 0; from < len(p.pending); from += lookupGroup {
		group := p.pending[from:min(from+lookupGroup, len(p.pending))]
		ix.touchGroup(group)
		for _, e := range group {
			file := e.file
			if file == noFile {
				file = newID
			}
			var err error
			if e.entry > 0 {
				err = ix.set(e.entry-1, e.seq, e.deleted, file, e.row)
			} else {
				err = ix.upsert(e.key, e.seq, e.deleted, file, e.row)
			}
			if err != nil {
				return fmt.Errorf("update key index: %w", err)
			}
		}
	}
	if len(p.gone) > 0 {
		ix.compactFiles()
	}
	return nil
}

// touchGroup reads, for a group of pending entries, the memory their
// updates will touch, stage by stage as findGroup does: a known entry and
// then its arena record, a new key's first slot. The updates that follow
// find them in cache instead of waiting for each miss in turn. Only reads:
// an update may move the arena (a longer sequence, a compaction), so
// nothing read here is kept but a byte that keeps the reads from being
// optimised away.
func (ix *KeyIndex) touchGroup(group []pendingEntry) {
	var offs [lookupGroup]uint64
	var sink uint64
	mask := uint64(len(ix.slots) - 1)
	for j, e := range group {
		if e.entry > 0 {
			offs[j] = ix.entries.at(e.entry-1).off &^ deletedBit
		} else {
			sink += ix.slots[maphash.String(ix.seed, e.key)&mask]
		}
	}
	for j, e := range group {
		if e.entry > 0 && ix.arena.holds(offs[j]) {
			sink += uint64(ix.arena.at(offs[j])[0])
		}
	}
	ix.touched = byte(sink)
}

// PlanTruncate marks every live row older than the truncate's sequence as
// a tombstone at that sequence: a source TRUNCATE is a delete of every row
// it saw. Rows already newer than the truncate (a later insert that was
// applied first) stay, and so do tombstones. Only files holding such rows
// are rewritten (copy-on-write in either mode: a truncate touches most of
// the table, and a rewrite also drops rows deletion vectors hid).
func (ix *KeyIndex) PlanTruncate(ctx context.Context, rf RowFiles, seq []byte, sourceTsMicros, appliedMicros int64) (*Plan, error) {
	p := newPlan()
	touched := map[fileID]bool{}
	for i := range ix.entries.n {
		e := ix.state(i)
		if !e.deleted && bytes.Compare(e.seq, seq) < 0 {
			touched[e.file] = true
		}
	}
	ids := make([]fileID, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		old := ix.files[id]
		rows, err := rf.ReadRows(ctx, old)
		if err != nil {
			return nil, fmt.Errorf("plan truncate: %w", err)
		}
		for i := range rows {
			r := &rows[i]
			moved := old.DeletionVector != nil && r.Pos != int64(i)
			if r.Deleted || bytes.Compare(r.Seq, seq) >= 0 {
				if moved {
					p.pending = append(p.pending, pendingEntry{key: EncodeKey(r.Values, ix.layout.Key), seq: r.Seq, deleted: r.Deleted, file: id, row: int64(i)})
				}
				continue
			}
			r.Deleted, r.Seq, r.SourceTsMicros, r.AppliedMicros = true, seq, sourceTsMicros, appliedMicros
			p.pending = append(p.pending, pendingEntry{key: EncodeKey(r.Values, ix.layout.Key), seq: seq, deleted: true, file: id, row: int64(i)})
			p.Counts.Delete++
		}
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			return nil, fmt.Errorf("plan truncate: rewrite %s: %w", old.Path, err)
		}
		p.replace(id, old, add)
	}
	p.Counts.AppliedRecords = 1
	return p, nil
}

// fillFromOldKeys fills the unavailable columns of the batch's changes
// that moved a row to a new primary key (Change.OldKey) from the old
// key's last version before the move: the old key's newest earlier
// change in the batch that carries the column, else its row in the table
// when that row is not newer than the move (a live row, or the tombstone
// the move's delete left, which keeps the last values). Debezium sends
// an update of the primary key as a delete of the old key and a create of
// the new one, and under default replica identity the create carries a
// TOASTed column the update left alone as unavailable; without this the
// new key has no earlier version to take it from and it would be written
// NULL. Moves are filled in source order, so a chain of moves in one
// batch passes values along. A column no source has stays unavailable
// (unresolved, as before). The keys whose changes were filled get their
// winner's unavailable columns and fills worked out again.
func (ix *KeyIndex) fillFromOldKeys(ctx context.Context, reduced []Reduced, rf RowFiles) error {
	type move struct {
		r *Reduced
		c *Change
	}
	var moves []move
	for i := range reduced {
		if !reduced[i].moved {
			continue // Reduce saw no OldKey among its changes
		}
		for _, c := range reduced[i].Changes {
			if c.OldKey() != "" && !c.Delete && slices.ContainsFunc(c.Values, schema.Value.IsUnavailable) {
				moves = append(moves, move{&reduced[i], c})
			}
		}
	}
	if len(moves) == 0 {
		return nil
	}
	slices.SortStableFunc(moves, func(a, b move) int {
		if a.c.newer(b.c) {
			return 1
		}
		if b.c.newer(a.c) {
			return -1
		}
		return 0
	})
	byKey := make(map[string]*Reduced, len(reduced))
	for i := range reduced {
		byKey[reduced[i].Winner.Key] = &reduced[i]
	}
	for _, m := range moves {
		var cols []int
		for col, v := range m.c.Values {
			if v.IsUnavailable() {
				cols = append(cols, col)
			}
		}
		if old := byKey[m.c.OldKey()]; old != nil {
			for k := len(old.Changes) - 1; k >= 0 && len(cols) > 0; k-- {
				if oc := old.Changes[k]; !oc.Delete && bytes.Compare(oc.Seq, m.c.Seq) < 0 {
					cols = takeAvailable(m.c.Values, oc.Values, cols)
				}
			}
		}
		if len(cols) > 0 {
			stored, err := ix.storedOf(ctx, rf, m.c.OldKey(), m.c.Seq, cols)
			if err != nil {
				return fmt.Errorf("plan batch: primary-key change from %s to %s: %w", ix.renderKey(m.c.OldKey()), ix.renderKey(m.c.Key), err)
			}
			if stored != nil {
				takeAvailable(m.c.Values, stored, cols)
			}
		}
		m.c.unavail = noteUnavailable(m.c.Values)
		m.r.reduceAgain()
	}
	return nil
}

// takeAvailable copies into dst each column of cols that src holds (not
// unavailable) and returns the columns still wanted.
func takeAvailable(dst, src []schema.Value, cols []int) []int {
	rest := cols[:0]
	for _, col := range cols {
		if col < len(src) && !src[col].IsUnavailable() {
			dst[col] = src[col]
		} else {
			rest = append(rest, col)
		}
	}
	return rest
}

// storedOf returns the values, at least of cols, of key's row in the
// table when it is not newer than seq; nil when the table has no such
// row.
func (ix *KeyIndex) storedOf(ctx context.Context, rf RowFiles, key string, seq []byte, cols []int) ([]schema.Value, error) {
	at, ok := ix.find(key)
	if !ok {
		return nil, nil
	}
	e := ix.state(at)
	if bytes.Compare(e.seq, seq) > 0 || e.file < 0 || int(e.file) >= len(ix.files) || ix.files[e.file] == nil {
		return nil, nil
	}
	file := ix.files[e.file]
	var rows []Row
	var err error
	if rd, ok := rf.(RowDeleter); ok {
		rows, err = rd.ReadRowsAt(ctx, file, []int64{e.row}, [][]int{cols})
	} else {
		rows, err = rf.ReadRows(ctx, file)
	}
	if err != nil {
		return nil, err
	}
	var fr *Row
	for i := range rows {
		if rows[i].Pos == e.row {
			fr = &rows[i]
		}
	}
	if err := ix.checkStoredKey(file, e.row, fr, key); err != nil {
		return nil, err
	}
	return fr.Values, nil
}

// checkStoredKey checks that fr, the row read at row of file (nil: none
// read), holds key, as the index says: anything else means the table
// changed under the index or is corrupt.
func (ix *KeyIndex) checkStoredKey(file *delta.Add, row int64, fr *Row, key string) error {
	if fr == nil || EncodeKey(fr.Values, ix.layout.Key) != key {
		return fmt.Errorf("file %s lacks key %s at row %d where the index places it", file.Path, ix.renderKey(key), row)
	}
	return nil
}
