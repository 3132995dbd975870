package apply

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// ParquetRowFiles is RowFiles over the table's real Parquet data files.
// It is also a KeyReader (the key index reads only key, sequence and
// deleted columns) and a RowDeleter (merge-on-read deletion vectors).
type ParquetRowFiles struct {
	store   storage.Storage
	layout  *Layout
	file    datafile.Layout
	arrow   *arrow.Schema
	options []datafile.WriteOption
	points  *datafile.FileCache // files kept open for stored-row reads (nil: none)
	vectors *vectorCache        // decoded deletion vectors
}

// scratchPool keeps the column buffers of written files for the next file
// of any table (rowsToArrow's arrowScratch; concurrent writes take one
// each). A file's buffers are kept only up to scratchKeepBytes: a
// merge-on-read batch's file (about 10 MiB of buffers at 25k rows of the
// bench's 10 columns) is kept, a large file's (a copy-on-write rewrite, a
// load, a truncate) goes to the collector. scratchPoolBytes bounds what
// all tables keep between their files, so a pipeline of many tables does
// not hold one file's buffers per table.
var scratchPool struct {
	sync.Mutex
	free []*arrowScratch
	held int // bytes in free
}

const (
	scratchKeepBytes = 32 << 20
	scratchPoolBytes = 64 << 20
)

func takeScratch() *arrowScratch {
	scratchPool.Lock()
	defer scratchPool.Unlock()
	n := len(scratchPool.free)
	if n == 0 {
		return new(arrowScratch)
	}
	s := scratchPool.free[n-1]
	scratchPool.free[n-1] = nil
	scratchPool.free = scratchPool.free[:n-1]
	scratchPool.held -= s.held()
	return s
}

func putScratch(s *arrowScratch) {
	b := s.held()
	if b > scratchKeepBytes {
		return
	}
	scratchPool.Lock()
	defer scratchPool.Unlock()
	if scratchPool.held+b <= scratchPoolBytes {
		scratchPool.free = append(scratchPool.free, s)
		scratchPool.held += b
	}
}

// forgetFiles closes the cached open files among paths (files that left
// the table).
func (p *ParquetRowFiles) forgetFiles(paths []string) { p.points.Forget(paths...) }

// retainFiles closes the cached open files for which keep is false.
func (p *ParquetRowFiles) retainFiles(keep func(path string) bool) { p.points.Retain(keep) }

// fileForgetter is a RowFiles that keeps data files open between batches
// (ParquetRowFiles): the applier tells it which files left the table.
type fileForgetter interface {
	forgetFiles(paths []string)
	retainFiles(keep func(path string) bool)
}

// pointFilesOpen bounds the data files a table keeps open for stored-row
// reads (datafile.FileCache): a merge-on-read table's batches read a few
// rows of each of its live files, which folding keeps to about a hundred.
const pointFilesOpen = 128

// MergeOnReadRowGroupRows is the Parquet row group size of the data files
// a merge-on-read table's engine writes. Merge-on-read reads stored rows
// only for changes that need their values (an unavailable column, a
// delete), page by page where it can and otherwise by decoding the row
// groups holding them (datafile.ReadRowGroupsOf), whose cost a whole-file
// group would make grow with the table. 8192 rows keeps groups large
// enough for column compression and for readers that plan by row group.
const MergeOnReadRowGroupRows = 8192

// MergeOnReadPageBytes is the data page size of the files a merge-on-read
// table's engine writes. Stored rows are read page by page through the
// offset index (datafile.ReadColumnsAt), so a stored value costs about one
// page: decompressing it and walking to the row. Smaller pages read
// faster but compress worse, the wide text columns most (1M-key bench,
// events/s and live table size: 4 KiB 119,744 and 373.5 MiB; 16 KiB
// 127,474 and 217.6 MiB; 32 KiB 123,155 and 187.9 MiB; 64 KiB 121,996 and
// 172.8 MiB; the runs differ by about as much as their noise): 32 KiB
// bounds a stored value's page for a table about a tenth larger than with
// 64 KiB pages. With LZ4_RAW (session 8, one instrumented run each) the
// stored reads of a 1M-row batch took 77.5, 72.2 and 89.1 ms with 16, 32
// and 64 KiB pages, for tables of 207.4, 177.8 and 162.7 MiB, and the
// new file's write 69.4, 54.2 and 57.2 ms. parquet-go's default is 256 KiB.
// Those figures were taken on text that compressed 10x; on the bench's
// word text since session 36 (1.8x), 16 KiB against 32 KiB (alternating,
// n=5): 210.9k against 204.8k events/s (median, p=0.22), 17.3 against
// 18.0 s of CPU, a live table of 394 against 368 MiB; no gain shown.
// Session 37, 8 and 4 KiB against 32 KiB (n=3): 126.1k and 129.1k
// against 114.8k events/s (p=1.0 and 0.4), tables of 432 and 481
// against 369 MiB; no gain shown above the host's noise either.
const MergeOnReadPageBytes = 32 << 10

