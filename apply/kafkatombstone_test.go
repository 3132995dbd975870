package apply

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tombstone sends a Kafka tombstone (a null value) for id's key.
func (p *producer) tombstone(id int) {
	p.t.Helper()
	k, _ := dbzOrders(id, 0, "c", "")
	p.send(k, nil, 0)
}

// TestKafkaTombstonesCompacted: a table behind the log cleaner of a
// compacted topic. While the engine is stopped, rows are deleted (a
// delete event and its tombstone) and the cleaner removes each delete
// event, superseded by its tombstone: the restarted engine meets the
// deletes as tombstones alone. Under kafka_tombstones: skip the deleted
// rows stay live (the loss the setting exists for); under delete the
// table is the oracle's, in both write modes, read by delta-rs too.
func TestKafkaTombstonesCompacted(t *testing.T) {
	for _, mode := range []string{"copy-on-write", "merge-on-read"} {
		for _, tombs := range []string{"skip", "delete"} {
			t.Run(mode+"/"+tombs, func(t *testing.T) {
				c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := c.CreateTopic("orders", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
					t.Fatal(err)
				}
				runCompacted(t, c.ListenAddrs(), "orders", mode, tombs, c.Compact, startEngine)
			})
		}
	}
}

// TestRealKafkaTombstonesCompacted is TestKafkaTombstonesCompacted on a
// real broker, whose log cleaner compacts the topic (segments rolled
// every 100 ms, any dirty ratio cleaned; scripts/kafka.sh runs the
// cleaner every 0.5 s).
func TestRealKafkaTombstonesCompacted(t *testing.T) {
	brokers := realBrokers(t)
	for _, mode := range []string{"copy-on-write", "merge-on-read"} {
		for _, tombs := range []string{"skip", "delete"} {
			t.Run(mode+"/"+tombs, func(t *testing.T) {
				topic := realTopicWith(t, brokers, 1, map[string]*string{
					"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("100"),
					"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"), "min.compaction.lag.ms": kadm.StringPtr("0"),
				})
				runCompacted(t, brokers, topic, mode, tombs, func() {}, startEngineWith)
			})
		}
	}
}

