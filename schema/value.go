// Package schema maps Debezium (Kafka Connect) and Avro column schemas to
// Delta column types, and converts the primitive values a decoder reads off
// the wire (JSON or Avro) into typed values ready for the Delta writer.
//
// A Type is compiled once per schema (per registry id or per distinct inline
// schema) and then converts many values; conversion does no reflection and
// boxes nothing: a Value is a small tagged struct.
package schema

import (
	"encoding/binary"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Kind tags which field of a Value holds the value.
type Kind uint8

// The kinds of Value.
const (
	// KindNull is SQL NULL.
	KindNull Kind = iota
	// KindUnavailable marks a column whose value Debezium could not read
	// (an unchanged TOASTed column); it means "unchanged", never a value.
	KindUnavailable
	// KindBool keeps 0 or 1 in I.
	KindBool
	// KindInt keeps byte, short, integer, long, date (days since the epoch),
	// timestamp (microseconds since the epoch, UTC) and time-of-day
	// (nanoseconds since midnight) in I.
	KindInt
	// KindFloat keeps float and double in F.
	KindFloat
	// KindString keeps S.
	KindString
	// KindBytes keeps B.
	KindBytes
	// KindDecimal keeps the unscaled value as a 128-bit two's complement
	// integer (Hi, I) with the scale in Scale.
	KindDecimal
	// KindList keeps array elements in Elems.
	KindList
	// KindStruct keeps struct fields in Elems, in the type's field order.
	KindStruct
	// KindMap keeps key, value, key, value... in Elems.
	KindMap
)

var kindNames = [...]string{"null", "unavailable", "bool", "int", "float", "string", "bytes", "decimal", "list", "struct", "map"}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one typed column value. Only the fields Kind selects are
// meaningful; the zero Value is NULL. It is a plain 64-byte struct rather
// than an interface so that a row of values is one allocation and appending
// to an Arrow builder is a switch, not a type assertion per value. Floats
// keep their bits in I, bytes share S and elements are a pointer and a
// count in I, which keeps it small: decoding
// cost is dominated by allocating and clearing rows of these.
type Value struct {
	Kind  Kind
	Scale int32  // decimal scale
	I     int64  // bool, integers, dates, timestamps, times, float bits; low 64 bits of a decimal
	Hi    int64  // high 64 bits of a decimal
	S     string // string, or the bytes of a binary value
	elems *Value // first element of a list, struct or map; I is the count
}

// Null is the SQL NULL value.
var Null = Value{}

// Unavailable is the marker for Debezium's unavailable-value placeholder.
var Unavailable = Value{Kind: KindUnavailable}

// Int returns an integer-kinded value.
func Int(v int64) Value { return Value{Kind: KindInt, I: v} }

// Float returns a float-kinded value. NaN is stored in one canonical form
// so that equal values compare equal whatever NaN payload the source sent.
func Float(v float64) Value {
	if v != v {
		v = math.NaN()
	}
	return Value{Kind: KindFloat, I: int64(math.Float64bits(v))}
}

// Bool returns a boolean value.
func Bool(v bool) Value {
	if v {
		return Value{Kind: KindBool, I: 1}
	}
	return Value{Kind: KindBool}
}

// String returns a string value.
func String(s string) Value { return Value{Kind: KindString, S: s} }

// Bytes returns a binary value. The value takes b over: the caller must
// not modify it afterwards.
func Bytes(b []byte) Value {
	return Value{Kind: KindBytes, S: unsafe.String(unsafe.SliceData(b), len(b))}
}

// List returns an array value holding elems (not a copy).
func List(elems ...Value) Value { return composite(KindList, elems) }

// Struct returns a struct value with fields in type order (not a copy).
func Struct(fields ...Value) Value { return composite(KindStruct, fields) }

// Map returns a map value from key, value, key, value... (not a copy).
func Map(pairs ...Value) Value { return composite(KindMap, pairs) }

func composite(k Kind, elems []Value) Value {
	return Value{Kind: k, I: int64(len(elems)), elems: unsafe.SliceData(elems)}
}

// Elems returns the elements of a list, the fields of a struct or the
// key, value pairs of a map, flattened.
func (v Value) Elems() []Value {
	if v.elems == nil {
		return nil
	}
	return unsafe.Slice(v.elems, v.I)
}

// Clone returns v with its own copy of its text and of every nested
// element: a value read zero-copy out of a larger buffer (an Arrow column)
// no longer keeps that buffer alive.
func (v Value) Clone() Value {
	v.S = strings.Clone(v.S)
	if v.elems != nil {
		src := v.Elems()
		dst := make([]Value, len(src))
		for i := range src {
			dst[i] = src[i].Clone()
		}
		v.elems = unsafe.SliceData(dst)
	}
	return v
}

// IsNull reports whether v is NULL.
func (v Value) IsNull() bool { return v.Kind == KindNull }

// IsUnavailable reports whether v is the unavailable marker.
func (v Value) IsUnavailable() bool { return v.Kind == KindUnavailable }

// Bool returns the boolean held by a KindBool value.
func (v Value) Bool() bool { return v.I != 0 }

// Float returns the number held by a KindFloat value.
func (v Value) Float() float64 { return math.Float64frombits(uint64(v.I)) }

// Bytes returns the bytes held by a KindBytes value; they must not be
// modified.
func (v Value) Bytes() []byte { return unsafe.Slice(unsafe.StringData(v.S), len(v.S)) }

// Decimal128 returns the unscaled 128-bit value of a KindDecimal value as
// the high and low halves Arrow's decimal128 builder takes.
func (v Value) Decimal128() (hi int64, lo uint64) { return v.Hi, uint64(v.I) }

// BigUnscaled returns the unscaled value of a KindDecimal value.
func (v Value) BigUnscaled() *big.Int {
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(v.Hi))
	binary.BigEndian.PutUint64(buf[8:], uint64(v.I))
	return fromTwosComplement(buf[:])
}

