package dv

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// kernelData holds Spark's tables with deletion vectors; the repository's
// shared/ folder sits next to the work tree, locally and in CI.
var kernelData = func() string {
	if d := os.Getenv("DELTA_CONFORMANCE"); d != "" {
		return filepath.Join(d, "kernel-data")
	}
	return "../../../shared/delta-conformance/kernel-data"
}()

func TestZ85SpecVector(t *testing.T) {
	// The example of the Z85 specification (ZeroMQ RFC 32).
	raw := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	if got := EncodeZ85(raw); got != "HelloWorld" {
		t.Fatalf("EncodeZ85 = %q, want HelloWorld", got)
	}
	back, err := DecodeZ85("HelloWorld")
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("DecodeZ85 = %x, %v", back, err)
	}
	for _, bad := range []string{"Hell", "Hello\"orld", "%%%%%"} {
		if _, err := DecodeZ85(bad); err == nil {
			t.Errorf("DecodeZ85(%q) succeeded", bad)
		}
	}
}

func TestRelativePathGolden(t *testing.T) {
	d := &delta.DeletionVector{StorageType: "u", PathOrInlineDv: "vBn[lx{q8@P<9BNH/isA"}
	p, err := RelativePath(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"; p != want {
		t.Fatalf("path %q, want %q", p, want)
	}
	d.PathOrInlineDv = "ab" + d.PathOrInlineDv
	if p, _ = RelativePath(d); p != "ab/deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin" {
		t.Fatalf("prefixed path %q", p)
	}
}

// TestLoadGolden reads the deletion vectors Spark wrote in the kernel test
// tables; the wanted row indexes were read by hand from the files' hex
// dumps (an array container holding 0 and 9; a run container 0..2).
func TestLoadGolden(t *testing.T) {
	cases := []struct {
		table string
		want  []uint64
	}{
		{"table-with-dv-small", []uint64{0, 9}},
		{"with-short-dv", []uint64{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.table, func(t *testing.T) {
			dir := filepath.Join(kernelData, c.table)
			d := goldenDescriptor(t, dir)
			bm, err := Load(context.Background(), storage.NewLocal(dir), d)
			if err != nil {
				t.Fatal(err)
			}
			if got := bm.ToArray(); !slices.Equal(got, c.want) {
				t.Fatalf("rows %v, want %v", got, c.want)
			}
		})
	}
}

func goldenDescriptor(t testing.TB, dir string) *delta.DeletionVector {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "_delta_log", "*.json"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		acts, err := delta.ParseActions(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.Add != nil && a.Add.DeletionVector != nil {
				return a.Add.DeletionVector
			}
		}
	}
	t.Skipf("no deletion vector in %s", dir)
	return nil
}

func sample() *roaring64.Bitmap {
	b := roaring64.New()
	b.AddMany([]uint64{0, 3, 7, 65535, 65536, 1 << 20})
	b.AddRange(100000, 170000)              // a run container
	b.AddMany([]uint64{1 << 32, 5<<32 + 9}) // more than one bucket
	return b
}

