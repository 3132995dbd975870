package apply

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
)

// heartbeat is a Debezium heartbeat value (JsonConverter with schemas).
func heartbeat(tsMs int64) []byte {
	return []byte(fmt.Sprintf(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.Heartbeat"},"payload":{"ts_ms":%d}}`, tsMs))
}

// TestEngineMetricsScenario runs a scripted stream through the engine on
// kfake and checks the exposed series exactly: record outcomes (applied,
// stale, skipped, quarantined by reason), rows by kind, a schema change,
// freshness kept by heartbeats through an idle period, lag on a table
// whose batch is held back, and a halted table.
func TestEngineMetricsScenario(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "audit", "items"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	orders := &producer{t: t, cl: pcl, topic: "orders", nparts: 1, ends: map[int32]int64{}}
	audit := &producer{t: t, cl: pcl, topic: "audit", nparts: 1, ends: map[int32]int64{}}
	items := &producer{t: t, cl: pcl, topic: "items", nparts: 1, ends: map[int32]int64{}}

	dir := t.TempDir()
	// audit never reaches a flush limit while the test looks: its records
	// stay fetched but unapplied, which is lag. items is strict about
	// schema, so a new column halts it.
	cfg, err := ParseConfig("test.yaml", []byte(fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: metrics-test}
defaults: {flush: {max_latency: 50ms}}
tables:
  - {name: orders, topic: orders, location: %[2]s/orders}
  - {name: audit, topic: audit, location: %[2]s/audit, flush: {max_latency: 1h}}
  - {name: items, topic: items, location: %[2]s/items, schema_policy: strict}
`, strings.Join(c.ListenAddrs(), ", "), dir)))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// Freshness is now minus a source time: pin now so it is exact.
	const base = int64(1_700_000_000_000) // dbzOrders' source ts_ms is base+lsn
	m.now = func() time.Time { return time.UnixMilli(base + 61_000) }
	e, err := NewEngine(cfg, Logger(quietLogger()), WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler(reg, false))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run = %d %q, want 503", code, body)
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
	// Each step waits for the table, so outcomes do not depend on how
	// the records fall into batches.
	orders.change(1, 10, "c", "a") // insert
	orders.change(2, 10, "c", "b") // insert
	orders.change(3, 11, "c", "c") // insert
	waitRecorded(t, m, table, "orders", orders.ends)
	orders.change(1, 20, "u", "a2") // update
	orders.change(2, 25, "d", "")   // delete
	waitRecorded(t, m, table, "orders", orders.ends)
	if live, tomb := testutil.ToFloat64(m.tableRows.WithLabelValues("orders", "live")), testutil.ToFloat64(m.tableRows.WithLabelValues("orders", "tombstone")); live != 2 || tomb != 1 {
		t.Errorf("orders rows after the delete: %v live, %v tombstones; want 2 and 1", live, tomb)
	}
	orders.change(1, 12, "u", "old") // stale
	orders.change(3, 5, "u", "old")  // stale
	k, v := dbzOrders(9, 40, "c", "x")
	orders.send(k, []byte(`{"schema":`), 0)                                          // quarantined: malformed_json
	orders.send(k, []byte(strings.Replace(string(v), `"op":"c"`, `"op":"x"`, 1)), 0) // quarantined: unknown_op
	orders.send(nil, nil, 0)                                                         // skipped: Kafka tombstone
	waitRecorded(t, m, table, "orders", orders.ends)
	orders.change(2, 30, "c", "back") // revive
	note := "gift"
	k, v = dbzOrdersNote(4, 31, "c", "n", &note) // insert, and a new column (additive)
	orders.send(k, v, 0)
	waitRecorded(t, m, table, "orders", orders.ends)
	if got := testutil.ToFloat64(m.sourceTime.WithLabelValues("orders")); got != float64(base+31)/1000 {
		t.Errorf("source time before heartbeats = %v, want the newest change's %v", got, float64(base+31)/1000)
	}
	// Idle: the source sends only heartbeats. The table has no lag, so
	// each heartbeat moves its freshness.
	orders.send(nil, heartbeat(base+500), 0)
	waitRecorded(t, m, table, "orders", orders.ends)
	orders.send(nil, heartbeat(base+1_000), 0)
	snap := waitRecorded(t, m, table, "orders", orders.ends)

	// items: created, then a new column under the strict policy halts it.
	items.change(1, 10, "c", "a")
	waitRecorded(t, m, dir+"/items", "items", items.ends)
	k, v = dbzOrdersNote(2, 11, "c", "b", &note)
	items.send(k, v, 0)
	// (Engine.Halted is for after Run; the gauge is safe to read now.)
	waitFor(t, "items halted", func() bool { return testutil.ToFloat64(m.halted.WithLabelValues("items", "schema")) == 1 })

	// audit: four records fetched and held in the buffer.
	for i := 1; i <= 4; i++ {
		audit.change(i, int64(i), "c", "x")
	}
	waitFor(t, "audit lag 4", func() bool {
		return testutil.ToFloat64(m.lag.WithLabelValues("audit", "audit", "0")) == 4
	})

	want := `
# HELP cdcapply_records_total Kafka records accounted for by committed batches, by outcome (applied, stale, skipped, quarantined); reason is set for quarantined records only.
# TYPE cdcapply_records_total counter
cdcapply_records_total{outcome="applied",reason="",table="items"} 1
cdcapply_records_total{outcome="applied",reason="",table="orders"} 7
cdcapply_records_total{outcome="quarantined",reason="malformed_json",table="orders"} 1
cdcapply_records_total{outcome="quarantined",reason="unknown_op",table="orders"} 1
cdcapply_records_total{outcome="skipped",reason="",table="items"} 0
cdcapply_records_total{outcome="skipped",reason="",table="orders"} 3
cdcapply_records_total{outcome="stale",reason="",table="items"} 0
cdcapply_records_total{outcome="stale",reason="",table="orders"} 2
# HELP cdcapply_rows_written_total Rows written to the table by committed batches, by kind (insert, update, delete, revive).
# TYPE cdcapply_rows_written_total counter
cdcapply_rows_written_total{kind="delete",table="items"} 0
cdcapply_rows_written_total{kind="delete",table="orders"} 1
cdcapply_rows_written_total{kind="insert",table="items"} 1
cdcapply_rows_written_total{kind="insert",table="orders"} 4
cdcapply_rows_written_total{kind="revive",table="items"} 0
cdcapply_rows_written_total{kind="revive",table="orders"} 1
cdcapply_rows_written_total{kind="update",table="items"} 0
cdcapply_rows_written_total{kind="update",table="orders"} 1
# HELP cdcapply_schema_changes_total Committed additive schema changes (new source columns joining the table).
# TYPE cdcapply_schema_changes_total counter
cdcapply_schema_changes_total{table="orders"} 1
# HELP cdcapply_partition_lag_records High watermark of the partition minus the table's applied position. The watermark comes from the latest fetch, and while the engine waits for a commit (fetching nothing) from the brokers' end offsets every 10 s.
# TYPE cdcapply_partition_lag_records gauge
cdcapply_partition_lag_records{partition="0",table="audit",topic="audit"} 4
cdcapply_partition_lag_records{partition="0",table="items",topic="items"} 1
cdcapply_partition_lag_records{partition="0",table="orders",topic="orders"} 0
# HELP cdcapply_table_source_time_seconds Source commit time (Unix seconds) up to which the table is complete: the newest committed change, or a heartbeat read while the table had no lag.
# TYPE cdcapply_table_source_time_seconds gauge
cdcapply_table_source_time_seconds{table="items"} 1.70000000001e+09
cdcapply_table_source_time_seconds{table="orders"} 1.700000001e+09
# HELP cdcapply_table_freshness_seconds Now minus cdcapply_table_source_time_seconds: how far the table is behind its source.
# TYPE cdcapply_table_freshness_seconds gauge
cdcapply_table_freshness_seconds{table="items"} 60.99
cdcapply_table_freshness_seconds{table="orders"} 60
# HELP cdcapply_table_running 1 while the table is being applied, 0 once it halted.
# TYPE cdcapply_table_running gauge
cdcapply_table_running{table="audit"} 1
cdcapply_table_running{table="items"} 0
cdcapply_table_running{table="orders"} 1
# HELP cdcapply_table_halted 1 when the table halted, with the class of the reason (schema, truncate, offset_gap, topic_recreated, open).
# TYPE cdcapply_table_halted gauge
cdcapply_table_halted{reason="schema",table="items"} 1
# HELP cdcapply_table_rows Rows the table holds by state: live, or tombstone (soft-deleted, kept until a purge); from the engine's key index after each commit and at start.
# TYPE cdcapply_table_rows gauge
cdcapply_table_rows{state="live",table="items"} 1
cdcapply_table_rows{state="live",table="orders"} 4
cdcapply_table_rows{state="tombstone",table="items"} 0
cdcapply_table_rows{state="tombstone",table="orders"} 0
`
	names := []string{"cdcapply_records_total", "cdcapply_rows_written_total", "cdcapply_schema_changes_total",
		"cdcapply_partition_lag_records", "cdcapply_table_source_time_seconds", "cdcapply_table_freshness_seconds",
		"cdcapply_table_running", "cdcapply_table_halted", "cdcapply_commits_fenced_total", "cdcapply_commits_failed_total", "cdcapply_table_rows"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// Batching is up to the poll loop, so the number of commits is read
	// from the table: every version of orders is one of our batches, and
	// each batch is observed once per stage.
	if got := testutil.ToFloat64(m.version.WithLabelValues("orders")); got != float64(snap.Version) {
		t.Errorf("orders version metric = %v, table is at %d", got, snap.Version)
	}
	// The log's files after the last commit, as the table's own log says.
	live, removed := testutil.ToFloat64(m.logFiles.WithLabelValues("orders", "live")), testutil.ToFloat64(m.logFiles.WithLabelValues("orders", "removed"))
	if live != float64(snap.NumFiles()) || removed != float64(snap.NumTombstones()) || removed == 0 {
		t.Errorf("orders log files metric: %v live, %v removed; the log has %d and %d (an update rewrote a file, so some are removed)",
			live, removed, snap.NumFiles(), snap.NumTombstones())
	}
	batches := uint64(snap.Version + 1)
	read := 0
	for _, end := range orders.ends {
		read += int(end)
	}
	h := histogram(t, reg, "cdcapply_batch_records", map[string]string{"table": "orders"})
	if h.GetSampleCount() != batches || h.GetSampleSum() != float64(read) {
		t.Errorf("orders batch_records: %d batches summing %v records, want %d batches summing %d", h.GetSampleCount(), h.GetSampleSum(), batches, read)
	}
	for _, stage := range []string{stageDecode, stageRefresh, stageQuarantine, stagePlan, stageCommit} {
		h := histogram(t, reg, "cdcapply_stage_duration_seconds", map[string]string{"table": "orders", "stage": stage})
		if h.GetSampleCount() != batches {
			t.Errorf("stage %s observed %d times, want once per batch (%d)", stage, h.GetSampleCount(), batches)
		}
		if stage == stageCommit && h.GetSampleSum() <= 0 {
			t.Errorf("commit stage took no time in %d batches", batches)
		}
	}

	// The same values over HTTP, with franz-go's client metrics beside them.
	code, body := get(t, srv.URL+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `cdcapply_records_total{outcome="stale",reason="",table="orders"} 2`) ||
		!strings.Contains(body, "cdcapply_kafka_") {
		t.Errorf("/metrics = %d, lacks the engine's or kprom's series:\n%.2000s", code, body)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after assignment = %d %q", code, body)
	}
}

// waitRecorded waits until the table's positions reach ends and the
// metrics have recorded the commit that moved them (the commit lands in
// the log before the engine records it).
func waitRecorded(t *testing.T, m *Metrics, dir, topic string, ends map[int32]int64) *delta.Snapshot {
	t.Helper()
	snap := waitPositions(t, dir, "shop", topic, ends)
	waitFor(t, "metrics of "+topic, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for p, end := range ends {
			if m.pos[checkpoint.TopicPartition{Topic: topic, Partition: p}] < end {
				return false
			}
		}
		return true
	})
	return snap
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// histogram finds one histogram series by its labels.
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	s := findSeries(t, g, name, labels)
	if s == nil {
		t.Fatalf("no %s series with %v", name, labels)
	}
	return s.GetHistogram()
}

// findSeries returns the first series of the metric family name whose
// labels include labels, or nil.
func findSeries(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range s.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return s
		}
	}
	return nil
}

// TestHeartbeatFreshnessNeedsNoLag: a heartbeat moves a table's freshness
// only when none of its partitions is behind; changes always do.
func TestHeartbeatFreshnessNeedsNoLag(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p0 := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	p1 := checkpoint.TopicPartition{Topic: "orders", Partition: 1}
	m.positioned("orders", p0, 0)
	m.positioned("orders", p1, 0)
	// The fetch shows partition 1 at watermark 5 and partition 0 at 3.
	m.fetched(kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "orders", Partitions: []kgo.FetchPartition{
		{Partition: 0, HighWatermark: 3}, {Partition: 1, HighWatermark: 5}}}}}})
	commit := func(next int64, tp checkpoint.TopicPartition, newestMicro, heartbeatMs int64) {
		m.committed(batchDone{table: "orders", batch: &Batch{Read: int(next), Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: 0, Next: next}}},
			res: &Result{Version: 1}, newestMicro: newestMicro, heartbeatMs: heartbeatMs})
	}
	src := func() float64 { return testutil.ToFloat64(m.sourceTime.WithLabelValues("orders")) }
	// Partition 0 applied to its end with a change at 10 s and a heartbeat
	// at 20 s, but partition 1 is 5 behind: the heartbeat proves nothing.
	commit(3, p0, 10_000_000, 20_000)
	if got := src(); got != 10 {
		t.Errorf("source time with partition 1 behind = %v, want the change's 10", got)
	}
	if got := testutil.ToFloat64(m.lag.WithLabelValues("orders", "orders", "1")); got != 5 {
		t.Errorf("lag of partition 1 = %v, want 5", got)
	}
	// Partition 1 catches up in a batch that holds a heartbeat at 30 s.
	commit(5, p1, 0, 30_000)
	if got := src(); got != 30 {
		t.Errorf("source time once caught up = %v, want the heartbeat's 30", got)
	}
	// An older change never moves freshness back.
	commit(5, p1, 1_000_000, 0)
	if got := src(); got != 30 {
		t.Errorf("source time after an older change = %v, want 30", got)
	}
}

// TestFencedBatchMetrics: another writer applies the engine's pending
// batch first (a zombie's view); the engine's commit is fenced, counted in
// cdcapply_commits_fenced_total, and its records are not counted as
// applied by this instance (the other writer committed them).
func TestFencedBatchMetrics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	p := &producer{t: t, cl: pcl, topic: "orders", nparts: 1, ends: map[int32]int64{}}
	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := NewEngine(cfg, Logger(quietLogger()), WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	// other is a second writer of the same table, never started.
	other, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var steal atomic.Bool
	// beforeApply runs on Run's goroutine, which owns the buffers.
	e.beforeApply = func(string) {
		if !steal.Swap(false) {
			return
		}
		tr, o := e.tables[0], other.tables[0].applier
		if err := o.Open(ctx); err != nil {
			t.Error(err)
			return
		}
		b := &Batch{Changes: tr.buf.changes, Ranges: map[checkpoint.TopicPartition]checkpoint.Range{}}
		for tp, pb := range tr.buf.parts {
			b.Ranges[tp] = pb.rng
			b.Read += pb.read
		}
		if _, err := o.Apply(ctx, b); err != nil {
			t.Error(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	table := dir + "/orders"
	p.change(1, 10, "c", "a")
	waitRecorded(t, m, table, "orders", p.ends)
	steal.Store(true)
	// Both records in one produce: one Kafka batch, so one poll and one
	// engine batch, whatever the timing.
	k2, v2 := dbzOrders(2, 11, "c", "b")
	k3, v3 := dbzOrders(3, 12, "c", "c")
	if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: k2, Value: v2}, &kgo.Record{Topic: "orders", Key: k3, Value: v3}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.ends[0] += 2
	waitPositions(t, table, "shop", "orders", p.ends)
	waitFor(t, "fenced", func() bool { return testutil.ToFloat64(m.fenced.WithLabelValues("orders")) == 1 })
	want := `
# HELP cdcapply_commits_fenced_total Batches dropped because another writer advanced one of their partitions (commit conflicts).
# TYPE cdcapply_commits_fenced_total counter
cdcapply_commits_fenced_total{table="orders"} 1
# HELP cdcapply_records_total Kafka records accounted for by committed batches, by outcome (applied, stale, skipped, quarantined); reason is set for quarantined records only.
# TYPE cdcapply_records_total counter
cdcapply_records_total{outcome="applied",reason="",table="orders"} 1
cdcapply_records_total{outcome="skipped",reason="",table="orders"} 0
cdcapply_records_total{outcome="stale",reason="",table="orders"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cdcapply_commits_fenced_total", "cdcapply_records_total", "cdcapply_commits_failed_total"); err != nil {
		t.Error(err)
	}
}
