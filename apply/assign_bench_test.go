package apply

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkGroupOfTwo: two processes of one group start together on two
// tables (four partitions each) with a backlog (a stream of inserts and
// then updates preproduced to kfake), under each kafka.assignment. It
// reports the group's events/s (the processes' start to both tables at
// their ends), the batches read again after a failed or fenced commit,
// and the key index catch-ups that followed the other process's commits.
//
//	go test ./apply -run XXX -bench BenchmarkGroupOfTwo -benchtime 1x -count 8 | tee F; benchstat -col /assignment F
func BenchmarkGroupOfTwo(b *testing.B) {
	for _, mode := range []string{"merge-on-read", "copy-on-write"} {
		for _, assignment := range []string{AssignTables, AssignPartitions} {
			b.Run("mode="+mode+"/assignment="+assignment, func(b *testing.B) {
				for range b.N {
					groupOfTwo(b, mode, assignment)
				}
			})
		}
	}
}

func groupOfTwo(b *testing.B, mode, assignment string) {
	const (
		nparts = 4
		keys   = 50000
		events = 300000 // per table: the keys inserted, then updates
	)
	b.StopTimer()
	topics := [2]string{"orders", "customers"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nparts, topics[:]...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		b.Fatal(err)
	}
	defer pcl.Close()
	ends := [2]map[int32]int64{{}, {}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range events {
		for j, topic := range topics {
			id, op := i, "c"
			if i >= keys {
				id, op = rng.IntN(keys), "u"
			}
			k, v := dbzOrders(id, int64(i+1), op, fmt.Sprintf("s%d", i))
			h := fnv.New32a()
			h.Write(k)
			p := int32(h.Sum32() % nparts)
			ends[j][p]++
			pcl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: p, Key: k, Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
			})
		}
	}
	if err := pcl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg, err := ParseConfig("bench.yaml", []byte(fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: bench, assignment: %s}
tables:
  - {name: orders, topic: orders, location: %s/orders, write_mode: %s}
  - {name: customers, topic: customers, location: %s/customers, write_mode: %s}
`, strings.Join(c.ListenAddrs(), ", "), assignment, dir, mode, dir, mode)))
	if err != nil {
		b.Fatal(err)
	}
	var logs [2]syncBuffer
	b.StartTimer()
	start := time.Now()
	for i := range logs {
		_, cancel, done := runEngine(b, cfg, Logger(slog.New(slog.NewTextHandler(&logs[i], nil))), KafkaOptions(kgo.ClientID(fmt.Sprintf("p%d", i)),
			kgo.SessionTimeout(1500*time.Millisecond), kgo.RebalanceTimeout(1500*time.Millisecond), kgo.HeartbeatInterval(200*time.Millisecond)))
		defer func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
		}()
	}
	for j, topic := range topics {
		waitPositionsWithin(b, dir+"/"+topic, "shop", topic, ends[j], 5*time.Minute)
	}
	took := time.Since(start)
	b.StopTimer()
	var again, catchUps int
	for i := range logs {
		l := logs[i].String()
		again += strings.Count(l, "batch fenced") + strings.Count(l, "table commit failed")
		catchUps += strings.Count(l, "key index caught up")
	}
	b.ReportMetric(float64(2*events)/took.Seconds(), "events/s")
	b.ReportMetric(float64(again), "batches-read-again")
	b.ReportMetric(float64(catchUps), "catch-ups")
}
