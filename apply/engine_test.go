package apply

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/s3test"
	"github.com/cdcapply/cdcapply/tombstone"
)

// dbzOrders builds a Debezium PostgreSQL JSON record (JsonConverter with
// schemas.enable=true) of a table orders(id int primary key, status text),
// shaped like the recorded real fixtures in debezium/testdata/real.
func dbzOrders(id int, lsn int64, op, status string) (key, value []byte) {
	return dbzOrdersNote(id, lsn, op, status, nil)
}

// dbzOrdersNote is dbzOrders for the table after "ALTER TABLE orders ADD
// COLUMN note text" when note is not nil.
func dbzOrdersNote(id int, lsn int64, op, status string, note *string) (key, value []byte) {
	cols := `{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"status"}`
	if note != nil {
		cols += `,{"type":"string","optional":true,"field":"note"}`
	}
	row := `{"type":"struct","fields":[` + cols + `],"optional":true,"name":"pg.public.orders.Value","field":"%s"}`
	src := `{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}`
	sch := `{"type":"struct","fields":[` + fmt.Sprintf(row, "before") + `,` + fmt.Sprintf(row, "after") + `,` + src +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"pg.public.orders.Envelope"}`
	extra, extraNull := "", ""
	if note != nil {
		extra, extraNull = fmt.Sprintf(`,"note":%q`, *note), `,"note":null`
	}
	img := fmt.Sprintf(`{"id":%d,"status":%q%s}`, id, status, extra)
	before, after := "null", img
	switch op {
	case "d":
		before, after = fmt.Sprintf(`{"id":%d,"status":null%s}`, id, extraNull), "null"
	case "t": // a truncate carries no row and no key
		after = "null"
	}
	payload := fmt.Sprintf(`{"before":%s,"after":%s,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"pg","ts_ms":%d,"snapshot":"false","db":"shop","sequence":"[\"%d\",\"%d\"]","schema":"public","table":"orders","txId":%d,"lsn":%d},"op":%q,"ts_ms":%d}`,
		before, after, 1_700_000_000_000+lsn, lsn, lsn, lsn, lsn, op, 1_700_000_000_000+lsn)
	key = []byte(fmt.Sprintf(`{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"pg.public.orders.Key"},"payload":{"id":%d}}`, id))
	return key, []byte(`{"schema":` + sch + `,"payload":` + payload + `}`)
}

type producer struct {
	t      *testing.T
	cl     *kgo.Client
	topic  string
	nparts int32
	ends   map[int32]int64 // next offset per partition after what was produced
}

func (p *producer) send(key, value []byte, partition int32) {
	p.t.Helper()
	r := &kgo.Record{Topic: p.topic, Key: key, Value: value, Partition: partition}
	res := p.cl.ProduceSync(context.Background(), r)
	if err := res.FirstErr(); err != nil {
		p.t.Fatal(err)
	}
	p.ends[r.Partition] = r.Offset + 1
}

func (p *producer) change(id int, lsn int64, op, status string) {
	k, v := dbzOrders(id, lsn, op, status)
	h := fnv.New32a()
	h.Write(k)
	p.send(k, v, int32(h.Sum32()%uint32(p.nparts)))
}

// waitPositions waits until the table's txn positions reach the produced
// end offsets of every partition.
func waitPositions(t *testing.T, dir, pipeline, topic string, ends map[int32]int64) *delta.Snapshot {
	t.Helper()
	return waitPositionsWithin(t, dir, pipeline, topic, ends, 30*time.Second)
}

// waitPositionsFor waits for the shop pipeline's table with a longer bound.
func waitPositionsFor(t *testing.T, dir, topic string, ends map[int32]int64, d time.Duration) *delta.Snapshot {
	t.Helper()
	return waitPositionsWithin(t, dir, "shop", topic, ends, d)
}

func waitPositionsWithin(t testing.TB, dir, pipeline, topic string, ends map[int32]int64, d time.Duration) *delta.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		snap, err := delta.Open(testStore(t, dir)).Snapshot(context.Background())
		if err == nil {
			pos := checkpoint.Restore(snap, pipeline)
			done := true
			for p, end := range ends {
				if next, _ := pos.Next(checkpoint.TopicPartition{Topic: topic, Partition: p}); next < end {
					done = false
				}
			}
			if done {
				return snap
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("table did not reach offsets %v (last error %v)", ends, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testConfig(t *testing.T, brokers []string, dir string) *Config {
	return testConfigFor(t, brokers, dir, "orders", "cdcapply-test")
}

func testConfigFor(t testing.TB, brokers []string, dir, topic, group string) *Config {
	t.Helper()
	yaml := fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: %s}
defaults: {flush: {max_latency: 50ms}}
tables:
  - {name: orders, topic: %s, location: %s/orders}
`, strings.Join(brokers, ", "), group, topic, dir)
	cfg, err := ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEngineReferenceCaseThroughKafka is issue 4's reference case through
