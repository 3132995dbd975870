package datafile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// ErrNoPointRead says ReadValuesAt does not read this table layout or
// file (partition columns, column mapping by id, nested or void columns,
// Parquet types without a direct conversion such as INT96 or millisecond
// timestamps); the caller reads the rows' row groups instead
// (ReadRowGroupsOf), which reads every file this package reads.
var ErrNoPointRead = errors.New("no point read for this layout or file")

// ReadValuesAt reads the values of the given physical rows (ascending,
// distinct) of add's data file. The deletion vector is not applied: the
// caller asks for rows it knows are live. It returns one slice per column
// of the layout's schema, in schema order, holding the rows' values in
// the order asked; a column the file lacks (added to the table after the
// file was written) is NULL.
//
// Only the data pages holding the rows are read and decompressed: the
// file is opened in parts (storage.Open), each column chunk's offset index
// locates the page of a row, and of that page only the row's value is
// decoded (pagedirect.go), with no Arrow arrays built. A file written in
// small pages (PageBytes) therefore costs about one page per column per
// row asked for, however large the file; rows close together share pages.
func ReadValuesAt(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, rows []int64) ([][]schema.Value, error) {
	perColumn := make([][]int64, len(l.Schema.Fields))
	for c := range perColumn {
		perColumn[c] = rows
	}
	return ReadColumnsAt(ctx, st, l, add, perColumn)
}

// ReadColumnsAt is ReadValuesAt with rows chosen per column: rows[c]
// (ascending, distinct) are the rows whose value of the schema's column c
// is wanted, and the result's slice c holds their values in that order
// (nil for a column no row is wanted of). A point read that needs one
// column of a row (a TOASTed value) reads that column's page only.
func ReadColumnsAt(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, rows [][]int64) ([][]schema.Value, error) {
	return readColumnsAt(ctx, st, l, add, rows, nil)
}

