package datafile

import (
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	pqlz4 "github.com/parquet-go/parquet-go/compress/lz4"
	pqsnappy "github.com/parquet-go/parquet-go/compress/snappy"
	pquncompressed "github.com/parquet-go/parquet-go/compress/uncompressed"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/pierrec/lz4/v4"
)

// The writer uses parquet-go, the project's Parquet library; arrow-go's
// pqarrow reads (it yields Arrow for every nested and legacy encoding).
// bench_test.go compares both writers on the same record.

// group is a Parquet group node whose fields keep the order given, where
// parquet-go's Group (a map) would sort them by name: files then list
// columns in table schema order, as other Delta writers do.
type group []pq.Field

func (group) ID() int                     { return 0 }
func (g group) String() string            { return fmt.Sprintf("group(%d fields)", len(g)) }
func (group) Type() pq.Type               { return pq.Group{}.Type() }
func (group) Optional() bool              { return false }
func (group) Repeated() bool              { return false }
func (group) Required() bool              { return true }
func (group) Leaf() bool                  { return false }
func (g group) Fields() []pq.Field        { return g }
func (group) Encoding() encoding.Encoding { return nil }
func (group) Compression() compress.Codec { return nil }
func (group) GoType() reflect.Type        { return reflect.TypeFor[any]() }

// field names a node inside a group.
type field struct {
	pq.Node
	name string
}

func (f field) Name() string { return f.name }

// Value is parquet-go's reflection hook; the encoder never uses reflection.
func (f field) Value(base reflect.Value) reflect.Value { return reflect.Value{} }

// parquetNode maps an Arrow type of ArrowType's range to a Parquet node
// with the protocol's physical and logical types. Every field is written
// optional: Delta nullability is enforced before encoding.
func parquetNode(f arrow.Field) (pq.Node, error) {
	var n pq.Node
	switch t := f.Type.(type) {
	case *arrow.BooleanType:
		n = pq.Leaf(pq.BooleanType)
	case *arrow.Int8Type:
		n = pq.Int(8)
	case *arrow.Int16Type:
		n = pq.Int(16)
	case *arrow.Int32Type:
		n = pq.Leaf(pq.Int32Type)
	case *arrow.Int64Type:
		n = pq.Leaf(pq.Int64Type)
	case *arrow.Float32Type:
		n = pq.Leaf(pq.FloatType)
	case *arrow.Float64Type:
		n = pq.Leaf(pq.DoubleType)
	case *arrow.StringType:
		n = pq.String()
	case *arrow.BinaryType:
		n = pq.Leaf(pq.ByteArrayType)
	case *arrow.Date32Type:
		n = pq.Date()
	case *arrow.TimestampType:
		if t.Unit != arrow.Microsecond {
			return nil, fmt.Errorf("column %q: timestamps are written in microseconds, not %s", f.Name, t.Unit)
		}
		n = pq.TimestampAdjusted(pq.Microsecond, t.TimeZone != "")
	case *arrow.Decimal128Type:
		n = pq.Decimal(int(t.Scale), int(t.Precision), decimalPhysical(t.Precision))
	case *arrow.ListType:
		en, err := parquetNode(t.ElemField())
		if err != nil {
			return nil, err
		}
		if !t.ElemField().Nullable {
			en = pq.Required(en)
		}
		n = pq.List(en)
	case *arrow.MapType:
		kn, err := parquetNode(t.KeyField())
		if err != nil {
			return nil, err
		}
		vn, err := parquetNode(t.ItemField())
		if err != nil {
			return nil, err
		}
		if !t.ItemField().Nullable {
			vn = pq.Required(vn)
		}
		n = pq.Map(kn, vn)
	case *arrow.StructType:
		g := make(group, 0, t.NumFields())
		for _, c := range t.Fields() {
			cn, err := parquetNode(c)
			if err != nil {
				return nil, err
			}
			g = append(g, field{Node: cn, name: c.Name})
		}
		n = g
	default:
		return nil, fmt.Errorf("column %q: writing %s is not supported yet", f.Name, f.Type)
	}
	n = pq.Optional(n)
	if v, ok := f.Metadata.GetValue("PARQUET:field_id"); ok {
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("column %q: field id %q: %w", f.Name, v, err)
		}
		n = pq.FieldID(n, id)
	}
	return n, nil
}

