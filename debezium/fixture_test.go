package debezium

// Test records shaped like the PostgreSQL connector's documented output
// (Debezium connector docs, "change event values"): a 10-column table with
// the common logical types, as JSON with and without an inline schema, as
// Avro in the Confluent wire format, and flattened by ExtractNewRecordState.

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
)

const pgColumns = `[` +
	`{"type":"int32","optional":false,"default":0,"field":"id"},` +
	`{"type":"string","optional":true,"field":"name"},` +
	`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"},` +
	`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"created_at"},` +
	`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"updated_at"},` +
	`{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"birthday"},` +
	`{"type":"boolean","optional":true,"field":"active"},` +
	`{"type":"bytes","optional":true,"field":"payload"},` +
	`{"type":"double","optional":true,"field":"score"},` +
	`{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"tags"}` +
	`]`

const pgSourceSchema = `{"type":"struct","fields":[` +
	`{"type":"string","optional":false,"field":"version"},` +
	`{"type":"string","optional":false,"field":"connector"},` +
	`{"type":"string","optional":false,"field":"name"},` +
	`{"type":"int64","optional":false,"field":"ts_ms"},` +
	`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},` +
	`{"type":"string","optional":false,"field":"db"},` +
	`{"type":"string","optional":true,"field":"sequence"},` +
	`{"type":"string","optional":false,"field":"schema"},` +
	`{"type":"string","optional":false,"field":"table"},` +
	`{"type":"int64","optional":true,"field":"txId"},` +
	`{"type":"int64","optional":true,"field":"lsn"},` +
	`{"type":"int64","optional":true,"field":"xmin"}` +
	`],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}`

func pgEnvelopeSchema() string {
	return `{"type":"struct","fields":[` +
		`{"type":"struct","fields":` + pgColumns + `,"optional":true,"name":"dbserver1.public.customers.Value","field":"before"},` +
		`{"type":"struct","fields":` + pgColumns + `,"optional":true,"name":"dbserver1.public.customers.Value","field":"after"},` +
		pgSourceSchema + `,` +
		`{"type":"string","optional":false,"field":"op"},` +
		`{"type":"int64","optional":true,"field":"ts_ms"},` +
		`{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}` +
		`],"optional":false,"name":"dbserver1.public.customers.Envelope","version":1}`
}

const pgKeySchema = `{"type":"struct","fields":[{"type":"int32","optional":false,"default":0,"field":"id"}],"optional":false,"name":"dbserver1.public.customers.Key"}`

// row is one test row of the 10-column table.
type row struct {
	id        int32
	name      string
	priceCent int64 // price in cents (scale 2)
	createdUs int64
	updated   string // ZonedTimestamp text
	birthday  int32
	active    bool
	payload   []byte
	score     float64
	tags      []string
}

