package apply

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

func TestArrowRowsRoundTrip(t *testing.T) {
	l, err := NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long}, {Name: "b", Type: delta.Boolean, Nullable: true},
		{Name: "i8", Type: delta.Byte, Nullable: true}, {Name: "i16", Type: delta.Short, Nullable: true},
		{Name: "i32", Type: delta.Integer, Nullable: true}, {Name: "f32", Type: delta.Float, Nullable: true},
		{Name: "f64", Type: delta.Double, Nullable: true}, {Name: "s", Type: delta.String, Nullable: true},
		{Name: "bin", Type: delta.Binary, Nullable: true}, {Name: "d", Type: delta.Date, Nullable: true},
		{Name: "ts", Type: delta.Timestamp, Nullable: true}, {Name: "ntz", Type: delta.TimestampNTZ, Nullable: true},
		{Name: "dec", Type: delta.DecimalType{Precision: 38, Scale: 4}, Nullable: true},
		{Name: "arr", Type: delta.ArrayType{ElementType: delta.String, ContainsNull: true}, Nullable: true},
		{Name: "st", Type: delta.StructType{Fields: []delta.StructField{{Name: "x", Type: delta.Integer, Nullable: true}, {Name: "y", Type: delta.String, Nullable: true}}}, Nullable: true},
		{Name: "m", Type: delta.MapType{KeyType: delta.String, ValueType: delta.Long, ValueContainsNull: true}, Nullable: true},
	}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	full := []schema.Value{schema.Int(1), schema.Bool(true), schema.Int(-128), schema.Int(32767), schema.Int(math.MinInt32),
		schema.Float(float64(float32(1.5))), schema.Float(math.Inf(-1)), schema.String("héllo"), schema.Bytes([]byte{0, 1, 255}),
		schema.Int(-719162), schema.Int(1_700_000_000_123_456), schema.Int(-1),
		{Kind: schema.KindDecimal, Hi: -1, I: -123456789, Scale: 4},
		schema.List(schema.String("a"), schema.Null), schema.Struct(schema.Int(7), schema.Null),
		schema.Map(schema.String("k"), schema.Int(9))}
	nulls := make([]schema.Value, len(full))
	nulls[0] = schema.Int(2)
	rows := []Row{
		{Values: full, Seq: []byte{1, 2, 3}, Deleted: false, SourceTsMicros: 5, AppliedMicros: 6},
		{Values: nulls, Seq: []byte{0xff}, Deleted: true, AppliedMicros: 7},
	}
	sch, err := datafile.ArrowSchema(l.Schema())
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, l, arrowRoundTrip(t, sch, len(l.Source), rows), rows)
	// Many rows (built on two goroutines), each column NULL at random,
	// and no rows at all.
	rng := rand.New(rand.NewPCG(1, 9))
	many := make([]Row, 3000)
	for i := range many {
		vals := append([]schema.Value(nil), full...)
		vals[0] = schema.Int(int64(i))
		for c := 1; c < len(vals); c++ {
			if rng.IntN(3) == 0 {
				vals[c] = schema.Null
			}
		}
		many[i] = Row{Values: vals, Seq: []byte{byte(i), byte(i >> 8)}, Deleted: i%2 == 0, SourceTsMicros: int64(i % 3), AppliedMicros: int64(i)}
	}
	sameRows(t, l, arrowRoundTrip(t, sch, len(l.Source), many), many)
	// The same column buffers reused for a second record, as WriteRows
	// does (arrowScratch): fewer rows, NULL or false where the first
	// record had values and true, shorter text. Nothing of the first may
	// show through.
	scratch := new(arrowScratch)
	sameRows(t, l, arrowRoundTripIn(t, sch, len(l.Source), many, scratch), many)
	text := &scratch.cols[7].data[0] // s's bytes
	sparse := make([]Row, 1000)
	for i := range sparse {
		vals := make([]schema.Value, len(full))
		vals[0] = schema.Int(int64(10_000 + i))
		if i%2 == 0 {
			vals[1], vals[7], vals[8] = schema.Bool(false), schema.String("x"), schema.Bytes(nil)
		}
		sparse[i] = Row{Values: vals, Seq: []byte{byte(i)}, AppliedMicros: 1}
	}
	sameRows(t, l, arrowRoundTripIn(t, sch, len(l.Source), sparse, scratch), sparse)
	if &scratch.cols[7].data[0] != text {
		t.Error("the second record's text went to a new array: the scratch buffers were not reused")
	}
	sameRows(t, l, arrowRoundTripIn(t, sch, len(l.Source), many, scratch), many)
	if back := arrowRoundTrip(t, sch, len(l.Source), nil); len(back) != 0 {
		t.Errorf("no rows came back as %d", len(back))
	}
	// The placeholder must never be written, in a column of any type (each
	// has its own appender) nor inside a nested value.
	for c := range full {
		bad := append([]schema.Value(nil), full...)
		bad[c] = schema.Unavailable
		if _, err := rowsToArrow(sch, len(l.Source), []Row{{Values: bad, Seq: []byte{1}}}, nil); err == nil {
			t.Errorf("writing the unavailable placeholder in %s must fail", l.Source[c].Name)
		}
	}
	nested := append([]schema.Value(nil), full...)
	nested[13] = schema.List(schema.String("a"), schema.Unavailable)
	if _, err := rowsToArrow(sch, len(l.Source), []Row{{Values: nested, Seq: []byte{1}}}, nil); err == nil {
		t.Error("writing the unavailable placeholder inside a list must fail")
	}
	// An integer into a double column, a decimal into a string column.
	mixed := append([]schema.Value(nil), full...)
	mixed[6], mixed[7] = schema.Int(3), schema.Value{Kind: schema.KindDecimal, I: 12345, Scale: 2}
	if got := arrowRoundTrip(t, sch, len(l.Source), []Row{{Values: mixed, Seq: []byte{1}}})[0].Values; !got[6].Equal(schema.Float(3)) || !got[7].Equal(schema.String("123.45")) {
		t.Errorf("mixed kinds: f64 %#v, s %#v", got[6], got[7])
	}
}

