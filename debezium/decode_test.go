package debezium

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/linkedin/goavro/v2"
)

// expectRow checks a decoded image value by value against r.
func expectRow(t *testing.T, got Row, r row) {
	t.Helper()
	if !got.Present() {
		t.Fatalf("image absent, want row %d", r.id)
	}
	tags := make([]schema.Value, len(r.tags))
	for i, s := range r.tags {
		tags[i] = schema.String(s)
	}
	upd, _ := time.Parse(time.RFC3339Nano, r.updated)
	want := map[string]schema.Value{
		"id":         schema.Int(int64(r.id)),
		"name":       schema.String(r.name),
		"price":      {Kind: schema.KindDecimal, I: r.priceCent, Hi: r.priceCent >> 63, Scale: 2},
		"created_at": schema.Int(r.createdUs),
		"updated_at": schema.Int(upd.UnixMicro()),
		"birthday":   schema.Int(int64(r.birthday)),
		"active":     schema.Bool(r.active),
		"payload":    schema.Bytes(r.payload),
		"score":      schema.Float(r.score),
		"tags":       schema.List(tags...),
	}
	if len(got.Columns()) != len(want) {
		t.Fatalf("%d columns, want %d", len(got.Columns()), len(want))
	}
	for name, w := range want {
		v, ok := got.Get(name)
		if !ok {
			t.Errorf("column %s missing", name)
			continue
		}
		if !v.Equal(w) {
			t.Errorf("column %s = %#v, want %#v", name, v, w)
		}
	}
}

var customersDelta = delta.StructType{Fields: []delta.StructField{
	{Name: "id", Type: delta.Integer},
	{Name: "name", Type: delta.String, Nullable: true},
	{Name: "price", Type: delta.DecimalType{Precision: 10, Scale: 2}, Nullable: true},
	{Name: "created_at", Type: delta.Timestamp, Nullable: true},
	{Name: "updated_at", Type: delta.Timestamp, Nullable: true},
	{Name: "birthday", Type: delta.Date, Nullable: true},
	{Name: "active", Type: delta.Boolean, Nullable: true},
	{Name: "payload", Type: delta.Binary, Nullable: true},
	{Name: "score", Type: delta.Double, Nullable: true},
	{Name: "tags", Type: delta.ArrayType{ElementType: delta.String, ContainsNull: true}, Nullable: true},
}}