func sampleRow(id int32) row {
	return row{
		id: id, name: fmt.Sprintf("customer \"%d\" é", id), priceCent: 123456 + int64(id),
		createdUs: 1_700_000_000_123_456 + int64(id), updated: "2023-11-14T22:13:20.654321Z",
		birthday: 19000 + id, active: id%2 == 0, payload: []byte{0, 1, 2, byte(id)},
		score: 2.5 * float64(id), tags: []string{"a", "b\nc"},
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// decimalBytes is the minimal two's complement form Java writes.
func decimalBytes(v int64) []byte {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(v))
	b := buf[:]
	for len(b) > 1 && ((b[0] == 0 && b[1]&0x80 == 0) || (b[0] == 0xff && b[1]&0x80 != 0)) {
		b = b[1:]
	}
	return b
}

func (r row) json() string {
	tags := make([]string, len(r.tags))
	for i, t := range r.tags {
		tags[i] = jsonString(t)
	}
	return fmt.Sprintf(`{"id":%d,"name":%s,"price":"%s","created_at":%d,"updated_at":"%s","birthday":%d,"active":%t,"payload":"%s","score":%v,"tags":[%s]}`,
		r.id, jsonString(r.name), base64.StdEncoding.EncodeToString(decimalBytes(r.priceCent)), r.createdUs, r.updated,
		r.birthday, r.active, base64.StdEncoding.EncodeToString(r.payload), r.score, strings.Join(tags, ","))
}

// pgSource renders a PostgreSQL source block; lastCommit < 0 means null.
func pgSource(lastCommit, lsn int64) string {
	seq := `null`
	if lsn >= 0 {
		lc := "null"
		if lastCommit >= 0 {
			lc = fmt.Sprintf(`\"%d\"`, lastCommit)
		}
		seq = fmt.Sprintf(`"[%s,\"%d\"]"`, lc, lsn)
	}
	return fmt.Sprintf(`{"version":"2.7.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1700000000000,"snapshot":"false","db":"inventory","sequence":%s,"schema":"public","table":"customers","txId":771,"lsn":%d,"xmin":null}`, seq, lsn)
}

// pgValue renders an envelope; before/after "" means null.
func pgValue(withSchema bool, before, after, op, source string) []byte {
	if before == "" {
		before = "null"
	}
	if after == "" {
		after = "null"
	}
	payload := fmt.Sprintf(`{"before":%s,"after":%s,"source":%s,"op":"%s","ts_ms":1700000000500,"transaction":null}`, before, after, source, op)
	if !withSchema {
		return []byte(payload)
	}
	return []byte(`{"schema":` + pgEnvelopeSchema() + `,"payload":` + payload + `}`)
}

func pgKey(withSchema bool, id int32) []byte {
	if !withSchema {
		return []byte(fmt.Sprintf(`{"id":%d}`, id))
	}
	return []byte(fmt.Sprintf(`{"schema":%s,"payload":{"id":%d}}`, pgKeySchema, id))
}

// flatValue renders an ExtractNewRecordState record with add.fields=op,lsn,source.ts_ms
// and delete.handling.mode=rewrite.
func flatValue(withSchema bool, r row, op string, lsn int64, deleted bool) []byte {
	body := r.json()
	body = body[:len(body)-1] + fmt.Sprintf(`,"__op":"%s","__lsn":%d,"__source_ts_ms":1700000000000,"__deleted":"%t"}`, op, lsn, deleted)
	if !withSchema {
		return []byte(body)
	}
	cols := pgColumns[:len(pgColumns)-1] + `,{"type":"string","optional":true,"field":"__op"},{"type":"int64","optional":true,"field":"__lsn"},{"type":"int64","optional":true,"field":"__source_ts_ms"},{"type":"string","optional":true,"field":"__deleted"}]`
	return []byte(`{"schema":{"type":"struct","fields":` + cols + `,"optional":false,"name":"dbserver1.public.customers.Value"},"payload":` + body + `}`)
}

// Avro: the schema the Confluent AvroConverter derives from the Connect
// schema above.
const avroValueColumns = `[` +
	`{"name":"id","type":{"type":"int","connect.default":0},"default":0},` +
	`{"name":"name","type":["null","string"],"default":null},` +
	`{"name":"price","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},` +
	`{"name":"created_at","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},` +
	`{"name":"updated_at","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},` +
	`{"name":"birthday","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null},` +
	`{"name":"active","type":["null","boolean"],"default":null},` +
	`{"name":"payload","type":["null","bytes"],"default":null},` +
	`{"name":"score","type":["null","double"],"default":null},` +
	`{"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null}` +
	`]`

const avroEnvelopeSchema = `{"type":"record","name":"Envelope","namespace":"dbserver1.public.customers","fields":[` +
	`{"name":"before","type":["null",{"type":"record","name":"Value","fields":` + avroValueColumns + `,"connect.name":"dbserver1.public.customers.Value"}],"default":null},` +
	`{"name":"after","type":["null","Value"],"default":null},` +
	`{"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[` +
	`{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},` +
	`{"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false,incremental"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},` +
	`{"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},{"name":"schema","type":"string"},{"name":"table","type":"string"},` +
	`{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null},{"name":"xmin","type":["null","long"],"default":null}` +
	`],"connect.name":"io.debezium.connector.postgresql.Source"}},` +
	`{"name":"op","type":"string"},{"name":"ts_ms","type":["null","long"],"default":null},` +
	`{"name":"transaction","type":["null",{"type":"record","name":"block","namespace":"event","fields":[{"name":"id","type":"string"},{"name":"total_order","type":"long"},{"name":"data_collection_order","type":"long"}],"connect.version":1,"connect.name":"event.block"}],"default":null}` +
	`],"connect.version":1,"connect.name":"dbserver1.public.customers.Envelope"}`

const avroKeySchema = `{"type":"record","name":"Key","namespace":"dbserver1.public.customers","fields":[{"name":"id","type":{"type":"int","connect.default":0},"default":0}],"connect.name":"dbserver1.public.customers.Key"}`

const (
	avroValueID = 9001
	avroKeyID   = 9002
)

func (r row) avroNative() map[string]any {
	tags := make([]any, len(r.tags))
	for i, t := range r.tags {
		tags[i] = goavro.Union("string", t)
	}
	return map[string]any{
		"id":         r.id,
		"name":       goavro.Union("string", r.name),
		"price":      goavro.Union("bytes.decimal", bigRat(r.priceCent, 2)),
		"created_at": goavro.Union("long", r.createdUs),
		"updated_at": goavro.Union("string", r.updated),
		"birthday":   goavro.Union("int", r.birthday),
		"active":     goavro.Union("boolean", r.active),
		"payload":    goavro.Union("bytes", r.payload),
		"score":      goavro.Union("double", r.score),
		"tags":       goavro.Union("array", tags),
	}
}

func wire(id int, body []byte) []byte {
	out := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, body...)
}

