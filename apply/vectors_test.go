package apply

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// vectorReads counts the reads of deletion vector files.
type vectorReads struct {
	storage.Storage
	n atomic.Int64
}

func (v *vectorReads) count(p string) {
	if strings.Contains(p, "deletion_vector_") {
		v.n.Add(1)
	}
}

func (v *vectorReads) Read(ctx context.Context, p string) ([]byte, error) {
	v.count(p)
	return v.Storage.Read(ctx, p)
}

func (v *vectorReads) Open(ctx context.Context, p string) (storage.File, error) {
	v.count(p)
	return v.Storage.(storage.RangeReader).Open(ctx, p)
}

func vectorRows(t *testing.T, st storage.Storage, a *delta.Add) []uint64 {
	t.Helper()
	bm, err := dv.Load(context.Background(), st, a.DeletionVector)
	if err != nil {
		t.Fatal(err)
	}
	return bm.ToArray()
}

// TestVectorCache: a deletion vector DeleteRows writes is kept decoded,
// so the next stored-row read and vector update of its file read no
// vector from storage; an update whose commit failed leaves the vector
// it started from as it was (a retry from the same file builds on it, not
// on the failed update); a reader without the cache reads the file.
func TestVectorCache(t *testing.T) {
	ctx := context.Background()
	defer func(n int) { inlineDVLimit = n }(inlineDVLimit)
	inlineDVLimit = 0 // every vector in a file
	st := &vectorReads{Storage: storage.NewLocal(t.TempDir())}
	rf, err := NewParquetRowFiles(st, allFlatTypes(t))
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]Row, 100)
	for i := range rows {
		rows[i] = allFlatRow(i)
	}
	add0, err := rf.WriteRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	del := func(a *delta.Add, hide ...int64) *delta.Add {
		t.Helper()
		out, err := rf.DeleteRows(ctx, []Deletion{{File: a, Rows: hide}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	reads := func(want int64) {
		t.Helper()
		if got := st.n.Load(); got != want {
			t.Fatalf("%d deletion vector reads, want %d", got, want)
		}
	}
	add1 := del(add0, 1, 2, 3)
	reads(0)
	if _, err := rf.ReadRowsAt(ctx, add1, []int64{5, 6}, nil); err != nil {
		t.Fatal(err)
	}
	reads(0)
	if _, err := rf.ReadRowsAt(ctx, add1, []int64{2}, nil); err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("reading a hidden row through the kept vector: %v", err)
	}
	add2 := del(add1, 7)
	reads(0)
	// add2's commit failed: the batch is retried from add1.
	add2b := del(add1, 9)
	reads(1)
	if got, want := vectorRows(t, st, add2), []uint64{1, 2, 3, 7}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first update hides %v, want %v", got, want)
	}
	if got, want := vectorRows(t, st, add2b), []uint64{1, 2, 3, 9}; !reflect.DeepEqual(got, want) {
		t.Fatalf("retried update hides %v, want %v", got, want)
	}
	n := st.n.Load()
	live, err := rf.ReadRows(ctx, add2b)
	if err != nil {
		t.Fatal(err)
	}
	reads(n)
	if len(live) != 96 {
		t.Fatalf("%d live rows, want 96", len(live))
	}
	fresh, err := NewParquetRowFiles(st, allFlatTypes(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.ReadRowsAt(ctx, add2b, []int64{5}, nil); err != nil {
		t.Fatal(err)
	}
	reads(n + 1)
}

// TestVectorCacheBounds: the cache keeps at most vectorsKept vectors, the
// most recently used: a put evicts the least recently read or put, and
// take and put cycles keep the count at the bound.
func TestVectorCacheBounds(t *testing.T) {
	c := newVectorCache()
	desc := func(i int) *delta.DeletionVector {
		return &delta.DeletionVector{StorageType: "u", PathOrInlineDv: string(rune('a'+i%26)) + strings.Repeat("x", i/26), SizeInBytes: 1}
	}
	put := func(i int) {
		bm := roaring64.New()
		bm.Add(uint64(i))
		c.put(desc(i), bm)
	}
	kept := func(i int) bool {
		k, ok := c.byID[desc(i).UniqueID()]
		return ok && k.bm.Contains(uint64(i))
	}
	for i := range vectorsKept + 100 {
		put(i)
	}
	if c.len() != vectorsKept {
		t.Fatalf("%d vectors kept, want %d", c.len(), vectorsKept)
	}
	if kept(0) || kept(99) {
		t.Fatal("the oldest vectors are still kept")
	}
	if !kept(100) || !kept(vectorsKept+99) {
		t.Fatal("the newest vectors are not all kept")
	}
	ctx := context.Background()
	if _, err := c.get(ctx, nil, desc(100)); err != nil { // now the most recently used
		t.Fatal(err)
	}
	put(vectorsKept + 100)
	if !kept(100) || kept(101) || !kept(vectorsKept+100) {
		t.Fatalf("after a read of 100 and one more put: 100 kept %v, 101 kept %v, newest kept %v; want true, false, true", kept(100), kept(101), kept(vectorsKept+100))
	}
	for i := range 10 * vectorsKept {
		d := desc(102 + i%(vectorsKept-1)) // every kept vector but 100
		bm, err := c.take(ctx, nil, d)
		if err != nil {
			t.Fatal(err)
		}
		c.put(d, bm)
	}
	if c.len() != vectorsKept {
		t.Fatalf("after take and put: %d kept, want %d", c.len(), vectorsKept)
	}
}

// TestWideStats: a file given a deletion vector has its stats marked
// wide (tightBounds false), whatever writer made them, with every other
// member kept, as a reader decoding the object sees them (a member given
// twice, a key spelled with escapes included); stats that already say so
// come back as they are, and stats that are not a JSON object unchanged.
func TestWideStats(t *testing.T) {
	// reference is the edit as a JSON round trip makes it.
	reference := func(stats string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(stats), &m); err != nil {
			t.Fatalf("reference: %q: %v", stats, err)
		}
		m["tightBounds"] = false
		return m
	}
	for _, stats := range []string{
		`{"numRecords":3,"minValues":{"a":1,"s":"x"},"maxValues":{"a":3,"s":"z"},"nullCount":{"a":0,"s":1}}`,
		`{"numRecords":3,"tightBounds":true,"minValues":{"a":1}}`,
		`{"numRecords":3,"minValues":{"a":1},"tightBounds":true}`,
		`{"minValues":{"tightBounds":"kept"},"maxValues":{"tightBounds":"kept"},"numRecords":1}`,
		`{ "numRecords" : 1 , "tightBounds" : true , "nullCount" : { "a" : 0 } }`,
		"{\n\t\"numRecords\": 1,\n\t\"minValues\": {\"s\": \"a\\\"}{,[\"}\n}",
		`{"minValues":{"s":"\\"},"tightBounds":true}`,
		`{"a":[1,{"b":[2,"]}"]}],"tightBounds":true,"c":null}`,
		`{"numRecords":-1.5e3,"x":false}`,
		`{}`,
		` { } `,
		`{"tightBounds":true,"numRecords":1,"tightBounds":true}`,
		`{"tightBounds":false,"numRecords":1,"tightBounds":true}`,
		`{"tight\u0042ounds":true,"numRecords":1}`,
		`{"numRecords":1,"min\u0056alues":{"a":1}}`,
	} {
		got := wideStats(stats)
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatalf("wideStats(%q) = %q: not JSON: %v", stats, got, err)
		}
		if want := reference(stats); !reflect.DeepEqual(m, want) {
			t.Errorf("wideStats(%q) = %q, want the members %v", stats, got, want)
		}
		if n := topLevelKeyCount(t, got, "tightBounds"); n != 1 || !strings.Contains(got, `"tightBounds"`) {
			t.Errorf("wideStats(%q) = %q: tightBounds %d times at the top level, want once, unescaped", stats, got, n)
		}
		if again := wideStats(got); again != got {
			t.Errorf("wideStats of wide stats %q changed them: %q", got, again)
		}
	}
	for _, stats := range []string{
		`{"numRecords":3,"tightBounds":false}`,
		`{"tightBounds" : false, "numRecords":3}`,
	} {
		if got := wideStats(stats); got != stats {
			t.Errorf("wideStats(%q) = %q, want them unchanged", stats, got)
		}
	}
	for _, bad := range []string{"", "[1]", `{"a":`, `{"a":1`, `{"a" 1}`, `{"a":1}}`, `{"a":"x}`, "garbage", `{"a":1,}`, `{,}`} {
		if got := wideStats(bad); got != bad {
			t.Errorf("wideStats(%q) = %q, want it unchanged", bad, got)
		}
	}
}