// Kafka (kfake) as Debezium events, read back with delta-rs, with bad
// records in the stream that are quarantined while the stream goes on.
// It runs with LZ4 batches, which the engine decompresses itself, and
// zstd ones, which franz-go decompresses into the engine's buffers.
func TestEngineReferenceCaseThroughKafka(t *testing.T) {
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(codec.name, func(t *testing.T) {
			const nparts = 3
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nparts, "orders"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			runReferenceCase(t, c.ListenAddrs(), "orders", "cdcapply-test", nparts, codec.codec, "", CopyOnWrite)
		})
	}
}

// runReferenceCase runs the reference case on a topic of nparts
// partitions that exists on brokers (kfake or a real broker), its
// batches compressed with codec.
// TestEngineReferenceCaseOnS3 is the reference case with its table and
// quarantine on an S3-compatible server (scripts/s3.sh), in both write
// modes: the commits' put-if-absent is a conditional PUT, the data files
// and deletion vectors are objects, and delta-rs reads the table from the
// server.
func TestEngineReferenceCaseOnS3(t *testing.T) {
	for _, mode := range []MergeMode{CopyOnWrite, MergeOnRead} {
		t.Run(string(mode), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			runReferenceCase(t, c.ListenAddrs(), "orders", "cdcapply-test", 3, kgo.Lz4Compression(), s3test.Location(t), mode)
		})
	}
}

