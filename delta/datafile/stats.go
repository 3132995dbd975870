package datafile

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/cdcapply/cdcapply/delta"
)

// StringPrefixLength is how many characters of a string column the stats
// keep, the length Spark's Delta writer uses.
const StringPrefixLength = 32

// maxTieBreaker is appended to a truncated string maximum so it sorts
// after every value that shares the prefix: U+10FFFF is the largest code
// point, and UTF-8 byte order is code point order.
const maxTieBreaker = "\U0010FFFF"

// Stats are the statistics of one data file, rendered by JSON in the key
// order Spark writes; the per-column parts mirror the schema with physical
// names.
type Stats struct {
	NumRecords int64
	minValues  *object
	maxValues  *object
	nullCount  *object
}

// object is a JSON object with ordered keys; values are json.RawMessage
// for leaves and *object for nested structs.
type object struct {
	keys []string
	vals []any
}

func (o *object) set(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

func (o *object) empty() bool { return o == nil || len(o.keys) == 0 }

func (o *object) write(b *bytes.Buffer) {
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		switch v := o.vals[i].(type) {
		case *object:
			v.write(b)
		case json.RawMessage:
			b.Write(v)
		}
	}
	b.WriteByte('}')
}

// JSON renders the stats as Spark does: numRecords, minValues, maxValues,
// nullCount, leaving out empty objects.
func (s *Stats) JSON() string {
	var b bytes.Buffer
	b.WriteString(`{"numRecords":`)
	b.WriteString(strconv.FormatInt(s.NumRecords, 10))
	for _, part := range []struct {
		name string
		o    *object
	}{{"minValues", s.minValues}, {"maxValues", s.maxValues}, {"nullCount", s.nullCount}} {
		if part.o.empty() {
			continue
		}
		b.WriteString(`,"` + part.name + `":`)
		part.o.write(&b)
	}
	b.WriteByte('}')
	return b.String()
}

// statsSelector decides which leaf columns get statistics.
type statsSelector struct {
	limit   int // leaves left under NumIndexedCols; <0 is unlimited
	columns map[string]bool
	byName  bool
}

func (l Layout) selector() *statsSelector {
	if len(l.StatsColumns) > 0 {
		m := map[string]bool{}
		for _, c := range l.StatsColumns {
			m[strings.ToLower(c)] = true
		}
		return &statsSelector{columns: m, byName: true}
	}
	return &statsSelector{limit: l.NumIndexedCols}
}

// take reports whether the leaf at logical path gets stats, counting it
// against the NumIndexedCols budget.
func (s *statsSelector) take(path []string) bool {
	if s.byName {
		for i := range path {
			if s.columns[strings.ToLower(strings.Join(path[:i+1], "."))] {
				return true
			}
		}
		return false
	}
	if s.limit < 0 {
		return true
	}
	if s.limit == 0 {
		return false
	}
	s.limit--
	return true
}

// ComputeStats computes the per-file statistics of rec, a record of the
// table's data columns in logical schema order (partition columns are not
// in data files and get no stats).
func (l Layout) ComputeStats(rec arrow.RecordBatch) *Stats {
	s := &Stats{NumRecords: rec.NumRows(), minValues: &object{}, maxValues: &object{}, nullCount: &object{}}
	sel := l.selector()
	ci := 0
	for _, f := range l.Schema.Fields {
		if l.isPartition(f.Name) || f.Type == delta.Void {
			continue
		}
		if ci >= int(rec.NumCols()) {
			break
		}
		l.fieldStats(sel, []string{f.Name}, f, rec.Column(ci), nil, s.minValues, s.maxValues, s.nullCount)
		ci++
	}
	return s
}

