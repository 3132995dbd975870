package datafile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"sync/atomic"

	pq "github.com/parquet-go/parquet-go"
	pqsnappy "github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pierrec/lz4/v4"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// The direct page reader serves ReadValuesAt for the pages a stored-row
// read needs most: version 2 data pages of PLAIN values, uncompressed or
// Snappy or LZ4_RAW, of a flat column without a dictionary, which is what
// merge-on-read files are (PlainValues). It reads a page's bytes with one
// ReadAt at the place the offset index gives, parses the page header
// itself, counts the definition levels up to the row and takes the row's
// value from the (decompressed) data, building nothing else. parquet-go's
// page path, which readChunkAt keeps for every other page, decodes each
// page whole through a reflective Thrift decoder and decodes every value
// and level of the page: for a point read of one value per page that was
// most of the cost (bench/README.md, session 6).

// errNotDirect says the direct reader does not read this chunk or page;
// the caller reads the chunk through parquet-go instead.
var errNotDirect = errors.New("not a page the direct reader reads")

// directPages turns the direct reader on; benchmarks and tests turn it off
// to compare with parquet-go's page path on the same file.
var directPages = true

// directChunksRead counts the column chunks the direct reader read, for
// tests to tell that it served them.
var directChunksRead atomic.Int64

// directChunk reads the pages of one column chunk.
type directChunk struct {
	r       io.ReaderAt
	oi      pq.OffsetIndex
	starts  []int64                 // first row (in the group) of each page
	codecID format.CompressionCodec // Uncompressed, Snappy or Lz4Raw
	kind    pq.Kind
	size    int  // a FIXED_LEN_BYTE_ARRAY's length
	maxDef  byte // 0 (required) or 1 (optional): flat columns only
	raw     []byte
	dec     []byte
	snappy  pqsnappy.Codec
}

// directable reports whether the direct reader may read the chunk, from
// its metadata: PLAIN values (RLE levels), no dictionary, uncompressed or
// Snappy or LZ4_RAW, a flat column whose physical type it decodes. Each page's own
// header is checked again as it is read.
func directable(md *format.ColumnMetaData, kind pq.Kind, maxDef byte) bool {
	if !directPages || maxDef > 1 || md.DictionaryPageOffset != 0 {
		return false
	}
	switch md.Codec {
	case format.Uncompressed, format.Snappy, format.Lz4Raw:
	default:
		return false
	}
	for _, e := range md.Encoding {
		switch e {
		case format.Plain, format.RLE, format.BitPacked:
		default:
			return false
		}
	}
	switch kind {
	case pq.Boolean, pq.Int32, pq.Int64, pq.Float, pq.Double, pq.ByteArray, pq.FixedLenByteArray:
		return true
	}
	return false
}

// read is readChunkAt for a chunk directable accepts, reusing d's
// buffers. It returns errNotDirect (before or after writing some of out)
// when a page turns out not to be one it reads; the caller then reads the
// chunk again through parquet-go, which overwrites out.
func (d *directChunk) read(r io.ReaderAt, cc pq.ColumnChunk, md *format.ColumnMetaData, typ pq.Type, conv func(pq.Value) schema.Value, maxDef byte, rows []int64, first int64, out []schema.Value) error {
	oi, err := cc.OffsetIndex()
	if errors.Is(err, pq.ErrMissingOffsetIndex) {
		return errNotDirect
	}
	if err != nil {
		return fmt.Errorf("offset index: %w", err)
	}
	d.r, d.oi, d.codecID, d.kind, d.size, d.maxDef = r, oi, md.Codec, typ.Kind(), typ.Length(), maxDef
	npages := oi.NumPages()
	d.starts = slices.Grow(d.starts[:0], npages)[:npages]
	for p := range d.starts {
		d.starts[p] = oi.FirstRowIndex(p)
	}
	cur := -1
	var pg *directPage
	for k, row := range rows {
		local := row - first
		p := sort.Search(npages, func(i int) bool { return d.starts[i] > local }) - 1
		if p < 0 {
			return fmt.Errorf("row %d before the chunk's first page", row)
		}
		if p != cur {
			if pg, err = d.page(p); err != nil {
				return err
			}
			cur = p
		}
		v, err := pg.at(int(local-d.starts[p]), d.kind, d.size)
		if err != nil {
			return fmt.Errorf("page %d, row %d: %w", p, row, err)
		}
		if v.IsNull() {
			out[k] = schema.Null
		} else {
			out[k] = conv(v)
		}
	}
	directChunksRead.Add(1)
	return nil
}

