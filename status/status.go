// Package status builds the report of `cdcapply status`: for each table
// its version, last commit, stream positions, lag against the brokers'
// high watermarks, freshness, row counts read from the data files, purge
// horizon, halt state and which older versions can still be read.
//
// The report is a plain value (Gather fills it, WriteText and WriteJSON
// render it) so that the command and a future metrics endpoint share it.
// Everything that changes between runs (the clock, the brokers) comes in
// through Options, which keeps golden tests deterministic.
package status

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/tombstone"
)

// EndOffsets returns the high watermark (the offset after the last
// record) of every partition of the given topics.
type EndOffsets interface {
	EndOffsets(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error)
}

// CleanupPolicyLister returns the cleanup.policy of each of topics the
// cluster has.
type CleanupPolicyLister interface {
	CleanupPolicies(ctx context.Context, topics []string) (map[string]string, error)
}

// TopicIDLister returns the cluster's topic ID of each of topics that
// exists, as Kafka's tools print it. Options.Offsets may implement it.
type TopicIDLister interface {
	TopicIDs(ctx context.Context, topics []string) (map[string]string, error)
}

// StartOffsetLister returns the log start offset of every partition of
// topics. Options.Offsets may implement it.
type StartOffsetLister interface {
	StartOffsets(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error)
}

// GroupDescriber asks a consumer group's coordinator for its members.
type GroupDescriber interface {
	DescribeGroup(ctx context.Context, group string) (*Group, error)
}

// Group is the pipeline's consumer group as its coordinator describes it:
// which process reads which partition. The tables' positions never depend
// on it; it says who applies each partition now.
type Group struct {
	Name string `json:"name"`
	// State is the coordinator's: Stable, PreparingRebalance,
	// CompletingRebalance, Empty (no process is a member) or Dead.
	State string `json:"state,omitempty"`
	// Protocol is the group's partition assignment protocol:
	// cdcapply-tables (kafka.assignment: tables, one member per table) or
	// cooperative-sticky (partitions; or a group some member of which
	// does not offer the table protocol: an older cdcapply).
	Protocol string   `json:"protocol,omitempty"`
	Members  []Member `json:"members"`
	// Split are the tables whose partitions several members read: each
	// writes the table, and their commits conflict on the files both
	// change (each conflict reads a batch again).
	Split []SplitTable `json:"split,omitempty"`
	// Unassigned are the tables' partitions (those the report lists) that
	// no member reads: nobody applies them until the group assigns them.
	Unassigned []string `json:"unassigned,omitempty"`
	// Error is why the group could not be described.
	Error string `json:"error,omitempty"`
}

// SplitTable is a table read by several members of the group.
type SplitTable struct {
	Table string `json:"table"`
	// Members are the instance ids (client id@host of dynamic members).
	Members []string `json:"members"`
}

// Member is one process of the group.
type Member struct {
	// InstanceID is kafka.instance_id (a static member); empty for a
	// dynamic one.
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id"`
	Host       string `json:"host"`
	// Partitions are "topic/partition", sorted.
	Partitions []string `json:"partitions"`
	// Inflow is what the member measured of each table's inflow (records
	// a second its topics grow by: the tables it reads, and those it gave
	// up in the last 10 minutes) and told the group at its last join,
	// where the group assigns by table; the leader weighs tables by it.
	Inflow map[string]float64 `json:"inflow,omitempty"`
}

// Source names one table to report on.
type Source struct {
	// Name is the table's name in the configuration (or its location).
	Name string
	// Store is rooted at the table.
	Store storage.Storage
	// Pipeline selects the txn positions to report; empty reports those
	// of every cdcapply pipeline found in the table.
	Pipeline string
	// Topics are topics the table consumes even where it has no position
	// yet (a partition never applied is behind by its whole length).
	Topics []string
	// MaxLateness, when positive, counts the tombstones a purge would take.
	MaxLateness time.Duration
	// KafkaTombstones is the table's kafka_tombstones setting ("skip" or
	// "delete"); empty when not known (a table named by its location).
	KafkaTombstones string
}