// decimalPhysical is the protocol's decimal storage: INT32 up to precision
// 9, INT64 up to 18, else the fewest bytes of big-endian two's complement.
func decimalPhysical(p int32) pq.Type {
	switch {
	case p <= 9:
		return pq.Int32Type
	case p <= 18:
		return pq.Int64Type
	}
	return pq.FixedLenByteArrayType(decimalBytes(p))
}

// decimalBytes is the smallest byte count holding every unscaled value of
// precision p, as Spark sizes FIXED_LEN_BYTE_ARRAY decimals.
func decimalBytes(p int32) int {
	n := 1
	for {
		// the largest positive value of n bytes is 2^(8n-1)-1
		if float64(8*n-1)*0.30102999566398120 >= float64(p) {
			return n
		}
		n++
	}
}

// lz4Raw is Parquet's LZ4_RAW codec written with LZ4's fast block
// compressor, a pooled one: parquet-go's codec compresses with LZ4's slow
// high-compression level by default, and at its fast level builds a
// compressor for every page, clearing its 128 KiB hash table, four times
// the size of a merge-on-read page.
type lz4Raw struct{ pqlz4.Codec }

var lz4Compressors = sync.Pool{New: func() any { return new(lz4.Compressor) }}

func (*lz4Raw) Encode(dst, src []byte) ([]byte, error) {
	n := lz4.CompressBlockBound(len(src))
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	c := lz4Compressors.Get().(*lz4.Compressor)
	m, err := c.CompressBlock(src, dst[:n])
	lz4Compressors.Put(c)
	if err != nil {
		return nil, fmt.Errorf("lz4: %w", err)
	}
	return dst[:m], nil
}

