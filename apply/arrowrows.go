package apply

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/schema"
)

// rowsToArrow builds one Arrow record of the table schema from rows: the
// source columns, then the engine columns. A top-level column of a scalar
// type is written straight into its buffers (colBuild); nested columns go
// through Arrow's builders.
//
// The record's scalar columns are built in scratch's buffers (nil: fresh
// ones), which the caller may hand to the next call once nothing reads
// the record any more.
func rowsToArrow(sch *arrow.Schema, nSource int, rows []Row, scratch *arrowScratch) (arrow.RecordBatch, error) {
	n := len(rows)
	if scratch == nil {
		scratch = new(arrowScratch)
	}
	scratch.ensure(nSource + len(engineColumns))
	cols := make([]*colBuild, nSource)
	for i := range cols {
		cols[i] = newColBuild(sch.Field(i).Type, n, scratch.col(i))
		defer cols[i].release()
	}
	// Size the text buffers once: growing by doubling copies them again
	// and again.
	text := make([]int, nSource)
	for r := range rows {
		for i, v := range rows[r].Values[:nSource] {
			if v.Kind == schema.KindString || v.Kind == schema.KindBytes {
				text[i] += len(v.S)
			}
		}
	}
	for i, c := range cols {
		if c.offsets != nil {
			c.data = reuse(&c.bufs.data, text[i])[:0]
		}
	}
	// The columns in two parts on two goroutines; within a part, row by
	// row: each row's values are read once while they are in cache
	// (column by column re-read every row once per column).
	split := nSource * 2 / 3 // the other goroutine also builds the engine columns
	if runtime.GOMAXPROCS(0) < 2 || n < 1024 {
		split = 0 // one goroutine: not worth starting another
	}
	var wg sync.WaitGroup
	var firstErr error
	if split > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			firstErr = buildColumns(sch, cols, rows, 0, split)
		}()
	}
	err := buildColumns(sch, cols, rows, split, nSource)
	engine := engineArrays(sch, nSource, rows, scratch)
	wg.Wait()
	if err = cmp.Or(firstErr, err); err != nil {
		for _, a := range engine {
			a.Release()
		}
		return nil, err
	}
	arrays := make([]arrow.Array, 0, nSource+len(engine))
	for _, c := range cols {
		arrays = append(arrays, c.finish())
	}
	arrays = append(arrays, engine...)
	rec := array.NewRecordBatch(sch, arrays, int64(n))
	for _, a := range arrays {
		a.Release()
	}
	return rec, nil
}

