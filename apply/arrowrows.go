package apply

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/schema"
)

// rowsToArrow builds one Arrow record of the table schema from rows: the
// source columns, then the engine columns.
func rowsToArrow(sch *arrow.Schema, nSource int, rows []Row) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	defer b.Release()
	// Size every builder once: growing by doubling copies and zeroes the
	// buffers again and again (most of rowsToArrow's time before).
	for i := 0; i < sch.NumFields(); i++ {
		b.Field(i).Reserve(len(rows))
	}
	fbs := make([]array.Builder, nSource)
	text := make([]int, nSource)
	for r := range rows {
		for i, v := range rows[r].Values[:nSource] {
			if v.Kind == schema.KindString || v.Kind == schema.KindBytes {
				text[i] += len(v.S)
			}
		}
	}
	for i := range fbs {
		fbs[i] = b.Field(i)
		if bb, ok := fbs[i].(*array.BinaryBuilder); ok {
			bb.ReserveData(text[i])
		} else if sb, ok := fbs[i].(*array.StringBuilder); ok {
			sb.ReserveData(text[i])
		}
	}
	// The columns in two parts on two goroutines (the builders are per
	// column); within a part, row by row: each row's values are read once
	// while they are in cache (column by column re-read every row once per
	// column).
	split := nSource * 2 / 3 // the other goroutine also builds the engine columns
	if runtime.GOMAXPROCS(0) < 2 || len(rows) < 1024 {
		split = 0 // one goroutine: not worth starting another
	}
	var wg sync.WaitGroup
	var firstErr error
	if split > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			firstErr = appendColumns(sch, fbs, rows, 0, split)
		}()
	}
	err := appendColumns(sch, fbs, rows, split, nSource)
	seq := b.Field(nSource).(*array.StringBuilder)
	seqBytes := 0
	for _, r := range rows {
		seqBytes += 2 * len(r.Seq)
	}
	seq.ReserveData(seqBytes)
	del := b.Field(nSource + 1).(*array.BooleanBuilder)
	src := b.Field(nSource + 2).(*array.TimestampBuilder)
	app := b.Field(nSource + 3).(*array.TimestampBuilder)
	var hexSeq []byte // SeqText without a string per row
	for _, r := range rows {
		hexSeq = hex.AppendEncode(hexSeq[:0], r.Seq)
		seq.BinaryBuilder.Append(hexSeq)
		del.Append(r.Deleted)
		if r.SourceTsMicros == 0 {
			src.AppendNull()
		} else {
			src.Append(arrow.Timestamp(r.SourceTsMicros))
		}
		app.Append(arrow.Timestamp(r.AppliedMicros))
	}
	wg.Wait()
	if err = cmp.Or(firstErr, err); err != nil {
		return nil, err
	}
	return b.NewRecordBatch(), nil
}

// appendColumns appends the rows' values of source columns [from, to).
func appendColumns(sch *arrow.Schema, fbs []array.Builder, rows []Row, from, to int) error {
	fast := make([]func(schema.Value) bool, to-from)
	for i := range fast {
		fast[i] = fastAppender(fbs[from+i])
	}
	for r := range rows {
		for i, v := range rows[r].Values[from:to] {
			if f := fast[i]; f != nil && f(v) {
				continue
			}
			if err := appendValue(fbs[from+i], v); err != nil {
				return fmt.Errorf("column %s row %d: %w", sch.Field(from+i).Name, r, err)
			}
		}
	}
	return nil
}

// fastAppender returns, for a builder of a common flat type, a function
// that appends a value as appendValue would and reports whether it did
// (false: null, unavailable or a kind it leaves to appendValue); nil for
// the other types. The builder's type is then decided once per column,
// not once per value.
func fastAppender(b array.Builder) func(schema.Value) bool {
	present := func(v schema.Value) bool { return !v.IsNull() && !v.IsUnavailable() }
	switch b := b.(type) {
	case *array.Int64Builder:
		return func(v schema.Value) bool {
			if !present(v) {
				return false
			}
			b.Append(v.I)
			return true
		}
	case *array.Int32Builder:
		return func(v schema.Value) bool {
			if !present(v) {
				return false
			}
			b.Append(int32(v.I))
			return true
		}
	case *array.TimestampBuilder:
		return func(v schema.Value) bool {
			if !present(v) {
				return false
			}
			b.Append(arrow.Timestamp(v.I))
			return true
		}
	case *array.BooleanBuilder:
		return func(v schema.Value) bool {
			if !present(v) {
				return false
			}
			b.Append(v.I != 0)
			return true
		}
	case *array.Float64Builder:
		return func(v schema.Value) bool {
			if v.Kind != schema.KindFloat {
				return false
			}
			b.Append(v.Float())
			return true
		}
	case *array.StringBuilder:
		return func(v schema.Value) bool {
			if v.Kind != schema.KindString {
				return false
			}
			b.Append(v.S)
			return true
		}
	}
	return nil
}

// appendValue appends one typed value to a builder of the column's Arrow type.
func appendValue(b array.Builder, v schema.Value) error {
	if v.IsNull() {
		b.AppendNull()
		return nil
	}
	if v.IsUnavailable() {
		return fmt.Errorf("unavailable placeholder reached the writer")
	}
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(v.I != 0)
	case *array.Int8Builder:
		b.Append(int8(v.I))
	case *array.Int16Builder:
		b.Append(int16(v.I))
	case *array.Int32Builder:
		b.Append(int32(v.I))
	case *array.Int64Builder:
		b.Append(v.I)
	case *array.Float32Builder:
		if v.Kind == schema.KindFloat {
			b.Append(float32(v.Float()))
		} else {
			b.Append(float32(v.I))
		}
	case *array.Float64Builder:
		if v.Kind == schema.KindFloat {
			b.Append(v.Float())
		} else {
			b.Append(float64(v.I))
		}
	case *array.StringBuilder:
		switch v.Kind {
		case schema.KindString:
			b.Append(v.S)
		case schema.KindDecimal:
			b.Append(v.DecimalString())
		default:
			return fmt.Errorf("%s value for a string column", v.Kind)
		}
	case *array.BinaryBuilder:
		if v.Kind == schema.KindString {
			b.Append([]byte(v.S))
		} else {
			b.Append(v.Bytes())
		}
	case *array.Date32Builder:
		b.Append(arrow.Date32(v.I))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v.I))
	case *array.Decimal128Builder:
		want := b.Type().(*arrow.Decimal128Type).Scale
		if v.Kind != schema.KindDecimal || v.Scale != want {
			return fmt.Errorf("%s value of scale %d for a decimal column of scale %d", v.Kind, v.Scale, want)
		}
		hi, lo := v.Decimal128()
		b.Append(decimal128.New(hi, lo))
	case *array.ListBuilder:
		b.Append(true)
		for _, e := range v.Elems() {
			if err := appendValue(b.ValueBuilder(), e); err != nil {
				return err
			}
		}
	case *array.StructBuilder:
		b.Append(true)
		for i := 0; i < b.NumField(); i++ {
			e := schema.Null
			if i < len(v.Elems()) {
				e = v.Elems()[i]
			}
			if err := appendValue(b.FieldBuilder(i), e); err != nil {
				return err
			}
		}
	case *array.MapBuilder:
		b.Append(true)
		for i := 0; i+1 < len(v.Elems()); i += 2 {
			if err := appendValue(b.KeyBuilder(), v.Elems()[i]); err != nil {
				return err
			}
			if err := appendValue(b.ItemBuilder(), v.Elems()[i+1]); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("no conversion to %s", b.Type())
	}
	return nil
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
