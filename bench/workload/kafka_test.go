package workload

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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
// the time it was generated.
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
	var changes, spread int64
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
}
