package delta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// readCheckpointActions reads a checkpoint's actions: a single classic
// file, all parts of a multi-part one, or a V2 top-level file (json or
// parquet) plus its sidecars (_delta_log/_sidecars/...). Sidecar actions
// are replaced by the actions of the files they name; the
// checkpointMetadata action of a V2 checkpoint is returned as is. paths
// are storage paths of the checkpoint's files, all of version. With
// skipRemoves the remove actions are counted (removes) instead of
// returned: a table's load leaves a checkpoint's removes in it
// (Snapshot.spill), and at a long delta.deletedFileRetentionDuration they
// are most of its rows; decoded, a week of a busy merge-on-read table's
// would not fit in memory.
func readCheckpointActions(ctx context.Context, store storage.Storage, version int64, paths []string, skipRemoves bool) (out []Action, removes int, err error) {
	if err := ckptCheckFiles(version, paths); err != nil {
		return nil, 0, err
	}
	// rebuilt collects the adds whose stats came from stats_parsed: their
	// timestamps are formatted after the table schema is known.
	var rebuilt []*Add
	for _, p := range paths {
		acts, n, err := ckptReadFile(ctx, store, p, &rebuilt, skipRemoves)
		if err != nil {
			return nil, 0, err
		}
		if out == nil {
			out = acts // one file, the usual case: no copy
		} else {
			out = append(out, acts...)
		}
		removes += n
	}
	// Resolve sidecars. Any checkpoint file may carry them: the protocol
	// lets a V2-style checkpoint use the classic name too.
	var sidecars []*Sidecar
	kept := out[:0]
	for _, a := range out {
		if a.Sidecar != nil {
			sidecars = append(sidecars, a.Sidecar)
			continue
		}
		kept = append(kept, a)
	}
	out = kept
	for _, sc := range sidecars {
		sp, err := ckptSidecarPath(sc.Path)
		if err != nil {
			return nil, 0, fmt.Errorf("read checkpoint %d: %w", version, err)
		}
		acts, n, err := ckptReadFile(ctx, store, sp, &rebuilt, skipRemoves)
		if err != nil {
			return nil, 0, fmt.Errorf("read checkpoint %d: %w", version, err)
		}
		for _, a := range acts {
			// The protocol allows only file actions in sidecars; anything
			// else would be a second, conflicting copy of table state.
			if a.Add == nil && a.Remove == nil {
				return nil, 0, fmt.Errorf("read checkpoint %d: sidecar %s holds a non-file action", version, sp)
			}
		}
		out = append(out, acts...)
		removes += n
	}
	if len(rebuilt) > 0 {
		for _, a := range out {
			if a.Metadata != nil {
				if err := statsFixTimestamps(rebuilt, a.Metadata); err != nil {
					return nil, 0, fmt.Errorf("read checkpoint %d: %w", version, err)
				}
				break
			}
		}
	}
	return out, removes, nil
}

// eachCheckpointRemove calls fn for each remove action a checkpoint holds
// (its files, then the sidecars they name) until fn returns false,
// decoding only the remove and sidecar columns of a Parquet file, a row
// group at a time: a spilled snapshot's read-back (Snapshot.spill).
func eachCheckpointRemove(ctx context.Context, store storage.Storage, version int64, paths []string, fn func(*Remove) bool) error {
	return eachCheckpointRemoveGroup(ctx, store, version, paths, false, func(rms []*Remove, _ *ckptGroup) bool {
		for _, r := range rms {
			if !fn(r) {
				return false
			}
		}
		return true
	})
}

// ckptGroup is one row group of a Parquet checkpoint file being read
// back, for a new checkpoint to copy whole instead of encoding its rows
// again (ckptWriter.splice).
type ckptGroup struct {
	path  string               // the file's storage path
	index int                  // the group's index in the file
	meta  *format.FileMetaData // the file's footer: its schema and the group's chunks
	// removesOnly: every row of the group is a remove without stats
	// (tombstones as this package's writer keeps them), so the group
	// holds exactly the removes read from it.
	removesOnly bool
	// full, when the removes were read light (their keys and deletion
	// times only), decodes the group's removes whole; it is valid only
	// while the group is being handed over.
	full func() ([]*Remove, error)
}

