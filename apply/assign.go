package apply

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/checkpoint"
)

// The ways kafka.assignment divides a pipeline's partitions among the
// processes of its group.
const (
	// AssignTables gives each table's partitions, of all its topics, to one
	// process: a table has one writer in the group, and the group spreads
	// tables, not partitions. The default.
	AssignTables = "tables"
	// AssignPartitions is Kafka's cooperative-sticky balancing: a table's
	// partitions may be split between processes, which then write one
	// table at once and conflict on the files both change.
	AssignPartitions = "partitions"
)

// groupTableProtocol is the group protocol of AssignTables. Each member also
// offers cooperative-sticky, so a group of processes of which some run an
// older cdcapply (or kafka.assignment: partitions) agrees on that until
// every member offers this one.
const groupTableProtocol = "cdcapply-tables"

// tableBalancer is a cooperative group balancer that keeps each table's
// partitions on one member. Two processes writing one table conflict on
// every file both batches change (at 1M keys a batch touches most of a
// table's files), and each conflict drops the batch and reads it again
// from Kafka; a table of its own for each process has no conflicts.
//
// Each member tells the leader which table reads each topic it consumes,
// and the inflow of the tables it reads (its join metadata's user data),
// so the leader groups a pattern table's topics too, and weighs tables by
// inflow (weighUnits; by partitions where nobody measured any). The
// leader keeps a table with the member that owns most of its partitions
// unless that member would then hold more than its share of the weight,
// gives the rest, heaviest first, to the least loaded member that
// consumes all of the table's topics, and lets the cooperative protocol
// move a table in two rebalances (its partitions are revoked from the old
// owner before the new one is given them).
type tableBalancer struct {
	// tableOf names the table that reads topic ("" when none does).
	tableOf func(topic string) string
	// rates, when set, gives the inflow of the tables this process reads
	// or read lately (records a second; inflow.rates), which the leader
	// weighs tables by.
	rates func() map[string]float64
	// balanced, when set, is told the leader's plan (member -> tables; a
	// static member named by its instance id).
	balanced func(plan map[string][]string)
}

// syncWatch wraps a group balancer to tell synced its protocol whenever
// the group assigns by it: franz-go parses a member's assignment with the
// balancer whose protocol the group chose, so this is how a member set to
// tables learns which protocol its group runs (cooperative-sticky when it
// fell back).
type syncWatch struct {
	kgo.GroupBalancer
	synced func(protocol string)
}

func (w syncWatch) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	w.synced(w.ProtocolName())
	return w.GroupBalancer.ParseSyncAssignment(assignment)
}

// tableUserData is the member metadata's user data of groupTableProtocol.
type tableUserData struct {
	Tables map[string]string `json:"tables"` // topic -> table
	// Rates is the inflow of the tables the member reads or read in the
	// last inflowKeep (table -> records a second); a member of session 45
	// sends none, and ignores them.
	Rates map[string]float64 `json:"rates,omitempty"`
}

// TableMemberData reads what a member of a group under kafka.assignment:
// tables sent in its join metadata's user data: the table that reads each
// topic it consumes, and the inflow of the tables it reads or read lately
// (records a second). ok is false for user data of another kind.
func TableMemberData(userData []byte) (tables map[string]string, inflow map[string]float64, ok bool) {
	var ud tableUserData
	if json.Unmarshal(userData, &ud) != nil || ud.Tables == nil {
		return nil, nil, false
	}
	return ud.Tables, ud.Rates, true
}

func (tableBalancer) ProtocolName() string { return groupTableProtocol }
func (tableBalancer) IsCooperative() bool  { return true }

