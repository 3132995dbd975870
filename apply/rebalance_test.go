package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// ordersOracle is the expected final table of a stream of orders changes
// with increasing LSNs: per key the last change's status; a delete keeps
// the previous status (NULL when the key was never seen) and marks the row.
type ordersOracle map[int]oracleRow

type oracleRow struct {
	status  string // "<nil>" for NULL
	deleted bool
}

func (o ordersOracle) apply(id int, op, status string) {
	if op == "d" {
		prev, ok := o[id]
		if !ok {
			prev.status = "<nil>"
		}
		prev.deleted = true
		o[id] = prev
		return
	}
	o[id] = oracleRow{status: status}
}

func (o ordersOracle) rows() []string {
	var out []string
	for id, r := range o {
		out = append(out, fmt.Sprintf("%d %s %v", id, r.status, r.deleted))
	}
	sort.Strings(out)
	return out
}

// readOrders reads the orders table with our own reader: "id status
// deleted" per row, sorted (the rows of tableState).
func readOrders(t *testing.T, dir string) []string {
	t.Helper()
	rows, _ := tableState(t, storage.NewLocal(dir))
	return rows
}

// startEngine runs an engine with group timeouts short enough for kfake
// tests (a real broker refuses sessions under 6 s: use startEngineWith).
func startEngine(t *testing.T, cfg *Config, opts ...EngineOption) (*Engine, func()) {
	t.Helper()
	return startEngineWith(t, cfg, append([]EngineOption{KafkaOptions(
		kgo.SessionTimeout(1500*time.Millisecond), kgo.RebalanceTimeout(1500*time.Millisecond), kgo.HeartbeatInterval(200*time.Millisecond),
	)}, opts...)...)
}