// eachCheckpointRemoveGroup is eachCheckpointRemove a group of removes
// at a time: each row group of a Parquet file with its place (g), every
// remove of a JSON file with g nil. With light, a Parquet group's removes
// hold only their path, deletion vector id, deletion time and whether they
// carry stats (a non-empty Stats that is not theirs); g.full decodes them
// whole.
func eachCheckpointRemoveGroup(ctx context.Context, store storage.Storage, version int64, paths []string, light bool, fn func(rms []*Remove, g *ckptGroup) bool) error {
	if err := ckptCheckFiles(version, paths); err != nil {
		return err
	}
	var sidecars []*Sidecar
	more := true
	visit := func(p string, top bool) error {
		var bad error
		var rms []*Remove
		each := func(acts []Action, g *ckptGroup) bool {
			rms = rms[:0]
			for _, a := range acts {
				switch {
				case a.Sidecar != nil && top:
					sidecars = append(sidecars, a.Sidecar)
				case a.Sidecar != nil:
					bad = fmt.Errorf("sidecar %s names another sidecar", p)
					return false
				case a.Remove != nil:
					rms = append(rms, a.Remove)
				}
			}
			if g != nil {
				g.path = p
				g.removesOnly = len(rms) == int(g.meta.RowGroups[g.index].NumRows)
				for _, r := range rms {
					if r.Stats != "" {
						g.removesOnly = false
						break
					}
				}
			}
			more = fn(rms, g)
			return more
		}
		if strings.HasSuffix(p, ".json") {
			data, err := store.Read(ctx, p)
			if err != nil {
				return fmt.Errorf("read checkpoint file: %w", err)
			}
			acts, err := ParseActions(data)
			if err != nil {
				return fmt.Errorf("read checkpoint file %s: %w", p, err)
			}
			each(acts, nil)
			return bad
		}
		// A Parquet file is read in parts where the storage can (mapped,
		// for Local): only its remove and sidecar columns are read, and a
		// week of removes need not be in memory at once.
		f, err := storage.Open(ctx, store, p)
		if err != nil {
			return fmt.Errorf("read checkpoint file: %w", err)
		}
		defer f.Close()
		if err := ckptEachRemoveRowGroup(f, f.Size(), light, each); err != nil {
			return fmt.Errorf("read checkpoint file %s: %w", p, err)
		}
		return bad
	}
	for _, p := range paths {
		if err := visit(p, true); err != nil || !more {
			return err
		}
	}
	for _, sc := range sidecars {
		sp, err := ckptSidecarPath(sc.Path)
		if err != nil {
			return fmt.Errorf("read checkpoint %d: %w", version, err)
		}
		if err := visit(sp, false); err != nil {
			return fmt.Errorf("read checkpoint %d: %w", version, err)
		}
		if !more {
			return nil
		}
	}
	return nil
}

// ckptCheckFiles checks that paths name one complete checkpoint of version:
// a single classic or V2 file, or every part of a multi-part one.
func ckptCheckFiles(version int64, paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("read checkpoint %d: no files given", version)
	}
	seen := make(map[int]bool, len(paths))
	parts := 0
	for _, p := range paths {
		n, ok := ckptParseName(path.Base(p))
		if !ok {
			return fmt.Errorf("read checkpoint %d: %s is not a checkpoint file", version, p)
		}
		if n.version != version {
			return fmt.Errorf("read checkpoint %d: %s belongs to version %d", version, p, n.version)
		}
		if n.parts == 0 {
			if len(paths) != 1 {
				return fmt.Errorf("read checkpoint %d: single-file checkpoint %s given with %d other files", version, p, len(paths)-1)
			}
			return nil
		}
		if parts != 0 && n.parts != parts {
			return fmt.Errorf("read checkpoint %d: parts of %d and %d files mixed", version, parts, n.parts)
		}
		parts = n.parts
		if seen[n.part] {
			return fmt.Errorf("read checkpoint %d: part %d given twice", version, n.part)
		}
		seen[n.part] = true
	}
	if len(seen) != parts {
		return fmt.Errorf("read checkpoint %d: %d of %d parts given", version, len(seen), parts)
	}
	return nil
}

// ckptReadFile reads one checkpoint or sidecar file, JSON or Parquet by its
// extension; with skipRemoves its removes are counted, not returned. Adds
// whose stats were rebuilt from stats_parsed are appended to rebuilt when
// it is not nil.
func ckptReadFile(ctx context.Context, store storage.Storage, p string, rebuilt *[]*Add, skipRemoves bool) ([]Action, int, error) {
	if strings.HasSuffix(p, ".json") {
		data, err := store.Read(ctx, p)
		if err != nil {
			return nil, 0, fmt.Errorf("read checkpoint file: %w", err)
		}
		acts, err := ParseActions(data)
		if err != nil {
			return nil, 0, fmt.Errorf("read checkpoint file %s: %w", p, err)
		}
		if !skipRemoves {
			return acts, 0, nil
		}
		kept, removes := acts[:0], 0
		for _, a := range acts {
			if a.Remove != nil {
				removes++
				continue
			}
			kept = append(kept, a)
		}
		return kept, removes, nil
	}
	// Read in parts where the storage can (mapped, for Local): a
	// checkpoint can be large, and only some of its columns are read.
	f, err := storage.Open(ctx, store, p)
	if err != nil {
		return nil, 0, fmt.Errorf("read checkpoint file: %w", err)
	}
	defer f.Close()
	acts, removes, err := ckptDecodeParquet(f, f.Size(), rebuilt, skipRemoves)
	if err != nil {
		return nil, 0, fmt.Errorf("read checkpoint file %s: %w", p, err)
	}
	return acts, removes, nil
}