// testStore is the storage of a test's table location (a directory or
// s3://).
func testStore(t testing.TB, loc string) storage.Storage {
	t.Helper()
	st, err := storage.ForLocation(loc)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runReferenceCase runs the reference case through the brokers into a
// table under root (a fresh directory when empty) written in mode.
func runReferenceCase(t *testing.T, brokers []string, topic, group string, nparts int32, codec kgo.CompressionCodec, root string, mode MergeMode) {
	// Compressed, so that the engine decompresses into its batch pool:
	// the buffers of released records are reused while the quarantined
	// ones keep theirs.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	p := &producer{t: t, cl: pcl, topic: topic, nparts: nparts, ends: map[int32]int64{}}

	dir := root
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := testConfigFor(t, brokers, dir, topic, group)
	cfg.Tables[0].WriteMode = string(mode)
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	table := dir + "/orders"
	// The table holds keys 1 and 2 at sequence 10.
	p.change(1, 10, "c", "new")
	p.change(2, 10, "c", "new")
	waitPositions(t, table, "shop", topic, p.ends)
	// One batch, out of order, a delete, an insert; then bad records.
	p.change(1, 30, "u", "shipped")
	p.change(1, 20, "u", "paid")
	p.change(2, 25, "d", "")
	p.change(3, 15, "c", "new")
	k, v := dbzOrders(4, 40, "c", "x")
	// The bad records' values, which the quarantine must hold unchanged
	// (their batches' buffers are never reused).
	var bad []string
	sendBad := func(key, value []byte, partition int32) {
		bad = append(bad, string(value))
		p.send(key, value, partition)
	}
	sendBad(k, []byte(`{"schema":`), 0)                                          // malformed JSON
	sendBad(k, []byte(strings.Replace(string(v), `"op":"c"`, `"op":"x"`, 1)), 1) // unknown op
	// Neither source.sequence nor source.lsn (the second send below): a
	// null sequence, quarantined.
	// No source.sequence but source.lsn: the PostgreSQL sequence falls
	// back to (null, lsn), so key 4 is applied.
	p.send(k, []byte(strings.Replace(string(v), `"sequence":"[\"40\",\"40\"]"`, `"sequence":null`, 1)), 2)
	sendBad(k, []byte(strings.Replace(strings.Replace(string(v), `"sequence":"[\"40\",\"40\"]"`, `"sequence":null`, 1), `"lsn":40`, `"lsn":null`, 1)), 2)
	// Missing key: no Kafka key and an image without the key column.
	sendBad(nil, []byte(strings.Replace(string(v), `"after":{"id":4,`, `"after":{`, 1)), 1)
	// A value that does not fit its column: id is int32.
	sendBad(k, []byte(strings.Replace(string(v), `"after":{"id":4,`, `"after":{"id":99999999999,`, 1)), 2)
	// A Kafka tombstone (null value after a delete): skipped, not applied.
	p.send(nil, nil, 0)
	waitPositions(t, table, "shop", topic, p.ends)
	// A late batch with older events, then a replay of the first batch.
	p.change(1, 22, "u", "paid-late")
	p.change(2, 12, "u", "resurrected")
	waitPositions(t, table, "shop", topic, p.ends)
	p.change(1, 30, "u", "shipped")
	p.change(1, 20, "u", "paid")
	p.change(2, 25, "d", "")
	p.change(3, 15, "c", "new")
	snap := waitPositions(t, table, "shop", topic, p.ends)

	want := "[1 shipped false 2 new true 3 new false 4 x false]"
	got := ""
	if mode == MergeOnRead {
		// Its deletion vectors are applied by delta-rs's query engine.
		_, rows := queryEngineRows(t, table)
		got = fmt.Sprint(rows)
	} else {
		got = deltaRSStates(t, table)
	}
	if got != want {
		t.Errorf("delta-rs reads %v, want %v", got, want)
	}

	// Every record is accounted for, across all commits of the table.
	var read, applied, stale, skipped, quarantined int
	for v := int64(0); v <= snap.Version; v++ {
		acts, err := delta.Open(testStore(t, table)).ReadCommit(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.CommitInfo == nil {
				continue
			}
			n := func(k string) int {
				x, _ := a.CommitInfo.OperationParameters[k].(float64)
				return int(x)
			}
			read += n("recordsRead")
			applied += n("recordsApplied")
			stale += n("recordsStale")
			skipped += n("recordsSkipped")
			quarantined += n("recordsQuarantined")
		}
	}
	produced := 0
	for _, end := range p.ends {
		produced += int(end)
	}
	if read != produced || applied+stale+skipped+quarantined != read {
		t.Errorf("accounting: produced %d, read %d = applied %d + stale %d + skipped %d + quarantined %d", produced, read, applied, stale, skipped, quarantined)
	}
	if quarantined != 5 || skipped < 1 {
		t.Errorf("quarantined %d (want the 5 bad records), skipped %d (want the Kafka tombstone)", quarantined, skipped)
	}

	// The quarantine table holds each bad record with its reason.
	qstore := testStore(t, table+"_quarantine")
	qsnap, err := delta.Open(qstore).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var reasons, values []string
	for _, add := range qsnap.Files() {
		rec, err := datafile.Read(context.Background(), qstore, datafile.Layout{Schema: quarantineSchema, PartitionColumns: []string{}}, add)
		if err != nil {
			t.Fatal(err)
		}
		col, vals := rec.Column(7), rec.Column(4).(*array.Binary)
		for i := 0; i < int(rec.NumRows()); i++ {
			reasons = append(reasons, col.ValueStr(i))
			values = append(values, string(vals.Value(i)))
		}
		rec.Release()
	}
	sort.Strings(reasons)
	sort.Strings(values)
	sort.Strings(bad)
	if !slices.Equal(values, bad) {
		t.Errorf("quarantined values differ from the bad records produced:\n%q\n%q", values, bad)
	}
	js, _ := json.Marshal(reasons)
	for _, want := range []string{"malformed_json", "unknown_op", "null_sequence", "missing_key", "value_out_of_range"} {
		if !strings.Contains(string(js), want) {
			t.Errorf("quarantine reasons %s lack %q", js, want)
		}
	}
	if len(reasons) != quarantined {
		t.Errorf("quarantine table has %d rows, commits counted %d", len(reasons), quarantined)
	}
	if filled, reused, _ := e.FetchBuffers(); filled == 0 || reused == 0 {
		t.Errorf("%d compressed batches decompressed, %d into reused buffers: the batch pool was not exercised", filled, reused)
	}
	// Every routed record is recycled, so once a batch's records are all
	// routed its record slice serves a later batch.
	if got, reused := e.RecordSlices(); got == 0 || reused == 0 {
		t.Errorf("%d record slices handed to the client, %d of them recycled ones", got, reused)
	}
	// Every record was released (applied, skipped, quarantined): once the
	// last batch settles no buffer has records out.
	for deadline := time.Now().Add(10 * time.Second); e.batches.outstanding() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.batches.outstanding(); n > 0 {
		t.Errorf("%d decompressed batches still have records out after the last commit", n)
	}
}

// TestEngineAdditiveSchema: a column added mid-stream joins the table in
// the same commit as the first change that carries it; older rows read it
// as NULL (with delta-rs), nothing is quarantined.
func TestEngineAdditiveSchema(t *testing.T) {
	p, table, e := kfakeEngine(t)
	p.change(1, 10, "c", "new")
	p.change(2, 11, "c", "new")
	waitPositions(t, table, "shop", "orders", p.ends)
	note := "gift"
	k, v := dbzOrdersNote(3, 12, "c", "new", &note)
	p.send(k, v, 0)
	k, v = dbzOrdersNote(1, 13, "u", "paid", &note)
	p.send(k, v, 0)
	snap := waitPositions(t, table, "shop", "orders", p.ends)
	if _, _, ok := snap.Schema.Field("note"); !ok {
		t.Fatalf("schema lacks the new column: %s", snap.Schema)
	}
	rows, _ := deltaRS(t, table)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%v %v %v", r["id"], r["status"], r["note"]))
	}
	sort.Strings(got)
	if want := "[1 paid gift 2 new <nil> 3 new gift]"; fmt.Sprint(got) != want {
		t.Errorf("delta-rs reads %v, want %v", got, want)
	}
	if q := e.Halted(); len(q) != 0 {
		t.Errorf("halted: %v", q)
	}
}

