package apply

import (
	"encoding/binary"
	"iter"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/debezium"
)

// batchPool recycles the buffers compressed record batches are
// decompressed into (fetchDecompressor, every codec). In the 1M-key
// bench they were more than half of every byte the engine allocated (8 GB
// for 2.1M records): each cleared by the runtime before use, each
// driving the collector.
//
// A buffer is reused only once every record in it was released: the
// records' keys, values and headers point into it, and so does a change's
// Raw until its batch is committed (decoded values are copies). When a
// buffer is filled, its records are counted (the v2 record layout, as
// franz-go reads it); the engine releases a record where it is done with
// it: a skipped record, and a change's record not kept as Raw, when
// routed (see keepRaw: almost always, so a buffer goes back to the pool
// while its poll is routed); a change's kept record once its batch is
// committed; a rejected record once the quarantine has copied it. A
// record never released (a truncate, a batch dropped by a resync or a
// revocation, records the client filtered) keeps its buffer out of the
// pool: the collector frees it as before. So a missed release costs only
// memory reuse, and the one thing that must never happen is releasing a
// record twice or too early.
type batchPool struct {
	mu   sync.Mutex
	live []*pooledBatch // sorted by start address
	free [][]byte       // released buffers, full capacity
	// freeBytes is the capacity held in free, at most maxFree; liveBytes
	// the capacity registered in live, at most maxLive.
	freeBytes, maxFree int
	liveBytes, maxLive int
	seq                uint64

	// Counters for tests and the bench: buffers registered, buffers
	// handed out again, and registered buffers forgotten (records never
	// released, or more out than the bound).
	registered, reused, forgotten int64
}

// pooledBatch is one decompressed batch whose records are not all
// released.
type pooledBatch struct {
	start, end uintptr // the buffer's address range
	buf        []byte  // keeps the buffer alive while registered
	refs       int     // records not yet released
	seq        uint64  // registration order
}

// newBatchPool returns a pool that keeps up to maxFree bytes of released
// buffers and tracks up to maxLive bytes of buffers with records out.
func newBatchPool(maxFree, maxLive int) *batchPool {
	return &batchPool{maxFree: maxFree, maxLive: maxLive}
}

// get returns an empty buffer of at least n bytes of capacity: a released
// one when one fits without wasting more than half of it, else a new one.
func (p *batchPool) get(n int) []byte {
	p.mu.Lock()
	for i, b := range p.free {
		if cap(b) >= n && cap(b) <= 2*n {
			p.free[i] = p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			p.freeBytes -= cap(b)
			p.reused++
			p.mu.Unlock()
			return b[:0]
		}
	}
	p.mu.Unlock()
	return make([]byte, 0, n)
}

// maxFreeBuffers bounds the free list's length as maxFree bounds its
// bytes: a stream of small batches (a few records each, at a steady rate)
// would otherwise fill maxFree with thousands of buffers of sizes no later
// batch asks for, which get scans and the heap keeps (a 20k events/s run
// held 80-120 MiB so).
const maxFreeBuffers = 256

// put takes back a buffer nothing refers to.
func (p *batchPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.putLocked(b)
}

func (p *batchPool) putLocked(b []byte) {
	if cap(b) == 0 {
		return
	}
	for (p.freeBytes+cap(b) > p.maxFree || len(p.free) >= maxFreeBuffers) && len(p.free) > 0 {
		// Keep the newest: drop the oldest free buffer to the collector.
		p.freeBytes -= cap(p.free[0])
		p.free = slices.Delete(p.free, 0, 1)
	}
	if cap(b) > p.maxFree {
		return
	}
	p.free = append(p.free, b[:0])
	p.freeBytes += cap(b)
}

// register records that out, a filled buffer, holds records to be
// released one by one. A buffer that is not a whole number of v2 records
// is not registered (it is left to the collector).
func (p *batchPool) register(out []byte) {
	n := countRecords(out)
	if n <= 0 {
		return
	}
	full := out[:cap(out)]
	start := uintptr(unsafe.Pointer(unsafe.SliceData(full)))
	b := &pooledBatch{start: start, end: start + uintptr(cap(full)), buf: full, refs: n}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.liveBytes+cap(full) > p.maxLive && len(p.live) > 0 {
		// Records that are never released must not hold buffers the
		// collector would free: past the bound, forget the oldest
		// registered buffer (its records' releases then find nothing).
		oldest := 0
		for i, l := range p.live {
			if l.seq < p.live[oldest].seq {
				oldest = i
			}
		}
		p.liveBytes -= cap(p.live[oldest].buf)
		p.live = slices.Delete(p.live, oldest, oldest+1)
		p.forgotten++
	}
	p.liveBytes += cap(full)
	p.seq++
	b.seq = p.seq
	p.registered++
	i, _ := slices.BinarySearchFunc(p.live, start, func(l *pooledBatch, s uintptr) int {
		switch {
		case l.start < s:
			return -1
		case l.start > s:
			return 1
		}
		return 0
	})
	p.live = slices.Insert(p.live, i, b)
}

