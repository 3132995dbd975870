package datafile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// ReadParquet decodes a whole Parquet file into one Arrow record in the
// file's own schema (physical names, the file's types). It is the plain
// reader under Read, and what tests use to read reference files.
func ReadParquet(ctx context.Context, data []byte) (arrow.RecordBatch, error) {
	return readParquet(ctx, bytes.NewReader(data), int64(len(data)), nil, nil)
}

// rowSelection asks readParquet for only the row groups holding rows
// (physical indexes, ascending); local receives each row's index in the
// returned record.
type rowSelection struct {
	rows  []int64
	local []int
}

// groups returns the row groups of md holding sel's rows and fills
// sel.local.
func (sel *rowSelection) groups(pr *file.Reader) ([]int, error) {
	md := pr.MetaData()
	var groups []int
	sel.local = make([]int, 0, len(sel.rows))
	var start, base int64 // first physical row of group g; its first row in the output
	i := 0
	for g := 0; g < md.NumRowGroups() && i < len(sel.rows); g++ {
		n := md.RowGroup(g).NumRows()
		end := start + n
		if sel.rows[i] < end {
			groups = append(groups, g)
			for ; i < len(sel.rows) && sel.rows[i] < end; i++ {
				if sel.rows[i] < start || (i > 0 && sel.rows[i] <= sel.rows[i-1]) {
					return nil, fmt.Errorf("rows to read are not ascending physical indexes at %d", sel.rows[i])
				}
				sel.local = append(sel.local, int(base+sel.rows[i]-start))
			}
			base += n
		}
		start = end
	}
	if i < len(sel.rows) {
		return nil, fmt.Errorf("row %d is past the file's %d rows", sel.rows[i], start)
	}
	return groups, nil
}

// readParquet is ReadParquet of the size bytes r reads, reading only the
// top-level fields pick returns (indexes into the file's fields; nil pick
// reads all) and the row groups sel asks for (nil: all).
func readParquet(ctx context.Context, r parquet.ReaderAtSeeker, size int64, pick func([]arrow.Field) []int, sel *rowSelection) (rec arrow.RecordBatch, err error) {
	// arrow-go's decoder can panic on a corrupt file (slice bounds, bad
	// lengths); a corrupt data file must fail the read, not the process.
	defer func() {
		if r := recover(); r != nil {
			rec, err = nil, fmt.Errorf("read parquet: corrupt file: %v", r)
		}
	}()
	mem := memory.DefaultAllocator
	pr, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	defer pr.Close()
	if err := checkChunks(pr, size); err != nil {
		return nil, fmt.Errorf("read parquet: corrupt file: %w", err)
	}
	// Ignore an Arrow schema the writer stored in the file (pyarrow and
	// delta-rs do): it brings back the writer's in-memory choices (large
	// strings, dictionaries, views), while the Parquet types alone map to
	// the Arrow types the Delta type mapping expects.
	for _, kv := range pr.MetaData().KeyValueMetadata() {
		if kv.Key == "ARROW:schema" {
			kv.Key = "cdcapply.ignored:ARROW:schema"
		}
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, mem)
	if err != nil {
		return nil, fmt.Errorf("open parquet: %w", err)
	}
	var tbl arrow.Table
	switch {
	case sel != nil:
		groups, gerr := sel.groups(pr)
		if gerr != nil {
			return nil, fmt.Errorf("read parquet: %w", gerr)
		}
		var sc *arrow.Schema
		if sc, err = fr.Schema(); err != nil {
			return nil, fmt.Errorf("read parquet schema: %w", err)
		}
		var idx, leaves []int
		if pick != nil {
			idx = pick(sc.Fields())
		} else {
			for i := range sc.Fields() {
				idx = append(idx, i)
			}
		}
		for _, i := range idx {
			leaves = appendLeaves(leaves, fr.Manifest.Fields[i])
		}
		tbl, err = fr.ReadRowGroups(ctx, leaves, groups)
	case pick == nil:
		tbl, err = fr.ReadTable(ctx)
	default:
		var sc *arrow.Schema
		if sc, err = fr.Schema(); err != nil {
			return nil, fmt.Errorf("read parquet schema: %w", err)
		}
		// pqarrow selects by leaf column: gather every leaf of each field.
		var leaves []int
		for _, i := range pick(sc.Fields()) {
			leaves = appendLeaves(leaves, fr.Manifest.Fields[i])
		}
		if len(leaves) == 0 {
			// Only partition or missing columns: the row count is all we need.
			return array.NewRecordBatch(arrow.NewSchema(nil, nil), nil, pr.NumRows()), nil
		}
		groups := make([]int, pr.NumRowGroups())
		for i := range groups {
			groups[i] = i
		}
		tbl, err = fr.ReadRowGroups(ctx, leaves, groups)
	}
	if err != nil {
		return nil, fmt.Errorf("read parquet: %w", err)
	}
	defer tbl.Release()
	cols := make([]arrow.Array, tbl.NumCols())
	for i := range cols {
		chunks := tbl.Column(i).Data().Chunks()
		switch len(chunks) {
		case 0:
			cols[i] = array.MakeArrayOfNull(mem, tbl.Schema().Field(i).Type, 0)
		case 1:
			chunks[0].Retain()
			cols[i] = chunks[0]
		default:
			c, err := array.Concatenate(chunks, mem)
			if err != nil {
				return nil, fmt.Errorf("read parquet column %q: %w", tbl.Schema().Field(i).Name, err)
			}
			cols[i] = c
		}
	}
	rec = array.NewRecordBatch(tbl.Schema(), cols, tbl.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// checkChunks verifies every column chunk lies inside the file before
// pqarrow reads it: arrow-go sizes buffers from these fields, and reads
// nested columns on its own goroutines, where a panic on a bad length
// could not be recovered.
func checkChunks(pr *file.Reader, size int64) error {
	md := pr.MetaData()
	for g := 0; g < md.NumRowGroups(); g++ {
		rg := md.RowGroup(g)
		for c := 0; c < rg.NumColumns(); c++ {
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, c, err)
			}
			start := col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
				start = col.DictionaryPageOffset()
			}
			n := col.TotalCompressedSize()
			if start < 0 || n < 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d column %d: chunk at %d of %d bytes outside the %d-byte file", g, c, start, n, size)
			}
		}
	}
	return nil
}