// Options configures Gather.
type Options struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Offsets reads the brokers' high watermarks; nil when no brokers are
	// configured. An error from it makes lag unknown, never fails Gather.
	Offsets EndOffsets
	// Versions is how many versions, newest first, are checked for time
	// travel; 20 when zero.
	Versions int
	// Group is the consumer group to describe with Members; both set or
	// the report has no group.
	Group   string
	Members GroupDescriber
}

// Report is the whole status.
type Report struct {
	// At is when the report was taken.
	At time.Time `json:"at"`
	// Brokers is "reachable", "unreachable", or "not configured".
	Brokers string `json:"brokers"`
	// BrokerError is why the brokers could not be asked.
	BrokerError string `json:"broker_error,omitempty"`
	// Tables are in the order the sources were given.
	Tables []Table `json:"tables"`
	// Group is the consumer group, when one was given and the brokers
	// answered.
	Group *Group `json:"group,omitempty"`
}

// Table is one table's status.
type Table struct {
	Name     string `json:"name"`
	Location string `json:"location"`
	// State is "running" (not halted: whether an engine process is up is
	// not visible from the table), "halted", or "unreadable" (Error says why).
	State string `json:"state"`
	// Halt is the recorded halt: current when State is halted, else an
	// earlier halt the table has since run past (kept for the record).
	Halt  *Halt  `json:"halt,omitempty"`
	Error string `json:"error,omitempty"`

	Version    int64   `json:"version"`
	LastCommit *Commit `json:"last_commit,omitempty"`
	// LastStreamCommit is the newest commit that moved a Kafka position
	// (maintenance such as vacuum or optimize commits after it); nil when
	// none is among the versions checked for time travel.
	LastStreamCommit *Commit     `json:"last_stream_commit,omitempty"`
	Partitions       []Partition `json:"partitions"`
	// LagKnown is false when the brokers could not be asked; TotalLag
	// then is 0 and meaningless.
	LagKnown bool  `json:"lag_known"`
	TotalLag int64 `json:"total_lag"`

	Freshness *Freshness `json:"freshness,omitempty"`
	Rows      Rows       `json:"rows"`
	// Horizon is the purge horizon; nil when no purge ever committed.
	Horizon *Horizon `json:"purge_horizon,omitempty"`
	// TimeTravel says which recent versions can still be read.
	TimeTravel TimeTravel `json:"time_travel"`
	// Log is the state of the Delta log readers replay.
	Log Log `json:"log"`
	// KafkaTombstones is the table's kafka_tombstones setting, when known.
	KafkaTombstones string `json:"kafka_tombstones,omitempty"`
	// Compacted are the table's topics whose cleanup.policy compacts
	// them: the log cleaner drops a delete's change event once its Kafka
	// tombstone follows, so a table that skips tombstones keeps those
	// rows live.
	Compacted []CompactedTopic `json:"compacted_topics,omitempty"`
	// Topics are the topic IDs the table recorded (apply.TopicsDomain),
	// with the cluster's when the brokers were asked.
	Topics []Topic `json:"topics,omitempty"`
}

// CompactedTopic is a compacted topic a table reads.
type CompactedTopic struct {
	Topic         string `json:"topic"`
	CleanupPolicy string `json:"cleanup_policy"`
	// DeletesLost is set when the table skips Kafka tombstones: deletes
	// the cleaner reduced to a tombstone did not reach it.
	DeletesLost bool `json:"deletes_lost,omitempty"`
}

// Topic is one topic the table recorded the ID of.
type Topic struct {
	Name     string `json:"name"`
	Recorded string `json:"recorded_id"`
	// Cluster is the topic's ID in the cluster now: "" when the brokers
	// were not asked or do not have the topic.
	Cluster string `json:"cluster_id,omitempty"`
	// Recreated says the cluster's topic is another one than the table's
	// positions were read from (deleted and created again): its lag is
	// meaningless and an engine halts the table (topic_recreated).
	Recreated bool `json:"recreated,omitempty"`
}

