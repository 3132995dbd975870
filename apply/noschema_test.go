package apply

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// stripSchema turns a JsonConverter record with schemas.enable=true into
// what the converter writes with schemas.enable=false: the payload alone.
func stripSchema(t *testing.T, b []byte) []byte {
	t.Helper()
	var env struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	return env.Payload
}

func noSchemaConfig(t *testing.T, brokers []string, dir, columns string) *Config {
	t.Helper()
	yaml := `
pipeline: {id: shop}
kafka: {brokers: [` + strings.Join(brokers, ", ") + `], group: noschema}
defaults: {flush: {max_latency: 50ms}}
tables:
  - name: orders
    topic: orders
    location: ` + dir + `/orders
    format: json-noschema
` + columns
	cfg, err := ParseConfig("noschema.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestEngineJSONNoSchema: records without an inline schema are typed by
// the table's declared columns, then by the table's own schema; a column
// nobody declared halts the table (nothing quarantined) and, once
// declared, a restart resumes from the table's positions and converges.
func TestEngineJSONNoSchema(t *testing.T) {
	c, p := kfakeOrders(t)
	send := func(k, v []byte) { p.send(stripSchema(t, k), stripSchema(t, v), 0) }
	dir := t.TempDir()

	// Without columns and without a table there is nothing to type with.
	e, err := NewEngine(noSchemaConfig(t, c.ListenAddrs(), dir, ""), Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "table orders: format json-noschema needs columns") {
		t.Fatalf("engine without columns for a new schema-less table: got %v", err)
	}

	o := ordersOracle{}
	for i, ch := range []struct {
		id     int
		op, st string
	}{{1, "c", "new"}, {2, "c", "new"}, {1, "u", "paid"}, {2, "d", ""}, {3, "c", "new"}} {
		k, v := dbzOrders(ch.id, int64(10+i), ch.op, ch.st)
		send(k, v)
		o.apply(ch.id, ch.op, ch.st)
	}
	declared := "    columns: [{name: id, type: integer}, {name: status, type: string}]\n"
	// catchUp runs the engine until the table holds the whole topic and
	// compares the table with the oracle.
	catchUp := func(declared, what string) {
		t.Helper()
		_, stop := startEngineWith(t, noSchemaConfig(t, c.ListenAddrs(), dir, declared))
		waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
		stop()
		if got, want := readOrders(t, dir+"/orders"), o.rows(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
		}
	}
	catchUp(declared, "schema-less table")

	// A source column added without declaring it: the table halts at that
	// record instead of quarantining the rest of the stream.
	note := "gift"
	k, v := dbzOrdersNote(3, 20, "u", "paid", &note)
	send(k, v)
	stuckAt := p.ends[0]
	e2, stop2 := startEngineWith(t, noSchemaConfig(t, c.ListenAddrs(), dir, declared))
	// The halt's state file is the signal (Halted is read once the engine
	// has stopped: it belongs to the engine's goroutine while it runs).
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok, _ := ReadState(context.Background(), storage.NewLocal(dir+"/orders")); ok && st.Halted {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop2()
	halted := e2.Halted()["orders"]
	if halted == nil || !strings.Contains(halted.Error(), `"note"`) || !strings.Contains(halted.Error(), "offset 5") {
		t.Fatalf("undeclared column: want a halt naming the column and the offset, got %v", halted)
	}
	snap, err := delta.Open(storage.NewLocal(dir + "/orders")).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pos, _ := checkpoint.Restore(snap, "shop").Next(checkpoint.TopicPartition{Topic: "orders", Partition: 0}); pos != stuckAt-1 {
		t.Fatalf("the halted table moved to position %d, want %d (before the record with the new column)", pos, stuckAt-1)
	}

	// Declared: the restart applies it, and the table's schema types the
	// old columns from now on (the declaration may keep or drop them).
	o.apply(3, "u", "paid")
	catchUp("    columns: [{name: note, type: string}]\n", "after declaring the new column")
	st, ok, err := ReadState(context.Background(), storage.NewLocal(dir+"/orders"))
	if err != nil || !ok || !st.Halted || st.ResumedAt == nil || st.ResumedAt.Before(st.At) || !strings.Contains(st.Reason, `"note"`) {
		t.Fatalf("after the restart: the halt kept and marked resumed after it, got %+v (recorded %v, %v)", st, ok, err)
	}

	// A restart with nothing to commit (a quiet table) marks a recorded
	// halt resumed too, without a commit: status no longer shows it as
	// current (a later halt would record a new one).
	store := storage.NewLocal(dir + "/orders")
	before, err := delta.Open(store).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	halt := TableState{Halted: true, Class: "schema", Reason: "test halt", At: time.Now().UTC().Add(-time.Minute), Version: before.Version}
	if err := WriteState(context.Background(), store, halt); err != nil {
		t.Fatal(err)
	}
	_, stop5 := startEngineWith(t, noSchemaConfig(t, c.ListenAddrs(), dir, "    columns: [{name: note, type: string}]\n"))
	deadline = time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if st, _, _ = ReadState(context.Background(), store); st.ResumedAt != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop5()
	after, err := delta.Open(store).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.ResumedAt == nil || st.Reason != halt.Reason || !st.At.Equal(halt.At) || after.Version != before.Version {
		t.Fatalf("quiet restart: want the halt marked resumed and no commit, got %+v, version %d -> %d", st, before.Version, after.Version)
	}

	// A declaration that contradicts the table is refused at start.
	e4, err := NewEngine(noSchemaConfig(t, c.ListenAddrs(), dir, "    columns: [{name: id, type: string}]\n"), Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := e4.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "column id is integer in the table but declared string") {
		t.Fatalf("contradicting declaration: got %v", err)
	}
}