func appendLeaves(out []int, f pqarrow.SchemaField) []int {
	if len(f.Children) == 0 {
		return append(out, f.ColIndex)
	}
	for _, c := range f.Children {
		out = appendLeaves(out, c)
	}
	return out
}

// ReadOption configures Read.
type ReadOption func(*readOptions)

type readOptions struct {
	columns []string
}

// Columns makes Read return only the named columns (logical names, in
// table schema order) and decode only their Parquet column chunks: the
// apply engine reads keys and sequences of candidate files this way.
func Columns(names ...string) ReadOption {
	return func(o *readOptions) { o.columns = append(o.columns, names...) }
}

// project returns l with its schema cut to the named columns.
func (l Layout) project(names []string) (Layout, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		if _, _, ok := l.Schema.Field(n); !ok {
			return Layout{}, fmt.Errorf("no column %q in the table", n)
		}
		want[n] = true
	}
	out := l
	out.Schema = delta.StructType{}
	for _, f := range l.Schema.Fields {
		if want[f.Name] {
			out.Schema.Fields = append(out.Schema.Fields, f)
		}
	}
	return out, nil
}

// Read returns the live rows of the data file of add as one record in the
// table's logical schema (ArrowSchema of l.Schema): partition columns come
// from add.partitionValues, columns the file lacks are null, narrower file
// types are widened, and rows deleted by add's deletion vector are gone.
// st is rooted at the table.
func Read(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, opts ...ReadOption) (arrow.RecordBatch, error) {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return read(ctx, st, l, add, o, nil)
}

// ReadRowGroupsOf decodes only the row groups of add's data file that hold
// the given physical rows (ascending), for a reader that needs a few rows
// of a large file: a file written in row groups of R rows costs at most
// one group per row asked for, not the whole file. It returns the groups'
// rows (the deletion vector is not applied: the caller asks for rows it
// knows are live) and each asked row's index in that record.
func ReadRowGroupsOf(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, rows []int64) (arrow.RecordBatch, []int, error) {
	plain := *add
	plain.DeletionVector = nil
	sel := &rowSelection{rows: rows}
	rec, err := read(ctx, st, l, &plain, readOptions{}, sel)
	if err != nil {
		return nil, nil, err
	}
	return rec, sel.local, nil
}

// dataPath is add's file as a path inside st.
func dataPath(st storage.Storage, add *delta.Add) (string, error) {
	p, abs, err := delta.DecodePath(add.Path)
	if err != nil {
		return "", fmt.Errorf("read data file: %w", err)
	}
	if abs {
		root := strings.TrimSuffix(st.Location(), "/") + "/"
		if !strings.HasPrefix(p, root) {
			return "", fmt.Errorf("read data file %s: absolute path outside the table at %s", add.Path, st.Location())
		}
		p = strings.TrimPrefix(p, root)
	}
	return p, nil
}

