package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/maintenance"
	"github.com/cdcapply/cdcapply/tombstone"
	"github.com/prometheus/client_golang/prometheus"
)

// pgChange is a Debezium PostgreSQL change event of orders(id int, status
// text) in the JsonConverter form with schemas.
func pgChange(id int, lsn int64, op, status string) (key, value []byte) {
	field := func(t, name string, optional bool) string {
		return fmt.Sprintf(`{"type":%q,"optional":%v,"field":%q}`, t, optional, name)
	}
	image := func(name string) string {
		return `{"type":"struct","optional":true,"name":"pg.public.orders.Value","field":"` + name + `","fields":[` +
			field("int32", "id", false) + `,` + field("string", "status", true) + `]}`
	}
	source := `{"type":"struct","optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source","fields":[` +
		strings.Join([]string{field("string", "version", false), field("string", "connector", false), field("string", "name", false),
			field("int64", "ts_ms", false), field("string", "snapshot", true), field("string", "db", false), field("string", "sequence", true),
			field("string", "schema", false), field("string", "table", false), field("int64", "txId", true), field("int64", "lsn", true)}, ",") + `]}`
	schema := `{"type":"struct","optional":false,"name":"pg.public.orders.Envelope","fields":[` + image("before") + `,` + image("after") + `,` +
		source + `,` + field("string", "op", false) + `,` + field("int64", "ts_ms", true) + `]}`
	before, after := "null", fmt.Sprintf(`{"id":%d,"status":%q}`, id, status)
	if op == "d" {
		before, after = fmt.Sprintf(`{"id":%d,"status":null}`, id), "null"
	}
	ts := time.Now().UnixMilli()
	payload := fmt.Sprintf(`{"before":%s,"after":%s,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"pg","ts_ms":%d,"snapshot":"false","db":"shop","sequence":"[null,\"%d\"]","schema":"public","table":"orders","txId":%d,"lsn":%d},"op":%q,"ts_ms":%d}`,
		before, after, ts, lsn, lsn, lsn, op, ts)
	key = []byte(fmt.Sprintf(`{"schema":{"type":"struct","optional":false,"name":"pg.public.orders.Key","fields":[%s]},"payload":{"id":%d}}`, field("int32", "id", false), id))
	return key, []byte(`{"schema":` + schema + `,"payload":` + payload + `}`)
}

// runEngine runs the apply engine on one table until stop is called.
func runEngine(t *testing.T, brokers []string, dir, group, connector string) (stop func()) {
	t.Helper()
	return runEngineLogging(t, brokers, dir, group, connector, "", io.Discard, nil)
}

// lockedLog is a log the engine's goroutines write while the test reads.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runEngineLogging is runEngine with the table's write_mode (empty: the
// default), the engine's log written to w and, when reg is set, its
// metrics registered there.
func runEngineLogging(t *testing.T, brokers []string, dir, group, connector, mode string, w io.Writer, reg *prometheus.Registry) (stop func()) {
	t.Helper()
	if mode == "" {
		mode = string(apply.CopyOnWrite)
	}
	yaml := fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: %s}
defaults: {flush: {max_latency: 50ms}}
tables:
  - {name: orders, topic: orders, location: %s, connector: %s, write_mode: %s}
