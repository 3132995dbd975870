package schema

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Placeholder is Debezium's default unavailable.value.placeholder, sent in
// place of an unchanged TOASTed PostgreSQL column (and by other connectors
// for values they cannot read).
const Placeholder = "__debezium_unavailable_value"

// The placeholder as binary columns carry it in each binary.handling.mode.
var (
	placeholderBase64    = base64.StdEncoding.EncodeToString([]byte(Placeholder))
	placeholderBase64URL = base64.URLEncoding.EncodeToString([]byte(Placeholder))
	placeholderHex       = hex.EncodeToString([]byte(Placeholder))
)

// PostgreSQL infinity as Debezium sends it. The PostgreSQL JDBC driver turns
// 'infinity' into these sentinel instants; Debezium passes their epoch value
// through for millisecond and microsecond timestamps and clamps nanosecond
// timestamps to the int64 limits; ZonedTimestamp carries the words.
const (
	pgInfinityEpoch    int64 = 9223372036825200000
	pgNegInfinityEpoch int64 = -9223372036832400000
)

// What infinity becomes in Delta: the ends of the range every Delta reader
// (Spark included) accepts, 0001-01-01 and 9999-12-31.
const (
	// MaxTimestampMicros is 9999-12-31T23:59:59.999999Z.
	MaxTimestampMicros int64 = 253402300799999999
	// MinTimestampMicros is 0001-01-01T00:00:00Z.
	MinTimestampMicros int64 = -62135596800000000
	// MaxDateDays is 9999-12-31.
	MaxDateDays int64 = 2932896
	// MinDateDays is 0001-01-01.
	MinDateDays int64 = -719162
)

// Debezium's PostgreSQL date infinity: LocalDate values far outside any real
// date, sent as their epoch day.
var (
	pgInfinityDate    = daysFromCivil(-5877611, 6, 21)
	pgNegInfinityDate = daysFromCivil(-5877611, 6, 22)
)

// The same infinities in a snapshot read: there the value comes through
// JDBC, pgjdbc turns 'infinity' into a java.sql.Date of its sentinel instant
// (+-9223372036825200000 ms), and Debezium casts that date's LocalDate epoch
// day (about +-1e11) to int32, which wraps. +infinity was seen on the wire by
// scripts/e2e.sh (a snapshot row); -infinity is the same JDK computation,
// java.sql.Date(-9223372036832400000).toLocalDate().toEpochDay() cast to int.
// Both lie far outside PostgreSQL's date range (4713 BC to 5874897 AD), so
// no real date is mistaken for them.
const (
	pgSnapshotInfinityDate    int64 = -622191234
	pgSnapshotNegInfinityDate int64 = -625821272
)

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (astronomical year numbering), valid far beyond time.Time's range.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func (t *Type) options() *Options {
	if t.opts == nil {
		return defaultOptions
	}
	return t.opts
}

func outOfRange(t *Type, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrOutOfRange, t.describe(), fmt.Sprintf(format, args...))
}

func invalid(t *Type, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalid, t.describe(), fmt.Sprintf(format, args...))
}

func (t *Type) describe() string {
	if t.Name != "" {
		return t.Base.String() + "(" + t.Name + ")"
	}
	return t.Base.String()
}