// avroValue encodes an envelope with goavro; before/after nil means null.
func avroValue(t testing.TB, before, after *row, op string, lastCommit, lsn int64) []byte {
	t.Helper()
	codec, err := goavro.NewCodec(avroEnvelopeSchema)
	if err != nil {
		t.Fatal(err)
	}
	var b, a any
	if before != nil {
		b = goavro.Union("dbserver1.public.customers.Value", before.avroNative())
	}
	if after != nil {
		a = goavro.Union("dbserver1.public.customers.Value", after.avroNative())
	}
	seq := any(nil)
	if lsn >= 0 {
		lc := "null"
		if lastCommit >= 0 {
			lc = fmt.Sprintf(`"%d"`, lastCommit)
		}
		seq = goavro.Union("string", fmt.Sprintf(`[%s,"%d"]`, lc, lsn))
	}
	native := map[string]any{
		"before": b, "after": a,
		"source": map[string]any{
			"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": int64(1700000000000),
			"snapshot": goavro.Union("string", "false"), "db": "inventory", "sequence": seq,
			"schema": "public", "table": "customers", "txId": goavro.Union("long", int64(771)),
			"lsn": goavro.Union("long", lsn), "xmin": nil,
		},
		"op": op, "ts_ms": goavro.Union("long", int64(1700000000500)), "transaction": nil,
	}
	body, err := codec.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatal(err)
	}
	return wire(avroValueID, body)
}

func avroKey(t testing.TB, id int32) []byte {
	t.Helper()
	codec, err := goavro.NewCodec(avroKeySchema)
	if err != nil {
		t.Fatal(err)
	}
	body, err := codec.BinaryFromNative(nil, map[string]any{"id": id})
	if err != nil {
		t.Fatal(err)
	}
	return wire(avroKeyID, body)
}

func bigRat(unscaled int64, scale int64) *big.Rat {
	return new(big.Rat).SetFrac(big.NewInt(unscaled), new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil))
}
