package interop_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta"
)

// The two readers are compared through one canonical text per value, so
// that "equal" means equal bits, not equal after some lossy formatting:
//
//	null                      null
//	boolean                   true | false
//	byte, short, integer, long the decimal integer
//	float, double             the float64 value's shortest round-trip text
//	                          (a float is widened to float64 first, as
//	                          pyarrow does), NaN, +Inf, -Inf
//	decimal(p,s)              the value with exactly s fraction digits
//	string                    Go-quoted, so "null" the string differs from null
//	binary                    base64
//	date                      days since 1970-01-01
//	timestamp, timestamp_ntz  microseconds since the epoch
const canonNull = "null"

// column is one column of a compared table.
type column struct {
	name string
	typ  delta.DataType
}

func columnsOf(s delta.StructType) []column {
	out := make([]column, 0, len(s.Fields))
	for _, f := range s.Fields {
		out = append(out, column{f.Name, f.Type})
	}
	return out
}

func canonFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// canonDecimal renders unscaled × 10^-scale with exactly scale fraction digits.
func canonDecimal(unscaled *big.Int, scale int) string {
	neg := unscaled.Sign() < 0
	digits := new(big.Int).Abs(unscaled).String()
	if scale > 0 {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// parseDecimal turns a plain decimal text into its unscaled value at scale,
// refusing text with more fraction digits than the scale holds.
func parseDecimal(s string, scale int) (*big.Int, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("parse decimal %q", s)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() {
		return nil, fmt.Errorf("parse decimal %q: more than %d fraction digits", s, scale)
	}
	return r.Num(), nil
}

// canonGo renders a value of the Go oracle. Oracle values are typed as the
// column (int8 for byte, ..., string decimal text for decimal, []byte for
// binary, int32 days for date, int64 microseconds for timestamps); nil is
// null.
func canonGo(v any, typ delta.DataType) (string, error) {
	if v == nil {
		return canonNull, nil
	}
	switch typ := typ.(type) {
	case delta.DecimalType:
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("decimal oracle value %T, want string", v)
		}
		u, err := parseDecimal(s, typ.Scale)
		if err != nil {
			return "", err
		}
		return canonDecimal(u, typ.Scale), nil
	case delta.PrimitiveType:
		switch x := v.(type) {
		case bool:
			return strconv.FormatBool(x), nil
		case int8:
			return strconv.FormatInt(int64(x), 10), nil
		case int16:
			return strconv.FormatInt(int64(x), 10), nil
		case int32:
			return strconv.FormatInt(int64(x), 10), nil
		case int64:
			return strconv.FormatInt(x, 10), nil
		case float32:
			return canonFloat(float64(x)), nil
		case float64:
			return canonFloat(x), nil
		case string:
			return strconv.Quote(x), nil
		case []byte:
			return base64.StdEncoding.EncodeToString(x), nil
		}
	}
	return "", fmt.Errorf("oracle value %T for type %s", v, typ)
}

// canonJSON renders a value as read_table.py reports it.
func canonJSON(v any, typ delta.DataType) (string, error) {
	if v == nil {
		return canonNull, nil
	}
	switch typ := typ.(type) {
	case delta.DecimalType:
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("decimal %v: want a string", v)
		}
		u, err := parseDecimal(s, typ.Scale)
		if err != nil {
			return "", err
		}
		return canonDecimal(u, typ.Scale), nil
	case delta.PrimitiveType:
		switch typ {
		case delta.Boolean:
			if b, ok := v.(bool); ok {
				return strconv.FormatBool(b), nil
			}
		case delta.Byte, delta.Short, delta.Integer, delta.Long, delta.Date, delta.Timestamp, delta.TimestampNTZ:
			if n, ok := v.(json.Number); ok {
				i, err := strconv.ParseInt(string(n), 10, 64)
				if err != nil {
					return "", fmt.Errorf("%s %v: %w", typ, v, err)
				}
				return strconv.FormatInt(i, 10), nil
			}
		case delta.Float, delta.Double:
			switch x := v.(type) {
			case json.Number:
				f, err := strconv.ParseFloat(string(x), 64)
				if err != nil {
					return "", fmt.Errorf("%s %v: %w", typ, v, err)
				}
				return canonFloat(f), nil
			case string:
				switch x {
				case "NaN", "+Inf", "-Inf":
					return x, nil
				}
			}
		case delta.String:
			if s, ok := v.(string); ok {
				return strconv.Quote(s), nil
			}
		case delta.Binary:
			if s, ok := v.(string); ok {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return "", fmt.Errorf("binary %q: %w", s, err)
				}
				return base64.StdEncoding.EncodeToString(b), nil
			}
		}
	}
	return "", fmt.Errorf("deltalake value %v (%T) for type %s", v, v, typ)
}

