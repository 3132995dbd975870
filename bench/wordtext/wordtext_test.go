package wordtext

import (
	"testing"

	"github.com/pierrec/lz4/v4"
)

// TestTextVariesAndCompressesLikeText checks the generated text is as
// wide as asked, varies along its whole length (the generator once
// reseeded each 12 characters from 4 bits of the previous draw, so every
// doc ended in one of 16 tails and the doc column compressed 10x), and
// compresses as text does: neither random characters (1.0x with LZ4)
// nor repeated filler.
func TestTextVariesAndCompressesLikeText(t *testing.T) {
	for _, n := range []int{0, 1, 5, 24, 256} {
		if got := Append([]byte("x"), Mix(uint64(n)), n); len(got) != 1+n || got[0] != 'x' {
			t.Fatalf("Append(%d): %d bytes %q, want the prefix and %d bytes", n, len(got), got, n)
		}
	}
	const docs, width = 20000, 256
	tails := map[string]bool{}
	var raw, packed int
	buf := make([]byte, 0, 40<<10)
	var c lz4.Compressor
	for k := range uint64(docs) {
		start := len(buf)
		buf = Append(buf, Mix(k), width)
		doc := buf[start:]
		for _, b := range doc {
			if (b < 'a' || b > 'z') && b != ' ' {
				t.Fatalf("doc %d: byte %q outside lowercase letters and spaces: %q", k, b, doc)
			}
		}
		tails[string(doc[width-12:])] = true
		if len(buf) >= 32<<10 {
			out := make([]byte, lz4.CompressBlockBound(len(buf)))
			m, err := c.CompressBlock(buf, out)
			if err != nil {
				t.Fatal(err)
			}
			raw, packed = raw+len(buf), packed+m
			buf = buf[:0]
		}
	}
	if len(tails) < docs*95/100 {
		t.Errorf("%d distinct 12-byte tails in %d docs: the text repeats", len(tails), docs)
	}
	ratio := float64(raw) / float64(packed)
	t.Logf("LZ4 over 32 KiB pages of %d-byte docs: %.2fx (%d of %d bytes)", width, ratio, packed, raw)
	if ratio < 1.4 || ratio > 2.5 {
		t.Errorf("LZ4 compresses the docs %.2fx, want text's 1.4-2.5x", ratio)
	}
}