// DecimalString renders a KindDecimal value exactly, e.g. "-12.340".
func (v Value) DecimalString() string { return formatDecimal(v.BigUnscaled(), int(v.Scale)) }

// Equal reports whether two values are identical (same kind, same payload;
// floats compare by bits so NaN equals NaN).
func (v Value) Equal(o Value) bool {
	if v.Kind != o.Kind {
		return false
	}
	switch v.Kind {
	case KindNull, KindUnavailable:
		return true
	case KindBool, KindInt:
		return v.I == o.I
	case KindFloat:
		return v.I == o.I
	case KindString, KindBytes:
		return v.S == o.S
	case KindDecimal:
		return v.I == o.I && v.Hi == o.Hi && v.Scale == o.Scale
	default:
		a, b := v.Elems(), o.Elems()
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if !a[i].Equal(b[i]) {
				return false
			}
		}
		return true
	}
}

// GoString renders v for test failures and debugging.
func (v Value) GoString() string {
	switch v.Kind {
	case KindNull:
		return "NULL"
	case KindUnavailable:
		return "UNAVAILABLE"
	case KindBool:
		return strconv.FormatBool(v.I != 0)
	case KindInt:
		return strconv.FormatInt(v.I, 10)
	case KindFloat:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case KindString:
		return strconv.Quote(v.S)
	case KindBytes:
		return "0x" + hexString(v.Bytes())
	case KindDecimal:
		return v.DecimalString()
	default:
		parts := make([]string, len(v.Elems()))
		for i, e := range v.Elems() {
			parts[i] = e.GoString()
		}
		return v.Kind.String() + "[" + strings.Join(parts, " ") + "]"
	}
}

// Render returns a display form of v given its Delta-facing logical type:
// dates and timestamps as ISO text, everything else as GoString does.
func (v Value) Render(t *Type) string {
	if v.Kind == KindInt && t != nil {
		switch t.Logical {
		case LogicalDate:
			return time.Unix(v.I*86400, 0).UTC().Format("2006-01-02")
		case LogicalTimestampMillis, LogicalMicroTimestamp, LogicalNanoTimestamp, LogicalZonedTimestamp:
			return time.UnixMicro(v.I).UTC().Format("2006-01-02T15:04:05.999999Z")
		}
	}
	return v.GoString()
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i] = digits[c>>4]
		out[2*i+1] = digits[c&15]
	}
	return string(out)
}
