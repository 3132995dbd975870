package apply

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/checkpoint"
)

// balanceMember is one member of a group the tests balance: the topics it
// consumes, the table each is read by (as its process's config says) and
// what it owns from the generation it names.
type balanceMember struct {
	id     string
	tables map[string]string // topic -> table
	owned  map[string][]int32
	gen    int32
	rates  map[string]float64 // table -> inflow it reports (records a second); nil: none
}

// balanceOnce runs the table balancer as a group's leader would, and
// returns each member's assignment: member -> topic -> partitions.
func balanceOnce(t *testing.T, members []balanceMember, topics map[string]int32) map[string]map[string][]int32 {
	t.Helper()
	var join []kmsg.JoinGroupResponseMember
	var leader tableBalancer
	for _, m := range members {
		var interests []string
		for topic := range m.tables {
			interests = append(interests, topic)
		}
		slices.Sort(interests)
		tb := tableBalancer{tableOf: func(topic string) string { return m.tables[topic] }}
		if m.rates != nil {
			tb.rates = func() map[string]float64 { return m.rates }
		}
		if leader.tableOf == nil {
			leader = tb
		}
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = tb.JoinGroupMetadata(interests, m.owned, m.gen)
		join = append(join, jm)
	}
	gb, _, err := leader.MemberBalancer(join)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := gb.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]int32{}
	for _, a := range plan.IntoSyncAssignment() {
		got, err := leader.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		for topic, parts := range got {
			if len(parts) == 0 {
				delete(got, topic)
			} else {
				slices.Sort(parts)
			}
		}
		out[a.MemberID] = got
	}
	return out
}

// assignmentString prints an assignment as "a:orders[0 1] b:" (members and
// topics sorted).
func assignmentString(a map[string]map[string][]int32) string {
	var ms []string
	for m := range a {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m + ":")
		var ts []string
		for topic := range a[m] {
			ts = append(ts, topic)
		}
		slices.Sort(ts)
		for j, topic := range ts {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s%v", topic, a[m][topic])
		}
	}
	return b.String()
}