// encodeParquetTo writes rec (physical schema) to out as one Parquet file
// with one row group per o.rowGroup rows.
func encodeParquetTo(out io.Writer, rec arrow.RecordBatch, o writeOptions) error {
	defer rec.Release()
	var codec compress.Codec
	switch o.codec {
	case Zstd:
		codec = &pqzstd.Codec{}
	case Snappy:
		codec = &pqsnappy.Codec{}
	case Lz4Raw:
		codec = &lz4Raw{}
	case Uncompressed:
		codec = &pquncompressed.Codec{}
	default:
		return fmt.Errorf("encode parquet: unknown codec %q", o.codec)
	}
	root := make(group, 0, rec.NumCols())
	for _, f := range rec.Schema().Fields() {
		n, err := parquetNode(f)
		if err != nil {
			return fmt.Errorf("encode parquet: %w", err)
		}
		if o.plain && n.Leaf() && n.Type().Kind() == pq.ByteArray {
			n = pq.Encoded(n, &pq.Plain)
		}
		if o.rawFixed[f.Name] && n.Leaf() && n.Type().Kind() != pq.ByteArray {
			n = pq.Compressed(n, &pquncompressed.Codec{})
		}
		root = append(root, field{Node: n, name: f.Name})
	}
	if flatWritable(rec, o) {
		codecs := make([]compress.Codec, len(root))
		for i, f := range rec.Schema().Fields() {
			codecs[i] = codec
			if o.rawFixed[f.Name] && flatKindOf(f.Type) != flatBinary {
				codecs[i] = &pquncompressed.Codec{}
			}
		}
		if err := encodeFlat(&offsetWriter{w: out}, rec, root, codecs, o); err != nil {
			return fmt.Errorf("encode parquet: %w", err)
		}
		return nil
	}
	sc := pq.NewSchema("spark_schema", root)
	// No statistics in page headers (the flat writer writes none either):
	// parquet-go puts each page's full minimum and maximum there, twice,
	// so a column of 1 MiB values wrote 4 MiB headers, a file four times
	// its data, that arrow-go's reader refused ("deserializing page header
	// failed"). Pages are pruned by the column index, whose bounds are
	// truncated.
	wopts := []pq.WriterOption{sc, pq.Compression(codec), pq.CreatedBy("cdcapply", "", ""), pq.DataPageStatistics(false)}
	if o.page > 0 {
		wopts = append(wopts, pq.PageBufferSize(o.page))
	}
	w := pq.NewWriter(out, wopts...)
	leafStart := make([]int, len(root)) // each top-level field's first leaf
	for i, leaves := 0, 0; i < len(root); i++ {
		leafStart[i] = leaves
		leaves += countLeaves(root[i])
	}
	page := o.page
	if page <= 0 {
		page = pq.DefaultPageBufferSize
	}
	n := rec.NumRows()
	for start := int64(0); start < n || start == 0; start += o.rowGroup {
		end := min(n, start+o.rowGroup)
		if err := writeRowGroup(w, rec, start, end, leafStart, page); err != nil {
			return fmt.Errorf("encode parquet: %w", err)
		}
		if n == 0 {
			break
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("encode parquet: %w", err)
	}
	return nil
}

func countLeaves(n pq.Node) int {
	if n.Leaf() {
		return 1
	}
	c := 0
	for _, f := range n.Fields() {
		c += countLeaves(f)
	}
	return c
}

// writeRowGroup writes rows [start, end) of rec as one row group. Its
// top-level columns are encoded on up to GOMAXPROCS goroutines, each into
// its own column writers (parquet-go's concurrent row group), then the
// group is committed. A column outside lists reaches its writer a
// quarter page at a time (chunked), so pages are cut near page bytes
// whatever the value size; a top-level primitive column needs no slots.
func writeRowGroup(w *pq.Writer, rec arrow.RecordBatch, start, end int64, leafStart []int, page int) error {
	rg := w.BeginRowGroup()
	cols := rg.ColumnWriters()
	ncol := int(rec.NumCols())
	errs := make([]error, ncol)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), ncol) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := leafEncoder{cols: cols, chunk: max(page/4, 1024)}
			rows := make([]slot, end-start)
			for c := range next {
				col := array.NewSlice(rec.Column(c), start, end)
				e.next = leafStart[c]
				switch col.(type) {
				case *array.Struct, *array.List, *array.Map:
					for i := range rows {
						rows[i] = slot{idx: i}
					}
					errs[c] = e.column(col, rows, true, 0)
				default:
					errs[c] = e.leaf(col, nil, false)
				}
				col.Release()
			}
		}()
	}
	for c := range ncol {
		next <- c
	}
	close(next)
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			return fmt.Errorf("column %q: %w", rec.ColumnName(c), err)
		}
	}
	_, err := rg.Commit()
	return err
}

// slot is one value position of a leaf column: the index of the value in
// the array at the current nesting level (-1 once an enclosing value is
// null or an enclosing list empty), the definition level reached so far
// and the repetition level the position starts with.
type slot struct {
	idx      int
	def, rep int
}

// leafEncoder turns Arrow columns into parquet-go values with repetition
// and definition levels, one leaf column buffer after another in schema
// order.
type leafEncoder struct {
	cols  []*pq.ColumnWriter
	next  int
	vals  []pq.Value
	chunk int // bytes of a flat column's values handed to its writer at once
}