// TestEngineTruncateTombstones: a source TRUNCATE turns every row older
// than it into a tombstone that keeps its values; a row inserted after the
// truncate (even one read in the same poll) stays live.
func TestEngineTruncateTombstones(t *testing.T) {
	p, table, _ := kfakeEngine(t)
	p.change(1, 10, "c", "a")
	p.change(2, 11, "c", "b")
	waitPositions(t, table, "shop", "orders", p.ends)
	p.change(3, 12, "c", "c") // same poll as the truncate, before it
	_, v := dbzOrders(0, 13, "t", "")
	p.send(nil, v, 0)
	p.change(4, 14, "c", "d")   // after the truncate
	p.change(2, 9, "u", "late") // older than the truncate: stale
	waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := deltaRSStates(t, table), "[1 a true 2 b true 3 c true 4 d false]"; got != want {
		t.Errorf("delta-rs reads %v, want %v", got, want)
	}
}

// TestEngineLateBeyondPurgeHorizon is issue 7's resurrection scenario
// through the running engine: a key is deleted, its tombstone purged after
// the lateness window, then a late update with an older sequence arrives.
// The key stays absent and the change is quarantined with the reason.
// (Taking the LateBeyondHorizon call out of Engine.flush makes this test
// fail: the key comes back.)
func TestEngineLateBeyondPurgeHorizon(t *testing.T) {
	p, table, _ := kfakeEngine(t)
	ctx := context.Background()
	// Source times are in 2023 (dbzOrders), far older than a week.
	p.change(1, 10, "c", "new")
	p.change(2, 11, "c", "keep")
	p.change(1, 20, "d", "")
	waitPositions(t, table, "shop", "orders", p.ends)
	res, err := tombstone.Purge(ctx, delta.Open(storage.NewLocal(table)), tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 {
		t.Fatalf("purged %d rows, want the one tombstone", res.Rows)
	}
	p.change(1, 15, "u", "resurrected") // late: older than the delete, older than the horizon
	// An ordinary change goes on: source time now (dbzOrders puts the
	// source time at 1_700_000_000_000 ms + lsn).
	p.change(3, time.Now().UnixMilli()-1_700_000_000_000, "c", "fresh")
	waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := deltaRSStates(t, table), "[2 keep false 3 fresh false]"; got != want {
		t.Errorf("delta-rs reads %v, want %v (key 1 must stay absent)", got, want)
	}
	qrows, _ := deltaRS(t, table+"_quarantine")
	if len(qrows) != 1 || qrows[0]["reason"] != tombstone.ReasonLateBeyondHorizon {
		t.Errorf("quarantine = %v, want the late change with reason %s", qrows, tombstone.ReasonLateBeyondHorizon)
	}
}

// kfakeEngine starts a one-partition kfake cluster with topic "orders", a
// producer for it and an engine applying it into a fresh table; all stop
// when the test ends.
// kfakeOrders starts a kfake cluster with a one-partition topic "orders"
// and a producer into it; both are closed when the test ends.
func kfakeOrders(t *testing.T) (*kfake.Cluster, *producer) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// LZ4, as Debezium deployments often produce: the engine tests built
	// on this topic (schema evolution, truncate, mid-poll flushes, the
	// batch in flight, shutdown) run through the batch pool.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pcl.Close)
	return c, &producer{t: t, cl: pcl, topic: "orders", nparts: 1, ends: map[int32]int64{}}
}

func kfakeEngine(t *testing.T) (p *producer, table string, e *Engine) {
	t.Helper()
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	e, stop := startEngineWith(t, testConfig(t, c.ListenAddrs(), dir))
	t.Cleanup(stop)
	return p, dir + "/orders", e
}

