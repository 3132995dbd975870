package apply

import (
	"bytes"
	"context"
	"fmt"
	"sort"

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
}

// RowFiles reads and writes a table's data files as rows. The apply engine
// only ever sees rows; the implementation owns the columnar format.
type RowFiles interface {
	// ReadRows returns every row of a live data file, in file order.
	ReadRows(ctx context.Context, add *delta.Add) ([]Row, error)
	// WriteRows writes rows as one new data file and returns its add action.
	WriteRows(ctx context.Context, rows []Row) (*delta.Add, error)
}

// fileID numbers live data files inside a key index; a rewrite keeps the
// id and swaps the add, so no key entry moves when its file is rewritten.
type fileID int32

// indexEntry is where a key's current row lives and what it holds.
type indexEntry struct {
	file    fileID
	seq     []byte
	deleted bool
}

// KeyIndex maps every key of a table to its file and sequence, so a batch
// finds the rows it changes without scanning the table and decides stale
// changes without reading any file.
type KeyIndex struct {
	layout *Layout
	keys   map[string]indexEntry
	files  []*delta.Add // by fileID; nil once a file is gone
	byPath map[string]fileID
}

// NewKeyIndex returns an empty index for a layout.
func NewKeyIndex(l *Layout) *KeyIndex {
	return &KeyIndex{layout: l, keys: map[string]indexEntry{}, byPath: map[string]fileID{}}
}

// BuildKeyIndex reads every live file of a snapshot once. A key found in
// two files means the table was written by someone else or is corrupt:
// applying on top would double rows, so it is an error.
func BuildKeyIndex(ctx context.Context, l *Layout, snap *delta.Snapshot, rf RowFiles) (*KeyIndex, error) {
	ix := NewKeyIndex(l)
	for _, add := range snap.Files() {
		rows, err := rf.ReadRows(ctx, add)
		if err != nil {
			return nil, fmt.Errorf("build key index: %w", err)
		}
		id := ix.addFile(add)
		for _, r := range rows {
			k := EncodeKey(r.Values, l.Key)
			if _, dup := ix.keys[k]; dup {
				return nil, fmt.Errorf("build key index: key %s is in more than one row (file %s)", ix.render(r.Values), add.Path)
			}
			ix.keys[k] = indexEntry{file: id, seq: r.Seq, deleted: r.Deleted}
		}
	}
	return ix, nil
}

func (ix *KeyIndex) addFile(a *delta.Add) fileID {
	id := fileID(len(ix.files))
	ix.files = append(ix.files, a)
	ix.byPath[a.Path] = id
	return id
}

// Len returns the number of keys, tombstones included.
func (ix *KeyIndex) Len() int { return len(ix.keys) }

func (ix *KeyIndex) render(values []schema.Value) string {
	var b bytes.Buffer
	for i, k := range ix.layout.Key {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%v", ix.layout.Source[k].Name, values[k].GoString())
	}
	return b.String()
}

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

// Plan is the effect of one batch on a table: files to remove, files to
// add and the index changes to make once the commit lands.
type Plan struct {
	Removes []*delta.Add
	Adds    []*delta.Add
	Counts  Counts

	// rewritten[i] replaces the file of id rewrittenIDs[i] once committed.
	rewrittenIDs []fileID
	newFile      int // index in Adds of the file of new keys, or -1
	entries      map[string]indexEntry
	newKeys      map[string]bool
}