// ckptDecodeParquet decodes a Parquet checkpoint (or sidecar) file into
// actions, in row order, a row group at a time; with skipRemoves its
// removes are counted (removes), not decoded.
//
// It reads column by column rather than through parquet-go's reflection
// row reader: a checkpoint of a large table has 100k+ rows and a schema
// that differs between writers (field order, optional fields, extra
// stats_parsed/partitionValues_parsed structs). Columns are found by name
// and levels decoded by hand, so unknown columns are never read and missing
// optional ones are simply left at their zero value.
//
// Adds whose stats were rebuilt from stats_parsed are appended to rebuilt
// when it is not nil.
func ckptDecodeParquet(r io.ReaderAt, size int64, rebuilt *[]*Add, skipRemoves bool) (acts []Action, removes int, err error) {
	groupRemoves := 0 // the current row group's, left out of its rows
	err = ckptEachRowGroup(r, size, func(d *ckptDecoder, rows []Action) {
		d.decodeTxn(rows)
		d.decodeAdd(rows)
		if skipRemoves {
			_, groupRemoves = d.present(d.root.Column("remove"), nil)
		} else {
			d.decodeRemove(rows)
		}
		d.decodeMetadata(rows)
		d.decodeProtocol(rows)
		d.decodeDomain(rows)
		d.decodeCheckpointMetadata(rows)
		d.decodeSidecar(rows)
	}, func(d *ckptDecoder, rows []Action) bool {
		if rebuilt != nil {
			*rebuilt = append(*rebuilt, d.rebuilt...)
		}
		removes += groupRemoves
		// Grown by the group's actions: a row holds one (a split one is
		// rare), and the removes left out hold none.
		acts = ckptAppendRows(slices.Grow(acts, len(rows)-groupRemoves), rows)
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return acts, removes, nil
}

// ckptAppendRows appends the actions of decoded rows to out in row order.
// A row sets one action; a row that sets several is split so each
// returned Action keeps the one-field invariant.
func ckptAppendRows(out []Action, rows []Action) []Action {
	for _, r := range rows {
		for _, a := range [...]Action{
			{Txn: r.Txn}, {Add: r.Add}, {Remove: r.Remove}, {Metadata: r.Metadata},
			{Protocol: r.Protocol}, {DomainMetadata: r.DomainMetadata},
			{CheckpointMetadata: r.CheckpointMetadata}, {Sidecar: r.Sidecar},
		} {
			if a != (Action{}) {
				out = append(out, a)
			}
		}
	}
	return out
}

// ckptEachRemoveRowGroup decodes the removes and sidecars of a Parquet
// checkpoint (or sidecar) file one row group at a time, handing each
// group's to fn until it returns false: a spilled snapshot's read-back
// (Snapshot.spill), whose memory is then a row group's, not the file's
// (this package writes checkpoints in groups of ckptRowGroup rows).
// With light it decodes only what a new checkpoint needs to decide whether
// to copy a group whole (decodeRemoveKeys), and the group's full decodes
// the rest on demand.
func ckptEachRemoveRowGroup(r io.ReaderAt, size int64, light bool, fn func([]Action, *ckptGroup) bool) error {
	return ckptEachRowGroup(r, size, func(d *ckptDecoder, rows []Action) {
		if light {
			d.decodeRemoveKeys(rows)
		} else {
			d.decodeRemove(rows)
		}
		d.decodeSidecar(rows)
	}, func(d *ckptDecoder, rows []Action) bool {
		g := &ckptGroup{index: d.group, meta: d.meta}
		if light {
			g.full = func() ([]*Remove, error) {
				fd := newCkptDecoder(d.root, d.rg, d.nrows)
				whole := make([]Action, d.nrows)
				if err := ckptRecover(func() error { fd.decodeRemove(whole); return fd.err }); err != nil {
					return nil, err
				}
				var out []*Remove
				for _, a := range whole {
					if a.Remove != nil {
						out = append(out, a.Remove)
					}
				}
				return out, nil
			}
		}
		return fn(ckptAppendRows(make([]Action, 0, len(rows)), rows), g)
	})
}

// ckptEachRowGroup opens a Parquet checkpoint file and reads it a row
// group at a time: decode fills a fresh group's rows, with parquet-go's
// panics on a corrupt file turned into errors; the group's pages then
// leave the process's RSS where the file is mapped (the read is one
// pass); and use takes the rows, outside the recovery (a panic of the
// caller's is not a corrupt file), until it returns false.
func ckptEachRowGroup(r io.ReaderAt, size int64, decode func(*ckptDecoder, []Action), use func(*ckptDecoder, []Action) bool) error {
	var f *parquet.File
	if err := ckptRecover(func() (err error) { f, err = ckptOpenParquet(r, size); return err }); err != nil {
		return err
	}
	dropper, _ := r.(storage.ResidentDropper)
	for i, rg := range f.RowGroups() {
		d := newCkptDecoder(f.Root(), rg, int(rg.NumRows()))
		d.group, d.meta = i, f.Metadata()
		rows := make([]Action, d.nrows)
		if err := ckptRecover(func() error { decode(d, rows); return d.err }); err != nil {
			return err
		}
		if dropper != nil {
			dropper.DropResident()
		}
		if !use(d, rows) {
			return nil
		}
	}
	return nil
}

// ckptRecover runs decode, turning a parquet-go panic on a corrupt file
// into an error.
func ckptRecover(decode func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode parquet: corrupt file: %v", r)
		}
	}()
	return decode()
}