// FromInt converts an integer read off the wire (JSON integer, Avro int or
// long).
func (t *Type) FromInt(v int64) (Value, error) {
	switch t.Logical {
	case LogicalNone, LogicalYear, LogicalMicroDuration:
		switch t.Base {
		case BaseInt8:
			if v < math.MinInt8 || v > math.MaxInt8 {
				return Value{}, outOfRange(t, "%d", v)
			}
		case BaseInt16:
			if v < math.MinInt16 || v > math.MaxInt16 {
				return Value{}, outOfRange(t, "%d", v)
			}
		case BaseInt32:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return Value{}, outOfRange(t, "%d", v)
			}
		case BaseInt64:
		case BaseFloat32, BaseFloat64:
			return t.FromFloat(float64(v))
		default:
			return Value{}, invalid(t, "got integer %d", v)
		}
		return Int(v), nil
	case LogicalDate:
		switch v {
		case pgInfinityDate, pgSnapshotInfinityDate:
			return Int(MaxDateDays), nil
		case pgNegInfinityDate, pgSnapshotNegInfinityDate:
			return Int(MinDateDays), nil
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return Value{}, outOfRange(t, "%d days", v)
		}
		return Int(v), nil
	case LogicalTimeMillis, LogicalMicroTime, LogicalNanoTime:
		// Time of day as nanoseconds. No 24-hour bound: MySQL TIME spans
		// -838:59:59 to 838:59:59 and PostgreSQL allows 24:00:00; only a
		// value whose nanoseconds overflow is out of range.
		mul := int64(1)
		switch t.Logical {
		case LogicalTimeMillis:
			mul = 1_000_000
		case LogicalMicroTime:
			mul = 1_000
		}
		if v > math.MaxInt64/mul || v < math.MinInt64/mul {
			return Value{}, outOfRange(t, "%d as nanoseconds", v)
		}
		return Int(v * mul), nil
	case LogicalTimestampMillis, LogicalMicroTimestamp, LogicalNanoTimestamp:
		switch v {
		case pgInfinityEpoch, math.MaxInt64:
			return Int(MaxTimestampMicros), nil
		case pgNegInfinityEpoch, math.MinInt64:
			return Int(MinTimestampMicros), nil
		}
		switch t.Logical {
		case LogicalTimestampMillis:
			// Millisecond columns carry the same sentinel instants in ms.
			switch v {
			case pgInfinityEpoch / 1000:
				return Int(MaxTimestampMicros), nil
			case pgNegInfinityEpoch / 1000:
				return Int(MinTimestampMicros), nil
			}
			if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
				return Value{}, outOfRange(t, "%d ms", v)
			}
			return Int(v * 1000), nil
		case LogicalNanoTimestamp:
			q := v / 1000
			if v%1000 < 0 { // floor, so sub-microsecond digits never round up
				q--
			}
			return Int(q), nil
		}
		return Int(v), nil
	case LogicalDecimal:
		return t.decimalFromBig(big.NewInt(v), 0)
	}
	return Value{}, invalid(t, "got integer %d", v)
}

// FromFloat converts a floating point number read off the wire.
func (t *Type) FromFloat(v float64) (Value, error) {
	switch {
	case t.Logical == LogicalDecimal:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Value{}, outOfRange(t, "%v", v)
		}
		// The double travelled in place of the exact value
		// (decimal.handling.mode=double); its shortest text is what the
		// source meant.
		return t.FromString(formatFloat(v))
	case t.Base >= BaseInt8 && t.Base <= BaseInt64 && v == math.Trunc(v) && (v >= 1<<63 || v < -(1<<63)):
		// An integer literal too large for 64 bits reaches here as a float.
		return Value{}, outOfRange(t, "%v", v)
	case t.Logical != LogicalNone:
	case t.Base == BaseFloat32:
		if !math.IsInf(v, 0) && !math.IsNaN(v) && math.Abs(v) > math.MaxFloat32 {
			return Value{}, outOfRange(t, "%v", v)
		}
		// Rounded to the column's 32 bits here, so JSON text (parsed as
		// 64 bits) and Avro float give the same value.
		return Float(float64(float32(v))), nil
	case t.Base == BaseFloat64:
		return Float(v), nil
	}
	return Value{}, invalid(t, "got number %v", v)
}

func formatFloat(v float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.17g", v), ".")
}

// FromBool converts a boolean read off the wire.
func (t *Type) FromBool(v bool) (Value, error) {
	if t.Base != BaseBool {
		return Value{}, invalid(t, "got boolean %v", v)
	}
	return Bool(v), nil
}

// IsPlainText reports whether values of t are their text as sent: a string
// column with no semantic conversion and no binary encoding to undo, so a
// decoder may build the string directly (after checking the placeholder).
func (t *Type) IsPlainText() bool {
	if t.Base != BaseString || t.Name == binaryTextName || t.options().Binary != BinaryBytes {
		return false
	}
	switch t.Logical {
	case LogicalNone, LogicalJSON, LogicalXML, LogicalUUID, LogicalEnum, LogicalEnumSet, LogicalZonedTime, LogicalInterval:
		return true
	}
	return false
}

// FromStringBytes is FromString for text still in the record buffer: types
// whose value is not the text itself (timestamps, decimals, binary) parse it
// in place, so only real string columns pay for a string.
func (t *Type) FromStringBytes(b []byte) (Value, error) {
	if len(b) == len(Placeholder) && string(b) == Placeholder {
		return Unavailable, nil
	}
	if t.Logical == LogicalZonedTimestamp || (t.Base == BaseInt64 && t.Logical >= LogicalTimestampMillis && t.Logical <= LogicalNanoTimestamp) {
		if us, ok := parseISOMicros(b); ok {
			return Int(us), nil
		}
	}
	return t.FromString(string(b))
}

