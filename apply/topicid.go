package apply

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicsDomain is the domainMetadata domain in which a table records the
// Kafka topic ID of each topic its positions come from. A topic deleted
// and created again under the same name gets a new ID and starts again at
// offset 0: the table's positions say nothing about the new topic, and
// seeking to them would skip the new topic's first records (or fail as
// if retention had deleted them). The recorded ID tells the two apart.
const TopicsDomain = "cdcapply.topics"

// topicsDomainValue is the domain's configuration (JSON): topic name to
// topic ID, as Kafka's tools print it (base64url without padding).
type topicsDomainValue struct {
	TopicIDs map[string]string `json:"topicIds"`
}

// FormatTopicID writes a Kafka topic ID as Kafka's tools print it
// (kafka-topics --describe): base64url without padding.
func FormatTopicID(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// RecordedTopicIDs returns the topic IDs recorded in snap (nil when none
// are, or snap is nil). A domain that does not parse is an error: the
// check it exists for cannot be made.
func RecordedTopicIDs(snap *delta.Snapshot) (map[string]string, error) {
	if snap == nil {
		return nil, nil
	}
	d, ok := snap.Domain(TopicsDomain)
	if !ok {
		return nil, nil
	}
	var v topicsDomainValue
	if err := json.Unmarshal([]byte(d.Configuration), &v); err != nil {
		return nil, fmt.Errorf("domain %s at version %d: %w", TopicsDomain, snap.Version, err)
	}
	return v.TopicIDs, nil
}

// TopicRecreatedError says the topic a table reads is not the one its
// positions were read from: it was deleted and created again.
type TopicRecreatedError struct {
	Table, Topic string
	// Recorded is the ID in the table; Now the ID Kafka answers with ("":
	// Kafka no longer knows the ID the process was reading).
	Recorded, Now string
	// Next is the table's next offset of each partition of the topic.
	Next map[int32]int64
}

func (e *TopicRecreatedError) Error() string {
	var b strings.Builder
	if e.Now == "" {
		id := "the topic ID"
		if e.Recorded != "" {
			id = "topic ID " + e.Recorded
		}
		fmt.Fprintf(&b, "table %s: topic %s: Kafka no longer knows %s which this process was reading: the topic was deleted, or deleted and created again", e.Table, e.Topic, id)
	} else {
		fmt.Fprintf(&b, "table %s: topic %s was deleted and created again: its topic ID is %s, the table's positions were read from topic ID %s", e.Table, e.Topic, e.Now, e.Recorded)
	}
	if len(e.Next) > 0 {
		parts := make([]int32, 0, len(e.Next))
		for p := range e.Next {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		b.WriteString(" (next offsets")
		for i, p := range parts {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %d:%d", p, e.Next[p])
		}
		b.WriteString(")")
	}
	b.WriteString("; the new topic's offsets are not the table's positions, and reading on would skip or repeat changes: rebuild the table from the new topic (stop, move the table's location away or set a new one, and start: it is read from offset 0)")
	return b.String()
}

// ErrTopicRecreated is matched by errors.Is for a *TopicRecreatedError.
var ErrTopicRecreated = errors.New("topic recreated")

func (e *TopicRecreatedError) Is(target error) bool { return target == ErrTopicRecreated }

// nextOffsetsOf returns the table's next offset of every partition of
// topic in pos.
func nextOffsetsOf(pos checkpoint.Positions, topic string) map[int32]int64 {
	out := map[int32]int64{}
	for _, tp := range pos.Sorted() {
		if tp.Topic == topic {
			out[tp.Partition], _ = pos.Next(tp)
		}
	}
	return out
}

// topicIDsToRecord returns the domainMetadata action recording the IDs of
// seen that recorded lacks (ok false when it lacks none), or an error when
// one of seen's IDs differs from the recorded one: positions read from one
// topic must never be committed over another's.
func topicIDsToRecord(table string, recorded, seen map[string]string, pos checkpoint.Positions) (d delta.DomainMetadata, ok bool, err error) {
	var add []string
	for topic, id := range seen {
		switch r, has := recorded[topic]; {
		case !has:
			add = append(add, topic)
		case r != id:
			return d, false, &TopicRecreatedError{Table: table, Topic: topic, Recorded: r, Now: id, Next: nextOffsetsOf(pos, topic)}
		}
	}
	if len(add) == 0 {
		return d, false, nil
	}
	all := make(map[string]string, len(recorded)+len(add))
	for t, id := range recorded {
		all[t] = id
	}
	for _, t := range add {
		all[t] = seen[t]
	}
	d, err = TopicsDomainAction(all)
	return d, err == nil, err
}

// TopicsDomainAction is the domainMetadata action that records ids
// (topic to ID) as a table's topic IDs, replacing those it had.
func TopicsDomainAction(ids map[string]string) (delta.DomainMetadata, error) {
	b, err := json.Marshal(topicsDomainValue{TopicIDs: ids})
	if err != nil {
		return delta.DomainMetadata{}, fmt.Errorf("encode domain %s: %w", TopicsDomain, err)
	}
	return delta.DomainMetadata{Domain: TopicsDomain, Configuration: string(b)}, nil
}

// hasDomainMetadata reports whether p lets writers write domainMetadata
// (tables created by cdcapply have it; older ones get it from the first
// tombstone purge).
func hasDomainMetadata(p delta.Protocol) bool {
	if p.MinWriterVersion != 7 {
		return false
	}
	for _, f := range p.WriterFeatures {
		if f == delta.FeatureDomainMetadata {
			return true
		}
	}
	return false
}

// haltTopicRecreated is the halt reason class of a *TopicRecreatedError.
const haltTopicRecreated = "topic_recreated"

// seenTopicID is a topic's ID as the fetches carry it, raw for the
// per-poll comparison and as Kafka's tools print it.
type seenTopicID struct {
	raw [16]byte
	s   string
}

// recordedTopicIDs returns the table's recorded topic IDs as the loop
// may read them (with a batch in flight, those before it).
func (t *tableRun) recordedTopicIDs() (map[string]string, error) {
	if t.inflight != nil {
		return t.inflight.topicIDs, t.inflight.topicIDsErr
	}
	return t.applier.TopicIDs()
}

// checkTopicIDs compares the topic ID of each fetched topic with the one
// its table recorded, and with the one this process saw before, before
// the poll's records are routed: a topic deleted and created again halts
// its table instead of having the new topic's records read from the old
// topic's positions. Only a topic whose ID is new to the loop is looked
// at; brokers older than Kafka 3.1 send no IDs, and nothing is checked.
func (e *Engine) checkTopicIDs(fetches kgo.Fetches) {
	// Each broker's response carries the IDs of its topics; ranged over
	// directly, as EachTopic would merge them into maps every poll.
	for i := range fetches {
		for j := range fetches[i].Topics {
			e.checkTopicID(&fetches[i].Topics[j])
		}
	}
}

func (e *Engine) checkTopicID(ft *kgo.FetchTopic) {
	if ft.TopicID == ([16]byte{}) {
		return
	}
	t := e.tableFor(ft.Topic)
	if t == nil || t.halted != nil {
		return
	}
	seen, had := t.seenIDs[ft.Topic]
	if had && seen.raw == ft.TopicID {
		return
	}
	id := FormatTopicID(ft.TopicID)
	was := seen.s
	if !had {
		recorded, err := t.recordedTopicIDs()
		if err != nil {
			e.halt(t, "open", fmt.Errorf("table %s: %w", t.cfg.Name, err))
			return
		}
		was = recorded[ft.Topic]
	}
	if was != "" && was != id {
		e.halt(t, haltTopicRecreated, &TopicRecreatedError{Table: t.cfg.Name, Topic: ft.Topic,
			Recorded: was, Now: id, Next: nextOffsetsOf(t.positions(), ft.Topic)})
		return
	}
	if t.seenIDs == nil {
		t.seenIDs = map[string]seenTopicID{}
	}
	t.seenIDs[ft.Topic] = seenTopicID{raw: ft.TopicID, s: id}
}

// noteBatchTopicID puts topic's ID, if the fetches carried one, into b.
func (t *tableRun) noteBatchTopicID(b *Batch, topic string) {
	s, ok := t.seenIDs[topic]
	if !ok {
		return
	}
	if b.TopicIDs == nil {
		b.TopicIDs = map[string]string{}
	}
	b.TopicIDs[topic] = s.s
}
