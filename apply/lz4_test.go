package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func lz4Frame(t *testing.T, data []byte, opts ...lz4.Option) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLZ4DecompressorFrames: frames of every block size, with and
// without block checksums, content checksum and content size, of
// compressible and incompressible data (raw blocks), empty, several in a
// row: decoded here (not handed to the fallback) to the data written,
// as franz-go's own decompressor decodes them.
func TestLZ4DecompressorFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	var text bytes.Buffer
	for i := 0; text.Len() < 5<<20; i++ {
		fmt.Fprintf(&text, `{"id":%d,"name":"customer %d","doc":"%s"}`, i, i%97, bytes.Repeat([]byte{'a' + byte(i%26)}, i%300))
	}
	payloads := map[string][]byte{"empty": nil, "small": []byte("hello, frame"), "random": random, "text": text.Bytes()}
	sizes := []lz4.BlockSize{lz4.Block64Kb, lz4.Block256Kb, lz4.Block1Mb, lz4.Block4Mb}
	d := newFetchDecompressor(nil)
	def := kgo.DefaultDecompressor()
	for name, data := range payloads {
		for _, size := range sizes {
			for _, sums := range []bool{false, true} {
				for _, withSize := range []bool{false, true} {
					opts := []lz4.Option{lz4.BlockSizeOption(size), lz4.BlockChecksumOption(sums), lz4.ChecksumOption(!sums)}
					if withSize {
						opts = append(opts, lz4.SizeOption(uint64(len(data))))
					}
					frame := lz4Frame(t, data, opts...)
					what := fmt.Sprintf("%s, %s blocks, block sums %v, size %v", name, size, sums, withSize)
					got, ok := d.decodeFrames(frame)
					if !ok {
						t.Fatalf("%s: not decoded here", what)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("%s: %d bytes decoded, want %d", what, len(got), len(data))
					}
					want, err := def.Decompress(frame, kgo.CodecLz4)
					if err != nil || !bytes.Equal(want, data) {
						t.Fatalf("%s: franz-go decodes %d bytes, err %v", what, len(want), err)
					}
				}
			}
		}
	}
	two := append(lz4Frame(t, []byte("first ")), lz4Frame(t, text.Bytes()[:100000])...)
	got, err := d.Decompress(two, kgo.CodecLz4)
	if err != nil || !bytes.Equal(got, append([]byte("first "), text.Bytes()[:100000]...)) {
		t.Fatalf("two frames: %d bytes, err %v", len(got), err)
	}
}

// TestLZ4DecompressorSizesByClass: small and large batches interleaved
// (a topic of many partitions) each get a buffer their decoded size
// fits, once a batch of their size was seen: a small batch of JSON
// records with an inline schema compresses far less than a large one, so
// one ratio for both undersized every large batch's buffer.
func TestLZ4DecompressorSizesByClass(t *testing.T) {
	schema := `{"schema":{"type":"struct","fields":[` + strings.Repeat(`{"type":"string","optional":true,"field":"column"},`, 40) + `{"type":"int64","field":"id"}]}`
	batch := func(records int) []byte {
		var b bytes.Buffer
		for i := range records {
			fmt.Fprintf(&b, `%s,"payload":{"id":%d,"status":"s%d"}}`, schema, i, i*7919%1000)
		}
		return b.Bytes()
	}
	small, large := batch(3), batch(2000)
	smallFrame, largeFrame := lz4Frame(t, small), lz4Frame(t, large)
	if sizeClass(smallFrame) == sizeClass(largeFrame) {
		t.Fatalf("the batches' compressed sizes %d and %d share a class: the test needs two", len(smallFrame), len(largeFrame))
	}
	smallRatio, largeRatio := float64(len(small))/float64(len(smallFrame)), float64(len(large))/float64(len(largeFrame))
	if largeRatio < 2*smallRatio {
		t.Fatalf("ratios %.1f (small) and %.1f (large): the test needs the large batch to compress far better", smallRatio, largeRatio)
	}
	d := newFetchDecompressor(nil)
	for round := range 4 {
		for _, c := range []struct {
			name        string
			frame, want []byte
		}{{"small", smallFrame, small}, {"large", largeFrame, large}} {
			guess := d.size(c.frame, kgo.CodecLz4)
			if round > 0 && guess < len(c.want) {
				t.Fatalf("round %d, the %s batch: a buffer of %d bytes for %d", round, c.name, guess, len(c.want))
			}
			got, err := d.Decompress(c.frame, kgo.CodecLz4)
			if err != nil || !bytes.Equal(got, c.want) {
				t.Fatalf("round %d, the %s batch: %d bytes decoded, err %v", round, c.name, len(got), err)
			}
		}
	}
}