// topLevelKeyCount counts the members of the JSON object doc named key
// (escapes decoded), as encoding/json's tokenizer reads them.
func topLevelKeyCount(t *testing.T, doc, key string) int {
	dec := json.NewDecoder(strings.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: not an object: %v %v", doc, tok, err)
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if tok == key {
			n++
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
	}
	return n
}

// BenchmarkWideStats: marking a file's stats wide when a batch gives it a
// new deletion vector (about 100 files per 10k-change batch on a 10M-row
// table), for stats of the bench's 10-column layout without the member
// (a file's first vector) and with it (every later one).
func BenchmarkWideStats(b *testing.B) {
	cols := `"id":1,"status":"pending","customer":"c-000001","amount":"12.50","qty":1,"note":"abcdefghijklmnopqrstuvwx","doc":"{\"k\":1}","updated_at":"2026-01-01T00:00:00.000000Z","region":"eu","score":0.5`
	first := `{"numRecords":100000,"minValues":{` + cols + `},"maxValues":{` + cols + `},"nullCount":{"id":0,"status":0,"customer":0,"amount":12,"qty":0,"note":40,"doc":0,"updated_at":0,"region":0,"score":3}}`
	later := wideStats(first)
	for _, c := range []struct{ name, stats string }{{"first", first}, {"later", later}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if s := wideStats(c.stats); !strings.Contains(s, `"tightBounds":false`) {
					b.Fatalf("not wide: %s", s)
				}
			}
		})
	}
}
