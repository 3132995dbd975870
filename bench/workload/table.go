package workload

import (
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/cdcapply/cdcapply/bench/wordtext"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// colKind is the PostgreSQL type of a generated column.
type colKind uint8

const (
	colKey       colKind = iota // bigint primary key
	colInt                      // integer
	colBigint                   // bigint
	colText                     // varchar
	colTimestamp                // timestamp (without time zone): io.debezium.time.MicroTimestamp
	colDecimal                  // numeric(12,2): org.apache.kafka.connect.data.Decimal
	colBool                     // boolean
	colDoc                      // text that PostgreSQL TOASTs: the unavailable placeholder on unchanged updates
)

// middleKinds is the cycle the columns between the key and the TOASTed
// text are drawn from, so any column count gets a realistic mix.
var middleKinds = []colKind{colInt, colBigint, colText, colTimestamp, colDecimal, colBool, colText}

var kindPrefix = map[colKind]string{
	colInt: "qty", colBigint: "amount", colText: "name", colTimestamp: "updated_at",
	colDecimal: "price", colBool: "active",
}

// Decimal columns are numeric(12,2).
const (
	decimalScale     = 2
	decimalPrecision = 12
)

// unavailable is Debezium's placeholder for an unchanged TOASTed column
// (unavailable.value.placeholder's default).
const unavailable = "__debezium_unavailable_value"

// tsBase is 2020-01-01T00:00:00Z in microseconds; generated timestamps fall
// in the five years after it.
const (
	tsBase  = 1_577_836_800_000_000
	tsRange = 5 * 365 * 86400 * 1_000_000
)

type column struct {
	name string
	kind colKind
}

// table is the generated source table: its columns and how values are
// derived. A non-key value is a pure function of (seed, key, stamp,
// column): the oracle keeps stamps, never values, so its memory per key is
// a few words whatever the row width.
type table struct {
	cols        []column
	seed        uint64
	stringWidth int
	docWidth    int
	nullPercent uint64
}

func newTable(columns, stringWidth, docWidth, nullPercent int, seed uint64) *table {
	t := &table{seed: seed, stringWidth: stringWidth, docWidth: docWidth, nullPercent: uint64(nullPercent)}
	t.cols = append(t.cols, column{"id", colKey})
	for i := 1; i < columns-1; i++ {
		k := middleKinds[(i-1)%len(middleKinds)]
		t.cols = append(t.cols, column{fmt.Sprintf("%s_%d", kindPrefix[k], i), k})
	}
	t.cols = append(t.cols, column{"doc", colDoc})
	return t
}

// docCol is the index of the TOASTed column: always the last one.
func (t *table) docCol() int { return len(t.cols) - 1 }

func (t *table) hash(key int64, stamp uint64, col int) uint64 {
	return wordtext.Mix(wordtext.Mix(wordtext.Mix(t.seed^uint64(key))^stamp) + uint64(col))
}

// isNull reports whether column col of the version stamped stamp is NULL.
// Stamp 0 is "never written" (a delete of a key the source never had):
// every non-key column is NULL.
func (t *table) isNull(key int64, stamp uint64, col int) bool {
	if stamp == 0 {
		return true
	}
	return t.hash(key, stamp, col)%100 < t.nullPercent
}

func (t *table) decimalUnscaled(h uint64) int64 {
	return int64(h%20_000_000_000) - 10_000_000_000 // |x| < 10^10, fits numeric(12,2)
}

// value returns column col's typed value as the decoder reads it.
func (t *table) value(key int64, stamp uint64, col int) schema.Value {
	c := t.cols[col]
	if c.kind == colKey {
		return schema.Int(key)
	}
	if t.isNull(key, stamp, col) {
		return schema.Null
	}
	h := t.hash(key, stamp, col)
	switch c.kind {
	case colInt:
		return schema.Int(int64(int32(h >> 32)))
	case colBigint:
		return schema.Int(int64(h >> 1))
	case colText:
		return schema.String(string(wordtext.Append(nil, h, t.stringWidth)))
	case colDoc:
		return schema.String(string(wordtext.Append(nil, h, t.docWidth)))
	case colTimestamp:
		return schema.Int(tsBase + int64(h%tsRange))
	case colDecimal:
		u := t.decimalUnscaled(h)
		return schema.Value{Kind: schema.KindDecimal, I: u, Hi: u >> 63, Scale: decimalScale}
	case colBool:
		return schema.Bool(h&1 == 1)
	}
	panic("unreachable")
}

// appendJSON appends column col's value in JsonConverter form.
func (t *table) appendJSON(dst []byte, key int64, stamp uint64, col int) []byte {
	c := t.cols[col]
	if c.kind == colKey {
		return strconv.AppendInt(dst, key, 10)
	}
	if t.isNull(key, stamp, col) {
		return append(dst, "null"...)
	}
	h := t.hash(key, stamp, col)
	switch c.kind {
	case colInt:
		return strconv.AppendInt(dst, int64(int32(h>>32)), 10)
	case colBigint:
		return strconv.AppendInt(dst, int64(h>>1), 10)
	case colText, colDoc:
		n := t.stringWidth
		if c.kind == colDoc {
			n = t.docWidth
		}
		dst = append(dst, '"')
		dst = wordtext.Append(dst, h, n)
		return append(dst, '"')
	case colTimestamp:
		return strconv.AppendInt(dst, tsBase+int64(h%tsRange), 10)
	case colDecimal:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, unscaledBytes(t.decimalUnscaled(h)))
		return append(dst, '"')
	case colBool:
		return strconv.AppendBool(dst, h&1 == 1)
	}
	panic("unreachable")
}

