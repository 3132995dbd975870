package status

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// groupAnswer is a GroupDescriber that answers g.
type groupAnswer struct{ g *Group }

func (a groupAnswer) DescribeGroup(context.Context, string) (*Group, error) {
	c := *a.g
	return &c, nil
}

// TestDescribeGroupSplit: a table whose partitions two members read is
// named with both, even two dynamic members of one client id on one host;
// a table one member reads whole is not, and partitions nobody reads are
// listed once.
func TestDescribeGroupSplit(t *testing.T) {
	g := &Group{Name: "g", State: "Stable", Members: []Member{
		{ClientID: "cdcapply", Host: "/10.0.0.1", Partitions: []string{"orders/0", "customers/0", "customers/1"}},
		{ClientID: "cdcapply", Host: "/10.0.0.1", Partitions: []string{"orders/1"}},
	}}
	tables := []Table{
		{Name: "orders", Partitions: []Partition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "orders", Partition: 2}}},
		{Name: "customers", Partitions: []Partition{{Topic: "customers", Partition: 0}, {Topic: "customers", Partition: 1}}},
		{Name: "orders_copy", Partitions: []Partition{{Topic: "orders", Partition: 2}}},
	}
	got := describeGroup(context.Background(), Options{Group: "g", Members: groupAnswer{g}}, tables)
	if want := "[{orders [cdcapply@/10.0.0.1 cdcapply@/10.0.0.1]}]"; fmt.Sprint(got.Split) != want {
		t.Errorf("split %v, want %s", got.Split, want)
	}
	if fmt.Sprint(got.Unassigned) != "[orders/2]" {
		t.Errorf("unassigned %v, want [orders/2]", got.Unassigned)
	}
}

// TestWriteGroupInflow: where members sent the inflow they measured, the
// text shows it per member, tables in order; a member that sent none
// shows "-"; without any, the column is left out.
func TestWriteGroupInflow(t *testing.T) {
	g := &Group{Name: "g", State: "Stable", Protocol: "cdcapply-tables", Members: []Member{
		{InstanceID: "cdc-0", ClientID: "cdcapply", Host: "/10.0.0.1", Partitions: []string{"orders/0"},
			Inflow: map[string]float64{"orders": 1200, "customers": 0.35}},
		{InstanceID: "cdc-1", ClientID: "cdcapply", Host: "/10.0.0.2", Partitions: []string{"customers/0"}},
	}}
	var b strings.Builder
	writeGroup(&b, g)
	for _, want := range []string{
		"INFLOW MEASURED",
		"orders/0     customers 0.35/s, orders 1200/s",
		"customers/0  -",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("group text lacks %q:\n%s", want, b.String())
		}
	}
	g.Members[0].Inflow = nil
	b.Reset()
	writeGroup(&b, g)
	if strings.Contains(b.String(), "INFLOW") {
		t.Errorf("no member sent its inflow, yet the text has the column:\n%s", b.String())
	}
}
