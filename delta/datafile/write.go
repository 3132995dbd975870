package datafile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Codec is a Parquet compression codec for written files.
type Codec string

// The codecs Write offers. Zstd is the protocol's recommended default.
const (
	Zstd         Codec = "zstd"
	Snappy       Codec = "snappy"
	Lz4Raw       Codec = "lz4raw" // Parquet's LZ4_RAW: LZ4 blocks without a frame
	Uncompressed Codec = "uncompressed"
)

// WriteOption configures Write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	codec    Codec
	now      func() time.Time
	rowGroup int64
	page     int
	plain    bool
	rawFixed map[string]bool // RawFixedWidth's columns
	// textPageRows bounds the rows of a byte array column's page (the
	// flat writer's; 0: pages end at page bytes only).
	textPageRows int
}

// Compression sets the codec of written files (default Zstd).
func Compression(c Codec) WriteOption { return func(o *writeOptions) { o.codec = c } }

// Clock replaces time.Now for add.modificationTime; tests use it.
func Clock(now func() time.Time) WriteOption { return func(o *writeOptions) { o.now = now } }

// RowGroupRows bounds the rows per Parquet row group (default 1Mi).
func RowGroupRows(n int64) WriteOption { return func(o *writeOptions) { o.rowGroup = n } }

// PageBytes sets the size data pages are cut at before compression
// (default 256 KiB, parquet-go's). Small pages let a reader that needs a
// few rows (ReadValuesAt) decode little more than those rows.
func PageBytes(n int) WriteOption { return func(o *writeOptions) { o.page = n } }

// TextPageRows also ends a byte array column's data page at n rows
// (PlainValues files of flat layouts). A point read of one value walks
// the page's PLAIN lengths from its start (pagedirect.go) after
// decompressing it: on a page of short strings, thousands of them. Wide
// text reaches the page's bytes first; fixed-width values are found
// without a walk, so their pages are not bounded.
func TextPageRows(n int) WriteOption { return func(o *writeOptions) { o.textPageRows = n } }

// PlainValues writes every top-level byte array column PLAIN instead of
// parquet-go's DELTA_LENGTH_BYTE_ARRAY, so a point read of one value
// (ReadValuesAt) walks the page's lengths to it without decoding the
// page's other values (the direct page reader, pagedirect.go).
func PlainValues() WriteOption { return func(o *writeOptions) { o.plain = true } }

// RawFixedWidth writes those of the named top-level columns that are
// fixed-width (booleans, integers, floats, dates, timestamps, decimals,
// fixed-length byte arrays) uncompressed, whatever the file's codec. A
// point read of one value (ReadValuesAt) decompresses its whole page, and
// PLAIN fixed-width values often compress little (the 1M-key bench's
// source columns: 1.0-1.9x with Snappy), so the columns such reads serve
// are cheaper to read raw. Byte array columns keep the codec.
func RawFixedWidth(columns ...string) WriteOption {
	return func(o *writeOptions) {
		if o.rawFixed == nil {
			o.rawFixed = map[string]bool{}
		}
		for _, c := range columns {
			o.rawFixed[c] = true
		}
	}
}

