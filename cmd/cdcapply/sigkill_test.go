package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/s3test"
)

// buildBinary builds the real cdcapply command (without the race detector
// the test binary may carry, so the killed process runs at normal speed).
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cdcapply")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts `cdcapply run -c cfg` as a child process; exited is
// closed when it has exited.
func startProcess(t *testing.T, bin, cfg, logPath string) (cmd *exec.Cmd, exited chan struct{}) {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "run", "-c", cfg, "-log-format", "text", "-log-level", "info")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The child dies with the test process (a test binary killed by its
	// -timeout runs no cleanup), and with the test on any failure.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, exited
}

// TestSIGKILLConvergesToOracle runs a real `cdcapply run` process over a
// generated stream of 100,000 changes (updates, deletes, revivals, TOAST
// placeholders, duplicates and replays) in an in-process Kafka, kills it
// with SIGKILL at random moments and restarts it each time. The table ends
// equal to the oracle, and the commitInfo accounting over every version
// counts each record of the topic exactly once. The process is a static
// member of its group (kafka.instance_id), so each restart reads again at
// once (sigkillRun checks it); a dynamic member's restarts are
// TestSIGKILLRealKafka's.
func TestSIGKILLConvergesToOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a 100k-event stream")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	sigkillRun(t, cluster.ListenAddrs(), "", 100_000, 20_000, staticMember)
}

// TestSIGKILLTwoProcesses is TestSIGKILLConvergesToOracle with two
// processes in the group writing the one table (each with its own
// instance id), a random one killed and restarted each time: the group
// splits the partitions between them (kafka.assignment: partitions, so
// that both write the table), their commits interleave in one
// log (file rewrites and deletion vectors conflict and are retried), and
// the table still ends equal to the oracle with every record accounted
// for once, in both write modes.
func TestSIGKILLTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a 100k-event stream")
	}
	two := staticMember
	two.processes, two.assignment = 2, "partitions"
	sigkillEachMode(t, 100_000, 20_000, two)
}

// sigkillEachMode runs sigkillRun on kfake in both write modes.
func sigkillEachMode(t *testing.T, events, keys int64, c sigkillCase) {
	for _, mode := range []string{"copy-on-write", "merge-on-read"} {
		t.Run(mode, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			c.writeMode = mode
			sigkillRun(t, cluster.ListenAddrs(), "", events, keys, c)
		})
	}
}

// TestSIGKILLOnS3 is TestSIGKILLConvergesToOracle with the table on an
// S3-compatible server: a kill lands anywhere in a commit cycle whose
// files and log entries are objects (a PUT is whole or absent), and the
// restarted process resumes from the txn actions it reads back from the
// store. A shorter stream: the server answers a few hundred requests a
// second.
func TestSIGKILLOnS3(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a 30k-event stream")
	}
	c := staticMember
	c.s3, c.kills, c.rate = true, 4, 3000
	sigkillEachMode(t, 30_000, 5_000, c)
}

// TestSIGKILLTablesHandover runs two processes on two tables under the
// default kafka.assignment (tables), so each process writes a table of its
// own. A random one is killed and restarted only once the other has
// committed to a table the killed one wrote: the survivor takes the table
// when the killed member's session lapses (dynamic members, a 6 s session
// timeout), and the restarted process later takes a table back from it
// (the cooperative move, revoked between batches). Both tables end equal
// to their oracles with every record accounted for once. The streams are
// produced at a steady rate while the processes run, so the kills land
// before the tables catch up.
//
// On kfake a handover can take a minute, not the session timeout: a
// member killed before its JoinGroup answer reached it gets no session
// timer there, and stays in the group until the next rebalance's timeout
// (60 s, franz-go's default) drops it. A real broker times every member
// out from the join's end (TestSIGKILLRealKafka/tables-handover).
func TestSIGKILLTablesHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("long: two 50k-event streams")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	sigkillRun(t, cluster.ListenAddrs(), "", 100_000, 20_000, handoverCase)
}

// handoverCase is two dynamic processes on two tables under the default
// kafka.assignment, each killed process restarted once the other took
// its table.
var handoverCase = sigkillCase{processes: 2, tables: 2, sessionTimeout: 6 * time.Second, handover: true, rate: 1500, kills: 4}