// canonArrow renders row i of an Arrow column as read by our datafile package.
func canonArrow(arr arrow.Array, i int, typ delta.DataType) (string, error) {
	if arr.IsNull(i) {
		return canonNull, nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return strconv.FormatBool(a.Value(i)), nil
	case *array.Int8:
		return strconv.FormatInt(int64(a.Value(i)), 10), nil
	case *array.Int16:
		return strconv.FormatInt(int64(a.Value(i)), 10), nil
	case *array.Int32:
		return strconv.FormatInt(int64(a.Value(i)), 10), nil
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10), nil
	case *array.Float32:
		return canonFloat(float64(a.Value(i))), nil
	case *array.Float64:
		return canonFloat(a.Value(i)), nil
	case *array.Decimal128:
		dt, ok := typ.(delta.DecimalType)
		if !ok {
			return "", fmt.Errorf("decimal128 column for type %s", typ)
		}
		at := a.DataType().(*arrow.Decimal128Type)
		if int(at.Scale) != dt.Scale {
			return "", fmt.Errorf("decimal column of scale %d for type %s", at.Scale, typ)
		}
		return canonDecimal(a.Value(i).BigInt(), dt.Scale), nil
	case *array.String:
		return strconv.Quote(a.Value(i)), nil
	case *array.LargeString:
		return strconv.Quote(a.Value(i)), nil
	case *array.Binary:
		return base64.StdEncoding.EncodeToString(a.Value(i)), nil
	case *array.LargeBinary:
		return base64.StdEncoding.EncodeToString(a.Value(i)), nil
	case *array.Date32:
		return strconv.FormatInt(int64(a.Value(i)), 10), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		v := int64(a.Value(i))
		switch unit {
		case arrow.Second:
			v *= 1_000_000
		case arrow.Millisecond:
			v *= 1_000
		case arrow.Nanosecond:
			v /= 1_000 // the canonical unit is the protocol's microsecond
		}
		return strconv.FormatInt(v, 10), nil
	}
	return "", fmt.Errorf("arrow column %s for type %s", arr.DataType(), typ)
}

// rowKey joins a row's canonical values in column order.
func rowKey(cols []column, vals []string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name)
		b.WriteByte('=')
		b.WriteString(vals[i])
	}
	return b.String()
}

// diffRows compares two multisets of row keys and describes the rows only
// one side has; "" means equal.
func diffRows(wantName string, want []string, gotName string, got []string) string {
	count := map[string]int{}
	for _, r := range want {
		count[r]++
	}
	for _, r := range got {
		count[r]--
	}
	var onlyWant, onlyGot []string
	for r, n := range count {
		for ; n > 0; n-- {
			onlyWant = append(onlyWant, r)
		}
		for ; n < 0; n++ {
			onlyGot = append(onlyGot, r)
		}
	}
	if len(onlyWant) == 0 && len(onlyGot) == 0 {
		return ""
	}
	sort.Strings(onlyWant)
	sort.Strings(onlyGot)
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d rows, %s %d\n", wantName, len(want), gotName, len(got))
	for _, r := range onlyWant {
		fmt.Fprintf(&b, "  only in %s: %s\n", wantName, r)
	}
	for _, r := range onlyGot {
		fmt.Fprintf(&b, "  only in %s: %s\n", gotName, r)
	}
	return b.String()
}

// jsonRows canonicalises read_table.py's rows in cols' order; a column the
// reader did not return is an error, not a null.
func jsonRows(cols []column, rows []map[string]any) ([]string, error) {
	out := make([]string, 0, len(rows))
	for i, r := range rows {
		vals := make([]string, len(cols))
		for j, c := range cols {
			v, ok := r[c.name]
			if !ok {
				return nil, fmt.Errorf("deltalake row %d lacks column %q", i, c.name)
			}
			s, err := canonJSON(v, c.typ)
			if err != nil {
				return nil, fmt.Errorf("deltalake row %d column %q: %w", i, c.name, err)
			}
			vals[j] = s
		}
		if len(r) != len(cols) {
			return nil, fmt.Errorf("deltalake row %d has %d columns, the table %d", i, len(r), len(cols))
		}
		out = append(out, rowKey(cols, vals))
	}
	return out, nil
}

// arrowRows canonicalises every row of rec, whose columns are looked up by
// name so that a reader's column order does not matter.
func arrowRows(cols []column, rec arrow.RecordBatch) ([]string, error) {
	idx := make([]int, len(cols))
	for j, c := range cols {
		found := rec.Schema().FieldIndices(c.name)
		if len(found) != 1 {
			return nil, fmt.Errorf("record has %d columns named %q", len(found), c.name)
		}
		idx[j] = found[0]
	}
	out := make([]string, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		vals := make([]string, len(cols))
		for j, c := range cols {
			s, err := canonArrow(rec.Column(idx[j]), i, c.typ)
			if err != nil {
				return nil, fmt.Errorf("row %d column %q: %w", i, c.name, err)
			}
			vals[j] = s
		}
		out = append(out, rowKey(cols, vals))
	}
	return out, nil
}
