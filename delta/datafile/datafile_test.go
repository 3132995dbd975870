package datafile

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// kernelData holds Spark's reference tables; the repository's shared/
// folder sits next to the work tree, locally and in CI.
var kernelData = func() string {
	if d := os.Getenv("DELTA_CONFORMANCE"); d != "" {
		return filepath.Join(d, "kernel-data")
	}
	return "../../../shared/delta-conformance/kernel-data"
}()

// allTypes is a table with every primitive type cdcapply writes and one
// partition column.
func allTypes(t testing.TB, mapping ColumnMapping) Layout {
	t.Helper()
	fields := []delta.StructField{
		{Name: "b", Type: delta.Boolean, Nullable: true},
		{Name: "i8", Type: delta.Byte, Nullable: true},
		{Name: "i16", Type: delta.Short, Nullable: true},
		{Name: "i32", Type: delta.Integer, Nullable: true},
		{Name: "i64", Type: delta.Long, Nullable: false},
		{Name: "f32", Type: delta.Float, Nullable: true},
		{Name: "f64", Type: delta.Double, Nullable: true},
		{Name: "d5", Type: delta.DecimalType{Precision: 5, Scale: 2}, Nullable: true},
		{Name: "d15", Type: delta.DecimalType{Precision: 15, Scale: 3}, Nullable: true},
		{Name: "d25", Type: delta.DecimalType{Precision: 25, Scale: 4}, Nullable: true},
		{Name: "s", Type: delta.String, Nullable: true},
		{Name: "bin", Type: delta.Binary, Nullable: true},
		{Name: "date", Type: delta.Date, Nullable: true},
		{Name: "ts", Type: delta.Timestamp, Nullable: true},
		{Name: "ntz", Type: delta.TimestampNTZ, Nullable: true},
		{Name: "st", Type: delta.StructType{Fields: []delta.StructField{
			{Name: "x", Type: delta.Integer, Nullable: true},
			{Name: "y", Type: delta.String, Nullable: true},
		}}, Nullable: true},
		{Name: "part", Type: delta.String, Nullable: true},
	}
	if mapping != MappingNone {
		for i := range fields {
			fields[i].Metadata = map[string]any{keyFieldID: float64(i + 1), keyPhysicalName: "col-" + fields[i].Name}
		}
		st := fields[15].Type.(delta.StructType)
		for i := range st.Fields {
			st.Fields[i].Metadata = map[string]any{keyFieldID: float64(100 + i), keyPhysicalName: "col-st-" + st.Fields[i].Name}
		}
	}
	return Layout{Schema: delta.StructType{Fields: fields}, PartitionColumns: []string{"part"}, Mapping: mapping, NumIndexedCols: 32}
}

// sampleRecord builds three rows of the data columns of allTypes: typical
// values, extremes, and nulls (except in the non-nullable column).
func sampleRecord(t testing.TB, l Layout, rows int) arrow.RecordBatch {
	t.Helper()
	data := delta.StructType{Fields: l.Schema.Fields[:len(l.Schema.Fields)-1]}
	sc, err := ArrowSchema(data)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro()
	for r := 0; r < rows; r++ {
		null := r%3 == 2
		app := func(i int, f func()) {
			if null {
				b.Field(i).AppendNull()
			} else {
				f()
			}
		}
		app(0, func() { b.Field(0).(*array.BooleanBuilder).Append(r%2 == 0) })
		app(1, func() { b.Field(1).(*array.Int8Builder).Append(int8(r - 128)) })
		app(2, func() { b.Field(2).(*array.Int16Builder).Append(int16(r * 7)) })
		app(3, func() { b.Field(3).(*array.Int32Builder).Append(int32(-r * 1000)) })
		b.Field(4).(*array.Int64Builder).Append(int64(r) << 40)
		app(5, func() { b.Field(5).(*array.Float32Builder).Append(float32(r) + 0.25) })
		app(6, func() { b.Field(6).(*array.Float64Builder).Append(float64(r)/3 - 1) })
		app(7, func() { b.Field(7).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(r*101 - 999))) })
		app(8, func() { b.Field(8).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(r) * 123456789012)) })
		app(9, func() {
			b.Field(9).(*array.Decimal128Builder).Append(decimal128.New(int64(r), 42))
		})
		app(10, func() { b.Field(10).(*array.StringBuilder).Append(strings.Repeat("ü", r%40) + "z") })
		app(11, func() { b.Field(11).(*array.BinaryBuilder).Append([]byte{byte(r), 0, 0xff}) })
		app(12, func() { b.Field(12).(*array.Date32Builder).Append(arrow.Date32(19000 + r)) })
		app(13, func() { b.Field(13).(*array.TimestampBuilder).Append(arrow.Timestamp(base + int64(r)*1001)) })
		app(14, func() { b.Field(14).(*array.TimestampBuilder).Append(arrow.Timestamp(base - int64(r)*7)) })
		sb := b.Field(15).(*array.StructBuilder)
		if r%5 == 4 {
			sb.AppendNull()
		} else {
			sb.Append(true)
			if null {
				sb.FieldBuilder(0).AppendNull()
			} else {
				sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(r))
			}
			sb.FieldBuilder(1).(*array.StringBuilder).Append("n" + string(rune('a'+r%26)))
		}
	}
	return b.NewRecordBatch()
}

func TestWriteReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, mapping := range []ColumnMapping{MappingNone, MappingName, MappingID} {
		t.Run(string(mapping), func(t *testing.T) {
			st := storage.NewLocal(t.TempDir())
			l := allTypes(t, mapping)
			rec := sampleRecord(t, l, 10)
			defer rec.Release()
			pv := "a b/c"
			add, err := Write(ctx, st, l, rec, map[string]*string{"part": &pv})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Read(ctx, st, l, add)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			if got.NumRows() != rec.NumRows() || got.NumCols() != rec.NumCols()+1 {
				t.Fatalf("read %dx%d, wrote %dx%d", got.NumRows(), got.NumCols(), rec.NumRows(), rec.NumCols())
			}
			for i := 0; i < int(rec.NumCols()); i++ {
				if !array.Equal(got.Column(i), rec.Column(i)) {
					t.Errorf("column %s differs:\n got %v\nwant %v", rec.ColumnName(i), got.Column(i), rec.Column(i))
				}
			}
			part := got.Column(int(rec.NumCols())).(*array.String)
			for i := 0; i < part.Len(); i++ {
				if part.Value(i) != pv {
					t.Fatalf("partition value %q, want %q", part.Value(i), pv)
				}
			}
			wantKey := "part"
			if mapping != MappingNone {
				wantKey = "col-part"
			}
			if _, ok := add.PartitionValues[wantKey]; !ok || len(add.PartitionValues) != 1 {
				t.Errorf("partitionValues %v, want the key %q", add.PartitionValues, wantKey)
			}
		})
	}
}

// TestParquetTypes checks the physical and logical Parquet types of a
// written file against the protocol's type mapping.
func TestParquetTypes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storage.NewLocal(dir)
	l := allTypes(t, MappingID)
	rec := sampleRecord(t, l, 3)
	defer rec.Release()
	pv := "x"
	add, err := Write(ctx, st, l, rec, map[string]*string{"part": &pv})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, add.Path))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != add.Size {
		t.Errorf("add.size %d, file has %d bytes", add.Size, len(raw))
	}
	pr, err := file.NewParquetReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	want := map[string]struct {
		phys    parquet.Type
		logical string
	}{
		"col-b": {parquet.Types.Boolean, "None"}, "col-i8": {parquet.Types.Int32, "Int(bitWidth=8, isSigned=true)"},
		"col-i16": {parquet.Types.Int32, "Int(bitWidth=16, isSigned=true)"}, "col-i32": {parquet.Types.Int32, "Int(bitWidth=32, isSigned=true)"},
		"col-i64": {parquet.Types.Int64, "Int(bitWidth=64, isSigned=true)"}, "col-f32": {parquet.Types.Float, "None"}, "col-f64": {parquet.Types.Double, "None"},
		"col-d5": {parquet.Types.Int32, "Decimal(precision=5, scale=2)"}, "col-d15": {parquet.Types.Int64, "Decimal(precision=15, scale=3)"},
		"col-d25": {parquet.Types.FixedLenByteArray, "Decimal(precision=25, scale=4)"}, "col-s": {parquet.Types.ByteArray, "String"},
		"col-bin": {parquet.Types.ByteArray, "None"}, "col-date": {parquet.Types.Int32, "Date"},
		"col-ts":  {parquet.Types.Int64, "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)"},
		"col-ntz": {parquet.Types.Int64, "Timestamp(isAdjustedToUTC=false, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)"},
	}
	sc := pr.MetaData().Schema
	seen := 0
	for i := 0; i < sc.NumColumns(); i++ {
		c := sc.Column(i)
		w, ok := want[c.Name()]
		if !ok {
			continue
		}
		seen++
		if c.PhysicalType() != w.phys || c.LogicalType().String() != w.logical {
			t.Errorf("%s: %s %s, want %s %s", c.Name(), c.PhysicalType(), c.LogicalType(), w.phys, w.logical)
		}
		if c.SchemaNode().FieldID() < 1 {
			t.Errorf("%s: no field id", c.Name())
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of %d expected columns in %v", seen, len(want), sc)
	}
	if sc.Root().FieldIndexByName("col-part") >= 0 {
		t.Error("partition column stored in the data file")
	}
}