func (tb tableBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for topic, parts := range current {
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic, owned.Partitions = topic, parts
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	// Sorted: the coordinator compares metadata to decide whether a
	// rebalance is needed.
	slices.SortFunc(meta.OwnedPartitions, func(a, b kmsg.ConsumerMemberMetadataOwnedPartition) int {
		return strings.Compare(a.Topic, b.Topic)
	})
	ud := tableUserData{Tables: make(map[string]string, len(interests))}
	for _, topic := range interests {
		if name := tb.tableOf(topic); name != "" {
			ud.Tables[topic] = name
		}
	}
	if tb.rates != nil {
		ud.Rates = tb.rates()
	}
	meta.UserData, _ = json.Marshal(ud) // map keys are marshalled sorted
	return meta.AppendTo(nil)
}

func (tableBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (tb tableBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(tb, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

// assignUnit is what the leader gives one member whole: a table's topics
// (or a topic alone, when no member names its table or none consumes all
// of its table's topics).
type assignUnit struct {
	name   string
	table  string // "" for a topic no member names the table of
	topics []string
	parts  int     // partitions
	weight float64 // partitions, or records a second (weighUnits)
	label  string  // name, and the inflow it was weighed by
}

// assignMember is a member as the leader balances it.
type assignMember struct {
	m      *kmsg.JoinGroupResponseMember
	wants  map[string]bool // topics it consumes
	load   float64         // weight planned
	units  []string
	joined int                // its place in the members' order
	rates  map[string]float64 // the inflow it sent: table -> records a second
}

// rate is the inflow m sent for table (-1 for none, or a nil member).
func (m *assignMember) rate(table string) float64 {
	if m == nil {
		return -1
	}
	if r, ok := m.rates[table]; ok {
		return r
	}
	return -1
}

// stickySlack is how far above its share of the group's inflow a member
// may keep the tables it has, when tables are weighed by inflow: rates
// move between rebalances, and a moved table costs a revocation and its
// key index built again on the new member, so noise must not move one.
const stickySlack = 0.25

func (tb tableBalancer) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var members []*assignMember
	tableOf := map[string]string{}
	// owner[topic][partition]: the member with the newest claim on it.
	type claim struct {
		member *assignMember
		gen    int32
	}
	owner := map[string]map[int32]claim{}
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		am := &assignMember{m: m, wants: make(map[string]bool, len(meta.Topics)), joined: len(members)}
		members = append(members, am)
		for _, topic := range meta.Topics {
			am.wants[topic] = true
		}
		if tables, inflow, ok := TableMemberData(meta.UserData); ok {
			for topic, table := range tables {
				if _, ok := tableOf[topic]; !ok {
					tableOf[topic] = table
				}
			}
			am.rates = inflow
		}
		for _, o := range meta.OwnedPartitions {
			if owner[o.Topic] == nil {
				owner[o.Topic] = map[int32]claim{}
			}
			for _, p := range o.Partitions {
				if c, ok := owner[o.Topic][p]; !ok || meta.Generation > c.gen {
					owner[o.Topic][p] = claim{am, meta.Generation}
				}
			}
		}
	})
	// A table's inflow is what the member holding most of its partitions
	// measured, where it sent one (a former owner's rate is frozen at its
	// revocation), else the largest any member sent.
	rates := map[string]float64{}
	for _, m := range members {
		for table, r := range m.rates {
			if cur, ok := rates[table]; r >= 0 && (!ok || r > cur) {
				rates[table] = r
			}
		}
	}
	held := map[string]map[*assignMember]int{} // table -> member -> its partitions held
	for topic, parts := range owner {
		if table := tableOf[topic]; table != "" {
			for _, c := range parts {
				if held[table] == nil {
					held[table] = map[*assignMember]int{}
				}
				held[table][c.member]++
			}
		}
	}
	for table, by := range held {
		var holder *assignMember
		for m, n := range by {
			if _, ok := m.rates[table]; ok && (holder == nil || n > by[holder] || n == by[holder] && m.joined < holder.joined) {
				holder = m
			}
		}
		if r := holder.rate(table); r >= 0 {
			rates[table] = r
		}
	}
	units := groupUnits(topics, tableOf, members)
	byRate := weighUnits(units, rates)
	total := 0.0
	for _, u := range units {
		total += u.weight
	}
	// A member keeps its tables up to its share: of the partitions
	// rounded up, or of the inflow with some slack.
	share := total / float64(max(len(members), 1))
	if byRate {
		share *= 1 + stickySlack
	} else {
		share = math.Ceil(share)
	}
	planned := make(map[string]*assignMember, len(units))
	// Keep a table where it is, up to the owner's share (a table larger
	// than a share stays with an owner that holds nothing else).
	for _, u := range units {
		counts := map[*assignMember]int{}
		for _, topic := range u.topics {
			for _, c := range owner[topic] {
				counts[c.member]++
			}
		}
		var best *assignMember
		for m, n := range counts {
			if !m.consumesAll(u.topics) {
				continue
			}
			if best == nil || n > counts[best] || (n == counts[best] && m.joined < best.joined) {
				best = m
			}
		}
		if best != nil && (best.load == 0 || best.load+u.weight <= share) {
			best.take(u)
			planned[u.name] = best
		}
	}
	for _, u := range units {
		if planned[u.name] != nil {
			continue
		}
		var best *assignMember
		for _, m := range members {
			if !m.consumesAll(u.topics) {
				continue
			}
			if best == nil || m.load < best.load || (m.load == best.load && len(m.units) < len(best.units)) {
				best = m
			}
		}
		if best != nil {
			best.take(u)
			planned[u.name] = best
		}
	}
	plan := b.NewPlan()
	for _, u := range units {
		m := planned[u.name]
		if m == nil {
			continue
		}
		for _, topic := range u.topics {
			parts := make([]int32, topics[topic])
			for i := range parts {
				parts[i] = int32(i)
			}
			plan.AddPartitions(m.m, topic, parts)
		}
	}
	if tb.balanced != nil {
		out := make(map[string][]string, len(members))
		for _, m := range members {
			name := m.m.MemberID
			if m.m.InstanceID != nil {
				name = *m.m.InstanceID + " (" + name + ")"
			}
			out[name] = m.units
		}
		tb.balanced(out)
	}
	// A table that moves is first revoked from its owner; the owner
	// rejoins, and the next balance gives it to its new member.
	plan.AdjustCooperative(b)
	return plan
}

func (m *assignMember) consumesAll(topics []string) bool {
	for _, t := range topics {
		if !m.wants[t] {
			return false
		}
	}
	return true
}

// weighUnits sets each unit's weight: its table's inflow where a member
// reported one, else its partitions times the mean inflow a partition of
// the reported tables has; a unit weighs at least minPartitionRate a
// partition, so idle tables still spread by partitions. Without any
// reported inflow (a new group, a group of older members) a unit weighs
// its partitions. It sorts the units heaviest first (then by name, so
// every leader plans alike) and says whether they were weighed by inflow.
func weighUnits(units []assignUnit, rates map[string]float64) bool {
	var rated float64
	ratedParts := 0
	for _, u := range units {
		if r, ok := rates[u.table]; ok && u.table != "" {
			rated += r
			ratedParts += u.parts
		}
	}
	byRate := ratedParts > 0
	perPart := minPartitionRate
	if byRate {
		perPart = max(rated/float64(ratedParts), minPartitionRate)
	}
	for i := range units {
		u := &units[i]
		u.label = u.name
		switch r, ok := rates[u.table]; {
		case !byRate:
			u.weight = float64(u.parts)
		case ok && u.table != "":
			u.weight = max(r, minPartitionRate*float64(u.parts))
			u.label = fmt.Sprintf("%s (%.3g records/s)", u.name, r)
		default:
			u.weight = perPart * float64(u.parts)
			u.label = fmt.Sprintf("%s (inflow unknown, weighed as %.3g records/s)", u.name, u.weight)
		}
	}
	slices.SortFunc(units, func(a, b assignUnit) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return byRate
}

// minPartitionRate is the least a partition weighs when tables are
// weighed by inflow (records a second).
const minPartitionRate = 1.0

func (m *assignMember) take(u assignUnit) {
	m.load += u.weight
	m.units = append(m.units, u.label)
}

// groupUnits groups the topics to balance by the table that reads them
// (weighUnits weighs and orders them). A table whose topics no one member
// consumes all of is split into its topics.
func groupUnits(topics map[string]int32, tableOf map[string]string, members []*assignMember) []assignUnit {
	byTable := map[string][]string{}
	for topic, n := range topics {
		if n <= 0 {
			continue
		}
		name := "topic " + topic
		if table := tableOf[topic]; table != "" {
			name = "table " + table
		}
		byTable[name] = append(byTable[name], topic)
	}
	var units []assignUnit
	for name, ts := range byTable {
		table, _ := strings.CutPrefix(name, "table ")
		if table == name {
			table = ""
		}
		slices.Sort(ts)
		whole := false
		for _, m := range members {
			if m.consumesAll(ts) {
				whole = true
				break
			}
		}
		if whole || len(ts) == 1 {
			u := assignUnit{name: name, table: table, topics: ts}
			for _, t := range ts {
				u.parts += int(topics[t])
			}
			units = append(units, u)
			continue
		}
		// Split by topic: the table's inflow is not known per topic, so
		// these weigh by partitions.
		for _, t := range ts {
			units = append(units, assignUnit{name: fmt.Sprintf("%s (topic %s)", name, t), topics: []string{t}, parts: int(topics[t])})
		}
	}
	return units
}

// inflow measures each table's inflow for the table balancer: the records
// a second the source adds to its topics, from the growth of the high
// watermarks the fetches report (not the records the engine reads, which
// a backlog's catch-up would inflate). The client hands over a fetch only
// when some partition in it has records, so a partition this process owns
// and has not seen since is taken as idle since (its high watermark
// unchanged). A table this process stopped reading keeps the rate it last
// had for inflowKeep, so the member it moves to in a cooperative
// rebalance's second round (which has not measured it yet) is weighed
// with it.
type inflow struct {
	now func() time.Time

	mu    sync.Mutex // a leaf: nothing is called under it
	parts map[checkpoint.TopicPartition]*partInflow
}

// partInflow is one partition's high watermarks as seen: anchors at least
// inflowAnchorEvery apart (a ring over the last inflowWindow), and the
// latest.
type partInflow struct {
	table    string
	owned    bool // this process reads it
	assigned time.Time
	revoked  time.Time // when it stopped reading it (owned false)
	anchors  [inflowAnchors]hwmSeen
	n, head  int // anchors held; the oldest's index
	last     hwmSeen
}

type hwmSeen struct {
	at  time.Time
	hwm int64
}

const (
	// inflowWindow is how far back a partition's rate looks.
	inflowWindow      = 10 * time.Minute
	inflowAnchorEvery = 10 * time.Second
	inflowAnchors     = int(inflowWindow/inflowAnchorEvery) + 1
	// inflowMinSpan is the least time a rate is measured over.
	inflowMinSpan = time.Second
	// inflowKeep is how long a partition's rate is reported after this
	// process stopped reading it.
	inflowKeep = 10 * time.Minute
)

func newInflow(now func() time.Time) *inflow {
	return &inflow{now: now, parts: map[checkpoint.TopicPartition]*partInflow{}}
}

// hwmObs is a partition's high watermark reported by a fetch, and its
// table.
type hwmObs struct {
	tp    checkpoint.TopicPartition
	table string
	hwm   int64
}

// fetched records the high watermarks of a poll's partitions, each under
// the table tableOf names (partitions of no table are left out).
func (in *inflow) fetched(fetches kgo.Fetches, tableOf func(topic string) string) {
	var obs []hwmObs
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.HighWatermark < 0 || p.Err != nil {
			return
		}
		if table := tableOf(p.Topic); table != "" {
			obs = append(obs, hwmObs{checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}, table, p.HighWatermark})
		}
	})
	in.observe(obs)
}