// staticMember has kafka.instance_id set, and a session timeout a
// restart must not wait out.
var staticMember = sigkillCase{static: true, sessionTimeout: time.Minute}

// TestSIGKILLRealKafka is the same against a real Apache Kafka broker
// (CDCAPPLY_KAFKA_BROKERS, started by scripts/kafka.sh), on a fresh topic,
// as a dynamic member (no kafka.instance_id, the default), whose every
// restart waits for the killed member's session to time out, and as a
// static one, whose restarts read again at once.
func TestSIGKILLRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	brokers := realBrokers(t)
	for _, v := range []struct {
		name         string
		member       sigkillCase
		events, keys int64
	}{
		// Each restart waits 45 s: a short stream keeps the kills few.
		{"dynamic", sigkillCase{}, 30_000, 5_000},
		{"static", staticMember, 100_000, 20_000},
		// Two processes on two tables: a killed process's table goes to
		// the other when its session lapses (6 s).
		{"tables-handover", handoverCase, 100_000, 20_000},
	} {
		t.Run(v.name, func(t *testing.T) {
			sigkillRun(t, brokers, fmt.Sprintf("sigkill%d", time.Now().UnixNano()), v.events, v.keys, v.member)
		})
	}
}

// sigkillCase is how the killed processes join their consumer group, how
// many there are, and how they write the tables.
type sigkillCase struct {
	static         bool          // kafka.instance_id crash-<process>; else a dynamic member
	sessionTimeout time.Duration // kafka.session_timeout; 0 the default
	processes      int           // processes in the group (0: one)
	tables         int           // tables, each with a stream of its own (0: one)
	assignment     string        // kafka.assignment; "" the default (tables)
	writeMode      string        // the tables' write_mode; "" the default (copy-on-write)
	// handover: a killed process is restarted only once another has
	// committed to a table the killed one had written (or every such
	// table caught up), so a table's writer changes while the group
	// runs on, not only across a restart.
	handover bool
	rate     float64 // records a second each table's stream is produced at; 0: all before the start
	kills    int     // kills before the last run goes to the end (0: six)
	s3       bool    // the tables on the S3-compatible server (scripts/s3.sh), not in a directory
}

// tableFields is the case's part of a table's map.
func (m sigkillCase) tableFields() string {
	if m.writeMode == "" {
		return ""
	}
	return ", write_mode: " + m.writeMode
}

// kafkaFields is process i's part of the pipeline's kafka map.
func (m sigkillCase) kafkaFields(i int) string {
	var s string
	if m.static {
		s += fmt.Sprintf(", instance_id: crash-%d", i)
	}
	if m.sessionTimeout > 0 {
		s += ", session_timeout: " + m.sessionTimeout.String()
	}
	if m.assignment != "" {
		s += ", assignment: " + m.assignment
	}
	return s
}

// sigkillTable is one table of a sigkill run: its generated stream and
// where it is written.
type sigkillTable struct {
	name  string
	g     *workload.Generator
	ends  map[int32]int64 // partition -> its end offset
	total int64           // records on the table's topic
	store storage.Storage
}

// position is the sum over the table's partitions of its next offsets
// (the records it applied), and its snapshot (nil before it exists).
func (tb *sigkillTable) position(ctx context.Context) (int64, *delta.Snapshot) {
	snap, err := delta.Open(tb.store).Snapshot(ctx)
	if err != nil {
		return 0, nil
	}
	pos := checkpoint.Restore(snap, "crash")
	var sum int64
	for p := range tb.ends {
		next, _ := pos.Next(checkpoint.TopicPartition{Topic: tb.g.Topic(), Partition: p})
		sum += next
	}
	return sum, snap
}

