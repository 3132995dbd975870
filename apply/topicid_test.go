package apply

import (
	"context"
	"errors"
	"os"
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

func TestTopicIDsToRecord(t *testing.T) {
	pos := checkpoint.Positions{{Topic: "a", Partition: 1}: 7, {Topic: "b", Partition: 0}: 3}
	// Nothing recorded yet: every seen ID is recorded.
	d, ok, err := topicIDsToRecord("orders", nil, map[string]string{"a": "ID-A"}, pos)
	if err != nil || !ok || d.Domain != TopicsDomain || d.Configuration != `{"topicIds":{"a":"ID-A"}}` {
		t.Fatalf("first record: %+v %v %v", d, ok, err)
	}
	// A new topic is added beside the recorded one.
	d, ok, err = topicIDsToRecord("orders", map[string]string{"a": "ID-A"}, map[string]string{"a": "ID-A", "b": "ID-B"}, pos)
	if err != nil || !ok || d.Configuration != `{"topicIds":{"a":"ID-A","b":"ID-B"}}` {
		t.Fatalf("added topic: %+v %v %v", d, ok, err)
	}
	// All recorded: no action.
	if _, ok, err = topicIDsToRecord("orders", map[string]string{"a": "ID-A", "b": "ID-B"}, map[string]string{"b": "ID-B"}, pos); ok || err != nil {
		t.Fatalf("all recorded: %v %v", ok, err)
	}
	// A different ID for a recorded topic is refused, naming both and the
	// table's positions in it.
	_, ok, err = topicIDsToRecord("orders", map[string]string{"a": "ID-A"}, map[string]string{"a": "ID-A2"}, pos)
	var re *TopicRecreatedError
	if ok || !errors.As(err, &re) || !errors.Is(err, ErrTopicRecreated) {
		t.Fatalf("recreated: %v %v", ok, err)
	}
	for _, want := range []string{"table orders", "topic a", "ID-A2", "ID-A", "next offsets 1:7", "rebuild the table"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestTopicRecreatedKfake: a topic deleted and created again under the
// same name, on kfake.
func TestTopicRecreatedKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runTopicRecreated(t, c.ListenAddrs(), "orders", 2, startEngine)
}

// TestRealKafkaTopicRecreated is TestTopicRecreatedKfake on a real broker.
func TestRealKafkaTopicRecreated(t *testing.T) {
	brokers := realBrokers(t)
	topic := realTopic(t, brokers, 2)
	runTopicRecreated(t, brokers, topic, 2, startEngineWith)
}

// runTopicRecreated records the topic's ID with the first commit, then
// deletes and creates the topic again twice: once while no engine runs
// (the restarted engine must halt the table before it reads a record:
// the new topic holds more records than the table's positions, so
// seeking to them would silently skip its first ones), and once under a
// running engine (halted when Kafka no longer knows the ID it reads). In
// neither case may the table change.
func runTopicRecreated(t *testing.T, brokers []string, topic string, nparts int32, start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	client := func() *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	adm := kadm.NewClient(client())
	ctx := context.Background()
	p := &producer{t: t, cl: client(), topic: topic, nparts: nparts, ends: map[int32]int64{}}
	dir := t.TempDir()
	table := filepath.Join(dir, "orders")
	cfg := testConfigFor(t, brokers, dir, topic, topic+"-group")
	o := ordersOracle{}

	topicID := func() string {
		t.Helper()
		var id string
		waitFor(t, "the topic's metadata", func() bool {
			td, err := adm.ListTopics(ctx, topic)
			if err != nil || td[topic].Err != nil || len(td[topic].Partitions) != int(nparts) {
				return false
			}
			id = FormatTopicID(td[topic].ID)
			return true
		})
		return id
	}
	recreate := func() (id string) {
		t.Helper()
		resp, err := adm.DeleteTopics(ctx, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("delete topic %s: %v", topic, err)
		}
		waitFor(t, "the topic to be created again", func() bool {
			resp, err := adm.CreateTopics(ctx, nparts, 1, nil, topic)
			if err != nil || resp.Error() != nil {
				return false
			}
			id = FormatTopicID(resp[topic].ID)
			return true
		})
		// A client keeps the ID it knew a topic by: produce with a new one.
		p.cl.Close()
		p.cl, p.ends = client(), map[int32]int64{}
		return id
	}
	state := func() (int64, int) {
		t.Helper()
		snap, err := delta.Open(storage.NewLocal(table)).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(table, "*.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		return snap.Version, len(files)
	}
	waitHalted := func(e *Engine, was string) error {
		t.Helper()
		got := waitHalt(t, e, "orders", was)
		if !errors.Is(got, ErrTopicRecreated) {
			t.Fatalf("halted with %v, want the topic recreated", got)
		}
		return got
	}

	first := topicID()
	e, stop := start(t, cfg)
	updates(p, o, 0, 20)
	snap := waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	if ids, err := RecordedTopicIDs(snap); err != nil || ids[topic] != first {
		t.Fatalf("recorded topic IDs %v (%v), want %s: %s", ids, err, topic, first)
	}
	stop()
	sameAsOracle(t, table, o, "before the topic is recreated")
	version, files := state()

	// Deleted and created again while stopped, with more records than
	// the table's positions.
	second := recreate()
	if second == first {
		t.Fatalf("the recreated topic kept its ID %s", first)
	}
	lost := ordersOracle{}
	updates(p, lost, 100, 160)
	e, stop = start(t, cfg)
	err := waitHalted(e, first)
	if !strings.Contains(err.Error(), second) {
		t.Errorf("halt %q does not name the new ID %s", err, second)
	}
	// No record of the new topic was applied, or even written to a file.
	time.Sleep(500 * time.Millisecond)
	if v, n := state(); v != version || n != files {
		t.Errorf("the table moved to version %d with %d data files (was %d, %d)", v, n, version, files)
	}
	stop()
	if st, ok, err := ReadState(ctx, storage.NewLocal(table)); err != nil || !ok || !st.Halted || st.Class != haltTopicRecreated {
		t.Errorf("halt state %+v %v (%v), want class %s", st, ok, err, haltTopicRecreated)
	}
	sameAsOracle(t, table, o, "after the restart on the recreated topic")

	// The same under a running engine: a fresh table reads the second
	// topic, which is then deleted and created again.
	if err := os.RemoveAll(table); err != nil {
		t.Fatal(err)
	}
	e, stop = start(t, cfg)
	defer stop()
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	sameAsOracle(t, table, lost, "the rebuilt table")
	version, files = state()
	third := recreate()
	updates(p, ordersOracle{}, 200, 260)
	err = waitHalted(e, second)
	if strings.Contains(err.Error(), third) {
		t.Errorf("halt %q names the new ID %s, which the engine cannot know", err, third)
	}
	time.Sleep(500 * time.Millisecond)
	if v, n := state(); v != version || n != files {
		t.Errorf("the table moved to version %d with %d data files (was %d, %d)", v, n, version, files)
	}
	sameAsOracle(t, table, lost, "after the topic was recreated under the engine")
}
