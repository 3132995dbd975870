package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// v2Records encodes values as the records of a v2 batch's (decompressed)
// record data.
func v2Records(values ...string) []byte {
	var out []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(v)}
		body := r.AppendTo(nil)[1:] // AppendTo writes Length (0) first
		out = binary.AppendVarint(out, int64(len(body)))
		out = append(out, body...)
	}
	return out
}

// TestCountRecords: a batch's records are counted as franz-go reads them;
// bytes that are not exactly a run of records (cut short, a legacy
// message set, an empty record) count 0, so the pool never expects fewer
// releases than the client can hand out.
func TestCountRecords(t *testing.T) {
	three := v2Records("a", "bb", "ccc")
	legacy := binary.BigEndian.AppendUint64(nil, 7) // a message set starts with its offset
	legacy = binary.BigEndian.AppendUint32(legacy, 20)
	for _, c := range []struct {
		name string
		b    []byte
		want int
	}{
		{"three", three, 3},
		{"one", v2Records("x"), 1},
		{"cut", three[:len(three)-1], 0},
		{"trailing byte", append(append([]byte(nil), three...), 1), 0},
		{"legacy message set", legacy, 0},
		{"empty", nil, 0},
	} {
		if got := countRecords(c.b); got != c.want {
			t.Errorf("%s: %d records, want %d", c.name, got, c.want)
		}
	}
	// franz-go's own reader agrees on the count.
	var got int
	for b := three; len(b) > 0; got++ {
		l, n := binary.Varint(b)
		b = b[n+int(l):]
	}
	if got != 3 {
		t.Fatalf("reference count %d", got)
	}
}

func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && unsafe.SliceData(a[:1]) == unsafe.SliceData(b[:1])
}

func releaseAll(p *batchPool, recs ...[]byte) {
	p.release(func(yield func([]byte) bool) {
		for _, r := range recs {
			if !yield(r) {
				return
			}
		}
	})
}

// TestBatchPool: a registered buffer returns to the pool only when each
// of its records was released, wherever in the buffer the slice released
// points; unknown slices are ignored; the registry forgets its oldest
// buffers past its bound, and those are never handed out again.
func TestBatchPool(t *testing.T) {
	p := newBatchPool(1<<20, 1<<20)
	data := v2Records("one", "two", "three")
	buf := p.get(len(data))
	buf = append(buf, data...)
	p.register(buf)
	recs := [][]byte{buf[2:5], buf[len(buf)/2 : len(buf)/2+1], buf[len(buf)-1:]}

	releaseAll(p, recs[0], []byte("elsewhere"), recs[1])
	if b := p.get(len(data)); sameArray(b, buf) {
		t.Fatal("a buffer with a record out was handed out again")
	}
	releaseAll(p, recs[2])
	if b := p.get(len(data)); !sameArray(b, buf) || len(b) != 0 {
		t.Fatalf("the released buffer was not reused (len %d)", len(b))
	}
	if p.reused != 1 || len(p.live) != 0 || p.liveBytes != 0 {
		t.Fatalf("reused %d, live %d (%d bytes)", p.reused, len(p.live), p.liveBytes)
	}

	// Past maxLive the oldest registration is forgotten: releasing its
	// records then recycles nothing.
	small := newBatchPool(1<<20, 3*len(data))
	var bufs [][]byte
	for range 4 {
		b := append(make([]byte, 0, len(data)), data...)
		small.register(b)
		bufs = append(bufs, b)
	}
	if small.forgotten != 1 || len(small.live) != 3 {
		t.Fatalf("forgotten %d, live %d", small.forgotten, len(small.live))
	}
	releaseAll(small, bufs[0], bufs[0][5:], bufs[0][len(data)-1:])
	if len(small.free) != 0 {
		t.Fatal("a forgotten buffer was pooled")
	}
	releaseAll(small, bufs[3], bufs[3][5:], bufs[3][len(data)-1:])
	if len(small.free) != 1 || !sameArray(small.free[0][:1], bufs[3]) {
		t.Fatal("a fully released buffer was not pooled")
	}

	// The free list keeps at most maxFree bytes.
	tiny := newBatchPool(2*len(data), 1<<20)
	for range 3 {
		tiny.put(make([]byte, 0, len(data)))
	}
	if tiny.freeBytes > 2*len(data) || len(tiny.free) != 2 {
		t.Fatalf("free list %d buffers, %d bytes", len(tiny.free), tiny.freeBytes)
	}
	// ... and at most maxFreeBuffers buffers, the newest.
	many := newBatchPool(1<<30, 1<<20)
	var last []byte
	for range maxFreeBuffers + 10 {
		last = make([]byte, 0, 64)
		many.put(last)
	}
	if len(many.free) != maxFreeBuffers || !sameArray(many.free[len(many.free)-1][:1], last[:1]) {
		t.Fatalf("free list %d buffers (newest kept: %v)", len(many.free), sameArray(many.free[len(many.free)-1][:1], last[:1]))
	}
}

// TestFetchDecompressorPool: records consumed compressed (LZ4, which the
// decompressor decodes itself, and gzip, snappy and zstd, which franz-go
// decodes into the pool's buffers) keep their bytes until released,
// while released batches are decompressed into again. Each record is
// checked against what was produced when it arrives and again just
// before its release, 300 records (several batches) later.
func TestFetchDecompressorPool(t *testing.T) {
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"lz4", kgo.Lz4Compression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(codec.name, func(t *testing.T) {
			c, p := compressedTopic(t, codec.codec, kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(0))
			ctx := context.Background()
			const n, window = 4000, 300
			want := func(i int) string {
				return fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, bytes.Repeat([]byte{'a' + byte(i%26)}, i%400))
			}
			for i := range n {
				p.Produce(ctx, &kgo.Record{Value: []byte(want(i))}, nil)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			pool := newBatchPool(8<<20, 64<<20)
			d := newFetchDecompressor(pool)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.WithDecompressor(d),
				kgo.FetchMaxBytes(4<<10), kgo.FetchMaxPartitionBytes(4<<10))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var held []*kgo.Record
			check := func(r *kgo.Record, i int) {
				t.Helper()
				if string(r.Value) != want(i) {
					t.Fatalf("record %d: %.40q", i, r.Value)
				}
			}
			consumeAll(t, cl, n, func(r *kgo.Record, i int) {
				check(r, i)
				held = append(held, r)
				if len(held) > window {
					check(held[0], i+1-len(held))
					pool.releaseRecord(held[0])
					held = held[1:]
				}
			})
			for i, r := range held {
				check(r, n-len(held)+i)
			}
			// Which path decoded the batches: LZ4 here, the others
			// through franz-go's decompressor.
			mine, theirs := d.decoded.Load(), d.pooled.Load()
			if codec.name != "lz4" {
				mine, theirs = theirs, mine
			}
			if mine < 10 || theirs != 0 || pool.reused == 0 {
				t.Fatalf("%d batches decoded on the expected path, %d on the other, %d buffers reused: the test did not exercise reuse", mine, theirs, pool.reused)
			}
			t.Logf("%d batches decoded, %d buffers reused", mine, pool.reused)
		})
	}
}