// Log is the state of the table's Delta log: where readers (and an
// engine's restart) start replaying it, and what every checkpoint carries.
type Log struct {
	// CheckpointVersion is the newest log checkpoint's version; nil when
	// the log has none, so readers replay every commit.
	CheckpointVersion *int64 `json:"checkpoint_version,omitempty"`
	// CommitsAfter is the commits readers replay after that checkpoint
	// (every commit when there is none).
	CommitsAfter int64 `json:"commits_after_checkpoint"`
	// CheckpointInterval is delta.checkpointInterval: a checkpoint is
	// due at every version it divides.
	CheckpointInterval int64 `json:"checkpoint_interval"`
	// CheckpointsBehind is set when more than checkpointsBehindIntervals
	// intervals of commits follow the newest checkpoint (or the log's
	// start): checkpoints fail or hang.
	CheckpointsBehind bool `json:"checkpoints_behind"`
	// LiveFiles are the log's add actions; RemovedFiles the remove
	// actions it keeps until delta.deletedFileRetentionDuration expires
	// them (each checkpoint carries them all).
	LiveFiles    int `json:"live_files"`
	RemovedFiles int `json:"removed_files"`
}

// checkpointsBehindIntervals is how many checkpoint intervals of commits
// may follow the newest checkpoint before Log.CheckpointsBehind is set.
// An engine writes each checkpoint beside its next commits and skips a
// checkpoint version while the previous one is still written, so up to
// about two intervals is normal.
const checkpointsBehindIntervals = 3

// Halt is a recorded halt of the table by the engine.
type Halt struct {
	// Class is the short class of the halt (as the halted metric's label).
	Class  string    `json:"class,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Version is the table version when the engine halted.
	Version int64 `json:"version"`
	// Current is false when a later commit shows the table ran again, or
	// an engine started applying it again (Resumed).
	Current bool `json:"current"`
	// Resumed is when an engine opened the table again after the halt.
	Resumed *time.Time `json:"resumed,omitempty"`
}

// Commit describes the latest commit.
type Commit struct {
	Version   int64     `json:"version"`
	Time      time.Time `json:"time"`
	Operation string    `json:"operation"`
	// Engine is the writer's engineInfo.
	Engine string `json:"engine,omitempty"`
	// RecordsRead is the Kafka records an engine commit covered (-1:
	// not an engine commit or not recorded).
	RecordsRead int64 `json:"records_read"`
}

// Partition is one Kafka partition's position and lag.
type Partition struct {
	Pipeline  string `json:"pipeline"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Next is the next offset to apply (from the txn action); HasPosition
	// is false when the table has applied nothing from the partition.
	Next        int64 `json:"next_offset"`
	HasPosition bool  `json:"has_position"`
	// HighWatermark and Lag are set when the brokers answered for the
	// partition; Lag = HighWatermark - Next.
	HighWatermark *int64 `json:"high_watermark,omitempty"`
	Lag           *int64 `json:"lag,omitempty"`
	// LogStart is the partition's log start offset, when the brokers
	// answered; Gone counts the offsets from Next that retention deleted
	// before the table applied them (an engine halts the table on them,
	// offset_gap, unless on_offset_gap is skip).
	LogStart *int64 `json:"log_start,omitempty"`
	Gone     int64  `json:"gone,omitempty"`
}

// Freshness is how old the newest applied change is.
type Freshness struct {
	// NewestSourceTs is the largest _cdc_source_ts among the live rows
	// (tombstones included): the source commit time of the newest change
	// the table holds.
	NewestSourceTs time.Time `json:"newest_source_ts"`
	// Seconds is report time minus NewestSourceTs.
	Seconds float64 `json:"seconds"`
}

// Rows are counted by reading the data files (deletion vectors applied),
// not from file statistics.
type Rows struct {
	Files      int   `json:"files"`
	Total      int64 `json:"total"`
	Live       int64 `json:"live"`
	Tombstones int64 `json:"tombstones"`
	// PurgeEligible counts tombstones older than the maximum lateness
	// (-1 when no maximum lateness was given).
	PurgeEligible int64 `json:"purge_eligible"`
}

// Horizon is the purge horizon.
type Horizon struct {
	SourceTs   time.Time `json:"source_ts"`
	PurgedAt   time.Time `json:"purged_at"`
	PurgedRows int64     `json:"purged_rows"`
}

// TimeTravel lists the checked versions by readability.
type TimeTravel struct {
	// From and To bound the versions checked (newest Options.Versions).
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Readable are the checked versions whose log and every data file
	// are present, as inclusive ranges.
	Readable []VersionRange `json:"readable"`
	// Unreadable are the checked versions that cannot be read, and why.
	Unreadable []Unreadable `json:"unreadable"`
}

