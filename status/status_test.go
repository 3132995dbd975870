package status

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cdcapply/cdcapply/checkpoint"
)

// TestAddLag covers the lag arithmetic: a partition ahead of a stale high
// watermark counts 0, a partition the broker lists but the table never
// applied joins with its whole length, and a partition the broker does not
// know makes the table's lag unknown.
func TestAddLag(t *testing.T) {
	tp := func(p int32) checkpoint.TopicPartition { return checkpoint.TopicPartition{Topic: "t", Partition: p} }
	tbl := Table{Name: "x", State: "running", Partitions: []Partition{
		{Pipeline: "p", Topic: "t", Partition: 0, Next: 10, HasPosition: true},
		{Pipeline: "p", Topic: "t", Partition: 1, Next: 5, HasPosition: true},
	}}
	addLag(&tbl, map[checkpoint.TopicPartition]int64{tp(0): 8, tp(1): 9, tp(2): 3, {Topic: "other"}: 100})
	if !tbl.LagKnown || tbl.TotalLag != 7 || len(tbl.Partitions) != 3 {
		t.Fatalf("lag known %v total %d partitions %+v", tbl.LagKnown, tbl.TotalLag, tbl.Partitions)
	}
	for i, want := range []int64{0, 4, 3} {
		if p := tbl.Partitions[i]; p.Lag == nil || *p.Lag != want || p.Partition != int32(i) {
			t.Errorf("partition %d: %+v, want lag %d", i, p, want)
		}
	}
	if tbl.Partitions[2].HasPosition || tbl.Partitions[2].Pipeline != "p" {
		t.Errorf("unapplied partition: %+v", tbl.Partitions[2])
	}

	gone := Table{Name: "y", State: "running", Partitions: []Partition{{Pipeline: "p", Topic: "deleted", Next: 4, HasPosition: true}}}
	addLag(&gone, map[checkpoint.TopicPartition]int64{tp(0): 8})
	if gone.LagKnown || gone.Partitions[0].Lag != nil {
		t.Fatalf("partition unknown to the broker: %+v", gone)
	}
	var b bytes.Buffer
	if err := (&Report{Brokers: "reachable", Tables: []Table{gone}}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "y      running  0        unknown") {
		t.Errorf("text:\n%s", b.String())
	}
}

// TestPartitionsText: a topic's consecutive partitions are written as a
// range, numbers compared as numbers.
func TestPartitionsText(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "-"},
		{[]string{"orders/0"}, "orders/0"},
		{[]string{"orders/0", "orders/1", "orders/2", "orders/3", "orders/5", "orders/9", "orders/10", "orders/11"}, "orders/0-3,5,9-11"},
		{[]string{"a.b/1", "a.b/2", "c/0"}, "a.b/1-2 c/0"},
	} {
		if got := partitionsText(tc.in); got != tc.want {
			t.Errorf("partitionsText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
