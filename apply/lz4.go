package apply

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchDecompressor decompresses fetched record batches into buffers
// from the engine's batch pool, which takes each back once every record
// in it is released (batchPool): LZ4 frames itself; gzip, snappy, zstd
// and any LZ4 frame it does not take through franz-go's default
// decompressor, handed a pool buffer to decode into. Without that, every
// compressed batch was a fresh buffer for the runtime to clear and the
// collector to reclaim: snappy and zstd topics allocated twice what an
// LZ4 topic did and were collected two to three times as often
// (bench/README.md, session 19). Uncompressed batches never reach a decompressor: their
// records point into the fetch response, which franz-go allocates for
// every fetch.
//
// franz-go's LZ4 path streams the frame through a reader into a growing
// buffer, checks the frame's content checksum and copies the result out:
// in the 1M-key bench (8 GB of decompressed JSON) the checksum and the
// copies were a third of the fetch cost. Here each block is decoded
// straight into one output slice sized from the frames seen so far (a
// block that does not fit its room goes through a scratch buffer). The
// frame's own checksums are not checked: the record batch's CRC-32C,
// which franz-go validates, already covers every compressed byte. A frame
// this decoder does not take (linked blocks, a dictionary, anything
// malformed) is handed to the default decompressor, which decodes it or
// reports the error.
type fetchDecompressor struct {
	fallback kgo.Decompressor
	// pool, when not nil, provides the output buffers and takes them back
	// once the engine released every record in them.
	pool *batchPool
	// ratio is, per codec and class of compressed size (its bit length),
	// the last such batch's decompressed/compressed size ratio in 1/16ths:
	// the next buffer's size. The ratio grows with a batch (Debezium JSON
	// repeats its inline schema in every record: the bench's batches ran
	// from 4.9 to 19 times smaller). With one ratio for all sizes, a
	// 64-partition topic (small and large batches interleaved)
	// undersized 31% of the buffers, each then grown by copying: 5 GB of
	// the run's 12 GB allocated.
	ratio   [kgo.CodecZstd + 1][65]atomic.Int64
	decoded atomic.Int64 // LZ4 batches decoded here (not by the fallback)
	pooled  atomic.Int64 // batches the fallback decoded, registered with the pool
}

// lz4MaxBatch bounds what one batch may decompress to here; a larger one
// goes to the default decompressor, which applies the client's bound.
const lz4MaxBatch = 256 << 20

func newFetchDecompressor(pool *batchPool) *fetchDecompressor {
	d := &fetchDecompressor{pool: pool}
	for i := range d.ratio {
		for j := range d.ratio[i] {
			d.ratio[i][j].Store(4 * 16)
		}
	}
	if pool == nil {
		d.fallback = kgo.DefaultDecompressor()
	} else {
		d.fallback = kgo.DefaultDecompressor(fallbackBuffers{d})
	}
	return d
}

func (d *fetchDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec == kgo.CodecLz4 {
		if out, ok := d.decodeFrames(src); ok {
			d.noteRatio(codec, src, out)
			d.decoded.Add(1)
			return out, nil
		}
	}
	out, err := d.fallback.Decompress(src, codec)
	if err != nil || d.pool == nil {
		return out, err
	}
	// In the pool's buffer, or in one the codec allocated when that was
	// too small (the pool's is then left to the collector): either way
	// the records point into out, and out is reused once they are
	// released.
	d.noteRatio(codec, src, out)
	d.pool.register(out)
	d.pooled.Add(1)
	return out, nil
}

// noteRatio keeps a batch's size ratio for the codec's next buffer.
func (d *fetchDecompressor) noteRatio(codec kgo.CompressionCodecType, src, out []byte) {
	if int(codec) < len(d.ratio) && len(src) > 0 {
		d.ratio[codec][sizeClass(src)].Store(int64(len(out)) * 16 / int64(len(src)))
	}
}

// size is the buffer to decompress src into: its size times the codec's
// last ratio (at least 1) and an eighth more, within lz4MaxBatch.
func (d *fetchDecompressor) size(src []byte, codec kgo.CompressionCodecType) int {
	r := int64(4 * 16)
	if int(codec) < len(d.ratio) {
		r = d.ratio[codec][sizeClass(src)].Load()
	}
	guess := int64(len(src)) * max(r, 16) / 16
	return int(min(guess+guess/8, lz4MaxBatch))
}

// sizeClass is the class of a compressed batch's size: its bit length.
func sizeClass(src []byte) int { return bits.Len(uint(len(src))) }

// fallbackBuffers hands franz-go's default decompressor the pool's
// buffers to decode into (only the capacity is used). It takes back a
// buffer only when decoding failed, cleared by franz-go; on success the
// buffer is Decompress's to register.
type fallbackBuffers struct{ d *fetchDecompressor }