// directPage is one data page read: its definition levels (nil for a
// required column) and its PLAIN values, with cursors into both, since
// the rows of a page are asked for in ascending order: each level and
// each byte array length is passed once per page, however many of its
// rows are read.
type directPage struct {
	rows   int
	defs   []byte // RLE/bit-packed hybrid, bit width 1
	values []byte
	levels defCursor
	// The byte array walk: value index next starts at byte off.
	next, off int
}

// page reads page p of the chunk.
func (d *directChunk) page(p int) (*directPage, error) {
	size := d.oi.CompressedPageSize(p)
	if size <= 0 || size > math.MaxInt32 {
		return nil, fmt.Errorf("page %d: offset index gives %d bytes", p, size)
	}
	off := d.oi.Offset(p)
	var raw []byte
	if m, ok := d.r.(storage.Mapped); ok && m.Mapped() != nil {
		// The page in place: values taken from it are converted
		// (copied) before the file is released.
		b := m.Mapped()
		if off < 0 || off > int64(len(b))-size {
			return nil, fmt.Errorf("page %d: offset index places %d bytes at %d, past the file's %d", p, size, off, len(b))
		}
		raw = b[off : off+size : off+size]
	} else {
		if cap(d.raw) < int(size) {
			d.raw = make([]byte, size)
		}
		raw = d.raw[:size]
		if _, err := d.r.ReadAt(raw, off); err != nil {
			return nil, fmt.Errorf("page %d: %w", p, err)
		}
	}
	h, n, err := parsePageHeader(raw)
	if err != nil {
		return nil, fmt.Errorf("page %d header: %w", p, err)
	}
	if h.typ != int32(format.DataPageV2) || h.encoding != int32(format.Plain) || h.repLen != 0 {
		return nil, errNotDirect
	}
	body := raw[n:]
	if h.compressed < 0 || int(h.compressed) != len(body) || h.defLen < 0 || int(h.defLen) > len(body) || h.numRows < 0 || h.numValues != h.numRows {
		return nil, fmt.Errorf("page %d: header (%d bytes, %d of levels, %d rows, %d values) does not fit the %d bytes the offset index gives", p, h.compressed, h.defLen, h.numRows, h.numValues, len(body))
	}
	pg := directPage{rows: int(h.numRows)}
	if d.maxDef > 0 {
		pg.defs = body[:h.defLen]
		pg.levels = defCursor{rest: pg.defs}
	} else if h.defLen != 0 || h.numNulls != 0 {
		return nil, fmt.Errorf("page %d: definition levels in a required column", p)
	}
	pg.values = body[h.defLen:]
	if d.codecID != format.Uncompressed && h.isCompressed {
		want := int(h.uncompressed) - int(h.defLen)
		if want < 0 {
			return nil, fmt.Errorf("page %d: %d uncompressed bytes, %d of levels", p, h.uncompressed, h.defLen)
		}
		switch d.codecID {
		case format.Snappy:
			if d.dec, err = d.snappy.Decode(d.dec[:0], pg.values); err != nil {
				return nil, fmt.Errorf("page %d: snappy: %w", p, err)
			}
		case format.Lz4Raw:
			// An LZ4 block does not say how long it decodes to; the
			// header does. LZ4 expands at most 255 times, which bounds
			// what a corrupt header can make this allocate.
			if want > 255*len(pg.values)+16 {
				return nil, fmt.Errorf("page %d: header says %d bytes from a %d-byte LZ4 block", p, want, len(pg.values))
			}
			if cap(d.dec) < want {
				d.dec = make([]byte, want)
			}
			n, err := lz4.UncompressBlock(pg.values, d.dec[:want])
			if err != nil {
				return nil, fmt.Errorf("page %d: lz4: %w", p, err)
			}
			d.dec = d.dec[:n]
		default:
			return nil, errNotDirect
		}
		if len(d.dec) != want {
			return nil, fmt.Errorf("page %d: %d bytes decompressed, header says %d", p, len(d.dec), want)
		}
		pg.values = d.dec
	}
	return &pg, nil
}