// sameRows checks that rows came back as back: every source column and
// the engine columns.
func sameRows(t *testing.T, l *Layout, back, rows []Row) {
	t.Helper()
	if len(back) != len(rows) {
		t.Fatalf("%d rows came back, want %d", len(back), len(rows))
	}
	for r := range rows {
		for c := range rows[r].Values {
			if !back[r].Values[c].Equal(rows[r].Values[c]) {
				t.Fatalf("row %d col %s: got %#v want %#v", r, l.Source[c].Name, back[r].Values[c], rows[r].Values[c])
			}
		}
		if string(back[r].Seq) != string(rows[r].Seq) || back[r].Deleted != rows[r].Deleted ||
			back[r].SourceTsMicros != rows[r].SourceTsMicros || back[r].AppliedMicros != rows[r].AppliedMicros {
			t.Fatalf("row %d engine columns: got %+v want %+v", r, back[r], rows[r])
		}
	}
}

// arrowRoundTrip converts rows to an Arrow record of sch and back.
func arrowRoundTrip(t *testing.T, sch *arrow.Schema, nSource int, rows []Row) []Row {
	t.Helper()
	return arrowRoundTripIn(t, sch, nSource, rows, nil)
}

// arrowRoundTripIn is arrowRoundTrip building the record in scratch's
// buffers. The text of the rows that come back points into them: compare
// it before scratch is used again.
func arrowRoundTripIn(t *testing.T, sch *arrow.Schema, nSource int, rows []Row, scratch *arrowScratch) []Row {
	t.Helper()
	rec, err := rowsToArrow(sch, nSource, rows, scratch)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	back, err := arrowToRows(rec, nSource)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestRowsToArrowBothHalves: a batch large enough to be built on two
// goroutines (the columns in two halves) round-trips every row, and a
// bad value (an unavailable placeholder) in either half is reported with its column and row.
func TestRowsToArrowBothHalves(t *testing.T) {
	const n = 3000
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{Values: scaleValues(int64(i), 3), Seq: pgSeq(uint64(i + 1)), SourceTsMicros: int64(i), AppliedMicros: 9}
	}
	sch, err := datafile.ArrowSchema(scaleLayout.Schema())
	if err != nil {
		t.Fatal(err)
	}
	nSource := len(scaleLayout.Source)
	rec, err := rowsToArrow(sch, nSource, rows, nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := arrowToRows(rec, nSource)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		for c := range rows[r].Values {
			if !back[r].Values[c].Equal(rows[r].Values[c]) {
				t.Fatalf("row %d col %d: got %#v want %#v", r, c, back[r].Values[c], rows[r].Values[c])
			}
		}
		if string(back[r].Seq) != string(rows[r].Seq) || back[r].SourceTsMicros != rows[r].SourceTsMicros {
			t.Fatalf("row %d: engine columns differ", r)
		}
	}
	for _, c := range []int{1, nSource - 1} { // one column in each half
		bad := append([]schema.Value(nil), rows[2500].Values...)
		bad[c] = schema.Unavailable
		rows[2500].Values = bad
		_, err := rowsToArrow(sch, nSource, rows, nil)
		if err == nil || !strings.Contains(err.Error(), scaleLayout.Source[c].Name) || !strings.Contains(err.Error(), "row 2500") {
			t.Fatalf("an unavailable value in column %s: err %v, want one naming the column and row 2500", scaleLayout.Source[c].Name, err)
		}
		rows[2500].Values = scaleValues(2500, 3)
	}
}

