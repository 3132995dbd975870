package datafile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	pq "github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// TestReadValuesAtOlderFile: a file written before the table widened a
// column and added another reads the widened values and NULL for the
// added column; a pairing without a direct conversion is declined.
func TestReadValuesAtOlderFile(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	add := writeOldFile(t, ctx, st)
	newer := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "a", Type: delta.Long, Nullable: true},
		{Name: "added", Type: delta.String, Nullable: true},
		{Name: "f", Type: delta.Double, Nullable: true},
		{Name: "d", Type: delta.Date, Nullable: true},
	}}}
	got, err := ReadValuesAt(ctx, st, newer, add, []int64{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]schema.Value{{schema.Int(1), schema.Int(-2)}, {schema.Null, schema.Null}, {schema.Float(1.5), schema.Null}, {schema.Int(0), schema.Int(1)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	newer.Schema.Fields[3].Type = delta.TimestampNTZ // date widened to timestamp_ntz: not taken
	if _, err := ReadValuesAt(ctx, st, newer, add, []int64{0}); !errors.Is(err, ErrNoPointRead) {
		t.Errorf("date file, timestamp_ntz table: %v, want ErrNoPointRead", err)
	}
}

// TestReadValuesAtWithoutOffsetIndex reads a file another writer made
// without a page index (arrow-go's default), in many small pages: the
// pages are then scanned from the chunk's start, with the same values.
func TestReadValuesAtWithoutOffsetIndex(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := Layout{Schema: delta.StructType{Fields: []delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: true},
		{Name: "s", Type: delta.String, Nullable: true},
	}}, NumIndexedCols: 32}
	sc, _ := ArrowSchema(l.Schema)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	const n = 5000
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i) * 3)
		if i%7 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("v%d", i))
		}
	}
	rec := b.NewRecordBatch()
	props := parquet.NewWriterProperties(parquet.WithDataPageSize(256), parquet.WithMaxRowGroupLength(2000), parquet.WithDictionaryDefault(false))
	data, err := arrowGoFile(rec, props)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)), pq.SkipPageIndex(true))
	if err != nil {
		t.Fatal(err)
	}
	cc := pf.RowGroups()[1].ColumnChunks()[1]
	if _, err := cc.OffsetIndex(); !errors.Is(err, pq.ErrMissingOffsetIndex) {
		t.Fatalf("the file has an offset index (%v): this test would not cover the scan", err)
	}
	if err := st.Write(ctx, "old.parquet", data); err != nil {
		t.Fatal(err)
	}
	add := &delta.Add{Path: "old.parquet", Size: int64(len(data))}
	at := []int64{0, 1, 6, 7, 1999, 2000, 2001, 3500, 4998, 4999}
	got, err := ReadValuesAt(ctx, st, l, add, at)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range at {
		wantS := schema.String(fmt.Sprintf("v%d", r))
		if r%7 == 0 {
			wantS = schema.Null
		}
		if !reflect.DeepEqual(got[0][i], schema.Int(r*3)) || !reflect.DeepEqual(got[1][i], wantS) {
			t.Errorf("row %d: got %v %v, want %v %v", r, got[0][i], got[1][i], r*3, wantS)
		}
	}
}