// at returns the value of the page's row i, or a NULL value. Rows are
// asked for in ascending order.
func (pg *directPage) at(i int, kind pq.Kind, size int) (pq.Value, error) {
	if i < 0 || i >= pg.rows {
		return pq.Value{}, fmt.Errorf("row %d of a page of %d", i, pg.rows)
	}
	j := i // the row's index among the page's values
	if pg.defs != nil {
		before, present, err := pg.levels.at(i)
		if err != nil {
			return pq.Value{}, fmt.Errorf("definition levels: %w", err)
		}
		if !present {
			return pq.NullValue(), nil
		}
		j = before
	}
	v := pg.values
	short := func() (pq.Value, error) {
		return pq.Value{}, fmt.Errorf("value %d past the page's %d bytes of values", j, len(v))
	}
	switch kind {
	case pq.Boolean:
		if j>>3 >= len(v) {
			return short()
		}
		return pq.BooleanValue(v[j>>3]>>(j&7)&1 != 0), nil
	case pq.Int32:
		if 4*j+4 > len(v) {
			return short()
		}
		return pq.Int32Value(int32(binary.LittleEndian.Uint32(v[4*j:]))), nil
	case pq.Float:
		if 4*j+4 > len(v) {
			return short()
		}
		return pq.FloatValue(math.Float32frombits(binary.LittleEndian.Uint32(v[4*j:]))), nil
	case pq.Int64:
		if 8*j+8 > len(v) {
			return short()
		}
		return pq.Int64Value(int64(binary.LittleEndian.Uint64(v[8*j:]))), nil
	case pq.Double:
		if 8*j+8 > len(v) {
			return short()
		}
		return pq.DoubleValue(math.Float64frombits(binary.LittleEndian.Uint64(v[8*j:]))), nil
	case pq.FixedLenByteArray:
		if size <= 0 || size*j+size > len(v) {
			return short()
		}
		return pq.FixedLenByteArrayValue(v[size*j : size*j+size : size*j+size]), nil
	case pq.ByteArray:
		// PLAIN byte arrays: a 4-byte little-endian length, then the bytes.
		if j < pg.next {
			return pq.Value{}, fmt.Errorf("value %d asked for after value %d", j, pg.next)
		}
		off := pg.off
		for range j - pg.next {
			if off+4 > len(v) {
				return short()
			}
			off += 4 + int(binary.LittleEndian.Uint32(v[off:]))
		}
		pg.next, pg.off = j, off
		if off+4 > len(v) {
			return short()
		}
		n := int(binary.LittleEndian.Uint32(v[off:]))
		if n < 0 || off+4+n > len(v) {
			return short()
		}
		return pq.ByteArrayValue(v[off+4 : off+4+n : off+4+n]), nil
	}
	return pq.Value{}, errNotDirect
}

// defCursor reads bit-width-1 RLE/bit-packed hybrid definition levels
// (a flat optional column's) forward: at(i) tells how many entries before
// entry i are 1 (hold a value) and whether entry i is, for ascending i.
type defCursor struct {
	rest   []byte // the runs after the current one
	pos    int    // entries before the current run
	before int    // ones before the current run
	count  int    // entries in the current run
	ones   int    // ones in the current run
	one    bool   // an RLE run's value
	bits   []byte // a bit-packed run's bytes (nil: an RLE run)
}

