package apply

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// int64Row is a row type of int64 fields of the given names.
func int64Row(names ...string) *schema.Type {
	st := &schema.Type{Base: schema.BaseStruct}
	for _, n := range names {
		st.Fields = append(st.Fields, schema.Field{Name: n, Type: &schema.Type{Base: schema.BaseInt64}})
	}
	return st
}

// TestProject: Project places an image's values by column name whatever
// the image's column order, takes the key from the image or else from the
// record key, refuses a column the table lacks, and turns a delete into
// unavailable values but the key; alternating row types (the projection
// Project caches per type) change none of it.
func TestProject(t *testing.T) {
	l, err := NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long}, {Name: "name", Type: delta.String}, {Name: "n", Type: delta.Long},
	}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	reordered := int64Row("n", "name", "id")  // the table's columns in another order
	noKey := int64Row("name", "n")            // an image without the key column
	extra := int64Row("id", "name", "n", "z") // a column the table lacks
	seq := debezium.Sequence{Connector: debezium.ConnectorPostgres, N: 1}
	seq.Parts[0] = debezium.Part{Kind: debezium.PartUint, U: 7}
	change := func(op debezium.Op, img debezium.Row, key int64) *debezium.Change {
		ch := &debezium.Change{Op: op, Seq: seq, Key: debezium.Key{Names: []string{"id"}, Values: []schema.Value{schema.Int(key)}}}
		if op == debezium.OpDelete {
			ch.Before = img
		} else {
			ch.After = img
		}
		return ch
	}
	vals := func(vs ...schema.Value) []schema.Value { return vs }
	type want struct {
		values []schema.Value
		reason string // a ProjectError's reason, "" for none
	}
	una := schema.Unavailable
	cases := []struct {
		name string
		ch   *debezium.Change
		want want
	}{
		{"reordered", change(debezium.OpCreate, debezium.Row{Type: reordered, Values: vals(schema.Int(3), schema.String("a"), schema.Int(1))}, 99), want{values: vals(schema.Int(1), schema.String("a"), schema.Int(3))}},
		{"reordered again", change(debezium.OpUpdate, debezium.Row{Type: reordered, Values: vals(schema.Int(4), una, schema.Int(2))}, 99), want{values: vals(schema.Int(2), una, schema.Int(4))}},
		{"key from the record key", change(debezium.OpUpdate, debezium.Row{Type: noKey, Values: vals(schema.String("b"), schema.Int(5))}, 6), want{values: vals(schema.Int(6), schema.String("b"), schema.Int(5))}},
		{"null key in the image", change(debezium.OpCreate, debezium.Row{Type: reordered, Values: vals(schema.Int(3), schema.String("a"), schema.Null)}, 8), want{values: vals(schema.Int(8), schema.String("a"), schema.Int(3))}},
		{"a column the table lacks", change(debezium.OpCreate, debezium.Row{Type: extra, Values: vals(schema.Int(1), schema.String("a"), schema.Int(3), schema.Int(0))}, 1), want{reason: "schema_mismatch"}},
		{"delete", change(debezium.OpDelete, debezium.Row{Type: reordered, Values: vals(schema.Int(3), schema.String("a"), schema.Int(1))}, 99), want{values: vals(schema.Int(1), una, una)}},
		{"delete without the key in its image", change(debezium.OpDelete, debezium.Row{Type: noKey, Values: vals(schema.String("a"), schema.Int(1))}, 9), want{values: vals(schema.Int(9), una, una)}},
		{"reordered after others", change(debezium.OpCreate, debezium.Row{Type: reordered, Values: vals(schema.Int(5), schema.String("c"), schema.Int(7))}, 99), want{values: vals(schema.Int(7), schema.String("c"), schema.Int(5))}},
		{"no image", change(debezium.OpCreate, debezium.Row{}, 1), want{reason: "missing_image"}},
	}
	for _, c := range cases {
		got, err := l.Project(c.ch)
		if c.want.reason != "" {
			var pe *ProjectError
			if !errors.As(err, &pe) || pe.Reason != c.want.reason {
				t.Errorf("%s: error %v, want reason %s", c.name, err, c.want.reason)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.EqualFunc(got.Values, c.want.values, func(a, b schema.Value) bool { return a.Equal(b) && a.IsUnavailable() == b.IsUnavailable() }) {
			t.Errorf("%s: values %v, want %v", c.name, got.Values, c.want.values)
		}
		if wantKey := EncodeKey(c.want.values, l.Key); got.Key != wantKey || got.Delete != (c.ch.Op == debezium.OpDelete) {
			t.Errorf("%s: key %q delete %v, want %q %v", c.name, got.Key, got.Delete, wantKey, c.ch.Op == debezium.OpDelete)
		}
		// Project notes the unavailable columns for Reduce.
		wantNoted := uint64(1)
		for col, v := range c.want.values {
			if v.IsUnavailable() {
				wantNoted |= 1 << (col + 1)
			}
		}
		if got.unavail != wantNoted {
			t.Errorf("%s: unavailable columns noted %b, want %b", c.name, got.unavail, wantNoted)
		}
	}
}

// TestProjectTableOrder: an image whose columns are the table's in order
// gives the change its values without a copy, yet appending to them (a
// schema evolution pads buffered changes) never writes past them into
// the decoder's next values; a delete never writes into its image.
func TestProjectTableOrder(t *testing.T) {
	l, err := NewLayout([]delta.StructField{{Name: "id", Type: delta.Long}, {Name: "name", Type: delta.String}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	st := &schema.Type{Base: schema.BaseStruct, Fields: []schema.Field{
		{Name: "id", Type: &schema.Type{Base: schema.BaseInt64}}, {Name: "name", Type: &schema.Type{Base: schema.BaseString}}}}
	seq := debezium.Sequence{Connector: debezium.ConnectorPostgres, N: 1}
	seq.Parts[0] = debezium.Part{Kind: debezium.PartUint, U: 7}
	// Two images side by side in one backing array, as the decoder's slab
	// hands them out.
	slab := []schema.Value{schema.Int(1), schema.String("a"), schema.Int(2), schema.String("b")}
	first := slab[:2]
	got, err := l.Project(&debezium.Change{Op: debezium.OpUpdate, Seq: seq, After: debezium.Row{Type: st, Values: first}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Values[0].Equal(schema.Int(1)) || !got.Values[1].Equal(schema.String("a")) {
		t.Fatalf("values %v", got.Values)
	}
	_ = append(got.Values, schema.Null)
	if !slab[2].Equal(schema.Int(2)) {
		t.Fatalf("appending to a change's values wrote into the next image: %v", slab)
	}
	second := slab[2:4]
	del, err := l.Project(&debezium.Change{Op: debezium.OpDelete, Seq: seq, Before: debezium.Row{Type: st, Values: second}})
	if err != nil {
		t.Fatal(err)
	}
	if !del.Values[1].IsUnavailable() || !slab[3].Equal(schema.String("b")) {
		t.Fatalf("delete values %v, image now %v", del.Values, slab[2:])
	}
}

// TestLayoutMissing: Missing names exactly the image's columns the layout
// lacks, whichever row type was asked about before (the answer for a type
// is cached with its projection).
func TestLayoutMissing(t *testing.T) {
	l, err := NewLayout([]delta.StructField{{Name: "id", Type: delta.Long}, {Name: "name", Type: delta.String}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	known, wider, other := int64Row("name", "id"), int64Row("id", "z", "name", "y"), int64Row("id")
	cases := []struct {
		typ  *schema.Type
		want []string
	}{{known, nil}, {wider, []string{"z", "y"}}, {wider, []string{"z", "y"}}, {known, nil}, {other, nil}, {wider, []string{"z", "y"}}, {nil, nil}}
	for i, c := range cases {
		var got []string
		for _, f := range l.Missing(debezium.Row{Type: c.typ}) {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("case %d: missing %v, want %v", i, got, c.want)
		}
	}
}

// BenchmarkProject projects decoded changes of the reference workload's
// shape (ten columns, an update's after image) onto the table's layout, as
// the engine's loop does for every change.
//
//	go test ./apply -run XXX -bench Project -count 6
func BenchmarkProject(b *testing.B) {
	source := []delta.StructField{{Name: "id", Type: delta.Long}}
	img := &schema.Type{Base: schema.BaseStruct, Fields: []schema.Field{{Name: "id", Type: &schema.Type{Base: schema.BaseInt64}}}}
	values := []schema.Value{schema.Int(42)}
	for i := 1; i < 10; i++ {
		name := fmt.Sprintf("col_%d", i)
		source = append(source, delta.StructField{Name: name, Type: delta.String})
		img.Fields = append(img.Fields, schema.Field{Name: name, Type: &schema.Type{Base: schema.BaseString}})
		values = append(values, schema.String(name))
	}
	l, err := NewLayout(source, []string{"id"})
	if err != nil {
		b.Fatal(err)
	}
	ch := &debezium.Change{Op: debezium.OpUpdate, After: debezium.Row{Type: img, Values: values},
		Seq: debezium.Sequence{Connector: debezium.ConnectorPostgres, N: 1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Project(ch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLayoutMissing asks for the new columns of a ten-column image
// the table already has, as ensureLayout does for every change.
//
//	go test ./apply -run XXX -bench LayoutMissing -count 6
func BenchmarkLayoutMissing(b *testing.B) {
	source := []delta.StructField{{Name: "id", Type: delta.Long}}
	img := &schema.Type{Base: schema.BaseStruct, Fields: []schema.Field{{Name: "id", Type: &schema.Type{Base: schema.BaseInt64}}}}
	for i := 1; i < 10; i++ {
		name := fmt.Sprintf("col_%d", i)
		source = append(source, delta.StructField{Name: name, Type: delta.String})
		img.Fields = append(img.Fields, schema.Field{Name: name, Type: &schema.Type{Base: schema.BaseString}})
	}
	l, err := NewLayout(source, []string{"id"})
	if err != nil {
		b.Fatal(err)
	}
	row := debezium.Row{Type: img}
	b.ReportAllocs()
	for b.Loop() {
		if m := l.Missing(row); len(m) != 0 {
			b.Fatalf("missing %v", m)
		}
	}
}

// TestByteArena: keys and sequences taken from the arena equal the
// allocating encodings and stay unchanged while the arena fills blocks,
// including a key longer than the room it reserves (which moves the
// block) and an empty key; a sequence cannot be appended to in place.
func TestByteArena(t *testing.T) {
	var a byteArena
	type got struct {
		key, wantKey string
		seq, wantSeq []byte
	}
	var all []got
	for i := range 20_000 {
		vals := []schema.Value{schema.Int(int64(i)), schema.String(fmt.Sprintf("k%d", i))}
		if i%997 == 0 {
			vals[1] = schema.String(string(make([]byte, 300+i%7))) // longer than reserved
		}
		keyCols := []int{0, 1}
		if i%5003 == 0 {
			keyCols = nil // an empty key
		}
		seq := debezium.Sequence{Connector: debezium.ConnectorPostgres, N: 2}
		seq.Parts[0] = debezium.Part{Kind: debezium.PartUint, U: uint64(i)}
		seq.Parts[1] = debezium.Part{Kind: debezium.PartUint, U: uint64(i * 3)}
		all = append(all, got{a.key(vals, keyCols), EncodeKey(vals, keyCols), a.sequence(seq), seq.Key()})
	}
	for i, g := range all {
		if g.key != g.wantKey || !slices.Equal(g.seq, g.wantSeq) {
			t.Fatalf("change %d: key %q seq %x, want %q %x", i, g.key, g.seq, g.wantKey, g.wantSeq)
		}
		if cap(g.seq) != len(g.seq) {
			t.Fatalf("change %d: sequence has room to append into the arena (%d of %d)", i, len(g.seq), cap(g.seq))
		}
	}
	var nilArena *byteArena // Project's: allocates
	vals := []schema.Value{schema.Int(7)}
	if k := nilArena.key(vals, []int{0}); k != EncodeKey(vals, []int{0}) {
		t.Errorf("nil arena key %q", k)
	}
}
