package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/cdcapply/cdcapply/status"
	"github.com/cdcapply/cdcapply/tombstone"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the status tests")

// statusT0 is the fixed "now" of the status goldens.
var statusT0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// fixedOffsets serves high watermarks from a map, or fails like a down
// cluster.
type fixedOffsets struct {
	ends map[checkpoint.TopicPartition]int64
	err  error
}

func (f fixedOffsets) EndOffsets(_ context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error) {
	if f.err != nil {
		return nil, f.err
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	out := map[checkpoint.TopicPartition]int64{}
	for tp, v := range f.ends {
		if want[tp.Topic] {
			out[tp] = v
		}
	}
	return out, nil
}

// DescribeGroup answers for group g with one static member reading
// customers/0 and orders/0 (orders/1 is nobody's), and fails like
// EndOffsets when the cluster is down.
func (f fixedOffsets) DescribeGroup(_ context.Context, group string) (*status.Group, error) {
	if f.err != nil {
		return nil, f.err
	}
	if group != "g" {
		return nil, fmt.Errorf("describe consumer group %s: GROUP_ID_NOT_FOUND", group)
	}
	return &status.Group{Name: group, State: "Stable", Members: []status.Member{
		{InstanceID: "p-0", ClientID: "cdcapply", Host: "/10.0.0.7", Partitions: []string{"customers/0", "orders/0"}},
	}}, nil
}

// statusChange builds one change of a table (id bigint key, status string).
func statusChange(l *apply.Layout, topic string, part int32, off int64, id int64, seq uint64, del bool, val string, ts time.Time) *apply.Change {
	c := &apply.Change{Seq: binary.BigEndian.AppendUint64(nil, seq), Pos: apply.Position{Topic: topic, Partition: part, Offset: off}, Delete: del,
		SourceTsMicros: ts.UnixMicro(), Values: []schema.Value{schema.Int(id), schema.String(val)}}
	if del {
		c.Values[1] = schema.Unavailable
	}
	c.Key = apply.EncodeKey(c.Values, l.Key)
	return c
}

// statusApply commits each batch (each change's own partition and offset
// make the txn ranges) to a fresh table at dir, every commit at statusT0.
func statusApply(t *testing.T, dir, name string, batches func(l *apply.Layout) [][]*apply.Change) *delta.Table {
	t.Helper()
	return statusApplyTo(t, storage.NewLocal(dir), name, nil, batches)
}

// statusApplyTo is statusApply to the table at store, created with the
// table properties props.
func statusApplyTo(t *testing.T, store storage.Storage, name string, props map[string]string, batches func(l *apply.Layout) [][]*apply.Change) *delta.Table {
	t.Helper()
	tbl := delta.Open(store, delta.Clock(func() time.Time { return statusT0 }))
	layout, err := apply.NewLayout([]delta.StructField{{Name: "id", Type: delta.Long}, {Name: "status", Type: delta.String, Nullable: true}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	a := apply.NewTableApplier(name, "p", tbl, func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	if err := a.SetTableProperties(props); err != nil {
		t.Fatal(err)
	}
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if existing := a.Layout(); existing != nil {
		layout = existing
	} else if err := a.SetLayout(layout); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches(layout) {
		ranges := map[checkpoint.TopicPartition]checkpoint.Range{}
		for _, c := range b {
			tp := checkpoint.TopicPartition{Topic: c.Pos.Topic, Partition: c.Pos.Partition}
			r, ok := ranges[tp]
			if !ok {
				r.From = c.Pos.Offset
			}
			r.Next = c.Pos.Offset + 1
			ranges[tp] = r
		}
		if _, err := a.Apply(context.Background(), &apply.Batch{Changes: b, Read: len(b), Ranges: ranges}); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}

// statusFixture writes two tables and their configuration:
//
//   - orders (partitions 0 and 1): keys 1..3 ten days old, key 2 deleted
//     nine days ago, key 1 updated an hour ago; a purge with 7 days of
//     lateness took key 2's tombstone, then a forced zero-hour vacuum
//     deleted the files of the older versions. Partition 1 is 5 behind.
//   - customers: one batch, then the engine halted it (strict schema).
//     Its partition is 8 behind.
func statusFixture(t *testing.T) (cfgPath, root string, ends map[checkpoint.TopicPartition]int64) {
	t.Helper()
	// Relative locations keep the temporary directory's name (and so the
	// column widths) out of the goldens.
	root = t.TempDir()
	t.Chdir(root)
	ctx := context.Background()
	orders := statusApply(t, filepath.Join(root, "orders"), "orders", func(l *apply.Layout) [][]*apply.Change {
		return [][]*apply.Change{
			{statusChange(l, "orders", 0, 0, 1, 1, false, "new", statusT0.Add(-240*time.Hour)),
				statusChange(l, "orders", 0, 1, 2, 2, false, "new", statusT0.Add(-240*time.Hour)),
				statusChange(l, "orders", 1, 0, 3, 3, false, "new", statusT0.Add(-240*time.Hour))},
			{statusChange(l, "orders", 0, 2, 2, 4, true, "", statusT0.Add(-216*time.Hour))},
			{statusChange(l, "orders", 1, 1, 1, 5, false, "paid", statusT0.Add(-time.Hour))},
		}
	})
	quiet := auditLogger(&bytes.Buffer{})
	if _, err := tombstone.Purge(ctx, orders, tombstone.PurgeOptions{MaxLateness: 168 * time.Hour, Now: func() time.Time { return statusT0 }, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	zero := time.Duration(0)
	// Vacuum compares its clock with the files' real modification times:
	// a fixed clock (statusT0) would make the test pass or fail by the time
	// of day it runs.
	if _, err := delta.Vacuum(ctx, orders, delta.VacuumOptions{Retention: &zero, Force: true, Now: func() time.Time { return time.Now().Add(time.Hour) }, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	custDir := filepath.Join(root, "customers")
	statusApply(t, custDir, "customers", func(l *apply.Layout) [][]*apply.Change {
		return [][]*apply.Change{{
			statusChange(l, "customers", 0, 0, 10, 1, false, "gold", statusT0.Add(-90*time.Second)),
			statusChange(l, "customers", 0, 1, 11, 2, false, "silver", statusT0.Add(-30*time.Second)),
		}}
	})
	if err := apply.WriteState(ctx, storage.NewLocal(custDir), apply.TableState{Halted: true, Class: "schema", Version: 0, At: statusT0.Add(-10 * time.Second),
		Reason: "table customers: column status changed from string to int and schema_policy is strict"}); err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(root, "pipeline.yaml")
	cfg := fmt.Sprintf(`pipeline: {id: p}
kafka: {brokers: ["broker:9092"], group: g}
defaults: {max_lateness: 168h}
tables:
  - {name: orders, topic: orders, location: %s, key_columns: [id]}
  - {name: customers, topic: customers, location: %s, key_columns: [id]}
`, "orders", "customers")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ends = map[checkpoint.TopicPartition]int64{
		{Topic: "orders", Partition: 0}:    3,
		{Topic: "orders", Partition: 1}:    7,
		{Topic: "customers", Partition: 0}: 10,
	}
	return cfgPath, root, ends
}

// checkGolden compares got with testdata/status/name, or rewrites it
// with -update.
func checkGolden(t *testing.T, dir, name, got string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the output (run with -update after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestStatusGolden(t *testing.T) {
	goldens, err := filepath.Abs(filepath.Join("testdata", "status"))
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, root, ends := statusFixture(t)
	env := statusEnv{now: func() time.Time { return statusT0 }, offsets: func(seeds []string) status.EndOffsets {
		if len(seeds) != 1 || seeds[0] != "broker:9092" {
			t.Errorf("brokers = %v, want the configuration's", seeds)
		}
		return fixedOffsets{ends: ends}
	}}
	down := statusEnv{now: env.now, offsets: func([]string) status.EndOffsets {
		return fixedOffsets{err: errors.New("unable to dial: connection refused")}
	}}
	for _, tc := range []struct {
		golden string
		env    statusEnv
		args   []string
	}{
		{"config.txt", env, []string{"--config", cfgPath}},
		{"config.json", env, []string{"--config", cfgPath, "--json"}},
		{"table-brokers-down.txt", down, []string{"--table", "orders", "--pipeline", "p", "--brokers", "b1:9092"}},
		{"table-no-brokers.json", env, []string{"--json", "customers"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := statusCommand(context.Background(), tc.args, &out, &errOut, tc.env); err != nil {
				t.Fatalf("status %v: %v\n%s", tc.args, err, errOut.String())
			}
			checkGolden(t, goldens, tc.golden, strings.ReplaceAll(out.String(), root, "$ROOT"))
		})
	}
}

// TestStatusFacts checks the report's key facts directly, so that a
// golden regenerated carelessly cannot hide a wrong answer.
// TestStatusCheckpointsBehind: a table whose log checkpoints stopped
// landing after version 2 (every later one refused, as a full or hung log
// volume would) shows where readers start replaying, and that the
// checkpoints are behind; while they land it does not.
func TestStatusCheckpointsBehind(t *testing.T) {
	dir := t.TempDir()
	store := storage.NewFaulty(storage.NewLocal(dir))
	store.SetRule(func(op storage.Op) storage.Fault {
		if strings.HasSuffix(op.Path, ".checkpoint.parquet") && !strings.Contains(op.Path, "00000000000000000002.checkpoint") {
			return storage.Fail
		}
		return storage.Pass
	})
	batches := func(n int) func(l *apply.Layout) [][]*apply.Change {
		return func(l *apply.Layout) [][]*apply.Change {
			var bs [][]*apply.Change
			for i := 0; i < n; i++ {
				bs = append(bs, []*apply.Change{statusChange(l, "orders", 0, int64(i), int64(i%3), uint64(i+1), false, fmt.Sprint(i), statusT0)})
			}
			return bs
		}
	}
	statusApplyTo(t, store, "orders", map[string]string{"delta.checkpointInterval": "2"}, batches(10))
	gather := func() status.Table {
		t.Helper()
		rep, err := status.Gather(context.Background(), []status.Source{{Name: "orders", Store: storage.NewLocal(dir), Pipeline: "p"}}, status.Options{Now: func() time.Time { return statusT0 }})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Tables[0]
	}
	tbl := gather()
	l := tbl.Log
	if l.CheckpointVersion == nil || *l.CheckpointVersion != 2 || l.CommitsAfter != 7 || l.CheckpointInterval != 2 || !l.CheckpointsBehind {
		t.Fatalf("log %+v (checkpoint %v): want the checkpoint at version 2, 7 commits after it, interval 2, behind", l, l.CheckpointVersion)
	}
	var text bytes.Buffer
	if err := (&status.Report{Tables: []status.Table{tbl}}).WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"checkpoint at version 2, 7 commits after it (one every 2 versions)", "checkpoints behind"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}

	// Checkpoints land again: after the next checkpoint version (10)
	// readers replay one commit, and nothing is behind.
	store.SetRule(func(storage.Op) storage.Fault { return storage.Pass })
	more := func(l *apply.Layout) [][]*apply.Change {
		return [][]*apply.Change{{statusChange(l, "orders", 0, 10, 1, 11, false, "x", statusT0)}, {statusChange(l, "orders", 0, 11, 1, 12, false, "y", statusT0)}}
	}
	statusApplyTo(t, store, "orders", nil, more)
	l = gather().Log
	if l.CheckpointVersion == nil || *l.CheckpointVersion != 10 || l.CommitsAfter != 1 || l.CheckpointsBehind {
		t.Fatalf("log %+v (checkpoint %v) after checkpoints land again: want the checkpoint at version 10, 1 commit after it, not behind", l, l.CheckpointVersion)
	}
}

func TestStatusFacts(t *testing.T) {
	_, root, ends := statusFixture(t)
	ctx := context.Background()
	src := func(name string) status.Source {
		return status.Source{Name: name, Store: storage.NewLocal(filepath.Join(root, name)), Pipeline: "p", Topics: []string{name}, MaxLateness: 168 * time.Hour}
	}
	rep, err := status.Gather(ctx, []status.Source{src("orders"), src("customers")}, status.Options{Now: func() time.Time { return statusT0 }, Offsets: fixedOffsets{ends: ends}})
	if err != nil {
		t.Fatal(err)
	}
	orders, customers := rep.Tables[0], rep.Tables[1]

	// Issue 7: after a forced zero-hour vacuum the old versions are not
	// readable, and a restore to one fails as status says.
	for _, u := range orders.TimeTravel.Unreadable {
		if u.MissingFiles == 0 {
			t.Errorf("version %d unreadable without missing files: %+v", u.Version, u)
		}
	}
	if len(orders.TimeTravel.Unreadable) != 3 || len(orders.TimeTravel.Readable) != 1 || orders.TimeTravel.Readable[0] != (status.VersionRange{From: 3, To: 4}) {
		t.Errorf("time travel = %+v, want 0..2 unreadable, 3..4 readable", orders.TimeTravel)
	}
	if _, err := cli(t, "restore", "--table", filepath.Join(root, "orders"), "--to-version", "0"); !errors.Is(err, delta.ErrFilesMissing) {
		t.Errorf("restore to vacuumed version 0: %v, want ErrFilesMissing", err)
	}

	// Behind on one partition only.
	if !orders.LagKnown || orders.TotalLag != 5 || len(orders.Partitions) != 2 || *orders.Partitions[0].Lag != 0 || *orders.Partitions[1].Lag != 5 {
		t.Errorf("orders lag = %d, partitions %+v", orders.TotalLag, orders.Partitions)
	}
	// Counts from the files: key 2's tombstone was purged; horizon 7 days back.
	if orders.Rows.Live != 2 || orders.Rows.Tombstones != 0 || orders.Horizon == nil || !orders.Horizon.SourceTs.Equal(statusT0.Add(-168*time.Hour)) || orders.Horizon.PurgedRows != 1 {
		t.Errorf("orders rows %+v horizon %+v", orders.Rows, orders.Horizon)
	}
	// The vacuum and purge commits came after the last stream commit.
	if c := orders.LastStreamCommit; c == nil || c.Version != 2 || c.Operation != "MERGE" || c.RecordsRead != 1 || orders.LastCommit.Operation != "VACUUM END" {
		t.Errorf("last commit %+v, last stream commit %+v", orders.LastCommit, orders.LastStreamCommit)
	}
	if orders.Freshness == nil || orders.Freshness.Seconds != 3600 {
		t.Errorf("orders freshness = %+v, want 1h", orders.Freshness)
	}
	if customers.State != "halted" || customers.Halt == nil || !customers.Halt.Current || customers.TotalLag != 8 {
		t.Errorf("customers = %+v", customers)
	}

	// A table not created yet is reported, not fatal to the others.
	rep, err = status.Gather(ctx, []status.Source{src("missing"), src("orders")}, status.Options{Now: func() time.Time { return statusT0 }})
	if err != nil {
		t.Fatal(err)
	}
	if m := rep.Tables[0]; m.State != "unreadable" || !strings.Contains(m.Error, "no Delta table") || rep.Tables[1].State != "running" {
		t.Errorf("missing table: %+v; next: %s", m, rep.Tables[1].State)
	}

	// An engine that opened the table again after the halt, with nothing
	// to commit yet (a quiet table), makes the halt history too.
	custStore := storage.NewLocal(filepath.Join(root, "customers"))
	st, ok, err := apply.ReadState(ctx, custStore)
	if err != nil || !ok {
		t.Fatalf("customers state: %v %v", ok, err)
	}
	resumed := statusT0.Add(-5 * time.Second)
	st.ResumedAt = &resumed
	if err := apply.WriteState(ctx, custStore, st); err != nil {
		t.Fatal(err)
	}
	rep, err = status.Gather(ctx, []status.Source{src("customers")}, status.Options{Now: func() time.Time { return statusT0 }})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if c := rep.Tables[0]; c.State != "running" || c.Halt == nil || c.Halt.Current || c.Halt.Resumed == nil || !c.Halt.Resumed.Equal(resumed) ||
		!strings.Contains(text.String(), "last halt") || !strings.Contains(text.String(), "an engine resumed the table at") {
		t.Errorf("resumed without a commit: state %s halt %+v\n%s", c.State, c.Halt, text.String())
	}

	// A commit after the halt means the table ran again: the halt is
	// history, the state is running.
	statusApplyMore(t, filepath.Join(root, "customers"))
	rep, err = status.Gather(ctx, []status.Source{src("customers")}, status.Options{Now: func() time.Time { return statusT0 }})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Tables[0]; c.State != "running" || c.Halt == nil || c.Halt.Current || c.LagKnown || rep.Brokers != "not configured" {
		t.Errorf("after a later commit: state %s halt %+v lagKnown %v brokers %s", c.State, c.Halt, c.LagKnown, rep.Brokers)
	}
}

// statusApplyMore commits one more change to the customers table.
func statusApplyMore(t *testing.T, dir string) {
	t.Helper()
	store := storage.NewLocal(dir)
	tbl := delta.Open(store, delta.Clock(func() time.Time { return statusT0 }))
	a := apply.NewTableApplier("customers", "p", tbl, func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := a.Layout()
	c := statusChange(l, "customers", 0, 2, 12, 3, false, "bronze", statusT0)
	tp := checkpoint.TopicPartition{Topic: "customers"}
	if _, err := a.Apply(context.Background(), &apply.Batch{Changes: []*apply.Change{c}, Read: 1, Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: 2, Next: 3}}}); err != nil {
		t.Fatal(err)
	}
}

// TestStatusBrokers asks a real (in-process) Kafka for high watermarks,
// including a partition the table never applied, then an unreachable
// broker, which makes lag unknown instead of failing.
func TestStatusBrokers(t *testing.T) {
	_, root, _ := statusFixture(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for p, n := range []int{3, 9, 4} {
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: int32(p), Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, _ := statusReport(t, "--table", filepath.Join(root, "orders"), "--pipeline", "p", "--brokers", strings.Join(c.ListenAddrs(), ","))
	// Partition 0: next 3 of 3; partition 1: next 2 of 9; partition 2:
	// never applied, 4 records.
	tb := rep.Tables[0]
	if rep.Brokers != "reachable" || !tb.LagKnown || tb.TotalLag != 11 || len(tb.Partitions) != 3 || tb.Partitions[2].HasPosition || *tb.Partitions[2].Lag != 4 {
		t.Fatalf("brokers %s table %+v", rep.Brokers, tb)
	}

	if len(tb.Topics) != 0 {
		t.Errorf("topics %+v in a table that recorded none", tb.Topics)
	}

	// Retention deletes offsets 0..4 of partition 1, whose next offset to
	// apply is 2: offsets 2..4 are gone before the table applied them.
	dr, err := kadm.NewClient(cl).DeleteRecords(ctx, kadm.Offsets{"orders": {1: {At: 5}}})
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--table", filepath.Join(root, "orders"), "--pipeline", "p", "--brokers", strings.Join(c.ListenAddrs(), ",")}
	rep, _ = statusReport(t, args...)
	for i, want := range []struct{ start, gone int64 }{{0, 0}, {5, 3}, {0, 0}} {
		if p := rep.Tables[0].Partitions[i]; p.LogStart == nil || *p.LogStart != want.start || p.Gone != want.gone {
			t.Errorf("partition %d: %+v, want log start %d and %d gone", i, p, want.start, want.gone)
		}
	}
	text, err := cli(t, append([]string{"status"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "offset gap: orders/1: offsets 2..4 were deleted by retention before they were applied (3 records)") || strings.Count(text, "offset gap:") != 1 {
		t.Errorf("status text with an offset gap:\n%s", text)
	}

	// The table records the topic's ID (as an engine's first commit
	// does): the same ID as the cluster's, then another one, as if the
	// topic had been deleted and created again since.
	td, err := kadm.NewClient(cl).ListTopics(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	id := apply.FormatTopicID(td["orders"].ID)
	for _, tc := range []struct {
		recorded  string
		recreated bool
	}{{id, false}, {"old-topic-id", true}} {
		tbl := delta.Open(storage.NewLocal(filepath.Join(root, "orders")))
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := apply.TopicsDomainAction(map[string]string{"orders": tc.recorded})
		if err != nil {
			t.Fatal(err)
		}
		tx := tbl.Begin(snap)
		tx.SetDomain(d)
		if _, err := tx.Commit(ctx, "SET TOPIC IDS", nil); err != nil {
			t.Fatal(err)
		}
		args := []string{"status", "--table", filepath.Join(root, "orders"), "--pipeline", "p", "--brokers", strings.Join(c.ListenAddrs(), ",")}
		rep, _ := statusReport(t, args[1:]...)
		tb := rep.Tables[0]
		want := []status.Topic{{Name: "orders", Recorded: tc.recorded, Cluster: id, Recreated: tc.recreated}}
		if fmt.Sprint(tb.Topics) != fmt.Sprint(want) || tb.LagKnown == tc.recreated {
			t.Errorf("recorded %s: topics %+v lag known %v, want %+v and lag known %v", tc.recorded, tb.Topics, tb.LagKnown, want, !tc.recreated)
		}
		text, err := cli(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "topic recreated") != tc.recreated || tc.recreated && !strings.Contains(text, "the cluster's topic ID is "+id+", the table's positions were read from old-topic-id") {
			t.Errorf("recorded %s, text:\n%s", tc.recorded, text)
		}
	}

	start := time.Now()
	out, err := cli(t, "status", "--table", filepath.Join(root, "orders"), "--brokers", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "brokers unreachable") || !strings.Contains(out, "unknown") {
		t.Errorf("status with a down broker:\n%s", out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("status with a down broker took %s", d)
	}
}

// TestStatusGroupMembers runs two engines in one group (static members
// s-0 and s-1) over a three-partition topic on an in-process Kafka and
// asks `cdcapply status --config` who reads what: both members with their
// instance ids, none unassigned. Under kafka.assignment: partitions the
// partitions are split between them, and status names the table read by
// both; under tables one member reads all three. A group named on the
// command line that has no members lists every partition as unassigned.
func TestStatusGroupMembers(t *testing.T) {
	for _, assignment := range []string{apply.AssignPartitions, apply.AssignTables} {
		t.Run(assignment, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			statusGroupMembers(t, c.ListenAddrs(), "", assignment)
		})
	}
}

// TestStatusGroupMembersRealKafka is the same against a real Apache Kafka
// broker (CDCAPPLY_KAFKA_BROKERS), on a fresh topic and group.
func TestStatusGroupMembersRealKafka(t *testing.T) {
	b := realBrokers(t)
	for _, assignment := range []string{apply.AssignPartitions, apply.AssignTables} {
		t.Run(assignment, func(t *testing.T) {
			statusGroupMembers(t, b, fmt.Sprintf("members%d", time.Now().UnixNano()), assignment)
		})
	}
}

// statusGroupMembers is TestStatusGroupMembers on brokers under
// kafka.assignment; server names the topics ("" keeps the default).
func statusGroupMembers(t *testing.T, brokers []string, server, assignment string) {
	wcfg := workload.Default()
	wcfg.Events, wcfg.Keys, wcfg.SnapshotKeys, wcfg.Partitions = 2000, 500, 200, 3
	if server != "" {
		wcfg.Server = server
	}
	g, _ := produceStream(t, brokers, wcfg, 1000)
	ctx := context.Background()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "pipeline.yaml")
	yaml := fmt.Sprintf(`pipeline: {id: members}
kafka: {brokers: [%s], group: members-test%s, assignment: %s}
defaults: {flush: {max_latency: 100ms}}
tables:
  - {name: orders, topic: %s, location: %s/orders, key_columns: [id]}
`, brokers[0], server, assignment, g.Topic(), dir)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s-0", "s-1"} {
		cfg, err := apply.LoadConfig(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Kafka.InstanceID = id
		e, err := apply.NewEngine(cfg, apply.Logger(auditLogger(&bytes.Buffer{})))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- e.Run(rctx) }()
		defer func() {
			cancel()
			if err := <-ran; err != nil {
				t.Error(err)
			}
		}()
	}
	var rep status.Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var out string
		rep, out = statusReport(t, "--config", cfgPath)
		if gr := rep.Group; gr != nil && gr.State == "Stable" && len(gr.Members) == 2 && len(gr.Unassigned) == 0 && len(rep.Tables[0].Partitions) == 3 &&
			(assignment == apply.AssignTables || len(gr.Split) == 1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group never showed two members reading the three partitions:\n%s", out)
		}
	}
	read := map[string]string{}
	reading := 0
	for _, m := range rep.Group.Members {
		if m.InstanceID != "s-0" && m.InstanceID != "s-1" {
			t.Errorf("member %+v: want instance s-0 or s-1", m)
		}
		if len(m.Partitions) > 0 {
			reading++
		}
		for _, p := range m.Partitions {
			if other, ok := read[p]; ok {
				t.Errorf("%s read by %s and %s", p, other, m.InstanceID)
			}
			read[p] = m.InstanceID
		}
	}
	for p := range 3 {
		if tp := fmt.Sprintf("%s/%d", g.Topic(), p); read[tp] == "" {
			t.Errorf("%s read by no member: %+v", tp, rep.Group)
		}
	}
	text, err := cli(t, "status", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status text", text, "consumer group members-test"+server+": Stable, 2 members", "s-0", "s-1")
	switch assignment {
	case apply.AssignTables:
		// One writer: the other member waits, holding nothing.
		if reading != 1 || len(rep.Group.Split) != 0 || rep.Group.Protocol != "cdcapply-tables" {
			t.Errorf("under tables: %d members reading, split %v, protocol %q; want 1, none, cdcapply-tables", reading, rep.Group.Split, rep.Group.Protocol)
		}
		mustContain(t, "status text", text, "assigned by cdcapply-tables")
	default:
		if reading != 2 || rep.Group.Protocol != "cooperative-sticky" || len(rep.Group.Split) != 1 ||
			rep.Group.Split[0].Table != "orders" || fmt.Sprint(rep.Group.Split[0].Members) != "[s-0 s-1]" {
			t.Errorf("under partitions: %d members reading, split %+v, protocol %q; want 2, orders by [s-0 s-1], cooperative-sticky", reading, rep.Group.Split, rep.Group.Protocol)
		}
		mustContain(t, "status text", text, "table orders is read by 2 members (s-0, s-1)")
	}

	rep, _ = statusReport(t, "--config", cfgPath, "--group", "nobody"+server)
	if gr := rep.Group; gr == nil || len(gr.Members) != 0 || len(gr.Unassigned) != 3 {
		t.Errorf("a group without members: %+v, want every partition unassigned", rep.Group)
	}
}

// statusReport runs `cdcapply status ARGS --json` and returns the report
// and the JSON it was read from.
func statusReport(t *testing.T, args ...string) (status.Report, string) {
	t.Helper()
	out, err := cli(t, append(append([]string{"status"}, args...), "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return rep, out
}

// TestStatusCompactedTopics: a table reading a compacted topic while it
// skips Kafka tombstones (the default) is named with the deletes it loses;
// one whose topic is not compacted is not. Named by its location, whose
// setting status cannot know, the table's compacted topic is still shown.
func TestStatusCompactedTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	statusCompactedTopics(t, c.ListenAddrs())

	// By location: the fixture's table recorded positions on orders, now
	// a compacted topic; its kafka_tombstones is not known.
	_, root, _ := statusFixture(t)
	if err := c.CreateTopic("orders", 2, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--table", filepath.Join(root, "orders"), "--pipeline", "p", "--brokers", c.ListenAddrs()[0]}
	rep, _ := statusReport(t, args...)
	want := []status.CompactedTopic{{Topic: "orders", CleanupPolicy: "compact"}}
	if got := rep.Tables[0].Compacted; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("orders by location: compacted %+v, want %+v", got, want)
	}
	text, err := cli(t, append([]string{"status"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status text", text, "orders (cleanup.policy=compact): under kafka_tombstones: skip (the default) deletes the log cleaner reduced to tombstones are lost")
}

// TestStatusCompactedTopicsRealKafka is the same against a real Apache
// Kafka broker (CDCAPPLY_KAFKA_BROKERS), whose topic configs list every
// setting with its source.
func TestStatusCompactedTopicsRealKafka(t *testing.T) {
	b := realBrokers(t)
	statusCompactedTopics(t, b)
}

func statusCompactedTopics(t *testing.T, brokers []string) {
	_, root, _ := statusFixture(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := time.Now().UnixNano()
	compacted, plain := fmt.Sprintf("compacted-%d", n), fmt.Sprintf("plain-%d", n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for topic, policy := range map[string]string{compacted: "compact,delete", plain: "delete"} {
		resp, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr(policy)}, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	cfgPath := filepath.Join(root, "compacted.yaml")
	cfg := fmt.Sprintf(`pipeline: {id: p}
kafka: {brokers: [%s], group: g}
tables:
  - {name: orders, topic: %s, location: orders, key_columns: [id]}
  - {name: customers, topic: %s, location: customers, key_columns: [id]}
`, brokers[0], compacted, plain)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The fixture's own topics (orders, customers) are not in the
	// cluster, or not compacted: only the configured ones count.
	ours := func(cs []status.CompactedTopic) []status.CompactedTopic {
		var out []status.CompactedTopic
		for _, c := range cs {
			if c.Topic == compacted || c.Topic == plain {
				out = append(out, c)
			}
		}
		return out
	}
	rep, _ := statusReport(t, "--config", cfgPath)
	want := []status.CompactedTopic{{Topic: compacted, CleanupPolicy: "compact,delete", DeletesLost: true}}
	if got := ours(rep.Tables[0].Compacted); fmt.Sprint(got) != fmt.Sprint(want) || rep.Tables[0].KafkaTombstones != "skip" {
		t.Errorf("orders: compacted %+v under %q, want %+v under skip", got, rep.Tables[0].KafkaTombstones, want)
	}
	if got := ours(rep.Tables[1].Compacted); len(got) != 0 {
		t.Errorf("customers (cleanup.policy=delete): compacted %+v", got)
	}
	text, err := cli(t, "status", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "status text", text, "compacted topic", compacted+" (cleanup.policy=compact,delete) and the table skips Kafka tombstones")
}

// realBrokers returns the brokers of the real Apache Kafka broker that
// scripts/kafka.sh started (CDCAPPLY_KAFKA_BROKERS). Without one the tests
// skip on a developer's machine and fail under CI=true.
func realBrokers(t *testing.T) []string {
	t.Helper()
	b := os.Getenv("CDCAPPLY_KAFKA_BROKERS")
	if b == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no real Kafka broker (CDCAPPLY_KAFKA_BROKERS)")
		}
		t.Skip("no real Kafka broker (start one with scripts/kafka.sh start and set CDCAPPLY_KAFKA_BROKERS)")
	}
	return strings.Split(b, ",")
}