func TestInlineRoundTrip(t *testing.T) {
	for _, b := range []*roaring64.Bitmap{roaring64.New(), roaring64.BitmapOf(5), sample()} {
		d, err := Inline(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Load(context.Background(), nil, d)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equals(b) {
			t.Fatalf("inline round trip: got %d rows, want %d", got.GetCardinality(), b.GetCardinality())
		}
	}
}

func TestFileRoundTripAndCorruption(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storage.NewLocal(dir)
	b := sample()
	for _, prefix := range []string{"", "xy"} {
		d, err := Write(ctx, st, b, prefix)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Load(ctx, st, d)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equals(b) {
			t.Fatal("file round trip differs")
		}
		// The same vector reached through an absolute path.
		p, _ := RelativePath(d)
		abs := &delta.DeletionVector{StorageType: "p", PathOrInlineDv: "file://" + filepath.ToSlash(filepath.Join(dir, p)),
			Offset: d.Offset, SizeInBytes: d.SizeInBytes, Cardinality: d.Cardinality}
		if got, err := Load(ctx, st, abs); err != nil || !got.Equals(b) {
			t.Fatalf("absolute path load: %v", err)
		}
		// Flip one byte of the bitmap: the CRC must catch it.
		raw, _ := st.Read(ctx, p)
		raw[10] ^= 0xff
		if err := st.Write(ctx, p, raw); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(ctx, st, d); !errors.Is(err, ErrChecksum) {
			t.Fatalf("corrupt file: err %v, want ErrChecksum", err)
		}
	}
	// A descriptor whose cardinality disagrees is refused.
	d, _ := Inline(b)
	d.Cardinality++
	if _, err := Load(ctx, nil, d); err == nil {
		t.Fatal("cardinality mismatch accepted")
	}
}

func TestDecodeBitmapRejects(t *testing.T) {
	good, _ := EncodeBitmap(sample())
	bad := map[string][]byte{
		"short":     good[:8],
		"magic":     append([]byte{0, 0, 0, 0}, good[4:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(slices.Clone(good), 0),
		"huge count": func() []byte {
			b := slices.Clone(good)
			b[11] = 0x7f
			return b
		}(),
	}
	for name, b := range bad {
		if _, err := DecodeBitmap(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func goldenBitmaps(f *testing.F) {
	for _, table := range []string{"table-with-dv-small", "with-short-dv"} {
		dir := filepath.Join(kernelData, table)
		d := goldenDescriptor(f, dir)
		p, err := RelativePath(d)
		if err != nil {
			f.Fatal(err)
		}
		file, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(file)
	}
}

func FuzzDecodeBitmap(f *testing.F) {
	goldenBitmaps(f)
	good, _ := EncodeBitmap(sample())
	f.Add(good)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Golden seeds are whole DV files: try the raw bytes and, when the
		// file frame parses, the bitmap inside it.
		for _, in := range [][]byte{data, extractOrNil(data)} {
			b, err := DecodeBitmap(in)
			if err != nil {
				continue
			}
			enc, err := EncodeBitmap(b)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			back, err := DecodeBitmap(enc)
			if err != nil || !back.Equals(b) {
				t.Fatalf("round trip of a decoded bitmap failed: %v", err)
			}
		}
	})
}

func extractOrNil(file []byte) []byte {
	b, err := Extract(file, 1, -1)
	if err != nil {
		return nil
	}
	return b
}

func FuzzExtract(f *testing.F) {
	goldenBitmaps(f)
	f.Fuzz(func(t *testing.T, file []byte) {
		for _, off := range []int64{0, 1, 5, int64(len(file)) - 4} {
			b, err := Extract(file, off, -1)
			if err == nil && len(b) > len(file) {
				t.Fatalf("extracted %d bytes from a %d-byte file", len(b), len(file))
			}
		}
	})
}

func FuzzDecodeZ85(f *testing.F) {
	f.Add("HelloWorld")
	f.Add("vBn[lx{q8@P<9BNH/isA")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := DecodeZ85(s)
		if err != nil {
			return
		}
		if got := EncodeZ85(b); got != s {
			t.Fatalf("re-encode %q = %q", s, got)
		}
	})
}

// TestWriteManyRoundTrip: several vectors in one file, each loaded back at
// its offset through a storage that reads parts and one that reads whole
// files; a corrupted middle vector fails its CRC alone; a descriptor
// whose size runs past the file is refused.
func TestWriteManyRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir())
	type whole struct{ storage.Storage } // no RangeReader: Load reads the whole file
	bms := []*roaring64.Bitmap{roaring64.BitmapOf(1), sample(), roaring64.New(), roaring64.BitmapOf(7, 9, 1<<33)}
	vs := make([]Vector, len(bms))
	for i, b := range bms {
		v, err := Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		vs[i] = v
	}
	ds, err := WriteMany(ctx, st, vs, "ab")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(bms) || ds[0].PathOrInlineDv != ds[3].PathOrInlineDv || *ds[0].Offset != 1 || *ds[1].Offset <= *ds[0].Offset {
		t.Fatalf("descriptors %+v: want one file, offsets from 1 up", ds)
	}
	for _, s := range []storage.Storage{st, whole{st}} {
		for i, d := range ds {
			got, err := Load(ctx, s, d)
			if err != nil || !got.Equals(bms[i]) {
				t.Fatalf("vector %d: %v (%d rows, want %d)", i, err, got.GetCardinality(), bms[i].GetCardinality())
			}
		}
	}
	p, _ := RelativePath(ds[1])
	raw, _ := st.Read(ctx, p)
	raw[*ds[1].Offset+4+2] ^= 0xff // inside vector 1's bitmap
	if err := st.Write(ctx, p, raw); err != nil {
		t.Fatal(err)
	}
	for _, s := range []storage.Storage{st, whole{st}} {
		if _, err := Load(ctx, s, ds[1]); !errors.Is(err, ErrChecksum) {
			t.Fatalf("corrupt vector 1: %v, want ErrChecksum", err)
		}
		if got, err := Load(ctx, s, ds[3]); err != nil || !got.Equals(bms[3]) {
			t.Fatalf("vector 3 next to a corrupt one: %v", err)
		}
	}
	past := *ds[3]
	past.SizeInBytes += 100
	if _, err := Load(ctx, st, &past); err == nil {
		t.Fatal("a vector running past the file loaded")
	}
}

// TestEncodeBitmapPaths: a bitmap within bucket 0 is written from its
// containers (the common case), byte for byte what the general path
// writes, and decodes to the same set; bitmaps beyond bucket 0 and empty
// ones take the general path.
func TestEncodeBitmapPaths(t *testing.T) {
	runs := roaring64.New()
	runs.AddRange(10, 70000)
	dense := roaring64.New()
	for i := uint64(0); i < 200000; i += 3 {
		dense.Add(i)
	}
	for name, b := range map[string]*roaring64.Bitmap{
		"empty": roaring64.New(), "one": roaring64.BitmapOf(0), "array": roaring64.BitmapOf(1, 9, 4095, 1<<31),
		"runs": runs, "dense": dense, "buckets": sample(),
	} {
		want := b.Clone()
		enc, err := EncodeBitmap(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		general, err := encodeBuckets(want.Clone())
		if err != nil {
			t.Fatalf("%s: general path: %v", name, err)
		}
		// Bitmaps built by adding values: the same containers either way.
		if !bytes.Equal(enc, general) {
			t.Errorf("%s: %d bytes written, the general path writes %d different ones", name, len(enc), len(general))
		}
		back, err := DecodeBitmap(enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !back.Equals(want) {
			t.Errorf("%s: decoded %d values, want %d", name, back.GetCardinality(), want.GetCardinality())
		}
	}
	// One bucket whose key readers with signed integers cannot hold.
	if _, err := EncodeBitmap(roaring64.BitmapOf(1 << 63)); err == nil {
		t.Error("row index 2^63 must be refused")
	}
}

// BenchmarkEncodeBitmap: the deletion vector of a 100k-row file with a
// third of its rows deleted at random, as a merge-on-read commit writes
// for each file an update touches.
func BenchmarkEncodeBitmap(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	bm := roaring64.New()
	for range 33_000 {
		bm.Add(uint64(rng.IntN(100_000)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeBitmap(bm); err != nil {
			b.Fatal(err)
		}
	}
}