// assigned notes partitions this process now reads, each with its table
// (tableOf; partitions of no table are left out).
func (in *inflow) assigned(parts map[string][]int32, tableOf func(topic string) string) {
	tables := make(map[string]string, len(parts)) // resolved before the lock
	for topic := range parts {
		tables[topic] = tableOf(topic)
	}
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for topic, ps := range parts {
		table := tables[topic]
		if table == "" {
			continue
		}
		for _, p := range ps {
			tp := checkpoint.TopicPartition{Topic: topic, Partition: p}
			pi := in.parts[tp]
			if pi == nil || pi.table != table {
				pi = &partInflow{table: table}
				in.parts[tp] = pi
			}
			pi.owned, pi.assigned = true, now
		}
	}
}

// revoked notes partitions this process no longer reads: their rate is
// kept as it was for inflowKeep.
func (in *inflow) revoked(parts map[string][]int32) {
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			if pi := in.parts[checkpoint.TopicPartition{Topic: topic, Partition: p}]; pi != nil && pi.owned {
				pi.owned, pi.revoked = false, now
			}
		}
	}
}

// observe records high watermarks seen now.
func (in *inflow) observe(obs []hwmObs) {
	if len(obs) == 0 {
		return
	}
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, o := range obs {
		p := in.parts[o.tp]
		if p == nil || p.table != o.table || (p.n > 0 && o.hwm < p.last.hwm) {
			// Not seen assigned, read by another table now, or a log
			// that went back (a topic recreated, truncated): measured
			// afresh.
			p = &partInflow{table: o.table, owned: true, assigned: now}
			in.parts[o.tp] = p
		}
		seen := hwmSeen{now, o.hwm}
		p.last = seen
		if p.n > 0 && now.Sub(p.anchors[(p.head+p.n-1)%inflowAnchors].at) < inflowAnchorEvery {
			continue
		}
		if p.n == inflowAnchors {
			p.head = (p.head + 1) % inflowAnchors
			p.n--
		}
		p.anchors[(p.head+p.n)%inflowAnchors] = seen
		p.n++
	}
}