// engineArrays builds the engine columns of rows: _cdc_seq (the
// sequence in hex), _cdc_deleted, _cdc_source_ts (NULL when unknown),
// _cdc_applied_at.
func engineArrays(sch *arrow.Schema, nSource int, rows []Row, scratch *arrowScratch) []arrow.Array {
	n := len(rows)
	col := func(k int) *colBuild { return newColBuild(sch.Field(nSource+k).Type, n, scratch.col(nSource+k)) }
	seqBytes := 0
	for _, r := range rows {
		seqBytes += 2 * len(r.Seq)
	}
	seq, del, src, app := col(0), col(1), col(2), col(3)
	seq.data = reuse(&seq.bufs.data, seqBytes)[:0]
	for i, r := range rows {
		seq.data = hex.AppendEncode(seq.data, r.Seq)
		seq.offsets[i+1] = int32(len(seq.data))
		bitutil.SetBit(seq.valid, i)
		del.putInt(i, int64(boolInt(r.Deleted)))
		if r.SourceTsMicros == 0 {
			src.nulls++
		} else {
			src.putInt(i, r.SourceTsMicros)
		}
		app.putInt(i, r.AppliedMicros)
	}
	return []arrow.Array{seq.finish(), del.finish(), src.finish(), app.finish()}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildColumns writes the rows' values of source columns [from, to).
func buildColumns(sch *arrow.Schema, cols []*colBuild, rows []Row, from, to int) error {
	for r := range rows {
		for i, v := range rows[r].Values[from:to] {
			if err := cols[from+i].put(r, v); err != nil {
				return fmt.Errorf("column %s row %d: %w", sch.Field(from+i).Name, r, err)
			}
		}
	}
	return nil
}

// colBuild builds one column of n rows. A scalar column is written into
// Go-allocated buffers laid out as Arrow's (a validity bitmap, then the
// values: fixed-width slots, a boolean bitmap, or 32-bit offsets and
// bytes), without a builder's per-value bookkeeping; other types use a
// builder and its appender.
type colBuild struct {
	typ     arrow.DataType
	id      arrow.Type // typ.ID(), asked once
	rows    int
	width   int // bytes per value of a fixed-width column (0: bits, text, or a builder)
	valid   []byte
	nulls   int
	fixed   []byte  // fixed-width values, or the boolean bitmap
	offsets []int32 // strings and binaries
	data    []byte
	scale   int32 // a decimal's
	b       array.Builder
	app     appender
	bufs    *colBuffers // where valid, fixed, offsets and data come from
}

// newColBuild starts a column of n rows in bufs' arrays.
func newColBuild(t arrow.DataType, n int, bufs *colBuffers) *colBuild {
	c := &colBuild{typ: t, id: t.ID(), rows: n, bufs: bufs}
	c.valid = reuseZeroed(&bufs.valid, int(bitutil.BytesForBits(int64(n))))
	switch t := t.(type) {
	case *arrow.BooleanType:
		c.fixed = reuseZeroed(&bufs.fixed, int(bitutil.BytesForBits(int64(n))))
	case *arrow.StringType, *arrow.BinaryType:
		c.offsets = reuseOffsets(&bufs.offsets, n+1)
	case *arrow.Decimal128Type:
		c.width, c.scale = 16, t.Scale
	case arrow.FixedWidthDataType:
		switch t.ID() {
		case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.FLOAT32, arrow.FLOAT64, arrow.DATE32, arrow.TIMESTAMP:
			c.width = t.BitWidth() / 8
		}
	}
	switch {
	case c.width > 0:
		c.fixed = reuseZeroed(&bufs.fixed, n*c.width)
	case c.fixed == nil && c.offsets == nil:
		c.valid = nil
		c.b = array.NewBuilder(memory.DefaultAllocator, t)
		c.b.Reserve(n)
		c.app = appenderFor(c.b)
	}
	return c
}

// put writes row i's value (rows are put in order).
func (c *colBuild) put(i int, v schema.Value) error {
	if c.b != nil {
		return c.app(v)
	}
	switch v.Kind {
	case schema.KindNull:
		c.nulls++
		if c.offsets != nil {
			c.offsets[i+1] = int32(len(c.data))
		}
		return nil
	case schema.KindUnavailable:
		return errUnavailable
	}
	bitutil.SetBit(c.valid, i)
	switch c.id {
	case arrow.BOOL:
		if v.I != 0 {
			bitutil.SetBit(c.fixed, i)
		}
	case arrow.FLOAT32:
		binary.LittleEndian.PutUint32(c.fixed[4*i:], math.Float32bits(float32(floatOf(v))))
	case arrow.FLOAT64:
		binary.LittleEndian.PutUint64(c.fixed[8*i:], math.Float64bits(floatOf(v)))
	case arrow.DECIMAL128:
		hi, lo, err := decimalOf(v, c.scale)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(c.fixed[16*i:], lo)
		binary.LittleEndian.PutUint64(c.fixed[16*i+8:], uint64(hi))
	case arrow.STRING:
		s, err := stringOf(v)
		if err != nil {
			return err
		}
		return c.putBytes(i, s)
	case arrow.BINARY:
		return c.putBytes(i, v.S) // a string's bytes or a binary's
	default:
		c.putInt(i, v.I)
	}
	return nil
}

// putInt writes row i's integer into a fixed-width integer slot (or the
// boolean bitmap) and marks it valid.
func (c *colBuild) putInt(i int, x int64) {
	bitutil.SetBit(c.valid, i)
	switch c.width {
	case 0:
		if x != 0 {
			bitutil.SetBit(c.fixed, i)
		}
	case 1:
		c.fixed[i] = byte(x)
	case 2:
		binary.LittleEndian.PutUint16(c.fixed[2*i:], uint16(x))
	case 4:
		binary.LittleEndian.PutUint32(c.fixed[4*i:], uint32(x))
	default:
		binary.LittleEndian.PutUint64(c.fixed[8*i:], uint64(x))
	}
}

func (c *colBuild) putBytes(i int, s string) error {
	if len(c.data)+len(s) > math.MaxInt32 {
		return fmt.Errorf("more than 2 GiB of %s values in one file", c.typ)
	}
	c.data = append(c.data, s...)
	c.offsets[i+1] = int32(len(c.data))
	return nil
}

// finish returns the column's array.
func (c *colBuild) finish() arrow.Array {
	if c.b != nil {
		return c.b.NewArray()
	}
	if c.data != nil {
		c.bufs.data = c.data // keep what the column grew to
	}
	var validity *memory.Buffer
	if c.nulls > 0 {
		validity = memory.NewBufferBytes(c.valid)
	}
	bufs := []*memory.Buffer{validity, memory.NewBufferBytes(c.fixed)}
	if c.offsets != nil {
		bufs = []*memory.Buffer{validity, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(c.offsets)), memory.NewBufferBytes(c.data)}
	}
	d := array.NewData(c.typ, c.rows, bufs, nil, c.nulls, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// release frees a builder that was not finished (an error).
func (c *colBuild) release() {
	if c.b != nil {
		c.b.Release()
	}
}

// floatOf is a float column's value of v: a float, or an integer converted.
func floatOf(v schema.Value) float64 {
	if v.Kind == schema.KindFloat {
		return v.Float()
	}
	return float64(v.I)
}

// stringOf is a string column's value of v: a string, or a decimal's text.
func stringOf(v schema.Value) (string, error) {
	switch v.Kind {
	case schema.KindString:
		return v.S, nil
	case schema.KindDecimal:
		return v.DecimalString(), nil
	}
	return "", fmt.Errorf("%s value for a string column", v.Kind)
}

// decimalOf is a decimal column's value of v, which must be a decimal of
// the column's scale.
func decimalOf(v schema.Value, scale int32) (hi int64, lo uint64, err error) {
	if v.Kind != schema.KindDecimal || v.Scale != scale {
		return 0, 0, fmt.Errorf("%s value of scale %d for a decimal column of scale %d", v.Kind, v.Scale, scale)
	}
	h, l := v.Decimal128()
	return h, l, nil
}

// appender appends one typed value to its builder.
type appender func(schema.Value) error

// errUnavailable: a TOAST placeholder the merge did not resolve.
var errUnavailable = fmt.Errorf("unavailable placeholder reached the writer")

// present appends a null for a null value and reports whether v holds a
// value to append; the unavailable placeholder is an error.
func present(b array.Builder, v schema.Value) (bool, error) {
	switch v.Kind {
	case schema.KindNull:
		b.AppendNull()
		return false, nil
	case schema.KindUnavailable:
		return false, errUnavailable
	}
	return true, nil
}

// appenderFor returns the appender of a builder of the column's Arrow
// type. The conversion is chosen here, once per column and per nested
// builder, not once per value.
func appenderFor(b array.Builder) appender {
	switch b := b.(type) {
	case *array.BooleanBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(v.I != 0)
			return nil
		}
	case *array.Int8Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(int8(v.I))
			return nil
		}
	case *array.Int16Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(int16(v.I))
			return nil
		}
	case *array.Int32Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(int32(v.I))
			return nil
		}
	case *array.Int64Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(v.I)
			return nil
		}
	case *array.Float32Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(float32(floatOf(v)))
			return nil
		}
	case *array.Float64Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(floatOf(v))
			return nil
		}
	case *array.StringBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			s, err := stringOf(v)
			if err != nil {
				return err
			}
			b.Append(s)
			return nil
		}
	case *array.BinaryBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(v.Bytes()) // a string's bytes or a binary's; the builder copies them
			return nil
		}
	case *array.Date32Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(arrow.Date32(v.I))
			return nil
		}
	case *array.TimestampBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(arrow.Timestamp(v.I))
			return nil
		}
	case *array.Decimal128Builder:
		want := b.Type().(*arrow.Decimal128Type).Scale
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			hi, lo, err := decimalOf(v, want)
			if err != nil {
				return err
			}
			b.Append(decimal128.New(hi, lo))
			return nil
		}
	case *array.ListBuilder:
		elem := appenderFor(b.ValueBuilder())
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(true)
			for _, e := range v.Elems() {
				if err := elem(e); err != nil {
					return err
				}
			}
			return nil
		}
	case *array.StructBuilder:
		fields := make([]appender, b.NumField())
		for i := range fields {
			fields[i] = appenderFor(b.FieldBuilder(i))
		}
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(true)
			elems := v.Elems()
			for i, f := range fields {
				e := schema.Null
				if i < len(elems) {
					e = elems[i]
				}
				if err := f(e); err != nil {
					return err
				}
			}
			return nil
		}
	case *array.MapBuilder:
		key, item := appenderFor(b.KeyBuilder()), appenderFor(b.ItemBuilder())
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			b.Append(true)
			elems := v.Elems()
			for i := 0; i+1 < len(elems); i += 2 {
				if err := key(elems[i]); err != nil {
					return err
				}
				if err := item(elems[i+1]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return func(v schema.Value) error {
		if ok, err := present(b, v); !ok {
			return err
		}
		return fmt.Errorf("no conversion to %s", b.Type())
	}
}

// arrowToRows reads rows back from a record of the table schema.
func arrowToRows(rec arrow.RecordBatch, nSource int) ([]Row, error) {
	return arrowRowsAt(rec, nSource, nil)
}

// arrowRowsAt converts the rows at the given indexes of rec (every row
// when at is nil), each with Pos set to its index.
func arrowRowsAt(rec arrow.RecordBatch, nSource int, at []int64) ([]Row, error) {
	n := int(rec.NumRows())
	if at != nil {
		n = len(at)
	}
	src := func(i int) int {
		if at == nil {
			return i
		}
		return int(at[i])
	}
	rows := make([]Row, n)
	vals := make([]schema.Value, n*nSource) // one allocation for all values
	for i := range rows {
		rows[i].Values = vals[i*nSource : (i+1)*nSource : (i+1)*nSource]
		rows[i].Pos = int64(src(i))
	}
	for c := 0; c < nSource; c++ {
		col := rec.Column(c)
		for i := 0; i < n; i++ {
			r := src(i)
			v, err := valueAt(col, r)
			if err != nil {
				return nil, fmt.Errorf("column %s row %d: %w", rec.Schema().Field(c).Name, r, err)
			}
			if at != nil {
				// A few rows of a row group: copy their text out, or each
				// would keep its column's whole buffer alive as long as
				// the batch holds the row (hundreds of MiB per batch).
				v = v.Clone()
			}
			rows[i].Values[c] = v
		}
	}
	seq, ok1 := rec.Column(nSource).(*array.String)
	del, ok2 := rec.Column(nSource + 1).(*array.Boolean)
	srcTs, ok3 := rec.Column(nSource + 2).(*array.Timestamp)
	app, ok4 := rec.Column(nSource + 3).(*array.Timestamp)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("engine columns have unexpected types")
	}
	for i := range rows {
		r := src(i)
		if seq.IsNull(r) {
			return nil, fmt.Errorf("row %d has no %s", r, ColSeq)
		}
		s, err := parseSeqText(seq.Value(r))
		if err != nil {
			return nil, fmt.Errorf("row %d: %s: %w", r, ColSeq, err)
		}
		rows[i].Seq = s
		rows[i].Deleted = del.Value(r)
		if !srcTs.IsNull(r) {
			rows[i].SourceTsMicros = int64(srcTs.Value(r))
		}
		rows[i].AppliedMicros = int64(app.Value(r))
	}
	return rows, nil
}