// ckptOpenParquet opens a Parquet checkpoint file after the checks that
// keep a corrupt one from sizing allocations or hanging the decoder.
func ckptOpenParquet(r io.ReaderAt, size int64) (*parquet.File, error) {
	// parquet-go allocates the footer length the file claims before
	// checking it against the file's size.
	var tail [8]byte
	if size < 12 {
		return nil, fmt.Errorf("open parquet: not a parquet file or footer length out of range")
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return nil, fmt.Errorf("open parquet: read footer: %w", err)
	}
	if int64(binary.LittleEndian.Uint32(tail[:4])) > size-12 {
		return nil, fmt.Errorf("open parquet: not a parquet file or footer length out of range")
	}
	f, err := parquet.OpenFile(r, size,
		parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	// Every checkpoint row holds one action with a unique string (a path or
	// an appId), so no real file has more rows than a few per byte; a
	// footer claiming more is corrupt and must not size our allocations.
	if n := f.NumRows(); n < 0 || n > 8*size {
		return nil, fmt.Errorf("open parquet: footer claims %d rows in %d bytes", n, size)
	}
	for _, rg := range f.Metadata().RowGroups {
		// The same for each row group: the removes-only read sizes its
		// rows by the group's count.
		if rg.NumRows < 0 || rg.NumRows > 8*size {
			return nil, fmt.Errorf("open parquet: footer claims a row group of %d rows in %d bytes", rg.NumRows, size)
		}
		for _, cc := range rg.Columns {
			// parquet-go's LZ4_RAW decoder grows its buffer without bound
			// on a corrupt block, and (v0.32) its page path reads a page
			// that compresses less than threefold as zeros (stored-row
			// reads decline LZ4 to parquet-go for the same reasons,
			// datafile's points.go); no Delta writer we know uses LZ4 for
			// checkpoints, so refuse it rather than misread or hang.
			if cc.MetaData.Codec == format.Lz4Raw || cc.MetaData.Codec == format.Lz4 {
				return nil, fmt.Errorf("open parquet: column %s: %s compression is not supported in checkpoints",
					strings.Join(cc.MetaData.PathInSchema, "."), cc.MetaData.Codec)
			}
		}
	}
	return f, nil
}

func newCkptDecoder(root *parquet.Column, rg parquet.RowGroup, nrows int) *ckptDecoder {
	return &ckptDecoder{
		root:       root,
		rg:         rg,
		nrows:      nrows,
		buf:        make([]parquet.Value, 1024),
		intern:     make(map[string]string),
		internPtrs: make(map[string]*string),
	}
}

// ckptDecoder decodes columns of one Parquet checkpoint file. Helpers record
// the first error in err and do nothing once it is set, so the per-action
// decoders read as a list of fields.
type ckptDecoder struct {
	root *parquet.Column
	// rg, when set, limits the decoder to one row group: nrows are its.
	rg    parquet.RowGroup
	nrows int
	// group is rg's index in the file, whose footer is meta.
	group int
	meta  *format.FileMetaData
	buf   []parquet.Value
	// intern shares the strings that repeat on most rows (partition column
	// names, low-cardinality partition values, deletion vector storage
	// types) instead of allocating them per row.
	intern     map[string]string
	internPtrs map[string]*string
	// rebuilt are the adds whose stats came from stats_parsed.
	rebuilt []*Add
	err     error
}

func (d *ckptDecoder) fail(col *parquet.Column, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("decode column %s: %s", strings.Join(col.Path(), "."), fmt.Sprintf(format, args...))
	}
}

// scan calls fn for every value of a leaf column with the row it belongs
// to. Values of a repeated column start a new row at repetition level 0.
func (d *ckptDecoder) scan(col *parquet.Column, fn func(row int, v parquet.Value)) {
	if d.err != nil {
		return
	}
	if !col.Leaf() {
		d.fail(col, "not a leaf column")
		return
	}
	var pages parquet.Pages
	if d.rg != nil {
		pages = d.rg.ColumnChunks()[col.Index()].Pages()
	} else {
		pages = col.Pages()
	}
	defer pages.Close()
	repeated := col.MaxRepetitionLevel() > 0
	row := -1
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.fail(col, "read page: %v", err)
			return
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(d.buf)
			for _, v := range d.buf[:n] {
				if !repeated || v.RepetitionLevel() == 0 {
					row++
				}
				if row >= d.nrows {
					d.fail(col, "more values than the file's %d rows", d.nrows)
					parquet.Release(p)
					return
				}
				fn(row, v)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				d.fail(col, "read values: %v", err)
				parquet.Release(p)
				return
			}
			if n == 0 {
				break
			}
		}
		parquet.Release(p)
	}
	if row != d.nrows-1 {
		d.fail(col, "values for %d of %d rows", row+1, d.nrows)
	}
}

// pqFirstLeaf returns the first leaf column under col.
func pqFirstLeaf(col *parquet.Column) *parquet.Column {
	for !col.Leaf() {
		cs := col.Columns()
		if len(cs) == 0 {
			return nil
		}
		col = cs[0]
	}
	return col
}

// present maps each row to a slot number (0, 1, ...) where the group col is
// non-null and the parent slot is set, else to -1, and returns the number of
// slots. parent nil means every row counts.
func (d *ckptDecoder) present(col *parquet.Column, parent []int32) ([]int32, int) {
	if col == nil || d.err != nil {
		return nil, 0
	}
	leaf := pqFirstLeaf(col)
	if leaf == nil {
		d.fail(col, "group without columns")
		return nil, 0
	}
	def := col.MaxDefinitionLevel()
	idx := make([]int32, d.nrows)
	for i := range idx {
		idx[i] = -1
	}
	n := 0
	d.scan(leaf, func(row int, v parquet.Value) {
		if v.RepetitionLevel() != 0 || v.DefinitionLevel() < def || (parent != nil && parent[row] < 0) {
			return
		}
		idx[row] = int32(n)
		n++
	})
	return idx, n
}

func (d *ckptDecoder) str(col *parquet.Column, idx []int32, set func(i int32, s string)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	if !col.Leaf() || col.Type().Kind() != parquet.ByteArray || col.MaxRepetitionLevel() > 0 {
		d.fail(col, "want a string column, have %v", col.Type())
		return
	}
	max := col.MaxDefinitionLevel()
	d.scan(col, func(row int, v parquet.Value) {
		if i := idx[row]; i >= 0 && v.DefinitionLevel() == max {
			set(i, string(v.ByteArray()))
		}
	})
}