// parseISOMicros parses the one form Debezium writes ZonedTimestamp in,
// YYYY-MM-DDTHH:MM:SS[.fraction]Z, without allocating; anything else (an
// offset, infinity) is left to the general parser.
func parseISOMicros(b []byte) (int64, bool) {
	if len(b) < 20 || b[len(b)-1] != 'Z' || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	num := func(p []byte) (int64, bool) {
		var v int64
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int64(c-'0')
		}
		return v, true
	}
	y, ok1 := num(b[0:4])
	mo, ok2 := num(b[5:7])
	d, ok3 := num(b[8:10])
	h, ok4 := num(b[11:13])
	mi, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h > 23 || mi > 59 || sec > 59 {
		return 0, false
	}
	var frac int64
	rest := b[19 : len(b)-1]
	if len(rest) > 0 {
		if rest[0] != '.' || len(rest) < 2 || len(rest) > 10 {
			return 0, false
		}
		f, ok := num(rest[1:])
		if !ok {
			return 0, false
		}
		for n := len(rest) - 1; n < 9; n++ {
			f *= 10
		}
		frac = f / 1000 // nanoseconds to microseconds, truncating like UnixMicro
	}
	days := daysFromCivil(y, mo, d)
	return ((days*24+h)*60+mi)*60_000_000 + sec*1_000_000 + frac, true
}

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// DecimalFromUnscaled converts a big-endian two's complement unscaled value
// at the type's scale without keeping b.
func (t *Type) DecimalFromUnscaled(b []byte) (Value, error) {
	if len(b) == len(Placeholder) && string(b) == Placeholder {
		return Unavailable, nil
	}
	return t.decimalFromUnscaled(b, t.Scale)
}

// FromString converts a string read off the wire. For bytes-based types it
// is the JSON converter's base64 text (or the binary.handling.mode text for
// re-typed binary columns).
func (t *Type) FromString(s string) (Value, error) {
	if s == Placeholder {
		return Unavailable, nil
	}
	switch t.Base {
	case BaseBytes:
		if t.Name == binaryTextName {
			b, err := t.decodeBinaryText(s)
			if err != nil {
				return Value{}, err
			}
			return t.FromBytes(b)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return Value{}, invalid(t, "base64: %v", err)
		}
		return t.FromBytes(b)
	case BaseString:
	default:
		switch t.Logical {
		case LogicalNone:
			if t.Base == BaseFloat32 || t.Base == BaseFloat64 {
				// JSON has no NaN or infinity; Kafka Connect's JsonConverter
				// writes them as these strings.
				switch s {
				case "NaN":
					return Float(math.NaN()), nil
				case "Infinity":
					return Float(math.Inf(1)), nil
				case "-Infinity":
					return Float(math.Inf(-1)), nil
				}
			}
			return Value{}, invalid(t, "got string %q", truncate(s))
		case LogicalDecimal:
		case LogicalTimestampMillis, LogicalMicroTimestamp, LogicalNanoTimestamp:
			// Schema-less JSON typed from a Delta timestamp column cannot
			// tell timestamp from timestamptz; the text form is the latter.
			return t.parseZoned(s)
		default:
			return Value{}, invalid(t, "got string %q", truncate(s))
		}
	}
	if t.options().Binary != BinaryBytes && (s == placeholderBase64 || s == placeholderBase64URL || s == placeholderHex) {
		// binary.handling.mode encodes the placeholder like any other
		// bytes, and the column then travels as a plain string.
		return Unavailable, nil
	}
	switch t.Logical {
	case LogicalZonedTimestamp:
		return t.parseZoned(s)
	case LogicalDecimal:
		if !plainDecimal(s) {
			return Value{}, invalid(t, "decimal text %q", truncate(s))
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return Value{}, invalid(t, "decimal text %q", truncate(s))
		}
		return t.decimalFromRat(r)
	}
	return String(s), nil
}

// plainDecimal accepts decimal text with an optional small exponent; it
// keeps big.Rat from fractions ("1/3") and from exponents whose expansion
// would take unbounded memory.
func plainDecimal(s string) bool {
	if len(s) == 0 || len(s) > 160 || strings.ContainsRune(s, '/') {
		return false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp > 400 || exp < -400 {
			return false
		}
	}
	return true
}

