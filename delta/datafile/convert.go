package datafile

import (
	"fmt"
	"math/big"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/delta"
)

// conform turns an array read from a file into the table's logical type t:
// identical types pass through, narrower types are widened (type widening
// and legacy encodings such as INT96 or millisecond timestamps), nested
// fields are matched by physical name or field id. A conversion that
// would lose information is an error, never a silent cast.
func (l Layout) conform(mem memory.Allocator, arr arrow.Array, t delta.DataType) (arrow.Array, error) {
	want, err := ArrowType(t)
	if err != nil {
		return nil, err
	}
	if arr.DataType().ID() == arrow.NULL {
		return array.MakeArrayOfNull(mem, want, arr.Len()), nil
	}
	switch t := t.(type) {
	case delta.StructType:
		return l.conformStruct(mem, arr, t, want)
	case delta.ArrayType:
		src, ok := arr.(*array.List)
		if !ok {
			return nil, fmt.Errorf("convert %s to %s: not a list", arr.DataType(), t)
		}
		child, err := l.conform(mem, src.ListValues(), t.ElementType)
		if err != nil {
			return nil, fmt.Errorf("list element: %w", err)
		}
		return rewrap(arr, want, child), nil
	case delta.MapType:
		src, ok := arr.(*array.Map)
		if !ok {
			return nil, fmt.Errorf("convert %s to %s: not a map", arr.DataType(), t)
		}
		keys, err := l.conform(mem, src.Keys(), t.KeyType)
		if err != nil {
			return nil, fmt.Errorf("map key: %w", err)
		}
		items, err := l.conform(mem, src.Items(), t.ValueType)
		if err != nil {
			return nil, fmt.Errorf("map value: %w", err)
		}
		mt := want.(*arrow.MapType)
		entries := array.NewData(mt.Elem(), keys.Len(), []*memory.Buffer{nil}, []arrow.ArrayData{keys.Data(), items.Data()}, 0, 0)
		defer entries.Release()
		return array.MakeFromData(array.NewData(want, arr.Len(), arr.Data().Buffers(), []arrow.ArrayData{entries}, arr.NullN(), arr.Data().Offset())), nil
	}
	if arrow.TypeEqual(arr.DataType(), want) {
		arr.Retain()
		return arr, nil
	}
	return convertPrimitive(mem, arr, want)
}

// rewrap returns arr's list structure (validity and offsets) over a new
// child array of the converted element type.
func rewrap(arr arrow.Array, want arrow.DataType, child arrow.Array) arrow.Array {
	d := arr.Data()
	return array.MakeFromData(array.NewData(want, d.Len(), d.Buffers(), []arrow.ArrayData{child.Data()}, d.NullN(), d.Offset()))
}

func (l Layout) conformStruct(mem memory.Allocator, arr arrow.Array, t delta.StructType, want arrow.DataType) (arrow.Array, error) {
	src, ok := arr.(*array.Struct)
	if !ok {
		return nil, fmt.Errorf("convert %s to struct: not a struct", arr.DataType())
	}
	st := src.DataType().(*arrow.StructType)
	d := src.Data()
	// Children are converted over their full length and the parent keeps
	// its offset, so the parent's row i still addresses child row offset+i.
	full := d.Offset() + d.Len()
	children := make([]arrow.ArrayData, 0, len(t.Fields))
	for _, f := range t.Fields {
		i := l.findField(st.Fields(), f)
		var c arrow.Array
		if i < 0 {
			ct, err := ArrowType(f.Type)
			if err != nil {
				return nil, err
			}
			c = array.MakeArrayOfNull(mem, ct, full)
		} else {
			raw := array.MakeFromData(d.Children()[i])
			var err error
			c, err = l.conform(mem, raw, f.Type)
			raw.Release()
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
		}
		children = append(children, c.Data())
	}
	return array.MakeFromData(array.NewData(want, d.Len(), d.Buffers()[:1], children, d.NullN(), d.Offset())), nil
}

// findField returns the index among a file's fields of the logical field
// f: by field id in id mode (falling back to the physical name for files
// written without ids), else by physical name.
func (l Layout) findField(fields []arrow.Field, f delta.StructField) int {
	if l.Mapping == MappingID {
		if id := fieldID(f); id >= 0 {
			for i, ff := range fields {
				if v, ok := ff.Metadata.GetValue("PARQUET:field_id"); ok && v == strconv.Itoa(id) {
					return i
				}
			}
		}
	}
	name := l.physicalName(f)
	for i, ff := range fields {
		if ff.Name == name {
			return i
		}
	}
	return -1
}

const microsPerDay = 86400 * 1000 * 1000