// Write stores rec, the table's data columns (every non-partition column
// in schema order, logical names and ArrowType types), as a new Parquet
// file under a unique name and returns the add action for it, with
// partitionValues (serialized, keyed by logical name), size, time and
// stats. The file is encoded straight into storage (storage.WriteFrom,
// as WriteIfAbsent would write it): data files are never overwritten, and
// the writer never holds a whole file.
func Write(ctx context.Context, st storage.Storage, l Layout, rec arrow.RecordBatch, partitionValues map[string]*string, opts ...WriteOption) (*delta.Add, error) {
	o := writeOptions{codec: Zstd, now: time.Now, rowGroup: 1 << 20}
	for _, f := range opts {
		f(&o)
	}
	phys, err := l.checkRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("write data file: %w", err)
	}
	name := fmt.Sprintf("part-00000-%s-c000.%s.parquet", uuid.New(), o.codec)
	defer phys.Release()
	size, err := storage.WriteFrom(ctx, st, name, true, func(w io.Writer) error {
		phys.Retain() // encodeParquetTo releases it
		return encodeParquetTo(w, phys, o)
	})
	if err != nil {
		return nil, fmt.Errorf("write data file: %w", err)
	}
	pv, err := l.partitionKeys(partitionValues)
	if err != nil {
		return nil, fmt.Errorf("write data file: %w", err)
	}
	return &delta.Add{
		Path:             delta.EncodePath(name),
		PartitionValues:  pv,
		Size:             size,
		ModificationTime: o.now().UnixMilli(),
		DataChange:       true,
		Stats:            l.ComputeStats(rec).JSON(),
	}, nil
}

// offsetWriter passes a file's bytes on, counting them (a page's or
// index's offset is the count before it) and keeping the first error, so
// that the encoder checks once, at the end.
type offsetWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (o *offsetWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	o.n += int64(n)
	o.err = err
	return n, err
}

func (o *offsetWriter) WriteString(s string) (int, error) { return o.Write([]byte(s)) }

// Len is the bytes written so far: the offset of the next.
func (o *offsetWriter) Len() int { return int(o.n) }

// chunkSets hold, per column, the buffer of one column chunk's pages
// (encodeFlat), each column's buffer in the same set slot from file to
// file. Until session 27 the chunk buffers came from the pool whole files
// were encoded into (files are streamed into storage since session 29):
// every buffer then served files and any column alike, so each of a file's
// dozen chunk buffers ratcheted up to the largest file or chunk it had
// ever held, and the pool's live bytes grew with every larger file for
// as long as the engine ran (BenchmarkWritePooled). Now a set's buffers
// together stay near the largest file's size.
var chunkSets = sync.Pool{New: func() any { return new(chunkSet) }}

// chunkSet is one buffer per column, indexed by column.
type chunkSet struct{ bufs []*bytes.Buffer }

// takeChunkSet returns a set of at least n buffers (encodeFlat resets
// them per row group).
func takeChunkSet(n int) *chunkSet {
	s := chunkSets.Get().(*chunkSet)
	for len(s.bufs) < n {
		s.bufs = append(s.bufs, new(bytes.Buffer))
	}
	return s
}

// maxPooledChunkBuffer is the largest chunk buffer kept for reuse: a rare
// huge file (a compaction) does not pin its size.
const maxPooledChunkBuffer = 64 << 20

// putChunkSet returns s to the pool, without buffers over
// maxPooledChunkBuffer.
func putChunkSet(s *chunkSet) {
	for i, b := range s.bufs {
		if b.Cap() > maxPooledChunkBuffer {
			s.bufs[i] = new(bytes.Buffer)
		}
	}
	chunkSets.Put(s)
}

// partitionKeys checks that every partition column has a value and
// returns the map keyed as the log keys it (physical names).
func (l Layout) partitionKeys(in map[string]*string) (map[string]*string, error) {
	out := make(map[string]*string, len(l.PartitionColumns))
	for _, p := range l.PartitionColumns {
		f, _, ok := l.Schema.Field(p)
		if !ok {
			return nil, fmt.Errorf("partition column %q is not in the schema", p)
		}
		v, ok := in[p]
		if !ok {
			return nil, fmt.Errorf("no value for partition column %q", p)
		}
		out[l.physicalName(f)] = v
	}
	if len(in) != len(l.PartitionColumns) {
		extra := maps.Clone(in)
		for _, p := range l.PartitionColumns {
			delete(extra, p)
		}
		for k := range extra {
			return nil, fmt.Errorf("%q is not a partition column", k)
		}
	}
	return out, nil
}