func (t *Type) decodeBinaryText(s string) ([]byte, error) {
	var b []byte
	var err error
	switch t.options().Binary {
	case BinaryBase64:
		b, err = base64.StdEncoding.DecodeString(s)
	case BinaryBase64URLSafe:
		b, err = base64.URLEncoding.DecodeString(s)
	case BinaryHex:
		b, err = hex.DecodeString(s)
	default:
		b, err = base64.StdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, invalid(t, "binary text: %v", err)
	}
	return b, nil
}

func (t *Type) parseZoned(s string) (Value, error) {
	if us, ok := parseISOMicros([]byte(s)); ok {
		return Int(us), nil
	}
	switch s {
	case "infinity":
		return Int(MaxTimestampMicros), nil
	case "-infinity":
		return Int(MinTimestampMicros), nil
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Value{}, invalid(t, "timestamp %q", truncate(s))
	}
	return Int(ts.UnixMicro()), nil
}

// FromBytes converts bytes read off the wire (Avro bytes, or base64-decoded
// JSON). The slice is copied: decoded values outlive the record buffer.
func (t *Type) FromBytes(b []byte) (Value, error) { return t.fromBytes(b, true) }

// FromOwnedBytes is FromBytes for a slice the caller hands over (freshly
// decoded base64), which the value may keep without a copy.
func (t *Type) FromOwnedBytes(b []byte) (Value, error) { return t.fromBytes(b, false) }

func (t *Type) fromBytes(b []byte, cp bool) (Value, error) {
	if string(b) == Placeholder {
		return Unavailable, nil
	}
	switch t.Logical {
	case LogicalDecimal:
		return t.decimalFromUnscaled(b, t.Scale)
	case LogicalNone, LogicalBits:
		if t.Base == BaseBytes {
			if cp {
				b = append([]byte(nil), b...)
			}
			return Bytes(b), nil
		}
	}
	return Value{}, invalid(t, "got %d bytes", len(b))
}

// InvalidBase64 is the error for a bytes value whose base64 text does not
// decode.
func InvalidBase64(t *Type, err error) error { return invalid(t, "base64: %v", err) }

// Mismatch is the error for a value whose wire form (object, array, ...)
// does not fit t.
func Mismatch(t *Type, got string) error { return invalid(t, "got %s", got) }

// FinishList turns a decoded array into the column value: an array holding
// the placeholder (how Debezium marks an unchanged TOASTed array) is the
// unavailable marker as a whole.
func (t *Type) FinishList(elems []Value) Value {
	for _, e := range elems {
		if e.Kind == KindUnavailable {
			return Unavailable
		}
	}
	return List(elems...)
}

// FinishStruct turns decoded struct fields (in t.Fields order) into the
// column value: a VariableScaleDecimal becomes its exact text, other
// structs (geometry included) stay structs.
func (t *Type) FinishStruct(fields []Value) (Value, error) {
	if t.Logical == LogicalVariableScaleDecimal {
		si, vi := t.Field("scale"), t.Field("value")
		if si < 0 || vi < 0 || fields[si].Kind != KindInt || fields[vi].Kind != KindBytes {
			return Value{}, invalid(t, "variable scale decimal needs scale and value")
		}
		if fields[vi].S == Placeholder {
			return Unavailable, nil
		}
		return String(formatDecimal(fromTwosComplement(fields[vi].Bytes()), int(fields[si].I))), nil
	}
	for _, f := range fields {
		if f.Kind == KindUnavailable {
			return Unavailable, nil
		}
	}
	return Struct(fields...), nil
}

// FinishMap turns decoded key/value pairs into a map value.
func (t *Type) FinishMap(pairs []Value) Value { return Map(pairs...) }

// decimalFromUnscaled converts a big-endian two's complement unscaled value
// at the given scale into the column's decimal (or its text).
func (t *Type) decimalFromUnscaled(b []byte, scale int) (Value, error) {
	if !t.DecimalAsString && scale >= 0 && len(b) <= 8 && len(b) > 0 {
		// Fast path: fits an int64 and needs no rescale.
		u := int64(int8(b[0]))
		for _, c := range b[1:] {
			u = u<<8 | int64(c)
		}
		p := t.deltaPrecision()
		if p <= 18 && (u >= pow10i64[p] || u <= -pow10i64[p]) {
			return Value{}, outOfRange(t, "%s exceeds precision %d", formatDecimal(big.NewInt(u), scale), p)
		}
		return Value{Kind: KindDecimal, I: u, Hi: u >> 63, Scale: int32(scale)}, nil
	}
	return t.decimalFromBig(fromTwosComplement(b), scale)
}

