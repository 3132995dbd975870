package debezium

import (
	"context"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
)

// PostgreSQL logical decoding messages (pg_logical_emit_message) as the
// Debezium PostgreSQL connector emits them on <prefix>.message: op "m", a
// source block whose schema and table are empty, no before/after, and a
// message struct {prefix, content}. Hand-made after the example in
// Debezium's documentation of the DecodeLogicalDecodingMessageContent SMT
// (key {"prefix":...}, value {op, ts_ms, source, message}); no recording of
// one exists in testdata/real (scripts/record-fixtures.sh records them only
// with FIXTURES_MESSAGES=on).
const (
	pgMessageSource    = `{"version":"3.6.1.Final","connector":"postgresql","name":"dbserver1","ts_ms":1723115239782,"snapshot":"false","db":"inventory","sequence":"[\"26997744\",\"26997904\"]","schema":"","table":"","txId":756,"lsn":26997904,"xmin":null}`
	pgMessageKeyJSON   = `{"prefix":"test-prefix"}`
	pgMessageValueJSON = `{"op":"m","ts_ms":1723115240065,"source":` + pgMessageSource +
		`,"message":{"prefix":"test-prefix","content":"eyJpZCI6IDF9"}}`
	pgMessageSchema = `{"type":"struct","fields":[` +
		`{"type":"string","optional":false,"field":"op"},` +
		`{"type":"int64","optional":true,"field":"ts_ms"},` +
		pgSourceSchema + `,` +
		`{"type":"struct","fields":[{"type":"string","optional":false,"field":"prefix"},{"type":"bytes","optional":true,"field":"content"}],"optional":false,"name":"io.debezium.connector.postgresql.Message","field":"message"}` +
		`],"optional":false,"name":"io.debezium.connector.postgresql.MessageValue"}`
	pgMessageKeySchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"prefix"}],"optional":false,"name":"io.debezium.connector.postgresql.MessageKey"}`
)

// TestLogicalMessagesAreSkipped: a logical decoding message is classified
// ClassMessage (skipped by the engine like a heartbeat, never quarantined)
// in every value form: JSON with and without inline schema, flattened, and
// Avro. Any other unknown op is still rejected.
func TestLogicalMessagesAreSkipped(t *testing.T) {
	ctx := context.Background()
	withSchema := `{"schema":` + pgMessageSchema + `,"payload":` + pgMessageValueJSON + `}`
	keyWithSchema := `{"schema":` + pgMessageKeySchema + `,"payload":` + pgMessageKeyJSON + `}`
	for _, shape := range []Envelope{EnvelopeDebezium, EnvelopeFlattened} {
		d := newPG(t, EnvelopeShape(shape))
		for name, kv := range map[string][2]string{
			"inline schema": {keyWithSchema, withSchema},
			"no schema":     {pgMessageKeyJSON, pgMessageValueJSON},
		} {
			ch, err := d.Decode(ctx, rec("dbserver1.message", 7, []byte(kv[0]), []byte(kv[1])))
			if err != nil {
				t.Errorf("envelope %d, %s: %v", shape, name, err)
				continue
			}
			if ch.Class != ClassMessage || ch.Class.String() != "logical_message" || ch.TsMs != 1723115240065 {
				t.Errorf("envelope %d, %s: class %s ts %d, want logical_message at 1723115240065", shape, name, ch.Class, ch.TsMs)
			}
			if ch.Before.Present() || ch.After.Present() || len(ch.Key.Values) != 0 {
				t.Errorf("envelope %d, %s: a message must carry no row or key: %+v", shape, name, ch)
			}
		}
	}

	// Avro: the same message through the AvroConverter's shape.
	const avroMsg = `{"type":"record","name":"MessageValue","namespace":"io.debezium.connector.postgresql","fields":[
{"name":"op","type":"string"},{"name":"ts_ms","type":["null","long"],"default":null},
{"name":"source","type":{"type":"record","name":"Source","fields":[{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},
 {"name":"snapshot","type":["string","null"],"default":"false"},{"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},
 {"name":"schema","type":"string"},{"name":"table","type":"string"},{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null}]}},
{"name":"message","type":{"type":"record","name":"Message","fields":[{"name":"prefix","type":"string"},{"name":"content","type":["null","bytes"],"default":null}]}}]}`
	const avroMsgKey = `{"type":"record","name":"MessageKey","namespace":"io.debezium.connector.postgresql","fields":[{"name":"prefix","type":"string"}]}`
	enc := func(text string, id int, native map[string]any) []byte {
		c, err := goavro.NewCodec(text)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.BinaryFromNative(nil, native)
		if err != nil {
			t.Fatal(err)
		}
		return wire(id, b)
	}
	value := enc(avroMsg, 31, map[string]any{
		"op": "m", "ts_ms": goavro.Union("long", int64(1723115240065)),
		"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": int64(1723115239782),
			"snapshot": goavro.Union("string", "false"), "db": "inventory", "sequence": goavro.Union("string", `["26997744","26997904"]`),
			"schema": "", "table": "", "txId": goavro.Union("long", int64(756)), "lsn": goavro.Union("long", int64(26997904))},
		"message": map[string]any{"prefix": "test-prefix", "content": goavro.Union("bytes", []byte(`{"id": 1}`))},
	})
	key := enc(avroMsgKey, 32, map[string]any{"prefix": "test-prefix"})
	for _, shape := range []Envelope{EnvelopeDebezium, EnvelopeFlattened} {
		d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), EnvelopeShape(shape), SchemaRegistry(mapRegistry{31: avroMsg, 32: avroMsgKey}))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := d.Decode(ctx, rec("dbserver1.message", 8, key, value))
		if err != nil || ch.Class != ClassMessage || ch.TsMs != 1723115240065 {
			t.Errorf("avro envelope %d: %+v %v, want a logical_message", shape, ch, err)
		}
	}

	// Only "m" is a message: other unknown ops are still rejected.
	d := newPG(t)
	_, err := d.Decode(ctx, rec("dbserver1.message", 9, []byte(pgMessageKeyJSON), []byte(strings.Replace(pgMessageValueJSON, `"op":"m"`, `"op":"q"`, 1))))
	if rej, ok := err.(*Rejection); !ok || rej.Reason != ReasonUnknownOp {
		t.Errorf("op q: %v, want unknown_op", err)
	}
}