// releaseRecord releases a record the engine is done with (nil pool: a
// no-op). Nearly every routed record comes here, so it releases the one
// record directly, without release's iterator and its closures (two
// allocations a record).
func (p *batchPool) releaseRecord(r *kgo.Record) {
	if p == nil {
		return
	}
	b := recordBytes(r.Key, r.Value, len(r.Headers), func(i int) []byte { return r.Headers[i].Value })
	if len(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(b, nil)
}

// releaseChanges releases the records of a committed batch's changes.
func (p *batchPool) releaseChanges(changes []*Change) {
	if p == nil || len(changes) == 0 {
		return
	}
	p.release(func(yield func([]byte) bool) {
		for _, c := range changes {
			if c.Raw() != nil && !yield(sourceBytes(c.Raw())) {
				return
			}
		}
	})
}

// releaseRejected releases the records of a batch's rejections once the
// quarantine has copied them.
func (p *batchPool) releaseRejected(rejected []Rejected) {
	if p == nil || len(rejected) == 0 {
		return
	}
	p.release(func(yield func([]byte) bool) {
		for i := range rejected {
			if !yield(sourceBytes(&rejected[i].Record)) {
				return
			}
		}
	})
}

// sourceBytes is recordBytes of a record as the decoder took it.
func sourceBytes(r *debezium.Record) []byte {
	return recordBytes(r.Key, r.Value, len(r.Headers), func(i int) []byte { return r.Headers[i].Value })
}

// recordBytes returns one non-empty slice of a record's bytes: its value,
// else its key, else a header value; nil when it has none (such a record
// cannot be released, and keeps its buffer out of the pool).
func recordBytes(key, value []byte, headers int, header func(int) []byte) []byte {
	switch {
	case len(value) > 0:
		return value
	case len(key) > 0:
		return key
	}
	for i := range headers {
		if h := header(i); len(h) > 0 {
			return h
		}
	}
	return nil
}

// release records that each record in recs (its key, value or a header
// value, any one pointing into a registered buffer) is no longer
// referenced; a buffer whose records are all released goes back to the
// pool. Each record must be released at most once.
func (p *batchPool) release(recs iter.Seq[[]byte]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last *pooledBatch
	for r := range recs {
		if len(r) > 0 {
			last = p.releaseLocked(r, last)
		}
	}
}

// releaseLocked releases the record whose bytes r (not empty) is, trying
// last (the buffer of the record released before it, nil: none) before
// searching, and returns the buffer to try for the next record.
func (p *batchPool) releaseLocked(r []byte, last *pooledBatch) *pooledBatch {
	at := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
	b := last
	if b == nil || at < b.start || at >= b.end {
		if b = p.find(at); b == nil {
			return last
		}
	}
	b.refs--
	if b.refs == 0 {
		p.drop(b)
		p.putLocked(b.buf)
		return nil
	}
	return b
}

// find returns the registered buffer holding address at, or nil.
func (p *batchPool) find(at uintptr) *pooledBatch {
	i, found := slices.BinarySearchFunc(p.live, at, func(l *pooledBatch, a uintptr) int {
		switch {
		case l.end <= a:
			return -1
		case l.start > a:
			return 1
		}
		return 0
	})
	if !found {
		return nil
	}
	return p.live[i]
}

func (p *batchPool) drop(b *pooledBatch) {
	if i := slices.Index(p.live, b); i >= 0 {
		p.live = slices.Delete(p.live, i, i+1)
		p.liveBytes -= cap(b.buf)
	}
}

// countRecords counts the v2 records of a decompressed batch the way
// franz-go reads them (a zigzag varint length, then that many bytes); 0
// when the bytes are not exactly a sequence of non-empty records, so that
// the count is never below what the client will hand out.
func countRecords(b []byte) int {
	n := 0
	for len(b) > 0 {
		l, used := binary.Varint(b)
		if used <= 0 || l <= 0 || int64(len(b)-used) < l {
			return 0
		}
		b = b[used+int(l):]
		n++
	}
	return n
}

// stats returns the pool's counters.
func (p *batchPool) stats() (registered, reused, forgotten int64) {
	if p == nil {
		return 0, 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered, p.reused, p.forgotten
}

// outstanding returns how many registered buffers still have records out.
func (p *batchPool) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

// recordSlices is franz-go's PoolRecords: the []kgo.Record a fetched
// record batch is decoded into comes from here and goes back once every
// record of it was recycled (Run recycles each record when it has routed
// it; nothing keeps a *kgo.Record past that: a kept record is a
// debezium.Record copy, its bytes in batchPool's buffers or the fetch's).
// Without it each batch's slice was a fresh, zeroed allocation: 380 MB in
// the 1M-key bench (about 190 bytes a record). A slice a record of which
// is never recycled is left to the collector, as before.
//
// Slices are kept by power-of-two capacity in sync.Pools, so the
// collector trims what a quiet stream no longer uses.
type recordSlices struct {
	classes [recordSliceClasses]sync.Pool
	// got counts slices handed out, reused those that were recycled ones.
	got, reused atomic.Int64
}

// recordSliceClasses bounds the pooled capacity at 2^15 records; a larger
// batch (rare: record batches are a producer's linger of one partition)
// gets a slice of its own.
const recordSliceClasses = 16

// GetRecords implements kgo.PoolRecords.
func (p *recordSlices) GetRecords(n int) []kgo.Record {
	p.got.Add(1)
	c := bits.Len(uint(max(n, 1) - 1))
	if c >= recordSliceClasses {
		return make([]kgo.Record, 0, n)
	}
	if s, ok := p.classes[c].Get().(*[]kgo.Record); ok {
		p.reused.Add(1)
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, 1<<c)
}

// PutRecords implements kgo.PoolRecords. franz-go zeroes each record as it
// is recycled.
func (p *recordSlices) PutRecords(s []kgo.Record) {
	c := bits.Len(uint(cap(s))) - 1 // the class whose size cap(s) covers
	if c < 0 || c >= recordSliceClasses || cap(s) != 1<<c {
		return // not one of ours: the collector takes it
	}
	p.classes[c].Put(&s)
}