// internStr is str for columns whose values repeat across rows.
func (d *ckptDecoder) internStr(col *parquet.Column, idx []int32, set func(i int32, s string)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	if !col.Leaf() || col.Type().Kind() != parquet.ByteArray || col.MaxRepetitionLevel() > 0 {
		d.fail(col, "want a string column, have %v", col.Type())
		return
	}
	max := col.MaxDefinitionLevel()
	d.scan(col, func(row int, v parquet.Value) {
		if i := idx[row]; i >= 0 && v.DefinitionLevel() == max {
			set(i, d.internBytes(v.ByteArray()))
		}
	})
}

func (d *ckptDecoder) internBytes(b []byte) string {
	if s, ok := d.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	// Bound the table: high-cardinality values gain nothing from it.
	if len(d.intern) < 4096 {
		d.intern[s] = s
	}
	return s
}

func (d *ckptDecoder) int(col *parquet.Column, idx []int32, set func(i int32, n int64)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	k := col.Type().Kind()
	if !col.Leaf() || (k != parquet.Int32 && k != parquet.Int64) || col.MaxRepetitionLevel() > 0 {
		d.fail(col, "want an integer column, have %v", col.Type())
		return
	}
	max := col.MaxDefinitionLevel()
	d.scan(col, func(row int, v parquet.Value) {
		if i := idx[row]; i >= 0 && v.DefinitionLevel() == max {
			if k == parquet.Int32 {
				set(i, int64(v.Int32()))
			} else {
				set(i, v.Int64())
			}
		}
	})
}

func (d *ckptDecoder) bool(col *parquet.Column, idx []int32, set func(i int32, b bool)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	if !col.Leaf() || col.Type().Kind() != parquet.Boolean || col.MaxRepetitionLevel() > 0 {
		d.fail(col, "want a boolean column, have %v", col.Type())
		return
	}
	max := col.MaxDefinitionLevel()
	d.scan(col, func(row int, v parquet.Value) {
		if i := idx[row]; i >= 0 && v.DefinitionLevel() == max {
			set(i, v.Boolean())
		}
	})
}

// strMap decodes a map<string,string> column: an optional group holding one
// repeated group of (key, value). The key and value leaves are found by
// position, not name, because writers name them differently (key_value/key/
// value in Spark, entries/keys/values in some Arrow writers). set receives
// an empty map for an empty map and is not called for a null one; a null
// value is a nil pointer.
func (d *ckptDecoder) strMap(col *parquet.Column, idx []int32, set func(i int32, m map[string]*string)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	kvs := col.Columns()
	if col.Leaf() || len(kvs) != 1 || !kvs[0].Repeated() || len(kvs[0].Columns()) != 2 {
		d.fail(col, "want a map column")
		return
	}
	kv := kvs[0]
	keyCol, valCol := kv.Columns()[0], kv.Columns()[1]
	if !keyCol.Leaf() || !valCol.Leaf() || keyCol.Type().Kind() != parquet.ByteArray || valCol.Type().Kind() != parquet.ByteArray {
		d.fail(col, "want a map of strings")
		return
	}
	mapDef, entryDef := col.MaxDefinitionLevel(), kv.MaxDefinitionLevel()
	keyDef, valDef := keyCol.MaxDefinitionLevel(), valCol.MaxDefinitionLevel()
	if keyDef < entryDef || valDef < entryDef {
		d.fail(col, "malformed map levels")
		return
	}
	// Pass 1: keys of the wanted rows, with the slot each entry belongs
	// to. present marks slots whose map is not null (it may be empty).
	present := make([]bool, pqSlots(idx))
	var keys []string
	var slots []int32
	d.scan(keyCol, func(row int, v parquet.Value) {
		i := idx[row]
		def := v.DefinitionLevel()
		if i < 0 || def < mapDef {
			return
		}
		present[i] = true
		if def < entryDef {
			return // an empty map
		}
		keys = append(keys, d.internBytes(v.ByteArray()))
		slots = append(slots, i)
	})
	// Pass 2: values. The value column has the key column's levels, so it
	// meets the same entries in the same order: pair them by count.
	vals := make([]*string, 0, len(keys))
	d.scan(valCol, func(row int, v parquet.Value) {
		i := idx[row]
		if i < 0 || v.DefinitionLevel() < entryDef {
			return
		}
		var val *string
		if v.DefinitionLevel() == valDef {
			val = d.internPtr(v.ByteArray())
		}
		vals = append(vals, val)
	})
	if d.err == nil && len(vals) != len(keys) {
		d.fail(valCol, "%d values for %d keys", len(vals), len(keys))
	}
	if d.err != nil {
		return
	}
	// Build the maps, sharing one map between slots with equal content:
	// a partitioned table's files repeat a few partition values, and the
	// maps are read-only like every action of a snapshot.
	shared := make(map[string]map[string]*string)
	var sig []byte
	e := 0
	for i := range present {
		if !present[i] {
			continue
		}
		from := e
		for e < len(slots) && slots[e] == int32(i) {
			e++
		}
		sig = sig[:0]
		for j := from; j < e; j++ {
			sig = append(sig, keys[j]...)
			if vals[j] == nil {
				sig = append(sig, 1)
			} else {
				sig = append(sig, 0)
				sig = append(sig, *vals[j]...)
			}
			sig = append(sig, 0, 0)
		}
		m, ok := shared[string(sig)]
		if !ok {
			m = make(map[string]*string, e-from)
			for j := from; j < e; j++ {
				m[keys[j]] = vals[j]
			}
			if len(shared) < 4096 {
				shared[string(sig)] = m
			}
		}
		set(int32(i), m)
	}
}