// TestStatsMatchSpark reads the rows Spark wrote in stats-writing-all-types
// and checks our statistics of those rows equal the stats Spark logged.
func TestStatsMatchSpark(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(kernelData, "stats-writing-all-types", "delta")
	meta, adds := readLog(t, root)
	l, err := LayoutOf(meta)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, add := range adds {
		var spark map[string]any
		if err := json.Unmarshal([]byte(add.Stats), &spark); err != nil {
			t.Fatal(err)
		}
		if spark["numRecords"].(float64) == 0 {
			continue
		}
		rec, err := Read(ctx, storage.NewLocal(root), l, add)
		if err != nil {
			t.Fatal(err)
		}
		var ours map[string]any
		if err := json.Unmarshal([]byte(l.ComputeStats(rec).JSON()), &ours); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if !reflect.DeepEqual(ours, spark) {
			a, _ := json.MarshalIndent(ours, "", " ")
			b, _ := json.MarshalIndent(spark, "", " ")
			t.Errorf("stats differ from Spark's\nours:  %s\nspark: %s", a, b)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no file with rows in stats-writing-all-types")
	}
}

// TestTimestampStatsBound checks the one place we differ from Spark on
// purpose: a maximum with sub-millisecond digits is rounded up, so it
// still bounds the data (Spark truncates 00:00:04.0005 to .000).
func TestTimestampStatsBound(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(kernelData, "timestamp-truncation-stats")
	meta, adds := readLog(t, root)
	l, err := LayoutOf(meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, add := range adds {
		rec, err := Read(ctx, storage.NewLocal(root), l, add)
		if err != nil {
			t.Fatal(err)
		}
		ours := l.ComputeStats(rec).JSON()
		rec.Release()
		spark := add.Stats
		if strings.Contains(spark, `"ts_col":"1970-01-01T00:00:04.000Z"`) {
			// The file holding 00:00:04.0005.
			if !strings.Contains(ours, `"maxValues":{"id":4,"ts_col":"1970-01-01T00:00:04.001Z"}`) {
				t.Errorf("max of 00:00:04.0005 not rounded up: %s", ours)
			}
			continue
		}
		if ours != spark {
			t.Errorf("stats\nours:  %s\nspark: %s", ours, spark)
		}
	}
}

func readLog(t *testing.T, root string) (*delta.Metadata, []*delta.Add) {
	t.Helper()
	snap, err := delta.Open(storage.NewLocal(root)).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &snap.Metadata, snap.Files()
}

func TestStringStatsTruncation(t *testing.T) {
	long := strings.Repeat("a", 40)
	cases := []struct {
		vals     []string
		min, max string
		noMax    bool
	}{
		{vals: []string{"b", "a", "c"}, min: "a", max: "c"},
		{vals: []string{long, "b"}, min: strings.Repeat("a", 32), max: "b"},
		{vals: []string{"a", long + "z"}, min: "a", max: strings.Repeat("a", 32) + maxTieBreaker},
		{vals: []string{strings.Repeat("é", 33)}, min: strings.Repeat("é", 32), max: strings.Repeat("é", 32) + maxTieBreaker},
		{vals: []string{strings.Repeat("x", 32) + maxTieBreaker + "y"}, min: strings.Repeat("x", 32), noMax: true},
	}
	for _, c := range cases {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.AppendValues(c.vals, nil)
		arr := b.NewArray()
		lo, hi, ok := minMax(arr, nil)
		if c.noMax {
			if ok {
				t.Errorf("%q: wrote bounds %s %s though no max bounds the data", c.vals, lo, hi)
			}
			continue
		}
		var gotMin, gotMax string
		json.Unmarshal(lo, &gotMin)
		json.Unmarshal(hi, &gotMax)
		if gotMin != c.min || gotMax != c.max {
			t.Errorf("%q: min %q max %q, want %q %q", c.vals, gotMin, gotMax, c.min, c.max)
		}
		for _, v := range c.vals {
			if v < gotMin || v > gotMax {
				t.Errorf("%q outside [%q, %q]", v, gotMin, gotMax)
			}
		}
	}
}

func TestNumIndexedColsAndStatsColumns(t *testing.T) {
	l := allTypes(t, MappingNone)
	rec := sampleRecord(t, l, 6)
	defer rec.Release()
	l.NumIndexedCols = 3
	s := l.ComputeStats(rec).JSON()
	if want := `"nullCount":{"b":2,"i8":2,"i16":2}}`; !strings.HasSuffix(s, want) {
		t.Errorf("3 indexed columns: %s, want suffix %s", s, want)
	}
	l.StatsColumns = []string{"st.y", "i64"}
	s = l.ComputeStats(rec).JSON()
	// Row 4 has a null struct, so st.y counts one null.
	want := `{"numRecords":6,"minValues":{"i64":0,"st":{"y":"na"}},"maxValues":{"i64":5497558138880,"st":{"y":"nf"}},"nullCount":{"i64":0,"st":{"y":1}}}`
	if s != want {
		t.Errorf("stats columns:\n got %s\nwant %s", s, want)
	}
}

// TestReadOldFile reads a file written under an older schema: a column
// added since reads as null, a widened column (int to long, float to
// double, date to timestamp_ntz, decimal(5,2) to decimal(10,4)) is widened.
// writeOldFile writes a file of a table before type widening and a new
// column: a int, f float, d date, m decimal(5,2); two rows.
func writeOldFile(t *testing.T, ctx context.Context, st storage.Storage) *delta.Add {
	t.Helper()
	old := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "a", Type: delta.Integer, Nullable: true},
		{Name: "f", Type: delta.Float, Nullable: true},
		{Name: "d", Type: delta.Date, Nullable: true},
		{Name: "m", Type: delta.DecimalType{Precision: 5, Scale: 2}, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, _ := ArrowSchema(old.Schema)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{1, -2}, nil)
	b.Field(1).(*array.Float32Builder).AppendValues([]float32{1.5, 0}, []bool{true, false})
	b.Field(2).(*array.Date32Builder).AppendValues([]arrow.Date32{0, 1}, nil)
	b.Field(3).(*array.Decimal128Builder).AppendValues([]decimal128.Num{decimal128.FromI64(-12345), decimal128.FromI64(1)}, nil)
	add, err := Write(ctx, st, old, b.NewRecordBatch(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return add
}

func TestReadOldFile(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	add := writeOldFile(t, ctx, st)
	newer := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "a", Type: delta.Long, Nullable: true},
		{Name: "added", Type: delta.String, Nullable: true},
		{Name: "f", Type: delta.Double, Nullable: true},
		{Name: "d", Type: delta.TimestampNTZ, Nullable: true},
		{Name: "m", Type: delta.DecimalType{Precision: 10, Scale: 4}, Nullable: true},
	}}}
	got, err := Read(ctx, st, newer, add)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	rows := []string{}
	for c := 0; c < int(got.NumCols()); c++ {
		rows = append(rows, got.Column(c).String())
	}
	want := []string{"[1 -2]", "[(null) (null)]", "[1.5 (null)]", "[0 86400000000]", "[-123.45 0.01]"}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("columns %q, want %q", rows, want)
	}
	// A narrowing (long file, int table) is refused, not truncated.
	narrow := Layout{Schema: delta.StructType{Fields: []delta.StructField{{Name: "m", Type: delta.DecimalType{Precision: 5, Scale: 1}, Nullable: true}}}}
	if _, err := Read(ctx, st, narrow, add); err == nil || !strings.Contains(err.Error(), "scale would shrink") {
		t.Errorf("narrowing decimal read: err %v", err)
	}
}

