package datafile

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// countingFiles is local storage that counts the files it opens for
// reading in parts and the closes of those files.
type countingFiles struct {
	*storage.Local
	opens, closes, drops atomic.Int64
}

type countedFile struct {
	storage.File
	c *countingFiles
}

func (f countedFile) Close() error {
	f.c.closes.Add(1)
	return f.File.Close()
}

func (f countedFile) DropResident() {
	f.c.drops.Add(1)
	f.File.(storage.ResidentDropper).DropResident()
}

func (c *countingFiles) Open(ctx context.Context, p string) (storage.File, error) {
	f, err := c.Local.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	c.opens.Add(1)
	return countedFile{f, c}, nil
}

// onlyWhole is storage without RangeReader: Open reads whole files.
type onlyWhole struct{ storage.Storage }

// TestFileCache: reads through the cache give what uncached reads give;
// a file is opened once for many reads (its pages let go of after each),
// the least recently used is closed
// past the bound, Close closes the rest, and storage that cannot read in
// parts is never cached.
func TestFileCache(t *testing.T) {
	ctx := context.Background()
	st := &countingFiles{Local: storage.NewLocal(t.TempDir())}
	l := flatLayout()
	var adds []*delta.Add
	for range 3 {
		add, err := Write(ctx, st, l, flatRecord(t, l, 5000), nil, PlainValues(), Compression(Snappy), PageBytes(2048), RowGroupRows(2000))
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	rows := sampleRows(5000, 4)
	perColumn := make([][]int64, len(l.Schema.Fields))
	for c := range perColumn {
		perColumn[c] = rows
	}
	c := NewFileCache(2)
	for round := range 3 {
		for _, add := range adds[:2] {
			want, err := ReadColumnsAt(ctx, st, l, add, perColumn)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.ReadColumnsAt(ctx, st, l, add, perColumn)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, %s: cached read differs", round, add.Path)
			}
		}
	}
	// 6 uncached reads and 2 cached files: 8 opens, the 6 uncached closed.
	// Each cached read let its file's pages go once done with them.
	if o, cl, d := st.opens.Load(), st.closes.Load(), st.drops.Load(); o != 8 || cl != 6 || c.Len() != 2 || d != 6 {
		t.Fatalf("%d opens, %d closes, %d cached, %d resident sets dropped; want 8, 6, 2, 6", o, cl, c.Len(), d)
	}
	if _, err := c.ReadColumnsAt(ctx, st, l, adds[2], perColumn); err != nil {
		t.Fatal(err)
	}
	if o, cl := st.opens.Load(), st.closes.Load(); o != 9 || cl != 7 || c.Len() != 2 {
		t.Fatalf("a third file past a bound of 2: %d opens, %d closes, %d cached; want 9, 7, 2", o, cl, c.Len())
	}
	var wg sync.WaitGroup
	for _, add := range adds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ReadColumnsAt(ctx, st, l, add, perColumn); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c.Close()
	if o, cl := st.opens.Load(), st.closes.Load(); o != cl || c.Len() != 0 {
		t.Fatalf("after Close: %d opens, %d closes, %d cached", o, cl, c.Len())
	}
	whole := NewFileCache(2)
	if _, err := whole.ReadColumnsAt(ctx, onlyWhole{st.Local}, l, adds[0], perColumn); err != nil {
		t.Fatal(err)
	}
	if whole.Len() != 0 {
		t.Fatal("a file read whole was cached")
	}
}