// MergeOnReadTextPageRows bounds the rows of a text (byte array) page in
// a merge-on-read table's data files, besides MergeOnReadPageBytes. A
// stored value is found by walking its page's PLAIN lengths from the
// page's start, after decompressing the page: a 32 KiB page of short
// strings holds thousands, and in a large table a batch's stored rows
// fall about one to a page, so each walked half a page. Measured on the
// scale benchmark's files (BenchmarkReadRowsAt, 100k rows, the files kept
// open as the engine keeps them, n=6): one stored row in 2,000, every
// column, 17.1 -> 6.7 µs a row with 256 rows a page (-61%), 8.9 µs with
// 512 (-48%); one row in 100 unchanged (the walk is shared there); the
// file 3.2% larger with 256, 1.3% with 512. Wide text reaches the page's
// bytes first and is not affected.
const MergeOnReadTextPageRows = 256

// MergeOnReadCodec is the compression of a merge-on-read table's data
// files. Every stored value read decompresses its page, and at 1M keys a
// batch decompresses most of the table's text pages (a TOAST placeholder
// or a delete per ~100 rows, 32 KiB pages): Snappy decoded several times
// faster than zstd, for files about half again as large (session 5), and
// LZ4_RAW three times faster than Snappy on the bench's text pages (20
// against 7 GB/s) while compressing them better (10.2x against 7.2x for
// the doc column, 1.86x against 1.81x for short text; session 8). On the
// bench's word text since session 36, 32 KiB pages of docs: LZ4_RAW 1.81x
// decoding at 2.7 GB/s, Snappy 1.98x at 1.3 GB/s (one run each). The
// bound of what any codec could save (session 37, the 1M-key bench,
// alternating, n=3): uncompressed files ran at 139.0k against 118.3k
// events/s (median), 0.374 against 0.301 of decode-only, for a live
// table of 625 against 369 MiB; not worth a table 69% larger. Every
// reader that reads deletion vectors reads LZ4_RAW (delta-rs, Spark 3.5+,
// Trino), and the direct page reader takes it (datafile's pagedirect.go).
const MergeOnReadCodec = datafile.Lz4Raw

// MergeOnReadFileOptions are the write options of a merge-on-read table's
// data files of layout l (row groups and pages sized for stored-row reads).
// Its fixed-width source columns are stored uncompressed
// (datafile.RawFixedWidth): a stored-row read takes such a value from the
// page without decompressing it, and every stored read reads the key (to
// check the index's placement) and a delete every source column. In the
// 1M-key bench those columns compressed 1.0-1.9x with Snappy, and raw
// they cost 4.6% more table (196.7 MiB against 188.0); a stored row read
// whole took 36% less time, a TOASTed value with its key 32% less
// (BenchmarkReadRowsAt), and a 10k-change batch with 20% deletes and 20%
// TOAST placeholders into 1M rows 25% less (BenchmarkMergeScale). The
// engine's columns are never read that way (the key index holds the
// sequence and the deleted flag) and keep the codec: the applied-at
// stamp compresses 18x.
func MergeOnReadFileOptions(l *Layout) []datafile.WriteOption {
	names := make([]string, len(l.Source))
	for i, f := range l.Source {
		names[i] = f.Name
	}
	return []datafile.WriteOption{datafile.RowGroupRows(MergeOnReadRowGroupRows), datafile.PageBytes(MergeOnReadPageBytes), datafile.Compression(MergeOnReadCodec), datafile.PlainValues(), datafile.RawFixedWidth(names...), datafile.TextPageRows(MergeOnReadTextPageRows)}
}

// inlineDVLimit is the largest serialized deletion vector kept inline in
// the log (descriptor storage type "i"); larger ones go to their own file
// ("u"). Inline vectors cost no file write (no fsync) per touched file, but
// every later checkpoint carries them, so they are kept small.
var inlineDVLimit = 1024

