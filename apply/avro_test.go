package apply

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/scripts/infra/schemaregistry/registry"
)

// testRegistry is the project's Confluent-API schema registry served
// in-process, with a switch that makes it fail like an outage.
type testRegistry struct {
	srv  *httptest.Server
	down atomic.Int32 // 0 up, 1 answers 500, 2 drops the connection
	byID atomic.Int64 // GET /schemas/ids/... requests seen while down
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	reg, err := registry.Open("")
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRegistry{}
	h := reg.Handler()
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch tr.down.Load() {
		case 1:
			tr.byID.Add(1)
			http.Error(w, `{"error_code":50001,"message":"backend store unavailable"}`, http.StatusInternalServerError)
			return
		case 2:
			tr.byID.Add(1)
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.srv.Close)
	return tr
}

// register registers an Avro schema under subject and returns its id.
func (tr *testRegistry) register(t *testing.T, subject, text string) int {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(tr.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreateSchema(context.Background(), subject, sr.Schema{Schema: text})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return s.ID
}

// The orders table of dbzOrders as Debezium's AvroConverter writes it: a
// Key record and an Envelope with before/after/source/op/ts_ms (the field
// shapes of debezium/testdata/real/postgres-avro/schemas.json).
const (
	avroOrdersKey = `{"type":"record","name":"Key","namespace":"pg.public.orders","fields":[{"name":"id","type":"int"}],"connect.name":"pg.public.orders.Key"}`
	avroSource    = `{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},
{"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},
{"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},{"name":"schema","type":"string"},{"name":"table","type":"string"},
{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null}],"connect.name":"io.debezium.connector.postgresql.Source"}`
)

func avroOrdersEnvelope(note bool) string {
	cols := `{"name":"id","type":"int"},{"name":"status","type":["null","string"],"default":null}`
	if note {
		cols += `,{"name":"note","type":["null","string"],"default":null}`
	}
	return `{"type":"record","name":"Envelope","namespace":"pg.public.orders","fields":[
{"name":"before","type":["null",{"type":"record","name":"Value","fields":[` + cols + `],"connect.name":"pg.public.orders.Value"}],"default":null},
{"name":"after","type":["null","Value"],"default":null},
{"name":"source","type":` + avroSource + `},
{"name":"op","type":"string"},{"name":"ts_ms","type":["null","long"],"default":null}],"connect.name":"pg.public.orders.Envelope"}`
}

// avroOrders encodes orders changes in the Confluent wire format with ids
// registered in a testRegistry (or forced ids for the unknown-id test).
type avroOrders struct {
	keyID, valID, noteID int
	key, val, valNote    *goavro.Codec
}

func newAvroOrders(t *testing.T, tr *testRegistry) *avroOrders {
	t.Helper()
	a := &avroOrders{
		keyID:  tr.register(t, "pg.public.orders-key", avroOrdersKey),
		valID:  tr.register(t, "pg.public.orders-value", avroOrdersEnvelope(false)),
		noteID: tr.register(t, "pg.public.orders-value", avroOrdersEnvelope(true)),
	}
	var err error
	for _, c := range []struct {
		dst  **goavro.Codec
		text string
	}{{&a.key, avroOrdersKey}, {&a.val, avroOrdersEnvelope(false)}, {&a.valNote, avroOrdersEnvelope(true)}} {
		if *c.dst, err = goavro.NewCodec(c.text); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func wire(t *testing.T, id int, c *goavro.Codec, native map[string]any) []byte {
	t.Helper()
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	b, err := c.BinaryFromNative(b, native)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// change encodes one change of dbzOrders' shape; note != nil uses the
// schema with the added column.
func (a *avroOrders) change(t *testing.T, id int, lsn int64, op, status string, note *string) (key, value []byte) {
	t.Helper()
	row := map[string]any{"id": int32(id), "status": goavro.Union("string", status)}
	codec, vid := a.val, a.valID
	if note != nil {
		row["note"] = goavro.Union("string", *note)
		codec, vid = a.valNote, a.noteID
	}
	var before, after any = nil, goavro.Union("pg.public.orders.Value", row)
	if op == "d" {
		del := map[string]any{"id": int32(id), "status": nil}
		if note != nil {
			del["note"] = nil
		}
		before, after = goavro.Union("pg.public.orders.Value", del), nil
	}
	ts := 1_700_000_000_000 + lsn
	val := map[string]any{
		"before": before, "after": after, "op": op, "ts_ms": goavro.Union("long", ts),
		"source": map[string]any{
			"version": "3.6.1.Final", "connector": "postgresql", "name": "pg", "ts_ms": ts,
			"snapshot": goavro.Union("string", "false"), "db": "shop",
			"sequence": goavro.Union("string", fmt.Sprintf(`["%d","%d"]`, lsn, lsn)),
			"schema":   "public", "table": "orders",
			"txId": goavro.Union("long", lsn), "lsn": goavro.Union("long", lsn),
		},
	}
	return wire(t, a.keyID, a.key, map[string]any{"id": int32(id)}), wire(t, vid, codec, val)
}

// avroEngine starts a one-partition kfake topic "orders", an in-process
// registry and an engine applying format avro into a fresh table.
func avroEngine(t *testing.T, start func(tr *testRegistry), opts ...EngineOption) (p *producer, tr *testRegistry, a *avroOrders, table string, e *Engine) {
	t.Helper()
	c, p := kfakeOrders(t)
	tr = newTestRegistry(t)
	a = newAvroOrders(t, tr)
	if start != nil {
		start(tr)
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: avro-test}
schema_registry: {url: %q}
defaults: {flush: {max_latency: 50ms}, format: avro}
tables:
  - {name: orders, topic: orders, location: %s/orders}
`, strings.Join(c.ListenAddrs(), ", "), tr.srv.URL, dir)
	cfg, err := ParseConfig("avro.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e, stop := startEngineWith(t, cfg, opts...)
	t.Cleanup(stop)
	return p, tr, a, dir + "/orders", e
}

// quarantined reads a table's quarantine with our reader: "offset reason
// detail" per record, sorted by offset.
func quarantined(t *testing.T, table string) []string {
	t.Helper()
	store := storage.NewLocal(table + "_quarantine")
	snap, err := delta.Open(store).Snapshot(context.Background())
	if err != nil {
		return nil // no quarantine written
	}
	type q struct {
		off int64
		s   string
	}
	var out []q
	for _, add := range snap.Files() {
		rec, err := datafile.Read(context.Background(), store, datafile.Layout{Schema: quarantineSchema, PartitionColumns: []string{}}, add)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			off, _ := strconv.ParseInt(rec.Column(2).ValueStr(i), 10, 64)
			out = append(out, q{off, fmt.Sprintf("%d %s %s", off, rec.Column(7).ValueStr(i), rec.Column(8).ValueStr(i))})
		}
		rec.Release()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	s := make([]string, len(out))
	for i, x := range out {
		s[i] = x.s
	}
	return s
}

// TestEngineAvro: format avro end to end over kfake and the project's own
// registry: creates, an out-of-order update, a delete, a column added
// mid-stream under a new schema id; the table equals the expected rows and
// nothing is quarantined.
func TestEngineAvro(t *testing.T) {
	p, _, a, table, e := avroEngine(t, nil)
	send := func(id int, lsn int64, op, status string, note *string) {
		k, v := a.change(t, id, lsn, op, status, note)
		p.send(k, v, 0)
	}
	send(1, 10, "c", "new", nil)
	send(2, 11, "c", "new", nil)
	send(3, 12, "c", "new", nil)
	waitPositions(t, table, "shop", "orders", p.ends)
	send(1, 30, "u", "shipped", nil)
	send(1, 20, "u", "paid", nil) // older: stale
	send(2, 25, "d", "", nil)
	gift := "gift"
	send(4, 31, "c", "new", &gift)
	waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := fmt.Sprint(readOrders(t, table)), "[1 shipped false 2 new true 3 new false 4 new false]"; got != want {
		t.Errorf("table = %s, want %s", got, want)
	}
	snap, err := delta.Open(storage.NewLocal(table)).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := snap.Schema.Field("note"); !ok {
		t.Errorf("the column of the second schema id did not join the table: %s", snap.Schema)
	}
	if q := quarantined(t, table); len(q) != 0 {
		t.Errorf("quarantined: %v", q)
	}
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("halted: %v", h)
	}
}

// TestEngineAvroUnknownSchemaID: a record whose schema id the registry
// answers 404 for is a bad record: quarantined with unknown_schema_id and
// its position, while the records around it are applied.
func TestEngineAvroUnknownSchemaID(t *testing.T) {
	p, _, a, table, _ := avroEngine(t, nil)
	k, v := a.change(t, 1, 10, "c", "new", nil)
	p.send(k, v, 0)
	_, bad := a.change(t, 2, 11, "c", "new", nil)
	binary.BigEndian.PutUint32(bad[1:5], 4242) // never registered
	p.send(k, bad, 0)
	k, v = a.change(t, 3, 12, "c", "new", nil)
	p.send(k, v, 0)
	waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := fmt.Sprint(readOrders(t, table)), "[1 new false 3 new false]"; got != want {
		t.Errorf("table = %s, want %s", got, want)
	}
	q := quarantined(t, table)
	if len(q) != 1 || !strings.HasPrefix(q[0], "1 unknown_schema_id ") || !strings.Contains(q[0], "orders/0@1") || !strings.Contains(q[0], "4242") {
		t.Errorf("quarantine = %q, want offset 1 with unknown_schema_id naming orders/0@1 and id 4242", q)
	}
}

// TestEngineAvroRegistryOutage: the registry fails (HTTP 500 at start,
// then dropped connections when a new schema id appears mid-stream).
// Nothing is quarantined, skipped or committed past the record that needs
// the missing schema while it is down; retries back off instead of
// spinning; once it returns the table converges to every change. Each
// failed attempt is counted in cdcapply_schema_registry_failures_total
// (what CdcapplySchemaRegistryFailing alerts on), and none after the
// registry is back.
func TestEngineAvroRegistryOutage(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p, tr, a, table, e := avroEngine(t, func(tr *testRegistry) { tr.down.Store(1) }, WithMetrics(m))
	failures := func() float64 { return testutil.ToFloat64(m.registryFails.WithLabelValues("orders")) }
	send := func(id int, lsn int64, op, status string, note *string) {
		k, v := a.change(t, id, lsn, op, status, note)
		p.send(k, v, 0)
	}
	// Outage 1: down from the start, no schema cached yet.
	send(1, 10, "c", "new", nil)
	send(2, 11, "c", "new", nil)
	time.Sleep(1500 * time.Millisecond)
	if _, err := delta.Open(storage.NewLocal(table)).Snapshot(context.Background()); err == nil {
		t.Fatal("the table was created while the registry was down")
	}
	if q := quarantined(t, table); len(q) != 0 {
		t.Fatalf("quarantined during the outage: %v", q)
	}
	// Back-off: 200 ms doubling, so a handful of attempts in 1.5 s, not
	// a request per poll (the engine polls every millisecond or so when
	// it spins). The sr client makes one request per attempt per URL.
	if n := tr.byID.Load(); n == 0 || n > 12 {
		t.Errorf("%d registry requests during a 1.5 s outage; want a few retries with back-off", n)
	}
	t.Logf("outage 1 (HTTP 500): %d registry requests in 1.5 s", tr.byID.Load())
	f1 := failures()
	if f1 < 1 || f1 > float64(tr.byID.Load()) {
		t.Errorf("%v registry failures counted after %d failed requests: want each failed attempt once", f1, tr.byID.Load())
	}
	tr.down.Store(0)
	waitPositions(t, table, "shop", "orders", p.ends)
	if got := failures(); got < f1 || got > f1+1 {
		t.Errorf("registry failures went from %v to %v across the recovery: at most the attempt in flight may add one", f1, got)
	}
	f1 = failures()

	// Outage 2: a new schema id (column added) arrives while the
	// registry drops connections; the old ids stay cached, so what came
	// before is applied and the table stops right before the new id.
	send(1, 12, "u", "paid", nil)
	applied := p.ends[0]
	waitPositions(t, table, "shop", "orders", p.ends)
	tr.byID.Store(0)
	tr.down.Store(2)
	note := "gift"
	send(3, 13, "c", "new", &note)
	send(1, 14, "u", "shipped", &note)
	send(2, 15, "d", "", &note)
	time.Sleep(1500 * time.Millisecond)
	snap := waitPositions(t, table, "shop", "orders", map[int32]int64{0: applied})
	if next, _ := checkpoint.Restore(snap, "shop").Next(checkpoint.TopicPartition{Topic: "orders", Partition: 0}); next != applied {
		t.Fatalf("table at offset %d during the outage; want %d (stopped before the record whose schema is missing)", next, applied)
	}
	if got, want := fmt.Sprint(readOrders(t, table)), "[1 paid false 2 new false]"; got != want {
		t.Errorf("table during the outage = %s, want %s", got, want)
	}
	if n := tr.byID.Load(); n == 0 || n > 12 {
		t.Errorf("%d registry requests during a 1.5 s outage; want a few retries with back-off", n)
	}
	t.Logf("outage 2 (connections dropped): %d registry requests in 1.5 s", tr.byID.Load())
	if got := failures(); got <= f1 {
		t.Errorf("registry failures stayed at %v through the second outage", got)
	}
	tr.down.Store(0)
	waitPositions(t, table, "shop", "orders", p.ends)
	f2 := failures()
	if got, want := fmt.Sprint(readOrders(t, table)), "[1 shipped false 2 new true 3 new false]"; got != want {
		t.Errorf("table after the outage = %s, want %s", got, want)
	}
	if q := quarantined(t, table); len(q) != 0 {
		t.Errorf("quarantined: %v", q)
	}
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("halted: %v", h)
	}
	send(3, 16, "u", "paid", &note)
	waitPositions(t, table, "shop", "orders", p.ends)
	if got := failures(); got != f2 {
		t.Errorf("registry failures rose from %v to %v with the registry up", f2, got)
	}
}

// realLine is one recorded Kafka record of debezium/testdata/real.
type realLine struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	KeyB64    string `json:"key_b64"`
	ValueB64  string `json:"value_b64"`
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replayRun produces the table topics of a recorded run (one file per
// topic) to kfake, in offset order, keys and values as recorded except
// the Avro schema ids, renumbered into reg's ids. It returns the table
// suffixes (accounts, ...) and each topic's end offset.
func replayRun(t *testing.T, cl *kgo.Client, dir, prefix string, ids map[int]int) (map[string]string, map[string]int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, prefix+".cdc.*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no recorded topics in %s", dir)
	}
	topics := map[string]string{}
	ends := map[string]int64{}
	renumber := func(b []byte, where string) []byte {
		if ids == nil || len(b) < 5 {
			return b
		}
		old := int(binary.BigEndian.Uint32(b[1:5]))
		id, ok := ids[old]
		if !ok {
			t.Fatalf("%s: schema id %d not in schemas.json", where, old)
		}
		binary.BigEndian.PutUint32(b[1:5], uint32(id))
		return b
	}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var l realLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			where := fmt.Sprintf("%s offset %d", file, l.Offset)
			r := &kgo.Record{Topic: l.Topic, Partition: l.Partition, Key: renumber(b64(t, l.KeyB64), where), Value: renumber(b64(t, l.ValueB64), where)}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if r.Offset != l.Offset {
				t.Fatalf("%s: produced at offset %d, recorded at %d", where, r.Offset, l.Offset)
			}
			ends[l.Topic] = r.Offset + 1
			topics[strings.TrimPrefix(l.Topic, prefix+".cdc.")] = l.Topic
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return topics, ends
}

// realTableRows renders every row of a table (source columns by name, the
// deleted flag, sequence and source time; not the apply time) sorted.
func realTableRows(t *testing.T, dir string) (rows []string, sch string) {
	t.Helper()
	ctx := context.Background()
	store := storage.NewLocal(dir)
	a := NewTableApplier("t", "p", delta.Open(store), func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }, nil, nil)
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Snapshot() == nil {
		t.Fatalf("%s: no table", dir)
	}
	l := a.Layout()
	for _, add := range a.Snapshot().Files() {
		rs, err := a.rf.ReadRows(ctx, add)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			var b strings.Builder
			for i, f := range l.Source {
				fmt.Fprintf(&b, "%s=%#v ", f.Name, r.Values[i])
			}
			fmt.Fprintf(&b, "deleted=%v", r.Deleted)
			// The sequence and source time travel after the values, split
			// by a tab: a row last written by a snapshot read (commit LSN
			// null: key 01 00 ...) has the LSN of its own connector's
			// snapshot, which differs between two recordings.
			fmt.Fprintf(&b, "\tseq=%x source_ts=%d", r.Seq, r.SourceTsMicros)
			rows = append(rows, b.String())
		}
	}
	sort.Strings(rows)
	js, _ := json.Marshal(a.Snapshot().Schema)
	return rows, string(js)
}

// TestEngineRealAvroEqualsJSON replays the recorded real Debezium runs of
// one PostgreSQL workload, Avro (through the project's registry, with the
// recorded schemas) and JSON with inline schemas, through the engine into
// one table per source table. Each Avro table equals its JSON twin row by
// row and value by value, with the same Delta schema, and nothing is
// quarantined in either.
func TestEngineRealAvroEqualsJSON(t *testing.T) {
	realDir := filepath.Join("..", "debezium", "testdata", "real")
	avroDir, jsonDir := filepath.Join(realDir, "postgres-avro"), filepath.Join(realDir, "postgres-json")
	tr := newTestRegistry(t)
	var recorded map[string]string
	b, err := os.ReadFile(filepath.Join(avroDir, "schemas.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &recorded); err != nil {
		t.Fatal(err)
	}
	ids := map[int]int{}
	for k, text := range recorded {
		old, err := strconv.Atoi(k)
		if err != nil {
			t.Fatal(err)
		}
		ids[old] = tr.register(t, "recorded-"+k, text)
	}

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	avroTopics, avroEnds := replayRun(t, pcl, avroDir, "postgres_avro", ids)
	jsonTopics, jsonEnds := replayRun(t, pcl, jsonDir, "postgres_json", nil)
	if len(avroTopics) != len(jsonTopics) {
		t.Fatalf("avro run has tables %v, json run %v", avroTopics, jsonTopics)
	}

	dir := t.TempDir()
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "pipeline: {id: real}\nkafka: {brokers: [%s], group: real}\nschema_registry: {url: %q}\ndefaults: {flush: {max_latency: 50ms}}\ntables:\n",
		strings.Join(c.ListenAddrs(), ", "), tr.srv.URL)
	var names []string
	for name := range avroTopics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&yaml, "  - {name: avro_%s, topic: %s, format: avro, location: %s/avro_%s}\n", name, avroTopics[name], dir, name)
		fmt.Fprintf(&yaml, "  - {name: json_%s, topic: %s, format: json, location: %s/json_%s}\n", name, jsonTopics[name], dir, name)
	}
	cfg, err := ParseConfig("real.yaml", []byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	e, stop := startEngineWith(t, cfg)
	defer stop()
	for _, name := range names {
		waitPositionsWithin(t, dir+"/avro_"+name, "real", avroTopics[name], map[int32]int64{0: avroEnds[avroTopics[name]]}, time.Minute)
		waitPositionsWithin(t, dir+"/json_"+name, "real", jsonTopics[name], map[int32]int64{0: jsonEnds[jsonTopics[name]]}, time.Minute)
	}
	total, streamed := 0, 0
	for _, name := range names {
		ar, as := realTableRows(t, dir+"/avro_"+name)
		jr, js := realTableRows(t, dir+"/json_"+name)
		total += len(ar)
		if as != js {
			t.Errorf("%s: schemas differ\navro %s\njson %s", name, as, js)
		}
		if len(ar) == 0 || len(ar) != len(jr) {
			t.Errorf("%s: avro table has %d rows, json %d", name, len(ar), len(jr))
		}
		for i := range min(len(ar), len(jr)) {
			av, ameta, _ := strings.Cut(ar[i], "\t")
			jv, jmeta, _ := strings.Cut(jr[i], "\t")
			if av != jv || (!strings.HasPrefix(jmeta, "seq=0100") && ameta != jmeta) {
				t.Errorf("%s row %d differs:\navro %s\njson %s", name, i, ar[i], jr[i])
			}
			if !strings.HasPrefix(jmeta, "seq=0100") {
				streamed++
			}
		}
		for _, kind := range []string{"avro_", "json_"} {
			if q := quarantined(t, dir+"/"+kind+name); len(q) != 0 {
				t.Errorf("%s%s quarantined %v", kind, name, q)
			}
		}
	}
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("halted: %v", h)
	}
	if streamed == 0 {
		t.Error("no row was last written by a streamed change: sequences were never compared")
	}
	t.Logf("%d tables, %d rows (%d last written by streamed changes, sequence and source time compared too), equal in both forms", len(names), total, streamed)
}

// TestEngineSkipsLogicalMessages: a PostgreSQL logical decoding message
// (op "m", shaped as in Debezium's documentation; no recording exists) on
// a table's topic is read and skipped, never quarantined, and the changes
// around it are applied.
func TestEngineSkipsLogicalMessages(t *testing.T) {
	p, table, e := kfakeEngine(t)
	p.change(1, 10, "c", "new")
	msgKey := `{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"prefix"}],"optional":false,"name":"io.debezium.connector.postgresql.MessageKey"},"payload":{"prefix":"audit"}}`
	msg := `{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},` +
		`{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},` +
		`{"type":"struct","fields":[{"type":"string","optional":false,"field":"prefix"},{"type":"bytes","optional":true,"field":"content"}],"optional":false,"name":"io.debezium.connector.postgresql.Message","field":"message"}],"optional":false,"name":"io.debezium.connector.postgresql.MessageValue"},` +
		`"payload":{"op":"m","ts_ms":1700000000011,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"pg","ts_ms":1700000000011,"db":"shop","sequence":"[\"11\",\"11\"]","schema":"","table":"","txId":11,"lsn":11},"message":{"prefix":"audit","content":"aGVsbG8="}}}`
	p.send([]byte(msgKey), []byte(msg), 0)
	p.change(2, 12, "c", "new")
	snap := waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := fmt.Sprint(readOrders(t, table)), "[1 new false 2 new false]"; got != want {
		t.Errorf("table = %s, want %s", got, want)
	}
	if q := quarantined(t, table); len(q) != 0 {
		t.Errorf("quarantined: %v", q)
	}
	skipped := 0
	for v := int64(0); v <= snap.Version; v++ {
		acts, err := delta.Open(storage.NewLocal(table)).ReadCommit(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.CommitInfo != nil {
				n, _ := a.CommitInfo.OperationParameters["recordsSkipped"].(float64)
				skipped += int(n)
			}
		}
	}
	if skipped != 1 {
		t.Errorf("commits count %d skipped records, want the one message", skipped)
	}
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("halted: %v", h)
	}
}

// TestRegistryConfigAuthAndTLS: the engine's registry client takes basic
// auth from a file, a bearer token from the environment, and trusts the
// registry's certificate from ca_file; ambiguous or incomplete credentials
// are configuration errors, and a secret that cannot be read stops
// NewEngine with the field's name.
func TestRegistryConfigAuthAndTLS(t *testing.T) {
	reg, err := registry.Open("")
	if err != nil {
		t.Fatal(err)
	}
	var lastAuth atomic.Value
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastAuth.Store(r.Header.Get("Authorization"))
		reg.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pemCert(srv.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := sr.NewClient(sr.URLs(srv.URL), sr.HTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreateSchema(context.Background(), "k", sr.Schema{Schema: avroOrdersKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CDC_TEST_TOKEN", "tok-1")
	base := func(registryYAML string) string {
		return fmt.Sprintf("pipeline: {id: p}\nkafka: {brokers: [127.0.0.1:1], group: g}\nschema_registry: %s\ntables:\n  - {name: t, topic: t, format: avro, location: %s/t}\n", registryYAML, dir)
	}
	for _, tc := range []struct {
		name, yaml, auth string
	}{
		{"basic from file", fmt.Sprintf("{url: %q, username: app, password_file: %q, tls: {enabled: true, ca_file: %q}}", srv.URL, pw, ca), "Basic " + base64.StdEncoding.EncodeToString([]byte("app:s3cret"))},
		{"bearer from env", fmt.Sprintf("{url: %q, bearer_token_env: CDC_TEST_TOKEN, tls: {enabled: true, ca_file: %q}}", srv.URL, ca), "Bearer tok-1"},
	} {
		cfg, err := ParseConfig("r.yaml", []byte(base(tc.yaml)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e, err := NewEngine(cfg, Logger(quietLogger()))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		text, err := e.registry.SchemaText(context.Background(), s.ID)
		if err != nil || !strings.Contains(text, `"pg.public.orders"`) {
			t.Errorf("%s: schema %d = %q, %v", tc.name, s.ID, text, err)
		}
		if got, _ := lastAuth.Load().(string); got != tc.auth {
			t.Errorf("%s: Authorization %q, want %q", tc.name, got, tc.auth)
		}
	}
	// Without ca_file the registry's self-signed certificate is refused:
	// a retryable fetch error, not an unknown id.
	cfg, err := ParseConfig("r.yaml", []byte(base(fmt.Sprintf("{url: %q}", srv.URL))))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.registry.SchemaText(context.Background(), s.ID); err == nil || strings.Contains(err.Error(), "unknown schema id") {
		t.Errorf("untrusted certificate: %v, want a TLS error", err)
	}
	// A secret that is not there: NewEngine names the field, not a value.
	cfg, err = ParseConfig("r.yaml", []byte(base(fmt.Sprintf("{url: %q, username: app, password_env: CDC_TEST_NO_SUCH_VAR}", srv.URL))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(cfg); err == nil || !strings.Contains(err.Error(), "schema_registry.password_env") {
		t.Errorf("missing password env: %v", err)
	}
	// Ambiguous or incomplete credentials are configuration errors.
	for yaml, want := range map[string]string{
		`{url: "http://r", username: app}`:                                     "schema_registry.username",
		`{url: "http://r", password_env: X}`:                                   "schema_registry.username",
		`{url: "http://r", username: a, password_env: X, password_file: /f}`:   "schema_registry.password_file",
		`{url: "http://r", bearer_token_env: X, bearer_token_file: /f}`:        "schema_registry.bearer_token_file",
		`{url: "http://r", username: a, password_env: X, bearer_token_env: Y}`: "not both",
		`{url: "http://r", username: a, password: inline}`:                     "password_env or password_file",
	} {
		_, err := ParseConfig("r.yaml", []byte(base(yaml)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", yaml, err, want)
		}
	}
	// A format avro table without schema_registry is refused by validation.
	_, err = ParseConfig("r.yaml", []byte(fmt.Sprintf("pipeline: {id: p}\nkafka: {brokers: [b:1], group: g}\ntables:\n  - {name: t, topic: t, format: flat-avro, location: %s/t}\n", dir)))
	if err == nil || !strings.Contains(err.Error(), "avro needs schema_registry") {
		t.Errorf("avro without registry: %v", err)
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