// rates is each table's inflow in records a second, the sum of its
// partitions' over up to inflowWindow: until now for a partition this
// process reads (one not seen since has had no records), until it stopped
// reading it for one given up in the last inflowKeep. A partition read for
// inflowMinSpan without a record counts as idle (0). Rates are rounded to
// two significant digits (the join metadata stays the same while they
// only jitter). Partitions given up inflowKeep ago are forgotten.
func (in *inflow) rates() map[string]float64 {
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]float64{}
	for tp, p := range in.parts {
		end := now
		if !p.owned {
			if now.Sub(p.revoked) > inflowKeep {
				delete(in.parts, tp)
				continue
			}
			end = p.revoked
		}
		switch first := p.anchors[p.head]; {
		case p.n == 0:
			if end.Sub(p.assigned) >= inflowMinSpan {
				out[p.table] += 0 // read, and never a record
			}
		case end.Sub(p.last.at) >= inflowWindow:
			out[p.table] += 0 // nothing new in the window
		case end.Sub(first.at) >= inflowMinSpan:
			out[p.table] += float64(p.last.hwm-first.hwm) / end.Sub(first.at).Seconds()
		}
	}
	for table, r := range out {
		out[table] = roundSignificant(r, 2)
	}
	return out
}

// roundSignificant rounds r to n significant digits.
func roundSignificant(r float64, n int) float64 {
	if r == 0 {
		return 0
	}
	scale := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(r))))
	return math.Round(r*scale) / scale
}
