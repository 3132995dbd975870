package datafile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// The flat writer: a file whose columns are all top-level primitives of
// the types below, with PLAIN values (PlainValues: merge-on-read files),
// is written here instead of by parquet-go. parquet-go takes every value
// as a 24-byte pq.Value, buffers it, and re-reads it to encode a page and
// its bounds: about 1.2 s of the 1M-key bench's 2.5 s of file encoding.
// Here a page's PLAIN values, definition levels and bounds come from the
// Arrow buffers in one pass. The file is the same as parquet-go's in
// every respect readers use: schema elements, column orders, data pages
// version 2 (PLAIN values, RLE definition levels), one codec per column
// chunk, chunk statistics, and the page index (column index with each
// page's bounds, offset index). parquet-go and arrow-go read it back in
// the tests, delta-rs in TestMergeOnReadReadByDeltaRS.

// flatKind is how the flat writer encodes a column.
type flatKind uint8

const (
	flatBool   flatKind = iota + 1
	flatInt32           // INT32: integers up to 32 bits, dates, decimals of up to 9 digits
	flatInt64           // INT64: longs, timestamps, decimals of 10 to 18 digits
	flatBinary          // BYTE_ARRAY: strings, binaries
	flatFloat           // FLOAT
	flatDouble          // DOUBLE
	flatFixed           // FIXED_LEN_BYTE_ARRAY: decimals of more than 18 digits, big-endian
)

// flatKindOf returns how t is written, or 0 when the flat writer does not
// write it (floats, wide decimals and nested types go to parquet-go).
func flatKindOf(t arrow.DataType) flatKind {
	switch t := t.(type) {
	case *arrow.BooleanType:
		return flatBool
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Date32Type:
		return flatInt32
	case *arrow.Int64Type, *arrow.TimestampType:
		return flatInt64
	case *arrow.Decimal128Type:
		switch {
		case t.Precision <= 9:
			return flatInt32
		case t.Precision <= 18:
			return flatInt64
		}
		return flatFixed
	case *arrow.StringType, *arrow.BinaryType:
		return flatBinary
	case *arrow.Float32Type:
		return flatFloat
	case *arrow.Float64Type:
		return flatDouble
	}
	return 0
}

// flatWritable reports whether the flat writer writes rec with options o.
func flatWritable(rec arrow.RecordBatch, o writeOptions) bool {
	if !o.plain || !flatWriter {
		return false
	}
	for _, f := range rec.Schema().Fields() {
		if flatKindOf(f.Type) == 0 {
			return false
		}
	}
	return true
}

// flatWriter lets tests write the same record through parquet-go.
var flatWriter = true

// flatChunk is one column chunk being encoded: its pages (headers and
// bodies back to back), their locations relative to the chunk's start,
// and the page index and statistics that describe them.
type flatChunk struct {
	buf          *bytes.Buffer
	locs         []format.PageLocation
	index        format.ColumnIndex
	uncompressed int64
	values       int64
	nulls        int64
	min, max     []byte // the chunk's bounds, PLAIN (byte arrays without a length)
	// noBounds: a page held values but only NaNs, which have no order:
	// the chunk is written without bounds or a column index (absent
	// bounds prune nothing).
	noBounds bool
	err      error
}