// VersionRange is an inclusive range of versions.
type VersionRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Unreadable is a version that cannot be read.
type Unreadable struct {
	Version int64 `json:"version"`
	// MissingFiles counts data files vacuum removed (0 when the log
	// itself cannot be replayed: Reason says why).
	MissingFiles int    `json:"missing_files"`
	Reason       string `json:"reason"`
}

// Gather builds the report for the sources. A table that cannot be read
// is reported as unreadable, not returned as an error; only a cancelled
// context fails Gather.
func Gather(ctx context.Context, sources []Source, opts Options) (*Report, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if opts.Versions <= 0 {
		opts.Versions = 20
	}
	rep := &Report{At: now().UTC(), Brokers: "not configured"}
	topicSet := map[string]bool{}
	for _, src := range sources {
		t := Table{Name: src.Name, Location: src.Store.Location(), State: "running", Partitions: []Partition{}, KafkaTombstones: src.KafkaTombstones}
		err := gatherTable(ctx, src, opts, rep.At, &t)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("gather status: %w", err)
		}
		if err != nil {
			t.State, t.Error = "unreadable", err.Error()
		}
		for _, p := range t.Partitions {
			topicSet[p.Topic] = true
		}
		rep.Tables = append(rep.Tables, t)
	}
	if opts.Offsets == nil {
		return rep, nil
	}
	topics := make([]string, 0, len(topicSet))
	for tp := range topicSet {
		topics = append(topics, tp)
	}
	sort.Strings(topics)
	ends, err := opts.Offsets.EndOffsets(ctx, topics)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("gather status: %w", cerr)
		}
		rep.Brokers, rep.BrokerError = "unreachable", err.Error()
		return rep, nil
	}
	rep.Brokers = "reachable"
	if l, ok := opts.Offsets.(TopicIDLister); ok {
		// Lag is left unknown for a recreated topic, so an error here
		// only leaves the IDs out.
		if ids, err := l.TopicIDs(ctx, topics); err == nil {
			for i := range rep.Tables {
				markRecreated(&rep.Tables[i], ids)
			}
		}
	}
	for i := range rep.Tables {
		addLag(&rep.Tables[i], ends)
	}
	if l, ok := opts.Offsets.(CleanupPolicyLister); ok {
		// Without them compaction is not shown; the rest stands.
		if policies, err := l.CleanupPolicies(ctx, topics); err == nil {
			for i := range rep.Tables {
				markCompacted(&rep.Tables[i], policies)
			}
		}
	}
	if l, ok := opts.Offsets.(StartOffsetLister); ok {
		// Without them the gaps are not shown; lag stands.
		if starts, err := l.StartOffsets(ctx, topics); err == nil {
			for i := range rep.Tables {
				addGaps(&rep.Tables[i], starts)
			}
		}
	}
	if opts.Group != "" && opts.Members != nil {
		rep.Group = describeGroup(ctx, opts, rep.Tables)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("gather status: %w", err)
		}
	}
	return rep, nil
}

// describeGroup asks for the group's members and lists the tables'
// partitions none of them reads.
func describeGroup(ctx context.Context, opts Options, tables []Table) *Group {
	g, err := opts.Members.DescribeGroup(ctx, opts.Group)
	if err != nil {
		return &Group{Name: opts.Group, Members: []Member{}, Error: err.Error()}
	}
	read := map[string]int{} // partition -> member index; -1: none
	for i, m := range g.Members {
		for _, p := range m.Partitions {
			read[p] = i
		}
	}
	for _, t := range tables {
		var readers []int
		for _, p := range t.Partitions {
			tp := (checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}).String()
			i, ok := read[tp]
			if !ok {
				g.Unassigned = append(g.Unassigned, tp)
				read[tp] = -1 // a topic shared by two tables is listed once
				continue
			}
			if i >= 0 && !slices.Contains(readers, i) {
				readers = append(readers, i)
			}
		}
		if len(readers) > 1 {
			sp := SplitTable{Table: t.Name}
			for _, i := range readers {
				sp.Members = append(sp.Members, g.Members[i].name())
			}
			slices.Sort(sp.Members)
			g.Split = append(g.Split, sp)
		}
	}
	return g
}