func valueAt(col arrow.Array, r int) (schema.Value, error) {
	if col.IsNull(r) {
		return schema.Null, nil
	}
	switch a := col.(type) {
	case *array.Boolean:
		return schema.Bool(a.Value(r)), nil
	case *array.Int8:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Int16:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Int32:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Int64:
		return schema.Int(a.Value(r)), nil
	case *array.Float32:
		return schema.Float(float64(a.Value(r))), nil
	case *array.Float64:
		return schema.Float(a.Value(r)), nil
	case *array.String:
		return schema.String(a.Value(r)), nil
	case *array.Binary:
		return schema.Bytes(append([]byte(nil), a.Value(r)...)), nil
	case *array.Date32:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Timestamp:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Decimal128:
		d := a.Value(r)
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		return schema.Value{Kind: schema.KindDecimal, Hi: d.HighBits(), I: int64(d.LowBits()), Scale: scale}, nil
	case *array.Map: // before List: a Map is a List
		start, end := a.ValueOffsets(r)
		keys, items := a.Keys(), a.Items()
		elems := make([]schema.Value, 0, 2*(end-start))
		for i := int(start); i < int(end); i++ {
			k, err := valueAt(keys, i)
			if err != nil {
				return schema.Null, err
			}
			v, err := valueAt(items, i)
			if err != nil {
				return schema.Null, err
			}
			elems = append(elems, k, v)
		}
		return schema.Map(elems...), nil
	case *array.List:
		start, end := a.ValueOffsets(r)
		elems := make([]schema.Value, 0, end-start)
		for i := int(start); i < int(end); i++ {
			v, err := valueAt(a.ListValues(), i)
			if err != nil {
				return schema.Null, err
			}
			elems = append(elems, v)
		}
		return schema.List(elems...), nil
	case *array.Struct:
		elems := make([]schema.Value, a.NumField())
		for i := range elems {
			v, err := valueAt(a.Field(i), r)
			if err != nil {
				return schema.Null, err
			}
			elems[i] = v
		}
		return schema.Struct(elems...), nil
	}
	return schema.Null, fmt.Errorf("no conversion from %s", col.DataType())
}

