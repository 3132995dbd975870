package delta

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// statsParsed rebuilds add.stats JSON from the add.stats_parsed struct, for
// checkpoints written with delta.checkpoint.writeStatsAsJson=false: they
// carry statistics only in parsed form, and data skipping downstream reads
// the JSON form. set is called for the adds (slots of idx) that have
// stats_parsed; values the JSON form cannot carry (binary, NaN, INT96) are
// left out, which only makes the statistics less complete, never wrong.
func (d *ckptDecoder) statsParsed(col *parquet.Column, idx []int32, set func(i int32, stats string)) {
	sidx, n := d.present(col, idx)
	if n == 0 || d.err != nil {
		return
	}
	trees := make([]map[string]any, n)
	var walk func(c *parquet.Column, path []string)
	walk = func(c *parquet.Column, path []string) {
		if c.Leaf() {
			d.statsLeaf(c, sidx, path, trees)
			return
		}
		if c.Repeated() || c.MaxRepetitionLevel() > 0 {
			return // no statistic is a list or a map
		}
		for _, ch := range c.Columns() {
			walk(ch, append(path[:len(path):len(path)], ch.Name()))
		}
	}
	for _, ch := range col.Columns() {
		walk(ch, []string{ch.Name()})
	}
	if d.err != nil {
		return
	}
	parents := pqSlotParents(idx, sidx, n)
	for i, t := range trees {
		if t == nil {
			continue
		}
		b, err := json.Marshal(t)
		if err != nil {
			d.fail(col, "encode stats: %v", err)
			return
		}
		set(parents[i], string(b))
	}
}

