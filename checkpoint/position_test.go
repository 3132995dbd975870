package checkpoint

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAppIDRoundTrip(t *testing.T) {
	cases := []struct {
		pipeline string
		tp       TopicPartition
	}{
		{"shop", TopicPartition{"pg.public.orders", 0}},
		{"a-b.c_d", TopicPartition{"x", 2147483647}},
		{"p", TopicPartition{"__debezium-heartbeat.pg", 3}},
	}
	for _, c := range cases {
		id := AppID(c.pipeline, c.tp)
		pl, tp, ok := ParseAppID(id)
		if !ok || pl != c.pipeline || tp != c.tp {
			t.Errorf("ParseAppID(%q) = %q %v %v, want %q %v", id, pl, tp, ok, c.pipeline, c.tp)
		}
	}
	for _, bad := range []string{"", "cdcapply/", "cdcapply/p/t", "cdcapply/p/t/x", "cdcapply/p//1", "spark-query/t/1", "cdcapply//t/1", "cdcapply/p/t/-1"} {
		if _, _, ok := ParseAppID(bad); ok {
			t.Errorf("ParseAppID(%q) accepted", bad)
		}
	}
}

func TestPositionsAppliedAndGap(t *testing.T) {
	tp := TopicPartition{"t", 1}
	p := Positions{tp: 100}
	if !p.Applied(tp, 99) || p.Applied(tp, 100) {
		t.Fatal("offset 99 is applied, 100 is not")
	}
	if p.Applied(TopicPartition{"t", 2}, 0) {
		t.Fatal("unknown partition has nothing applied")
	}
	if err := CheckGap("orders", p, tp, 100); err != nil {
		t.Fatalf("no gap when the log starts at the next offset: %v", err)
	}
	err := CheckGap("orders", p, tp, 150)
	var ge *GapError
	if !errors.As(err, &ge) || ge.Next != 100 || ge.LogStart != 150 {
		t.Fatalf("want gap 100 < 150, got %v", err)
	}
	for _, want := range []string{"table orders", "topic t partition 1", "100..149"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("gap error %q lacks %q", err, want)
		}
	}
	if err := CheckGap("orders", p, TopicPartition{"t", 9}, 5); err == nil {
		t.Fatal("a partition never applied whose log starts at 5 lost offsets 0..4")
	}
}

func TestTxnsStableOrder(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	acts := Txns("p", map[TopicPartition]Range{{"b", 0}: {0, 10}, {"a", 1}: {5, 7}, {"a", 0}: {3, 4}}, now)
	want := []string{"cdcapply/p/a/0=4", "cdcapply/p/a/1=7", "cdcapply/p/b/0=10"}
	if len(acts) != len(want) {
		t.Fatalf("got %d actions", len(acts))
	}
	for i, a := range acts {
		got := a.Txn.AppID + "=" + strconv.FormatInt(a.Txn.Version, 10)
		if got != want[i] || *a.Txn.LastUpdated != now.UnixMilli() {
			t.Errorf("action %d = %s, want %s", i, got, want[i])
		}
	}
}