func convertPrimitive(mem memory.Allocator, arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	fail := func() (arrow.Array, error) {
		return nil, fmt.Errorf("convert %s to %s: not a widening this reader supports", arr.DataType(), want)
	}
	n := arr.Len()
	switch w := want.(type) {
	case *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type, *arrow.Float64Type:
		get, ok := intGetter(arr)
		if !ok {
			if f, isF := arr.(*array.Float32); isF && want.ID() == arrow.FLOAT64 {
				b := array.NewFloat64Builder(mem)
				defer b.Release()
				b.Reserve(n)
				for i := 0; i < n; i++ {
					if f.IsNull(i) {
						b.AppendNull()
					} else {
						b.UnsafeAppend(float64(f.Value(i)))
					}
				}
				return b.NewArray(), nil
			}
			return fail()
		}
		if bitWidth(arr.DataType()) > bitWidth(want) && want.ID() != arrow.FLOAT64 {
			return fail()
		}
		b := array.NewBuilder(mem, want)
		defer b.Release()
		b.Reserve(n)
		for i := 0; i < n; i++ {
			if arr.IsNull(i) {
				b.AppendNull()
				continue
			}
			v := get(i)
			switch bb := b.(type) {
			case *array.Int16Builder:
				bb.UnsafeAppend(int16(v))
			case *array.Int32Builder:
				bb.UnsafeAppend(int32(v))
			case *array.Int64Builder:
				bb.UnsafeAppend(v)
			case *array.Float64Builder:
				bb.UnsafeAppend(float64(v))
			}
		}
		return b.NewArray(), nil
	case *arrow.StringType:
		if arr.DataType().ID() != arrow.BINARY {
			return fail()
		}
		// Old writers store strings as unannotated binary; the layout is the same.
		d := arr.Data()
		return array.MakeFromData(array.NewData(want, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())), nil
	case *arrow.TimestampType:
		return convertTimestamp(mem, arr, w)
	case *arrow.Decimal128Type:
		return convertDecimal(mem, arr, w)
	}
	return fail()
}

func bitWidth(t arrow.DataType) int {
	if fw, ok := t.(arrow.FixedWidthDataType); ok {
		return fw.BitWidth()
	}
	return 0
}

// intGetter reads any signed integer array as int64.
func intGetter(arr arrow.Array) (func(int) int64, bool) {
	switch a := arr.(type) {
	case *array.Int8:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int16:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int32:
		return func(i int) int64 { return int64(a.Value(i)) }, true
	case *array.Int64:
		return func(i int) int64 { return a.Value(i) }, true
	}
	return nil, false
}

func convertTimestamp(mem memory.Allocator, arr arrow.Array, want *arrow.TimestampType) (arrow.Array, error) {
	var get func(int) int64
	switch a := arr.(type) {
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		switch unit {
		case arrow.Second:
			get = func(i int) int64 { return int64(a.Value(i)) * 1e6 }
		case arrow.Millisecond:
			get = func(i int) int64 { return int64(a.Value(i)) * 1e3 }
		case arrow.Microsecond:
			get = func(i int) int64 { return int64(a.Value(i)) }
		case arrow.Nanosecond:
			get = func(i int) int64 { return floorDiv(int64(a.Value(i)), 1e3) }
		}
	case *array.Date32:
		// date widens to timestamp_ntz: midnight of that day.
		if want.TimeZone != "" {
			return nil, fmt.Errorf("convert date to %s: only timestamp_ntz is a widening of date", want)
		}
		get = func(i int) int64 { return int64(a.Value(i)) * microsPerDay }
	default:
		return nil, fmt.Errorf("convert %s to %s: not a widening this reader supports", arr.DataType(), want)
	}
	b := array.NewTimestampBuilder(mem, want)
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
		} else {
			b.UnsafeAppend(arrow.Timestamp(get(i)))
		}
	}
	return b.NewArray(), nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func convertDecimal(mem memory.Allocator, arr arrow.Array, want *arrow.Decimal128Type) (arrow.Array, error) {
	var get func(int) decimal128.Num
	scale := int32(0)
	switch a := arr.(type) {
	case *array.Decimal128:
		scale = a.DataType().(*arrow.Decimal128Type).Scale
		get = a.Value
	case *array.Decimal32:
		scale = a.DataType().(*arrow.Decimal32Type).Scale
		get = func(i int) decimal128.Num { return decimal128.FromI64(int64(a.Value(i))) }
	case *array.Decimal64:
		scale = a.DataType().(*arrow.Decimal64Type).Scale
		get = func(i int) decimal128.Num { return decimal128.FromI64(int64(a.Value(i))) }
	case *array.Decimal256:
		dt := a.DataType().(*arrow.Decimal256Type)
		scale = dt.Scale
		get = func(i int) decimal128.Num {
			return decimal128.FromBigInt(a.Value(i).BigInt())
		}
		if dt.Precision-dt.Scale > want.Precision-want.Scale {
			return nil, fmt.Errorf("convert %s to %s: integer digits would be lost", arr.DataType(), want)
		}
	default:
		g, ok := intGetter(arr)
		if !ok {
			return nil, fmt.Errorf("convert %s to %s: not a widening this reader supports", arr.DataType(), want)
		}
		get = func(i int) decimal128.Num { return decimal128.FromI64(g(i)) }
	}
	if want.Scale < scale {
		return nil, fmt.Errorf("convert %s to %s: scale would shrink", arr.DataType(), want)
	}
	mul := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(want.Scale-scale)), nil)
	b := array.NewDecimal128Builder(mem, want)
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		v := get(i)
		if want.Scale != scale {
			bi := new(big.Int).Mul(v.BigInt(), mul)
			if bi.BitLen() > 126 {
				return nil, fmt.Errorf("convert %s to %s: value does not fit", arr.DataType(), want)
			}
			v = decimal128.FromBigInt(bi)
		}
		if !v.FitsInPrecision(want.Precision) {
			return nil, fmt.Errorf("convert %s to %s: value does not fit", arr.DataType(), want)
		}
		b.UnsafeAppend(v)
	}
	return b.NewArray(), nil
}
