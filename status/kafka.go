package status

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/checkpoint"
)

// Brokers asks Kafka brokers for high watermarks with kadm.
type Brokers struct {
	// Seeds are the bootstrap brokers.
	Seeds []string
	// Timeout bounds the whole question: status must answer quickly even
	// when the brokers are down. 3s when zero.
	Timeout time.Duration
	// Opts are extra client options (tests).
	Opts []kgo.Opt
}

// EndOffsets lists the end offsets of every partition of topics.
func (b Brokers) EndOffsets(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := append([]kgo.Opt{kgo.SeedBrokers(b.Seeds...), kgo.DialTimeout(timeout), kgo.RetryTimeout(timeout)}, b.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to brokers: %w", err)
	}
	defer cl.Close()
	out := map[checkpoint.TopicPartition]int64{}
	if len(topics) == 0 {
		// Still ask something so an unreachable cluster shows as such.
		if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
			return nil, fmt.Errorf("list end offsets: %w", err)
		}
		return out, nil
	}
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	var firstErr error
	listed.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("list end offsets of %s/%d: %w", lo.Topic, lo.Partition, lo.Err)
			}
			return
		}
		out[checkpoint.TopicPartition{Topic: lo.Topic, Partition: lo.Partition}] = lo.Offset
	})
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}