// fieldStats adds the stats of one field; parentNull marks rows where an
// enclosing struct is null (those count as nulls of every leaf inside).
func (l Layout) fieldStats(sel *statsSelector, path []string, f delta.StructField, arr arrow.Array, parentNull []bool, mins, maxs, nulls *object) {
	name := l.physicalName(f)
	if st, ok := f.Type.(delta.StructType); ok {
		sa := arr.(*array.Struct)
		isNull := parentNull
		if sa.NullN() > 0 {
			isNull = make([]bool, sa.Len())
			for i := range isNull {
				isNull[i] = sa.IsNull(i) || (parentNull != nil && parentNull[i])
			}
		}
		cmin, cmax, cnull := &object{}, &object{}, &object{}
		for i, cf := range st.Fields {
			l.fieldStats(sel, append(path[:len(path):len(path)], cf.Name), cf, sa.Field(i), isNull, cmin, cmax, cnull)
		}
		if !cmin.empty() {
			mins.set(name, cmin)
		}
		if !cmax.empty() {
			maxs.set(name, cmax)
		}
		if !cnull.empty() {
			nulls.set(name, cnull)
		}
		return
	}
	if !sel.take(path) {
		return
	}
	n := arr.NullN()
	if parentNull != nil {
		n = 0
		for i := 0; i < arr.Len(); i++ {
			if arr.IsNull(i) || parentNull[i] {
				n++
			}
		}
	}
	nulls.set(name, json.RawMessage(strconv.Itoa(n)))
	if lo, hi, ok := minMax(arr, parentNull); ok {
		mins.set(name, lo)
		maxs.set(name, hi)
	}
}

// minMax returns the JSON bounds of a leaf column, or ok=false when the
// type has no min/max stats (boolean, binary, arrays, maps, as in Spark)
// or no bound can be written (all null, NaN or infinity present).
func minMax(arr arrow.Array, parentNull []bool) (lo, hi json.RawMessage, ok bool) {
	valid := func(i int) bool { return arr.IsValid(i) && (parentNull == nil || !parentNull[i]) }
	first := -1
	for i := 0; i < arr.Len(); i++ {
		if valid(i) {
			first = i
			break
		}
	}
	if first < 0 {
		return nil, nil, false
	}
	num := func(s string) json.RawMessage { return json.RawMessage(s) }
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	ints := func(get func(int) int64) (json.RawMessage, json.RawMessage, bool) {
		mn, mx := bounds(first, arr.Len(), valid, get)
		return num(strconv.FormatInt(mn, 10)), num(strconv.FormatInt(mx, 10)), true
	}
	floats := func(get func(int) float64, bits int) (json.RawMessage, json.RawMessage, bool) {
		mn, mx := math.Inf(1), math.Inf(-1)
		for i := first; i < arr.Len(); i++ {
			if valid(i) {
				v := get(i)
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return nil, nil, false
				}
				mn, mx = math.Min(mn, v), math.Max(mx, v)
			}
		}
		return num(strconv.FormatFloat(mn, 'g', -1, bits)), num(strconv.FormatFloat(mx, 'g', -1, bits)), true
	}
	if parentNull == nil {
		// The usual case, a top-level column: a loop over the values
		// themselves instead of two calls per value.
		switch a := arr.(type) {
		case *array.Int32:
			mn, mx := sliceBounds(a.Int32Values(), arr, first)
			return num(strconv.FormatInt(int64(mn), 10)), num(strconv.FormatInt(int64(mx), 10)), true
		case *array.Int64:
			mn, mx := sliceBounds(a.Int64Values(), arr, first)
			return num(strconv.FormatInt(mn, 10)), num(strconv.FormatInt(mx, 10)), true
		case *array.Timestamp:
			mn, mx := sliceBounds(a.TimestampValues(), arr, first)
			utc := a.DataType().(*arrow.TimestampType).TimeZone != ""
			return str(formatMillis(floorDiv(int64(mn), 1000), utc)), str(formatMillis(-floorDiv(-int64(mx), 1000), utc)), true
		case *array.String:
			mn, mx := stringBounds(a, first)
			hi, ok := truncateMax(mx)
			if !ok {
				return nil, nil, false
			}
			return str(prefix(mn)), str(hi), true
		}
	}
	switch a := arr.(type) {
	case *array.Int8:
		return ints(func(i int) int64 { return int64(a.Value(i)) })
	case *array.Int16:
		return ints(func(i int) int64 { return int64(a.Value(i)) })
	case *array.Int32:
		return ints(func(i int) int64 { return int64(a.Value(i)) })
	case *array.Int64:
		return ints(func(i int) int64 { return a.Value(i) })
	case *array.Float32:
		return floats(func(i int) float64 { return float64(a.Value(i)) }, 32)
	case *array.Float64:
		return floats(a.Value, 64)
	case *array.Date32:
		mn, mx := bounds(first, a.Len(), valid, a.Value)
		return str(mn.FormattedString()), str(mx.FormattedString()), true
	case *array.Timestamp:
		mn, mx := bounds(first, a.Len(), valid, a.Value)
		utc := a.DataType().(*arrow.TimestampType).TimeZone != ""
		// Stats keep milliseconds: the minimum is floored and the maximum
		// ceiled so both still bound the microsecond values.
		return str(formatMillis(floorDiv(int64(mn), 1000), utc)), str(formatMillis(-floorDiv(-int64(mx), 1000), utc)), true
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		mn, mx := a.Value(first), a.Value(first)
		for i := first + 1; i < a.Len(); i++ {
			if valid(i) {
				v := a.Value(i)
				if v.Less(mn) {
					mn = v
				}
				if mx.Less(v) {
					mx = v
				}
			}
		}
		return num(decimalString(mn, scale)), num(decimalString(mx, scale)), true
	case *array.String:
		mn, mx := bounds(first, a.Len(), valid, a.Value)
		hi, ok := truncateMax(mx)
		if !ok {
			return nil, nil, false
		}
		return str(prefix(mn)), str(hi), true
	}
	return nil, nil, false
}