func TestReadWithDeletionVector(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := allTypes(t, MappingNone)
	rec := sampleRecord(t, l, 8)
	defer rec.Release()
	add, err := Write(ctx, st, l, rec, map[string]*string{"part": nil})
	if err != nil {
		t.Fatal(err)
	}
	deleted := roaring64.BitmapOf(0, 3, 4, 7)
	for _, inline := range []bool{false, true} {
		var d *delta.DeletionVector
		if inline {
			d, err = dv.Inline(deleted)
		} else {
			d, err = dv.Write(ctx, st, deleted, "")
		}
		if err != nil {
			t.Fatal(err)
		}
		withDV := *add
		withDV.DeletionVector = d
		got, err := Read(ctx, st, l, &withDV)
		if err != nil {
			t.Fatal(err)
		}
		ids := got.Column(4).(*array.Int64)
		var kept []int64
		for i := 0; i < ids.Len(); i++ {
			kept = append(kept, ids.Value(i)>>40)
		}
		if !reflect.DeepEqual(kept, []int64{1, 2, 5, 6}) {
			t.Errorf("inline=%v: kept rows %v, want [1 2 5 6]", inline, kept)
		}
		if got.Column(16).NullN() != 4 {
			t.Errorf("null partition value read as %v", got.Column(16))
		}
		got.Release()
	}
	// A vector that deletes a row past the end of the file is corrupt.
	withDV := *add
	withDV.DeletionVector, _ = dv.Inline(roaring64.BitmapOf(8))
	if _, err := Read(ctx, st, l, &withDV); err == nil {
		t.Error("deletion vector beyond the file accepted")
	}
}