// column encodes the positions in slots of arr, a field that is optional
// (adds a definition level when not null) unless required, inside
// repDepth enclosing lists.
func (e *leafEncoder) column(arr arrow.Array, slots []slot, optional bool, repDepth int) error {
	if optional {
		for i := range slots {
			if s := &slots[i]; s.idx >= 0 {
				if arr.IsNull(s.idx) {
					s.idx = -1
				} else {
					s.def++
				}
			}
		}
	}
	switch a := arr.(type) {
	case *array.Struct:
		for f := 0; f < a.NumField(); f++ {
			child := append([]slot(nil), slots...)
			// Every struct field is written optional (see parquetNode).
			if err := e.column(a.Field(f), child, true, repDepth); err != nil {
				return err
			}
		}
		return nil
	case *array.List:
		return e.repeated(a, a.ListValues(), slots, a.DataType().(*arrow.ListType).ElemField().Nullable, repDepth)
	case *array.Map:
		return e.repeated(a, a.ListValues(), slots, true, repDepth)
	}
	return e.leaf(arr, slots, repDepth > 0)
}

// repeated encodes a list (or map) whose elements are values: a defined,
// non-empty list expands into one position per element, the first keeping
// the list's repetition level and the rest repeating at this depth.
func (e *leafEncoder) repeated(list array.ListLike, values arrow.Array, slots []slot, elemOptional bool, repDepth int) error {
	var out []slot
	for _, s := range slots {
		if s.idx < 0 {
			out = append(out, s)
			continue
		}
		from, to := list.ValueOffsets(s.idx)
		if from == to {
			out = append(out, slot{idx: -1, def: s.def, rep: s.rep})
			continue
		}
		for j := from; j < to; j++ {
			rep := repDepth + 1
			if j == from {
				rep = s.rep
			}
			out = append(out, slot{idx: int(j), def: s.def + 1, rep: rep})
		}
	}
	if m, ok := values.(*array.Struct); ok && isMapEntries(list) {
		// key (required) then value, each over the same positions.
		keys := append([]slot(nil), out...)
		if err := e.column(m.Field(0), keys, false, repDepth+1); err != nil {
			return err
		}
		mt := list.DataType().(*arrow.MapType)
		return e.column(m.Field(1), out, mt.ItemField().Nullable, repDepth+1)
	}
	return e.column(values, out, elemOptional, repDepth+1)
}

func isMapEntries(list array.ListLike) bool {
	_, ok := list.DataType().(*arrow.MapType)
	return ok
}

// leafChunk bounds how many values of a column outside lists are built
// before they are handed to its writer, so that they are handed over
// while still in cache: building a row group's values first (24 bytes
// each, 2.4 MB for a 100k-row column) made storing them cost about as
// much as parquet-go's encoding.
const leafChunk = 8192

// leaf writes one primitive column's values at the positions in slots;
// slots nil: a top-level column, each of arr's values in turn (its slots
// would only say that a value has definition level 1 and a null 0).
func (e *leafEncoder) leaf(arr arrow.Array, slots []slot, repeated bool) error {
	leaf := e.next
	e.next++
	get, err := valueFunc(arr)
	if err != nil {
		return err
	}
	if !repeated {
		return e.chunked(arr, slots, leaf, get)
	}
	// Values of one row must reach a writer together: hand them all.
	if cap(e.vals) < len(slots) {
		e.vals = make([]pq.Value, len(slots))
	}
	vals := e.vals[:len(slots)]
	for k, s := range slots {
		v := pq.Value{}
		if s.idx >= 0 {
			v = get(s.idx)
		}
		vals[k] = v.Level(s.rep, s.def, leaf)
	}
	if _, err := e.cols[leaf].WriteRowValues(vals); err != nil {
		return fmt.Errorf("write values: %w", err)
	}
	return nil
}