// sliceBounds is bounds over vals, arr's values (first being valid),
// with arr's own validity.
func sliceBounds[T cmp.Ordered](vals []T, arr arrow.Array, first int) (mn, mx T) {
	mn, mx = vals[first], vals[first]
	if arr.NullN() == 0 {
		for _, v := range vals[first+1:] {
			if v < mn {
				mn = v
			} else if v > mx {
				mx = v
			}
		}
		return mn, mx
	}
	bm, off := arr.NullBitmapBytes(), arr.Data().Offset()
	for i := first + 1; i < len(vals); i++ {
		if v := vals[i]; bitutil.BitIsSet(bm, off+i) {
			if v < mn {
				mn = v
			} else if v > mx {
				mx = v
			}
		}
	}
	return mn, mx
}

// stringBounds is bounds over a string array's values (first being valid).
func stringBounds(a *array.String, first int) (mn, mx string) {
	mn, mx = a.Value(first), a.Value(first)
	nulls := a.NullN() != 0
	for i := first + 1; i < a.Len(); i++ {
		if nulls && a.IsNull(i) {
			continue
		}
		if v := a.Value(i); v < mn {
			mn = v
		} else if v > mx {
			mx = v
		}
	}
	return mn, mx
}

// bounds returns the least and greatest of get(i) for the valid i in
// [first, n), first being valid. A value that lowers the minimum is not
// also compared with the maximum.
func bounds[T cmp.Ordered](first, n int, valid func(int) bool, get func(int) T) (mn, mx T) {
	mn, mx = get(first), get(first)
	for i := first + 1; i < n; i++ {
		if valid(i) {
			if v := get(i); v < mn {
				mn = v
			} else if v > mx {
				mx = v
			}
		}
	}
	return mn, mx
}

// prefix returns the first StringPrefixLength characters of s: a prefix
// sorts before s, so it is a valid minimum.
func prefix(s string) string {
	n := 0
	for i := range s {
		if n == StringPrefixLength {
			return s[:i]
		}
		n++
	}
	return s
}

// truncateMax returns a string of at most StringPrefixLength characters
// plus a tie-breaker that sorts at or after s, or ok=false when none does
// (s continues with the largest code point right after the prefix).
func truncateMax(s string) (string, bool) {
	p := prefix(s)
	if p == s {
		return s, true
	}
	hi := p + maxTieBreaker
	if hi < s {
		return "", false
	}
	return hi, utf8.ValidString(hi)
}

func formatMillis(ms int64, utc bool) string {
	t := time.UnixMilli(ms).UTC()
	if utc {
		return t.Format("2006-01-02T15:04:05.000Z")
	}
	return t.Format("2006-01-02T15:04:05.000")
}

// decimalString renders an unscaled decimal with scale digits after the
// point, exactly (no float rounding), as a JSON number.
func decimalString(v decimal128.Num, scale int32) string {
	s := v.BigInt().String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if scale > 0 {
		for len(s) <= int(scale) {
			s = "0" + s
		}
		s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	}
	if neg {
		s = "-" + s
	}
	return s
}