// arrowScratch holds the buffers of one record's scalar columns, for the
// next record to be built in: a batch's new file is built, encoded and
// stored, and then nothing reads its Arrow buffers (datafile.Write copies
// what it keeps: the encoded file, the statistics as JSON). Reusing them
// spares the allocator and the collector a file's worth of column
// buffers per batch, the text columns most (7% of the bytes the
// 300k-key bench's engine allocated).
type arrowScratch struct{ cols []colBuffers }

// ensure gives s buffers for n columns.
func (s *arrowScratch) ensure(n int) {
	if len(s.cols) < n {
		s.cols = append(s.cols, make([]colBuffers, n-len(s.cols))...)
	}
}

func (s *arrowScratch) col(i int) *colBuffers { return &s.cols[i] }

// held is the size of the buffers s holds.
func (s *arrowScratch) held() int {
	n := 0
	for _, c := range s.cols {
		n += cap(c.valid) + cap(c.fixed) + cap(c.data) + 4*cap(c.offsets)
	}
	return n
}

// colBuffers are one column's buffers (see colBuild).
type colBuffers struct {
	valid, fixed, data []byte
	offsets            []int32
}

// reuseZeroed returns n zero bytes, in *keep's array when it is large
// enough (else in a new one, kept in *keep).
func reuseZeroed(keep *[]byte, n int) []byte {
	if cap(*keep) < n {
		*keep = make([]byte, n)
		return *keep
	}
	*keep = (*keep)[:n]
	clear(*keep)
	return *keep
}

// reuse returns n bytes of undefined content, in *keep's array when it is
// large enough (else in a new one, kept in *keep).
func reuse(keep *[]byte, n int) []byte {
	if cap(*keep) < n {
		*keep = make([]byte, n)
	}
	*keep = (*keep)[:n]
	return *keep
}

// reuseOffsets returns n offsets, the first 0 and the rest of undefined
// content (put writes every row's end offset), in *keep's array when it
// is large enough (else in a new one, kept in *keep).
func reuseOffsets(keep *[]int32, n int) []int32 {
	if cap(*keep) < n {
		*keep = make([]int32, n)
	}
	*keep = (*keep)[:n]
	(*keep)[0] = 0
	return *keep
}