// name is how status names a member: its instance id, or a dynamic
// member's client id and host.
func (m Member) name() string {
	if m.InstanceID != "" {
		return m.InstanceID
	}
	return m.ClientID + "@" + m.Host
}

// markCompacted lists the table's topics that policies say are compacted.
func markCompacted(t *Table, policies map[string]string) {
	seen := map[string]bool{}
	for _, p := range t.Partitions {
		if seen[p.Topic] {
			continue
		}
		seen[p.Topic] = true
		if policy := policies[p.Topic]; apply.Compacted(policy) {
			t.Compacted = append(t.Compacted, CompactedTopic{Topic: p.Topic, CleanupPolicy: policy, DeletesLost: t.KafkaTombstones == "skip"})
		}
	}
}

// markRecreated sets each recorded topic's cluster ID, and whether the
// topic was recreated, from ids.
func markRecreated(t *Table, ids map[string]string) {
	for i := range t.Topics {
		tp := &t.Topics[i]
		tp.Cluster = ids[tp.Name]
		tp.Recreated = tp.Cluster != "" && tp.Cluster != tp.Recorded
	}
}

// recreated reports whether t's topic was recreated.
func (t *Table) recreated(topic string) bool {
	for _, tp := range t.Topics {
		if tp.Name == topic {
			return tp.Recreated
		}
	}
	return false
}

// addLag fills in high watermarks and lags; partitions of the table's
// topics the brokers know but the table never applied join with lag equal
// to the whole partition.
func addLag(t *Table, ends map[checkpoint.TopicPartition]int64) {
	if t.State == "unreadable" {
		return
	}
	seen := map[checkpoint.TopicPartition]bool{}
	topics := map[string]string{} // topic -> pipeline
	for _, p := range t.Partitions {
		seen[checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = true
		topics[p.Topic] = p.Pipeline
	}
	for tp := range ends {
		if pl, ok := topics[tp.Topic]; ok && !seen[tp] {
			t.Partitions = append(t.Partitions, Partition{Pipeline: pl, Topic: tp.Topic, Partition: tp.Partition})
		}
	}
	sortPartitions(t.Partitions)
	t.LagKnown = true
	for i := range t.Partitions {
		p := &t.Partitions[i]
		hw, ok := ends[checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}]
		if ok && t.recreated(p.Topic) {
			// The high watermark is another topic's: no lag to tell.
			t.LagKnown = false
			continue
		}
		if !ok {
			// The broker does not know the partition (topic deleted?):
			// the table's lag is not fully known.
			t.LagKnown = false
			continue
		}
		lag := max(hw-p.Next, 0)
		p.HighWatermark, p.Lag = &hw, &lag
		t.TotalLag += lag
	}
}

// addGaps sets each partition's log start and the offsets retention
// deleted before the table applied them (none for a recreated topic,
// whose offsets are another topic's).
func addGaps(t *Table, starts map[checkpoint.TopicPartition]int64) {
	for i := range t.Partitions {
		p := &t.Partitions[i]
		start, ok := starts[checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}]
		if !ok || t.recreated(p.Topic) {
			continue
		}
		p.LogStart = &start
		p.Gone = max(start-p.Next, 0)
	}
}

