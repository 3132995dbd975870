package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// The tests here reproduce rows of the README's failure-mode table
// (Operations) on a running engine and check the series each row says an
// SRE sees: storage errors, an unreachable Kafka, a stuck commit.

// logCommit matches a commit's log entry: _delta_log/<20 digits>.json.
var logCommit = regexp.MustCompile(`_delta_log/(\d{20})\.json$`)

// TestStorageErrorsAreCountedAndRetried: the table's storage refuses two
// log commits and one data file (a full or read-only volume). Each failed
// batch is counted in cdcapply_commits_failed_total (what
// CdcapplyCommitFailures pages on), logged with the table and the file it
// could not write, and read again from the table's positions: the table
// converges to the oracle with nothing lost or doubled, and only
// successful commits count rows.
func TestStorageErrorsAreCountedAndRetried(t *testing.T) {
	c, p := kfakeOrders(t)
	o := ordersOracle{}
	for i := 0; i < 120; i++ {
		id, op, status := i%13, "u", fmt.Sprintf("s%d", i)
		if i%11 == 5 {
			op = "d"
		}
		p.change(id, int64(100+i), op, status)
		o.apply(id, op, status)
	}
	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Tables[0].Flush.MaxRecords = 10
	cfg.Tables[0].Flush.MaxLatency = Duration(time.Hour)

	var mu sync.Mutex
	var refused []string
	wrap := func(inner storage.Storage) storage.Storage {
		f := storage.NewFaulty(inner)
		f.SetRule(func(op storage.Op) storage.Fault {
			if op.Kind != storage.OpWriteIfAbsent && op.Kind != storage.OpWrite {
				return storage.Pass
			}
			mu.Lock()
			defer mu.Unlock()
			m := logCommit.FindStringSubmatch(op.Path)
			switch {
			case m != nil && m[1] != strings.Repeat("0", 20) && len(refused) < 2:
				// The log commit of a batch (not the table's creation).
			case m == nil && strings.HasSuffix(op.Path, ".parquet") && !strings.Contains(op.Path, "_delta_log") && len(refused) == 2:
				// A data file of a later batch.
			default:
				return storage.Pass
			}
			refused = append(refused, op.Path)
			return storage.Fail
		})
		return f
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var log syncBuffer
	_, stop := startEngineWith(t, cfg, func(e *Engine) { e.wrapStore = wrap }, WithMetrics(m),
		Logger(slog.New(slog.NewTextHandler(&log, nil))))
	waitRecorded(t, m, dir+"/orders", "orders", p.ends)
	stop()

	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 3 {
		t.Fatalf("%d writes refused (%v), want 3: the test did not exercise the failures it names", len(refused), refused)
	}
	sameAsOracle(t, dir+"/orders", o, "after the storage errors")
	if got := testutil.ToFloat64(m.commitFailed.WithLabelValues("orders")); got != 3 {
		t.Errorf("cdcapply_commits_failed_total = %v, want 3 (one per refused write)", got)
	}
	if got := testutil.ToFloat64(m.fenced.WithLabelValues("orders")); got != 0 {
		t.Errorf("cdcapply_commits_fenced_total = %v, want 0: a storage error is not a fence", got)
	}
	// Rows count committed batches only: 120 changes of 13 keys, each
	// written once however often its batch was tried.
	var rows float64
	for _, kind := range []string{"insert", "update", "delete", "revive"} {
		rows += testutil.ToFloat64(m.rows.WithLabelValues("orders", kind))
	}
	applied := testutil.ToFloat64(m.records.WithLabelValues("orders", "applied", ""))
	if applied != 120 {
		t.Errorf("cdcapply_records_total{outcome=applied} = %v, want 120: a retried batch was counted twice or not at all", applied)
	}
	if rows < 13 || rows > 120 {
		t.Errorf("cdcapply_rows_written_total = %v, want between 13 and 120", rows)
	}
	lines := strings.Split(log.String(), "\n")
	for _, path := range refused {
		found := false
		for _, l := range lines {
			if strings.Contains(l, "table commit failed") && strings.Contains(l, "table=orders") && strings.Contains(l, path) {
				found = true
			}
		}
		if !found {
			t.Errorf("no \"table commit failed\" line names table orders and %s:\n%s", path, log.String())
		}
	}
}

// TestKafkaUnreachableIsVisible: the broker goes away under a running
// engine. The Kafka client's failed connections are counted while it
// reads no bytes (what CdcapplyKafkaUnreachable pages on), freshness
// grows, the lag series keeps its last value, and the engine keeps
// running, ready to go on when a broker answers.
func TestKafkaUnreachableIsVisible(t *testing.T) {
	c, p := kfakeOrders(t)
	p.change(1, 10, "c", "a")
	p.change(2, 11, "c", "b")
	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, stop := startEngineWith(t, cfg, WithMetrics(m))
	defer stop()
	waitRecorded(t, m, dir+"/orders", "orders", p.ends)
	if got := gatherSum(t, reg, "cdcapply_kafka_read_bytes_total"); got <= 0 {
		t.Fatalf("cdcapply_kafka_read_bytes_total = %v after reading records", got)
	}
	errs0 := gatherSum(t, reg, "cdcapply_kafka_connect_errors_total")

	c.Close()
	waitFor(t, "failed connections after the broker went away", func() bool {
		return gatherSum(t, reg, "cdcapply_kafka_connect_errors_total") > errs0
	})
	// A window as the alert's rate() sees it: connections keep failing
	// and nothing is read.
	errs1, read1 := gatherSum(t, reg, "cdcapply_kafka_connect_errors_total"), gatherSum(t, reg, "cdcapply_kafka_read_bytes_total")
	fresh1, ok1 := gaugeValue(t, reg, "cdcapply_table_freshness_seconds", map[string]string{"table": "orders"})
	waitFor(t, "more failed connections", func() bool {
		return gatherSum(t, reg, "cdcapply_kafka_connect_errors_total") > errs1
	})
	time.Sleep(1100 * time.Millisecond)
	if read2 := gatherSum(t, reg, "cdcapply_kafka_read_bytes_total"); read2 != read1 {
		t.Errorf("cdcapply_kafka_read_bytes_total rose from %v to %v with no broker", read1, read2)
	}
	fresh2, ok2 := gaugeValue(t, reg, "cdcapply_table_freshness_seconds", map[string]string{"table": "orders"})
	if !ok1 || !ok2 || fresh2-fresh1 < 1 {
		t.Errorf("freshness %v (%v) then %v (%v) over more than a second: it should grow while no record arrives", fresh1, ok1, fresh2, ok2)
	}
	// The group's heartbeats fail too, so the client gives the
	// partitions up as lost: this instance no longer reports their lag
	// (a new owner would).
	lost := time.Now()
	waitFor(t, "the lag series to go with the lost partitions", func() bool {
		_, ok := gaugeValue(t, reg, "cdcapply_partition_lag_records", map[string]string{"table": "orders"})
		return !ok
	})
	t.Logf("lag series gone %v after the window", time.Since(lost).Round(time.Millisecond))
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("tables halted by an unreachable broker: %v", h)
	}
}

