package datafile

import (
	"context"
	"io"
	"sort"
	"sync"

	pq "github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// FileCache keeps data files open for point reads (ReadColumnsAt), with
// their Parquet footers and the offset indexes read so far parsed: a
// merge-on-read table's batches read a few rows of the same files batch
// after batch, and opening a file and parsing its footer and a chunk's
// offset index cost more than reading a value (BenchmarkReadValuesAt:
// about 3.5 ms of the 3.7 ms a 100k-row file's 50 sparse rows took).
// Data files never change once written, so a cached file stays valid. Only
// storages that read in parts (storage.RangeReader) are cached; another
// storage's Open reads the whole file, which is not kept. At most max
// files stay open, the least recently used closed first. Safe for
// concurrent use; one file is read by one goroutine at a time.
type FileCache struct {
	mu    sync.Mutex
	max   int
	tick  uint64
	files map[string]*cachedFile
}

type cachedFile struct {
	f       storage.File
	pf      *pq.File
	used    uint64
	refs    int
	evicted bool // closed when the last reader releases it
	// cols is pointColumns of the layout colsOf identifies, and colsErr
	// its error: mapping a layout onto the file's schema was a tenth of
	// a 10M-row table's stored-row reads, which read a row or two of
	// each file every batch.
	colsOf  layoutID
	cols    []pointColumn
	colsErr error
}

// layoutID identifies a Layout value by its fields' backing array: a
// layout is built once per table schema and its fields are never
// changed in place, so the same array holds the same fields.
type layoutID struct {
	fields  *delta.StructField
	n       int
	mapping ColumnMapping
}

// NewFileCache keeps up to max files open.
func NewFileCache(max int) *FileCache {
	return &FileCache{max: max, files: map[string]*cachedFile{}}
}

// open returns path's file, opened now or cached, the cache's entry for
// it (nil: not cached) and a release to call when done with it.
func (c *FileCache) open(ctx context.Context, st storage.Storage, path string) (*pq.File, io.ReaderAt, *cachedFile, func(), error) {
	if _, ok := st.(storage.RangeReader); c == nil || !ok {
		pf, f, err := openPoints(ctx, st, path)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		return pf, f, nil, func() { f.Close() }, nil
	}
	c.mu.Lock()
	c.tick++
	if cf, ok := c.files[path]; ok {
		cf.used, cf.refs = c.tick, cf.refs+1
		c.mu.Unlock()
		return cf.pf, cf.f, cf, func() { c.release(cf) }, nil
	}
	c.mu.Unlock()
	pf, f, err := openPoints(ctx, st, path)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cf := &cachedFile{f: f, pf: pf, refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.files[path]; ok { // opened meanwhile by another reader
		f.Close()
		old.used, old.refs = c.tick, old.refs+1
		return old.pf, old.f, old, func() { c.release(old) }, nil
	}
	cf.used = c.tick
	c.files[path] = cf
	for len(c.files) > c.max {
		var lru string
		for p, x := range c.files {
			if lru == "" || x.used < c.files[lru].used {
				lru = p
			}
		}
		x := c.files[lru]
		delete(c.files, lru)
		c.closeOrMark(x)
	}
	return pf, f, cf, func() { c.release(cf) }, nil
}

// pointColumns is l.pointColumns(pf) for the cached file cf (nil: not
// cached, computed each time), computed once per layout.
func (c *FileCache) pointColumns(cf *cachedFile, l Layout, pf *pq.File) ([]pointColumn, error) {
	if cf == nil || len(l.Schema.Fields) == 0 {
		return l.pointColumns(pf)
	}
	id := layoutID{&l.Schema.Fields[0], len(l.Schema.Fields), l.Mapping}
	c.mu.Lock()
	if cf.colsOf == id {
		cols, err := cf.cols, cf.colsErr
		c.mu.Unlock()
		return cols, err
	}
	c.mu.Unlock()
	cols, err := l.pointColumns(pf) // read only once made: shared by readers
	c.mu.Lock()
	cf.colsOf, cf.cols, cf.colsErr = id, cols, err
	c.mu.Unlock()
	return cols, err
}

func (c *FileCache) release(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.refs == 0 && cf.evicted {
		cf.f.Close()
		return
	}
	if d, ok := cf.f.(storage.ResidentDropper); ok && cf.refs == 0 {
		// A mapped file's pages would otherwise count in the process's
		// RSS for as long as it stays cached: the whole table, over time.
		// Under the lock: once released, another reader's open may evict
		// and unmap the file, and advice on an address range the runtime
		// has mapped again would drop someone else's pages.
		d.DropResident()
	}
}

// Close closes every cached file not being read; the cache stays usable.
// A nil cache does nothing.
func (c *FileCache) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, x := range c.files {
		delete(c.files, p)
		c.closeOrMark(x)
	}
}

// Forget closes the cached files whose paths are given (a file being read
// is closed when its reader is done): files that left the table. A file
// kept open after a vacuum deleted it keeps its disk space (and, mapped,
// its address range) until it is closed, so the cache must not wait for
// newer files to evict it. A nil cache does nothing.
func (c *FileCache) Forget(paths ...string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range paths {
		if x, ok := c.files[p]; ok {
			delete(c.files, p)
			c.closeOrMark(x)
		}
	}
}

// Retain closes the cached files for which keep is false (Forget for a
// table reopened at a version whose files are known only as a whole).
func (c *FileCache) Retain(keep func(path string) bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, x := range c.files {
		if !keep(p) {
			delete(c.files, p)
			c.closeOrMark(x)
		}
	}
}

// closeOrMark closes a file that left the cache, or marks it to be closed
// by its last reader. The caller holds mu.
func (c *FileCache) closeOrMark(x *cachedFile) {
	if x.refs == 0 {
		x.f.Close()
	} else {
		x.evicted = true
	}
}

// Paths returns the paths of the files open in the cache, sorted.
func (c *FileCache) Paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.files))
	for p := range c.files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Len is the number of files open in the cache.
func (c *FileCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files)
}

func openPoints(ctx context.Context, st storage.Storage, path string) (*pq.File, storage.File, error) {
	f, err := storage.Open(ctx, st, path)
	if err != nil {
		return nil, nil, err
	}
	// The page index is read per column chunk used (and kept by the
	// chunk), not for the whole file at open.
	pf, err := pq.OpenFile(f, f.Size(), pq.SkipPageIndex(true), pq.SkipBloomFilters(true))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return pf, f, nil
}

// ReadColumnsAt is the package's ReadColumnsAt through the cache.
func (c *FileCache) ReadColumnsAt(ctx context.Context, st storage.Storage, l Layout, add *delta.Add, rows [][]int64) ([][]schema.Value, error) {
	return readColumnsAt(ctx, st, l, add, rows, c)
}