// runCompacted applies inserts of ids 1..5, then, with the engine
// stopped, deletes ids 2, 4 and 5 (4 inserted again), updates 3, and has
// the topic compacted (compact; then waits for the cleaner's result).
func runCompacted(t *testing.T, brokers []string, topic, mode, tombs string, compact func(), start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := &producer{t: t, cl: cl, topic: topic, nparts: 1, ends: map[int32]int64{}}
	dir := t.TempDir()
	table := filepath.Join(dir, "orders")
	cfg := testConfigFor(t, brokers, dir, topic, topic+"-g")
	cfg.Tables[0].WriteMode = mode
	cfg.Tables[0].KafkaTombstones = tombs

	o := ordersOracle{}
	change := func(id int, lsn int64, op, status string) {
		p.change(id, lsn, op, status)
		o.apply(id, op, status)
	}
	for id := 1; id <= 5; id++ {
		change(id, int64(100+id), "c", "new")
	}
	var log syncBuffer
	_, stop := start(t, cfg, Logger(slog.New(slog.NewTextHandler(&log, nil))))
	waitPositionsFor(t, table, topic, p.ends, time.Minute)
	stop()
	// The warning is given under skip only, naming the table and topic.
	warned := strings.Contains(log.String(), "the table's topic is compacted and kafka_tombstones is skip") && strings.Contains(log.String(), "topic="+topic)
	if warned != (tombs == "skip") {
		t.Errorf("kafka_tombstones %s: warned of the compacted topic: %v\n%s", tombs, warned, log.String())
	}

	change(2, 200, "d", "")
	p.tombstone(2)
	change(3, 201, "u", "paid")
	change(4, 202, "d", "")
	p.tombstone(4)
	change(4, 203, "c", "again") // inserted again: the tombstone is compacted too
	change(5, 204, "d", "")
	p.tombstone(5)
	time.Sleep(300 * time.Millisecond) // past segment.ms: the next record rolls a segment
	change(6, 205, "c", "new")         // the active segment, never compacted
	compact()
	var left string
	deadline := time.Now().Add(90 * time.Second)
	for {
		left = compactedOps(t, brokers, topic)
		if !strings.Contains(left, "2:d") && !strings.Contains(left, "5:d") && strings.Contains(left, "2:tombstone") && strings.Contains(left, "5:tombstone") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("compaction did not leave the deletes as tombstones alone: %s", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the topic after compaction: %s", left)

	e, stop := start(t, cfg)
	defer stop()
	waitPositionsFor(t, table, topic, p.ends, time.Minute)
	if h := e.Halted()["orders"]; h != nil {
		t.Fatalf("halted: %v", h)
	}
	if tombs == "delete" {
		sameAsOracle(t, table, o, "after the compacted deletes")
		if _, got := queryEngineRows(t, table); fmt.Sprint(got) != fmt.Sprint(o.rows()) {
			t.Errorf("delta-rs reads\n%v\nwant\n%v", got, o.rows())
		}
		return
	}
	// skip: the rows whose delete events the cleaner removed stay live.
	if got := strings.Join(readOrders(t, table), "; "); !strings.Contains(got, "2 new false") || !strings.Contains(got, "5 new false") {
		t.Errorf("under skip the compacted deletes were applied: %s", got)
	}
}

// compactedOps reads topic from the start: each record as "id:op"
// ("id:tombstone" for a null value), up to id 6's insert.
func compactedOps(t *testing.T, brokers []string, topic string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ops []string
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			id := string(r.Key[strings.LastIndex(string(r.Key), ":")+1 : len(r.Key)-2])
			switch {
			case r.Value == nil:
				ops = append(ops, id+":tombstone")
			default:
				i := strings.Index(string(r.Value), `"op":"`)
				ops = append(ops, id+":"+string(r.Value[i+6:i+7]))
			}
		})
		if strings.Contains(strings.Join(ops, " "), "6:c") {
			break
		}
	}
	return strings.Join(ops, " ")
}

// TestKafkaTombstonesAlone: kafka_tombstones: delete on a stream whose
// deletes are tombstones alone (as ExtractNewRecordState sends them by
// default), in both write modes: a tombstone deletes the row it follows
// in the batch or in the table, keeping its last values; one for a key
// the table never held writes nothing; a change before it replayed after
// it is stale; a row inserted again after it is live. Read back by our
// reader and by delta-rs.
func TestKafkaTombstonesAlone(t *testing.T) {
	for _, mode := range []string{"copy-on-write", "merge-on-read"} {
		t.Run(mode, func(t *testing.T) {
			p, cfg, table := ordersOnKfake(t)
			cfg.Tables[0].WriteMode = mode
			cfg.Tables[0].KafkaTombstones = "delete"
			e, stop := startEngine(t, cfg)
			defer stop()
			o := ordersOracle{}
			change := func(id int, lsn int64, op, status string) {
				p.change(id, lsn, op, status)
				o.apply(id, op, status)
			}
			step := func(when string) {
				t.Helper()
				waitPositionsFor(t, table, "orders", p.ends, time.Minute)
				if h := e.Halted()["orders"]; h != nil {
					t.Fatalf("halted %s: %v", when, h)
				}
				sameAsOracle(t, table, o, when)
			}

			change(10, 300, "c", "a")
			p.tombstone(10) // follows its row in the batch
			o.apply(10, "d", "")
			change(11, 301, "c", "b")
			p.tombstone(12) // a key the table never held
			step("after a tombstone in the batch of its row")

			p.tombstone(11) // its row is in the table
			o.apply(11, "d", "")
			change(13, 302, "c", "x")
			step("after a tombstone of a stored row")

			p.change(11, 301, "c", "b") // a replay of the change before the tombstone: stale
			p.tombstone(10)             // deleted already: nothing changes
			change(10, 303, "c", "again")
			p.tombstone(13) // then the row inserted again
			o.apply(13, "d", "")
			change(13, 304, "c", "y")
			step("after a replay and rows inserted again")

			if _, got := queryEngineRows(t, table); fmt.Sprint(got) != fmt.Sprint(o.rows()) {
				t.Errorf("delta-rs reads\n%v\nwant\n%v", got, o.rows())
			}
		})
	}
}