// encodeFlat writes rec (physical schema) to out as one Parquet file with
// one row group per o.rowGroup rows, its columns encoded on up to
// GOMAXPROCS goroutines.
func encodeFlat(out *offsetWriter, rec arrow.RecordBatch, root group, codecs []compress.Codec, o writeOptions) error {
	page := o.page
	if page <= 0 {
		page = pq.DefaultPageBufferSize
	}
	ncol := int(rec.NumCols())
	n := rec.NumRows()
	out.WriteString("PAR1")
	meta := format.FileMetaData{Version: 2, NumRows: n, CreatedBy: "cdcapply"}
	meta.Schema = append(meta.Schema, format.SchemaElement{Name: "spark_schema", NumChildren: thrift.New(int32(len(root)))})
	for _, f := range root {
		meta.Schema = append(meta.Schema, schemaElement(f))
		meta.ColumnOrders = append(meta.ColumnOrders, *f.Type().ColumnOrder())
	}
	var indexes []format.ColumnIndex
	var offsets []format.OffsetIndex
	var chunkAt [][2]int // per column chunk: row group, column
	// The row groups' column chunks are encoded on up to GOMAXPROCS
	// workers, two row groups in flight: a group's chunks are written
	// (in order) once all are encoded, while the workers go on with the
	// next group's. One group at a time left a core idle while the
	// widest column's chunk finished (a 256-byte text column's took
	// longer than the other thirteen together; BenchmarkWriteRowGroups).
	// Within a group the chunks are handed out widest first.
	type task struct {
		slot       int
		c          int
		start, end int64
	}
	const inFlight = 2
	set := takeChunkSet(inFlight * ncol) // column chunks' pages, reused from file to file
	defer putChunkSet(set)
	var slots [inFlight]struct {
		chunks []flatChunk
		rows   int64
		wg     sync.WaitGroup
	}
	for i := range slots {
		slots[i].chunks = make([]flatChunk, ncol)
	}
	order := widestFirst(rec)
	tasks := make(chan task)
	var workers sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), ncol) {
		workers.Go(func() {
			var scratch flatScratch
			for t := range tasks {
				ch := &slots[t.slot].chunks[t.c]
				col := array.NewSlice(rec.Column(t.c), t.start, t.end)
				ch.err = ch.encode(col, codecs[t.c], page, o.textPageRows, &scratch)
				col.Release()
				slots[t.slot].wg.Done()
			}
		})
	}
	defer func() { // on every return: a worker holds no chunk past it
		close(tasks)
		workers.Wait()
	}()
	// write waits for the group in slot and writes its chunks.
	write := func(slot int) error {
		slots[slot].wg.Wait()
		chunks, rows := slots[slot].chunks, slots[slot].rows
		rg := format.RowGroup{NumRows: rows, FileOffset: int64(out.Len()), Ordinal: int16(len(meta.RowGroups))}
		for c := range chunks {
			ch := &chunks[c]
			if ch.err != nil {
				return fmt.Errorf("column %q: %w", rec.ColumnName(c), ch.err)
			}
			at := int64(out.Len())
			for i := range ch.locs {
				ch.locs[i].Offset += at
			}
			physical := root[c].Type().PhysicalType()
			md := format.ColumnMetaData{
				Type:                  *physical,
				Encoding:              []format.Encoding{format.Plain, format.RLE},
				PathInSchema:          []string{root[c].Name()},
				Codec:                 codecs[c].CompressionCodec(),
				NumValues:             ch.values,
				TotalUncompressedSize: ch.uncompressed,
				TotalCompressedSize:   int64(ch.buf.Len()),
				DataPageOffset:        at,
				Statistics:            format.Statistics{NullCount: ch.nulls, MinValue: ch.min, MaxValue: ch.max},
			}
			if ch.noBounds {
				md.Statistics.MinValue, md.Statistics.MaxValue = nil, nil
			}
			out.Write(ch.buf.Bytes())
			rg.Columns = append(rg.Columns, format.ColumnChunk{FileOffset: at, MetaData: md})
			rg.TotalByteSize += ch.uncompressed
			rg.TotalCompressedSize += int64(ch.buf.Len())
			if ch.noBounds {
				ch.index = format.ColumnIndex{}
			}
			indexes = append(indexes, ch.index)
			offsets = append(offsets, format.OffsetIndex{PageLocations: ch.locs})
			chunkAt = append(chunkAt, [2]int{len(meta.RowGroups), c})
		}
		meta.RowGroups = append(meta.RowGroups, rg)
		return nil
	}
	group := 0                                              // groups handed out
	for start := int64(0); start < n; start += o.rowGroup { // no rows: no row group, as parquet-go writes
		end := min(n, start+o.rowGroup)
		i := group % inFlight
		if group >= inFlight {
			if err := write(i); err != nil { // the group the slot held
				return err
			}
		}
		slots[i].rows = end - start
		for c := range ncol {
			b := set.bufs[i*ncol+c]
			b.Reset()
			slots[i].chunks[c] = flatChunk{buf: b}
		}
		slots[i].wg.Add(ncol)
		for _, c := range order {
			tasks <- task{i, c, start, end}
		}
		group++
	}
	for g := max(0, group-inFlight); g < group; g++ {
		if err := write(g % inFlight); err != nil {
			return err
		}
	}
	// The page index after the row groups: every column index, then
	// every offset index.
	enc := thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(out))
	for i, at := range chunkAt {
		cc := &meta.RowGroups[at[0]].Columns[at[1]]
		if indexes[i].NullPages == nil {
			continue // no bounds (noBounds)
		}
		cc.ColumnIndexOffset = int64(out.Len())
		if err := enc.Encode(&indexes[i]); err != nil {
			return fmt.Errorf("column index: %w", err)
		}
		cc.ColumnIndexLength = int32(int64(out.Len()) - cc.ColumnIndexOffset)
	}
	for i, at := range chunkAt {
		cc := &meta.RowGroups[at[0]].Columns[at[1]]
		cc.OffsetIndexOffset = int64(out.Len())
		if err := enc.Encode(&offsets[i]); err != nil {
			return fmt.Errorf("offset index: %w", err)
		}
		cc.OffsetIndexLength = int32(int64(out.Len()) - cc.OffsetIndexOffset)
	}
	footer := out.Len()
	if err := enc.Encode(&meta); err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	var tail [8]byte
	binary.LittleEndian.PutUint32(tail[:4], uint32(out.Len()-footer))
	copy(tail[4:], "PAR1")
	out.Write(tail[:])
	return out.err
}