// checkRecord verifies rec holds exactly the data columns with their
// logical Arrow types, and returns it relabelled with the physical schema
// (physical names and field ids under column mapping).
func (l Layout) checkRecord(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	var data []delta.StructField
	for _, f := range l.Schema.Fields {
		if !l.isPartition(f.Name) && f.Type != delta.Void {
			data = append(data, f)
		}
	}
	if int(rec.NumCols()) != len(data) {
		return nil, fmt.Errorf("record has %d columns, the table has %d data columns", rec.NumCols(), len(data))
	}
	for i, f := range data {
		want, err := ArrowType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		if rec.ColumnName(i) != f.Name {
			return nil, fmt.Errorf("column %d is %q, want %q", i, rec.ColumnName(i), f.Name)
		}
		if !arrow.TypeEqual(rec.Column(i).DataType(), want) {
			return nil, fmt.Errorf("column %q is %s, want %s", f.Name, rec.Column(i).DataType(), want)
		}
		if !f.Nullable && rec.Column(i).NullN() > 0 {
			return nil, fmt.Errorf("column %q is not nullable but has %d nulls", f.Name, rec.Column(i).NullN())
		}
		if err := checkNested(rec.Column(i), f.Type, f.Name); err != nil {
			return nil, err
		}
	}
	if l.Mapping == MappingNone {
		rec.Retain()
		return rec, nil
	}
	fields, err := l.physicalFields(data)
	if err != nil {
		return nil, err
	}
	cols := make([]arrow.Array, len(fields))
	for i := range cols {
		cols[i] = array.MakeFromData(retype(rec.Column(i).Data(), fields[i].Type))
	}
	out := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out, nil
}

// checkNested enforces the nullability declared inside nested types: a
// non-nullable struct field may be null only where its struct is, and
// arrays and maps declared without nulls hold no null element or value.
func checkNested(arr arrow.Array, t delta.DataType, path string) error {
	switch t := t.(type) {
	case delta.StructType:
		sa := arr.(*array.Struct)
		for i, f := range t.Fields {
			child := sa.Field(i)
			if !f.Nullable {
				for r := 0; r < sa.Len(); r++ {
					if sa.IsValid(r) && child.IsNull(r) {
						return fmt.Errorf("field %s.%s is not nullable but row %d is null", path, f.Name, r)
					}
				}
			}
			if err := checkNested(child, f.Type, path+"."+f.Name); err != nil {
				return err
			}
		}
	case delta.ArrayType:
		vals := arr.(*array.List).ListValues()
		if !t.ContainsNull && vals.NullN() > 0 {
			return fmt.Errorf("array %s holds nulls but its elements are not nullable", path)
		}
		return checkNested(vals, t.ElementType, path+".element")
	case delta.MapType:
		m := arr.(*array.Map)
		if !t.ValueContainsNull && m.Items().NullN() > 0 {
			return fmt.Errorf("map %s holds null values but its values are not nullable", path)
		}
		if err := checkNested(m.Keys(), t.KeyType, path+".key"); err != nil {
			return err
		}
		return checkNested(m.Items(), t.ValueType, path+".value")
	}
	return nil
}

// retype returns d over the same buffers with type t, recursing into
// children, for renaming nested fields to their physical names.
func retype(d arrow.ArrayData, t arrow.DataType) arrow.ArrayData {
	var kids []arrow.ArrayData
	switch t := t.(type) {
	case *arrow.StructType:
		for i, c := range d.Children() {
			kids = append(kids, retype(c, t.Field(i).Type))
		}
	case *arrow.MapType:
		kids = []arrow.ArrayData{retype(d.Children()[0], t.Elem())}
	case *arrow.ListType:
		kids = []arrow.ArrayData{retype(d.Children()[0], t.Elem())}
	default:
		kids = d.Children()
	}
	return array.NewData(t, d.Len(), d.Buffers(), kids, d.NullN(), d.Offset())
}