// TestEngineMemoryLimit: pipeline.memory_limit is the runtime's soft
// memory limit while the engine runs, and the previous one after.
func TestEngineMemoryLimit(t *testing.T) {
	c, _ := kfakeOrders(t)
	cfg := testConfig(t, c.ListenAddrs(), t.TempDir())
	cfg.Pipeline.MemoryLimit = 3 << 30
	before := debug.SetMemoryLimit(-1)
	_, stop := startEngineWith(t, cfg)
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("memory limit while running: %d, want %d", got, int64(3<<30))
	}
	stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("memory limit after Run: %d, want the previous %d", got, before)
	}
}

// statusByID reads the orders table at dir with delta-rs: each id's
// status, with " true" appended for a tombstone.
func statusByID(t *testing.T, dir string) map[int]string {
	t.Helper()
	rows, _ := deltaRS(t, dir)
	got := map[int]string{}
	for _, r := range rows {
		id, err := strconv.Atoi(fmt.Sprint(r["id"]))
		if err != nil {
			t.Fatalf("row %v: %v", r, err)
		}
		got[id] = fmt.Sprint(r["status"])
		if r[ColDeleted] == true {
			got[id] += " true"
		}
	}
	return got
}

// TestEngineFetchLimits: the Kafka client asks for fetches no larger
// than kafka.fetch_max_bytes and partitions' parts no larger than
// kafka.fetch_max_partition_bytes (the defaults when unset, also for a
// Config built in code), and a record larger than both still arrives:
// the bound never stalls a partition. Without the bound the client asks
// for 50 MiB a fetch, which a topic of many partitions fills (see
// DefaultFetchMaxBytes).
func TestEngineFetchLimits(t *testing.T) {
	for _, tc := range []struct {
		name              string
		set               func(*KafkaConfig)
		maxBytes, maxPart int32
	}{
		{"defaults", func(*KafkaConfig) {}, DefaultFetchMaxBytes, DefaultFetchMaxPartitionBytes},
		{"unset in code", func(k *KafkaConfig) { k.FetchMaxBytes, k.FetchMaxPartitionBytes = 0, 0 }, DefaultFetchMaxBytes, DefaultFetchMaxPartitionBytes},
		{"configured", func(k *KafkaConfig) { k.FetchMaxBytes, k.FetchMaxPartitionBytes = 4096, 2048 }, 4096, 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const nparts = 4
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nparts, "orders"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var mu sync.Mutex
			var fetches int
			var maxBytes, maxPart []int32
			c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				f := req.(*kmsg.FetchRequest)
				mu.Lock()
				defer mu.Unlock()
				fetches++
				maxBytes = append(maxBytes, f.MaxBytes)
				for _, tp := range f.Topics {
					for _, pp := range tp.Partitions {
						maxPart = append(maxPart, pp.PartitionMaxBytes)
					}
				}
				return nil, nil, false // observed only: the cluster answers
			})
			pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(kgo.Lz4Compression()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pcl.Close)
			p := &producer{t: t, cl: pcl, topic: "orders", nparts: nparts, ends: map[int32]int64{}}
			want := map[int]string{}
			for id := range 200 {
				status := fmt.Sprintf("s%d", id)
				if id == 7 {
					// Larger than the configured fetch bound, incompressible.
					rnd := rand.New(rand.NewPCG(1, 2))
					b := make([]byte, 6000)
					for i := range b {
						b[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rnd.IntN(36)]
					}
					status = string(b)
				}
				p.change(id, int64(10+id), "c", status)
				want[id] = status
			}
			dir := t.TempDir()
			cfg := testConfig(t, c.ListenAddrs(), dir)
			tc.set(&cfg.Kafka)
			_, stop := startEngineWith(t, cfg)
			defer stop()
			waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
			got := statusByID(t, dir+"/orders")
			if !maps.Equal(got, want) {
				t.Errorf("table has %d rows, want %d; the large row: %d characters", len(got), len(want), len(got[7]))
			}
			mu.Lock()
			defer mu.Unlock()
			if fetches == 0 || len(maxPart) == 0 {
				t.Fatalf("%d fetch requests, %d partitions asked for: the test saw no fetch", fetches, len(maxPart))
			}
			for _, b := range maxBytes {
				if b != tc.maxBytes {
					t.Fatalf("a fetch asked for up to %d bytes, want %d", b, tc.maxBytes)
				}
			}
			for _, b := range maxPart {
				if b != tc.maxPart {
					t.Fatalf("a partition asked for up to %d bytes, want %d", b, tc.maxPart)
				}
			}
		})
	}
}