// readColumnsAt is ReadColumnsAt with the file opened through cache
// (nil: opened and closed here).
func readColumnsAt(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, rows [][]int64, cache *FileCache) ([][]schema.Value, error) {
	if len(l.PartitionColumns) > 0 || l.Mapping == MappingID {
		return nil, fmt.Errorf("%w: partition columns or column mapping by id", ErrNoPointRead)
	}
	if len(rows) != len(l.Schema.Fields) {
		return nil, fmt.Errorf("read rows of %s: rows for %d columns, the table has %d", add.Path, len(rows), len(l.Schema.Fields))
	}
	var last int64 = -1 // the largest row asked for
	for _, rs := range rows {
		for i, r := range rs {
			if r < 0 || (i > 0 && r <= rs[i-1]) {
				return nil, fmt.Errorf("read rows of %s: rows must be ascending and distinct (row %d after %d)", add.Path, r, rs[max(i-1, 0)])
			}
		}
		if len(rs) > 0 {
			last = max(last, rs[len(rs)-1])
		}
	}
	p, err := dataPath(st, add)
	if err != nil {
		return nil, err
	}
	pf, f, cf, release, err := cache.open(ctx, st, p)
	if err != nil {
		return nil, fmt.Errorf("read rows of %s: %w", add.Path, err)
	}
	defer release()
	cols, err := cache.pointColumns(cf, l, pf)
	if err != nil {
		return nil, err
	}
	if last >= pf.NumRows() {
		return nil, fmt.Errorf("read rows of %s: row %d of a file of %d rows", add.Path, last, pf.NumRows())
	}
	out := make([][]schema.Value, len(cols))
	for c := range out {
		if len(rows[c]) > 0 {
			out[c] = make([]schema.Value, len(rows[c]))
		}
	}
	// Walk the row groups, handing each column the rows of it the group
	// holds; next[c] is column c's first row not yet read.
	next := make([]int, len(cols))
	var first int64 // the group's first row in the file
	md := pf.Metadata()
	var dc directChunk // buffers shared by the chunks read directly
	for g, rg := range pf.RowGroups() {
		n := rg.NumRows()
		chunks := rg.ColumnChunks()
		for c, pc := range cols {
			rs, i := rows[c], next[c]
			j := i
			for j < len(rs) && rs[j] < first+n {
				j++
			}
			if j == i {
				continue
			}
			next[c] = j
			if pc.leaf < 0 {
				for k := i; k < j; k++ {
					out[c][k] = schema.Null // not in this file
				}
				continue
			}
			err := errNotDirect
			cmd := &md.RowGroups[g].Columns[pc.leaf].MetaData
			if directable(cmd, pc.typ.Kind(), pc.maxDef) {
				err = dc.read(f, chunks[pc.leaf], cmd, pc.typ, pc.conv, pc.maxDef, rs[i:j], first, out[c][i:j])
			}
			if errors.Is(err, errNotDirect) {
				if cmd.Codec == format.Lz4Raw || cmd.Codec == format.Lz4 {
					// parquet-go's page path decodes LZ4 wrongly: a page
					// that compresses less than threefold reads as zeros
					// (v0.32.0: the codec decodes into a buffer of its
					// own, which the page does not keep), and a corrupt
					// block grows its buffer without bound. The row
					// groups are read through pqarrow instead.
					return nil, fmt.Errorf("%w: %s: column %s: an LZ4 chunk the direct page reader does not read", ErrNoPointRead, add.Path, l.Schema.Fields[c].Name)
				}
				err = readChunkAt(chunks[pc.leaf], pc.conv, pc.maxDef, rs[i:j], first, out[c][i:j])
			}
			if err != nil {
				return nil, fmt.Errorf("read rows of %s: column %s: %w", add.Path, l.Schema.Fields[c].Name, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		first += n
	}
	return out, nil
}

// pointColumn maps one table column to its file leaf (-1: absent).
type pointColumn struct {
	leaf   int
	typ    pq.Type // the leaf's Parquet type
	conv   func(pq.Value) schema.Value
	maxDef byte // the leaf's definition level when a value is present
}

// pointColumns maps the layout's columns to the file's top-level leaves
// and picks each one's conversion, or returns ErrNoPointRead.
func (l Layout) pointColumns(pf *pq.File) ([]pointColumn, error) {
	sc := pf.Schema()
	top := map[string]pq.Field{}
	for _, f := range sc.Fields() {
		top[f.Name()] = f
	}
	cols := make([]pointColumn, len(l.Schema.Fields))
	for i, f := range l.Schema.Fields {
		if f.Type == delta.Void {
			return nil, fmt.Errorf("%w: void column %s", ErrNoPointRead, f.Name)
		}
		name := l.physicalName(f)
		ff, ok := top[name]
		if !ok {
			cols[i].leaf = -1
			continue
		}
		leaf, ok := sc.Lookup(name)
		if !ff.Leaf() || ff.Repeated() || !ok || leaf.MaxRepetitionLevel != 0 {
			return nil, fmt.Errorf("%w: nested column %s", ErrNoPointRead, f.Name)
		}
		conv := pointConversion(f.Type, ff.Type())
		if conv == nil {
			return nil, fmt.Errorf("%w: column %s: %s from %s", ErrNoPointRead, f.Name, f.Type, ff.Type())
		}
		cols[i] = pointColumn{leaf: leaf.ColumnIndex, typ: ff.Type(), conv: conv, maxDef: byte(leaf.MaxDefinitionLevel)}
	}
	return cols, nil
}

// pointConversion converts a file column's values to the table type's
// schema.Value as the Arrow path (Read, then Conform) reads them, or is
// nil for a pairing it does not take.
func pointConversion(t delta.DataType, ft pq.Type) func(pq.Value) schema.Value {
	kind := ft.Kind()
	var lt any
	if l := ft.LogicalType(); l != nil {
		lt = l.Value
	}
	switch t {
	case delta.Boolean:
		if kind == pq.Boolean {
			return func(v pq.Value) schema.Value { return schema.Bool(v.Boolean()) }
		}
	case delta.Byte, delta.Short, delta.Integer, delta.Date:
		if kind == pq.Int32 {
			return func(v pq.Value) schema.Value { return schema.Int(int64(v.Int32())) }
		}
	case delta.Long:
		switch kind {
		case pq.Int64:
			return func(v pq.Value) schema.Value { return schema.Int(v.Int64()) }
		case pq.Int32:
			return func(v pq.Value) schema.Value { return schema.Int(int64(v.Int32())) }
		}
	case delta.Float:
		if kind == pq.Float {
			return func(v pq.Value) schema.Value { return schema.Float(float64(v.Float())) }
		}
	case delta.Double:
		switch kind {
		case pq.Double:
			return func(v pq.Value) schema.Value { return schema.Float(v.Double()) }
		case pq.Float:
			return func(v pq.Value) schema.Value { return schema.Float(float64(v.Float())) }
		}
	case delta.String:
		if kind == pq.ByteArray {
			return func(v pq.Value) schema.Value { return schema.String(string(v.ByteArray())) }
		}
	case delta.Binary:
		if kind == pq.ByteArray {
			return func(v pq.Value) schema.Value { return schema.Bytes(append([]byte(nil), v.ByteArray()...)) }
		}
	case delta.Timestamp, delta.TimestampNTZ:
		if ts, ok := lt.(*format.TimestampType); ok && kind == pq.Int64 {
			if _, micros := ts.Unit.Value.(*format.MicroSeconds); micros {
				return func(v pq.Value) schema.Value { return schema.Int(v.Int64()) }
			}
		}
	}
	if d, ok := t.(delta.DecimalType); ok {
		fd, ok := lt.(*format.DecimalType)
		if !ok || fd.Scale != int32(d.Scale) || d.Precision > 38 {
			return nil
		}
		scale := int32(d.Scale)
		switch kind {
		case pq.Int32:
			return func(v pq.Value) schema.Value { return decimalValue(int64(v.Int32()), scale) }
		case pq.Int64:
			return func(v pq.Value) schema.Value { return decimalValue(v.Int64(), scale) }
		case pq.FixedLenByteArray, pq.ByteArray:
			return func(v pq.Value) schema.Value { return decimalBigEndian(v.ByteArray(), scale) }
		}
	}
	return nil
}

func decimalValue(unscaled int64, scale int32) schema.Value {
	hi := int64(0)
	if unscaled < 0 {
		hi = -1
	}
	return schema.Value{Kind: schema.KindDecimal, Hi: hi, I: unscaled, Scale: scale}
}

// decimalBigEndian reads a big-endian two's complement unscaled value of
// at most 16 bytes (a Parquet decimal's FIXED_LEN_BYTE_ARRAY form).
func decimalBigEndian(b []byte, scale int32) schema.Value {
	var hi, lo uint64
	if len(b) > 0 && b[0]&0x80 != 0 {
		hi, lo = math.MaxUint64, math.MaxUint64 // sign extension
	}
	for _, c := range b {
		hi = hi<<8 | lo>>56
		lo = lo<<8 | uint64(c)
	}
	return schema.Value{Kind: schema.KindDecimal, Hi: int64(hi), I: int64(lo), Scale: scale}
}

// readChunkAt reads the values of rows (file rows, ascending, all in the
// row group starting at file row first) from one column chunk into out.
// With the chunk's offset index, each wanted row's page is found there,
// read whole (no slicing copy) once, and its values are decoded forward
// only as far as the last row wanted in it. Without one (an old writer)
// the pages are read from the chunk's start. A page of plain values (no
// dictionary) is indexed directly (pageIndexer): only the definition
// levels before a row are counted, and only the row's own value is made.
func readChunkAt(cc pq.ColumnChunk, conv func(pq.Value) schema.Value, maxDef byte, rows []int64, first int64, out []schema.Value) error {
	oi, err := cc.OffsetIndex()
	if errors.Is(err, pq.ErrMissingOffsetIndex) {
		return readChunkScan(cc, conv, rows, first, out)
	}
	if err != nil {
		return fmt.Errorf("offset index: %w", err)
	}
	npages := oi.NumPages()
	starts := make([]int64, npages)
	for p := range starts {
		starts[p] = oi.FirstRowIndex(p)
	}
	pages := cc.Pages()
	defer pages.Close()
	var page pq.Page
	defer func() {
		if page != nil {
			pq.Release(page)
		}
	}()
	var values pq.ValueReader
	var scratch []pq.Value
	var direct *pageIndexer   // the page's values by index (nil: read them in order)
	cur, next := -1, int64(0) // the page read, the row its reader is at
	for k, r := range rows {
		local := r - first
		p := sort.Search(npages, func(i int) bool { return starts[i] > local }) - 1
		if p < 0 {
			return fmt.Errorf("row %d before the chunk's first page", r)
		}
		if p != cur {
			if page != nil {
				pq.Release(page)
				page = nil
			}
			if err := pages.SeekToRow(starts[p]); err != nil {
				return fmt.Errorf("seek to page %d of row %d: %w", p, r, err)
			}
			if page, err = pages.ReadPage(); err != nil {
				return fmt.Errorf("page %d of row %d: %w", p, r, err)
			}
			if n := page.NumRows(); starts[p]+n <= local {
				return fmt.Errorf("page %d holds rows %d-%d, not row %d (not a flat column?)", p, starts[p], starts[p]+n-1, local)
			}
			values, cur, next = page.Values(), p, starts[p]
			direct = newPageIndexer(page, maxDef)
		}
		if direct != nil {
			v, ok := direct.at(int(local - starts[p]))
			switch {
			case !ok:
				return fmt.Errorf("page %d holds %d values, not the value of row %d (not a flat column?)", p, page.NumValues(), r)
			case v.IsNull():
				out[k] = schema.Null
			default:
				out[k] = conv(v)
			}
			continue
		}
		want := int(local-next) + 1 // values to decode to reach the row
		if cap(scratch) < want {
			scratch = make([]pq.Value, want)
		}
		got, err := readAllValues(values, scratch[:want])
		if err != nil {
			return fmt.Errorf("values of page %d up to row %d: %w", p, r, err)
		}
		if got != want {
			return fmt.Errorf("page %d: %d values up to row %d, want %d (not a flat column)", p, got, r, want)
		}
		next = local + 1
		if v := scratch[want-1]; v.IsNull() {
			out[k] = schema.Null
		} else {
			out[k] = conv(v)
		}
	}
	return nil
}

// readChunkScan is readChunkAt for a chunk without an offset index:
// SeekToRow then reads the chunk's pages from its start.
func readChunkScan(cc pq.ColumnChunk, conv func(pq.Value) schema.Value, rows []int64, first int64, out []schema.Value) error {
	pages := cc.Pages()
	defer pages.Close()
	var buf []pq.Value
	var from, to int64 = -1, -1 // group rows buf holds: [from, to)
	for k, r := range rows {
		local := r - first
		if local >= to {
			if err := pages.SeekToRow(local); err != nil {
				return fmt.Errorf("seek to row %d: %w", r, err)
			}
			page, err := pages.ReadPage()
			if err != nil {
				return fmt.Errorf("page of row %d: %w", r, err)
			}
			n := page.NumRows()
			if n <= 0 {
				return fmt.Errorf("page of row %d holds no rows", r)
			}
			buf = append(buf[:0], make([]pq.Value, n)...)
			got, err := readAllValues(page.Values(), buf)
			if err != nil {
				return fmt.Errorf("values of the page of row %d: %w", r, err)
			}
			if int64(got) != n {
				return fmt.Errorf("page of row %d: %d values for %d rows (not a flat column)", r, got, n)
			}
			from, to = local, local+n
		}
		if v := buf[local-from]; v.IsNull() {
			out[k] = schema.Null
		} else {
			out[k] = conv(v)
		}
	}
	return nil
}

// pageIndexer finds the value of a flat column's row in a decoded page
// without materialising the values before it: the definition levels up
// to the row are counted (optional columns) and the row's value is taken
// from the page's plain data. Rows are asked for in ascending order.
type pageIndexer struct {
	defs   []byte // nil: a required column, value i is row i
	maxDef byte
	n      int                // values in the page's data
	value  func(int) pq.Value // the data's j-th value
	row    int                // rows counted so far
	seen   int                // values among them
}

// newPageIndexer indexes page, or returns nil when its values must be
// read in order: dictionary-encoded, repeated, or a kind not listed here.
func newPageIndexer(page pq.Page, maxDef byte) *pageIndexer {
	if page.Dictionary() != nil || len(page.RepetitionLevels()) > 0 {
		return nil
	}
	d := page.Data()
	x := &pageIndexer{defs: page.DefinitionLevels(), maxDef: maxDef}
	switch d.Kind() {
	case encoding.Boolean:
		bits := d.Boolean()
		x.n = len(bits) * 8
		x.value = func(j int) pq.Value { return pq.BooleanValue(bits[j>>3]>>(j&7)&1 != 0) }
	case encoding.Int32:
		v := d.Int32()
		x.n, x.value = len(v), func(j int) pq.Value { return pq.Int32Value(v[j]) }
	case encoding.Int64:
		v := d.Int64()
		x.n, x.value = len(v), func(j int) pq.Value { return pq.Int64Value(v[j]) }
	case encoding.Float:
		v := d.Float()
		x.n, x.value = len(v), func(j int) pq.Value { return pq.FloatValue(v[j]) }
	case encoding.Double:
		v := d.Double()
		x.n, x.value = len(v), func(j int) pq.Value { return pq.DoubleValue(v[j]) }
	case encoding.ByteArray:
		data, offs := d.ByteArray()
		if len(offs) == 0 {
			return nil
		}
		x.n = len(offs) - 1
		x.value = func(j int) pq.Value { return pq.ByteArrayValue(data[offs[j]:offs[j+1]:offs[j+1]]) }
	case encoding.FixedLenByteArray:
		data, size := d.FixedLenByteArray()
		if size <= 0 {
			return nil
		}
		x.n = len(data) / size
		x.value = func(j int) pq.Value { return pq.FixedLenByteArrayValue(data[j*size : (j+1)*size : (j+1)*size]) }
	default:
		return nil
	}
	if x.defs == nil && int64(x.n) < page.NumValues() {
		return nil // boolean data is padded to bytes; anything else short is not plain
	}
	return x
}

// at returns the value of the page's row i (a NULL value for a row without
// one); ok is false when the page does not hold it.
func (x *pageIndexer) at(i int) (v pq.Value, ok bool) {
	if x.defs == nil {
		if i >= x.n {
			return v, false
		}
		return x.value(i), true
	}
	if i >= len(x.defs) || i < x.row {
		return v, false
	}
	if x.row < i {
		// Flat columns: a level is 0 (NULL) or maxDef (a value).
		x.seen += bytes.Count(x.defs[x.row:i], []byte{x.maxDef})
		x.row = i
	}
	if x.defs[i] != x.maxDef {
		return pq.NullValue(), true
	}
	if x.seen >= x.n {
		return v, false
	}
	return x.value(x.seen), true
}

func readAllValues(r pq.ValueReader, buf []pq.Value) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.ReadValues(buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}