// statsLeaf puts the non-null values of one stats_parsed leaf into the trees
// at path.
func (d *ckptDecoder) statsLeaf(c *parquet.Column, idx []int32, path []string, trees []map[string]any) {
	if c.MaxRepetitionLevel() > 0 {
		return
	}
	conv := statsConverter(c)
	if conv == nil {
		return
	}
	max := c.MaxDefinitionLevel()
	d.scan(c, func(row int, v parquet.Value) {
		i := idx[row]
		if i < 0 || v.DefinitionLevel() != max {
			return
		}
		x, ok := conv(v)
		if !ok {
			return
		}
		if trees[i] == nil {
			trees[i] = map[string]any{}
		}
		m := trees[i]
		for _, p := range path[:len(path)-1] {
			next, _ := m[p].(map[string]any)
			if next == nil {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[path[len(path)-1]] = x
	})
}

// statsConverter returns how to turn a leaf's values into the JSON stats
// form Delta writers use, or nil when the type has no JSON statistic.
func statsConverter(c *parquet.Column) func(parquet.Value) (any, bool) {
	typ := c.Type()
	var lv format.LogicalTypeValue
	if lt := typ.LogicalType(); lt != nil {
		lv = lt.Value
	}
	var ct deprecated.ConvertedType = -1
	if p := typ.ConvertedType(); p != nil {
		ct = *p
	}
	switch typ.Kind() {
	case parquet.Boolean:
		return func(v parquet.Value) (any, bool) { return v.Boolean(), true }
	case parquet.Int32:
		switch t := lv.(type) {
		case *format.DateType:
			return func(v parquet.Value) (any, bool) { return statsDate(int64(v.Int32())), true }
		case *format.DecimalType:
			return func(v parquet.Value) (any, bool) { return statsDecimal(big.NewInt(int64(v.Int32())), t.Scale), true }
		}
		if ct == deprecated.Date {
			return func(v parquet.Value) (any, bool) { return statsDate(int64(v.Int32())), true }
		}
		return func(v parquet.Value) (any, bool) { return int64(v.Int32()), true }
	case parquet.Int64:
		switch t := lv.(type) {
		case *format.TimestampType:
			unit := time.Microsecond
			if t.Unit.Value != nil {
				unit = t.Unit.Value.Duration()
			}
			return func(v parquet.Value) (any, bool) { return statsTimestamp(v.Int64(), unit, t.IsAdjustedToUTC), true }
		case *format.DecimalType:
			return func(v parquet.Value) (any, bool) { return statsDecimal(big.NewInt(v.Int64()), t.Scale), true }
		}
		switch ct {
		case deprecated.TimestampMillis:
			return func(v parquet.Value) (any, bool) { return statsTimestamp(v.Int64(), time.Millisecond, true), true }
		case deprecated.TimestampMicros:
			return func(v parquet.Value) (any, bool) { return statsTimestamp(v.Int64(), time.Microsecond, true), true }
		}
		return func(v parquet.Value) (any, bool) { return v.Int64(), true }
	case parquet.Float:
		return func(v parquet.Value) (any, bool) { return statsFloat(float64(v.Float())) }
	case parquet.Double:
		return func(v parquet.Value) (any, bool) { return statsFloat(v.Double()) }
	case parquet.ByteArray, parquet.FixedLenByteArray:
		switch t := lv.(type) {
		case *format.StringType:
			return func(v parquet.Value) (any, bool) { return string(v.ByteArray()), true }
		case *format.DecimalType:
			return func(v parquet.Value) (any, bool) {
				return statsDecimal(statsBigEndian(v.ByteArray()), t.Scale), true
			}
		}
		if ct == deprecated.UTF8 {
			return func(v parquet.Value) (any, bool) { return string(v.ByteArray()), true }
		}
	}
	return nil
}

func statsDate(days int64) string {
	return time.Unix(days*86400, 0).UTC().Format("2006-01-02")
}

// statsTimestamp formats a timestamp as Delta's JSON stats do: millisecond
// precision, "Z" for UTC-adjusted timestamps and no zone for timestamp_ntz.
func statsTimestamp(n int64, unit time.Duration, utc bool) string {
	var t time.Time
	switch unit {
	case time.Millisecond:
		t = time.UnixMilli(n)
	case time.Nanosecond:
		t = time.Unix(0, n)
	default:
		t = time.UnixMicro(n)
	}
	if utc {
		return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	return t.UTC().Format("2006-01-02T15:04:05.000")
}

func statsFloat(f float64) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, false
	}
	return f, true
}

// statsBigEndian reads a two's complement big-endian integer, the Parquet
// encoding of a binary decimal.
func statsBigEndian(b []byte) *big.Int {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n
}

// statsDecimal writes an unscaled integer with scale as a JSON number.
func statsDecimal(unscaled *big.Int, scale int32) json.Number {
	s := unscaled.String()
	if scale <= 0 {
		return json.Number(s + strings.Repeat("0", int(-scale)))
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= int(scale) {
		s = strings.Repeat("0", int(scale)-len(s)+1) + s
	}
	s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	if neg {
		s = "-" + s
	}
	return json.Number(s)
}

// statsFixTimestamps makes the timestamp statistics of adds rebuilt from
// stats_parsed follow the table schema rather than the Parquet annotation:
// Delta writes "…Z" for timestamp columns and no zone for timestamp_ntz,
// and some writers annotate stats_parsed timestamps as not UTC-adjusted
// either way. Stats are keyed by physical column names under column
// mapping, so the schema is walked by those.
func statsFixTimestamps(adds []*Add, md *Metadata) error {
	schema, err := md.Schema()
	if err != nil {
		return fmt.Errorf("fix rebuilt stats: %w", err)
	}
	kinds := map[string]PrimitiveType{}
	var walk func(prefix string, s StructType)
	walk = func(prefix string, s StructType) {
		for _, f := range s.Fields {
			name := f.Name
			if pn, ok := f.Metadata["delta.columnMapping.physicalName"].(string); ok && pn != "" {
				name = pn
			}
			switch t := f.Type.(type) {
			case StructType:
				walk(prefix+name+".", t)
			case PrimitiveType:
				if t == Timestamp || t == TimestampNTZ {
					kinds[prefix+name] = t
				}
			}
		}
	}
	walk("", schema)
	if len(kinds) == 0 {
		return nil
	}
	for _, a := range adds {
		dec := json.NewDecoder(strings.NewReader(a.Stats))
		dec.UseNumber()
		var st map[string]any
		if err := dec.Decode(&st); err != nil {
			return fmt.Errorf("fix rebuilt stats of %s: %w", a.Path, err)
		}
		changed := false
		var fix func(prefix string, m map[string]any)
		fix = func(prefix string, m map[string]any) {
			for k, v := range m {
				switch x := v.(type) {
				case map[string]any:
					fix(prefix+k+".", x)
				case string:
					switch kinds[prefix+k] {
					case Timestamp:
						if !strings.HasSuffix(x, "Z") {
							m[k], changed = x+"Z", true
						}
					case TimestampNTZ:
						if strings.HasSuffix(x, "Z") {
							m[k], changed = strings.TrimSuffix(x, "Z"), true
						}
					}
				}
			}
		}
		for _, key := range []string{"minValues", "maxValues"} {
			if m, ok := st[key].(map[string]any); ok {
				fix("", m)
			}
		}
		if changed {
			b, err := json.Marshal(st)
			if err != nil {
				return fmt.Errorf("fix rebuilt stats of %s: %w", a.Path, err)
			}
			a.Stats = string(b)
		}
	}
	return nil
}
