package apply

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// Each member tells the leader which table reads each topic it consumes
// (its join metadata's user data), so the leader groups a pattern table's
// topics too. The leader keeps a table with the member that owns most of
// its partitions unless that member would then hold more than its share
// of the group's partitions, gives the rest, largest first, to the least
// loaded member that consumes all of the table's topics, and lets the
// cooperative protocol move a table in two rebalances (its partitions are
// revoked from the old owner before the new one is given them).
type tableBalancer struct {
	// tableOf names the table that reads topic ("" when none does).
	tableOf func(topic string) string
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
	topics []string
	weight int // partitions
}

// assignMember is a member as the leader balances it.
type assignMember struct {
	m      *kmsg.JoinGroupResponseMember
	wants  map[string]bool // topics it consumes
	load   int             // partitions planned
	units  []string
	joined int // its place in the members' order
}

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
		var ud tableUserData
		if json.Unmarshal(meta.UserData, &ud) == nil {
			for topic, table := range ud.Tables {
				if _, ok := tableOf[topic]; !ok {
					tableOf[topic] = table
				}
			}
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
	units := groupUnits(topics, tableOf, members)
	total := 0
	for _, u := range units {
		total += u.weight
	}
	share := (total + len(members) - 1) / max(len(members), 1)
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

func (m *assignMember) take(u assignUnit) {
	m.load += u.weight
	m.units = append(m.units, u.name)
}

// groupUnits groups the topics to balance by the table that reads them,
// largest first (then by name, so every leader plans alike). A table whose
// topics no one member consumes all of is split into its topics.
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
		slices.Sort(ts)
		whole := false
		for _, m := range members {
			if m.consumesAll(ts) {
				whole = true
				break
			}
		}
		if whole || len(ts) == 1 {
			u := assignUnit{name: name, topics: ts}
			for _, t := range ts {
				u.weight += int(topics[t])
			}
			units = append(units, u)
			continue
		}
		for _, t := range ts {
			units = append(units, assignUnit{name: fmt.Sprintf("%s (topic %s)", name, t), topics: []string{t}, weight: int(topics[t])})
		}
	}
	slices.SortFunc(units, func(a, b assignUnit) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return units
}