// unscaledBytes is the minimal big-endian two's complement form Kafka
// Connect's Decimal logical type carries.
func unscaledBytes(v int64) []byte {
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	i := 0
	for i < 7 && ((b[i] == 0 && b[i+1]&0x80 == 0) || (b[i] == 0xff && b[i+1]&0x80 != 0)) {
		i++
	}
	return b[i:]
}

// connectField is the JsonConverter schema of one column.
func (c column) connectField() string {
	switch c.kind {
	case colKey:
		return `{"type":"int64","optional":false,"field":"` + c.name + `"}`
	case colInt:
		return `{"type":"int32","optional":true,"field":"` + c.name + `"}`
	case colBigint:
		return `{"type":"int64","optional":true,"field":"` + c.name + `"}`
	case colText, colDoc:
		return `{"type":"string","optional":true,"field":"` + c.name + `"}`
	case colTimestamp:
		return `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"` + c.name + `"}`
	case colDecimal:
		return `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"` +
			strconv.Itoa(decimalScale) + `","connect.decimal.precision":"` + strconv.Itoa(decimalPrecision) + `"},"field":"` + c.name + `"}`
	case colBool:
		return `{"type":"boolean","optional":true,"field":"` + c.name + `"}`
	}
	panic("unreachable")
}

// rowSchema is the Connect schema of the row struct named name (the
// envelope's before/after when field is set).
func (t *table) rowSchema(name, field string) string {
	var b strings.Builder
	b.WriteString(`{"type":"struct","fields":[`)
	for i, c := range t.cols {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.connectField())
	}
	b.WriteString(`],"optional":true,"name":"` + name + `"`)
	if field != "" {
		b.WriteString(`,"field":"` + field + `"`)
	}
	b.WriteString(`}`)
	return b.String()
}

// DeltaFields returns the table's source columns as the apply engine
// creates them from the decoded schema (Delta types per the schema
// package's mapping).
func (t *table) deltaFields() ([]delta.StructField, error) {
	st, err := schema.ParseConnect([]byte(t.rowSchema("Value", "")), nil)
	if err != nil {
		return nil, fmt.Errorf("compile row schema: %w", err)
	}
	out := make([]delta.StructField, len(st.Fields))
	for i, f := range st.Fields {
		out[i] = delta.StructField{Name: f.Name, Type: f.Type.Delta, Nullable: f.Type.Optional}
	}
	return out, nil
}

// decimalText renders a decimal value as delta-rs's reader script does.
func decimalText(v schema.Value) string {
	r := new(big.Rat).SetFrac(v.BigUnscaled(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(v.Scale)), nil))
	return r.FloatString(int(v.Scale))
}