// TestEnginePredecodesLargePolls: records already in the topic arrive in
// polls large enough to be decoded on both cores ahead of routing; the
// table is the same as record-by-record decoding gives (the last change
// per key by sequence, deletes as tombstones keeping the last values).
// Run it with -race: the decoders and the table state are shared.
func TestEnginePredecodesLargePolls(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("predecode needs two cores")
	}
	c, p := kfakeOrders(t)
	want := map[int]string{}
	lsn := int64(10)
	for round := 0; round < 3; round++ {
		for id := 0; id < 1000; id++ {
			lsn++
			op, status := "u", fmt.Sprintf("r%d-%d", round, id)
			switch {
			case round == 0:
				op = "c"
			case round == 2 && id%5 == 0:
				op, status = "d", ""
			}
			p.change(id, lsn, op, status)
			if op == "d" {
				want[id] = want[id] + " true"
			} else {
				want[id] = status
			}
		}
	}
	dir := t.TempDir()
	e, stop := startEngineWith(t, testConfig(t, c.ListenAddrs(), dir))
	defer stop()
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	if e.predecodedUsed.Load() == 0 {
		t.Fatal("no record was decoded ahead: the test did not exercise predecode")
	}
	got := statusByID(t, dir+"/orders")
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("key %d: %q, want %q", id, got[id], w)
		}
	}
}

// TestPredecodeEvolvesMidPoll: a poll, decoded ahead on both cores, in
// which the source gains a column (additive policy) and records of the old
// shape follow the one that brought it. The workers project ahead onto the
// layout the table had; after the evolution that layout is gone, so the
// old-shape records behind it must be projected again onto the new one
// (NULL in the new column), not kept one column short. Polls are handed
// to the engine as Run hands them, without a broker, so the second one is
// surely one poll.
func TestPredecodeEvolvesMidPoll(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("predecode needs two cores")
	}
	ctx := context.Background()
	e, tr, dir := directEngine(t)
	var recs []*kgo.Record
	add := func(k, v []byte) { recs = append(recs, &kgo.Record{Topic: "orders", Key: k, Value: v}) }
	offset := int64(0)
	poll := func() {
		t.Helper()
		for _, r := range recs {
			r.Offset, offset = offset, offset+1
		}
		if !routeAsRun(t, e, tr, recs) {
			t.Fatal("the poll was not decoded ahead")
		}
		if !e.flush(ctx, tr) || tr.halted != nil {
			t.Fatalf("flush: resynced or halted (%v)", tr.halted)
		}
		recs = recs[:0]
	}
	type want struct {
		status string
		note   any
	}
	wants := map[int]want{}
	const n = 2 * predecodeMin // each poll is decoded on two workers
	lsn := int64(10)
	for id := range n { // no layout yet: routing projects these
		lsn++
		add(dbzOrders(id, lsn, "c", "c"))
	}
	poll()
	for id := range n { // the old shape: projected ahead onto the layout
		lsn++
		add(dbzOrders(id, lsn, "u", fmt.Sprintf("u1-%d", id)))
		wants[id] = want{fmt.Sprintf("u1-%d", id), nil}
	}
	for id := range n / 2 { // the new column arrives
		lsn++
		note := fmt.Sprintf("n%d", id)
		add(dbzOrdersNote(id, lsn, "u", fmt.Sprintf("u2-%d", id), &note))
		wants[id] = want{fmt.Sprintf("u2-%d", id), note}
	}
	for id := n / 2; id < n; id++ { // the old shape again, behind it
		lsn++
		add(dbzOrders(id, lsn, "u", fmt.Sprintf("u3-%d", id)))
		wants[id] = want{fmt.Sprintf("u3-%d", id), nil}
	}
	poll()
	if got := e.projectedAhead.Load(); got < n {
		t.Fatalf("%d changes routed as projected ahead, want at least %d", got, n)
	}
	rows, _ := deltaRS(t, dir+"/orders")
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for _, r := range rows {
		id, err := strconv.Atoi(fmt.Sprint(r["id"]))
		if err != nil {
			t.Fatalf("row %v: %v", r, err)
		}
		w := wants[id]
		note, ok := r["note"]
		if !ok {
			t.Fatalf("row %v has no note column", r)
		}
		if r["status"] != w.status || note != w.note {
			t.Fatalf("key %d: status %v note %v, want %q %v", id, r["status"], note, w.status, w.note)
		}
	}
}