func read(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, o readOptions, sel *rowSelection) (arrow.RecordBatch, error) {
	var pick func([]arrow.Field) []int
	if len(o.columns) > 0 {
		var err error
		if l, err = l.project(o.columns); err != nil {
			return nil, fmt.Errorf("read data file %s: %w", add.Path, err)
		}
		pick = func(fields []arrow.Field) []int {
			var idx []int
			for _, f := range l.Schema.Fields {
				if l.isPartition(f.Name) {
					continue
				}
				if i := l.findField(fields, f); i >= 0 {
					idx = append(idx, i)
				}
			}
			return idx
		}
	}
	p, err := dataPath(st, add)
	if err != nil {
		return nil, err
	}
	raw, err := readDataFile(ctx, st, p, pick, sel)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", p, err)
	}
	defer raw.Release()
	rec, err := l.Conform(raw, add.PartitionValues)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", p, err)
	}
	if add.DeletionVector == nil {
		return rec, nil
	}
	defer rec.Release()
	bm, err := dv.Load(ctx, st, add.DeletionVector)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", p, err)
	}
	if !bm.IsEmpty() && bm.Maximum() >= uint64(rec.NumRows()) {
		return nil, fmt.Errorf("read data file %s: deletion vector deletes row %d of %d", p, bm.Maximum(), rec.NumRows())
	}
	deleted := bm.ToArray()
	out, err := dropRows(rec, deleted)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", p, err)
	}
	return out, nil
}

// readDataFile reads the data file at p: the whole file when every
// column of every row group is wanted, else only the footer and the
// column chunks wanted, through the storage's range reads (a mapped local
// file, ranged gets) when it has them. A key index build reads three
// columns of every file of the table; reading whole files for them read
// the table's every byte.
func readDataFile(ctx context.Context, st storage.Storage, p string, pick func([]arrow.Field) []int, sel *rowSelection) (arrow.RecordBatch, error) {
	if _, ranged := st.(storage.RangeReader); ranged && (pick != nil || sel != nil) {
		f, err := storage.Open(ctx, st, p)
		if err != nil {
			return nil, fmt.Errorf("read data file: %w", err)
		}
		defer f.Close() // the record's buffers are copies: pqarrow reads chunks with ReadAt
		return readParquet(ctx, io.NewSectionReader(f, 0, f.Size()), f.Size(), pick, sel)
	}
	data, err := st.Read(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read data file: %w", err)
	}
	return readParquet(ctx, bytes.NewReader(data), int64(len(data)), pick, sel)
}

// Conform maps a record read from a data file (file schema) to the
// table's logical schema, filling partition columns from partitionValues
// (keyed by physical name under column mapping, as the log keys them).
func (l Layout) Conform(raw arrow.RecordBatch, partitionValues map[string]*string) (arrow.RecordBatch, error) {
	mem := memory.DefaultAllocator
	schema, err := ArrowSchema(l.Schema)
	if err != nil {
		return nil, err
	}
	n := int(raw.NumRows())
	fileFields := raw.Schema().Fields()
	cols := make([]arrow.Array, 0, len(schema.Fields()))
	release := func() {
		for _, c := range cols {
			c.Release()
		}
	}
	for _, f := range l.Schema.Fields {
		if f.Type == delta.Void {
			continue
		}
		var col arrow.Array
		var err error
		if l.isPartition(f.Name) {
			v, ok := partitionValues[l.physicalName(f)]
			if !ok {
				v = partitionValues[f.Name]
			}
			col, err = partitionArray(mem, f.Type, v, n)
		} else if i := l.findField(fileFields, f); i >= 0 {
			col, err = l.conform(mem, raw.Column(i), f.Type)
		} else {
			var t arrow.DataType
			t, err = ArrowType(f.Type)
			if err == nil {
				col = array.MakeArrayOfNull(mem, t, n)
			}
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		cols = append(cols, col)
	}
	rec := array.NewRecordBatch(schema, cols, int64(n))
	release()
	return rec, nil
}

// dropRows returns rec without the rows at the sorted indexes in deleted:
// the kept runs between deleted rows are sliced and concatenated, which
// costs one copy and works for every column type, nested ones included.
func dropRows(rec arrow.RecordBatch, deleted []uint64) (arrow.RecordBatch, error) {
	n := rec.NumRows()
	type run struct{ from, to int64 }
	var runs []run
	start := int64(0)
	for _, d := range deleted {
		if int64(d) > start {
			runs = append(runs, run{start, int64(d)})
		}
		start = int64(d) + 1
	}
	if start < n {
		runs = append(runs, run{start, n})
	}
	kept := int64(0)
	for _, r := range runs {
		kept += r.to - r.from
	}
	cols := make([]arrow.Array, rec.NumCols())
	for c := range cols {
		if len(runs) == 0 {
			cols[c] = array.MakeArrayOfNull(memory.DefaultAllocator, rec.Column(c).DataType(), 0)
			continue
		}
		parts := make([]arrow.Array, len(runs))
		for i, r := range runs {
			parts[i] = array.NewSlice(rec.Column(c), r.from, r.to)
		}
		out, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			return nil, fmt.Errorf("drop deleted rows: %w", err)
		}
		cols[c] = out
	}
	out := array.NewRecordBatch(rec.Schema(), cols, kept)
	for _, c := range cols {
		c.Release()
	}
	return out, nil
}
