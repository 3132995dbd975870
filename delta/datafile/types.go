package datafile

import (
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcapply/cdcapply/delta"
)

// ArrowType returns the in-memory Arrow type of a Delta type: integers of
// the same width, decimal as Decimal128, date as Date32, timestamp as
// microseconds in UTC and timestamp_ntz as microseconds without a zone.
func ArrowType(t delta.DataType) (arrow.DataType, error) {
	switch t := t.(type) {
	case delta.PrimitiveType:
		switch t {
		case delta.Boolean:
			return arrow.FixedWidthTypes.Boolean, nil
		case delta.Byte:
			return arrow.PrimitiveTypes.Int8, nil
		case delta.Short:
			return arrow.PrimitiveTypes.Int16, nil
		case delta.Integer:
			return arrow.PrimitiveTypes.Int32, nil
		case delta.Long:
			return arrow.PrimitiveTypes.Int64, nil
		case delta.Float:
			return arrow.PrimitiveTypes.Float32, nil
		case delta.Double:
			return arrow.PrimitiveTypes.Float64, nil
		case delta.String:
			return arrow.BinaryTypes.String, nil
		case delta.Binary:
			return arrow.BinaryTypes.Binary, nil
		case delta.Date:
			return arrow.FixedWidthTypes.Date32, nil
		case delta.Timestamp:
			return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, nil
		case delta.TimestampNTZ:
			return &arrow.TimestampType{Unit: arrow.Microsecond}, nil
		case delta.Void:
			return arrow.Null, nil
		}
	case delta.DecimalType:
		return &arrow.Decimal128Type{Precision: int32(t.Precision), Scale: int32(t.Scale)}, nil
	case delta.ArrayType:
		et, err := ArrowType(t.ElementType)
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(arrow.Field{Name: "element", Type: et, Nullable: t.ContainsNull}), nil
	case delta.MapType:
		kt, err := ArrowType(t.KeyType)
		if err != nil {
			return nil, err
		}
		vt, err := ArrowType(t.ValueType)
		if err != nil {
			return nil, err
		}
		m := arrow.MapOfWithMetadata(kt, arrow.Metadata{}, vt, arrow.Metadata{})
		m.SetItemNullable(t.ValueContainsNull)
		return m, nil
	case delta.StructType:
		fields := make([]arrow.Field, 0, len(t.Fields))
		for _, f := range t.Fields {
			ft, err := ArrowType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			fields = append(fields, arrow.Field{Name: f.Name, Type: ft, Nullable: f.Nullable})
		}
		return arrow.StructOf(fields...), nil
	}
	return nil, fmt.Errorf("map type %s to arrow: unsupported", t)
}

// ArrowSchema returns the logical Arrow schema of a table: every column of
// s in order, void columns dropped as the protocol recommends.
func ArrowSchema(s delta.StructType) (*arrow.Schema, error) {
	fields := make([]arrow.Field, 0, len(s.Fields))
	for _, f := range s.Fields {
		if f.Type == delta.Void {
			continue
		}
		t, err := ArrowType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		fields = append(fields, arrow.Field{Name: f.Name, Type: t, Nullable: f.Nullable})
	}
	return arrow.NewSchema(fields, nil), nil
}

// physicalArrowType is ArrowType with struct fields renamed to their
// physical names and tagged with their field ids, as written to files of a
// column-mapped table.
func (l Layout) physicalArrowType(t delta.DataType) (arrow.DataType, error) {
	switch t := t.(type) {
	case delta.ArrayType:
		et, err := l.physicalArrowType(t.ElementType)
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(arrow.Field{Name: "element", Type: et, Nullable: t.ContainsNull}), nil
	case delta.MapType:
		kt, err := l.physicalArrowType(t.KeyType)
		if err != nil {
			return nil, err
		}
		vt, err := l.physicalArrowType(t.ValueType)
		if err != nil {
			return nil, err
		}
		m := arrow.MapOf(kt, vt)
		m.SetItemNullable(t.ValueContainsNull)
		return m, nil
	case delta.StructType:
		fields, err := l.physicalFields(t.Fields)
		if err != nil {
			return nil, err
		}
		return arrow.StructOf(fields...), nil
	}
	return ArrowType(t)
}

func (l Layout) physicalFields(fs []delta.StructField) ([]arrow.Field, error) {
	out := make([]arrow.Field, 0, len(fs))
	for _, f := range fs {
		ft, err := l.physicalArrowType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Name, err)
		}
		af := arrow.Field{Name: l.physicalName(f), Type: ft, Nullable: f.Nullable}
		if id := fieldID(f); l.Mapping != MappingNone && id >= 0 {
			af.Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(id)})
		}
		out = append(out, af)
	}
	return out, nil
}