// widestFirst returns rec's column indexes ordered by the bytes of their
// Arrow buffers, widest first (ties in column order): the order a row
// group's chunks are handed to the encoding workers, so the longest is
// not started last.
func widestFirst(rec arrow.RecordBatch) []int {
	size := make([]int, rec.NumCols())
	order := make([]int, len(size))
	for c := range size {
		order[c] = c
		for _, b := range rec.Column(c).Data().Buffers() {
			if b != nil {
				size[c] += b.Len()
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return size[b] - size[a] })
	return order
}

// schemaElement describes a top-level column as parquet-go's writer does
// (its physical, logical and converted types, a decimal's scale and
// precision, its field id), always optional.
func schemaElement(f pq.Field) format.SchemaElement {
	t := f.Type()
	e := format.SchemaElement{Name: f.Name(), FieldID: int32(f.ID()), RepetitionType: thrift.New(format.Optional)}
	if lt := t.LogicalType(); lt != nil {
		e.LogicalType = *lt
		if d, ok := lt.Value.(*format.DecimalType); ok {
			e.Scale, e.Precision = thrift.New(d.Scale), thrift.New(d.Precision)
		}
	}
	if n := int32(t.Length()); n > 0 {
		e.TypeLength = thrift.New(n)
	}
	if pt := t.PhysicalType(); pt != nil {
		e.Type = thrift.New(*pt)
	}
	if ct := t.ConvertedType(); ct != nil {
		e.ConvertedType = thrift.New(*ct)
	}
	return e
}

// flatScratch holds one goroutine's buffers between pages.
type flatScratch struct {
	levels, header bytes.Buffer
	values         []byte // a page's PLAIN values
	compressed     []byte
	enc            *thrift.Encoder
}

// encode writes arr's values as pages of about page bytes of values; a
// byte array column's pages also end at textRows rows (0: no bound).
func (ch *flatChunk) encode(arr arrow.Array, codec compress.Codec, page, textRows int, s *flatScratch) error {
	kind := flatKindOf(arr.DataType())
	n := arr.Len()
	ch.values = int64(n)
	ch.index.BoundaryOrder = format.Unordered
	var i32 []int32 // the values of a column whose Arrow values are its PLAIN ones
	var i64 []int64
	switch a := arr.(type) {
	case *array.Int32:
		i32 = a.Int32Values()
	case *array.Date32:
		i32 = arrow.Int32Traits.CastFromBytes(arrow.Date32Traits.CastToBytes(a.Date32Values()))
	case *array.Int64:
		i64 = a.Int64Values()
	case *array.Timestamp:
		i64 = arrow.Int64Traits.CastFromBytes(arrow.TimestampTraits.CastToBytes(a.TimestampValues()))
	}
	for first := 0; first < n; { // encodeFlat writes no row group without rows
		var lo, hi pageBounds
		var end, nulls int
		s.values = s.values[:0]
		switch {
		case i32 != nil:
			s.values, end, nulls = plainInts(s.values, i32, arr, first, page, &lo, &hi)
		case i64 != nil:
			s.values, end, nulls = plainInts(s.values, i64, arr, first, page, &lo, &hi)
		default:
			last := n
			if kind == flatBinary && textRows > 0 {
				last = min(n, first+textRows)
			}
			for end = first; end < last && len(s.values) < page; end++ {
				if arr.IsNull(end) {
					nulls++
					continue
				}
				s.values = appendPlain(s.values, arr, kind, end, &lo, &hi)
			}
			if kind == flatBool {
				s.values = packBools(s.values, arr, first, end)
			}
		}
		if err := ch.page(arr, first, end, nulls, kind, &lo, &hi, codec, s); err != nil {
			return err
		}
		first = end
	}
	return nil
}

// plainInts appends the PLAIN values of rows from first of an integer
// column whose Arrow values are vals, until about page bytes, and widens
// the page's bounds; it returns the row after the last and the NULLs.
func plainInts[T int32 | int64](b []byte, vals []T, arr arrow.Array, first, page int, lo, hi *pageBounds) (out []byte, end, nulls int) {
	bm, off := arr.NullBitmapBytes(), arr.Data().Offset()
	hasNulls := arr.NullN() > 0
	var mn, mx T
	set := false
	wide := unsafe.Sizeof(mn) == 8
	for end = first; end < len(vals) && len(b) < page; end++ {
		if hasNulls && !bitutil.BitIsSet(bm, off+end) {
			nulls++
			continue
		}
		x := vals[end]
		switch {
		case !set:
			mn, mx, set = x, x, true
		case x < mn:
			mn = x
		case x > mx:
			mx = x
		}
		if wide {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		} else {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	}
	if set {
		lo.i, lo.set, hi.i, hi.set = int64(mn), true, int64(mx), true
	}
	return b, end, nulls
}

// page writes the values of rows [first, end) that encode put in
// s.values, with their definition levels, as one version 2 data page.
func (ch *flatChunk) page(arr arrow.Array, first, end, nulls int, kind flatKind, lo, hi *pageBounds, codec compress.Codec, s *flatScratch) error {
	s.levels.Reset()
	appendLevels(&s.levels, arr, first, end, nulls)
	body := s.values
	cb, err := codec.Encode(s.compressed[:0], body)
	if err != nil {
		return fmt.Errorf("compress a page: %w", err)
	}
	s.compressed = cb
	rows := int32(end - first)
	h := format.PageHeader{
		Type:                 format.DataPageV2,
		UncompressedPageSize: int32(s.levels.Len() + len(body)),
		CompressedPageSize:   int32(s.levels.Len() + len(cb)),
		DataPageHeaderV2: thrift.New(format.DataPageHeaderV2{
			NumValues: rows, NumNulls: int32(nulls), NumRows: rows, Encoding: format.Plain,
			DefinitionLevelsByteLength: int32(s.levels.Len()),
			IsCompressed:               thrift.New(codec.CompressionCodec() != format.Uncompressed),
		}),
	}
	s.header.Reset()
	if s.enc == nil {
		s.enc = thrift.NewEncoder(new(thrift.CompactProtocol).NewWriter(&s.header))
	}
	if err := s.enc.Encode(&h); err != nil {
		return fmt.Errorf("page header: %w", err)
	}
	ch.locs = append(ch.locs, format.PageLocation{Offset: int64(ch.buf.Len()), CompressedPageSize: int32(s.header.Len()) + h.CompressedPageSize, FirstRowIndex: int64(first)})
	ch.uncompressed += int64(s.header.Len()) + int64(h.UncompressedPageSize)
	ch.buf.Write(s.header.Bytes())
	ch.buf.Write(s.levels.Bytes())
	ch.buf.Write(cb)
	ch.nulls += int64(nulls)
	allNull := nulls == end-first
	ch.index.NullPages = append(ch.index.NullPages, allNull)
	ch.index.NullCounts = append(ch.index.NullCounts, int64(nulls))
	if allNull || !lo.set {
		// All NULL, or (floats) all NaN: the latter leaves the chunk
		// without bounds.
		ch.noBounds = ch.noBounds || !allNull
		ch.index.MinValues = append(ch.index.MinValues, []byte{})
		ch.index.MaxValues = append(ch.index.MaxValues, []byte{})
		return nil
	}
	mn, mx := lo.bytes(kind), hi.bytes(kind)
	imn, imx := mn, mx
	if kind == flatBinary {
		imn, imx = indexMin(mn), indexMax(mx)
	}
	ch.index.MinValues = append(ch.index.MinValues, imn)
	ch.index.MaxValues = append(ch.index.MaxValues, imx)
	if ch.min == nil || compareBound(kind, mn, ch.min) < 0 {
		ch.min = mn
	}
	if ch.max == nil || compareBound(kind, mx, ch.max) > 0 {
		ch.max = mx
	}
	return nil
}

// indexBoundBytes is the longest byte array bound a column index holds,
// as parquet-go writes it: every reader that opens the file reads the
// page index, and a wide text column's full values made it many times
// larger. Chunk statistics keep the full values, as parquet-go's do.
const indexBoundBytes = 16

// indexMin shortens a byte array minimum to a prefix (still a lower
// bound).
func indexMin(b []byte) []byte {
	if len(b) <= indexBoundBytes {
		return b
	}
	return b[:indexBoundBytes:indexBoundBytes]
}

// indexMax shortens a byte array maximum to an upper bound of at most
// indexBoundBytes: the prefix with its last byte below 0xff raised by one
// and the rest dropped; a prefix of only 0xff bytes keeps the value whole.
func indexMax(b []byte) []byte {
	if len(b) <= indexBoundBytes {
		return b
	}
	for i := indexBoundBytes - 1; i >= 0; i-- {
		if b[i] != 0xff {
			out := bytes.Clone(b[:i+1])
			out[i]++
			return out
		}
	}
	return b
}

// pageBounds is a page's least or greatest value so far.
type pageBounds struct {
	set bool
	i   int64   // integers and booleans
	f   float64 // floats (never NaN)
	b   []byte  // byte arrays (a view of the Arrow buffer)
}

// bytes is the bound PLAIN-encoded as statistics hold it (a copy).
func (p *pageBounds) bytes(kind flatKind) []byte {
	switch kind {
	case flatBool:
		return []byte{byte(p.i)}
	case flatInt32:
		return binary.LittleEndian.AppendUint32(nil, uint32(p.i))
	case flatInt64:
		return binary.LittleEndian.AppendUint64(nil, uint64(p.i))
	case flatFloat:
		return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(p.f)))
	case flatDouble:
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(p.f))
	}
	return bytes.Clone(p.b)
}