// internPtr returns a shared pointer to the string of b, for map values
// that repeat across rows.
func (d *ckptDecoder) internPtr(b []byte) *string {
	if p, ok := d.internPtrs[string(b)]; ok {
		return p
	}
	s := d.internBytes(b)
	p := &s
	if len(d.internPtrs) < 4096 {
		d.internPtrs[s] = p
	}
	return p
}

// pqSlots returns the number of slots a row index maps to.
func pqSlots(idx []int32) int {
	n := 0
	for _, i := range idx {
		if i >= 0 {
			n++
		}
	}
	return n
}

// plainMap is strMap for maps whose Go type has non-nullable values; a null
// value becomes "".
func (d *ckptDecoder) plainMap(col *parquet.Column, idx []int32, set func(i int32, m map[string]string)) {
	d.strMap(col, idx, func(i int32, m map[string]*string) {
		out := make(map[string]string, len(m))
		for k, v := range m {
			if v != nil {
				out[k] = *v
			} else {
				out[k] = ""
			}
		}
		set(i, out)
	})
}

// strList decodes a list<string> column in the standard three-level form
// (optional group, repeated group, element) or the legacy two-level form
// (optional group, repeated element). Null elements are dropped: the
// protocol's string lists (features, partition columns) have none.
func (d *ckptDecoder) strList(col *parquet.Column, idx []int32, set func(i int32, l []string)) {
	if col == nil || idx == nil || d.err != nil {
		return
	}
	cs := col.Columns()
	if col.Leaf() || len(cs) != 1 || !cs[0].Repeated() {
		d.fail(col, "want a list column")
		return
	}
	rep, elem := cs[0], cs[0]
	if !rep.Leaf() {
		if len(rep.Columns()) != 1 {
			d.fail(col, "want a list of strings")
			return
		}
		elem = rep.Columns()[0]
	}
	if !elem.Leaf() || elem.Type().Kind() != parquet.ByteArray {
		d.fail(col, "want a list of strings")
		return
	}
	listDef, elemDef := col.MaxDefinitionLevel(), elem.MaxDefinitionLevel()
	lists := make([][]string, pqSlots(idx))
	seen := make([]bool, len(lists))
	d.scan(elem, func(row int, v parquet.Value) {
		i := idx[row]
		if i < 0 || v.DefinitionLevel() < listDef {
			return
		}
		seen[i] = true
		if v.DefinitionLevel() == elemDef {
			lists[i] = append(lists[i], d.internBytes(v.ByteArray()))
		}
	})
	if d.err != nil {
		return
	}
	for i, l := range lists {
		if seen[i] {
			if l == nil {
				l = []string{}
			}
			set(int32(i), l)
		}
	}
}

// pqChild returns a named child of col, or nil when col is nil or lacks it.
func pqChild(col *parquet.Column, name string) *parquet.Column {
	if col == nil {
		return nil
	}
	return col.Column(name)
}

// deletionVector decodes the deletionVector struct under an add or remove.
func (d *ckptDecoder) deletionVector(parent *parquet.Column, pidx []int32, attach func(pi int32, dv *DeletionVector)) {
	col := pqChild(parent, "deletionVector")
	idx, n := d.present(col, pidx)
	if n == 0 {
		return
	}
	dvs := make([]DeletionVector, n)
	d.internStr(pqChild(col, "storageType"), idx, func(i int32, s string) { dvs[i].StorageType = s })
	d.str(pqChild(col, "pathOrInlineDv"), idx, func(i int32, s string) { dvs[i].PathOrInlineDv = s })
	d.int(pqChild(col, "offset"), idx, func(i int32, n int64) { o := int32(n); dvs[i].Offset = &o })
	d.int(pqChild(col, "sizeInBytes"), idx, func(i int32, n int64) { dvs[i].SizeInBytes = int32(n) })
	d.int(pqChild(col, "cardinality"), idx, func(i int32, n int64) { dvs[i].Cardinality = n })
	d.int(pqChild(col, "maxRowIndex"), idx, func(i int32, n int64) { dvs[i].MaxRowIndex = &n })
	if d.err != nil {
		return
	}
	for i, p := range pqSlotParents(pidx, idx, n) {
		attach(p, &dvs[i])
	}
}

// decodeAction decodes the group's top-level action column name: fill
// sets the fields of one T for each row that holds the action (slot i in
// idx's numbering, the column's rows), and set attaches it to its row.
// Nothing is attached once a column failed to decode.
func decodeAction[T any](d *ckptDecoder, rows []Action, name string, fill func(col *parquet.Column, idx []int32, xs []T), set func(a *Action, x *T)) {
	col := d.root.Column(name)
	idx, n := d.present(col, nil)
	if n == 0 {
		return
	}
	xs := make([]T, n)
	fill(col, idx, xs)
	if d.err != nil {
		return
	}
	for row, i := range idx {
		if i >= 0 {
			set(&rows[row], &xs[i])
		}
	}
}

