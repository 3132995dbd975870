package apply

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

func loadRecord(id int, lsn int64, op, status string, offset int64) debezium.Record {
	k, v := dbzOrders(id, lsn, op, status)
	return debezium.Record{Topic: "snapshot", Partition: 0, Offset: offset, Key: k, Value: v}
}

// TestEngineLoad seeds a table with Load, then runs the engine on the
// topic: the loaded rows take part in the sequence guard like rows the
// engine wrote (an older change is stale, newer ones apply), Load commits
// no Kafka position (the engine reads the topic from its start), and a
// bad record fails the whole Load with its position and commits nothing.
func TestEngineLoad(t *testing.T) {
	ctx := context.Background()
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	table := dir + "/orders"
	cfg := testConfig(t, c.ListenAddrs(), dir)
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}

	bad := []debezium.Record{loadRecord(1, 10, "r", "a", 0), {Topic: "snapshot", Partition: 2, Offset: 7, Key: []byte(`{}`), Value: []byte(`{not json`)}}
	if _, err := e.Load(ctx, "orders", bad); err == nil || !strings.Contains(err.Error(), "table orders: topic snapshot partition 2 offset 7") {
		t.Fatalf("Load of a bad record: %v, want an error naming table, topic, partition and offset", err)
	}
	if _, err := delta.Open(storage.NewLocal(table)).Snapshot(ctx); err == nil {
		t.Fatal("a failed Load committed a table version")
	}
	if _, err := e.Load(ctx, "nope", bad[:1]); err == nil {
		t.Fatal("Load into a table the pipeline lacks succeeded")
	}

	first := []debezium.Record{loadRecord(1, 10, "r", "a", 0), loadRecord(2, 10, "r", "b", 1)}
	if _, err := e.Load(ctx, "orders", first); err != nil {
		t.Fatal(err)
	}
	res, err := e.Load(ctx, "orders", []debezium.Record{loadRecord(3, 10, "r", "c", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || res.Counts.Insert != 1 {
		t.Fatalf("second Load: version %d, %d inserted; want version 1, 1 inserted", res.Version, res.Counts.Insert)
	}
	snap, err := delta.Open(storage.NewLocal(table)).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pos := checkpoint.Restore(snap, "shop"); len(pos.Sorted()) != 0 {
		t.Fatalf("Load committed Kafka positions %v", pos.Sorted())
	}

	p.change(1, 20, "u", "paid")
	p.change(2, 21, "d", "")
	p.change(3, 5, "u", "older") // older than the loaded row: stale
	p.change(4, 22, "c", "d")
	_, stop := startEngineWith(t, cfg)
	defer stop()
	waitPositions(t, table, "shop", "orders", p.ends)
	if got, want := deltaRSStates(t, table), "[1 paid false 2 b true 3 c false 4 d false]"; got != want {
		t.Errorf("delta-rs reads %v, want %v", got, want)
	}
}
