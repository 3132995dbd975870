package main

import (
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
	for _, mode := range []string{"copy-on-write", "merge-on-read"} {
		t.Run(mode, func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			two := staticMember
			two.processes, two.writeMode = 2, mode
			sigkillRun(t, cluster.ListenAddrs(), "", 100_000, 20_000, two)
		})
	}
}

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
	} {
		t.Run(v.name, func(t *testing.T) {
			sigkillRun(t, brokers, fmt.Sprintf("sigkill%d", time.Now().UnixNano()), v.events, v.keys, v.member)
		})
	}
}

// sigkillCase is how the killed processes join their consumer group, how
// many there are, and how they write the table.
type sigkillCase struct {
	static         bool          // kafka.instance_id crash-<process>; else a dynamic member
	sessionTimeout time.Duration // kafka.session_timeout; 0 the default
	processes      int           // processes in the group, writing the one table (0: one)
	writeMode      string        // the table's write_mode; "" the default (copy-on-write)
}

// tableFields is the case's part of the table's map.
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
	if m.processes > 1 {
		// Two writers on the one table: the default (tables) would
		// give it to one process while the other waits.
		s += ", assignment: partitions"
	}
	return s
}

// sigkillRun produces a generated stream (server names its topics; ""
// keeps the default) and kills `cdcapply run` at random moments until the
// table catches up, then checks it against the oracle and the accounting.
// A static member's restarts must commit before half its session timeout:
// a dynamic member's wait for the killed member's session to lapse first.
func sigkillRun(t *testing.T, brokers []string, server string, events, keys int64, member sigkillCase) {
	bin := buildBinary(t)
	wcfg := workload.Default()
	// CDCAPPLY_SIGKILL_SEED picks another stream and other kill moments
	// (a soak: run the tests with many).
	seed := uint64(42)
	if v := os.Getenv("CDCAPPLY_SIGKILL_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("CDCAPPLY_SIGKILL_SEED: %v", err)
		}
	}
	t.Logf("seed %d", seed)
	wcfg.Seed = seed
	wcfg.Events = events
	wcfg.Keys = keys
	wcfg.SnapshotKeys = min(wcfg.SnapshotKeys, keys/2)
	wcfg.Partitions = 3
	if server != "" {
		wcfg.Server = server
	}
	g, st := produceStream(t, brokers, wcfg, 5000)
	ctx := context.Background()
	ends := map[int32]int64{}
	total := int64(0)
	regen, _ := workload.New(wcfg)
	var ev workload.Event
	for regen.Next(&ev) {
		if ev.Record.Topic == g.Topic() {
			ends[ev.Record.Partition] = ev.Record.Offset + 1
			total++
		}
	}
	t.Logf("produced %d records (%d on the table's topic) in %v", st.Records, total, st.Elapsed)

	dir := t.TempDir()
	n := max(member.processes, 1)
	cfgPaths, logPaths := make([]string, n), make([]string, n)
	for i := range n {
		cfgPaths[i] = filepath.Join(dir, fmt.Sprintf("pipeline-%d.yaml", i))
		logPaths[i] = filepath.Join(dir, fmt.Sprintf("cdcapply-%d.log", i))
		yaml := fmt.Sprintf(`pipeline: {id: crash}
kafka: {brokers: [%s], group: crash-test-%s%s}
defaults: {flush: {max_latency: 200ms, max_records: 5000}}
tables:
  - {name: orders, topic: %s, location: %s/orders, key_columns: [id]%s}
`, brokers[0], wcfg.Server, member.kafkaFields(i), g.Topic(), dir, member.tableFields())
		if err := os.WriteFile(cfgPaths[i], []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := func() string {
		var all []byte
		for _, p := range logPaths {
			b, _ := os.ReadFile(p)
			all = append(all, b...)
		}
		return string(all)
	}
	table := storage.NewLocal(filepath.Join(dir, "orders"))
	position := func() (int64, *delta.Snapshot) {
		snap, err := delta.Open(table).Snapshot(ctx)
		if err != nil {
			return 0, nil
		}
		pos := checkpoint.Restore(snap, "crash")
		var sum int64
		for p := range ends {
			next, _ := pos.Next(checkpoint.TopicPartition{Topic: g.Topic(), Partition: p})
			sum += next
		}
		return sum, snap
	}
	caughtUp := func() bool { p, _ := position(); return p == total }
	cmds, exits := make([]*exec.Cmd, n), make([]chan struct{}, n)
	for i := range n {
		cmds[i], exits[i] = startProcess(t, bin, cfgPaths[i], logPaths[i])
	}

	rng := rand.New(rand.NewPCG(seed, 1))
	kills, restarts, slowRestarts := 0, 0, 0
	// Each run is killed at a random moment after the table took at least
	// one more commit, so the kills land all over the commit cycle
	// (reading, writing data files, committing, checkpointing) rather than
	// all before the first commit. With several processes a random one is
	// killed and restarted; the others go on.
	for kills < 6 && !caughtUp() {
		start, _ := position()
		started := time.Now()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if p, _ := position(); p > start || time.Now().After(deadline) {
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
		before, _ := position()
		if err := cmds[i].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exits[i]
		kills++
		t.Logf("kill %d of process %d, %v after a commit: %d of %d records applied", kills, i, wait, before, total)
		cmds[i], exits[i] = startProcess(t, bin, cfgPaths[i], logPaths[i])
	}
	// The last runs go to the end, then stop gracefully.
	deadline := time.Now().Add(5 * time.Minute)
	for !caughtUp() {
		if time.Now().After(deadline) {
			for _, c := range cmds {
				_ = c.Process.Signal(syscall.SIGKILL)
			}
			p, _ := position()
			t.Fatalf("not caught up after 5 minutes: %d of %d\n%s", p, total, tail([]byte(logs()), 3000))
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
	// Every process of the group wrote to the table.
	for i, p := range logPaths {
		if b, _ := os.ReadFile(p); n > 1 && !strings.Contains(string(b), "msg=committed") {
			t.Errorf("process %d of %d never committed: the processes did not share the table", i, n)
		}
	}
	// A restart that read nothing for 20 s says why, naming the setting
	// that would have spared it.
	if l := logs(); slowRestarts > 0 && (!strings.Contains(l, "no partitions assigned yet") || !strings.Contains(l, "kafka.instance_id")) {
		t.Errorf("%d restarts waited 20 s or more for their partitions and the log never said why:\n%s", slowRestarts, tail([]byte(logs()), 3000))
	}

	diff, err := workload.Verify(ctx, table, g.Oracle(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.OK() {
		t.Fatalf("after %d SIGKILLs the table differs from the oracle: %s", kills, diff)
	}
	_, snap := position()
	if member.writeMode == "merge-on-read" {
		dvs := 0
		for _, a := range snap.Files() {
			if a.DeletionVector != nil {
				dvs++
			}
		}
		if dvs == 0 {
			t.Error("write_mode merge-on-read, yet no live file has a deletion vector")
		}
	}
	var read, parts int64
	for v := int64(0); v <= snap.Version; v++ {
		acts, err := delta.Open(table).ReadCommit(ctx, v)
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
	if read != total || parts != total {
		t.Fatalf("accounting over %d versions: read %d, applied+stale+skipped+quarantined %d, want %d each", snap.Version+1, read, parts, total)
	}
	t.Logf("%d SIGKILLs; version %d; table equals the oracle (%s); %d records accounted for once each", kills, snap.Version, diff, total)
}

// produceStream creates wcfg's topics on brokers and produces its stream
// there, batch records a request; it returns the generator (its oracle
// knows the final table) and what was produced.
func produceStream(t *testing.T, brokers []string, wcfg workload.Config, batch int) (*workload.Generator, workload.ProduceStats) {
	t.Helper()
	g, err := workload.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := workload.CreateTopics(ctx, cl, g, 1); err != nil {
		t.Fatal(err)
	}
	st, err := workload.Produce(ctx, cl, g, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