func TestPartitionValues(t *testing.T) {
	cases := []struct {
		t    delta.DataType
		v    string
		want string
	}{
		{delta.Integer, "-42", "[-42]"},
		{delta.Long, "9223372036854775807", "[9223372036854775807]"},
		{delta.Byte, "-128", "[-128]"},
		{delta.Boolean, "false", "[false]"},
		{delta.Double, "1.5", "[1.5]"},
		{delta.Date, "2021-09-08", "[2021-09-08]"},
		// Timestamps render as microseconds since the epoch.
		{delta.Timestamp, "2021-09-08 11:11:11", "[1631099471000000]"},
		{delta.Timestamp, "1970-01-01T00:00:00.123456Z", "[123456]"},
		{delta.Timestamp, "1970-01-01T01:00:00.5+01:00", "[500000]"},
		{delta.TimestampNTZ, "2021-09-08 11:11:11.5", "[1631099471500000]"},
		{delta.DecimalType{Precision: 5, Scale: 2}, "-1.5", "[-1.5]"},
		{delta.String, "a%b=c", "[\"a%b=c\"]"},
		{delta.String, "", "[(null)]"},
	}
	for _, c := range cases {
		v := c.v
		arr, err := partitionArray(memory.DefaultAllocator, c.t, &v, 1)
		if err != nil {
			t.Errorf("%s %q: %v", c.t, c.v, err)
			continue
		}
		if got := arr.String(); got != c.want {
			t.Errorf("%s %q: %s, want %s", c.t, c.v, got, c.want)
		}
	}
	bad := "x"
	if _, err := partitionArray(memory.DefaultAllocator, delta.Integer, &bad, 1); err == nil {
		t.Error("integer partition value \"x\" accepted")
	}
}

func TestWriteRefusesMismatchedRecord(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := allTypes(t, MappingNone)
	rec := sampleRecord(t, l, 3)
	defer rec.Release()
	if _, err := Write(ctx, st, l, rec, nil); err == nil || !strings.Contains(err.Error(), "no value for partition column") {
		t.Errorf("missing partition value: %v", err)
	}
	l2 := l
	l2.Schema = delta.StructType{Fields: append([]delta.StructField{{Name: "extra", Type: delta.Long}}, l.Schema.Fields...)}
	if _, err := Write(ctx, st, l2, rec, map[string]*string{"part": nil}); err == nil {
		t.Error("record without the schema's first column accepted")
	}
}