func (c *defCursor) at(i int) (before int, present bool, err error) {
	if i < c.pos {
		return 0, false, fmt.Errorf("entry %d asked for after entry %d", i, c.pos)
	}
	for i >= c.pos+c.count {
		c.pos += c.count
		c.before += c.ones
		if len(c.rest) == 0 {
			return 0, false, fmt.Errorf("entry %d past the %d levels", i, c.pos)
		}
		h, n := binary.Uvarint(c.rest)
		if n <= 0 || h>>1 > math.MaxInt32 {
			return 0, false, errors.New("bad run header")
		}
		c.rest = c.rest[n:]
		if h&1 == 0 { // RLE run: count, then the value in one byte
			if len(c.rest) < 1 {
				return 0, false, errors.New("short RLE run")
			}
			c.count, c.one, c.bits = int(h>>1), c.rest[0]&1 == 1, nil
			c.ones = 0
			if c.one {
				c.ones = c.count
			}
			c.rest = c.rest[1:]
			continue
		}
		groups := int(h >> 1) // bit-packed run: groups of 8 entries, one byte each at width 1
		if groups > len(c.rest) {
			return 0, false, errors.New("short bit-packed run")
		}
		c.count, c.bits = 8*groups, c.rest[:groups]
		c.ones = 0
		for _, b := range c.bits {
			c.ones += bits.OnesCount8(b)
		}
		c.rest = c.rest[groups:]
	}
	k := i - c.pos
	if c.bits == nil {
		if c.one {
			return c.before + k, true, nil
		}
		return c.before, false, nil
	}
	before = c.before
	for _, b := range c.bits[:k>>3] {
		before += bits.OnesCount8(b)
	}
	last := c.bits[k>>3]
	return before + bits.OnesCount8(last&(1<<(k&7)-1)), last>>(k&7)&1 == 1, nil
}

// pageHeader is what the direct reader takes from a Parquet PageHeader
// (Thrift compact protocol): the page's sizes and, for a version 2 data
// page, its counts, value encoding and level lengths.
type pageHeader struct {
	typ                          int32
	uncompressed, compressed     int32
	v2                           bool
	numValues, numNulls, numRows int32
	encoding                     int32
	defLen, repLen               int32
	isCompressed                 bool
}

// parsePageHeader parses the header at the start of b and returns it with
// its length in bytes.
func parsePageHeader(b []byte) (pageHeader, int, error) {
	t := thriftReader{b: b}
	h := pageHeader{isCompressed: true}
	var last int16
	for {
		id, typ := t.field(&last)
		if t.err != nil || typ == 0 {
			break
		}
		switch {
		case id == 1 && typ == tI32:
			h.typ = t.i32()
		case id == 2 && typ == tI32:
			h.uncompressed = t.i32()
		case id == 3 && typ == tI32:
			h.compressed = t.i32()
		case id == 8 && typ == tStruct:
			h.v2 = true
			var last2 int16
			for {
				id2, typ2 := t.field(&last2)
				if t.err != nil || typ2 == 0 {
					break
				}
				switch {
				case id2 == 1 && typ2 == tI32:
					h.numValues = t.i32()
				case id2 == 2 && typ2 == tI32:
					h.numNulls = t.i32()
				case id2 == 3 && typ2 == tI32:
					h.numRows = t.i32()
				case id2 == 4 && typ2 == tI32:
					h.encoding = t.i32()
				case id2 == 5 && typ2 == tI32:
					h.defLen = t.i32()
				case id2 == 6 && typ2 == tI32:
					h.repLen = t.i32()
				case id2 == 7 && (typ2 == tTrue || typ2 == tFalse):
					h.isCompressed = typ2 == tTrue
				default:
					t.skip(typ2, 0)
				}
			}
		default:
			t.skip(typ, 0)
		}
	}
	if t.err != nil {
		return pageHeader{}, 0, t.err
	}
	if !h.v2 {
		h.typ = -1 // not a version 2 data page: the caller declines it
	}
	return h, t.pos, nil
}

