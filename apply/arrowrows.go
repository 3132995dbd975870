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
	apps := make([]appender, to-from)
	for i := range apps {
		apps[i] = appenderFor(fbs[from+i])
	}
	for r := range rows {
		for i, v := range rows[r].Values[from:to] {
			if err := apps[i](v); err != nil {
				return fmt.Errorf("column %s row %d: %w", sch.Field(from+i).Name, r, err)
			}
		}
	}
	return nil
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
			if v.Kind == schema.KindFloat {
				b.Append(float32(v.Float()))
			} else {
				b.Append(float32(v.I))
			}
			return nil
		}
	case *array.Float64Builder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			if v.Kind == schema.KindFloat {
				b.Append(v.Float())
			} else {
				b.Append(float64(v.I))
			}
			return nil
		}
	case *array.StringBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			switch v.Kind {
			case schema.KindString:
				b.Append(v.S)
			case schema.KindDecimal:
				b.Append(v.DecimalString())
			default:
				return fmt.Errorf("%s value for a string column", v.Kind)
			}
			return nil
		}
	case *array.BinaryBuilder:
		return func(v schema.Value) error {
			if ok, err := present(b, v); !ok {
				return err
			}
			if v.Kind == schema.KindString {
				b.Append([]byte(v.S))
			} else {
				b.Append(v.Bytes())
			}
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
			if v.Kind != schema.KindDecimal || v.Scale != want {
				return fmt.Errorf("%s value of scale %d for a decimal column of scale %d", v.Kind, v.Scale, want)
			}
			hi, lo := v.Decimal128()
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