func startEngineWith(t *testing.T, cfg *Config, opts ...EngineOption) (*Engine, func()) {
	t.Helper()
	e, cancel, done := runEngine(t, cfg, opts...)
	select {
	case err := <-done:
		t.Fatalf("engine stopped at start: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	return e, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// runEngine builds an engine for cfg (quiet unless opts give a logger)
// and runs it: cancel stops it, done receives what Run returned.
func runEngine(t testing.TB, cfg *Config, opts ...EngineOption) (e *Engine, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	e, err := NewEngine(cfg, append([]EngineOption{Logger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	return e, cancel, ran
}

// syncBuffer is a bytes.Buffer that an engine's logger may write to while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRebalanceAndZombie: two instances in one group on one table,
// partitions moving between them mid-stream (under kafka.assignment:
// partitions the joining instance takes half of them; under tables, the
// default, it waits idle), and a paused instance that wakes up after
// losing its partitions. The table equals the oracle and the zombie's
// commit is fenced.
func TestRebalanceAndZombie(t *testing.T) {
	for _, assignment := range []string{AssignPartitions, AssignTables} {
		t.Run(assignment, func(t *testing.T) { rebalanceAndZombie(t, assignment) })
	}
}

func rebalanceAndZombie(t *testing.T, assignment string) {
	const nparts = 4
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nparts, "orders"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	p := &producer{t: t, cl: pcl, topic: "orders", nparts: nparts, ends: map[int32]int64{}}
	oracle := ordersOracle{}
	rng := rand.New(rand.NewPCG(7, 11))
	lsn := int64(0)
	produce := func(n int) {
		for i := 0; i < n; i++ {
			id := rng.IntN(60)
			lsn++
			op := []string{"c", "u", "u", "u", "d"}[rng.IntN(5)]
			status := fmt.Sprintf("s%d", lsn)
			p.change(id, lsn, op, status)
			oracle.apply(id, op, status)
		}
	}

	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Kafka.Assignment = assignment
	table := dir + "/orders"

	// Instance A alone.
	var pauseMu sync.Mutex
	pauseA := false
	release := make(chan struct{})
	pausedA := make(chan struct{}) // closed when A holds a batch in the pause
	var pausedOnce sync.Once
	// Each instance's log is kept: a failure shows what A did with its
	// held batch.
	var logA, logB syncBuffer
	a, stopA := startEngine(t, cfg, KafkaOptions(kgo.ClientID("instance-a")), Logger(slog.New(slog.NewTextHandler(&logA, nil))))
	a.beforeApply = func(string) {
		pauseMu.Lock()
		paused := pauseA
		pauseMu.Unlock()
		if paused {
			pausedOnce.Do(func() { close(pausedA) })
			<-release
		}
	}
	produce(200)
	waitPositions(t, table, "shop", "orders", p.ends)

	// Instance B joins: partitions move mid-stream.
	b, stopB := startEngine(t, cfg, KafkaOptions(kgo.ClientID("instance-b")), Logger(slog.New(slog.NewTextHandler(&logB, nil))))
	for i := 0; i < 10; i++ {
		produce(30)
		time.Sleep(50 * time.Millisecond)
	}
	waitPositions(t, table, "shop", "orders", p.ends)

	// A pauses inside its next commit (a zombie: GC pause, stopped VM):
	// its heartbeats stop reaching the broker, so the group throws it out
	// and B takes every partition and goes on.
	var memberA string
	for _, m := range c.GroupInfo("cdcapply-test").Members {
		if m.ClientID == "instance-a" {
			memberA = m.MemberID
		}
	}
	if memberA == "" {
		t.Fatal("instance A is not in the group")
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat, kmsg.ConsumerGroupHeartbeat}, Count: -1, Err: kerr.CoordinatorLoadInProgress,
		When: func(req kmsg.Request) bool {
			switch r := req.(type) {
			case *kmsg.HeartbeatRequest:
				return r.MemberID == memberA
			case *kmsg.ConsumerGroupHeartbeatRequest:
				return r.MemberID == memberA
			}
			return false
		}})
	pauseMu.Lock()
	pauseA = true
	pauseMu.Unlock()
	for i := 0; i < 20; i++ {
		produce(20)
		time.Sleep(100 * time.Millisecond)
	}
	// Without a batch held in the pause there is no zombie commit to fence.
	select {
	case <-pausedA:
	case <-time.After(20 * time.Second):
		t.Fatal("instance A never reached a commit after the pause began: no zombie batch")
	}
	// B alone owns every partition once A is out.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if _, err := c.WaitGroupInfo(wctx, "cdcapply-test", func(g *kfake.GroupInfo) bool {
		return len(g.Members) == 1 && g.Members[0].ClientID == "instance-b" && g.NumAssigned() == nparts
	}); err != nil {
		t.Fatal(err)
	}
	waitPositions(t, table, "shop", "orders", p.ends)
	// A wakes up and tries to commit its stale batch.
	close(release)
	produce(50)
	waitPositions(t, table, "shop", "orders", p.ends)
	time.Sleep(300 * time.Millisecond)
	stopA()
	produce(50)
	waitPositions(t, table, "shop", "orders", p.ends)
	stopB()

	if got, want := readOrders(t, table), oracle.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("table differs from the oracle:\n got %v\nwant %v", got, want)
	}
	if a.fenced.Load() == 0 {
		t.Errorf("the zombie's commit was not fenced (A fenced %d, B fenced %d)", a.fenced.Load(), b.fenced.Load())
	}
	// B started on the table A had written: its start says what it read.
	opened := regexp.MustCompile(`msg="table opened, key index built" table=orders version=\d+ files=[1-9]\d* keys=([1-9]\d*) took=`)
	if !opened.MatchString(logB.String()) {
		t.Error("instance B's start did not report the table and key index it opened")
	}
	// Each instance followed the other's commits (before its flushes,
	// after the fence, on reassignment) by catching its key index up,
	// never by building it again.
	for name, log := range map[string]string{"A": logA.String(), "B": logB.String()} {
		if strings.Contains(log, "key index built again") || !strings.Contains(log, "key index caught up") {
			t.Errorf("instance %s: %d key index catch-ups, rebuilt: %v", name, strings.Count(log, "key index caught up"), strings.Contains(log, "key index built again"))
		}
	}
	if t.Failed() {
		t.Logf("instance A's log:\n%s", logA.String())
		t.Logf("instance B's log:\n%s", logB.String())
	}
	t.Logf("fenced batches: A %d, B %d; %d keys", a.fenced.Load(), b.fenced.Load(), len(oracle))
}

// TestStaticMemberFencedStops: a second process joining the group with the
// same kafka.instance_id fences the first, whose Run stops with an error
// naming the group and the id instead of rejoining (the client would
// rejoin after a back-off, and the two would take the group slot from
// each other in turn). The second goes on, and the table converges.
func TestStaticMemberFencedStops(t *testing.T) {
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	table := dir + "/orders"
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Kafka.InstanceID = "shop-0"
	fast := KafkaOptions(kgo.HeartbeatInterval(100 * time.Millisecond))
	var log syncBuffer
	_, cancel, done := runEngine(t, cfg, fast, Logger(slog.New(slog.NewTextHandler(&log, nil))))
	defer cancel()
	o := ordersOracle{}
	updates(p, o, 0, 20)
	waitPositions(t, table, "shop", "orders", p.ends)

	_, stop := startEngineWith(t, cfg, fast)
	defer stop()
	select {
	case err := <-done:
		if !errors.Is(err, kerr.FencedInstanceID) || !strings.Contains(err.Error(), `kafka.instance_id "shop-0"`) || !strings.Contains(err.Error(), "consumer group cdcapply-test") {
			t.Fatalf("the fenced engine stopped with %v, want FENCED_INSTANCE_ID naming the group and the instance id", err)
		}
		t.Logf("the fenced engine stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the first engine did not stop after a second joined with its instance id:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "level=ERROR msg=stopping") {
		t.Errorf("no error logged by the fenced engine:\n%s", log.String())
	}
	updates(p, o, 20, 40)
	waitPositions(t, table, "shop", "orders", p.ends)
	sameAsOracle(t, table, o, "after the fenced engine stopped")
}
