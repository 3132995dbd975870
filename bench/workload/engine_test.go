package workload_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestEngineThroughKafkaEqualsOracle produces a generated stream into an
// in-process Kafka (kfake) and runs the real engine on it: the table ends
// equal to the oracle and the commits account for every record.
func TestEngineThroughKafkaEqualsOracle(t *testing.T) {
	cfg := propertyConfig(22) // even: heartbeats travel on the table's topic
	cfg.Events = 3000
	g, err := workload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := workload.CreateTopics(ctx, cl, g, 1); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	yaml := fmt.Sprintf(`
pipeline: {id: wl}
kafka: {brokers: [%s], group: workload-test}
defaults: {flush: {max_latency: 30ms, max_records: 250}}
tables:
  - {name: orders, topic: %s, location: %s/orders}
`, cluster.ListenAddrs()[0], g.Topic(), dir)
	ecfg, err := apply.ParseConfig("workload.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e, err := apply.NewEngine(ecfg, apply.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	// Small produce batches with pauses let the engine commit while the
	// stream is still arriving, so batches end in many places.
	st, err := workload.Produce(ctx, cl, g, 100, func(workload.ProduceStats) { time.Sleep(10 * time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Moved != 0 {
		t.Fatalf("%d records not at their predicted offsets", st.Moved)
	}
	// The end offset of each partition is one past the last record there.
	ends := map[int32]int64{}
	regen, err := workload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ev workload.Event
	for regen.Next(&ev) {
		if ev.Record.Topic == g.Topic() {
			ends[ev.Record.Partition] = ev.Record.Offset + 1
		}
	}

	table := storage.NewLocal(dir + "/orders")
	var snap *delta.Snapshot
	for deadline := time.Now().Add(90 * time.Second); ; {
		snap, err = delta.Open(table).Snapshot(ctx)
		if err == nil {
			pos := checkpoint.Restore(snap, "wl")
			caught := true
			for p, end := range ends {
				if next, _ := pos.Next(checkpoint.TopicPartition{Topic: g.Topic(), Partition: p}); next < end {
					caught = false
				}
			}
			if caught {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table did not reach the end offsets %v (halted: %v, last error %v)", ends, e.Halted(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	diff, err := workload.Verify(ctx, table, g.Oracle(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.OK() {
		t.Fatalf("table differs from the oracle: %s", diff)
	}
	t.Logf("version %d: %s", snap.Version, diff)
	var read, applied, stale, skipped, quarantined int64
	for v := int64(0); v <= snap.Version; v++ {
		acts, err := delta.Open(table).ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.CommitInfo == nil {
				continue
			}
			n := func(k string) int64 {
				x, _ := a.CommitInfo.OperationParameters[k].(float64)
				return int64(x)
			}
			read += n("recordsRead")
			applied += n("recordsApplied")
			stale += n("recordsStale")
			skipped += n("recordsSkipped")
			quarantined += n("recordsQuarantined")
		}
	}
	c := g.Oracle().Counts()
	if read != c.TableRecords || read != applied+stale+skipped+quarantined || quarantined != 0 ||
		skipped != c.SkippedRecords() || applied+stale != c.ChangeRecords {
		t.Errorf("commits account read %d = applied %d + stale %d + skipped %d + quarantined %d; stream has %d records, %d skippable, %d changes",
			read, applied, stale, skipped, quarantined, c.TableRecords, c.SkippedRecords(), c.ChangeRecords)
	}
}