// Thrift compact protocol type ids.
const (
	tStop   = 0
	tTrue   = 1
	tFalse  = 2
	tByte   = 3
	tI16    = 4
	tI32    = 5
	tI64    = 6
	tDouble = 7
	tBinary = 8
	tList   = 9
	tSet    = 10
	tMap    = 11
	tStruct = 12
)

// thriftReader reads the Thrift compact protocol; the first error sticks.
type thriftReader struct {
	b   []byte
	pos int
	err error
}

func (t *thriftReader) fail(msg string) {
	if t.err == nil {
		t.err = fmt.Errorf("thrift at byte %d: %s", t.pos, msg)
	}
}

func (t *thriftReader) byte() byte {
	if t.err != nil {
		return 0
	}
	if t.pos >= len(t.b) {
		t.fail("truncated")
		return 0
	}
	c := t.b[t.pos]
	t.pos++
	return c
}

func (t *thriftReader) uvarint() uint64 {
	if t.err != nil {
		return 0
	}
	v, n := binary.Uvarint(t.b[t.pos:])
	if n <= 0 {
		t.fail("bad varint")
		return 0
	}
	t.pos += n
	return v
}

func (t *thriftReader) i64() int64 {
	u := t.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (t *thriftReader) i32() int32 {
	v := t.i64()
	if v < math.MinInt32 || v > math.MaxInt32 {
		t.fail("i32 out of range")
	}
	return int32(v)
}

// field reads a field header: its id (from the delta to *last, or given
// in full) and type; type tStop ends the struct.
func (t *thriftReader) field(last *int16) (int16, byte) {
	c := t.byte()
	typ := c & 0x0f
	if typ == tStop {
		return 0, tStop
	}
	if d := c >> 4; d != 0 {
		*last += int16(d)
	} else {
		*last = int16(t.i64())
	}
	return *last, typ
}

// skip passes over a value of type typ (nested at most 32 deep).
func (t *thriftReader) skip(typ byte, depth int) {
	if depth > 32 {
		t.fail("nested too deep")
		return
	}
	switch typ {
	case tTrue, tFalse:
	case tByte:
		t.byte()
	case tI16, tI32, tI64:
		t.uvarint()
	case tDouble:
		t.advance(8)
	case tBinary:
		t.advance(t.uvarint())
	case tList, tSet:
		c := t.byte()
		n := uint64(c >> 4)
		if n == 15 {
			n = t.uvarint()
		}
		et := c & 0x0f
		for i := uint64(0); i < n && t.err == nil; i++ {
			t.skipElem(et, depth+1)
		}
	case tMap:
		n := t.uvarint()
		if n == 0 {
			return
		}
		kv := t.byte()
		for i := uint64(0); i < n && t.err == nil; i++ {
			t.skipElem(kv>>4, depth+1)
			t.skipElem(kv&0x0f, depth+1)
		}
	case tStruct:
		var last int16
		for t.err == nil {
			_, ft := t.field(&last)
			if ft == tStop {
				return
			}
			t.skip(ft, depth+1)
		}
	default:
		t.fail(fmt.Sprintf("unknown type %d", typ))
	}
}

// skipElem skips a container element (booleans take a byte there).
func (t *thriftReader) skipElem(typ byte, depth int) {
	if typ == tTrue || typ == tFalse {
		t.byte()
		return
	}
	t.skip(typ, depth)
}

func (t *thriftReader) advance(n uint64) {
	if t.err != nil {
		return
	}
	if n > uint64(len(t.b)-t.pos) {
		t.fail("truncated")
		return
	}
	t.pos += int(n)
}