func newPG(t testing.TB, opts ...Option) *Decoder {
	t.Helper()
	d, err := New(append([]Option{SourceConnector(ConnectorPostgres), TableSchema("", customersDelta)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func rec(topic string, off int64, key, value []byte) *Record {
	return &Record{Topic: topic, Partition: 3, Offset: off, Key: key, Value: value}
}

func TestDecodeJSONForms(t *testing.T) {
	r1, r2 := sampleRow(1), sampleRow(2)
	r2.id = 1
	for _, withSchema := range []bool{true, false} {
		t.Run(fmt.Sprintf("schema=%v", withSchema), func(t *testing.T) {
			d := newPG(t)
			ctx := context.Background()
			// create
			ch, err := d.Decode(ctx, rec("dbserver1.public.customers", 10, pgKey(withSchema, 1), pgValue(withSchema, "", r1.json(), "c", pgSource(100, 120))))
			if err != nil {
				t.Fatal(err)
			}
			if ch.Class != ClassChange || ch.Op != OpCreate || ch.Before.Present() {
				t.Fatalf("create: %+v", ch)
			}
			expectRow(t, ch.After, r1)
			if ch.Table != (Table{Database: "inventory", Schema: "public", Table: "customers"}) {
				t.Errorf("table %+v", ch.Table)
			}
			if len(ch.Key.Names) != 1 || ch.Key.Names[0] != "id" || !ch.Key.Values[0].Equal(schema.Int(1)) {
				t.Errorf("key %+v", ch.Key)
			}
			if ch.SourceTsMs != 1700000000000 || ch.TsMs != 1700000000500 {
				t.Errorf("times %d %d", ch.SourceTsMs, ch.TsMs)
			}
			if want := (Sequence{Connector: ConnectorPostgres, N: 2, Parts: [MaxParts]Part{{Kind: PartUint, U: 100}, {Kind: PartUint, U: 120}}}); ch.Seq.Compare(want) != 0 {
				t.Errorf("seq %s, want %s", ch.Seq, want)
			}
			if ch.Pos != (Position{Topic: "dbserver1.public.customers", Partition: 3, Offset: 10}) {
				t.Errorf("pos %+v", ch.Pos)
			}
			// update with before image
			ch, err = d.Decode(ctx, rec("dbserver1.public.customers", 11, pgKey(withSchema, 1), pgValue(withSchema, r1.json(), r2.json(), "u", pgSource(130, 140))))
			if err != nil {
				t.Fatal(err)
			}
			if ch.Op != OpUpdate {
				t.Fatalf("op %s", ch.Op)
			}
			expectRow(t, ch.Before, r1)
			expectRow(t, ch.After, r2)
			// delete
			ch, err = d.Decode(ctx, rec("dbserver1.public.customers", 12, pgKey(withSchema, 1), pgValue(withSchema, `{"id":1}`, "", "d", pgSource(150, 160))))
			if err != nil {
				t.Fatal(err)
			}
			if ch.Op != OpDelete || ch.After.Present() || !ch.Before.Present() {
				t.Fatalf("delete %+v", ch)
			}
			if v, _ := ch.Before.Get("name"); !v.IsNull() {
				t.Errorf("key-only before image: name = %#v", v)
			}
			// Kafka tombstone after the delete
			ch, err = d.Decode(ctx, rec("dbserver1.public.customers", 13, pgKey(withSchema, 1), nil))
			if err != nil || ch.Class != ClassKafkaTombstone {
				t.Fatalf("tombstone %+v %v", ch, err)
			}
		})
	}
}

func TestDecodeSnapshotReadAndTruncate(t *testing.T) {
	d := newPG(t)
	r := sampleRow(5)
	ch, err := d.Decode(context.Background(), rec("t", 1, pgKey(true, 5), pgValue(true, "", r.json(), "r", pgSource(-1, 90))))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Op != OpRead || ch.Seq.Parts[0].Kind != PartNull {
		t.Fatalf("snapshot read: op %s seq %s", ch.Op, ch.Seq)
	}
	// Truncate: no key, no images, still sequenced.
	ch, err = d.Decode(context.Background(), rec("t", 2, nil, pgValue(true, "", "", "t", pgSource(200, 210))))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Op != OpTruncate || len(ch.Key.Values) != 0 || !ch.Seq.Valid() {
		t.Fatalf("truncate %+v", ch)
	}
}

func TestDecodeUnavailablePlaceholder(t *testing.T) {
	d := newPG(t)
	r := sampleRow(7)
	after := strings.Replace(r.json(), jsonString(r.name), `"__debezium_unavailable_value"`, 1)
	after = strings.Replace(after, `"payload":"AAECBw=="`, `"payload":"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="`, 1)
	after = strings.Replace(after, `"tags":["a","b\nc"]`, `"tags":["__debezium_unavailable_value"]`, 1)
	for _, withSchema := range []bool{true, false} {
		ch, err := d.Decode(context.Background(), rec("t", 1, pgKey(withSchema, 7), pgValue(withSchema, "", after, "u", pgSource(1, 2))))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"name", "payload", "tags"} {
			if v, _ := ch.After.Get(c); !v.IsUnavailable() {
				t.Errorf("schema=%v %s = %#v, want unavailable", withSchema, c, v)
			}
		}
		if v, _ := ch.After.Get("score"); !v.Equal(schema.Float(r.score)) {
			t.Errorf("score %#v", v)
		}
	}
}

func TestDecodeFlattened(t *testing.T) {
	for _, withSchema := range []bool{true, false} {
		d := newPG(t, EnvelopeShape(EnvelopeFlattened))
		r := sampleRow(3)
		ch, err := d.Decode(context.Background(), rec("t", 1, pgKey(withSchema, 3), flatValue(withSchema, r, "u", 4242, false)))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Op != OpUpdate || ch.SourceTsMs != 1700000000000 {
			t.Fatalf("flattened update %+v", ch)
		}
		expectRow(t, ch.After, r)
		if ch.Seq.String() != "postgresql(null,0/1092)" {
			t.Errorf("seq %s", ch.Seq)
		}
		ch, err = d.Decode(context.Background(), rec("t", 2, pgKey(withSchema, 3), flatValue(withSchema, r, "d", 4243, true)))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Op != OpDelete || ch.After.Present() {
			t.Fatalf("flattened delete %+v", ch)
		}
		expectRow(t, ch.Before, r)
	}
}

func TestKeyColumnsOverride(t *testing.T) {
	d := newPG(t, KeyColumns("name", "id"))
	r := sampleRow(9)
	ch, err := d.Decode(context.Background(), rec("t", 1, nil, pgValue(false, "", r.json(), "c", pgSource(1, 2))))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Key.Names[0] != "name" || !ch.Key.Values[0].Equal(schema.String(r.name)) || !ch.Key.Values[1].Equal(schema.Int(9)) {
		t.Fatalf("key %+v", ch.Key)
	}
	// A delete takes the key from the before image.
	ch, err = d.Decode(context.Background(), rec("t", 2, nil, pgValue(false, r.json(), "", "d", pgSource(3, 4))))
	if err != nil || !ch.Key.Values[1].Equal(schema.Int(9)) {
		t.Fatalf("delete key %+v %v", ch.Key, err)
	}
}

func TestNonChangeClasses(t *testing.T) {
	for _, shape := range []Envelope{EnvelopeDebezium, EnvelopeFlattened} {
		testNonChangeClasses(t, newPG(t, EnvelopeShape(shape)))
	}
}

func testNonChangeClasses(t *testing.T, d *Decoder) {
	ctx := context.Background()
	cases := []struct {
		name  string
		topic string
		value string
		want  Class
	}{
		{"heartbeat topic", "__debezium-heartbeat.dbserver1", `{"ts_ms":1}`, ClassHeartbeat},
		{"heartbeat shape", "dbserver1.public.customers", `{"ts_ms":1700000000000}`, ClassHeartbeat},
		{"heartbeat with schema", "x", `{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.Heartbeat"},"payload":{"ts_ms":5}}`, ClassHeartbeat},
		{"tx begin", "dbserver1.transaction", `{"status":"BEGIN","id":"571:53195829","event_count":null,"data_collections":null,"ts_ms":1}`, ClassTransaction},
		{"tx end", "dbserver1.transaction", `{"status":"END","id":"571:53195832","event_count":2,"data_collections":[{"data_collection":"s1.a","event_count":1}],"ts_ms":1}`, ClassTransaction},
		{"schema change", "dbserver1", `{"source":{"server":"dbserver1"},"position":{"file":"mysql-bin.000003"},"databaseName":"inventory","ddl":"ALTER TABLE t ADD c INT","tableChanges":[]}`, ClassSchemaChange},
		{"null payload", "t", `{"schema":null,"payload":null}`, ClassKafkaTombstone},
	}
	for _, tc := range cases {
		ch, err := d.Decode(ctx, rec(tc.topic, 1, nil, []byte(tc.value)))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if ch.Class != tc.want {
			t.Errorf("%s: class %s, want %s", tc.name, ch.Class, tc.want)
		}
		if tc.name == "tx end" && (ch.Tx.Status != "END" || ch.Tx.ID != "571:53195832" || ch.Tx.EventCount != 2) {
			t.Errorf("tx marker %+v", ch.Tx)
		}
	}
}

func TestRejections(t *testing.T) {
	r := sampleRow(1)
	good := string(pgValue(false, "", r.json(), "c", pgSource(1, 2)))
	key := pgKey(false, 1)
	cases := []struct {
		name  string
		key   []byte
		value string
		want  Reason
	}{
		{"malformed json", key, `{"before":null,"after":{"id":1`, ReasonMalformedJSON},
		{"not an object", key, `[1,2]`, ReasonMalformedJSON},
		{"trailing garbage", key, good + `x`, ReasonMalformedJSON},
		{"unknown op", key, strings.Replace(good, `"op":"c"`, `"op":"x"`, 1), ReasonUnknownOp},
		{"no op", key, strings.Replace(good, `"op":"c",`, ``, 1), ReasonUnknownOp},
		{"missing key", nil, good, ReasonMissingKey},
		{"null key field", []byte(`{"id":null}`), good, ReasonMissingKey},
		{"malformed key", []byte(`{"id":`), good, ReasonMalformedKey},
		{"null sequence", key, strings.Replace(strings.Replace(good, `"lsn":2`, `"lsn":null`, 1), `"sequence":"[\"1\",\"2\"]"`, `"sequence":null`, 1), ReasonNullSequence},
		{"null lsn in sequence", key, strings.Replace(good, `"sequence":"[\"1\",\"2\"]"`, `"sequence":"[\"1\",null]"`, 1), ReasonNullSequence},
		{"bad sequence", key, strings.Replace(good, `"sequence":"[\"1\",\"2\"]"`, `"sequence":"[\"x\",\"2\"]"`, 1), ReasonBadSequence},
		{"int out of range", key, strings.Replace(good, `"id":1,`, `"id":4294967296,`, 1), ReasonOutOfRange},
		{"int beyond 64 bits", key, strings.Replace(good, `"created_at":`, `"created_at":99999999999999999999999,"x":`, 1), ReasonOutOfRange},
		{"decimal over precision", key, strings.Replace(good, `"price":"AeJB"`, `"price":"f////////w=="`, 1), ReasonOutOfRange},
		{"wrong type", key, strings.Replace(good, `"active":false`, `"active":"no"`, 1), ReasonInvalidValue},
		{"unknown column", key, strings.Replace(good, `"id":1,`, `"id":1,"extra":5,`, 1), ReasonUnknownColumn},
		{"create without after", key, strings.Replace(good, `"after":{`, `"after":null,"x":{`, 1), ReasonMissingImage},
	}
	d := newPG(t)
	for _, tc := range cases {
		_, err := d.Decode(context.Background(), &Record{Topic: "orders", Partition: 4, Offset: 77, Key: tc.key, Value: []byte(tc.value)})
		var rej *Rejection
		if !errors.As(err, &rej) {
			t.Errorf("%s: err %v, want a rejection", tc.name, err)
			continue
		}
		if rej.Reason != tc.want {
			t.Errorf("%s: reason %s, want %s (%v)", tc.name, rej.Reason, tc.want, err)
		}
		if !strings.Contains(err.Error(), "orders/4@77") {
			t.Errorf("%s: %q does not name the position", tc.name, err)
		}
	}
	// A schema-less record with no table schema cannot be typed.
	bare, _ := New(SourceConnector(ConnectorPostgres))
	_, err := bare.Decode(context.Background(), rec("t", 1, key, []byte(good)))
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Reason != ReasonNoTableSchema {
		t.Errorf("no table schema: %v", err)
	}
}

// registryServer serves schemas by id like the Confluent registry does,
// requiring the given Authorization header when not empty.
func registryServer(t testing.TB, tls bool, auth string, schemas map[int]string) (*httptest.Server, *atomic.Int64) {
	calls := new(atomic.Int64)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if auth != "" && r.Header.Get("Authorization") != auth {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error_code":40101,"message":"unauthorized"}`)
			return
		}
		idText, ok := strings.CutPrefix(r.URL.Path, "/schemas/ids/")
		id, err := strconv.Atoi(idText)
		text, found := schemas[id]
		if !ok || err != nil || !found {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error_code":40403,"message":"Schema not found"}`)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		fmt.Fprintf(w, `{"schema":%s}`, strconv.Quote(text))
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, calls
}

func avroDecoder(t testing.TB, opts ...Option) *Decoder {
	t.Helper()
	srv, _ := registryServer(t, false, "", map[int]string{avroValueID: avroEnvelopeSchema, avroKeyID: avroKeySchema})
	reg, err := NewSchemaRegistryClient(RegistryConfig{URLs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(append([]Option{SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(reg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecodeAvro(t *testing.T) {
	d := avroDecoder(t)
	ctx := context.Background()
	r1, r2 := sampleRow(1), sampleRow(2)
	ch, err := d.Decode(ctx, rec("t", 1, avroKey(t, 1), avroValue(t, &r1, &r2, "u", 300, 310)))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Op != OpUpdate || ch.Table.Table != "customers" || ch.TsMs != 1700000000500 || ch.SourceTsMs != 1700000000000 {
		t.Fatalf("avro change %+v", ch)
	}
	expectRow(t, ch.Before, r1)
	expectRow(t, ch.After, r2)
	if ch.Seq.String() != "postgresql(0/12C,0/136)" {
		t.Errorf("seq %s", ch.Seq)
	}
	if len(ch.Key.Values) != 1 || !ch.Key.Values[0].Equal(schema.Int(1)) {
		t.Errorf("key %+v", ch.Key)
	}
	// Delta types come from the Avro schema.
	st, err := ch.After.Type.DeltaSchema()
	if err != nil {
		t.Fatal(err)
	}
	if got := st.String(); got != "struct<id:integer,name:string,price:decimal(10,2),created_at:timestamp,updated_at:timestamp,birthday:date,active:boolean,payload:binary,score:double,tags:array<string>>" {
		t.Errorf("delta schema %s", got)
	}
	// Unknown schema id, and a registry that is down.
	bad := avroValue(t, nil, &r1, "c", 1, 2)
	bad[4] = 99
	_, err = d.Decode(ctx, rec("t", 2, avroKey(t, 1), bad))
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Reason != ReasonUnknownSchemaID || rej.Retryable() {
		t.Fatalf("unknown id: %v", err)
	}
	down, _ := NewSchemaRegistryClient(RegistryConfig{URLs: []string{"http://127.0.0.1:1"}})
	d2, _ := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(down))
	_, err = d2.Decode(ctx, rec("t", 3, avroKey(t, 1), avroValue(t, nil, &r1, "c", 1, 2)))
	if !errors.As(err, &rej) || rej.Reason != ReasonRegistryUnavailable || !rej.Retryable() {
		t.Fatalf("registry down: %v", err)
	}
	// Not the wire format.
	_, err = d.Decode(ctx, rec("t", 4, nil, []byte{1, 2}))
	if !errors.As(err, &rej) || rej.Reason != ReasonMalformedAvro {
		t.Fatalf("no magic byte: %v", err)
	}
	// Truncated body.
	v := avroValue(t, nil, &r1, "c", 1, 2)
	_, err = d.Decode(ctx, rec("t", 5, avroKey(t, 1), v[:len(v)-3]))
	if !errors.As(err, &rej) || rej.Reason != ReasonMalformedAvro {
		t.Fatalf("truncated: %v", err)
	}
}

func TestRegistryAuthTLSAndCache(t *testing.T) {
	schemas := map[int]string{avroValueID: avroEnvelopeSchema}
	for _, tc := range []struct {
		name string
		tls  bool
		auth string
		cfg  RegistryConfig
	}{
		{"basic", false, "Basic dXNlcjpwYXNz", RegistryConfig{BasicUser: "user", BasicPassword: "pass"}},
		{"bearer", false, "Bearer tok3n", RegistryConfig{BearerToken: "tok3n"}},
		{"tls", true, "", RegistryConfig{}},
	} {
		srv, calls := registryServer(t, tc.tls, tc.auth, schemas)
		cfg := tc.cfg
		cfg.URLs = []string{srv.URL}
		if tc.tls {
			cfg.TLS = srv.Client().Transport.(*http.Transport).TLSClientConfig
		}
		reg, err := NewSchemaRegistryClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			text, err := reg.SchemaText(context.Background(), avroValueID)
			if err != nil || text != avroEnvelopeSchema {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%s: %d registry calls for one id, want 1 (cache)", tc.name, n)
		}
		if _, err := reg.SchemaText(context.Background(), 12345); !errors.Is(err, ErrUnknownSchema) {
			t.Errorf("%s: missing id: %v", tc.name, err)
		}
		if tc.auth != "" {
			noAuth, _ := NewSchemaRegistryClient(RegistryConfig{URLs: []string{srv.URL}})
			if _, err := noAuth.SchemaText(context.Background(), avroValueID); err == nil || errors.Is(err, ErrUnknownSchema) {
				t.Errorf("%s: without credentials: %v", tc.name, err)
			}
		}
	}
}

// TestDecodeMongoDB decodes the MongoDB connector's envelope as its docs
// show it: before and after are JSON documents in strings, the source
// carries the collection and the cluster time (ts_ms, ord).
func TestDecodeMongoDB(t *testing.T) {
	value := `{"schema":{"type":"struct","fields":[` +
		`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"before"},` +
		`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"after"},` +
		`{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":false,"field":"rs"},{"type":"string","optional":false,"field":"collection"},{"type":"int32","optional":false,"field":"ord"},{"type":"int64","optional":true,"field":"txnNumber"}],"optional":false,"name":"io.debezium.connector.mongo.Source","field":"source"},` +
		`{"type":"string","optional":true,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"fulfillment.inventory.customers.Envelope"},` +
		`"payload":{"before":null,"after":"{\"_id\": {\"$numberLong\": \"1004\"},\"first_name\": \"Anne\"}",` +
		`"source":{"version":"2.7.0.Final","connector":"mongodb","name":"fulfillment","ts_ms":1558965508000,"snapshot":"false","db":"inventory","rs":"rs0","collection":"customers","ord":31,"txnNumber":null},"op":"c","ts_ms":1558965515240}}`
	key := `{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,"name":"fulfillment.inventory.customers.Key"},"payload":{"id":"1004"}}`
	d, err := New(SourceConnector(ConnectorMongoDB))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Decode(context.Background(), rec("fulfillment.inventory.customers", 1, []byte(key), []byte(value)))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Op != OpCreate || ch.Table != (Table{Database: "inventory", Table: "customers"}) {
		t.Fatalf("mongo change %+v", ch)
	}
	doc, ok := ch.After.Get(DocumentColumn)
	if !ok || !doc.Equal(schema.String(`{"_id": {"$numberLong": "1004"},"first_name": "Anne"}`)) {
		t.Errorf("document %#v", doc)
	}
	if ch.Seq.String() != "mongodb(1558965508000,31)" || !ch.Key.Values[0].Equal(schema.String("1004")) {
		t.Errorf("seq %s key %+v", ch.Seq, ch.Key)
	}
}

func TestDecodeAvroFlattenedAndMarkers(t *testing.T) {
	flatSchema := `{"type":"record","name":"Value","namespace":"dbserver1.public.customers","fields":` +
		avroValueColumns[:len(avroValueColumns)-1] +
		`,{"name":"__op","type":["null","string"],"default":null},{"name":"__lsn","type":["null","long"],"default":null},` +
		`{"name":"__source_ts_ms","type":["null","long"],"default":null},{"name":"__deleted","type":["null","string"],"default":null}]}`
	txSchema := `{"type":"record","name":"TransactionMetadataValue","namespace":"io.debezium.connector.common","fields":[` +
		`{"name":"status","type":"string"},{"name":"id","type":"string"},{"name":"event_count","type":["null","long"],"default":null},` +
		`{"name":"data_collections","type":["null",{"type":"array","items":{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[{"name":"data_collection","type":"string"},{"name":"event_count","type":"long"}]}}],"default":null},` +
		`{"name":"ts_ms","type":"long"}]}`
	hbSchema := `{"type":"record","name":"Heartbeat","namespace":"io.debezium.connector.common","fields":[{"name":"ts_ms","type":"long"}]}`
	reg := mapRegistry{1: flatSchema, 2: txSchema, 3: hbSchema, avroKeyID: avroKeySchema}
	d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(reg), EnvelopeShape(EnvelopeFlattened))
	if err != nil {
		t.Fatal(err)
	}
	encode := func(schemaText string, id int, native map[string]any) []byte {
		codec, err := goavro.NewCodec(schemaText)
		if err != nil {
			t.Fatal(err)
		}
		b, err := codec.BinaryFromNative(nil, native)
		if err != nil {
			t.Fatal(err)
		}
		return wire(id, b)
	}
	r := sampleRow(11)
	native := r.avroNative()
	native["__op"] = goavro.Union("string", "d")
	native["__lsn"] = goavro.Union("long", int64(777))
	native["__source_ts_ms"] = goavro.Union("long", int64(1700000000000))
	native["__deleted"] = goavro.Union("string", "true")
	ch, err := d.Decode(context.Background(), rec("dbserver1.public.customers", 1, avroKey(t, 11), encode(flatSchema, 1, native)))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Op != OpDelete || ch.After.Present() || ch.SourceTsMs != 1700000000000 || ch.Seq.String() != "postgresql(null,0/309)" {
		t.Fatalf("avro flattened delete %+v seq %s", ch, ch.Seq)
	}
	expectRow(t, ch.Before, r)
	tx := encode(txSchema, 2, map[string]any{"status": "END", "id": "571:53195832", "event_count": goavro.Union("long", int64(2)),
		"data_collections": goavro.Union("array", []any{map[string]any{"data_collection": "s1.a", "event_count": int64(2)}}), "ts_ms": int64(1)})
	ch, err = d.Decode(context.Background(), rec("dbserver1.transaction", 2, nil, tx))
	if err != nil || ch.Class != ClassTransaction || ch.Tx.Status != "END" || ch.Tx.EventCount != 2 || ch.Tx.ID != "571:53195832" {
		t.Fatalf("avro transaction %+v %v", ch, err)
	}
	ch, err = d.Decode(context.Background(), rec("dbserver1.public.customers", 3, nil, encode(hbSchema, 3, map[string]any{"ts_ms": int64(5)})))
	if err != nil || ch.Class != ClassHeartbeat {
		t.Fatalf("avro heartbeat shape %+v %v", ch, err)
	}
}

// TestWideKey decodes a key with more columns than readKey keeps on the
// stack, in an order that is not the row's.
func TestWideKey(t *testing.T) {
	d := newPG(t)
	r := sampleRow(5)
	key := []byte(`{"score":12.5,"id":5,"birthday":19005,"active":false,"name":"n","created_at":7}`)
	ch, err := d.Decode(context.Background(), rec("t", 1, key, pgValue(false, "", r.json(), "c", pgSource(1, 2))))
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"score", "id", "birthday", "active", "name", "created_at"}
	want := []schema.Value{schema.Float(12.5), schema.Int(5), schema.Int(19005), schema.Bool(false), schema.String("n"), schema.Int(7)}
	if len(ch.Key.Names) != len(wantNames) || len(ch.Key.Values) != len(want) {
		t.Fatalf("key %+v", ch.Key)
	}
	for i := range want {
		if ch.Key.Names[i] != wantNames[i] || !ch.Key.Values[i].Equal(want[i]) {
			t.Errorf("key field %d: %s=%#v, want %s=%#v", i, ch.Key.Names[i], ch.Key.Values[i], wantNames[i], want[i])
		}
	}
	// Three leading columns in row order share the schema's names.
	ch, err = d.Decode(context.Background(), rec("t", 2, []byte(`{"id":5,"name":"n","price":"AQ=="}`), pgValue(false, "", r.json(), "c", pgSource(1, 2))))
	if err != nil || len(ch.Key.Names) != 3 || ch.Key.Names[2] != "price" || !ch.Key.Values[2].Equal(schema.Value{Kind: schema.KindDecimal, I: 1, Scale: 2}) {
		t.Fatalf("leading key %+v %v", ch.Key, err)
	}
}

// TestDecodeTombstoneKeys: with TombstoneKeys a Kafka tombstone's Change
// carries its key (typed by an inline key schema, else by the table's
// row type) and its Kafka timestamp; without it, neither. A key that
// cannot be read rejects the tombstone; a tombstone without a key has
// none.
func TestDecodeTombstoneKeys(t *testing.T) {
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_123)
	for _, withSchema := range []bool{true, false} {
		t.Run(fmt.Sprintf("schema=%v", withSchema), func(t *testing.T) {
			r := rec("dbserver1.public.customers", 13, pgKey(withSchema, 7), nil)
			r.Timestamp = at
			ch, err := newPG(t).Decode(ctx, r)
			if err != nil || ch.Class != ClassKafkaTombstone || len(ch.Key.Values) != 0 || ch.SourceTsMs != 0 {
				t.Fatalf("without TombstoneKeys: %+v %v", ch, err)
			}
			d := newPG(t, TombstoneKeys())
			ch, err = d.Decode(ctx, r)
			if err != nil || ch.Class != ClassKafkaTombstone {
				t.Fatalf("tombstone: %+v %v", ch, err)
			}
			if fmt.Sprint(ch.Key.Names) != "[id]" || len(ch.Key.Values) != 1 || ch.Key.Values[0].I != 7 || ch.SourceTsMs != at.UnixMilli() || ch.Pos.Offset != 13 {
				t.Errorf("tombstone key %v %v, source ts %d, position %v", ch.Key.Names, ch.Key.Values, ch.SourceTsMs, ch.Pos)
			}
			_, err = d.Decode(ctx, rec("dbserver1.public.customers", 14, []byte(`{"id":`), nil))
			var rej *Rejection
			if !errors.As(err, &rej) || rej.Reason != ReasonMalformedKey || rej.Pos.Offset != 14 {
				t.Errorf("malformed tombstone key: %v", err)
			}
			ch, err = d.Decode(ctx, rec("dbserver1.public.customers", 15, nil, nil))
			if err != nil || ch.Class != ClassKafkaTombstone || len(ch.Key.Values) != 0 {
				t.Errorf("keyless tombstone: %+v %v", ch, err)
			}
		})
	}
	t.Run("avro", func(t *testing.T) {
		ch, err := avroDecoder(t, TombstoneKeys()).Decode(ctx, rec("t", 6, avroKey(t, 9), nil))
		if err != nil || ch.Class != ClassKafkaTombstone || len(ch.Key.Values) != 1 || !ch.Key.Values[0].Equal(schema.Int(9)) {
			t.Errorf("avro tombstone: %+v %v", ch, err)
		}
	})
}