// ordersOnKfake starts a one-broker kfake cluster with topic orders (one
// partition), a producer to it and an orders table's configuration;
// all of it closes with the test.
func ordersOnKfake(t *testing.T) (p *producer, cfg *Config, table string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	dir := t.TempDir()
	return &producer{t: t, cl: cl, topic: "orders", nparts: 1, ends: map[int32]int64{}},
		testConfigFor(t, c.ListenAddrs(), dir, "orders", "g"), filepath.Join(dir, "orders")
}

// flatOrders is an orders change as ExtractNewRecordState writes it with
// add.fields=op,lsn,source.ts_ms: the row at top level, its metadata in
// __ fields; its key as dbzOrders's.
func flatOrders(id int, lsn int64, op, status string) (key, value []byte) {
	key, _ = dbzOrders(id, lsn, op, status)
	sch := `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"status"},` +
		`{"type":"string","optional":true,"field":"__op"},{"type":"int64","optional":true,"field":"__lsn"},{"type":"int64","optional":true,"field":"__source_ts_ms"}],"optional":false,"name":"pg.public.orders.Value"}`
	payload := fmt.Sprintf(`{"id":%d,"status":%q,"__op":%q,"__lsn":%d,"__source_ts_ms":%d}`, id, status, op, lsn, 1_700_000_000_000+lsn)
	return key, []byte(`{"schema":` + sch + `,"payload":` + payload + `}`)
}

// TestKafkaTombstonesFlattened: ExtractNewRecordState's default output
// (delete.tombstone.handling.mode=tombstone) drops delete events and
// keeps their tombstones, so a flat-json table sees its deletes only as
// tombstones. Under kafka_tombstones: delete the table is the oracle's,
// whether a tombstone shares a batch with the row's last update or not;
// under skip the rows stay live, and the engine warns once ten
// tombstones came without a delete event.
func TestKafkaTombstonesFlattened(t *testing.T) {
	for _, tombs := range []string{"skip", "delete"} {
		t.Run(tombs, func(t *testing.T) {
			p, cfg, table := ordersOnKfake(t)
			cfg.Tables[0].Format = "flat-json"
			cfg.Tables[0].KafkaTombstones = tombs
			var log syncBuffer
			e, stop := startEngine(t, cfg, Logger(slog.New(slog.NewTextHandler(&log, nil))))
			defer stop()
			o := ordersOracle{}
			change := func(id int, lsn int64, op, status string) {
				k, v := flatOrders(id, lsn, op, status)
				p.send(k, v, 0)
				o.apply(id, op, status)
			}
			tomb := func(id int) {
				p.tombstone(id)
				o.apply(id, "d", "")
			}
			change(1, 100, "c", "a")
			change(1, 110, "u", "b")
			tomb(1)
			change(2, 120, "c", "x")
			waitPositionsFor(t, table, "orders", p.ends, time.Minute)
			tomb(2)
			for id := 3; id < 12; id++ {
				change(id, int64(100*id), "c", "y")
				tomb(id)
			}
			change(20, 2000, "c", "z")
			waitPositionsFor(t, table, "orders", p.ends, time.Minute)
			if h := e.Halted()["orders"]; h != nil {
				t.Fatalf("halted: %v", h)
			}
			warned := strings.Count(log.String(), "has met no delete event since the start")
			if tombs == "delete" {
				sameAsOracle(t, table, o, "after deletes sent as tombstones alone")
				if warned != 0 {
					t.Errorf("warned of skipped tombstones under delete:\n%s", log.String())
				}
				return
			}
			if got := strings.Join(readOrders(t, table), "; "); !strings.Contains(got, "1 b false") || !strings.Contains(got, "11 y false") {
				t.Errorf("under skip tombstones deleted rows: %s", got)
			}
			if warned != 1 || !strings.Contains(log.String(), "tombstones=10") {
				t.Errorf("want one warning after 10 tombstones, got %d:\n%s", warned, log.String())
			}
		})
	}
}