// TestPartitionValueRoundTrip formats every partition-capable column of a
// sample record and parses it back to the same value.
func TestPartitionValueRoundTrip(t *testing.T) {
	l := allTypes(t, MappingNone)
	rec := sampleRecord(t, l, 6)
	defer rec.Release()
	for c, f := range l.Schema.Fields[:15] {
		col := rec.Column(c)
		for i := 0; i < col.Len(); i++ {
			v, err := PartitionValue(col, i)
			if err != nil {
				t.Fatalf("%s row %d: %v", f.Name, i, err)
			}
			back, err := partitionArray(memory.DefaultAllocator, f.Type, v, 1)
			if err != nil {
				t.Fatalf("%s row %d: parse %v: %v", f.Name, i, *v, err)
			}
			orig := array.NewSlice(col, int64(i), int64(i+1))
			if !array.Equal(orig, back) {
				t.Errorf("%s row %d: %v formatted as %q reads back as %v", f.Name, i, orig, deref(v), back)
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestWriteNestedGolden rewrites Spark's nested golden tables (arrays of
// arrays, arrays of maps and structs, maps with list values, nested
// structs) with Write and reads them back unchanged.
func TestWriteNestedGolden(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"data-reader-array-complex-objects", "data-reader-array-primitives", "data-reader-map", "data-reader-nested-struct", "data-reader-primitives"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tarball := filepath.Join(kernelData, "..", "golden", name+".tar.zst")
			if out, err := exec.Command("tar", "--zstd", "-xf", tarball, "-C", dir).CombinedOutput(); err != nil {
				t.Fatalf("unpack: %v: %s", err, out)
			}
			root := filepath.Join(dir, name, "delta")
			meta, adds := readLog(t, root)
			l, err := LayoutOf(meta)
			if err != nil {
				t.Fatal(err)
			}
			out := storage.NewLocal(t.TempDir())
			for _, add := range adds {
				rec, err := Read(ctx, storage.NewLocal(root), l, add)
				if err != nil {
					t.Fatal(err)
				}
				written, err := Write(ctx, out, l, rec, nil)
				if err != nil {
					t.Fatal(err)
				}
				back, err := Read(ctx, out, l, written)
				if err != nil {
					t.Fatal(err)
				}
				if !array.RecordEqual(rec, back) {
					t.Errorf("%s: rewritten file reads differently:\n got %v\nwant %v", add.Path, back, rec)
				}
				rec.Release()
				back.Release()
			}
		})
	}
}

// TestWriteListsWithNulls covers what the golden tables lack: null lists,
// empty lists, null elements, null map values and a null struct holding a
// list, each needing its own definition level.
func TestWriteListsWithNulls(t *testing.T) {
	ctx := context.Background()
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "xs", Type: delta.ArrayType{ElementType: delta.Integer, ContainsNull: true}, Nullable: true},
		{Name: "m", Type: delta.MapType{KeyType: delta.String, ValueType: delta.Long, ValueContainsNull: true}, Nullable: true},
		{Name: "s", Type: delta.StructType{Fields: []delta.StructField{
			{Name: "tags", Type: delta.ArrayType{ElementType: delta.String, ContainsNull: false}, Nullable: true},
		}}, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, err := ArrowSchema(l.Schema)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	xs := b.Field(0).(*array.ListBuilder)
	xv := xs.ValueBuilder().(*array.Int32Builder)
	m := b.Field(1).(*array.MapBuilder)
	mk, mv := m.KeyBuilder().(*array.StringBuilder), m.ItemBuilder().(*array.Int64Builder)
	s := b.Field(2).(*array.StructBuilder)
	tags := s.FieldBuilder(0).(*array.ListBuilder)
	tv := tags.ValueBuilder().(*array.StringBuilder)
	// row 0: [1 null 3], {a:1 b:null}, {tags:[x y]}
	xs.Append(true)
	xv.Append(1)
	xv.AppendNull()
	xv.Append(3)
	m.Append(true)
	mk.Append("a")
	mv.Append(1)
	mk.Append("b")
	mv.AppendNull()
	s.Append(true)
	tags.Append(true)
	tv.Append("x")
	tv.Append("y")
	// row 1: [], {}, {tags:[]}
	xs.Append(true)
	m.Append(true)
	s.Append(true)
	tags.Append(true)
	// row 2: null, null, {tags:null}
	xs.AppendNull()
	m.AppendNull()
	s.Append(true)
	tags.AppendNull()
	// row 3: [4], {c:7}, null
	xs.Append(true)
	xv.Append(4)
	m.Append(true)
	mk.Append("c")
	mv.Append(7)
	s.AppendNull()
	rec := b.NewRecordBatch()
	defer rec.Release()
	st := storage.NewLocal(t.TempDir())
	add, err := Write(ctx, st, l, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Read(ctx, st, l, add)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Release()
	for c := 0; c < int(rec.NumCols()); c++ {
		if got, want := back.Column(c).String(), rec.Column(c).String(); got != want {
			t.Errorf("%s: got %s, want %s", rec.ColumnName(c), got, want)
		}
	}
	if want := `"nullCount":{"xs":1,"m":1,"s":{"tags":2}}`; !strings.Contains(add.Stats, want) {
		t.Errorf("stats %s lack %s", add.Stats, want)
	}
}

// TestWriteRowGroupsAndEmpty writes a record split over several row groups
// and an empty record; both read back as written.
func TestWriteRowGroupsAndEmpty(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := allTypes(t, MappingNone)
	for _, rows := range []int{0, 10} {
		rec := sampleRecord(t, l, rows)
		add, err := Write(ctx, st, l, rec, map[string]*string{"part": nil}, RowGroupRows(3), Compression(Snappy))
		if err != nil {
			t.Fatalf("%d rows: %v", rows, err)
		}
		got, err := Read(ctx, st, l, add)
		if err != nil {
			t.Fatalf("%d rows: %v", rows, err)
		}
		if got.NumRows() != int64(rows) {
			t.Fatalf("read %d rows, wrote %d", got.NumRows(), rows)
		}
		for c := 0; c < int(rec.NumCols()); c++ {
			if !array.Equal(got.Column(c), rec.Column(c)) {
				t.Errorf("%d rows: column %s differs", rows, rec.ColumnName(c))
			}
		}
		if rows == 0 && add.Stats != `{"numRecords":0,"nullCount":{"b":0,"i8":0,"i16":0,"i32":0,"i64":0,"f32":0,"f64":0,"d5":0,"d15":0,"d25":0,"s":0,"bin":0,"date":0,"ts":0,"ntz":0,"st":{"x":0,"y":0}}}` {
			t.Errorf("empty file stats %s", add.Stats)
		}
		got.Release()
		rec.Release()
	}
}

func TestWriteRefusesNestedNulls(t *testing.T) {
	ctx := context.Background()
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "s", Type: delta.StructType{Fields: []delta.StructField{{Name: "k", Type: delta.Long, Nullable: false}}}, Nullable: true},
	}}}
	sc, _ := ArrowSchema(l.Schema)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	sb := b.Field(0).(*array.StructBuilder)
	sb.AppendNull() // a null struct may hide the non-nullable field
	sb.Append(true)
	sb.FieldBuilder(0).(*array.Int64Builder).Append(1)
	ok := b.NewRecordBatch()
	if _, err := Write(ctx, storage.NewLocal(t.TempDir()), l, ok, nil); err != nil {
		t.Fatalf("null struct refused: %v", err)
	}
	sb.Append(true)
	sb.FieldBuilder(0).AppendNull()
	bad := b.NewRecordBatch()
	if _, err := Write(ctx, storage.NewLocal(t.TempDir()), l, bad, nil); err == nil || !strings.Contains(err.Error(), "s.k is not nullable") {
		t.Fatalf("null in a non-nullable nested field: err %v", err)
	}
}