// compareBound orders two PLAIN bounds by the column's type order: signed
// integers (booleans false first), byte arrays as unsigned bytes, a
// decimal's big-endian two's complement as a signed number.
func compareBound(kind flatKind, a, b []byte) int {
	switch kind {
	case flatFixed:
		return compareSignedBE(a, b)
	case flatInt32:
		x, y := int32(binary.LittleEndian.Uint32(a)), int32(binary.LittleEndian.Uint32(b))
		return cmpInt(int64(x), int64(y))
	case flatInt64:
		return cmpInt(int64(binary.LittleEndian.Uint64(a)), int64(binary.LittleEndian.Uint64(b)))
	case flatFloat:
		return cmp.Compare(math.Float32frombits(binary.LittleEndian.Uint32(a)), math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case flatDouble:
		return cmp.Compare(math.Float64frombits(binary.LittleEndian.Uint64(a)), math.Float64frombits(binary.LittleEndian.Uint64(b)))
	}
	return bytes.Compare(a, b)
}

// compareSignedBE orders two big-endian two's complement numbers of
// equal length.
func compareSignedBE(a, b []byte) int {
	if len(a) > 0 && a[0] != b[0] {
		return cmpInt(int64(int8(a[0])), int64(int8(b[0])))
	}
	return bytes.Compare(a, b)
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// appendPlain appends row i's value (not null) PLAIN to buf, and widens
// the page's bounds. Booleans are packed afterwards (packBools).
func appendPlain(buf []byte, arr arrow.Array, kind flatKind, i int, lo, hi *pageBounds) []byte {
	switch kind {
	case flatBinary:
		var v []byte
		switch a := arr.(type) {
		case *array.String:
			str := a.Value(i) // a view of the Arrow buffer, only read
			v = unsafe.Slice(unsafe.StringData(str), len(str))
		case *array.Binary:
			v = a.Value(i)
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(v)))
		buf = append(buf, v...)
		if !lo.set || bytes.Compare(v, lo.b) < 0 {
			lo.b, lo.set = v, true
		}
		if !hi.set || bytes.Compare(v, hi.b) > 0 {
			hi.b, hi.set = v, true
		}
		return buf
	case flatFixed:
		a := arr.(*array.Decimal128)
		d := a.Value(i)
		var be [16]byte
		binary.BigEndian.PutUint64(be[:8], uint64(d.HighBits()))
		binary.BigEndian.PutUint64(be[8:], d.LowBits())
		v := be[16-decimalBytes(a.DataType().(*arrow.Decimal128Type).Precision):]
		// The bounds keep their own copy: buf may move as it grows.
		if !lo.set || compareSignedBE(v, lo.b) < 0 {
			lo.b, lo.set = append(lo.b[:0:0], v...), true
		}
		if !hi.set || compareSignedBE(v, hi.b) > 0 {
			hi.b, hi.set = append(hi.b[:0:0], v...), true
		}
		return append(buf, v...)
	case flatBool:
		x := int64(0)
		if arr.(*array.Boolean).Value(i) {
			x = 1
		}
		widen(lo, hi, x)
		return append(buf, 0) // a byte per value while the page fills; packBools packs them
	}
	switch a := arr.(type) {
	case *array.Float32:
		x := a.Value(i)
		widenFloat(lo, hi, float64(x))
		return binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	case *array.Float64:
		x := a.Value(i)
		widenFloat(lo, hi, x)
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
	}
	x := intValue(arr, i)
	widen(lo, hi, x)
	if kind == flatInt32 {
		return binary.LittleEndian.AppendUint32(buf, uint32(x))
	}
	return binary.LittleEndian.AppendUint64(buf, uint64(x))
}

func widen(lo, hi *pageBounds, x int64) {
	if !lo.set || x < lo.i {
		lo.i, lo.set = x, true
	}
	if !hi.set || x > hi.i {
		hi.i, hi.set = x, true
	}
}

// widenFloat widens float bounds by x: NaN has no order and is left out,
// and a zero bound is written as -0.0 when a minimum and +0.0 when a
// maximum (Parquet's rules for float statistics), so that it bounds
// zeros of either sign.
func widenFloat(lo, hi *pageBounds, x float64) {
	if math.IsNaN(x) {
		return
	}
	if !lo.set || x < lo.f {
		lo.f, lo.set = x, true
		if x == 0 {
			lo.f = math.Copysign(0, -1)
		}
	}
	if !hi.set || x > hi.f {
		hi.f, hi.set = x, true
		if x == 0 {
			hi.f = 0
		}
	}
}

// intValue is row i's value of an integer-stored column, as its physical
// integer (a decimal's unscaled value fits by its precision).
func intValue(arr arrow.Array, i int) int64 {
	switch a := arr.(type) {
	case *array.Int8:
		return int64(a.Value(i))
	case *array.Int16:
		return int64(a.Value(i))
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Date32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Timestamp:
		return int64(a.Value(i))
	case *array.Decimal128:
		return int64(a.Value(i).LowBits())
	}
	panic(fmt.Sprintf("flat writer: %s is not an integer column", arr.DataType()))
}

// packBools replaces the byte per value appendPlain left for rows
// [first, end) with PLAIN booleans: one bit per non-null value, LSB first.
func packBools(buf []byte, arr arrow.Array, first, end int) []byte {
	a := arr.(*array.Boolean)
	n := len(buf)
	buf = buf[:bitutil.BytesForBits(int64(n))]
	clear(buf)
	k := 0
	for i := first; i < end; i++ {
		if a.IsNull(i) {
			continue
		}
		if a.Value(i) {
			bitutil.SetBit(buf, k)
		}
		k++
	}
	return buf
}

// appendLevels appends the definition levels of rows [first, end) (1:
// present, 0: null; bit width 1) in RLE runs, without the length prefix
// version 2 pages leave out.
func appendLevels(buf *bytes.Buffer, arr arrow.Array, first, end, nulls int) {
	if end == first {
		return
	}
	run := func(level byte, count int) {
		var head [binary.MaxVarintLen64]byte
		buf.Write(binary.AppendUvarint(head[:0], uint64(count)<<1))
		buf.WriteByte(level)
	}
	if nulls == 0 {
		run(1, end-first)
		return
	}
	cur, count := level(arr, first), 0
	for i := first; i < end; i++ {
		if l := level(arr, i); l != cur {
			run(cur, count)
			cur, count = l, 0
		}
		count++
	}
	run(cur, count)
}

func level(arr arrow.Array, i int) byte {
	if arr.IsNull(i) {
		return 0
	}
	return 1
}
