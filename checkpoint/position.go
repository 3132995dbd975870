// Package checkpoint keeps stream progress inside the table: the Kafka
// position of every (topic, partition) a table consumes is a Delta txn
// action written in the same commit as the data it covers. On start and on
// every partition assignment positions come from the table, never from the
// consumer group's committed offsets, which only follow the table for lag
// tooling.
//
// Convention: a txn's version is the NEXT offset to apply (last applied
// offset + 1), the same meaning as a Kafka committed offset. A record whose
// offset is below its partition's version is already in the table and is
// skipped as a replay.
//
// Delta's own log checkpoints live in package delta, not here.
package checkpoint

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/delta"
)

// appIDPrefix starts every txn appId cdcapply writes, so that txns written
// by other tools (Spark streaming queries, delta-rs) are never mistaken for
// Kafka positions.
const appIDPrefix = "cdcapply/"

// TopicPartition names one Kafka partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Compare orders partitions by topic, then partition number (for
// slices.SortFunc).
func (tp TopicPartition) Compare(o TopicPartition) int {
	return cmp.Or(strings.Compare(tp.Topic, o.Topic), cmp.Compare(tp.Partition, o.Partition))
}

// AppID is the txn appId of one partition of one pipeline:
// "cdcapply/<pipeline>/<topic>/<partition>". Kafka topic names cannot hold
// '/', so the form parses back unambiguously.
func AppID(pipeline string, tp TopicPartition) string {
	return appIDPrefix + pipeline + "/" + tp.Topic + "/" + strconv.FormatInt(int64(tp.Partition), 10)
}

// ParseAppID splits an appId written by AppID; ok is false for any other.
func ParseAppID(appID string) (pipeline string, tp TopicPartition, ok bool) {
	rest, found := strings.CutPrefix(appID, appIDPrefix)
	if !found {
		return "", TopicPartition{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", TopicPartition{}, false
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", TopicPartition{}, false
	}
	j := strings.IndexByte(rest[:i], '/')
	if j <= 0 || j == i-1 {
		return "", TopicPartition{}, false
	}
	return rest[:j], TopicPartition{Topic: rest[j+1 : i], Partition: int32(p)}, true
}

// Positions maps each partition to the next offset to apply.
type Positions map[TopicPartition]int64

// Restore reads the positions of one pipeline from a table snapshot. A nil
// snapshot (the table does not exist yet) has no positions.
func Restore(snap *delta.Snapshot, pipeline string) Positions {
	out := Positions{}
	if snap == nil {
		return out
	}
	for appID, txn := range snap.Txns() {
		pl, tp, ok := ParseAppID(appID)
		if !ok || pl != pipeline {
			continue
		}
		out[tp] = txn.Version
	}
	return out
}

// Next returns the next offset to apply for tp, and whether the table has
// a position for it at all (false: start from the earliest offset).
func (p Positions) Next(tp TopicPartition) (int64, bool) {
	v, ok := p[tp]
	return v, ok
}

// Applied reports whether the record at offset is already in the table.
func (p Positions) Applied(tp TopicPartition, offset int64) bool {
	v, ok := p[tp]
	return ok && offset < v
}

// Sorted returns the partitions in (topic, partition) order.
func (p Positions) Sorted() []TopicPartition {
	out := make([]TopicPartition, 0, len(p))
	for tp := range p {
		out = append(out, tp)
	}
	slices.SortFunc(out, TopicPartition.Compare)
	return out
}

// Range is the span of offsets of one partition a batch covers: From is the
// first offset read, Next the offset after the last one read.
type Range struct {
	From, Next int64
}

// Txns returns one txn action per partition of the batch, with the version
// set to the partition's next offset, in a stable order.
func Txns(pipeline string, ranges map[TopicPartition]Range, now time.Time) []delta.Action {
	tps := make(Positions, len(ranges))
	for tp, r := range ranges {
		tps[tp] = r.Next
	}
	ms := now.UnixMilli()
	out := make([]delta.Action, 0, len(ranges))
	for _, tp := range tps.Sorted() {
		out = append(out, delta.Action{Txn: &delta.Txn{AppID: AppID(pipeline, tp), Version: tps[tp], LastUpdated: &ms}})
	}
	return out
}

// GapError says the next offset a table needs is gone from Kafka (deleted
// by retention before it was applied). Applying from later offsets would
// silently lose changes, so it stops the table unless configured otherwise.
type GapError struct {
	Table     string
	TP        TopicPartition
	Next      int64 // what the table needs
	LogStart  int64 // the earliest offset Kafka still holds
	HasRecord bool  // whether the table had a position at all
}

func (e *GapError) Error() string {
	return fmt.Sprintf("table %s: topic %s partition %d: offsets %d..%d were deleted by retention before they were applied (the table needs offset %d, the log starts at %d)",
		e.Table, e.TP.Topic, e.TP.Partition, e.Next, e.LogStart-1, e.Next, e.LogStart)
}

// CheckGap returns a *GapError when Kafka no longer holds the next offset
// the table needs. A partition the table never saw needs offset 0.
func CheckGap(table string, p Positions, tp TopicPartition, logStart int64) error {
	next, ok := p.Next(tp)
	if next < logStart {
		return &GapError{Table: table, TP: tp, Next: next, LogStart: logStart, HasRecord: ok}
	}
	return nil
}