// NewParquetRowFiles reads and writes data files of a table of layout l.
func NewParquetRowFiles(store storage.Storage, l *Layout, opts ...datafile.WriteOption) (*ParquetRowFiles, error) {
	st := l.Schema()
	sch, err := datafile.ArrowSchema(st)
	if err != nil {
		return nil, fmt.Errorf("open data files of %s: %w", store.Location(), err)
	}
	return &ParquetRowFiles{store: store, layout: l, arrow: sch, options: opts, vectors: newVectorCache(),
		file: datafile.Layout{Schema: st, PartitionColumns: []string{}, Mapping: datafile.MappingNone, NumIndexedCols: 32}}, nil
}

// readPhysical reads every row of add's data file, deleted or not, and the
// sorted physical indexes its deletion vector hides (nil without one).
func (p *ParquetRowFiles) readPhysical(ctx context.Context, add *delta.Add, opts ...datafile.ReadOption) (arrow.RecordBatch, []uint64, error) {
	plain := *add
	plain.DeletionVector = nil
	rec, err := datafile.Read(ctx, p.store, p.file, &plain, opts...)
	if err != nil {
		return nil, nil, err
	}
	if add.DeletionVector == nil {
		return rec, nil, nil
	}
	bm, err := p.vectors.get(ctx, p.store, add.DeletionVector)
	if err != nil {
		rec.Release()
		return nil, nil, fmt.Errorf("read data file %s: %w", add.Path, err)
	}
	if !bm.IsEmpty() && bm.Maximum() >= uint64(rec.NumRows()) {
		rec.Release()
		return nil, nil, fmt.Errorf("read data file %s: deletion vector deletes row %d of %d", add.Path, bm.Maximum(), rec.NumRows())
	}
	return rec, bm.ToArray(), nil
}

// ReadRows implements RowFiles.
func (p *ParquetRowFiles) ReadRows(ctx context.Context, add *delta.Add) ([]Row, error) {
	rec, deleted, err := p.readPhysical(ctx, add)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	rows, err := arrowToRows(rec, len(p.layout.Source))
	if err != nil {
		return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
	}
	if len(deleted) == 0 { // arrowToRows set each row's Pos
		return rows, nil
	}
	kept := rows[:0]
	d := 0
	for i := range rows {
		if d < len(deleted) && deleted[d] == uint64(i) {
			d++
			continue
		}
		kept = append(kept, rows[i])
	}
	return kept, nil
}

// ReadRowsAt implements RowDeleter: the wanted rows (ascending physical
// indexes, none hidden by the file's vector) are read through the page
// index (readRowsAtPages), only the columns each needs, or, for a layout
// that read does not take, whole, by decoding the row groups holding
// them (readRowsAtGroups).
func (p *ParquetRowFiles) ReadRowsAt(ctx context.Context, add *delta.Add, rows []int64, need [][]int) ([]Row, error) {
	if add.DeletionVector != nil {
		bm, err := p.vectors.get(ctx, p.store, add.DeletionVector)
		if err != nil {
			return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
		}
		for _, r := range rows {
			if bm.Contains(uint64(r)) {
				return nil, fmt.Errorf("read rows of %s: row %d is deleted by the file's deletion vector", add.Path, r)
			}
		}
	}
	if need != nil && len(need) != len(rows) {
		return nil, fmt.Errorf("read rows of %s: columns for %d rows, %d rows asked", add.Path, len(need), len(rows))
	}
	out, err := p.readRowsAtPages(ctx, add, rows, need)
	if errors.Is(err, datafile.ErrNoPointRead) {
		return p.readRowsAtGroups(ctx, add, rows)
	}
	return out, err
}