func (t *Type) deltaPrecision() int {
	p, s := t.Precision, t.Scale
	if p == 0 {
		p = 38
	}
	if s < 0 {
		p = p - s
	}
	if s > p {
		p = s
	}
	return p
}

var pow10i64 = func() [19]int64 {
	var p [19]int64
	p[0] = 1
	for i := 1; i < 19; i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// decimalFromBig converts unscaled*10^-scale into the column's decimal.
func (t *Type) decimalFromBig(unscaled *big.Int, scale int) (Value, error) {
	if t.DecimalAsString {
		return String(formatDecimal(unscaled, scale)), nil
	}
	target := t.Scale
	if target < 0 {
		target = 0
	}
	u := new(big.Int).Set(unscaled)
	switch {
	case scale < target:
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(target-scale)), nil))
	case scale > target:
		q, r := new(big.Int).QuoRem(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-target)), nil), new(big.Int))
		if r.Sign() != 0 {
			return Value{}, outOfRange(t, "%s has more than %d fraction digits", formatDecimal(unscaled, scale), target)
		}
		u = q
	}
	p := t.deltaPrecision()
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil)
	if new(big.Int).Abs(u).Cmp(limit) >= 0 {
		return Value{}, outOfRange(t, "%s exceeds precision %d", formatDecimal(unscaled, scale), p)
	}
	hi, lo := to128(u)
	return Value{Kind: KindDecimal, I: int64(lo), Hi: hi, Scale: int32(target)}, nil
}

func (t *Type) decimalFromRat(r *big.Rat) (Value, error) {
	if t.DecimalAsString {
		return String(r.FloatString(ratScale(r))), nil
	}
	target := t.Scale
	if target < 0 {
		target = 0
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(target)), nil)))
	if !scaled.IsInt() {
		return Value{}, outOfRange(t, "%s has more than %d fraction digits", r.FloatString(ratScale(r)), target)
	}
	return t.decimalFromBig(scaled.Num(), target)
}

// ratScale returns the number of fraction digits needed to print r exactly:
// r comes from decimal text, so its denominator is 2^a*5^b and max(a, b)
// digits suffice.
func ratScale(r *big.Rat) int {
	d := new(big.Int).Set(r.Denom())
	var twos, fives int
	m := new(big.Int)
	for d.Bit(0) == 0 && d.BitLen() > 1 {
		d.Rsh(d, 1)
		twos++
	}
	five := big.NewInt(5)
	for {
		q, rem := new(big.Int).QuoRem(d, five, m)
		if rem.Sign() != 0 {
			break
		}
		d = q
		fives++
	}
	return max(twos, fives)
}

func to128(u *big.Int) (hi int64, lo uint64) {
	var buf [16]byte
	a := new(big.Int).Abs(u)
	a.FillBytes(buf[:])
	if u.Sign() < 0 {
		// two's complement negate
		for i := range buf {
			buf[i] = ^buf[i]
		}
		for i := 15; i >= 0; i-- {
			buf[i]++
			if buf[i] != 0 {
				break
			}
		}
	}
	hi = int64(uint64(buf[0])<<56 | uint64(buf[1])<<48 | uint64(buf[2])<<40 | uint64(buf[3])<<32 |
		uint64(buf[4])<<24 | uint64(buf[5])<<16 | uint64(buf[6])<<8 | uint64(buf[7]))
	lo = uint64(buf[8])<<56 | uint64(buf[9])<<48 | uint64(buf[10])<<40 | uint64(buf[11])<<32 |
		uint64(buf[12])<<24 | uint64(buf[13])<<16 | uint64(buf[14])<<8 | uint64(buf[15])
	return hi, lo
}

// fromTwosComplement reads a big-endian two's complement integer.
func fromTwosComplement(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

// formatDecimal renders unscaled*10^-scale exactly.
func formatDecimal(unscaled *big.Int, scale int) string {
	s := new(big.Int).Abs(unscaled).String()
	neg := unscaled.Sign() < 0
	switch {
	case scale <= 0:
		s += strings.Repeat("0", -scale)
		if s != "0" && strings.Trim(s, "0") == "" {
			s = "0"
		}
	default:
		if len(s) <= scale {
			s = strings.Repeat("0", scale-len(s)+1) + s
		}
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if neg {
		return "-" + s
	}
	return s
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
