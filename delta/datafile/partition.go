package datafile

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/delta"
)

// partitionArray returns n copies of a partition value, parsed from its
// serialized form in add.partitionValues (the protocol's "Partition Value
// Serialization"): nil or "" is null.
func partitionArray(mem memory.Allocator, t delta.DataType, v *string, n int) (arrow.Array, error) {
	at, err := ArrowType(t)
	if err != nil {
		return nil, err
	}
	if v == nil || *v == "" {
		// An empty string is null for every type, strings included.
		return array.MakeArrayOfNull(mem, at, n), nil
	}
	b := array.NewBuilder(mem, at)
	defer b.Release()
	b.Reserve(n)
	s := *v
	bad := func(err error) (arrow.Array, error) {
		return nil, fmt.Errorf("parse partition value %q as %s: %w", s, t, err)
	}
	switch bb := b.(type) {
	case *array.StringBuilder:
		for i := 0; i < n; i++ {
			bb.Append(s)
		}
	case *array.BinaryBuilder:
		// One character per byte, as PartitionValue writes binary.
		raw := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 0xff {
				return bad(fmt.Errorf("character %U is not a byte", r))
			}
			raw = append(raw, byte(r))
		}
		for i := 0; i < n; i++ {
			bb.Append(raw)
		}
	case *array.BooleanBuilder:
		x, err := strconv.ParseBool(s)
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(x)
		}
	case *array.Int8Builder, *array.Int16Builder, *array.Int32Builder, *array.Int64Builder:
		x, err := strconv.ParseInt(s, 10, bitWidth(at))
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			switch bb := bb.(type) {
			case *array.Int8Builder:
				bb.UnsafeAppend(int8(x))
			case *array.Int16Builder:
				bb.UnsafeAppend(int16(x))
			case *array.Int32Builder:
				bb.UnsafeAppend(int32(x))
			case *array.Int64Builder:
				bb.UnsafeAppend(x)
			}
		}
	case *array.Float32Builder:
		x, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(float32(x))
		}
	case *array.Float64Builder:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(x)
		}
	case *array.Date32Builder:
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			return bad(err)
		}
		x := arrow.Date32FromTime(d)
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(x)
		}
	case *array.TimestampBuilder:
		x, err := parseTimestamp(s)
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(arrow.Timestamp(x))
		}
	case *array.Decimal128Builder:
		dt := at.(*arrow.Decimal128Type)
		x, err := decimal128.FromString(s, dt.Precision, dt.Scale)
		if err != nil {
			return bad(err)
		}
		for i := 0; i < n; i++ {
			bb.UnsafeAppend(x)
		}
	default:
		return nil, fmt.Errorf("partition column of type %s is not supported", t)
	}
	return b.NewArray(), nil
}

// parseTimestamp reads a partition timestamp as microseconds since the
// epoch: "2006-01-02 15:04:05[.ffffff]" (taken as UTC, the zone cdcapply
// and modern writers use) or ISO-8601 with a zone ("...T...Z").
func parseTimestamp(s string) (int64, error) {
	layouts := []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999"}
	var firstErr error
	for _, l := range layouts {
		t, err := time.Parse(l, strings.TrimSpace(s))
		if err == nil {
			return t.UnixMicro(), nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return 0, firstErr
}

// PartitionValue serializes row i of a partition column for
// add.partitionValues, the inverse of how Read parses it: nil for null,
// numbers in decimal, dates as 2006-01-02, timestamps as ISO-8601 UTC
// microseconds with a Z (the protocol's recommended form, free of the
// writer's zone), timestamp_ntz as "2006-01-02 15:04:05.999999". An empty
// string reads back as null: the protocol cannot tell the two apart.
func PartitionValue(arr arrow.Array, i int) (*string, error) {
	if arr.IsNull(i) {
		return nil, nil
	}
	var s string
	switch a := arr.(type) {
	case *array.String:
		s = a.Value(i)
	case *array.Binary:
		// One character per byte (U+0000..U+00FF), the protocol's escaped
		// binary form; raw bytes would not survive JSON as UTF-8.
		b := a.Value(i)
		r := make([]rune, len(b))
		for j, c := range b {
			r[j] = rune(c)
		}
		s = string(r)
	case *array.Boolean:
		s = strconv.FormatBool(a.Value(i))
	case *array.Int8:
		s = strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Int16:
		s = strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Int32:
		s = strconv.FormatInt(int64(a.Value(i)), 10)
	case *array.Int64:
		s = strconv.FormatInt(a.Value(i), 10)
	case *array.Float32:
		s = strconv.FormatFloat(float64(a.Value(i)), 'g', -1, 32)
	case *array.Float64:
		s = strconv.FormatFloat(a.Value(i), 'g', -1, 64)
	case *array.Date32:
		s = a.Value(i).FormattedString()
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		if tt.Unit != arrow.Microsecond {
			return nil, fmt.Errorf("format partition value: timestamp unit %s, want microseconds", tt.Unit)
		}
		t := time.UnixMicro(int64(a.Value(i))).UTC()
		if tt.TimeZone != "" {
			s = t.Format("2006-01-02T15:04:05.000000Z")
		} else {
			s = t.Format("2006-01-02 15:04:05.999999")
		}
	case *array.Decimal128:
		s = decimalString(a.Value(i), a.DataType().(*arrow.Decimal128Type).Scale)
	default:
		return nil, fmt.Errorf("format partition value: %s cannot be a partition column", arr.DataType())
	}
	return &s, nil
}