`, strings.Join(brokers, ", "), group, dir, connector, mode)
	cfg, err := apply.ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	opts := []apply.EngineOption{apply.Logger(slog.New(slog.NewTextHandler(w, nil)))}
	if reg != nil {
		opts = append(opts, apply.WithMetrics(apply.NewMetrics(reg)))
	}
	e, err := apply.NewEngine(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// waitNext waits until the table's position on orders/0 reaches next.
func waitNext(t *testing.T, dir string, next int64) *delta.Snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := delta.Open(storage.NewLocal(dir)).Snapshot(context.Background())
		if err == nil {
			if n, _ := checkpoint.Restore(snap, "shop").Next(checkpoint.TopicPartition{Topic: "orders"}); n >= next {
				return snap
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("table did not reach offset %d (last error %v)", next, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestoreAndReplayThroughEngine is issue 7's restore-plus-replay case
// with the real stream loop: the pipeline runs with a wrong connector
// setting for a while (every change quarantined, only positions committed:
// bad versions N+1..M), the operator stops it, restores version N, and
// restarts it fixed; the engine resumes from the rewound positions in the
// table and the table equals the oracle of the whole stream.
func TestRestoreAndReplayThroughEngine(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	next := int64(0)
	send := func(id int, lsn int64, op, status string) {
		k, v := pgChange(id, lsn, op, status)
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Key: k, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		next++
	}
	dir := t.TempDir() + "/orders"
	brokers := c.ListenAddrs()

	stop := runEngine(t, brokers, dir, "g1", "postgresql")
	send(1, 10, "c", "new")
	send(2, 11, "c", "new")
	good := waitNext(t, dir, next)
	stop()

	// The misconfigured pipeline: PostgreSQL events read as MySQL ones
	// have no sequence and are all quarantined.
	stop = runEngine(t, brokers, dir, "g2", "mysql")
	send(1, 20, "u", "paid")
	send(2, 21, "d", "")
	send(3, 22, "c", "new")
	bad := waitNext(t, dir, next)
	stop()
	if got := opstest.Rows(t, dir); !opstest.Same(got, []string{"1 new false", "2 new false"}) || bad.Version <= good.Version {
		t.Fatalf("after the bad run (version %d): %v", bad.Version, got)
	}

	res, err := delta.Restore(context.Background(), delta.Open(storage.NewLocal(dir)), delta.RestoreTarget{Version: good.Version},
		delta.RestoreOptions{LogStarts: map[string]int64{checkpoint.AppID("shop", checkpoint.TopicPartition{Topic: "orders"}): 0}, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if res.Txns[checkpoint.AppID("shop", checkpoint.TopicPartition{Topic: "orders"})] != 2 {
		t.Fatalf("restore rewound %v, want orders/0 to 2", res.Txns)
	}

	stop = runEngine(t, brokers, dir, "g1", "postgresql")
	defer stop()
	waitNext(t, dir, next)
	want := []string{"1 paid false", "2 new true", "3 new false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("after restore and replay: %v, want %v", got, want)
	}
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs after restore and replay: %v, want %v", got, want)
	}
}

// TestOptimizeAlongsideEngine compacts the table again and again while the
// engine applies inserts and updates, in both write modes: the engine
// never halts, every compaction either commits or gives up after
// conflicts, the engine's key index follows each by catching up (never a
// rebuild), and the table ends equal to the oracle (read by delta-rs too).
func TestOptimizeAlongsideEngine(t *testing.T) {
	for _, mode := range []apply.MergeMode{apply.CopyOnWrite, apply.MergeOnRead} {
		t.Run(string(mode), func(t *testing.T) { optimizeAlongsideEngine(t, mode) })
	}
}

func optimizeAlongsideEngine(t *testing.T, mode apply.MergeMode) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dir := t.TempDir() + "/orders"
	var log lockedLog
	reg := prometheus.NewRegistry()
	stop := runEngineLogging(t, c.ListenAddrs(), dir, "g", "postgresql", string(mode), &log, reg)
	defer stop()
	oracle := map[int]string{}
	next, lsn := int64(0), int64(0)
	send := func(id int, status string) {
		lsn++
		k, v := pgChange(id, lsn, "u", status)
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Key: k, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		next++
		oracle[id] = status
	}
	send(0, "first")
	waitNext(t, dir, next)
	tbl := delta.Open(storage.NewLocal(dir))
	committed, retried, gaveUp := 0, 0, 0
	for round := 1; round <= 8; round++ {
		for i := 0; i < 4; i++ {
			send(round*10+i, "new") // new keys: a new small file
		}
		waitNext(t, dir, next)
		// Not waited for: the engine applies it while compaction runs,
		// rewriting a file the compaction may be compacting.
		send(round*10-10, fmt.Sprintf("updated-%d", round))
		send(round*100, "new")
		res, err := maintenance.Optimize(context.Background(), tbl, maintenance.OptimizeOptions{Logger: discard})
		switch {
		case err == nil && res.Version >= 0:
			committed++
			retried += res.Attempts - 1
		case err != nil && errors.Is(err, delta.ErrConflict):
			gaveUp++
		case err != nil:
			t.Fatalf("round %d: optimize: %v", round, err)
		}
	}
	waitNext(t, dir, next)
	logged := log.String()
	t.Logf("compactions: %d committed (%d retries after conflicts), %d gave up; the engine caught its key index up %d times",
		committed, retried, gaveUp, strings.Count(logged, "key index caught up"))
	if committed == 0 {
		t.Fatal("no compaction committed while the stream ran")
	}
	if strings.Contains(logged, "key index built again") {
		t.Fatalf("a compaction made the engine rebuild its key index instead of catching up:\n%s", logged)
	}
	refreshes := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "cdcapply_key_index_refreshes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "how" {
					refreshes[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if caught := strings.Count(logged, "key index caught up"); refreshes["caught_up"] != float64(caught) || refreshes["rebuilt"] != 0 {
		t.Fatalf("cdcapply_key_index_refreshes_total %v; the log says %d catch-ups and no rebuild", refreshes, caught)
	}
	var want []string
	for id, s := range oracle {
		want = append(want, fmt.Sprintf("%d %s false", id, s))
	}
	sort.Strings(want)
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("after %d compactions alongside the stream: %v, want %v", committed, got, want)
	}
	read := opstest.DeltaRSRows
	if mode == apply.MergeOnRead {
		read = opstest.DeltaRSRowsDV
	}
	if got := read(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs: %v, want %v", got, want)
	}
}

// TestPurgeRacingReviveThroughEngine revives key 2 through the running
// engine exactly between the purge's read and its commit: the purge
// conflicts, retries, and purges only key 3; the engine goes on, and the
// table equals the oracle.
func TestPurgeRacingReviveThroughEngine(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dir := t.TempDir() + "/orders"
	stop := runEngine(t, c.ListenAddrs(), dir, "g", "postgresql")
	defer stop()
	next := int64(0)
	send := func(id int, lsn int64, op, status string) {
		k, v := pgChange(id, lsn, op, status)
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Key: k, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		next++
	}
	send(1, 10, "c", "a")
	send(2, 11, "c", "b")
	send(3, 12, "c", "c")
	send(2, 20, "d", "")
	send(3, 21, "d", "")
	waitNext(t, dir, next)

	tbl := delta.Open(storage.NewLocal(dir))
	// The tombstones carry today's source time: purge as if eight days
	// had passed, past the week's lateness.
	later := time.Now().Add(8 * 24 * time.Hour)
	res, err := tombstone.Purge(context.Background(), tbl, tombstone.PurgeOptions{MaxLateness: 7 * 24 * time.Hour, Logger: discard,
		Now: func() time.Time { return later },
		BeforeCommit: func(ctx context.Context, attempt int) error {
			if attempt == 1 {
				send(2, 30, "u", "revived")
				waitNext(t, dir, next)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.Rows != 1 || strings.Join(res.Keys, " ") != "id=3" {
		t.Fatalf("purge: attempts %d rows %d keys %v, want 2, 1, [id=3]", res.Attempts, res.Rows, res.Keys)
	}
	// The engine goes on after the purge (it re-reads the table the purge
	// changed). Key 4 is new to the table and its source time (today) is
	// older than the horizon this purge recorded (it ran "eight days from
	// now"), so the engine cannot tell it from a purged key's late change:
	// it is quarantined (late_beyond_purge_horizon), not inserted.
	send(1, 40, "u", "a2")
	send(4, 41, "c", "d")
	waitNext(t, dir, next)
	want := []string{"1 a2 false", "2 revived false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("table %v, want %v", got, want)
	}
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs: %v, want %v", got, want)
	}
}