// readRowsAtPages reads the rows through the Parquet page index
// (datafile.ReadColumnsAt): only the pages holding the values wanted are
// read, and no Arrow arrays are built. A row with need[i] set gets its key
// columns and those; its other values stay unavailable and its engine
// columns unread.
func (p *ParquetRowFiles) readRowsAtPages(ctx context.Context, add *delta.Add, rows []int64, need [][]int) ([]Row, error) {
	nSource := len(p.layout.Source)
	nCols := len(p.file.Schema.Fields)
	if nCols != nSource+4 {
		return nil, fmt.Errorf("read rows of %s: %d columns, want %d source and 4 engine columns", add.Path, nCols, nSource)
	}
	// which[c] lists the indexes (into rows) of the rows column c is read
	// for; nil means every row.
	which := make([][]int, nCols)
	partial := false
	for _, cols := range need {
		partial = partial || cols != nil
	}
	if partial {
		isKey := make([]bool, nSource)
		for _, k := range p.layout.Key {
			isKey[k] = true
		}
		for c := range nCols {
			if c < nSource && isKey[c] {
				continue
			}
			which[c] = []int{}
		}
		for i, cols := range need {
			if cols == nil {
				for c := range nCols {
					if which[c] != nil {
						which[c] = append(which[c], i)
					}
				}
				continue
			}
			for _, c := range cols {
				if c >= 0 && c < nSource && !isKey[c] {
					which[c] = append(which[c], i)
				}
			}
		}
	}
	perColumn := make([][]int64, nCols)
	for c := range perColumn {
		if which[c] == nil {
			perColumn[c] = rows
			continue
		}
		perColumn[c] = make([]int64, len(which[c]))
		for k, i := range which[c] {
			perColumn[c][k] = rows[i]
		}
	}
	cols, err := p.points.ReadColumnsAt(ctx, p.store, p.file, add, perColumn)
	if err != nil {
		return nil, err
	}
	out := make([]Row, len(rows))
	vals := make([]schema.Value, len(rows)*nSource) // one allocation for all values
	for i := range out {
		out[i].Pos = rows[i]
		out[i].Values = vals[i*nSource : (i+1)*nSource : (i+1)*nSource]
		if partial {
			for c := range out[i].Values {
				out[i].Values[c] = schema.Unavailable
			}
		}
	}
	for c := range nSource {
		for k, v := range cols[c] {
			i := k
			if which[c] != nil {
				i = which[c][k]
			}
			out[i].Values[c] = v
		}
	}
	engine := func(k int) (seq, del, src, app schema.Value) {
		return cols[nSource][k], cols[nSource+1][k], cols[nSource+2][k], cols[nSource+3][k]
	}
	for k := range cols[nSource] {
		i := k
		if which[nSource] != nil {
			i = which[nSource][k]
		}
		r := &out[i]
		seq, del, src, app := engine(k)
		if seq.Kind != schema.KindString || del.Kind != schema.KindBool || app.Kind != schema.KindInt || (src.Kind != schema.KindInt && !src.IsNull()) {
			return nil, fmt.Errorf("read rows of %s: row %d: engine columns hold %s, %s, %s, %s", add.Path, rows[i], seq.Kind, del.Kind, src.Kind, app.Kind)
		}
		if r.Seq, err = parseSeqText(seq.S); err != nil {
			return nil, fmt.Errorf("read rows of %s: row %d: %s: %w", add.Path, rows[i], ColSeq, err)
		}
		r.Deleted = del.I != 0
		if !src.IsNull() {
			r.SourceTsMicros = src.I
		}
		r.AppliedMicros = app.I
	}
	return out, nil
}

// readRowsAtGroups reads the rows by decoding the row groups that hold
// them into Arrow (datafile.ReadRowGroupsOf): every file and layout this
// module reads, at the cost of whole row groups.
func (p *ParquetRowFiles) readRowsAtGroups(ctx context.Context, add *delta.Add, rows []int64) ([]Row, error) {
	rec, local, err := datafile.ReadRowGroupsOf(ctx, p.store, p.file, add, rows)
	if err != nil {
		return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
	}
	defer rec.Release()
	at := make([]int64, len(local))
	for i, l := range local {
		at[i] = int64(l)
	}
	out, err := arrowRowsAt(rec, len(p.layout.Source), at)
	if err != nil {
		return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
	}
	for i := range out {
		out[i].Pos = rows[i]
	}
	return out, nil
}

