package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
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
	store := storage.NewLocal(dir)
	tbl := delta.Open(store, delta.Clock(func() time.Time { return statusT0 }))
	layout, err := apply.NewLayout([]delta.StructField{{Name: "id", Type: delta.Long}, {Name: "status", Type: delta.String, Nullable: true}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	a := apply.NewTableApplier(name, "p", tbl, func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(layout); err != nil {
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
	if _, err := delta.Vacuum(ctx, orders, delta.VacuumOptions{Retention: &zero, Force: true, Now: func() time.Time { return statusT0.Add(time.Hour) }, Logger: quiet}); err != nil {
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