// sigkillRun produces a generated stream for each table (server names the
// first one's topics; "" keeps the default) and kills `cdcapply run` at
// random moments until the tables catch up, then checks each against its
// oracle and the accounting. A static member's restarts must commit
// before half its session timeout: a dynamic member's wait for the killed
// member's session to lapse first.
func sigkillRun(t *testing.T, brokers []string, server string, events, keys int64, member sigkillCase) {
	bin := buildBinary(t)
	// CDCAPPLY_SIGKILL_SEED picks other streams and other kill moments
	// (a soak: run the tests with many).
	seed := uint64(42)
	if v := os.Getenv("CDCAPPLY_SIGKILL_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("CDCAPPLY_SIGKILL_SEED: %v", err)
		}
	}
	t.Logf("seed %d", seed)
	ctx := context.Background()
	dir := t.TempDir()
	root := dir // the tables' parent: dir, or a fresh bucket's prefix
	if member.s3 {
		root = s3test.Location(t) // the processes inherit its AWS_* environment
	}
	nt := max(member.tables, 1)
	tables := make([]*sigkillTable, nt)
	var produced []<-chan error // streams produced in the background
	var tableYAML strings.Builder
	for j := range nt {
		wcfg := workload.Default()
		wcfg.Seed = seed + uint64(j)
		wcfg.Events = events / int64(nt)
		wcfg.Keys = keys
		wcfg.SnapshotKeys = min(wcfg.SnapshotKeys, keys/2)
		wcfg.Partitions = 3
		if server != "" {
			wcfg.Server = server
		}
		name := "orders"
		if j > 0 {
			wcfg.Server += fmt.Sprintf("-%d", j)
			name = fmt.Sprintf("orders_%d", j)
		}
		var g *workload.Generator
		if member.rate > 0 {
			var done <-chan error
			g, done = produceStreamAt(t, brokers, wcfg, member.rate)
			produced = append(produced, done)
			t.Logf("table %s: producing at %v records a second", name, member.rate)
		} else {
			var st workload.ProduceStats
			g, st = produceStream(t, brokers, wcfg, 5000)
			t.Logf("table %s: produced %d records in %v", name, st.Records, st.Elapsed)
		}
		store, err := storage.ForLocation(root + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		tb := &sigkillTable{name: name, g: g, ends: map[int32]int64{}, store: store}
		regen, _ := workload.New(wcfg)
		var ev workload.Event
		for regen.Next(&ev) {
			if ev.Record.Topic == g.Topic() {
				tb.ends[ev.Record.Partition] = ev.Record.Offset + 1
				tb.total++
			}
		}
		t.Logf("table %s: %d records on its topic %s", name, tb.total, g.Topic())
		fmt.Fprintf(&tableYAML, "  - {name: %s, topic: %s, location: %s/%s, key_columns: [id]%s}\n", name, g.Topic(), root, name, member.tableFields())
		tables[j] = tb
	}

	n := max(member.processes, 1)
	cfgPaths, logPaths := make([]string, n), make([]string, n)
	for i := range n {
		cfgPaths[i] = filepath.Join(dir, fmt.Sprintf("pipeline-%d.yaml", i))
		logPaths[i] = filepath.Join(dir, fmt.Sprintf("cdcapply-%d.log", i))
		yaml := fmt.Sprintf(`pipeline: {id: crash}
kafka: {brokers: [%s], group: crash-test-%s%s}
defaults: {flush: {max_latency: 200ms, max_records: 5000}}
tables:
%s`, brokers[0], tables[0].g.Topic(), member.kafkaFields(i), tableYAML.String())
		if err := os.WriteFile(cfgPaths[i], []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logOf := func(i int) string { b, _ := os.ReadFile(logPaths[i]); return string(b) }
	defer func() {
		if t.Failed() {
			for i := range n {
				t.Logf("process %d's log ends:\n%s", i, tail([]byte(logOf(i)), 3000))
			}
		}
	}()
	logs := func() string {
		var all string
		for i := range logPaths {
			all += logOf(i)
		}
		return all
	}
	position := func() int64 {
		var sum int64
		for _, tb := range tables {
			p, _ := tb.position(ctx)
			sum += p
		}
		return sum
	}
	var total int64
	for _, tb := range tables {
		total += tb.total
	}
	caughtUp := func() bool { return position() == total }
	cmds, exits := make([]*exec.Cmd, n), make([]chan struct{}, n)
	for i := range n {
		cmds[i], exits[i] = startProcess(t, bin, cfgPaths[i], logPaths[i])
	}

	rng := rand.New(rand.NewPCG(seed, 1))
	kills, restarts, slowRestarts, handovers := 0, 0, 0, 0
	// Each run is killed at a random moment after the tables took at
	// least one more commit, so the kills land all over the commit cycle
	// (reading, writing data files, committing, checkpointing) rather than
	// all before the first commit. With several processes a random one is
	// killed and restarted; the others go on.
	maxKills := cmp.Or(member.kills, 6)
	for kills < maxKills && !caughtUp() {
		start := position()
		started := time.Now()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if position() > start || time.Now().After(deadline) {
				break
			}
		}
		took := time.Since(started)
		t.Logf("start to first commit: %v", took.Round(time.Millisecond))
		// With one process, the commit awaited is the restarted one's.
		if n == 1 && kills > 0 {
			restarts++
			if took >= 20*time.Second {
				slowRestarts++
			}
			if member.static && took > member.sessionTimeout/2 {
				t.Errorf("restart %d as a static member: first commit after %v, not before half the session timeout %v: the restart waited for the killed member's session",
					kills, took.Round(time.Millisecond), member.sessionTimeout)
			}
		}
		wait := time.Duration(rng.IntN(1500)) * time.Millisecond
		time.Sleep(wait)
		i := rng.IntN(n)
		before := position()
		if err := cmds[i].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exits[i]
		kills++
		t.Logf("kill %d of process %d, %v after a commit: %d of %d records applied", kills, i, wait, before, total)
		if member.handover {
			if took, tb := awaitHandover(ctx, tables, i, logOf, n); tb != "" {
				handovers++
				t.Logf("table %s, written by process %d, committed by another %v after the kill", tb, i, took.Round(time.Millisecond))
			}
		}
		cmds[i], exits[i] = startProcess(t, bin, cfgPaths[i], logPaths[i])
	}
	// The last runs go to the end, then stop gracefully.
	deadline := time.Now().Add(5 * time.Minute)
	for !caughtUp() {
		if time.Now().After(deadline) {
			for _, c := range cmds {
				_ = c.Process.Signal(syscall.SIGKILL)
			}
			t.Fatalf("not caught up after 5 minutes: %d of %d\n%s", position(), total, tail([]byte(logs()), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, c := range cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
		<-exits[i]
	}
	if kills == 0 {
		t.Fatal("the process was never killed: the test proves nothing")
	}
	if member.static && n == 1 && restarts == 0 {
		t.Fatal("no restart after a kill committed before the stream's end: the static member's restart is not shown")
	}
	if member.handover && handovers == 0 {
		t.Fatal("no table went to another process after its writer was killed: the handover is not shown")
	}
	// Every process of the group wrote to the tables.
	for i := range logPaths {
		if n > 1 && !strings.Contains(logOf(i), "msg=committed") {
			t.Errorf("process %d of %d never committed: the processes did not share the work", i, n)
		}
	}
	// A restart that read nothing for 20 s says why, naming the setting
	// that would have spared it.
	if l := logs(); slowRestarts > 0 && (!strings.Contains(l, "no partitions assigned yet") || !strings.Contains(l, "kafka.instance_id")) {
		t.Errorf("%d restarts waited 20 s or more for their partitions and the log never said why:\n%s", slowRestarts, tail([]byte(logs()), 3000))
	}
	for _, done := range produced {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range tables {
		verifySigkillTable(ctx, t, tb, kills, member)
	}
}

// awaitHandover waits, after process killed was killed, until another
// process commits to a table the killed one was the last to commit to,
// and names that table ("" when each such table caught up first, or after
// two minutes). A process's log names each table it commits, with the
// time ("time=... msg=committed table=<name> ...").
func awaitHandover(ctx context.Context, tables []*sigkillTable, killed int, logOf func(int) string, processes int) (time.Duration, string) {
	last := func(i int, tb *sigkillTable) (at time.Time, n int) {
		for line := range strings.Lines(logOf(i)) {
			if !strings.Contains(line, " msg=committed table="+tb.name+" ") {
				continue
			}
			n++
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				at = t
			}
		}
		return at, n
	}
	var held []*sigkillTable // tables the killed process wrote last
	before := map[int]map[string]int{}
	for i := range processes {
		before[i] = map[string]int{}
	}
	for _, tb := range tables {
		mine, _ := last(killed, tb)
		latest := !mine.IsZero()
		for i := range processes {
			at, n := last(i, tb)
			before[i][tb.name] = n
			if i != killed && !at.Before(mine) {
				latest = false
			}
		}
		if latest {
			held = append(held, tb)
		}
	}
	start := time.Now()
	for time.Since(start) < 2*time.Minute {
		done := true
		for _, tb := range held {
			for i := range processes {
				if _, n := last(i, tb); i != killed && n > before[i][tb.name] {
					return time.Since(start), tb.name
				}
			}
			if p, _ := tb.position(ctx); p < tb.total {
				done = false
			}
		}
		if done {
			return time.Since(start), ""
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), ""
}

// verifySigkillTable checks a table after a sigkill run: equal to its
// oracle, deletion vectors in merge-on-read, and the commitInfo accounting
// over every version counting each record of its topic once.
func verifySigkillTable(ctx context.Context, t *testing.T, tb *sigkillTable, kills int, member sigkillCase) {
	t.Helper()
	diff, err := workload.Verify(ctx, tb.store, tb.g.Oracle(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.OK() {
		t.Fatalf("table %s: after %d SIGKILLs the table differs from the oracle: %s", tb.name, kills, diff)
	}
	_, snap := tb.position(ctx)
	if member.writeMode == "merge-on-read" {
		dvs := 0
		for _, a := range snap.Files() {
			if a.DeletionVector != nil {
				dvs++
			}
		}
		if dvs == 0 {
			t.Errorf("table %s: write_mode merge-on-read, yet no live file has a deletion vector", tb.name)
		}
	}
	var read, parts int64
	for v := int64(0); v <= snap.Version; v++ {
		acts, err := delta.Open(tb.store).ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.CommitInfo == nil {
				continue
			}
			n := func(k string) int64 { x, _ := a.CommitInfo.OperationParameters[k].(float64); return int64(x) }
			read += n("recordsRead")
			parts += n("recordsApplied") + n("recordsStale") + n("recordsSkipped") + n("recordsQuarantined")
		}
	}
	if read != tb.total || parts != tb.total {
		t.Fatalf("table %s: accounting over %d versions: read %d, applied+stale+skipped+quarantined %d, want %d each", tb.name, snap.Version+1, read, parts, tb.total)
	}
	t.Logf("table %s: %d SIGKILLs; version %d; equals the oracle (%s); %d records accounted for once each", tb.name, kills, snap.Version, diff, tb.total)
}

// produceStream creates wcfg's topics on brokers and produces its stream
// there, batch records a request; it returns the generator (its oracle
// knows the final table) and what was produced.
func produceStream(t *testing.T, brokers []string, wcfg workload.Config, batch int) (*workload.Generator, workload.ProduceStats) {
	t.Helper()
	g, cl := newStream(t, brokers, wcfg)
	defer cl.Close()
	st, err := workload.Produce(context.Background(), cl, g, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

// produceStreamAt is produceStream at a steady rate (records a second),
// in the background: done gets the outcome once the stream is produced.
func produceStreamAt(t *testing.T, brokers []string, wcfg workload.Config, rate float64) (g *workload.Generator, done <-chan error) {
	t.Helper()
	g, cl := newStream(t, brokers, wcfg)
	ch := make(chan error, 1)
	go func() {
		defer cl.Close()
		_, err := workload.ProduceAt(context.Background(), cl, g, rate, nil)
		ch <- err
	}()
	return g, ch
}

// newStream makes wcfg's generator and a client to produce it with, its
// topics created on brokers.
func newStream(t *testing.T, brokers []string, wcfg workload.Config) (*workload.Generator, *kgo.Client) {
	t.Helper()
	g, err := workload.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.CreateTopics(context.Background(), cl, g, 1); err != nil {
		cl.Close()
		t.Fatal(err)
	}
	return g, cl
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