// TestReadColumns reads subsets of columns, with a deletion vector: each
// equals the same columns of a full read.
func TestReadColumns(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := allTypes(t, MappingID)
	rec := sampleRecord(t, l, 9)
	defer rec.Release()
	pv := "p"
	add, err := Write(ctx, st, l, rec, map[string]*string{"part": &pv})
	if err != nil {
		t.Fatal(err)
	}
	add.DeletionVector, _ = dv.Inline(roaring64.BitmapOf(2, 5))
	full, err := Read(ctx, st, l, add)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Release()
	for _, cols := range [][]string{{"i64"}, {"st", "i64", "part"}, {"part"}, {"d25", "ntz"}} {
		got, err := Read(ctx, st, l, add, Columns(cols...))
		if err != nil {
			t.Fatalf("%v: %v", cols, err)
		}
		if got.NumRows() != full.NumRows() || int(got.NumCols()) != len(cols) {
			t.Fatalf("%v: %dx%d, want %dx%d", cols, got.NumRows(), got.NumCols(), full.NumRows(), len(cols))
		}
		for c := 0; c < int(got.NumCols()); c++ {
			name := got.ColumnName(c)
			idx := full.Schema().FieldIndices(name)
			if len(idx) != 1 || !array.Equal(got.Column(c), full.Column(idx[0])) {
				t.Errorf("%v: column %s differs from the full read", cols, name)
			}
		}
		got.Release()
	}
	if _, err := Read(ctx, st, l, add, Columns("nope")); err == nil {
		t.Error("unknown column accepted")
	}
}