func TestTableBalancer(t *testing.T) {
	shop := map[string]string{"orders": "orders", "customers": "customers"}
	all := func(n int32) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	cases := []struct {
		name    string
		members []balanceMember
		topics  map[string]int32
		want    string
	}{
		{
			name:    "a new group spreads tables, each whole",
			members: []balanceMember{{id: "a", tables: shop}, {id: "b", tables: shop}},
			topics:  map[string]int32{"orders": 4, "customers": 4},
			want:    "a:customers[0 1 2 3] b:orders[0 1 2 3]",
		},
		{
			// b joins a group where a owns both: a keeps one table and
			// gives up the other, which b gets only once a has revoked
			// it (the next case).
			name: "a member joins: a table leaves its owner first",
			members: []balanceMember{
				{id: "a", tables: shop, owned: map[string][]int32{"orders": all(4), "customers": all(4)}, gen: 3},
				{id: "b", tables: shop},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "a:customers[0 1 2 3] b:",
		},
		{
			name: "and is given to the new member in the next balance",
			members: []balanceMember{
				{id: "a", tables: shop, owned: map[string][]int32{"customers": all(4)}, gen: 4},
				{id: "b", tables: shop, gen: 4},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "a:customers[0 1 2 3] b:orders[0 1 2 3]",
		},
		{
			name: "a member leaves: its tables go to the others, the rest stay",
			members: []balanceMember{
				{id: "b", tables: shop, owned: map[string][]int32{"orders": all(4)}, gen: 5},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "b:customers[0 1 2 3],orders[0 1 2 3]",
		},
		{
			// customers would go to a by name and order alone; it stays
			// with b, its owner, and a gets orders at once.
			name: "a table stays with its owner",
			members: []balanceMember{
				{id: "a", tables: shop, gen: 4},
				{id: "b", tables: shop, owned: map[string][]int32{"customers": all(4)}, gen: 4},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "a:orders[0 1 2 3] b:customers[0 1 2 3]",
		},
		{
			name:    "one table stays whole: the other members idle",
			members: []balanceMember{{id: "a", tables: shop}, {id: "b", tables: shop}, {id: "c", tables: shop}},
			topics:  map[string]int32{"orders": 8},
			want:    "a:orders[0 1 2 3 4 5 6 7] b: c:",
		},
		{
			name: "a pattern table's topics go together",
			members: []balanceMember{
				{id: "a", tables: map[string]string{"db.s.a": "all", "db.s.b": "all", "x": "x"}},
				{id: "b", tables: map[string]string{"db.s.a": "all", "db.s.b": "all", "x": "x"}},
			},
			topics: map[string]int32{"db.s.a": 2, "db.s.b": 2, "x": 1},
			want:   "a:db.s.a[0 1],db.s.b[0 1] b:x[0]",
		},
		{
			name: "a table goes only to a member that consumes it",
			members: []balanceMember{
				{id: "a", tables: shop},
				{id: "b", tables: map[string]string{"orders": "orders"}},
			},
			topics: map[string]int32{"orders": 1, "customers": 6},
			want:   "a:customers[0 1 2 3 4 5] b:orders[0]",
		},
		{
			// No member consumes both topics of t: each topic alone.
			name: "a table no member reads whole is split by topic",
			members: []balanceMember{
				{id: "a", tables: map[string]string{"t1": "t"}},
				{id: "b", tables: map[string]string{"t2": "t"}},
			},
			topics: map[string]int32{"t1": 2, "t2": 2},
			want:   "a:t1[0 1] b:t2[0 1]",
		},
		{
			// From cooperative-sticky's split: customers (first by name
			// among equal weights) stays with a (a tie of two partitions
			// each, a joined first), orders with b; each revokes its
			// partitions of the other's table before that one gets them.
			name: "a group leaving partition assignment",
			members: []balanceMember{
				{id: "a", tables: shop, owned: map[string][]int32{"orders": {0, 1}, "customers": {0, 1}}, gen: 7},
				{id: "b", tables: shop, owned: map[string][]int32{"orders": {2, 3}, "customers": {2, 3}}, gen: 7},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "a:customers[0 1] b:orders[2 3]",
		},
		{
			// A claim from an older generation is stale: the member with
			// the newest claim owns the partitions.
			name: "a stale claim does not hold a table",
			members: []balanceMember{
				{id: "a", tables: shop, owned: map[string][]int32{"orders": all(4)}, gen: 2},
				{id: "b", tables: shop, owned: map[string][]int32{"orders": all(4)}, gen: 9},
			},
			topics: map[string]int32{"orders": 4, "customers": 4},
			want:   "a:customers[0 1 2 3] b:orders[0 1 2 3]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := assignmentString(balanceOnce(t, c.members, c.topics))
			if got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestTableBalancerSettles: members joining one at a time, each balance's
// revocations applied before the next, end with every table whole on one

// TestTableBalancerByInflow: members report their tables' inflow, and the
// leader weighs tables by it. Debezium's topics often have one partition
// each, where counting partitions weighs a busy table like an idle one.
func TestTableBalancerByInflow(t *testing.T) {
	four := map[string]string{"busy": "busy", "q1": "q1", "q2": "q2", "q3": "q3"}
	one := map[string]int32{"busy": 1, "q1": 1, "q2": 1, "q3": 1}
	ownsAll := map[string][]int32{"busy": {0}, "q1": {0}, "q2": {0}, "q3": {0}}
	inflow := map[string]float64{"busy": 9000, "q1": 100, "q2": 100, "q3": 50}
	cases := []struct {
		name    string
		members []balanceMember
		topics  map[string]int32
		want    string
	}{
		{
			// By partitions a would keep busy and q1 (two of four).
			name: "a busy table keeps its member to itself",
			members: []balanceMember{
				{id: "a", tables: four, owned: ownsAll, gen: 3, rates: inflow},
				{id: "b", tables: four},
			},
			topics: one,
			want:   "a:busy[0] b:",
		},
		{
			// a no longer reads q1-q3 but still reports their inflow.
			name: "the revoked tables go to the new member, weighed by what their old owner measured",
			members: []balanceMember{
				{id: "a", tables: four, owned: map[string][]int32{"busy": {0}}, gen: 4, rates: inflow},
				{id: "b", tables: four, gen: 4},
			},
			topics: one,
			want:   "a:busy[0] b:q1[0],q2[0],q3[0]",
		},
		{
			name: "the same group by partitions (no member reports inflow)",
			members: []balanceMember{
				{id: "a", tables: four, owned: ownsAll, gen: 3},
				{id: "b", tables: four},
			},
			topics: one,
			want:   "a:busy[0],q1[0] b:",
		},
		{
			// a holds 5,200 of 9,250 records/s: above an even share
			// (4,625), within its slack; nothing moves.
			name: "inflow that jitters moves nothing",
			members: []balanceMember{
				{id: "a", tables: four, owned: map[string][]int32{"busy": {0}, "q3": {0}}, gen: 7, rates: map[string]float64{"busy": 5000, "q3": 200}},
				{id: "b", tables: four, owned: map[string][]int32{"q1": {0}, "q2": {0}}, gen: 7, rates: map[string]float64{"q1": 2000, "q2": 2050}},
			},
			topics: one,
			want:   "a:busy[0],q3[0] b:q1[0],q2[0]",
		},
		{
			// busy went quiet under a (100 a second); b, which gave it up
			// within the last ten minutes, still sends the 9,000 it
			// measured then. a's live rate counts: busy weighs 100, and
			// b, holding 800 of 900, gives quiet2 up to c (first revoked).
			name: "the owner's rate counts over a former owner's",
			members: []balanceMember{
				{id: "a", tables: four, owned: map[string][]int32{"busy": {0}}, gen: 9, rates: map[string]float64{"busy": 100}},
				{id: "b", tables: four, owned: map[string][]int32{"q1": {0}, "q2": {0}}, gen: 9, rates: map[string]float64{"busy": 9000, "q1": 400, "q2": 400}},
				{id: "c", tables: four, gen: 9},
			},
			topics: map[string]int32{"busy": 1, "q1": 1, "q2": 1},
			want:   "a:busy[0] b:q1[0] c:",
		},
		{
			// busy is 3 of 4.3k records/s. a new group: busy alone, the
			// idle table (weighed at the least, a record a second a
			// partition) and the unknown one (weighed at the reported
			// tables' mean a partition) on the other member.
			name: "a table nobody measured weighs the mean, an idle one the least",
			members: []balanceMember{
				{id: "a", tables: four, rates: map[string]float64{"busy": 3000, "q1": 0}},
				{id: "b", tables: four, rates: map[string]float64{"q2": 1300}},
			},
			topics: one,
			want:   "a:busy[0] b:q1[0],q2[0],q3[0]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := assignmentString(balanceOnce(t, c.members, c.topics)); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestInflow measures tables' inflow from the high watermarks fetches
// report, over a fake clock.
func TestInflow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	in := newInflow(func() time.Time { return now })
	tp := func(topic string, p int32) checkpoint.TopicPartition {
		return checkpoint.TopicPartition{Topic: topic, Partition: p}
	}
	see := func(obs ...hwmObs) { in.observe(obs) }
	check := func(when string, want map[string]float64) {
		t.Helper()
		if got := in.rates(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: rates %v, want %v", when, got, want)
		}
	}
	tableOf := func(topic string) string { return map[string]string{"o": "orders", "c": "customers"}[topic] }
	in.assigned(map[string][]int32{"o": {0, 1}, "c": {0}, "x": {0}}, tableOf)
	see(hwmObs{tp("o", 0), "orders", 1000}, hwmObs{tp("o", 1), "orders", 50})
	check("one sighting", map[string]float64{})
	for range 30 { // 30 s: partition 0 grows 120 a second, 1 by 30; customers never has a record
		now = now.Add(time.Second)
		p0, p1 := in.parts[tp("o", 0)].last.hwm+120, in.parts[tp("o", 1)].last.hwm+30
		see(hwmObs{tp("o", 0), "orders", p0}, hwmObs{tp("o", 1), "orders", p1})
	}
	check("30 s", map[string]float64{"customers": 0, "orders": 150})
	// Partition 1 idle for 30 s: its rate falls as its window goes on.
	now = now.Add(30 * time.Second)
	check("partition 1 idle for 30 s", map[string]float64{"customers": 0, "orders": 75})
	// The window: 20 minutes on, the rate is the last ten minutes' (60 a
	// second on partition 0; partition 1 has had nothing for longer).
	for range 1200 {
		now = now.Add(time.Second)
		see(hwmObs{tp("o", 0), "orders", in.parts[tp("o", 0)].last.hwm + 60})
	}
	check("20 minutes on", map[string]float64{"customers": 0, "orders": 60})
	if n := in.parts[tp("o", 0)].n; n != inflowAnchors {
		t.Errorf("partition 0 holds %d anchors, want the ring's %d", n, inflowAnchors)
	}
	// Given up: the rate stays as it was when revoked, then is forgotten.
	in.revoked(map[string][]int32{"o": {0, 1}})
	now = now.Add(5 * time.Minute)
	check("5 minutes after orders was revoked", map[string]float64{"customers": 0, "orders": 60})
	now = now.Add(6 * time.Minute)
	check("11 minutes after", map[string]float64{"customers": 0})
	// A log that goes back (a topic recreated) is measured afresh.
	in.assigned(map[string][]int32{"o": {0}}, tableOf)
	see(hwmObs{tp("o", 0), "orders", 5000})
	now = now.Add(2 * time.Second)
	see(hwmObs{tp("o", 0), "orders", 10})
	now = now.Add(2 * time.Second)
	see(hwmObs{tp("o", 0), "orders", 30})
	check("after the log went back", map[string]float64{"customers": 0, "orders": 10})
	if got := roundSignificant(12345, 2); got != 12000 {
		t.Errorf("roundSignificant(12345, 2) = %v", got)
	}
	if got := roundSignificant(0.01234, 2); got != 0.012 {
		t.Errorf("roundSignificant(0.01234, 2) = %v", got)
	}
}

// member, no partition held twice, and the tables spread by partitions.
func TestTableBalancerSettles(t *testing.T) {
	tables := map[string]string{}
	topics := map[string]int32{}
	for i, n := range []int32{6, 3, 3, 2, 1, 1, 1, 1} {
		topic := fmt.Sprintf("t%d", i)
		tables[topic] = fmt.Sprintf("table%d", i)
		topics[topic] = n
	}
	owned := map[string]map[string][]int32{}
	gen := int32(1)
	var members []balanceMember
	for _, id := range []string{"a", "b", "c"} {
		members = append(members, balanceMember{id: id, tables: tables})
		for round := 0; round < 3; round++ {
			for i := range members {
				members[i].owned, members[i].gen = owned[members[i].id], gen
			}
			owned = balanceOnce(t, members, topics)
			gen++
			held := map[string]string{}
			for m, a := range owned {
				for topic, parts := range a {
					for _, p := range parts {
						tp := fmt.Sprintf("%s/%d", topic, p)
						if other, ok := held[tp]; ok {
							t.Fatalf("%d members, round %d: %s given to %s and %s", len(members), round, tp, other, m)
						}
						held[tp] = m
					}
				}
			}
		}
		// Settled: everything assigned, each topic on one member.
		loads := map[string]int{}
		for m, a := range owned {
			for topic, parts := range a {
				if len(parts) != int(topics[topic]) {
					t.Errorf("%d members: %s holds %v of %s's %d partitions", len(members), m, parts, topic, topics[topic])
				}
				loads[m] += len(parts)
			}
		}
		total := 0
		for _, l := range loads {
			total += l
		}
		if total != 18 {
			t.Errorf("%d members: %d of 18 partitions assigned: %s", len(members), total, assignmentString(owned))
		}
		// Within a table's size of an even share.
		for m, l := range loads {
			if share := (18 + len(members) - 1) / len(members); l > share+5 {
				t.Errorf("%d members: %s holds %d partitions, share %d: %s", len(members), m, l, share, assignmentString(owned))
			}
		}
		t.Logf("%d members: %s", len(members), assignmentString(owned))
	}
}

// describedGroup is the group as its coordinator describes it.
func describedGroup(t *testing.T, brokers []string, group string) kadm.DescribedGroup {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	return groups[group]
}

// groupAssignment describes the group: its protocol, and member client
// id -> topic -> partitions.
func groupAssignment(t *testing.T, brokers []string, group string) (string, map[string]map[string][]int32) {
	t.Helper()
	g := describedGroup(t, brokers, group)
	out := map[string]map[string][]int32{}
	for _, m := range g.Members {
		a := map[string][]int32{}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, topic := range c.Topics {
				if len(topic.Partitions) > 0 {
					a[topic.Topic] = slices.Sorted(slices.Values(topic.Partitions))
				}
			}
		}
		out[m.ClientID] = a
	}
	return g.Protocol, out
}

// memberInflow describes the group: member client id -> the tables'
// inflow it sent in its join metadata.
func memberInflow(t *testing.T, brokers []string, group string) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, m := range describedGroup(t, brokers, group).Members {
		if c, ok := m.Join.AsConsumer(); ok {
			if _, inflow, ok := TableMemberData(c.UserData); ok {
				out[m.ClientID] = inflow
			}
		}
	}
	return out
}

// TestGroupAssignsTables runs two processes of one group on kfake: each
// table's partitions go to one of them, the tables are spread, and no
// batch is fenced or resynced, where partition assignment splits tables.
func TestGroupAssignsTables(t *testing.T) {
	for name, assignments := range groupOfTwoCases {
		t.Run(name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders", "customers"),
				kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			runGroupOfTwo(t, c.ListenAddrs(), [2]string{"orders", "customers"}, "cdcapply-test", assignments, startEngine)
		})
	}
}

// groupOfTwoCases are the two processes' kafka.assignment: both tables,
// both partitions, and a group mixing them (as in a rolling upgrade from
// a cdcapply without the table protocol), which runs cooperative-sticky.
var groupOfTwoCases = map[string][2]string{
	AssignTables:     {AssignTables, AssignTables},
	AssignPartitions: {AssignPartitions, AssignPartitions},
	"mixed":          {AssignTables, AssignPartitions},
}

// TestRealKafkaGroupAssignsTables is TestGroupAssignsTables against a real
// Apache Kafka broker.
func TestRealKafkaGroupAssignsTables(t *testing.T) {
	brokers := realBrokers(t)
	for name, assignments := range groupOfTwoCases {
		t.Run(name, func(t *testing.T) {
			topics := [2]string{realTopic(t, brokers, 4), realTopic(t, brokers, 4)}
			runGroupOfTwo(t, brokers, topics, topics[0]+"-group", assignments, startEngineWith)
		})
	}
}

// runGroupOfTwo: tables orders and customers (on topics[0] and topics[1],
// four partitions each), processes A and B under kafka.assignment
// assignments[0] and [1]; A alone, then B joins mid-stream, then A stops.
// Both tables equal their oracles. When both are set to tables each
// table is read whole by one process once the group settles, and no
// batch is fenced; when only A is, A warns that the group does not
// assign by table.
func runGroupOfTwo(t *testing.T, brokers []string, topics [2]string, group string, assignments [2]string,
	start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	assignment := AssignTables
	if assignments != [2]string{AssignTables, AssignTables} {
		assignment = AssignPartitions // the group's protocol is cooperative-sticky
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ps := [2]*producer{}
	oracles := [2]ordersOracle{{}, {}}
	for i := range ps {
		ps[i] = &producer{t: t, cl: pcl, topic: topics[i], nparts: 4, ends: map[int32]int64{}}
	}
	rng := rand.New(rand.NewPCG(5, 9))
	lsn := int64(0)
	produce := func(n int) {
		for i := 0; i < n; i++ {
			for j := range ps {
				id := rng.IntN(80)
				lsn++
				op := []string{"c", "u", "u", "u", "d"}[rng.IntN(5)]
				status := fmt.Sprintf("s%d", lsn)
				ps[j].change(id, lsn, op, status)
				oracles[j].apply(id, op, status)
			}
		}
	}
	dir := t.TempDir()
	var cfgs [2]*Config
	for i := range cfgs {
		cfg, err := ParseConfig("test.yaml", []byte(fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: %s, assignment: %s}
defaults: {flush: {max_latency: 50ms}}
tables:
  - {name: orders, topic: %s, location: %s/orders}
  - {name: customers, topic: %s, location: %s/customers}
`, strings.Join(brokers, ", "), group, assignments[i], topics[0], dir, topics[1], dir)))
		if err != nil {
			t.Fatal(err)
		}
		cfgs[i] = cfg
	}
	tables := [2]string{dir + "/orders", dir + "/customers"}
	waitAll := func() {
		t.Helper()
		for i := range ps {
			waitPositionsWithin(t, tables[i], "shop", topics[i], ps[i].ends, 2*time.Minute)
		}
	}
	var logA, logB syncBuffer
	metricsA := NewMetrics(prometheus.NewRegistry())
	a, stopA := start(t, cfgs[0], KafkaOptions(kgo.ClientID("instance-a")), Logger(slog.New(slog.NewTextHandler(&logA, nil))), WithMetrics(metricsA))
	produce(100)
	waitAll()
	b, stopB := start(t, cfgs[1], KafkaOptions(kgo.ClientID("instance-b")), Logger(slog.New(slog.NewTextHandler(&logB, nil))))
	for i := 0; i < 10; i++ {
		produce(30)
		time.Sleep(50 * time.Millisecond)
	}
	waitAll()

	// Once settled: both members hold partitions, all eight assigned.
	var protocol string
	var members map[string]map[string][]int32
	deadline := time.Now().Add(time.Minute)
	for {
		protocol, members = groupAssignment(t, brokers, group)
		n, holding := 0, 0
		for _, m := range members {
			if len(m) > 0 {
				holding++
			}
			for _, parts := range m {
				n += len(parts)
			}
		}
		if len(members) == 2 && n == 8 && holding == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle with both members holding partitions: %s %s", protocol, assignmentString(members))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("protocol %s: %s", protocol, assignmentString(members))
	want := map[string]string{AssignTables: groupTableProtocol, AssignPartitions: "cooperative-sticky"}[assignment]
	if protocol != want {
		t.Errorf("group protocol %s, want %s", protocol, want)
	}
	// A's cdcapply_group_assignment names the protocol the group settled
	// on beside A's own setting (one series).
	if n, v := testutil.CollectAndCount(metricsA.groupAssign), testutil.ToFloat64(metricsA.groupAssign.WithLabelValues(group, assignments[0], want)); n != 1 || v != 1 {
		t.Errorf("A's cdcapply_group_assignment: %d series, {assignment=%s, protocol=%s} = %v; want that one series at 1", n, assignments[0], want, v)
	}
	if assignment == AssignTables {
		for _, topic := range topics {
			holders := 0
			for _, m := range members {
				if len(m[topic]) == 4 {
					holders++
				} else if len(m[topic]) > 0 {
					t.Errorf("topic %s split between the members: %s", topic, assignmentString(members))
				}
			}
			if holders != 1 {
				t.Errorf("topic %s is held whole by %d members: %s", topic, holders, assignmentString(members))
			}
		}
	}
	produce(100)
	waitAll()
	stopA()
	produce(50)
	waitAll()
	stopB()
	for i, name := range []string{"orders", "customers"} {
		if got, want := readOrders(t, tables[i]), oracles[i].rows(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s differs from the oracle:\n got %v\nwant %v", name, got, want)
		}
	}
	catchUps := strings.Count(logA.String(), "key index caught up") + strings.Count(logB.String(), "key index caught up")
	t.Logf("fenced batches: A %d, B %d; key index catch-ups %d", a.fenced.Load(), b.fenced.Load(), catchUps)
	if assignment == AssignTables && a.fenced.Load()+b.fenced.Load() > 0 {
		t.Errorf("one writer per table, yet batches were fenced: A %d, B %d", a.fenced.Load(), b.fenced.Load())
	}
	if assignment == AssignTables && !strings.Contains(logA.String()+logB.String(), "group balanced by table") {
		t.Error("the group's leader did not log its plan")
	}
	const fellBack = "the group assigns partitions by cooperative-sticky, not by table"
	if warned := strings.Contains(logA.String(), fellBack); warned != (assignments == groupOfTwoCases["mixed"]) {
		t.Errorf("process A (set to %s, B to %s) warned that the group does not assign by table: %v", assignments[0], assignments[1], warned)
	}
	if t.Failed() {
		t.Logf("instance A's log:\n%s", logA.String())
		t.Logf("instance B's log:\n%s", logB.String())
	}
}

// TestGroupWeighsTablesByInflow: three one-partition tables, one of them
// twenty times as busy as the others. Process A reads all three, measuring
// their inflow; when B joins, A keeps the busy table alone and B is given
// both quiet ones (counted by partitions A would keep two of three). All
// three tables equal their oracles.
func TestGroupWeighsTablesByInflow(t *testing.T) {
	names := [3]string{"busy", "quiet1", "quiet2"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, names[:]...), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runWeighsByInflow(t, c.ListenAddrs(), names, "inflow", startEngine)
}

// TestRealKafkaGroupWeighsTablesByInflow is TestGroupWeighsTablesByInflow
// against a real Apache Kafka broker.
func TestRealKafkaGroupWeighsTablesByInflow(t *testing.T) {
	brokers := realBrokers(t)
	names := [3]string{realTopic(t, brokers, 1), realTopic(t, brokers, 1), realTopic(t, brokers, 1)}
	runWeighsByInflow(t, brokers, names, names[0]+"-group", startEngineWith)
}

// runWeighsByInflow runs TestGroupWeighsTablesByInflow on topics names
// (the busy table's first), each read by a table of its name.
func runWeighsByInflow(t *testing.T, brokers []string, names [3]string, group string,
	start func(*testing.T, *Config, ...EngineOption) (*Engine, func())) {
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ps := make([]*producer, len(names))
	oracles := make([]ordersOracle, len(names))
	for i, name := range names {
		ps[i] = &producer{t: t, cl: pcl, topic: name, nparts: 1, ends: map[int32]int64{}}
		oracles[i] = ordersOracle{}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	lsn := int64(0)
	// produceFor sends, every 20 ms for d, 20 changes to busy and one to
	// each quiet table.
	produceFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			for i := range ps {
				n := 1
				if i == 0 {
					n = 20
				}
				for range n {
					id, op := rng.IntN(200), []string{"c", "u", "u", "d"}[rng.IntN(4)]
					lsn++
					status := fmt.Sprintf("s%d", lsn)
					ps[i].change(id, lsn, op, status)
					oracles[i].apply(id, op, status)
				}
			}
		}
	}
	dir := t.TempDir()
	var tables strings.Builder
	tableNames := [3]string{"busy", "quiet1", "quiet2"}
	for i, name := range tableNames {
		fmt.Fprintf(&tables, "  - {name: %s, topic: %s, location: %s/%s}\n", name, names[i], dir, name)
	}
	cfg, err := ParseConfig("test.yaml", []byte(fmt.Sprintf(`
pipeline: {id: shop}
kafka: {brokers: [%s], group: %s}
defaults: {flush: {max_latency: 50ms}}
tables:
%s`, strings.Join(brokers, ", "), group, tables.String())))
	if err != nil {
		t.Fatal(err)
	}
	var logA syncBuffer
	_, stopA := start(t, cfg, KafkaOptions(kgo.ClientID("instance-a")), Logger(slog.New(slog.NewTextHandler(&logA, nil))))
	produceFor(3 * time.Second)
	_, stopB := start(t, cfg, KafkaOptions(kgo.ClientID("instance-b")))
	var members map[string]map[string][]int32
	for deadline := time.Now().Add(time.Minute); ; {
		produceFor(200 * time.Millisecond)
		_, members = groupAssignment(t, brokers, group)
		if len(members["instance-a"]) > 0 && len(members["instance-b"]) > 0 && len(members["instance-a"])+len(members["instance-b"]) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle with both members holding tables: %s", assignmentString(members))
		}
	}
	want := map[string]map[string][]int32{"instance-a": {names[0]: {0}}, "instance-b": {names[1]: {0}, names[2]: {0}}}
	if got, want := assignmentString(members), assignmentString(want); got != want {
		t.Errorf("assignment %s, want %s", got, want)
	}
	if !strings.Contains(logA.String(), "records/s") {
		t.Errorf("the leader's plan does not name the inflow it weighed tables by:\n%s", logA.String())
	}
	// What A told the group, as the coordinator describes it (what
	// cdcapply status shows): busy's inflow above each quiet table's.
	if in := memberInflow(t, brokers, group)["instance-a"]; !(in["busy"] > in["quiet1"] && in["busy"] > in["quiet2"] && in["quiet1"] > 0) {
		t.Errorf("A's join metadata names the inflow %v, want busy above quiet1 and quiet2, both above 0", in)
	}
	produceFor(time.Second)
	for i, name := range tableNames {
		waitPositionsWithin(t, dir+"/"+name, "shop", names[i], ps[i].ends, time.Minute)
	}
	stopB()
	stopA()
	for i, name := range tableNames {
		if got, want := readOrders(t, dir+"/"+name), oracles[i].rows(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s differs from the oracle:\n got %v\nwant %v", name, got, want)
		}
	}
	if t.Failed() {
		t.Logf("A's log:\n%s", logA.String())
	}
}
