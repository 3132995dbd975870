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
		for i := 0; i < n; i++ {
			bb.Append([]byte(s))
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