// TestFileCacheForget: Forget and Retain close the files they drop at
// once, or, for a file being read, when its reader is done; the other
// files stay open and cached.
func TestFileCacheForget(t *testing.T) {
	ctx := context.Background()
	st := &countingFiles{Local: storage.NewLocal(t.TempDir())}
	l := flatLayout()
	var adds []*delta.Add
	for range 4 {
		add, err := Write(ctx, st, l, flatRecord(t, l, 100), nil, PlainValues())
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	c := NewFileCache(8)
	perColumn := make([][]int64, len(l.Schema.Fields))
	for i := range perColumn {
		perColumn[i] = []int64{1, 50}
	}
	for _, add := range adds {
		if _, err := c.ReadColumnsAt(ctx, st, l, add, perColumn); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 4 || st.closes.Load() != 0 {
		t.Fatalf("%d cached, %d closed; want 4, 0", c.Len(), st.closes.Load())
	}
	// A reader holds adds[1] while it is forgotten.
	_, _, _, release, err := c.open(ctx, st, adds[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	c.Forget(adds[0].Path, adds[1].Path, "not-cached.parquet")
	if got := c.Paths(); !reflect.DeepEqual(got, sortedPaths(adds[2], adds[3])) || st.closes.Load() != 1 {
		t.Fatalf("after Forget: cached %v, %d closed; want %v, 1 (the file being read stays open)", got, st.closes.Load(), sortedPaths(adds[2], adds[3]))
	}
	release()
	if st.closes.Load() != 2 {
		t.Fatalf("the forgotten file's reader is done: %d closed, want 2", st.closes.Load())
	}
	c.Retain(func(p string) bool { return p == adds[3].Path })
	if got := c.Paths(); !reflect.DeepEqual(got, []string{adds[3].Path}) || st.closes.Load() != 3 {
		t.Fatalf("after Retain: cached %v, %d closed; want [%s], 3", got, st.closes.Load(), adds[3].Path)
	}
	var none *FileCache
	none.Forget(adds[3].Path)
	none.Retain(func(string) bool { return false })
}

func sortedPaths(adds ...*delta.Add) []string {
	var out []string
	for _, a := range adds {
		out = append(out, a.Path)
	}
	sort.Strings(out)
	return out
}

// TestFileCacheColumnsPerLayout: a cached file maps a layout onto its
// schema once, and a new layout (a column added, as a schema change
// makes) is mapped anew: its new column reads NULL, the old layout's
// reads are as before.
func TestFileCacheColumnsPerLayout(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	l := flatLayout()
	add, err := Write(ctx, st, l, flatRecord(t, l, 3000), nil, PlainValues(), Compression(Snappy), PageBytes(2048), RowGroupRows(2000))
	if err != nil {
		t.Fatal(err)
	}
	cache := NewFileCache(4)
	defer cache.Close()
	rows := []int64{1, 2500}
	want, err := ReadValuesAt(ctx, st, l, add, rows)
	if err != nil {
		t.Fatal(err)
	}
	read := func(l Layout) [][]schema.Value {
		t.Helper()
		perColumn := make([][]int64, len(l.Schema.Fields))
		for c := range perColumn {
			perColumn[c] = rows
		}
		got, err := cache.ReadColumnsAt(ctx, st, l, add, perColumn)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	entry := func() *cachedFile {
		t.Helper()
		cache.mu.Lock()
		defer cache.mu.Unlock()
		if len(cache.files) != 1 {
			t.Fatalf("%d files cached, want 1", len(cache.files))
		}
		for _, cf := range cache.files {
			return cf
		}
		return nil
	}
	if got := read(l); !reflect.DeepEqual(got, want) {
		t.Fatalf("cached read %v, uncached %v", got, want)
	}
	first := &entry().cols[0]
	if got := read(l); !reflect.DeepEqual(got, want) || &entry().cols[0] != first {
		t.Fatalf("second read: %v (columns mapped again: %v)", got, &entry().cols[0] != first)
	}
	wider := Layout{Schema: delta.StructType{Fields: append(append([]delta.StructField{}, l.Schema.Fields...),
		delta.StructField{Name: "added", Type: delta.Long, Nullable: true})}, NumIndexedCols: l.NumIndexedCols}
	got := read(wider)
	if len(got) != len(want)+1 || !reflect.DeepEqual(got[:len(want)], want) || got[len(want)][0] != schema.Null || got[len(want)][1] != schema.Null {
		t.Fatalf("read with a column added: %v", got)
	}
	if got := read(l); !reflect.DeepEqual(got, want) {
		t.Fatalf("read with the first layout again: %v", got)
	}
}
