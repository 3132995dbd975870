package apply

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOffsetGapKfake: offsets deleted by retention before the table
// applied them, and a log that ends before the table's position, on kfake.
func TestOffsetGapKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runOffsetGap(t, c.ListenAddrs(), "orders", startEngine)
}

// TestRealKafkaOffsetGap is TestOffsetGapKfake on a real broker.
func TestRealKafkaOffsetGap(t *testing.T) {
	brokers := realBrokers(t)
	runOffsetGap(t, brokers, realTopic(t, brokers, 1), startEngineWith)
}

// runOffsetGap applies offsets 0..9, then lets "retention" delete 10..14
// before a restart (DeleteRecords): under on_offset_gap fail the table
// halts naming the lost offsets and changes nothing; under skip it applies
// 15..19 and logs what it skipped. Then the table's position is put past
// the log's end (as an unclean leader election's truncation leaves it):
// the halt says the log ends before it.
func runOffsetGap(t *testing.T, brokers []string, topic string, start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	p := &producer{t: t, cl: cl, topic: topic, nparts: 1, ends: map[int32]int64{}}
	dir := t.TempDir()
	table := filepath.Join(dir, "orders")
	cfg := testConfigFor(t, brokers, dir, topic, topic+"-group")
	version := func() int64 {
		t.Helper()
		snap, err := delta.Open(storage.NewLocal(table)).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Version
	}
	o := ordersOracle{}
	_, stop := start(t, cfg)
	updates(p, o, 0, 10)
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	stop()
	before := version()

	updates(p, ordersOracle{}, 10, 15) // deleted before they are applied
	updates(p, o, 15, 20)
	dr, err := kadm.NewClient(cl).DeleteRecords(ctx, kadm.Offsets{topic: {0: {At: 15}}})
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}

	e, stop := start(t, cfg)
	waitHalt(t, e, "orders", "offsets 10..14 were deleted by retention before they were applied", "the log starts at 15", "5 records lost")
	time.Sleep(300 * time.Millisecond)
	stop()
	if v := version(); v != before {
		t.Errorf("the halted table moved from version %d to %d", before, v)
	}

	skip := *cfg
	skip.Kafka.OnOffsetGap = "skip"
	var log syncBuffer
	_, stop = start(t, &skip, Logger(slog.New(slog.NewTextHandler(&log, nil))))
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	stop()
	sameAsOracle(t, table, o, "after skipping offsets 10..14")
	if l := log.String(); !strings.Contains(l, "skipping offsets deleted by retention") || !strings.Contains(l, "from=10 to=14 skipped=5") {
		t.Errorf("the skip is not logged with its offsets:\n%s", l)
	}

	// The table's position past the log's end (20).
	tbl := delta.Open(storage.NewLocal(table))
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.Begin(snap)
	tx.SetTxn(checkpoint.AppID("shop", checkpoint.TopicPartition{Topic: topic, Partition: 0}), 25)
	if _, err := tx.Commit(ctx, "TEST POSITION", nil); err != nil {
		t.Fatal(err)
	}
	e, stop = start(t, cfg)
	defer stop()
	waitHalt(t, e, "orders", fmt.Sprintf("topic %s partition 0: the log ends at offset 20, before the next offset to apply (25)", topic), "truncated", "offsets 20..24 would be skipped")
}

// waitHalt waits for the engine to halt table and returns the error,
// which must say each of want.
func waitHalt(t *testing.T, e *Engine, table string, want ...string) error {
	t.Helper()
	var got error
	waitFor(t, "table "+table+" to halt", func() bool {
		got = e.Halted()[table]
		return got != nil
	})
	t.Logf("halted: %v", got)
	for _, w := range want {
		if !strings.Contains(got.Error(), w) {
			t.Errorf("halt %q does not say %q", got, w)
		}
	}
	return got
}