// PlanBatch resolves a reduced batch against the table and writes the data
// files the commit will add: one rewrite per file holding a changed key
// (copy-on-write: every other row of it is copied as it was) and one file
// for keys the table does not hold yet. Keys whose change is stale touch
// no file.
func (ix *KeyIndex) PlanBatch(ctx context.Context, reduced []Reduced, rf RowFiles, appliedMicros int64) (*Plan, error) {
	p := &Plan{newFile: -1, entries: map[string]indexEntry{}, newKeys: map[string]bool{}}
	byFile := map[fileID][]*Reduced{}
	var fresh []*Reduced
	for i := range reduced {
		r := &reduced[i]
		e, ok := ix.keys[r.Winner.Key]
		switch {
		case ok && bytes.Compare(r.Winner.Seq, e.seq) <= 0:
			p.Counts.Stale++
			p.Counts.StaleRecords += len(r.Changes)
		case ok:
			byFile[e.file] = append(byFile[e.file], r)
		default:
			fresh = append(fresh, r)
		}
	}
	ids := make([]fileID, 0, len(byFile))
	for id := range byFile {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		old := ix.files[id]
		rows, err := rf.ReadRows(ctx, old)
		if err != nil {
			return nil, fmt.Errorf("plan batch: %w", err)
		}
		changes := map[string]*Reduced{}
		for _, r := range byFile[id] {
			changes[r.Winner.Key] = r
		}
		for i := range rows {
			k := EncodeKey(rows[i].Values, ix.layout.Key)
			r, ok := changes[k]
			if !ok {
				continue
			}
			delete(changes, k)
			stored := &StoredRow{Seq: rows[i].Seq, Deleted: rows[i].Deleted, Values: rows[i].Values}
			row, kind := ix.resolve(r, stored, appliedMicros, &p.Counts)
			if kind == RowStale { // the index was behind the file: trust the file
				continue
			}
			rows[i] = row
			p.entries[k] = indexEntry{file: id, seq: row.Seq, deleted: row.Deleted}
		}
		if len(changes) > 0 {
			return nil, fmt.Errorf("plan batch: file %s lacks %d key(s) the index places there", old.Path, len(changes))
		}
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			return nil, fmt.Errorf("plan batch: rewrite %s: %w", old.Path, err)
		}
		p.Removes = append(p.Removes, old)
		p.Adds = append(p.Adds, add)
		p.rewrittenIDs = append(p.rewrittenIDs, id)
	}
	if len(fresh) > 0 {
		rows := make([]Row, 0, len(fresh))
		for _, r := range fresh {
			row, _ := ix.resolve(r, nil, appliedMicros, &p.Counts)
			rows = append(rows, row)
			p.entries[r.Winner.Key] = indexEntry{seq: row.Seq, deleted: row.Deleted}
			p.newKeys[r.Winner.Key] = true
		}
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			return nil, fmt.Errorf("plan batch: write new rows: %w", err)
		}
		p.newFile = len(p.Adds)
		p.Adds = append(p.Adds, add)
	}
	return p, nil
}

func (ix *KeyIndex) resolve(r *Reduced, stored *StoredRow, appliedMicros int64, c *Counts) (Row, RowKind) {
	kind, values, unresolved := r.Resolve(stored)
	c.Unresolved += unresolved
	for _, ch := range r.Changes {
		if kind == RowStale || (stored != nil && bytes.Compare(ch.Seq, stored.Seq) <= 0) {
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
func (ix *KeyIndex) Apply(p *Plan) {
	for i, id := range p.rewrittenIDs {
		delete(ix.byPath, ix.files[id].Path)
		ix.files[id] = p.Adds[i]
		ix.byPath[p.Adds[i].Path] = id
	}
	newID := fileID(-1)
	if p.newFile >= 0 {
		newID = ix.addFile(p.Adds[p.newFile])
	}
	for k, e := range p.entries {
		if p.newKeys[k] {
			e.file = newID
		}
		ix.keys[k] = e
	}
}

// PlanTruncate marks every live row older than the truncate's sequence as
// a tombstone at that sequence: a source TRUNCATE is a delete of every row
// it saw. Rows already newer than the truncate (a later insert that was
// applied first) stay, and so do tombstones. Only files holding such rows
// are rewritten.
func (ix *KeyIndex) PlanTruncate(ctx context.Context, rf RowFiles, seq []byte, sourceTsMicros, appliedMicros int64) (*Plan, error) {
	p := &Plan{newFile: -1, entries: map[string]indexEntry{}, newKeys: map[string]bool{}}
	touched := map[fileID]bool{}
	for _, e := range ix.keys {
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
			if r.Deleted || bytes.Compare(r.Seq, seq) >= 0 {
				continue
			}
			r.Deleted, r.Seq, r.SourceTsMicros, r.AppliedMicros = true, seq, sourceTsMicros, appliedMicros
			p.entries[EncodeKey(r.Values, ix.layout.Key)] = indexEntry{file: id, seq: seq, deleted: true}
			p.Counts.Delete++
		}
		add, err := rf.WriteRows(ctx, rows)
		if err != nil {
			return nil, fmt.Errorf("plan truncate: rewrite %s: %w", old.Path, err)
		}
		p.Removes = append(p.Removes, old)
		p.Adds = append(p.Adds, add)
		p.rewrittenIDs = append(p.rewrittenIDs, id)
	}
	p.Counts.AppliedRecords = 1
	return p, nil
}
