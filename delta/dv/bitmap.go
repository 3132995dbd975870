package dv

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// MagicNumber starts every serialized RoaringBitmapArray (little endian).
const MagicNumber uint32 = 1681511377

// minBucketBytes bounds the bucket count a decoder accepts: each bucket takes
// at least 12 bytes (key plus an empty 32-bit bitmap header), so a count
// beyond len(data)/12 is corrupt and must not drive an allocation.
const minBucketBytes = 12

// DecodeBitmap parses the RoaringBitmapArray format: the magic number, then
// a 64-bit roaring bitmap in the portable format (a bucket count, then per
// bucket a 32-bit key and a portable 32-bit roaring bitmap), all little
// endian. Keys must be ascending and below 2^31 as the protocol requires.
func DecodeBitmap(data []byte) (*roaring64.Bitmap, error) {
	if len(data) < 12 {
		return nil, fmt.Errorf("decode deletion vector: %d bytes is shorter than the 12-byte header", len(data))
	}
	if m := binary.LittleEndian.Uint32(data); m != MagicNumber {
		return nil, fmt.Errorf("decode deletion vector: magic number %d, want %d", m, MagicNumber)
	}
	n := binary.LittleEndian.Uint64(data[4:])
	rest := data[12:]
	if n > uint64(len(rest))/minBucketBytes+1 {
		return nil, fmt.Errorf("decode deletion vector: %d buckets cannot fit in %d bytes", n, len(rest))
	}
	out := roaring64.New()
	prev := int64(-1)
	for i := uint64(0); i < n; i++ {
		if len(rest) < 4 {
			return nil, fmt.Errorf("decode deletion vector: bucket %d: truncated key", i)
		}
		key := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if key >= 1<<31 {
			return nil, fmt.Errorf("decode deletion vector: bucket %d: key %d has its sign bit set", i, key)
		}
		if int64(key) <= prev {
			return nil, fmt.Errorf("decode deletion vector: bucket %d: key %d not ascending", i, key)
		}
		prev = int64(key)
		rb := roaring.New()
		r := bytes.NewReader(rest)
		read, err := rb.ReadFrom(r)
		if err != nil {
			return nil, fmt.Errorf("decode deletion vector: bucket %d: %w", i, err)
		}
		if err := rb.Validate(); err != nil {
			return nil, fmt.Errorf("decode deletion vector: bucket %d: %w", i, err)
		}
		rest = rest[read:]
		high := uint64(key) << 32
		it := rb.Iterator()
		for it.HasNext() {
			out.Add(high | uint64(it.Next()))
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("decode deletion vector: %d trailing bytes", len(rest))
	}
	return out, nil
}

// EncodeBitmap serializes b in the RoaringBitmapArray format DecodeBitmap
// reads. Row indexes of 2^63 and above cannot be written: the protocol
// keeps keys non-negative for readers with signed integers.
func EncodeBitmap(b *roaring64.Bitmap) ([]byte, error) {
	b.RunOptimize()
	if b.GetCardinality() > 0 {
		// After the magic number the format is the portable 64-bit one,
		// which roaring64 writes from its containers as they are. When
		// that is one bucket (every row index under 2^32: files of fewer
		// rows), it is the answer, without each index being added to a
		// new bitmap; more buckets take the general path.
		buf := make([]byte, 4, 4+b.GetSerializedSizeInBytes())
		binary.LittleEndian.PutUint32(buf, MagicNumber)
		out := bytes.NewBuffer(buf)
		if _, err := b.WriteTo(out); err != nil {
			return nil, fmt.Errorf("encode deletion vector: %w", err)
		}
		enc := out.Bytes()
		if binary.LittleEndian.Uint64(enc[4:12]) == 1 && binary.LittleEndian.Uint32(enc[12:16]) < 1<<31 {
			return enc, nil
		}
	}
	return encodeBuckets(b)
}

// encodeBuckets is EncodeBitmap's general path: each bucket rebuilt from
// the bitmap's values, in ascending key order.
func encodeBuckets(b *roaring64.Bitmap) ([]byte, error) {
	buckets := map[uint32]*roaring.Bitmap{}
	var keys []uint32
	it := b.Iterator()
	for it.HasNext() {
		v := it.Next()
		key := uint32(v >> 32)
		if key >= 1<<31 {
			return nil, fmt.Errorf("encode deletion vector: row index %d is too large", v)
		}
		bm, ok := buckets[key]
		if !ok {
			bm = roaring.New()
			buckets[key] = bm
			keys = append(keys, key) // the iterator is ascending, so keys are too
		}
		bm.Add(uint32(v))
	}
	var buf bytes.Buffer
	var hdr [12]byte
	binary.LittleEndian.PutUint32(hdr[:], MagicNumber)
	binary.LittleEndian.PutUint64(hdr[4:], uint64(len(keys)))
	buf.Write(hdr[:])
	for _, k := range keys {
		var kb [4]byte
		binary.LittleEndian.PutUint32(kb[:], k)
		buf.Write(kb[:])
		bm := buckets[k]
		bm.RunOptimize()
		if _, err := bm.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("encode deletion vector: %w", err)
		}
	}
	return buf.Bytes(), nil
}