// ReadKeys implements KeyReader: only the key columns, the sequence and
// the deleted flag are decoded. The key string passed to fn is valid only
// during the call.
func (p *ParquetRowFiles) ReadKeys(ctx context.Context, add *delta.Add, fn func(key string, seq []byte, deleted bool, pos int64) error) error {
	names := append(p.layout.KeyNames(), ColSeq, ColDeleted)
	rec, deleted, err := p.readPhysical(ctx, add, datafile.Columns(names...))
	if err != nil {
		return err
	}
	defer rec.Release()
	index := map[string]int{}
	for i, f := range rec.Schema().Fields() {
		index[f.Name] = i
	}
	keyCols := make([]arrow.Array, len(p.layout.Key))
	for i, name := range p.layout.KeyNames() {
		keyCols[i] = rec.Column(index[name])
	}
	seqCol, ok1 := rec.Column(index[ColSeq]).(*array.String)
	delCol, ok2 := rec.Column(index[ColDeleted]).(*array.Boolean)
	if !ok1 || !ok2 {
		return fmt.Errorf("read keys of %s: engine columns have unexpected types", add.Path)
	}
	var key, seq []byte
	d := 0
	for r := 0; r < int(rec.NumRows()); r++ {
		if d < len(deleted) && deleted[d] == uint64(r) {
			d++
			continue
		}
		key = key[:0]
		for i, col := range keyCols {
			v, err := valueAt(col, r)
			if err != nil {
				return fmt.Errorf("read keys of %s: column %s row %d: %w", add.Path, p.layout.KeyNames()[i], r, err)
			}
			key = appendKeyValue(key, v)
		}
		if seqCol.IsNull(r) {
			return fmt.Errorf("read keys of %s: row %d has no %s", add.Path, r, ColSeq)
		}
		s := seqCol.Value(r)
		seq, err = hex.AppendDecode(seq[:0], unsafe.Slice(unsafe.StringData(s), len(s)))
		if err != nil {
			return fmt.Errorf("read keys of %s: row %d: %s %q: %w", add.Path, r, ColSeq, s, err)
		}
		if err := fn(unsafe.String(unsafe.SliceData(key), len(key)), seq, delCol.Value(r), int64(r)); err != nil {
			return err
		}
	}
	return nil
}

// DeleteRows implements RowDeleter: each file's deletion vector becomes
// the union of the one it has and its rows. Small vectors stay inline in
// the log; the larger ones of the call are written together into one
// deletion vector file (dv.WriteMany), one write and fsync per batch
// instead of one per touched file. The statistics are kept (they still
// bound the live rows) and marked wide (tightBounds false), as the
// protocol asks of a file whose vector hides rows the statistics counted.
func (p *ParquetRowFiles) DeleteRows(ctx context.Context, dels []Deletion) ([]*delta.Add, error) {
	out := make([]*delta.Add, len(dels))
	var big []dv.Vector
	var bigAt []int
	bms := make([]*roaring64.Bitmap, len(dels))
	for i, del := range dels {
		a := del.File
		bm := roaring64.New()
		if a.DeletionVector != nil {
			old, err := p.vectors.take(ctx, p.store, a.DeletionVector)
			if err != nil {
				return nil, fmt.Errorf("deletion vector of %s: %w", a.Path, err)
			}
			bm = old
		}
		for _, r := range del.Rows {
			if r < 0 {
				return nil, fmt.Errorf("deletion vector of %s: negative row index %d", a.Path, r)
			}
			bm.Add(uint64(r))
		}
		if n := numRecords(a); n > 0 {
			if bm.Maximum() >= uint64(n) {
				return nil, fmt.Errorf("deletion vector of %s: row %d is past the file's %d rows", a.Path, bm.Maximum(), n)
			}
			if bm.GetCardinality() == uint64(n) {
				continue // no row stays live: out[i] nil, the file is removed
			}
		}
		v, err := dv.Encode(bm)
		if err != nil {
			return nil, fmt.Errorf("deletion vector of %s: %w", a.Path, err)
		}
		bms[i] = bm
		if v.Size() > inlineDVLimit {
			big, bigAt = append(big, v), append(bigAt, i)
			continue
		}
		out[i] = withVector(a, v.Inline())
	}
	ds, err := dv.WriteMany(ctx, p.store, big, "")
	if err != nil {
		return nil, err
	}
	for k, i := range bigAt {
		out[i] = withVector(dels[i].File, ds[k])
	}
	// The next batch touching these files reads the new vectors.
	for i, a := range out {
		if a != nil {
			p.vectors.put(a.DeletionVector, bms[i])
		}
	}
	return out, nil
}

func withVector(a *delta.Add, d *delta.DeletionVector) *delta.Add {
	out := *a
	out.DeletionVector = d
	out.DataChange = true
	out.Stats = wideStats(a.Stats)
	return &out
}

