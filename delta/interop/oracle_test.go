package interop_test

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
)

// allTypes is a table schema with every primitive type of the protocol,
// nullable but for the key.
func allTypes() delta.StructType {
	f := func(name string, t delta.DataType) delta.StructField {
		return delta.StructField{Name: name, Type: t, Nullable: true, Metadata: map[string]any{}}
	}
	id := f("id", delta.Long)
	id.Nullable = false
	return delta.StructType{Fields: []delta.StructField{
		id,
		f("region", delta.String),
		f("bucket", delta.Integer),
		f("b", delta.Boolean),
		f("i8", delta.Byte),
		f("i16", delta.Short),
		f("i32", delta.Integer),
		f("i64", delta.Long),
		f("f32", delta.Float),
		f("f64", delta.Double),
		f("dec_small", delta.DecimalType{Precision: 9, Scale: 2}),
		f("dec_large", delta.DecimalType{Precision: 38, Scale: 18}),
		f("s", delta.String),
		f("bin", delta.Binary),
		f("d", delta.Date),
		f("ts", delta.Timestamp),
		f("ts_ntz", delta.TimestampNTZ),
	}}
}

// oracleRow is one row in allTypes' column order, typed as canonGo expects.
type oracleRow []any

// Partition values, chosen to need escaping in folder names and to include
// null; "" is left out because the protocol reads an empty partition value
// as null.
var (
	regions = []any{"eu", "us west", "a=b/c%d ü", nil}
	buckets = []any{int32(0), int32(-5), nil}
)

// makeRow builds row id at generation gen (an update bumps gen) in the
// given partition. Values sweep each type's edges: extremes, zero and
// negative zero, NaN and infinities, 38-digit decimals, dates and
// timestamps far before and after the epoch, empty and non-ASCII text.
// Every seventh id is null in every nullable data column.
func makeRow(id int64, gen int, region, bucket any) oracleRow {
	r := oracleRow{id, region, bucket}
	if id%7 == 6 {
		for i := 3; i < len(allTypes().Fields); i++ {
			r = append(r, nil)
		}
		return r
	}
	k := int(id) + gen
	pick := func(vals ...any) any { return vals[k%len(vals)] }
	sign := int64(1)
	if id%2 == 1 {
		sign = -1
	}
	return append(r,
		id%3 == 0,
		pick(int8(math.MinInt8), int8(math.MaxInt8), int8(0), int8(gen)),
		pick(int16(math.MinInt16), int16(math.MaxInt16), int16(-1), int16(300+gen)),
		pick(int32(math.MinInt32), int32(math.MaxInt32), int32(id*1000)+int32(gen), int32(-7)),
		pick(int64(math.MinInt64), int64(math.MaxInt64), sign*id*1_000_000_007, int64(gen)),
		pick(float32(1.5), float32(-0.1), float32(math.MaxFloat32), float32(math.SmallestNonzeroFloat32),
			float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1))),
		pick(0.1*float64(id)+float64(gen), -math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1),
			math.NaN(), math.Copysign(0, -1), 1e300),
		fmt.Sprintf("%d.%02d", sign*(id*1001+int64(gen)), id%100),
		pick("99999999999999999999.999999999999999999", "-99999999999999999999.999999999999999999",
			fmt.Sprintf("%d.%018d", sign*(id*123456789+int64(gen)), id), "0.000000000000000001"),
		pick("", "plain", "unicodé ✓ 日本", "quote\" and \\ slash\nnewline", fmt.Sprintf("gen %d", gen)),
		pick([]byte{}, []byte{0, byte(id), 255, byte(gen)}, []byte("text")),
		pick(int32(0), int32(-719162), int32(2932896), int32(sign*id*4000)), // 0001-01-01 .. 9999-12-31
		pick(int64(0), int64(-62135596800000000), int64(253402300799999999), sign*(id*86_400_000_123+int64(gen))),
		pick(int64(951825600000000), int64(-1), sign*id*3_600_000_001),
	)
}

// recordOf builds the Arrow record datafile.Write takes for rows: the
// table's data columns (every column but the partition columns) in schema
// order, with their logical Arrow types.
func recordOf(schema delta.StructType, partitionColumns []string, rows []oracleRow) (arrow.RecordBatch, error) {
	var data delta.StructType
	var idx []int
	for j, f := range schema.Fields {
		if !slices.Contains(partitionColumns, f.Name) {
			data.Fields = append(data.Fields, f)
			idx = append(idx, j)
		}
	}
	as, err := datafile.ArrowSchema(data)
	if err != nil {
		return nil, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for _, r := range rows {
		for k, j := range idx {
			if err := appendValue(b.Field(k), schema.Fields[j].Type, r[j]); err != nil {
				return nil, fmt.Errorf("column %q: %w", schema.Fields[j].Name, err)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

// partitionValuesOf serializes the partition values of a row the way the
// protocol's add.partitionValues holds them (null stays null).
func partitionValuesOf(schema delta.StructType, partitionColumns []string, r oracleRow) (map[string]*string, error) {
	if len(partitionColumns) == 0 {
		return nil, nil
	}
	out := map[string]*string{}
	for _, c := range partitionColumns {
		_, j, ok := schema.Field(c)
		if !ok {
			return nil, fmt.Errorf("partition column %q not in the schema", c)
		}
		var s string
		switch v := r[j].(type) {
		case nil:
			out[c] = nil
			continue
		case string:
			s = v
		case int32:
			s = strconv.FormatInt(int64(v), 10)
		default:
			return nil, fmt.Errorf("partition column %q: no serialization for %T in this test", c, v)
		}
		out[c] = &s
	}
	return out, nil
}

func appendValue(fb array.Builder, typ delta.DataType, v any) error {
	if v == nil {
		fb.AppendNull()
		return nil
	}
	switch b := fb.(type) {
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.Int8Builder:
		b.Append(v.(int8))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.Decimal128Builder:
		u, err := parseDecimal(v.(string), typ.(delta.DecimalType).Scale)
		if err != nil {
			return err
		}
		b.Append(decimal128.FromBigInt(u))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.Date32Builder:
		b.Append(arrow.Date32(v.(int32)))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v.(int64)))
	default:
		return fmt.Errorf("no builder for %T", fb)
	}
	return nil
}

// oracleKeys canonicalises oracle rows.
func oracleKeys(cols []column, rows []oracleRow) ([]string, error) {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		vals := make([]string, len(cols))
		for j, c := range cols {
			s, err := canonGo(r[j], c.typ)
			if err != nil {
				return nil, fmt.Errorf("oracle row %v column %q: %w", r[0], c.name, err)
			}
			vals[j] = s
		}
		out = append(out, rowKey(cols, vals))
	}
	return out, nil
}