func sortPartitions(ps []Partition) {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Pipeline != b.Pipeline {
			return a.Pipeline < b.Pipeline
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
}

// gatherTable fills t from the table's log, files and state file.
func gatherTable(ctx context.Context, src Source, opts Options, now time.Time, t *Table) error {
	tbl := delta.Open(src.Store)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("read table: %w", err)
	}
	t.Version = snap.Version
	t.Log = logOf(snap)

	st, ok, err := apply.ReadState(ctx, src.Store)
	if err != nil {
		return err
	}
	if ok && st.Halted {
		// A commit after the halt means an engine applied to the table
		// again; the state file is then history, not the current state.
		// So does an engine that opened the table again since.
		h := &Halt{Class: st.Class, Reason: st.Reason, At: st.At.UTC(), Version: st.Version, Current: snap.Version <= st.Version && st.ResumedAt == nil}
		if st.ResumedAt != nil {
			r := st.ResumedAt.UTC()
			h.Resumed = &r
		}
		t.Halt = h
		if h.Current {
			t.State = "halted"
		}
	}

	ids, err := apply.RecordedTopicIDs(snap)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(ids)) {
		t.Topics = append(t.Topics, Topic{Name: name, Recorded: ids[name]})
	}

	if t.LastCommit, t.LastStreamCommit, err = lastCommits(ctx, tbl, snap.Version, opts.Versions); err != nil {
		return err
	}

	for appID, txn := range snap.Txns() {
		pl, tp, ok := checkpoint.ParseAppID(appID)
		if !ok || (src.Pipeline != "" && pl != src.Pipeline) {
			continue
		}
		t.Partitions = append(t.Partitions, Partition{Pipeline: pl, Topic: tp.Topic, Partition: tp.Partition, Next: txn.Version, HasPosition: true})
	}
	if src.Pipeline != "" {
		have := map[string]bool{}
		for _, p := range t.Partitions {
			have[p.Topic] = true
		}
		for _, topic := range src.Topics {
			if !have[topic] {
				// Partition 0 stands for the topic until the brokers
				// say which partitions it has.
				t.Partitions = append(t.Partitions, Partition{Pipeline: src.Pipeline, Topic: topic})
			}
		}
	}
	sortPartitions(t.Partitions)

	if err := countRows(ctx, tbl, snap, src.MaxLateness, now, t); err != nil {
		return err
	}
	h, ok, err := tombstone.ReadHorizon(snap)
	if err != nil {
		return err
	}
	if ok {
		t.Horizon = &Horizon{SourceTs: time.UnixMicro(h.SourceTsMicros).UTC(), PurgedAt: time.UnixMilli(h.PurgedAtMillis).UTC(), PurgedRows: h.PurgedRows}
	}
	t.TimeTravel, err = timeTravel(ctx, tbl, snap.Version, opts.Versions)
	return err
}

// logOf describes snap's log.
func logOf(snap *delta.Snapshot) Log {
	l := Log{CheckpointInterval: snap.CheckpointInterval(), LiveFiles: snap.NumFiles(), RemovedFiles: snap.NumTombstones(),
		CommitsAfter: snap.Version + 1}
	if v := snap.CheckpointVersion(); v >= 0 {
		l.CheckpointVersion = &v
		l.CommitsAfter = snap.Version - v
	}
	l.CheckpointsBehind = l.CommitsAfter > checkpointsBehindIntervals*l.CheckpointInterval
	return l
}

// lastCommits reads the commitInfo of version latest, and walks back at
// most n versions to the newest commit holding a cdcapply txn action (a
// stream commit).
func lastCommits(ctx context.Context, tbl *delta.Table, latest int64, n int) (last, stream *Commit, err error) {
	for v := latest; v >= 0 && v > latest-int64(n); v-- {
		actions, err := tbl.ReadCommit(ctx, v)
		if errors.Is(err, storage.ErrNotExist) {
			// Log cleanup left only a checkpoint for this version.
			if last == nil {
				last = &Commit{Version: v, RecordsRead: -1}
			}
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read commit %d: %w", v, err)
		}
		c := commitOf(v, actions)
		if last == nil {
			last = c
		}
		for _, a := range actions {
			if a.Txn != nil {
				if _, _, ok := checkpoint.ParseAppID(a.Txn.AppID); ok {
					return last, c, nil
				}
			}
		}
	}
	return last, nil, nil
}

// commitOf describes version v from its actions' commitInfo.
func commitOf(v int64, actions []delta.Action) *Commit {
	c := &Commit{Version: v, RecordsRead: -1}
	for _, a := range actions {
		ci := a.CommitInfo
		if ci == nil {
			continue
		}
		ts := ci.Timestamp
		if ci.InCommitTimestamp != nil {
			ts = *ci.InCommitTimestamp
		}
		c.Time, c.Operation, c.Engine = time.UnixMilli(ts).UTC(), ci.Operation, ci.EngineInfo
		if n, ok := number(ci.OperationParameters["recordsRead"]); ok {
			c.RecordsRead = n
		}
		break
	}
	return c
}