func (b fallbackBuffers) GetDecompressBytes(src []byte, codec kgo.CompressionCodecType) []byte {
	return b.d.pool.get(b.d.size(src, codec))
}

func (b fallbackBuffers) PutDecompressBytes(p []byte) { b.d.pool.put(p) }

var errLZ4Frame = errors.New("lz4 frame not taken")

var lz4Scratch = sync.Pool{New: func() any { return new([]byte) }}

// decodeFrames decodes the LZ4 frames of src; ok is false for a frame it
// does not take.
func (d *fetchDecompressor) decodeFrames(src []byte) (out []byte, ok bool) {
	n := d.size(src, kgo.CodecLz4)
	if d.pool == nil {
		out = make([]byte, 0, n)
	} else {
		out = d.pool.get(n)
	}
	buf := out
	for len(src) > 0 {
		var err error
		if out, src, err = decodeFrame(out, src); err != nil {
			if d.pool != nil {
				d.pool.put(buf) // nothing points into it
			}
			return nil, false
		}
	}
	if d.pool != nil {
		d.pool.register(out)
	}
	return out, true
}

// decodeFrame appends the decoded content of the frame at the start of
// src to out and returns the rest of src.
func decodeFrame(out, src []byte) ([]byte, []byte, error) {
	if len(src) < 7 {
		return nil, nil, errLZ4Frame
	}
	magic := binary.LittleEndian.Uint32(src)
	if magic&0xFFFFFFF0 == 0x184D2A50 { // a skippable frame
		n := int(binary.LittleEndian.Uint32(src[4:]))
		if n < 0 || 8+n > len(src) {
			return nil, nil, errLZ4Frame
		}
		return out, src[8+n:], nil
	}
	flg, bd := src[4], src[5]
	if magic != 0x184D2204 || flg>>6 != 1 || flg&0x20 == 0 || flg&0x01 != 0 || flg&0x02 != 0 {
		// Not a version 1 frame of independent blocks without a dictionary.
		return nil, nil, errLZ4Frame
	}
	blockMax := 0
	switch bd >> 4 & 7 {
	case 4:
		blockMax = 64 << 10
	case 5:
		blockMax = 256 << 10
	case 6:
		blockMax = 1 << 20
	case 7:
		blockMax = 4 << 20
	default:
		return nil, nil, errLZ4Frame
	}
	blockSum, contentSum := flg&0x10 != 0, flg&0x04 != 0
	pos := 6
	if flg&0x08 != 0 { // content size
		if len(src) < pos+8 {
			return nil, nil, errLZ4Frame
		}
		size := binary.LittleEndian.Uint64(src[pos:])
		if size > lz4MaxBatch || len(out)+int(size) > lz4MaxBatch {
			return nil, nil, errLZ4Frame
		}
		if need := len(out) + int(size); need > cap(out) {
			grown := make([]byte, len(out), need)
			copy(grown, out)
			out = grown
		}
		pos += 8
	}
	pos++ // header checksum
	for {
		if len(src) < pos+4 {
			return nil, nil, errLZ4Frame
		}
		size := binary.LittleEndian.Uint32(src[pos:])
		pos += 4
		if size == 0 { // end mark
			break
		}
		raw := size&0x80000000 != 0
		n := int(size & 0x7FFFFFFF)
		if n > blockMax || len(src) < pos+n {
			return nil, nil, errLZ4Frame
		}
		block := src[pos : pos+n]
		pos += n
		if blockSum {
			pos += 4
		}
		if raw {
			if len(out)+n > lz4MaxBatch {
				return nil, nil, errLZ4Frame
			}
			out = append(out, block...)
			continue
		}
		// Decode in place when the block fits the room left in out, as
		// it does but for a batch's last blocks. Otherwise (an error: too
		// short, or corrupt) decode it into a pooled block buffer, then
		// append: reserving a whole block's room in out (4 MiB for
		// franz-go's writer) would allocate and clear far more than the
		// batch holds.
		if room := min(cap(out), lz4MaxBatch) - len(out); room > 0 {
			if m, err := lz4.UncompressBlock(block, out[len(out):len(out)+min(room, blockMax)]); err == nil {
				out = out[:len(out)+m]
				continue
			}
		}
		scratch := lz4Scratch.Get().(*[]byte)
		if cap(*scratch) < blockMax {
			*scratch = make([]byte, blockMax)
		}
		m, err := lz4.UncompressBlock(block, (*scratch)[:blockMax])
		if err == nil && len(out)+m > lz4MaxBatch {
			err = errLZ4Frame
		}
		if err == nil {
			out = append(out, (*scratch)[:m]...)
		}
		lz4Scratch.Put(scratch)
		if err != nil {
			return nil, nil, err
		}
	}
	if contentSum {
		pos += 4
	}
	if pos > len(src) {
		return nil, nil, errLZ4Frame
	}
	return out, src[pos:], nil
}
