package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/debezium"
)

// TestProduceIntoKafka produces a stream into an in-process Kafka (kfake)
// and reads it back: every record is at the offset and partition the
// generator predicted, byte for byte.
func TestProduceIntoKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg := busy(5)
	cfg.Events = 3000
	produceAndReadBack(t, cluster.ListenAddrs(), cfg)
}

// TestProduceIntoRealKafka does the same against a real Apache Kafka
// broker (scripts/kafka.sh start) named by $CDCAPPLY_KAFKA_BROKERS, on
// topics of a fresh name so earlier runs do not shift the offsets.
func TestProduceIntoRealKafka(t *testing.T) {
	brokers := os.Getenv("CDCAPPLY_KAFKA_BROKERS")
	if brokers == "" {
		t.Skip("set CDCAPPLY_KAFKA_BROKERS to run against a real broker (scripts/kafka.sh start)")
	}
	cfg := busy(6)
	cfg.Events = 5000
	cfg.Server = fmt.Sprintf("wl%d", time.Now().UnixNano())
	produceAndReadBack(t, strings.Split(brokers, ","), cfg)
}

func produceAndReadBack(t *testing.T, brokers []string, cfg Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := newGen(t, cfg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := CreateTopics(ctx, cl, g, 1); err != nil {
		t.Fatal(err)
	}
	if err := CreateTopics(ctx, cl, g, 1); err != nil {
		t.Fatalf("creating existing topics again: %v", err)
	}
	var batches int
	st, err := Produce(ctx, cl, g, 500, func(ProduceStats) { batches++ })
	if err != nil {
		t.Fatal(err)
	}
	counts := g.Oracle().Counts()
	if st.Records != counts.Records || st.Moved != 0 || batches != int((st.Records+499)/500) || st.PerSecond() <= 0 {
		t.Fatalf("produced %+v in %d batches, generator counted %d records", st, batches, counts.Records)
	}

	want := map[string]Event{}
	for _, ev := range drain(t, newGen(t, cfg)) {
		want[fmt.Sprintf("%s/%d@%d", ev.Record.Topic, ev.Record.Partition, ev.Record.Offset)] = ev
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(g.Topic(), g.HeartbeatTopic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got int
	for got < len(want) {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after %d records: %v", got, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			id := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
			ev, ok := want[id]
			if !ok || !bytes.Equal(r.Key, ev.Record.Key) || !bytes.Equal(r.Value, ev.Record.Value) || (r.Value == nil) != (ev.Record.Value == nil) {
				t.Fatalf("record %s is not the generated one", id)
			}
		})
	}
	if got != len(want) {
		t.Fatalf("read %d records, produced %d", got, len(want))
	}
}

// TestProduceAtPacesAndStampsTime: a paced stream cannot finish before its
// schedule, and with the wall clock every change's source commit time is
// the time it was generated. Each record's Kafka timestamp is the time it
// was sent: never before its source commit, and for a change the workload
// held back (late: 250 to 750 records, 50 to 150 ms at this rate) later
// by about the hold.
func TestProduceAtPacesAndStampsTime(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := busy(8)
	cfg.Events, cfg.SnapshotKeys = 1500, 100 // snapshot reads are stamped by the clock too
	cfg.Clock = time.Now
	g := newGen(t, cfg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := CreateTopics(ctx, cl, g, 1); err != nil {
		t.Fatal(err)
	}
	const rate = 5000.0
	start := time.Now()
	st, err := ProduceAt(ctx, cl, g, rate, nil)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if min := time.Duration(float64(st.Records-1) / rate * float64(time.Second)); end.Sub(start) < min {
		t.Fatalf("%d records at %v/s took %v, less than the schedule's %v", st.Records, rate, end.Sub(start), min)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(g.Topic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	dec, err := debezium.New(debezium.SourceConnector(debezium.ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	var changes, spread, held int64
	first, last := int64(-1), int64(0)
	for changes < g.Oracle().Counts().ChangeRecords {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			ch, err := dec.Decode(ctx, &debezium.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
			if err != nil || ch.Class != debezium.ClassChange {
				return
			}
			changes++
			if sent := r.Timestamp.UnixMilli(); sent < ch.SourceTsMs || sent > end.UnixMilli() {
				t.Fatalf("%s/%d@%d: sent at %d, source commit %d, run ended %d", r.Topic, r.Partition, r.Offset, sent, ch.SourceTsMs, end.UnixMilli())
			}
			held = max(held, r.Timestamp.UnixMilli()-ch.SourceTsMs)
			if ch.SourceTsMs < start.UnixMilli() || ch.SourceTsMs > end.UnixMilli() {
				t.Fatalf("source commit time %d outside the run [%d, %d]", ch.SourceTsMs, start.UnixMilli(), end.UnixMilli())
			}
			if first < 0 {
				first = ch.SourceTsMs
			}
			last = max(last, ch.SourceTsMs)
		})
	}
	if spread = last - first; spread < 100 {
		t.Fatalf("commit times span %d ms over a paced %v run", spread, end.Sub(start))
	}
	if held < 25 {
		t.Fatalf("no change was sent more than %d ms after its source commit; late changes are held 50 to 150 ms", held)
	}
}

// TestCreateTopicWaitsForBrokers: a controller that refuses a topic
// because no broker can take it yet (a KRaft broker restarting or fenced:
// INVALID_REPLICATION_FACTOR) is asked again until it accepts; a
// replication factor above the brokers the cluster lists fails at once,
// naming the topic and the counts.
func TestCreateTopicWaitsForBrokers(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var refusals atomic.Int32 // the cluster's goroutine runs the control
	refusals.Store(2)
	cluster.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if refusals.Load() == 0 {
			return nil, nil, false
		}
		refusals.Add(-1)
		r := req.(*kmsg.CreateTopicsRequest)
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.InvalidReplicationFactor.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if err := createTopic(ctx, adm, 3, 1, "waits"); err != nil {
		t.Fatalf("after two refusals: %v", err)
	}
	if n := refusals.Load(); n != 0 {
		t.Fatalf("%d refusals left: createTopic did not ask again", n)
	}
	if tds, err := adm.ListTopics(ctx, "waits"); err != nil || !tds.Has("waits") || len(tds["waits"].Partitions) != 3 {
		t.Fatalf("topic after the refusals: %v %v", tds, err)
	}

	refusals.Store(1000)
	start := time.Now()
	err = createTopic(ctx, adm, 1, 3, "too-many-replicas")
	if err == nil || !errors.Is(err, kerr.InvalidReplicationFactor) || !strings.Contains(err.Error(), "replication factor 3, but the cluster lists 1 brokers") {
		t.Fatalf("replication factor above the brokers: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %s to refuse a replication factor the cluster cannot have", time.Since(start))
	}
}

// TestCreateTopicWaitsForARestartingBroker: while the broker refuses
// connections (restarting: another test of the same CI run restarts the
// shared real broker), createTopic asks again until it is back.
func TestCreateTopicWaitsForARestartingBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", port)), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- createTopic(ctx, kadm.NewClient(cl), 2, 1, "after-restart") }()
	select {
	case err := <-done:
		t.Fatalf("createTopic returned while nothing listened: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	if err := <-done; err != nil {
		t.Fatalf("after the broker came up: %v", err)
	}
	if tds, err := kadm.NewClient(cl).ListTopics(ctx, "after-restart"); err != nil || len(tds["after-restart"].Partitions) != 2 {
		t.Fatalf("topic after the restart: %v %v", tds, err)
	}
}