func (d *ckptDecoder) decodeTxn(rows []Action) {
	decodeAction(d, rows, "txn", func(col *parquet.Column, idx []int32, txns []Txn) {
		d.str(pqChild(col, "appId"), idx, func(i int32, s string) { txns[i].AppID = s })
		d.int(pqChild(col, "version"), idx, func(i int32, n int64) { txns[i].Version = n })
		d.int(pqChild(col, "lastUpdated"), idx, func(i int32, n int64) { txns[i].LastUpdated = &n })
	}, func(a *Action, t *Txn) { a.Txn = t })
}

func (d *ckptDecoder) decodeAdd(rows []Action) {
	decodeAction(d, rows, "add", func(col *parquet.Column, idx []int32, adds []Add) {
		d.str(pqChild(col, "path"), idx, func(i int32, s string) { adds[i].Path = s })
		d.strMap(pqChild(col, "partitionValues"), idx, func(i int32, m map[string]*string) { adds[i].PartitionValues = m })
		d.int(pqChild(col, "size"), idx, func(i int32, n int64) { adds[i].Size = n })
		d.int(pqChild(col, "modificationTime"), idx, func(i int32, n int64) { adds[i].ModificationTime = n })
		d.bool(pqChild(col, "dataChange"), idx, func(i int32, b bool) { adds[i].DataChange = b })
		d.str(pqChild(col, "stats"), idx, func(i int32, s string) { adds[i].Stats = s })
		if sp := pqChild(col, "stats_parsed"); sp != nil && d.err == nil {
			for i := range adds {
				if adds[i].Stats == "" {
					d.statsParsed(sp, idx, func(i int32, s string) {
						if adds[i].Stats == "" {
							adds[i].Stats = s
							d.rebuilt = append(d.rebuilt, &adds[i])
						}
					})
					break
				}
			}
		}
		d.plainMap(pqChild(col, "tags"), idx, func(i int32, m map[string]string) { adds[i].Tags = m })
		d.deletionVector(col, idx, func(i int32, dv *DeletionVector) { adds[i].DeletionVector = dv })
		d.int(pqChild(col, "baseRowId"), idx, func(i int32, n int64) { adds[i].BaseRowID = &n })
		d.int(pqChild(col, "defaultRowCommitVersion"), idx, func(i int32, n int64) { adds[i].DefaultRowCommitVersion = &n })
		d.internStr(pqChild(col, "clusteringProvider"), idx, func(i int32, s string) { adds[i].ClusteringProvider = s })
	}, func(a *Action, add *Add) {
		if add.PartitionValues == nil {
			// Required by the protocol; a writer that stored null means
			// an unpartitioned file.
			add.PartitionValues = map[string]*string{}
		}
		a.Add = add
	})
}

func (d *ckptDecoder) decodeRemove(rows []Action) {
	decodeAction(d, rows, "remove", func(col *parquet.Column, idx []int32, rms []Remove) {
		d.str(pqChild(col, "path"), idx, func(i int32, s string) { rms[i].Path = s })
		d.int(pqChild(col, "deletionTimestamp"), idx, func(i int32, n int64) { rms[i].DeletionTimestamp = &n })
		d.bool(pqChild(col, "dataChange"), idx, func(i int32, b bool) { rms[i].DataChange = b })
		d.bool(pqChild(col, "extendedFileMetadata"), idx, func(i int32, b bool) { rms[i].ExtendedFileMetadata = &b })
		d.strMap(pqChild(col, "partitionValues"), idx, func(i int32, m map[string]*string) { rms[i].PartitionValues = m })
		d.int(pqChild(col, "size"), idx, func(i int32, n int64) { rms[i].Size = &n })
		d.str(pqChild(col, "stats"), idx, func(i int32, s string) { rms[i].Stats = s })
		d.plainMap(pqChild(col, "tags"), idx, func(i int32, m map[string]string) { rms[i].Tags = m })
		d.deletionVector(col, idx, func(i int32, dv *DeletionVector) { rms[i].DeletionVector = dv })
		d.int(pqChild(col, "baseRowId"), idx, func(i int32, n int64) { rms[i].BaseRowID = &n })
		d.int(pqChild(col, "defaultRowCommitVersion"), idx, func(i int32, n int64) { rms[i].DefaultRowCommitVersion = &n })
	}, func(a *Action, rm *Remove) { a.Remove = rm })
}

// decodeRemoveKeys is decodeRemove of what decides whether a new
// checkpoint copies a group whole: each remove's path, deletion time and
// deletion vector id (storage type, path or inline data, offset), and a
// Stats of "\x00" where the row has stats (their value is not read).
func (d *ckptDecoder) decodeRemoveKeys(rows []Action) {
	decodeAction(d, rows, "remove", func(col *parquet.Column, idx []int32, rms []Remove) {
		times := make([]int64, len(rms)) // one allocation, not one a row
		d.str(pqChild(col, "path"), idx, func(i int32, s string) { rms[i].Path = s })
		d.int(pqChild(col, "deletionTimestamp"), idx, func(i int32, n int64) { times[i] = n; rms[i].DeletionTimestamp = &times[i] })
		if stats, _ := d.present(pqChild(col, "stats"), idx); stats != nil {
			for row, i := range idx {
				if i >= 0 && stats[row] >= 0 {
					rms[i].Stats = "\x00"
				}
			}
		}
		dvCol := pqChild(col, "deletionVector")
		dvIdx, ndv := d.present(dvCol, idx)
		if ndv == 0 {
			return
		}
		dvs := make([]DeletionVector, ndv)
		offsets := make([]int32, ndv)
		d.internStr(pqChild(dvCol, "storageType"), dvIdx, func(i int32, s string) { dvs[i].StorageType = s })
		d.str(pqChild(dvCol, "pathOrInlineDv"), dvIdx, func(i int32, s string) { dvs[i].PathOrInlineDv = s })
		d.int(pqChild(dvCol, "offset"), dvIdx, func(i int32, n int64) { offsets[i] = int32(n); dvs[i].Offset = &offsets[i] })
		if d.err != nil {
			return
		}
		for i, p := range pqSlotParents(idx, dvIdx, ndv) {
			rms[p].DeletionVector = &dvs[i]
		}
	}, func(a *Action, rm *Remove) { a.Remove = rm })
}