// chunked hands a column's values (at slots, or with slots nil each of
// arr's values in turn) to leaf's writer about e.chunk bytes at a time, so
// that parquet-go cuts pages near the page size whatever the value size
// (handed a row group's values at once, it cuts only every 1024 values,
// which made a wide text column's pages hundreds of KiB and a point read
// decompress all of one for a single value). The levels are set in place:
// parquet-go's Level does not inline, and cost as much as the rest of the
// loop.
func (e *leafEncoder) chunked(arr arrow.Array, slots []slot, leaf int, get func(int) pq.Value) error {
	n := len(slots)
	if slots == nil {
		n = arr.Len()
	}
	if cap(e.vals) < min(n, leafChunk) {
		e.vals = make([]pq.Value, min(n, leafChunk))
	}
	for k := 0; k < n; {
		vals := e.vals[:min(n-k, leafChunk)]
		m, bytes := 0, 0
		for ; m < len(vals) && bytes < e.chunk; k, m = k+1, m+1 {
			idx, def, rep := k, 1, 0
			if slots != nil {
				idx, def, rep = slots[k].idx, slots[k].def, slots[k].rep
			} else if arr.IsNull(k) {
				idx, def = -1, 0
			}
			v := pq.Value{}
			if idx >= 0 {
				v = get(idx)
			}
			v.SetRepetitionLevel(rep)
			v.SetDefinitionLevel(def)
			v.SetColumnIndex(leaf)
			vals[m] = v
			switch v.Kind() {
			case pq.ByteArray, pq.FixedLenByteArray:
				bytes += 4 + len(v.ByteArray())
			default:
				bytes += 8
			}
		}
		if _, err := e.cols[leaf].WriteRowValues(vals[:m]); err != nil {
			return fmt.Errorf("write values: %w", err)
		}
	}
	return nil
}

// valueFunc returns the function that makes arr's value i a parquet-go
// value: the type is decided once per column, not once per value.
func valueFunc(arr arrow.Array) (func(i int) pq.Value, error) {
	switch a := arr.(type) {
	case *array.Boolean:
		return func(i int) pq.Value { return pq.BooleanValue(a.Value(i)) }, nil
	case *array.Int8:
		return func(i int) pq.Value { return pq.Int32Value(int32(a.Value(i))) }, nil
	case *array.Int16:
		return func(i int) pq.Value { return pq.Int32Value(int32(a.Value(i))) }, nil
	case *array.Int32:
		return func(i int) pq.Value { return pq.Int32Value(a.Value(i)) }, nil
	case *array.Int64:
		return func(i int) pq.Value { return pq.Int64Value(a.Value(i)) }, nil
	case *array.Float32:
		return func(i int) pq.Value { return pq.FloatValue(a.Value(i)) }, nil
	case *array.Float64:
		return func(i int) pq.Value { return pq.DoubleValue(a.Value(i)) }, nil
	case *array.String:
		// Zero-copy view of the Arrow buffer: parquet-go copies the bytes
		// into its page buffer inside WriteRowValues, before the record
		// can be released, and never writes through the slice.
		return func(i int) pq.Value {
			str := a.Value(i)
			return pq.ByteArrayValue(unsafe.Slice(unsafe.StringData(str), len(str)))
		}, nil
	case *array.Binary:
		return func(i int) pq.Value { return pq.ByteArrayValue(a.Value(i)) }, nil
	case *array.Date32:
		return func(i int) pq.Value { return pq.Int32Value(int32(a.Value(i))) }, nil
	case *array.Timestamp:
		return func(i int) pq.Value { return pq.Int64Value(int64(a.Value(i))) }, nil
	case *array.Decimal128:
		precision := a.DataType().(*arrow.Decimal128Type).Precision
		switch {
		case precision > 18:
			fixed := decimalBytes(precision)
			return func(i int) pq.Value {
				d := a.Value(i)
				var be [16]byte
				binary.BigEndian.PutUint64(be[:8], uint64(d.HighBits()))
				binary.BigEndian.PutUint64(be[8:], d.LowBits())
				return pq.FixedLenByteArrayValue(be[16-fixed:])
			}, nil
		case precision <= 9:
			return func(i int) pq.Value { return pq.Int32Value(int32(a.Value(i).LowBits())) }, nil
		default:
			return func(i int) pq.Value { return pq.Int64Value(int64(a.Value(i).LowBits())) }, nil
		}
	}
	return nil, fmt.Errorf("writing %s is not supported yet", arr.DataType())
}