// wideStats returns stats JSON with tightBounds set to false. A file that
// already has a vector already says so, and every batch gives each file
// it touches a new vector: its stats are returned as they are. Otherwise
// only the member is edited in place; the rest of the JSON (nested
// objects that may hold a column named tightBounds, key order, spacing)
// is left alone. Stats that are not a JSON object are returned unchanged,
// as before. (Unmarshalling and re-encoding the whole stats was more than
// half of a batch's vector work: about 100 files per 10k-change batch on
// a 10M-row table.)
func wideStats(stats string) string {
	if stats == "" {
		return ""
	}
	start, end, found, ok := topLevelMember(stats, "tightBounds")
	switch {
	case !ok:
		return stats
	case start < 0:
		// The member twice, or a key written with escapes (which may
		// spell it): leave it to a decoder's reading of the object.
		return wideStatsDecoded(stats)
	case found && stats[start:end] == "false":
		return stats
	case found:
		return stats[:start] + "false" + stats[end:]
	}
	// Absent: add it as the object's first member.
	open := strings.IndexByte(stats, '{') + 1
	rest := strings.TrimLeft(stats[open:], jsonSpace)
	if strings.HasPrefix(rest, "}") {
		return stats[:open] + `"tightBounds":false` + stats[open:]
	}
	return stats[:open] + `"tightBounds":false,` + stats[open:]
}

// wideStatsDecoded is wideStats through a JSON round trip (member order
// and spacing are not kept).
func wideStatsDecoded(stats string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stats), &m); err != nil {
		return stats
	}
	m["tightBounds"] = json.RawMessage("false")
	out, err := json.Marshal(m)
	if err != nil {
		return stats
	}
	return string(out)
}

const jsonSpace = " \t\r\n"

// topLevelMember finds member key of the JSON object doc: [start, end) is
// its value's text. ok is false when doc is not one well-formed object (as
// far as this scan checks: strings, nesting and the member layout). start
// is -1 when the text alone cannot say which member a reader takes: key
// appears twice, or a key has escapes.
func topLevelMember(doc, key string) (start, end int, found, ok bool) {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return 0, 0, false, false
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return 0, 0, false, skipSpace(doc, i+1) == len(doc)
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return 0, 0, false, false
		}
		kEnd, good := skipString(doc, i)
		if !good {
			return 0, 0, false, false
		}
		name := doc[i+1 : kEnd-1]
		escaped := strings.IndexByte(name, '\\') >= 0
		i = skipSpace(doc, kEnd)
		if i >= len(doc) || doc[i] != ':' {
			return 0, 0, false, false
		}
		vStart := skipSpace(doc, i+1)
		vEnd, good := skipValue(doc, vStart)
		if !good {
			return 0, 0, false, false
		}
		switch {
		case escaped || (name == key && found):
			start, end, found = -1, -1, true
		case name == key && start >= 0:
			start, end, found = vStart, vEnd, true
		}
		i = skipSpace(doc, vEnd)
		switch {
		case i < len(doc) && doc[i] == ',':
			i = skipSpace(doc, i+1)
		case i < len(doc) && doc[i] == '}':
			return start, end, found, skipSpace(doc, i+1) == len(doc)
		default:
			return 0, 0, false, false
		}
	}
}

func skipSpace(doc string, i int) int {
	for i < len(doc) && strings.IndexByte(jsonSpace, doc[i]) >= 0 {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at doc[i]
// (a quote).
func skipString(doc string, i int) (int, bool) {
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index just past the value starting at doc[i]:
// a string, an object or array (nesting and strings followed), or a
// literal or number (up to the next delimiter).
func skipValue(doc string, i int) (int, bool) {
	if i >= len(doc) {
		return 0, false
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); j++ {
			switch doc[j] {
			case '"':
				e, ok := skipString(doc, j)
				if !ok {
					return 0, false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(doc) && !strings.ContainsRune(",}] \t\r\n", rune(doc[j])) {
		j++
	}
	return j, j > i
}

// WriteRows implements RowFiles.
func (p *ParquetRowFiles) WriteRows(ctx context.Context, rows []Row) (*delta.Add, error) {
	scratch := takeScratch()
	// Nothing reads the record's buffers once Write returns: they go to
	// the next file (after rec.Release, which runs first).
	defer putScratch(scratch)
	rec, err := rowsToArrow(p.arrow, len(p.layout.Source), rows, scratch)
	if err != nil {
		return nil, fmt.Errorf("write rows to %s: %w", p.store.Location(), err)
	}
	defer rec.Release()
	return datafile.Write(ctx, p.store, p.file, rec, map[string]*string{}, p.options...)
}