// TestWriteRowsKeepsSmallScratch: WriteRows builds each file in the last
// file's column buffers when they are small (a merge-on-read batch's
// file) and lets a large file's buffers go (a copy-on-write rewrite, a
// load), so they do not stay resident; the files read back as written.
// What all tables keep is bounded.
func TestWriteRowsKeepsSmallScratch(t *testing.T) {
	ctx := t.Context()
	emptyPool := func() {
		scratchPool.Lock()
		scratchPool.free, scratchPool.held = nil, 0
		scratchPool.Unlock()
	}
	emptyPool()
	t.Cleanup(emptyPool)
	p, err := NewParquetRowFiles(storage.NewLocal(t.TempDir()), scaleLayout)
	if err != nil {
		t.Fatal(err)
	}
	rowsOf := func(n int, version uint64, pad int) []Row {
		rows := make([]Row, n)
		for i := range rows {
			v := scaleValues(int64(i), version)
			if pad > 0 {
				v[5] = schema.String(strings.Repeat("x", pad))
			}
			if i%3 == 0 {
				v[8] = schema.Null // flag: NULL where the last file had a value
			}
			rows[i] = Row{Values: v, Seq: pgSeq(version), AppliedMicros: 1}
		}
		return rows
	}
	check := func(rows []Row) {
		t.Helper()
		add, err := p.WriteRows(ctx, rows)
		if err != nil {
			t.Fatal(err)
		}
		back, err := p.ReadRows(ctx, add)
		if err != nil {
			t.Fatal(err)
		}
		sameRows(t, scaleLayout, back, rows)
	}
	check(rowsOf(5000, 1, 0))
	if len(scratchPool.free) != 1 || scratchPool.held != scratchPool.free[0].held() {
		t.Fatalf("%d column buffers (%d bytes) kept after a small file, want 1", len(scratchPool.free), scratchPool.held)
	}
	kept := scratchPool.free[0]
	check(rowsOf(3000, 2, 0))
	if len(scratchPool.free) != 1 || scratchPool.free[0] != kept {
		t.Fatal("the second small file was not built in the first one's buffers")
	}
	// 40 rows of 1 MiB notes: more than scratchKeepBytes of text.
	check(rowsOf(40, 3, 1<<20))
	if len(scratchPool.free) != 0 || scratchPool.held != 0 {
		t.Fatalf("a %d-byte scratch was kept after a large file (bound %d)", scratchPool.held, scratchKeepBytes)
	}
	check(rowsOf(2000, 4, 0))
	if len(scratchPool.free) != 1 || scratchPool.free[0].held() > 1<<20 {
		t.Fatal("the small file after a large one did not start fresh buffers")
	}
	// Many tables' files at once keep no more than scratchPoolBytes.
	var taken []*arrowScratch
	for range 6 {
		s := takeScratch()
		s.ensure(1)
		reuse(&s.cols[0].data, 20<<20)
		taken = append(taken, s)
	}
	for _, s := range taken {
		putScratch(s)
	}
	// 20 MiB each (and a little more the one the last file used): three
	// fit in 64 MiB, the other three go.
	if scratchPool.held > scratchPoolBytes || len(scratchPool.free) != 3 {
		t.Fatalf("%d of %d scratches kept, %d bytes, bound %d", len(scratchPool.free), len(taken), scratchPool.held, scratchPoolBytes)
	}
}