// TestStuckCommitIsVisible: the table's storage stops answering in the
// middle of a log commit (a hung volume). While it hangs, the commit
// stage shows in cdcapply_stage_in_progress_seconds, growing, no row is
// written, and the lag follows the source (CdcapplyLagGrowing), also
// past the backlog bound, where the loop fetches nothing: the wait asks
// the brokers for end offsets. When the storage answers again the batch
// commits, the series goes, the stage's histogram observes the whole
// wait, and the table converges to the oracle.
func TestStuckCommitIsVisible(t *testing.T) {
	c, p := kfakeOrders(t)
	stuckCommit(t, c.ListenAddrs(), p, "cdcapply-test")
}

// TestRealKafkaStuckCommitIsVisible is TestStuckCommitIsVisible against a
// real Apache Kafka broker, whose end offsets the wait lists.
func TestRealKafkaStuckCommitIsVisible(t *testing.T) {
	brokers := realBrokers(t)
	topic := realTopic(t, brokers, 1)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	stuckCommit(t, brokers, &producer{t: t, cl: pcl, topic: topic, nparts: 1, ends: map[int32]int64{}}, topic+"-group")
}

// stuckCommit runs the stuck-commit case on the brokers, p producing to
// a topic of one partition that the table reads in group.
func stuckCommit(t *testing.T, brokers []string, p *producer, group string) {
	topic := p.topic
	dir := t.TempDir()
	cfg := testConfigFor(t, brokers, dir, topic, group)
	cfg.Tables[0].Flush.MaxRecords = 5
	h := newHangingStore()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	_, stop := startEngineWith(t, cfg, func(e *Engine) { e.wrapStore, e.watermarkEvery = h.wrap, 100*time.Millisecond }, WithMetrics(m))
	defer func() {
		h.free() // the engine's shutdown waits for the commit
		stop()
	}()
	table := dir + "/orders"
	o := ordersOracle{}
	p.change(1, 10, "c", "a")
	o.apply(1, "c", "a")
	waitRecorded(t, m, table, topic, p.ends)
	if _, ok := gaugeValue(t, reg, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders", "stage": stageCommit}); ok {
		t.Errorf("a commit stage in progress with no batch in flight")
	}
	rows0 := gatherSum(t, reg, "cdcapply_rows_written_total")

	h.arm()
	for i := 0; i < 30; i++ {
		id, status := 2+i%7, fmt.Sprintf("s%d", i)
		p.change(id, int64(20+i), "u", status)
		o.apply(id, "u", status)
	}
	h.waitHung(t, reg, stageCommit, time.Second)
	if got := gatherSum(t, reg, "cdcapply_rows_written_total"); got != rows0 {
		t.Errorf("rows written rose from %v to %v while the commit hung", rows0, got)
	}
	lag, ok := gaugeValue(t, reg, "cdcapply_partition_lag_records", map[string]string{"table": "orders", "topic": topic, "partition": "0"})
	if !ok || lag < 5 {
		t.Errorf("lag = %v (%v) while the commit hangs: want at least the batch in flight's 5 records", lag, ok)
	}

	// More records while it hangs, past the backlog bound (twice
	// max_records): the lag must count every record after the table's
	// position, the end offset less the one record committed.
	for i := 0; i < 40; i++ {
		id, status := 2+i%7, fmt.Sprintf("t%d", i)
		p.change(id, int64(60+i), "u", status)
		o.apply(id, "u", status)
	}
	want := float64(p.ends[0] - 1)
	waitFor(t, fmt.Sprintf("the lag to reach %v while the commit hangs", want), func() bool {
		v, _ := gaugeValue(t, reg, "cdcapply_partition_lag_records", map[string]string{"table": "orders", "topic": topic, "partition": "0"})
		return v == want
	})

	h.free()
	waitRecorded(t, m, table, topic, p.ends)
	waitFor(t, "the stage series to go", func() bool {
		_, ok := gaugeValue(t, reg, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders"})
		return !ok
	})
	hist := histogram(t, reg, "cdcapply_stage_duration_seconds", map[string]string{"table": "orders", "stage": stageCommit})
	if sum := hist.GetSampleSum(); sum < 1 {
		t.Errorf("the commit stage's observations sum to %v s, less than the second it hung", sum)
	}
	sameAsOracle(t, table, o, "after the stuck commit")
}

// TestOpenStageIsVisible: on a restart the table's storage stops
// answering while the engine lists the table's log (a hung mount). The
// open stage shows in cdcapply_stage_in_progress_seconds, growing, until
// the storage answers; then the series goes and the engine applies what
// came meanwhile.
func TestOpenStageIsVisible(t *testing.T) {
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	table := dir + "/orders"
	_, stop := startEngineWith(t, cfg)
	p.change(1, 10, "c", "a")
	waitPositions(t, table, "shop", "orders", p.ends)
	stop()

	h := newHangingStore()
	h.hangOn = func(op storage.OpKind, path string) bool {
		return op == storage.OpList && strings.Contains(path, "_delta_log")
	}
	h.arm()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	_, cancel, done := runEngine(t, cfg, WithMetrics(m), func(e *Engine) { e.wrapStore = h.wrap })
	defer func() {
		h.free()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	h.waitHung(t, reg, stageOpen, 500*time.Millisecond)
	h.free()
	p.change(2, 11, "c", "b")
	waitRecorded(t, m, table, "orders", p.ends)
	waitFor(t, "the stage series to go", func() bool {
		_, ok := gaugeValue(t, reg, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders"})
		return !ok
	})
	if got, want := readOrders(t, table), []string{"1 a false", "2 b false"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table after the hung open: got %v, want %v", got, want)
	}
}

// TestStuckCheckpointIsVisible: the table's storage stops answering
// while a log checkpoint is written (it runs beside the batches). The
// checkpoint shows in cdcapply_stage_in_progress_seconds, growing, while
// batches go on committing beside it and the table follows the source;
// when the storage answers, the checkpoint lands, its series goes and its
// histogram observes the whole wait.
func TestStuckCheckpointIsVisible(t *testing.T) {
	p, dir, cfg, h := checkpointHangs(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	_, stop := startEngineWith(t, cfg, func(e *Engine) { e.wrapStore = h.wrap }, WithMetrics(m))
	defer func() {
		h.free() // the engine's shutdown waits for the checkpoint
		stop()
	}()
	table := dir + "/orders"
	o := ordersOracle{}
	updates(p, o, 0, 20)
	h.waitHung(t, reg, stageCheckpoint, time.Second)

	// Batches still land beside the hung checkpoint, and so does what
	// comes after it: the table is current while its checkpoint hangs.
	updates(p, o, 20, 40)
	snap := waitRecorded(t, m, table, "orders", p.ends)
	if snap.CheckpointVersion() >= 0 {
		t.Errorf("the table has checkpoint version %d while its only checkpoint write hangs", snap.CheckpointVersion())
	}
	sameAsOracle(t, table, o, "while its checkpoint hangs")
	if v, ok := gaugeValue(t, reg, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders", "stage": stageCheckpoint}); !ok || v < 1 {
		t.Errorf("checkpoint in progress %v s (%v) after the batches beside it landed: want it still shown, past a second", v, ok)
	}

	h.free()
	waitFor(t, "the checkpoint's series to go", func() bool {
		_, ok := gaugeValue(t, reg, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders", "stage": stageCheckpoint})
		return !ok
	})
	hist := histogram(t, reg, "cdcapply_stage_duration_seconds", map[string]string{"table": "orders", "stage": stageCheckpoint})
	if sum := hist.GetSampleSum(); sum < 1 {
		t.Errorf("the checkpoint stage's observations sum to %v s, less than the second it hung", sum)
	}
	if got := gatherSum(t, reg, "cdcapply_checkpoint_failures_total"); got != 0 {
		t.Errorf("%v checkpoint failures: the hung checkpoint landed once released", got)
	}
}

// TestShutdownLeavesAHungCheckpoint: the engine is stopped while a log
// checkpoint hangs on its storage. The shutdown waits for it no longer
// than its bound, logs the checkpoint it left with the table and
// version, and returns; the commits stand (the table equals the oracle
// with no checkpoint), and a new engine on the same table goes on from
// them. Before the bound, the shutdown waited as long as the storage
// hung.
func TestShutdownLeavesAHungCheckpoint(t *testing.T) {
	p, dir, cfg, h := checkpointHangs(t)
	var log syncBuffer
	_, cancel, done := runEngine(t, cfg, Logger(slog.New(slog.NewTextHandler(&log, nil))), func(e *Engine) {
		e.wrapStore, e.checkpointWait = h.wrap, 200*time.Millisecond
	})
	defer cancel()
	table := dir + "/orders"
	o := ordersOracle{}
	updates(p, o, 0, 20)
	select {
	case path := <-h.entered:
		t.Logf("storage hangs on %s", path)
	case <-time.After(30 * time.Second):
		t.Fatal("no checkpoint write reached the storage")
	}
	waitPositions(t, table, "shop", "orders", p.ends)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		h.free()
		t.Fatal("the engine did not stop while its log checkpoint hung")
	}
	if !strings.Contains(log.String(), "log checkpoint still being written at shutdown") ||
		!strings.Contains(log.String(), "table=orders") || !strings.Contains(log.String(), "version=2 ") {
		t.Errorf("no warning naming the table and the checkpoint's version left at shutdown:\n%s", log.String())
	}
	// The abandoned checkpoint fails when the storage answers, as it
	// would be lost with the process, and writes nothing.
	h.releaseErr = errors.New("the process is gone")
	h.free()
	waitFor(t, "the abandoned checkpoint's outcome", func() bool { return strings.Contains(log.String(), "log checkpoint failed") })

	snap, err := delta.Open(storage.NewLocal(table)).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.CheckpointVersion() >= 0 {
		t.Errorf("checkpoint version %d, want none: the only checkpoint was abandoned", snap.CheckpointVersion())
	}
	sameAsOracle(t, table, o, "after the shutdown")

	// A new engine replays the log and goes on.
	_, stop := startEngineWith(t, cfg)
	defer stop()
	updates(p, o, 20, 30)
	waitPositions(t, table, "shop", "orders", p.ends)
	sameAsOracle(t, table, o, "after the restart")
}

// TestGroupOffsetCommitFailureIsVisible: the consumer group's offsets
// follow each table commit, for lag tooling; when the coordinator refuses
// them for a partition (a missing group ACL: GROUP_AUTHORIZATION_FAILED in
// the partition's error code, not as a request error), each failure is
// counted, the log says it once a minute with the table, group and
// partition (not once per batch), and the table goes on. Once commits
// are accepted again the group's offsets equal the table's positions, and
// nothing more is counted.
func TestGroupOffsetCommitFailureIsVisible(t *testing.T) {
	c, p := kfakeOrders(t)
	var refuse atomic.Bool
	refuse.Store(true)
	refuseWhile(c, kmsg.OffsetCommit, &refuse, func(kreq kmsg.Request) kmsg.Response {
		req := kreq.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			// As a broker answers: by name, or from v10 by topic ID only.
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			if req.Version >= 10 {
				st.Topic = ""
			}
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
	_, m, log, table := observedEngine(t, c)
	o := ordersOracle{}
	for i := 0; i < 3; i++ {
		updates(p, o, 5*i, 5*i+5)
		waitRecorded(t, m, table, "orders", p.ends)
	}
	waitFor(t, "the refused group commits to be counted", func() bool {
		return testutil.ToFloat64(m.groupCommits.WithLabelValues("orders")) >= 3
	})
	if n := strings.Count(log.String(), "group offset commit failed"); n != 1 {
		t.Errorf("%d log lines for three refused group commits within a minute, want 1", n)
	}
	for _, want := range []string{"group offset commit failed", "table=orders", "group=cdcapply-test", "orders/0: GROUP_AUTHORIZATION_FAILED"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	sameAsOracle(t, table, o, "while group commits fail")

	refuse.Store(false)
	failed := testutil.ToFloat64(m.groupCommits.WithLabelValues("orders"))
	updates(p, o, 15, 20)
	waitRecorded(t, m, table, "orders", p.ends)
	waitGroupOffsets(t, p, "cdcapply-test")
	if got := testutil.ToFloat64(m.groupCommits.WithLabelValues("orders")); got != failed {
		t.Errorf("group commit failures rose from %v to %v once the coordinator accepted them", failed, got)
	}
	sameAsOracle(t, table, o, "once group commits are accepted")
}

// TestFetchErrorIsCountedAndLoggedOnce: the broker refuses the table's
// partition on every fetch (TOPIC_AUTHORIZATION_FAILED: an ACL taken
// away). Each refusal is counted in cdcapply_fetch_errors_total under the
// error's name, the log says it once (not once per fetch), the partition
// is fetched again only after a back-off (before it, the client fetched
// it again at once: 74 refusals and log lines in a tenth of a second
// against kfake), nothing is applied meanwhile and the table does not
// halt; when the broker serves the partition again the table catches up
// to the oracle.
func TestFetchErrorIsCountedAndLoggedOnce(t *testing.T) {
	c, p := kfakeOrders(t)
	e, m, log, table := observedEngine(t, c)
	o := ordersOracle{}
	updates(p, o, 0, 3)
	waitRecorded(t, m, table, "orders", p.ends)

	var refuse atomic.Bool
	refuse.Store(true)
	refuseWhile(c, kmsg.Fetch, &refuse, func(kreq kmsg.Request) kmsg.Response {
		return fetchRefused(kreq, kerr.TopicAuthorizationFailed.Code)
	})
	updates(p, o, 3, 6)
	refused := func() float64 {
		return testutil.ToFloat64(m.fetchErrors.WithLabelValues("orders", "TOPIC_AUTHORIZATION_FAILED"))
	}
	waitFor(t, "several refused fetches to be counted", func() bool { return refused() >= 3 })
	// The back-off (0.2 s doubling) allows one or two more in a second;
	// fetching at once would make hundreds.
	n3 := refused()
	time.Sleep(time.Second)
	if got := refused(); got > n3+3 {
		t.Errorf("%v refused fetches a second after the third: the partition is fetched again without a back-off", got)
	}
	if n := strings.Count(log.String(), "msg=\"fetch error\""); n != 1 {
		t.Errorf("%d fetch error lines for %v refused fetches of one partition within a minute, want 1:\n%s", n, refused(), log.String())
	}
	if !strings.Contains(log.String(), "table=orders topic=orders partition=0") || !strings.Contains(log.String(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("the fetch error line does not name table, topic, partition and error:\n%s", log.String())
	}
	if h := e.Halted(); len(h) != 0 {
		t.Errorf("halted on a refused fetch: %v", h)
	}
	if got := len(readOrders(t, table)); got != 3 {
		t.Errorf("%d rows while the partition is refused, want the first 3", got)
	}

	refuse.Store(false)
	waitRecorded(t, m, table, "orders", p.ends)
	sameAsOracle(t, table, o, "after the partition is served again")
}

// TestRealKafkaGroupOffsetsFollowTheTable: against a real broker, the
// consumer group's committed offsets follow the table's positions on
// every partition, and no group commit fails.
func TestRealKafkaGroupOffsetsFollowTheTable(t *testing.T) {
	brokers := realBrokers(t)
	topic := realTopic(t, brokers, 2)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	p := &producer{t: t, cl: pcl, topic: topic, nparts: 2, ends: map[int32]int64{}}
	dir := t.TempDir()
	cfg := testConfigFor(t, brokers, dir, topic, topic+"-group")
	m := NewMetrics(prometheus.NewRegistry())
	_, stop := startEngineWith(t, cfg, WithMetrics(m))
	defer stop()
	o := ordersOracle{}
	updates(p, o, 0, 40)
	waitRecorded(t, m, dir+"/orders", topic, p.ends)
	waitGroupOffsets(t, p, topic+"-group")
	if got := testutil.ToFloat64(m.groupCommits.WithLabelValues("orders")); got != 0 {
		t.Errorf("%v group offset commits failed against the real broker", got)
	}
	sameAsOracle(t, dir+"/orders", o, "on the real broker")
}

// waitGroupOffsets waits for group's committed offsets on p's topic to
// equal p.ends on every partition written.
func waitGroupOffsets(t *testing.T, p *producer, group string) {
	t.Helper()
	adm := kadm.NewClient(p.cl)
	waitFor(t, fmt.Sprintf("group %s's offsets to reach %v", group, p.ends), func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		for part, end := range p.ends {
			o, ok := offs.Lookup(p.topic, part)
			if !ok || o.Err != nil || o.At != end {
				return false
			}
		}
		return true
	})
}

// observedEngine starts an engine on c's orders topic with metrics and a
// log the test reads, stopped when the test ends.
func observedEngine(t *testing.T, c *kfake.Cluster) (e *Engine, m *Metrics, log *syncBuffer, table string) {
	t.Helper()
	dir := t.TempDir()
	m, log = NewMetrics(prometheus.NewRegistry()), &syncBuffer{}
	e, stop := startEngineWith(t, testConfig(t, c.ListenAddrs(), dir), WithMetrics(m), Logger(slog.New(slog.NewTextHandler(log, nil))))
	t.Cleanup(stop)
	return e, m, log, dir + "/orders"
}

// fetchRefused answers a fetch request with the error code for each of
// its partitions, as a broker refusing them does.
func fetchRefused(kreq kmsg.Request, code int16) kmsg.Response {
	req := kreq.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// refuseWhile makes c answer every request of key with refusal(request)
// while refuse is set, and serve them as usual otherwise.
func refuseWhile(c *kfake.Cluster, key kmsg.Key, refuse *atomic.Bool, refusal func(kmsg.Request) kmsg.Response) {
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !refuse.Load() {
			return nil, nil, false // not handled: kept, and the cluster serves it
		}
		c.KeepControl()
		return refusal(req), nil, true
	})
}

// sameAsOracle fails the test unless the orders table at dir holds o's
// rows; when says at which point of the test.
func sameAsOracle(t *testing.T, dir string, o ordersOracle, when string) {
	t.Helper()
	if got, want := readOrders(t, dir), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table differs from the oracle %s:\n got %v\nwant %v", when, got, want)
	}
}

// checkpointHangs sets up the orders table with a log checkpoint every
// second version and five changes a batch, over storage whose first
// checkpoint write hangs (h armed).
func checkpointHangs(t *testing.T) (p *producer, dir string, cfg *Config, h *hangingStore) {
	t.Helper()
	c, p := kfakeOrders(t)
	dir = t.TempDir()
	cfg = testConfig(t, c.ListenAddrs(), dir)
	cfg.Tables[0].Flush.MaxRecords = 5
	cfg.Tables[0].TableProperties = map[string]string{"delta.checkpointInterval": "2"}
	h = newHangingStore()
	h.hangOn = func(op storage.OpKind, path string) bool {
		return op == storage.OpWriteIfAbsent && strings.HasSuffix(path, ".checkpoint.parquet")
	}
	h.arm()
	return p, dir, cfg, h
}

// updates produces updates number from to to-1 (to seven keys) and
// applies them to o.
func updates(p *producer, o ordersOracle, from, to int) {
	for i := from; i < to; i++ {
		id, status := 1+i%7, fmt.Sprintf("s%d", i)
		p.change(id, int64(100+i), "u", status)
		o.apply(id, "u", status)
	}
}

// hangingStore wraps a table's storage; once armed, the next operation
// that hangOn matches (a log commit when nil) blocks until release is
// closed (or its context ends), after sending its path on entered; it
// then fails with releaseErr if set (before release is closed).
type hangingStore struct {
	once       sync.Once // closes release
	mu         sync.Mutex
	armed      bool
	hangOn     func(op storage.OpKind, path string) bool
	release    chan struct{}
	releaseErr error
	entered    chan string
}

func newHangingStore() *hangingStore {
	return &hangingStore{release: make(chan struct{}), entered: make(chan string, 1)}
}

// free lets the hung operation go on (any later call does nothing).
func (h *hangingStore) free() { h.once.Do(func() { close(h.release) }) }

func (h *hangingStore) arm() {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
}

func (h *hangingStore) wrap(inner storage.Storage) storage.Storage {
	return hangingWrites{Storage: inner, h: h}
}

// waitHung waits for the armed operation to hang, then for the orders
// table's cdcapply_stage_in_progress_seconds to show stage for at least
// d.
func (h *hangingStore) waitHung(t *testing.T, g prometheus.Gatherer, stage string, d time.Duration) {
	t.Helper()
	select {
	case path := <-h.entered:
		t.Logf("storage hangs on %s", path)
	case <-time.After(30 * time.Second):
		t.Fatal("the operation to hang never reached the storage")
	}
	waitFor(t, fmt.Sprintf("stage %s in progress for %v", stage, d), func() bool {
		v, ok := gaugeValue(t, g, "cdcapply_stage_in_progress_seconds", map[string]string{"table": "orders", "stage": stage})
		return ok && v >= d.Seconds()
	})
}

// hang blocks an armed operation that matches.
func (h *hangingStore) hang(ctx context.Context, op storage.OpKind, path string) error {
	h.mu.Lock()
	match := op == storage.OpWriteIfAbsent && logCommit.MatchString(path)
	if h.hangOn != nil {
		match = h.hangOn(op, path)
	}
	hang := h.armed && match
	if hang {
		h.armed = false
	}
	h.mu.Unlock()
	if !hang {
		return nil
	}
	h.entered <- path
	select {
	case <-h.release:
		return h.releaseErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hangingWrites is a Storage whose log commits, lists or reads may hang.
// It has none of the optional interfaces (streamed writes, range reads):
// callers fall back to whole writes and reads.
type hangingWrites struct {
	storage.Storage
	h *hangingStore
}

func (s hangingWrites) WriteIfAbsent(ctx context.Context, p string, data []byte) error {
	if err := s.h.hang(ctx, storage.OpWriteIfAbsent, p); err != nil {
		return err
	}
	return s.Storage.WriteIfAbsent(ctx, p, data)
}

func (s hangingWrites) List(ctx context.Context, dir string) ([]storage.FileInfo, error) {
	if err := s.h.hang(ctx, storage.OpList, dir); err != nil {
		return nil, err
	}
	return s.Storage.List(ctx, dir)
}

// gatherSum sums every series of the metric family name (0 when absent).
func gatherSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			switch {
			case mt.Counter != nil:
				sum += mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				sum += mt.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// gaugeValue returns the gauge name's value for the series whose labels
// include labels, and whether there is one.
func gaugeValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	s := findSeries(t, g, name, labels)
	return s.GetGauge().GetValue(), s != nil
}

// TestWatermarkRefreshGivesUpWhenTheBatchLands: the end-offset request a
// long wait makes must not hold the loop once the batch it waits for has
// landed, even when the brokers do not answer (here a listener that
// accepts and never replies): the loop has the next batch to start.
func TestWatermarkRefreshGivesUpWhenTheBatchLands(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, conn) // never answered
			heldMu.Unlock()
		}
	}()
	defer func() {
		heldMu.Lock()
		for _, conn := range held {
			conn.Close()
		}
		heldMu.Unlock()
	}()
	addr := ln.Addr().String()
	e, err := NewEngine(testConfig(t, []string{addr}, t.TempDir()), Logger(quietLogger()), WithMetrics(NewMetrics(prometheus.NewRegistry())))
	if err != nil {
		t.Fatal(err)
	}
	e.client, err = kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer e.client.Close()
	e.assigned["orders"] = map[int32]bool{0: true}
	e.watermarkEvery = time.Minute
	done := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(done) })
	started := time.Now()
	e.refreshWatermarks(e.tables[0], done)
	if took := time.Since(started); took > 20*time.Second {
		t.Errorf("the end-offset request held the loop %v after its batch landed (bound: a minute)", took)
	}
	heldMu.Lock()
	n := len(held)
	heldMu.Unlock()
	if n == 0 {
		t.Errorf("no connection reached the silent broker: the request was not made")
	}
}

// TestMissingTopicNamed: a table whose topic the cluster does not have (a
// misspelt name) gets no partitions; the engine's wait warning names the
// table and the topic instead of suggesting a crashed group member.
func TestMissingTopicNamed(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runMissingTopicNamed(t, c.ListenAddrs(), "ordrs", startEngine)
}

// TestRealKafkaMissingTopicNamed is TestMissingTopicNamed on a real
// broker (whose default auto.create.topics.enable must not create it).
func TestRealKafkaMissingTopicNamed(t *testing.T) {
	brokers := realBrokers(t)
	runMissingTopicNamed(t, brokers, fmt.Sprintf("cdcapply-missing-%d", time.Now().UnixNano()), startEngineWith)
}

func runMissingTopicNamed(t *testing.T, brokers []string, topic string, start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	cfg := testConfigFor(t, brokers, t.TempDir(), topic, topic+"-group")
	// The clock jumps assignWaitLog ahead once the loop runs (startEngine
	// returns after it started), so the warning is due at once.
	var ahead atomic.Bool
	clock := func() time.Time {
		if ahead.Load() {
			return time.Now().Add(assignWaitLog)
		}
		return time.Now()
	}
	var log syncBuffer
	_, stop := start(t, cfg, EngineClock(clock), Logger(slog.New(slog.NewTextHandler(&log, nil))))
	defer stop()
	ahead.Store(true)
	waitFor(t, "the no-assignment warning", func() bool { return strings.Contains(log.String(), "no partitions assigned yet") })
	l := log.String()
	if !strings.Contains(l, "not in the cluster") || !strings.Contains(l, "missing=\"[orders: "+topic+"]\"") {
		t.Errorf("the warning does not name the missing topic:\n%s", l)
	}
	if strings.Contains(l, "crashed") {
		t.Errorf("the warning blames a crashed member for a missing topic:\n%s", l)
	}
}
