package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
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

// client connects to the brokers for one question, bounded by Timeout:
// done closes the client and releases the context.
func (b Brokers) client(ctx context.Context) (_ *kgo.Client, _ context.Context, done func(), _ error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	opts := append([]kgo.Opt{kgo.SeedBrokers(b.Seeds...), kgo.DialTimeout(timeout), kgo.RetryTimeout(timeout)}, b.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("connect to brokers: %w", err)
	}
	return cl, ctx, func() { cl.Close(); cancel() }, nil
}

// DescribeGroup asks the group's coordinator for its state and members,
// and which partitions each member was assigned.
func (b Brokers) DescribeGroup(ctx context.Context, group string) (*Group, error) {
	cl, ctx, done, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describe consumer group %s: %w", group, err)
	}
	d, ok := described[group]
	if !ok {
		return nil, fmt.Errorf("describe consumer group %s: not in the answer", group)
	}
	if errors.Is(d.Err, kerr.GroupIDNotFound) {
		// No process ever joined, or the group expired: Kafka describes
		// such a group as Dead, with no members (kfake answers this error).
		return &Group{Name: group, State: "Dead", Members: []Member{}}, nil
	}
	if d.Err != nil {
		return nil, fmt.Errorf("describe consumer group %s: %w", group, d.Err)
	}
	g := &Group{Name: group, State: d.State, Protocol: d.Protocol, Members: []Member{}}
	for _, dm := range d.Members {
		m := Member{ClientID: dm.ClientID, Host: dm.ClientHost, Partitions: []string{}}
		if dm.InstanceID != nil {
			m.InstanceID = *dm.InstanceID
		}
		if c, ok := dm.Join.AsConsumer(); ok {
			if _, inflow, ok := apply.TableMemberData(c.UserData); ok && len(inflow) > 0 {
				m.Inflow = inflow
			}
		}
		if a, ok := dm.Assigned.AsConsumer(); ok {
			var tps []checkpoint.TopicPartition
			for _, tp := range a.Topics {
				for _, p := range tp.Partitions {
					tps = append(tps, checkpoint.TopicPartition{Topic: tp.Topic, Partition: p})
				}
			}
			slices.SortFunc(tps, checkpoint.TopicPartition.Compare)
			for _, tp := range tps {
				m.Partitions = append(m.Partitions, tp.String())
			}
		}
		g.Members = append(g.Members, m)
	}
	return g, nil
}

// EndOffsets lists the end offsets of every partition of topics.
func (b Brokers) EndOffsets(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error) {
	return b.offsets(ctx, topics, "end", (*kadm.Client).ListEndOffsets)
}

// StartOffsets lists the log start offsets of every partition of topics.
func (b Brokers) StartOffsets(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error) {
	return b.offsets(ctx, topics, "start", (*kadm.Client).ListStartOffsets)
}

// offsets lists the offsets list answers (which names them in errors)
// for every partition of topics.
func (b Brokers) offsets(ctx context.Context, topics []string, which string, list func(*kadm.Client, context.Context, ...string) (kadm.ListedOffsets, error)) (map[checkpoint.TopicPartition]int64, error) {
	cl, ctx, done, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	out := map[checkpoint.TopicPartition]int64{}
	if len(topics) == 0 {
		// Still ask something so an unreachable cluster shows as such.
		if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
			return nil, fmt.Errorf("list %s offsets: %w", which, err)
		}
		return out, nil
	}
	listed, err := list(kadm.NewClient(cl), ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list %s offsets: %w", which, err)
	}
	var firstErr error
	listed.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("list %s offsets of %s/%d: %w", which, lo.Topic, lo.Partition, lo.Err)
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

// TopicIDs returns the ID of each of topics the cluster has, as Kafka's
// tools print it.
func (b Brokers) TopicIDs(ctx context.Context, topics []string) (map[string]string, error) {
	return b.perTopic(ctx, topics, func(ctx context.Context, adm *kadm.Client, out map[string]string) error {
		td, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		for name, d := range td {
			if d.Err == nil && d.ID != ([16]byte{}) {
				out[name] = apply.FormatTopicID(d.ID)
			}
		}
		return nil
	})
}

// CleanupPolicies returns the cleanup.policy of each of topics the cluster
// has (Kafka's default, delete, where a topic does not set it).
func (b Brokers) CleanupPolicies(ctx context.Context, topics []string) (map[string]string, error) {
	return b.perTopic(ctx, topics, func(ctx context.Context, adm *kadm.Client, out map[string]string) error {
		rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
		if err != nil {
			return fmt.Errorf("describe topic configs: %w", err)
		}
		for _, rc := range rcs {
			if rc.Err != nil {
				continue
			}
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil {
					out[rc.Name] = *c.Value
				}
			}
		}
		return nil
	})
}

// perTopic asks the brokers one question about topics, whose answer ask
// puts in out (topic -> value); no topics, no question.
func (b Brokers) perTopic(ctx context.Context, topics []string, ask func(context.Context, *kadm.Client, map[string]string) error) (map[string]string, error) {
	out := map[string]string{}
	if len(topics) == 0 {
		return out, nil
	}
	cl, ctx, done, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := ask(ctx, kadm.NewClient(cl), out); err != nil {
		return nil, err
	}
	return out, nil
}