func (d *ckptDecoder) decodeMetadata(rows []Action) {
	decodeAction(d, rows, "metaData", func(col *parquet.Column, idx []int32, mds []Metadata) {
		d.str(pqChild(col, "id"), idx, func(i int32, s string) { mds[i].ID = s })
		d.str(pqChild(col, "name"), idx, func(i int32, s string) { mds[i].Name = s })
		d.str(pqChild(col, "description"), idx, func(i int32, s string) { mds[i].Description = s })
		format := pqChild(col, "format")
		fidx, nf := d.present(format, idx)
		fmd := pqSlotParents(idx, fidx, nf)
		d.str(pqChild(format, "provider"), fidx, func(i int32, s string) { mds[fmd[i]].Format.Provider = s })
		d.plainMap(pqChild(format, "options"), fidx, func(i int32, m map[string]string) { mds[fmd[i]].Format.Options = m })
		d.str(pqChild(col, "schemaString"), idx, func(i int32, s string) { mds[i].SchemaString = s })
		d.strList(pqChild(col, "partitionColumns"), idx, func(i int32, l []string) { mds[i].PartitionColumns = l })
		d.plainMap(pqChild(col, "configuration"), idx, func(i int32, m map[string]string) { mds[i].Configuration = m })
		d.int(pqChild(col, "createdTime"), idx, func(i int32, n int64) { mds[i].CreatedTime = &n })
	}, func(a *Action, md *Metadata) {
		// Keep the Go values equal to what ParseActions yields for the
		// same action.
		md.fillRequired()
		a.Metadata = md
	})
}

// pqSlotParents maps each of the n slots of a nested group (row index cidx)
// to the slot of its parent (row index pidx).
func pqSlotParents(pidx, cidx []int32, n int) []int32 {
	out := make([]int32, n)
	for row, c := range cidx {
		if c >= 0 {
			out[c] = pidx[row]
		}
	}
	return out
}

func (d *ckptDecoder) decodeProtocol(rows []Action) {
	decodeAction(d, rows, "protocol", func(col *parquet.Column, idx []int32, ps []Protocol) {
		d.int(pqChild(col, "minReaderVersion"), idx, func(i int32, n int64) { ps[i].MinReaderVersion = int(n) })
		d.int(pqChild(col, "minWriterVersion"), idx, func(i int32, n int64) { ps[i].MinWriterVersion = int(n) })
		d.strList(pqChild(col, "readerFeatures"), idx, func(i int32, l []string) { ps[i].ReaderFeatures = l })
		d.strList(pqChild(col, "writerFeatures"), idx, func(i int32, l []string) { ps[i].WriterFeatures = l })
	}, func(a *Action, p *Protocol) { a.Protocol = p })
}

func (d *ckptDecoder) decodeDomain(rows []Action) {
	decodeAction(d, rows, "domainMetadata", func(col *parquet.Column, idx []int32, ds []DomainMetadata) {
		d.str(pqChild(col, "domain"), idx, func(i int32, s string) { ds[i].Domain = s })
		d.str(pqChild(col, "configuration"), idx, func(i int32, s string) { ds[i].Configuration = s })
		d.bool(pqChild(col, "removed"), idx, func(i int32, b bool) { ds[i].Removed = b })
	}, func(a *Action, dm *DomainMetadata) { a.DomainMetadata = dm })
}

func (d *ckptDecoder) decodeCheckpointMetadata(rows []Action) {
	decodeAction(d, rows, "checkpointMetadata", func(col *parquet.Column, idx []int32, cs []CheckpointMetadata) {
		d.int(pqChild(col, "version"), idx, func(i int32, n int64) { cs[i].Version = n })
		d.plainMap(pqChild(col, "tags"), idx, func(i int32, m map[string]string) { cs[i].Tags = m })
	}, func(a *Action, c *CheckpointMetadata) { a.CheckpointMetadata = c })
}

func (d *ckptDecoder) decodeSidecar(rows []Action) {
	decodeAction(d, rows, "sidecar", func(col *parquet.Column, idx []int32, ss []Sidecar) {
		d.str(pqChild(col, "path"), idx, func(i int32, s string) { ss[i].Path = s })
		d.int(pqChild(col, "sizeInBytes"), idx, func(i int32, n int64) { ss[i].SizeInBytes = n })
		d.int(pqChild(col, "modificationTime"), idx, func(i int32, n int64) { ss[i].ModificationTime = n })
		d.plainMap(pqChild(col, "tags"), idx, func(i int32, m map[string]string) { ss[i].Tags = m })
	}, func(a *Action, sc *Sidecar) { a.Sidecar = sc })
}