// number reads a count from operationParameters, where writers store
// numbers as JSON numbers or as strings.
func number(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		return int64(x), true
	case string:
		var n int64
		if _, err := fmt.Sscan(x, &n); err == nil {
			return n, true
		}
	}
	return 0, false
}

// countRows reads the engine columns of every live file: the counts come
// from the rows themselves so that a file with wrong or missing
// statistics cannot mislead the operator.
func countRows(ctx context.Context, tbl *delta.Table, snap *delta.Snapshot, maxLateness time.Duration, now time.Time, t *Table) error {
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	if f, _, ok := snap.Schema.Field(tombstone.ColDeleted); !ok || f.Type.String() != delta.Boolean.String() {
		return fmt.Errorf("count rows: the table has no boolean %s column: not a cdcapply table", tombstone.ColDeleted)
	}
	if f, _, ok := snap.Schema.Field(tombstone.ColSourceTs); !ok || f.Type.String() != delta.Timestamp.String() {
		return fmt.Errorf("count rows: the table has no timestamp %s column: not a cdcapply table", tombstone.ColSourceTs)
	}
	cutoff := int64(0)
	t.Rows.PurgeEligible = -1
	if maxLateness > 0 {
		cutoff, t.Rows.PurgeEligible = now.Add(-maxLateness).UnixMicro(), 0
	}
	var newest int64
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, tbl.Storage(), layout, add, datafile.Columns(tombstone.ColDeleted, tombstone.ColSourceTs))
		if err != nil {
			return fmt.Errorf("count rows: %w", err)
		}
		t.Rows.Files++
		t.Rows.Total += rec.NumRows()
		var del *array.Boolean
		var ts *array.Timestamp
		for i, f := range rec.Schema().Fields() {
			switch f.Name {
			case tombstone.ColDeleted:
				del, _ = rec.Column(i).(*array.Boolean)
			case tombstone.ColSourceTs:
				ts, _ = rec.Column(i).(*array.Timestamp)
			}
		}
		if del == nil || ts == nil {
			rec.Release()
			return fmt.Errorf("count rows: file %s: engine columns have unexpected types", add.Path)
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			v := int64(0)
			if !ts.IsNull(r) {
				v = int64(ts.Value(r))
				newest = max(newest, v)
			}
			if del.IsNull(r) || !del.Value(r) {
				t.Rows.Live++
				continue
			}
			t.Rows.Tombstones++
			if maxLateness > 0 && !ts.IsNull(r) && v < cutoff {
				t.Rows.PurgeEligible++
			}
		}
		rec.Release()
	}
	if newest > 0 {
		nt := time.UnixMicro(newest).UTC()
		t.Freshness = &Freshness{NewestSourceTs: nt, Seconds: now.Sub(nt).Seconds()}
	}
	return nil
}

// timeTravel checks the newest n versions up to latest: a version is
// readable when its snapshot can be replayed and storage holds every data
// file it references (vacuum deletes files of old versions, so a version
// whose log is intact may still be gone).
func timeTravel(ctx context.Context, tbl *delta.Table, latest int64, n int) (TimeTravel, error) {
	tt := TimeTravel{From: max(latest-int64(n)+1, 0), To: latest, Readable: []VersionRange{}, Unreadable: []Unreadable{}}
	for v := tt.From; v <= latest; v++ {
		snap, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return tt, cerr
			}
			tt.Unreadable = append(tt.Unreadable, Unreadable{Version: v, Reason: "log: " + err.Error()})
			continue
		}
		missing, err := delta.MissingFiles(ctx, tbl, snap)
		if err != nil {
			return tt, fmt.Errorf("check version %d: %w", v, err)
		}
		if len(missing) > 0 {
			tt.Unreadable = append(tt.Unreadable, Unreadable{Version: v, MissingFiles: len(missing), Reason: fmt.Sprintf("%d data files removed by vacuum", len(missing))})
			continue
		}
		if k := len(tt.Readable); k > 0 && tt.Readable[k-1].To == v-1 {
			tt.Readable[k-1].To = v
		} else {
			tt.Readable = append(tt.Readable, VersionRange{From: v, To: v})
		}
	}
	return tt, nil
}
