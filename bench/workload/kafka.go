package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CreateTopics creates the workload's topics: the table's with the
// configured partition count and, when separate, the heartbeat topic with
// one partition. Topics that exist already are left as they are.
func CreateTopics(ctx context.Context, cl *kgo.Client, g *Generator, replicationFactor int16) error {
	adm := kadm.NewClient(cl)
	want := map[string]int32{g.Topic(): g.cfg.Partitions}
	if g.HeartbeatTopic() != g.Topic() && g.cfg.HeartbeatEvery > 0 {
		want[g.HeartbeatTopic()] = 1
	}
	for topic, parts := range want {
		if err := createTopic(ctx, adm, parts, replicationFactor, topic); err != nil {
			return err
		}
	}
	return nil
}

// topicCreateWait bounds how long createTopic waits for the cluster to
// have brokers that can take a topic.
const topicCreateWait = time.Minute

// createTopic creates one topic, waiting while the cluster cannot place
// it yet: a KRaft broker that just (re)started (another test restarts the
// shared broker), or was fenced for a late heartbeat on a loaded machine,
// is not yet available to the controller, which then refuses with
// INVALID_REPLICATION_FACTOR or BROKER_NOT_AVAILABLE. A replication
// factor above the brokers the cluster lists fails at once (none listed:
// they are still registering, so it waits). An existing topic is left as
// it is.
func createTopic(ctx context.Context, adm *kadm.Client, parts int32, replicationFactor int16, topic string) error {
	deadline := time.Now().Add(topicCreateWait)
	for attempt := 1; ; attempt++ {
		_, err := adm.CreateTopic(ctx, parts, replicationFactor, nil, topic)
		switch {
		case err == nil || errors.Is(err, kerr.TopicAlreadyExists):
			return nil
		case !brokerNotReady(err):
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
		if brokers, lerr := adm.ListBrokers(ctx); lerr == nil && len(brokers) > 0 && int(replicationFactor) > len(brokers) {
			return fmt.Errorf("create topic %s: replication factor %d, but the cluster lists %d brokers: %w", topic, replicationFactor, len(brokers), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create topic %s: %d attempts over %s, the cluster still cannot place it: %w", topic, attempt, topicCreateWait, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: %w (last refusal: %v)", topic, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// brokerNotReady reports whether a topic creation failed because the
// cluster is starting, restarting or electing (asking again may succeed):
// the broker refuses connections while it restarts, and after it is up it
// cannot place replicas until it has registered with the controller.
func brokerNotReady(err error) bool {
	var op *net.OpError
	return errors.Is(err, kerr.InvalidReplicationFactor) || errors.Is(err, kerr.BrokerNotAvailable) || errors.Is(err, kerr.NotController) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &op)
}

// ProduceStats measures a Produce run.
type ProduceStats struct {
	// Records and Bytes (keys and values) sent.
	Records, Bytes int64
	// Elapsed is the wall time from the first record generated to the last
	// acknowledged.
	Elapsed time.Duration
	// Moved counts records the broker placed at another offset than the
	// generator predicted (the topic was not empty, or another producer
	// wrote to it); the oracle does not depend on offsets, tests that
	// compare positions do.
	Moved int64
}

// PerSecond is the produce throughput in records per second.
func (s ProduceStats) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Records) / s.Elapsed.Seconds()
}

// Produce sends the generator's remaining records through cl, batch
// records per synchronous produce, so memory stays at one batch whatever
// the stream's length. The client must partition manually
// (kgo.RecordPartitioner(kgo.ManualPartitioner())) for records to land in
// the partition of their key's hash that the generator chose. progress, if
// not nil, is called after every batch.
func Produce(ctx context.Context, cl *kgo.Client, g *Generator, batch int, progress func(ProduceStats)) (ProduceStats, error) {
	return produce(ctx, cl, g, batch, 0, progress)
}

// ProduceAt sends the generator's records at a steady rate (records per
// second) in ticks of 10ms, each tick's records in one synchronous
// produce; a slow tick is made up by the next ones, so the average rate
// holds while the brokers keep up. With Config.Clock set to time.Now, the
// records' source commit times are when they were generated, which is what
// end-to-end freshness is measured from.
func ProduceAt(ctx context.Context, cl *kgo.Client, g *Generator, rate float64, progress func(ProduceStats)) (ProduceStats, error) {
	if rate <= 0 {
		return ProduceStats{}, fmt.Errorf("produce workload to %s: rate %v: want a positive rate", g.Topic(), rate)
	}
	return produce(ctx, cl, g, 0, rate, progress)
}

const tick = 10 * time.Millisecond

func produce(ctx context.Context, cl *kgo.Client, g *Generator, batch int, rate float64, progress func(ProduceStats)) (ProduceStats, error) {
	if batch <= 0 {
		batch = 10_000
	}
	var st ProduceStats
	start := time.Now()
	recs := make([]*kgo.Record, 0, batch)
	want := make([]int64, 0, batch)
	var ev Event
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce workload to %s: %w", g.Topic(), err)
		}
		for i, r := range recs {
			if r.Offset != want[i] {
				st.Moved++
			}
		}
		st.Records += int64(len(recs))
		st.Elapsed = time.Since(start)
		recs, want = recs[:0], want[:0]
		if progress != nil {
			progress(st)
		}
		return nil
	}
	var sent int64 // records handed to the client, for pacing
	for {
		if rate > 0 && len(recs) == 0 {
			// Wait until the schedule is due for at least one more record,
			// then take every record it is due for, up to a batch.
			due := int64(rate * time.Since(start).Seconds())
			for due <= sent {
				select {
				case <-ctx.Done():
					return st, fmt.Errorf("produce workload to %s: %w", g.Topic(), ctx.Err())
				case <-time.After(tick):
				}
				due = int64(rate * time.Since(start).Seconds())
			}
			batch = int(min(due-sent, 100_000))
		}
		if !g.Next(&ev) {
			break
		}
		sent++
		r := ev.Record
		kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		if rate > 0 {
			// Stamped when sent, as Kafka Connect's producer does: the
			// engine's delay is then measured from here, apart from the
			// source commit time (the generator's clock), which a late or
			// out-of-order change left behind before it was sent.
			kr.Timestamp = time.Now()
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		st.Bytes += int64(len(r.Key) + len(r.Value))
		recs = append(recs, kr)
		want = append(want, r.Offset)
		if len(recs) == batch {
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	if err := flush(); err != nil {
		return st, err
	}
	return st, nil
}
