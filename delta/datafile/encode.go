package datafile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"strconv"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	pqsnappy "github.com/parquet-go/parquet-go/compress/snappy"
	pquncompressed "github.com/parquet-go/parquet-go/compress/uncompressed"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding"
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

// encodeParquet writes rec (physical schema) as one Parquet file with one
// row group per o.rowGroup rows.
func encodeParquet(rec arrow.RecordBatch, o writeOptions) ([]byte, error) {
	defer rec.Release()
	var codec compress.Codec
	switch o.codec {
	case Zstd:
		codec = &pqzstd.Codec{}
	case Snappy:
		codec = &pqsnappy.Codec{}
	case Uncompressed:
		codec = &pquncompressed.Codec{}
	default:
		return nil, fmt.Errorf("encode parquet: unknown codec %q", o.codec)
	}
	root := make(group, 0, rec.NumCols())
	for _, f := range rec.Schema().Fields() {
		n, err := parquetNode(f)
		if err != nil {
			return nil, fmt.Errorf("encode parquet: %w", err)
		}
		root = append(root, field{Node: n, name: f.Name})
	}
	sc := pq.NewSchema("spark_schema", root)
	var out bytes.Buffer
	w := pq.NewWriter(&out, sc, pq.Compression(codec), pq.CreatedBy("cdcapply", "", ""))
	n := rec.NumRows()
	for start := int64(0); start < n || start == 0; start += o.rowGroup {
		end := min(n, start+o.rowGroup)
		if err := writeRowGroup(w, sc, rec, start, end); err != nil {
			return nil, fmt.Errorf("encode parquet: %w", err)
		}
		if n == 0 {
			break
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	return out.Bytes(), nil
}

func writeRowGroup(w *pq.Writer, sc *pq.Schema, rec arrow.RecordBatch, start, end int64) error {
	buf := pq.NewBuffer(sc)
	e := leafEncoder{cols: buf.ColumnBuffers(), vals: make([]pq.Value, end-start)}
	rows := int(end - start)
	defs := make([]int, rows)
	for c := 0; c < int(rec.NumCols()); c++ {
		col := array.NewSlice(rec.Column(c), start, end)
		for i := range defs {
			defs[i] = 0
		}
		err := e.column(col, defs, 0)
		col.Release()
		if err != nil {
			return fmt.Errorf("column %q: %w", rec.ColumnName(c), err)
		}
	}
	_, err := w.WriteRowGroup(buf)
	return err
}

// leafEncoder turns Arrow columns into parquet-go values with definition
// levels, one leaf column buffer after another in schema order.
type leafEncoder struct {
	cols []pq.ColumnBuffer
	next int
	vals []pq.Value
}

// column encodes arr, an optional field at nesting depth depth: defs[i]
// holds the definition level row i reached above this field, and a row
// is defined down to here only when defs[i] == depth.
func (e *leafEncoder) column(arr arrow.Array, defs []int, depth int) error {
	if sa, ok := arr.(*array.Struct); ok {
		child := make([]int, len(defs))
		for i := range defs {
			child[i] = defs[i]
			if defs[i] == depth && sa.IsValid(i) {
				child[i] = depth + 1
			}
		}
		for f := 0; f < sa.NumField(); f++ {
			if err := e.column(sa.Field(f), child, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	leaf := e.next
	e.next++
	vals := e.vals[:len(defs)]
	var fixed int
	if dt, ok := arr.DataType().(*arrow.Decimal128Type); ok && dt.Precision > 18 {
		fixed = decimalBytes(dt.Precision)
	}
	for i := range defs {
		if defs[i] != depth || arr.IsNull(i) {
			vals[i] = pq.Value{}.Level(0, defs[i], leaf)
			continue
		}
		var v pq.Value
		switch a := arr.(type) {
		case *array.Boolean:
			v = pq.BooleanValue(a.Value(i))
		case *array.Int8:
			v = pq.Int32Value(int32(a.Value(i)))
		case *array.Int16:
			v = pq.Int32Value(int32(a.Value(i)))
		case *array.Int32:
			v = pq.Int32Value(a.Value(i))
		case *array.Int64:
			v = pq.Int64Value(a.Value(i))
		case *array.Float32:
			v = pq.FloatValue(a.Value(i))
		case *array.Float64:
			v = pq.DoubleValue(a.Value(i))
		case *array.String:
			// Zero-copy view of the Arrow buffer: parquet-go copies the
			// bytes into its page buffer inside WriteValues, before rec
			// can be released, and never writes through the slice.
			s := a.Value(i)
			v = pq.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
		case *array.Binary:
			v = pq.ByteArrayValue(a.Value(i))
		case *array.Date32:
			v = pq.Int32Value(int32(a.Value(i)))
		case *array.Timestamp:
			v = pq.Int64Value(int64(a.Value(i)))
		case *array.Decimal128:
			d := a.Value(i)
			switch {
			case fixed > 0:
				var be [16]byte
				binary.BigEndian.PutUint64(be[:8], uint64(d.HighBits()))
				binary.BigEndian.PutUint64(be[8:], d.LowBits())
				v = pq.FixedLenByteArrayValue(be[16-fixed:])
			case a.DataType().(*arrow.Decimal128Type).Precision <= 9:
				v = pq.Int32Value(int32(d.LowBits()))
			default:
				v = pq.Int64Value(int64(d.LowBits()))
			}
		default:
			return fmt.Errorf("writing %s is not supported yet", arr.DataType())
		}
		vals[i] = v.Level(0, depth+1, leaf)
	}
	if _, err := e.cols[leaf].WriteValues(vals); err != nil {
		return fmt.Errorf("buffer values: %w", err)
	}
	return nil
}