// TestLateBeyondRisenHorizon: routing releases a change's record unless
// the purge horizon it knows would refuse the change (keepRaw), so a
// purge that commits between routing and the flush finds a late change
// without its record. The flush then reads the batch again with every
// record kept and quarantines the change as it arrived; a change late
// beyond a horizon routing already knows keeps its record at once.
// (Without the re-read, the flush would quarantine a nil record. The
// re-read keeps every record, so that a horizon rising yet again before
// its flush cannot send it round once more.)
func TestLateBeyondRisenHorizon(t *testing.T) {
	ctx := context.Background()
	e, tr, dir := directEngine(t)
	table := dir + "/orders"
	var recs []*kgo.Record
	offset := int64(0)
	add := func(k, v []byte) {
		recs = append(recs, &kgo.Record{Topic: "orders", Key: k, Value: v, Offset: offset})
		offset++
	}
	route := func() {
		t.Helper()
		tr.resynced = false // a new poll
		routeAsRun(t, e, tr, recs)
	}
	// Source times are in 2023 (dbzOrders), older than a week.
	add(dbzOrders(1, 10, "c", "new"))
	add(dbzOrders(2, 11, "c", "keep"))
	add(dbzOrders(1, 20, "d", ""))
	route()
	if !e.flush(ctx, tr) {
		t.Fatal("first flush resynced")
	}
	recs = recs[:0]
	// A late update of the deleted key, then fresh changes (source time
	// now: dbzOrders puts it at 1_700_000_000_000 ms + lsn), enough to be
	// decoded ahead.
	lateKey, lateValue := dbzOrders(1, 15, "u", "resurrected")
	add(lateKey, lateValue)
	fresh := time.Now().UnixMilli() - 1_700_000_000_000
	const n = 2 * predecodeMin
	for id := 3; id < 3+n; id++ {
		add(dbzOrders(id, fresh+int64(id), "c", "fresh"))
	}
	second := slices.Clone(recs)
	route()
	if kept := e.rawKept.Load(); kept != 0 {
		t.Fatalf("%d records kept with no horizon, want none", kept)
	}
	// The purge commits after routing, before the flush.
	res, err := tombstone.Purge(ctx, delta.Open(storage.NewLocal(table)), tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 {
		t.Fatalf("purged %d rows, want the one tombstone", res.Rows)
	}
	if e.flush(ctx, tr) {
		t.Fatal("the flush committed a batch whose late change has no record")
	}
	if !tr.rawAll || e.rawRereads.Load() != 1 {
		t.Fatalf("rawAll %v, re-reads %d: want the batch read again with its records", tr.rawAll, e.rawRereads.Load())
	}
	// Read again from the table's positions (the engine seeks there).
	recs = second
	route()
	if got := e.rawKept.Load(); got != int64(len(second)) {
		t.Fatalf("%d records kept on the re-read, want all %d", got, len(second))
	}
	if !e.flush(ctx, tr) {
		t.Fatal("the re-read batch was not committed")
	}
	if tr.rawAll {
		t.Fatal("records still kept after the re-read batch committed")
	}
	// The horizon is known now: a change late beyond it keeps its record
	// when routed, and the flush needs no re-read.
	kept := e.rawKept.Load()
	recs = nil
	add(dbzOrders(1, 16, "u", "resurrected again"))
	add(dbzOrders(3, fresh+n+10, "u", "fresher"))
	route()
	if got := e.rawKept.Load() - kept; got != 1 {
		t.Fatalf("%d records kept, want the late change's only", got)
	}
	if !e.flush(ctx, tr) || e.rawRereads.Load() != 1 {
		t.Fatalf("the flush of a known-late change re-read (%d re-reads)", e.rawRereads.Load())
	}

	rows, _ := deltaRS(t, table)
	if len(rows) != 1+n {
		t.Fatalf("%d rows, want key 2 and the %d fresh keys", len(rows), n)
	}
	for _, r := range rows {
		if fmt.Sprint(r["id"]) == "1" {
			t.Fatalf("the purged key came back: %v", r)
		}
	}
	qrows, _ := deltaRS(t, table+"_quarantine")
	if len(qrows) != 2 {
		t.Fatalf("quarantine holds %d rows, want the two late changes", len(qrows))
	}
	var found bool
	for _, q := range qrows {
		if q["reason"] != tombstone.ReasonLateBeyondHorizon {
			t.Fatalf("quarantine reason %v, want %s", q["reason"], tombstone.ReasonLateBeyondHorizon)
		}
		if fmt.Sprint(q["offset"]) == "3" {
			found = true
			if got := fmt.Sprint(q["value"]); got != base64.StdEncoding.EncodeToString(lateValue) { // delta-rs's binary, as deltaRS prints it
				t.Fatalf("quarantined value %.80s..., want the record as it arrived", got)
			}
		}
	}
	if !found {
		t.Fatalf("quarantine %v lacks the change at offset 3", qrows)
	}
}

// directEngine is an engine with its one table ("orders", in dir/orders)
// opened and no broker behind it (the Kafka client is never made), for
// tests and benchmarks that hand it polls themselves.
func directEngine(tb testing.TB) (*Engine, *tableRun, string) {
	tb.Helper()
	dir := tb.TempDir()
	e, err := NewEngine(testConfigFor(tb, []string{"127.0.0.1:1"}, dir, "orders", "cdcapply-test"), Logger(quietLogger()))
	if err != nil {
		tb.Fatal(err)
	}
	t := e.tables[0]
	if err := t.applier.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return e, t, dir
}

// routeAsRun routes one poll into t as Run does: decoded ahead when the
// poll is large enough and there are two cores (it reports whether it
// was), routed record by record, the predecoded array cleared. A halt
// fails the test.
func routeAsRun(tb testing.TB, e *Engine, t *tableRun, recs []*kgo.Record) bool {
	tb.Helper()
	ctx := context.Background()
	pre := e.predecode(ctx, recs)
	for i, r := range recs {
		e.routeTo(ctx, t, r, predecodedAt(pre, i))
	}
	clear(pre)
	if t.halted != nil {
		tb.Fatal(t.halted)
	}
	return pre != nil
}

// TestRoutingReleasesRecords: a change's record goes back to the batch
// pool when it is routed, before its batch commits (its values are
// copies), unless the purge horizon routing knows would refuse the
// change: that record is kept until the flush has quarantined it, and
// the quarantine holds its bytes unchanged (released too early, the
// pool could have handed its buffer out again).
func TestRoutingReleasesRecords(t *testing.T) {
	ctx := context.Background()
	e, tr, dir := directEngine(t)
	table := dir + "/orders"
	offset := int64(0)
	// pooled puts the records' values into one registered pool buffer,
	// as the LZ4 decompressor does, and returns records pointing there.
	pooled := func(kvs ...[2][]byte) []*kgo.Record {
		t.Helper()
		values := make([]string, len(kvs))
		for i, kv := range kvs {
			values[i] = string(kv[1])
		}
		data := v2Records(values...)
		buf := append(e.batches.get(len(data)), data...)
		e.batches.register(buf)
		recs := make([]*kgo.Record, len(kvs))
		at := 0
		for i, kv := range kvs {
			j := bytes.Index(buf[at:], kv[1])
			if j < 0 {
				t.Fatal("value not in the buffer")
			}
			at += j
			recs[i] = &kgo.Record{Topic: "orders", Key: kv[0], Value: buf[at : at+len(kv[1]) : at+len(kv[1])], Offset: offset}
			at += len(kv[1])
			offset++
		}
		return recs
	}
	kv := func(k, v []byte) [2][]byte { return [2][]byte{k, v} }

	// A poll large enough to be decoded ahead on two cores, and a small
	// one routed on the loop alone; no horizon yet.
	var first [][2][]byte
	for id := range 2 * predecodeMin {
		first = append(first, kv(dbzOrders(id, int64(10+id), "c", "new")))
	}
	for _, poll := range [][][2][]byte{first, {kv(dbzOrders(0, 5000, "d", ""))}} {
		routeAsRun(t, e, tr, pooled(poll...))
		if n := e.batches.outstanding(); n != 0 {
			t.Fatalf("%d pool buffers still have records out after routing, before the commit", n)
		}
	}
	if !e.flush(ctx, tr) {
		t.Fatal("flush resynced")
	}
	if _, err := tombstone.Purge(ctx, delta.Open(storage.NewLocal(table)), tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour, Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.applier.Refresh(ctx); err != nil { // as the next flush would
		t.Fatal(err)
	}
	// Key 0 is purged; a late change for it (2023 source time) keeps its
	// record, a fresh change does not.
	lateKey, lateValue := dbzOrders(0, 20, "u", "late")
	fresh := time.Now().UnixMilli() - 1_700_000_000_000
	routeAsRun(t, e, tr, pooled(kv(lateKey, lateValue), kv(dbzOrders(1, fresh, "u", "fresh"))))
	if n := e.batches.outstanding(); n != 1 {
		t.Fatalf("%d pool buffers with records out, want the late change's", n)
	}
	if !e.flush(ctx, tr) || e.rawRereads.Load() != 0 {
		t.Fatalf("flush resynced (%d re-reads)", e.rawRereads.Load())
	}
	if n := e.batches.outstanding(); n != 0 {
		t.Fatalf("%d pool buffers with records out after the quarantine commit", n)
	}
	qrows, _ := deltaRS(t, table+"_quarantine")
	if len(qrows) != 1 || qrows[0]["reason"] != tombstone.ReasonLateBeyondHorizon || fmt.Sprint(qrows[0]["value"]) != base64.StdEncoding.EncodeToString(lateValue) {
		t.Fatalf("quarantine %v, want the late change's record as it arrived", qrows)
	}
	rows, _ := deltaRS(t, table)
	if len(rows) != 2*predecodeMin-1 {
		t.Fatalf("%d rows, want %d (key 0 purged)", len(rows), 2*predecodeMin-1)
	}
}