// TestLZ4DecompressorFallsBack: a frame it does not take (a dictionary
// id, a bad block) goes to franz-go's decompressor, whose error is
// returned; other codecs always do.
func TestLZ4DecompressorFallsBack(t *testing.T) {
	d := newFetchDecompressor(nil)
	frame := lz4Frame(t, bytes.Repeat([]byte("abc"), 10000))
	dict := append([]byte(nil), frame...)
	dict[4] |= 0x01
	if _, ok := d.decodeFrames(dict); ok {
		t.Fatal("a frame with a dictionary id was decoded here")
	}
	if _, err := d.Decompress(dict, kgo.CodecLz4); err == nil {
		t.Fatal("a frame with a dictionary id decompressed without error")
	}
	cut := frame[:len(frame)-9]
	if _, ok := d.decodeFrames(cut); ok {
		t.Fatal("a truncated frame was decoded here")
	}
	if _, err := d.Decompress(cut, kgo.CodecLz4); err == nil {
		t.Fatal("a truncated frame decompressed without error")
	}
	if got, err := d.Decompress([]byte("plain"), kgo.CodecNone); err != nil || string(got) != "plain" {
		t.Fatalf("uncompressed: %q, %v", got, err)
	}
}

// compressedTopic starts a kfake cluster with a topic "t" and a producer
// that compresses its batches with codec; both are closed with the test.
func compressedTopic(t *testing.T, codec kgo.CompressionCodec, opts ...kgo.Opt) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic("t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return c, p
}

// consumeAll polls cl until n records arrived, handing each to fn with
// its number, and fails the test if they do not within 30 s.
func consumeAll(t *testing.T, cl *kgo.Client, n int, fn func(r *kgo.Record, i int)) {
	t.Helper()
	seen := 0
	deadline := time.Now().Add(30 * time.Second)
	for seen < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			fn(r, seen)
			seen++
		}
	}
	if seen != n {
		t.Fatalf("consumed %d of %d records", seen, n)
	}
}

// TestLZ4DecompressorConsumes: records produced lz4-compressed into kfake
// are consumed through it unchanged.
func TestLZ4DecompressorConsumes(t *testing.T) {
	c, p := compressedTopic(t, kgo.Lz4Compression())
	ctx := context.Background()
	const n = 2000
	for i := range n {
		p.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, bytes.Repeat([]byte("x"), i%500))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d := newFetchDecompressor(nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.WithDecompressor(d))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	consumeAll(t, cl, n, func(r *kgo.Record, i int) {
		if want := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, bytes.Repeat([]byte("x"), i%500)); string(r.Value) != want {
			t.Fatalf("record %d: %q", i, r.Value)
		}
	})
	if d.decoded.Load() == 0 {
		t.Fatal("no batch was decoded by fetchDecompressor itself")
	}
}

// BenchmarkLZ4Decompress decodes a 1 MiB batch of JSON-like records as
// franz-go's producer frames it, by franz-go's decompressor and by ours,
// without and with the batch pool (the batch released after each decode,
// as the engine releases a committed batch's records):
//
//	go test ./apply -run XXX -bench LZ4Decompress -count 6
func BenchmarkLZ4Decompress(b *testing.B) {
	var text bytes.Buffer
	for i := 0; text.Len() < 1<<20; i++ {
		fmt.Fprintf(&text, `{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":%d,"name":"customer %d","doc":"%s"}}`, i, i%97, bytes.Repeat([]byte{'a' + byte(i%26)}, i%300))
	}
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if _, err := w.Write(text.Bytes()); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	frame := buf.Bytes()
	// The batch as one record, so that releasing it returns the buffer.
	record := binary.AppendVarint(nil, int64(text.Len()))
	record = append(record, text.Bytes()...)
	var pooledFrame bytes.Buffer
	w = lz4.NewWriter(&pooledFrame)
	if _, err := w.Write(record); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	pool := newBatchPool(64<<20, 256<<20)
	for _, c := range []struct {
		name   string
		d      kgo.Decompressor
		frame  []byte
		size   int
		pooled bool
	}{
		{"dec=franz-go", kgo.DefaultDecompressor(), frame, text.Len(), false},
		{"dec=cdcapply", newFetchDecompressor(nil), frame, text.Len(), false},
		// Released as the engine releases a committed batch's records.
		{"dec=cdcapply-pooled", newFetchDecompressor(pool), pooledFrame.Bytes(), len(record), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(c.size))
			for i := 0; i < b.N; i++ {
				out, err := c.d.Decompress(c.frame, kgo.CodecLz4)
				if err != nil || len(out) != c.size {
					b.Fatalf("%d bytes, err %v", len(out), err)
				}
				if c.pooled {
					releaseAll(pool, out)
				}
			}
			if _, reused, _ := pool.stats(); c.pooled && b.N > 1 && reused == 0 {
				b.Fatal("the pooled decompressor never reused a buffer")
			}
		})
	}
}