// TestReadIgnoresStoredArrowSchema reads a file pyarrow wrote with large
// strings, a dictionary, a large list, large binary and a string view in
// its stored Arrow schema: the reader maps the Parquet types instead.
// The file was made with pyarrow 26:
//
//	pq.write_table(pa.table({"s": pa.array(["a", "b", None], pa.large_string()),
//	    "d": pa.array(["x", "y", "x"]).dictionary_encode(),
//	    "l": pa.array([[1], [2, 3], None], pa.large_list(pa.int32())),
//	    "b": pa.array([b"1", b"2", b"3"], pa.large_binary()),
//	    "v": pa.array(["p", "q", "r"], pa.string_view())}), path)
func TestReadIgnoresStoredArrowSchema(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "pyarrow-large-types.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ReadParquet(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	want := []string{"utf8", "utf8", "list<element: int32, nullable>", "binary", "utf8"}
	for i, w := range want {
		if got := rec.Column(i).DataType().String(); got != w {
			t.Errorf("column %s: %s, want %s", rec.ColumnName(i), got, w)
		}
	}
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "s", Type: delta.String, Nullable: true}, {Name: "d", Type: delta.String, Nullable: true},
		{Name: "l", Type: delta.ArrayType{ElementType: delta.Integer, ContainsNull: true}, Nullable: true},
		{Name: "b", Type: delta.Binary, Nullable: true}, {Name: "v", Type: delta.String, Nullable: true},
	}}}
	got, err := l.Conform(rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if s := got.Column(1).String(); s != `["x" "y" "x"]` {
		t.Errorf("dictionary column read as %s", s)
	}
}

// TestWriteReadLargeValues: a text column of 1 MiB values (a large
// TOASTed document) is written at about its size and reads back, through
// parquet-go's writer (the default options, a nested column) and the flat
// one (merge-on-read's options). parquet-go put each page's full minimum
// and maximum in its page header, twice: 4 MiB headers, files four times
// their data, which arrow-go's reader refused.
func TestWriteReadLargeValues(t *testing.T) {
	ctx := context.Background()
	const n, width = 24, 1 << 20
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long},
		{Name: "doc", Type: delta.String, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, err := ArrowSchema(l.Schema)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		// Distinct values, each one page: every page has its own bounds.
		b.Field(1).(*array.StringBuilder).Append(strings.Repeat(string(rune('a'+i)), width))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	for _, c := range []struct {
		name string
		opts []WriteOption
	}{
		{"parquet-go zstd", nil},
		{"parquet-go lz4raw", []WriteOption{Compression(Lz4Raw)}},
		{"flat lz4raw", []WriteOption{Compression(Lz4Raw), PlainValues(), PageBytes(32 << 10)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := storage.NewLocal(t.TempDir())
			add, err := Write(ctx, st, l, rec, nil, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			// The values compress to almost nothing: the file is headers
			// and footer (the chunk statistics keep the full bounds).
			if add.Size > 4*width {
				t.Errorf("a file of %d values of %d bytes is %d bytes", n, width, add.Size)
			}
			got, err := Read(ctx, st, l, add)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			if !array.Equal(got.Column(1), rec.Column(1)) {
				t.Error("the doc column read back differs")
			}
		})
	}
}
