package delta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// A checkpoint's tombstones are mostly the previous checkpoint's: a remove
// lives for delta.deletedFileRetentionDuration (a week by default) and a
// merge-on-read table adds about a hundred per commit, so every checkpoint
// of a busy table read back and encoded again hundreds of thousands to
// millions of removes: a fifth of the engine's CPU in the first five
// minutes of a steady 800 changes a second into a 10M-row table, and a
// share growing with the retention. Encoded Parquet column chunks hold no absolute file
// positions (only the footer does), so a row group of the previous
// checkpoint whose removes all stay is copied into the new file as bytes
// (ckptWriter.splice), its chunks' offsets moved in the new footer. A group
// is copied only when it is exactly what encoding its kept removes would
// give: written in this package's schema (ckptFileSchema), removes only,
// none of them expired, superseded or carrying stats
// (Snapshot.rangeSpilledGroups). Anything else is decoded and encoded
// again, as before. The copied groups keep their column statistics but not
// their page indexes, which are optional and which no checkpoint reader
// needs.

// ckptOut is what a checkpoint's parquet-go writer writes to: it counts
// the file's bytes, and while holding it keeps them back (the footer that
// finishSpliced replaces).
type ckptOut struct {
	w    io.Writer
	n    int64
	hold bool
	held bytes.Buffer
}

func (o *ckptOut) Write(p []byte) (int, error) {
	if o.hold {
		return o.held.Write(p)
	}
	n, err := o.w.Write(p)
	o.n += int64(n)
	return n, err
}

// splice takes row group g of the spilled checkpoint to be copied whole
// into this one at finish, when its file is in this package's checkpoint
// schema; it reports whether it took it.
func (cw *ckptWriter) splice(g *ckptGroup) bool {
	schema, err := ckptFileSchema()
	if err != nil || !reflect.DeepEqual([]format.SchemaElement(g.meta.Schema), schema) {
		return false
	}
	rg := &g.meta.RowGroups[g.index]
	// A small group (the last of the removes a checkpoint encoded) is
	// encoded again with the rows around it instead, so that a week of
	// checkpoints does not pile up a row group per checkpoint: the removes
	// encoded each time stay about a group's worth.
	if rg.NumRows < int64(ckptRowGroup/2) {
		return false
	}
	for i := range rg.Columns {
		if c := &rg.Columns[i]; c.FilePath != "" || c.CryptoMetadata != (format.ColumnCryptoMetaData{}) || len(c.EncryptedColumnMetadata) > 0 {
			return false
		}
	}
	cw.spliced = append(cw.spliced, g)
	cw.rows += int(rg.NumRows)
	return true
}

// finishSpliced ends a checkpoint that copies row groups: parquet-go writes
// the encoded rows' last group and their page indexes, its footer is held
// back and read, each spliced group's column chunks are copied from its
// file after what parquet-go wrote, and the footer is written again with
// those groups added.
func (cw *ckptWriter) finishSpliced(ctx context.Context, store storage.Storage) error {
	if err := cw.w.Flush(); err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	cw.out.hold = true
	if err := cw.w.Close(); err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	cw.out.hold = false
	tail := cw.out.held.Bytes()
	meta, footerAt, err := ckptParseFooter(tail)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	// What parquet-go wrote before its footer (page indexes) stays where
	// its offsets say it is.
	if _, err := cw.out.Write(tail[:footerAt]); err != nil {
		return err
	}
	var f storage.File
	var open string
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for _, g := range cw.spliced {
		if g.path != open {
			if f != nil {
				f.Close()
				f = nil
			}
			if f, err = storage.Open(ctx, store, g.path); err != nil {
				if errors.Is(err, storage.ErrNotExist) {
					err = fmt.Errorf("%w: %w", errSpillGone, err)
				}
				return fmt.Errorf("copy the removes of checkpoint file %s: %w", g.path, err)
			}
			open = g.path
		}
		rg, err := cw.copyGroup(f, &g.meta.RowGroups[g.index], len(meta.RowGroups))
		if err != nil {
			return fmt.Errorf("copy row group %d of checkpoint file %s: %w", g.index, g.path, err)
		}
		if d, ok := f.(storage.ResidentDropper); ok {
			d.DropResident()
		}
		meta.RowGroups = append(meta.RowGroups, rg)
		meta.NumRows += rg.NumRows
	}
	enc, err := thrift.Marshal(new(thrift.CompactProtocol), meta)
	if err != nil {
		return fmt.Errorf("encode checkpoint footer: %w", err)
	}
	enc = binary.LittleEndian.AppendUint32(enc, uint32(len(enc)))
	enc = append(enc, "PAR1"...)
	_, err = cw.out.Write(enc)
	return err
}

// copyGroup copies the column chunks of row group src of file r to the
// checkpoint being written and returns the group as the new footer holds
// it (ordinal: its index there).
func (cw *ckptWriter) copyGroup(r io.ReaderAt, src *format.RowGroup, ordinal int) (format.RowGroup, error) {
	if ordinal > 1<<15-1 {
		return format.RowGroup{}, fmt.Errorf("more than %d row groups", 1<<15-1)
	}
	rg := format.RowGroup{
		TotalByteSize:  src.TotalByteSize,
		NumRows:        src.NumRows,
		SortingColumns: src.SortingColumns,
		FileOffset:     cw.out.n,
		Ordinal:        int16(ordinal),
		Columns:        make([]format.ColumnChunk, len(src.Columns)),
	}
	for i := range src.Columns {
		c := src.Columns[i]
		md := c.MetaData
		start := md.DataPageOffset
		if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
			start = md.DictionaryPageOffset
		}
		if start < 4 || md.TotalCompressedSize < 0 {
			return format.RowGroup{}, fmt.Errorf("column %d: chunk at %d, %d bytes", i, start, md.TotalCompressedSize)
		}
		shift := cw.out.n - start
		n, err := io.Copy(cw.out, io.NewSectionReader(r, start, md.TotalCompressedSize))
		if err != nil {
			return format.RowGroup{}, fmt.Errorf("column %d: %w", i, err)
		}
		if n != md.TotalCompressedSize {
			return format.RowGroup{}, fmt.Errorf("column %d: read %d of the chunk's %d bytes", i, n, md.TotalCompressedSize)
		}
		md.DataPageOffset += shift
		if md.DictionaryPageOffset > 0 {
			md.DictionaryPageOffset += shift
		}
		if md.IndexPageOffset > 0 {
			md.IndexPageOffset += shift
		}
		md.BloomFilterOffset, md.BloomFilterLength = 0, 0
		// The chunk's own file_offset (deprecated; parquet-go leaves it 0)
		// moves with the chunk when it points into it.
		fileOffset := c.FileOffset
		if fileOffset >= start && fileOffset <= start+md.TotalCompressedSize {
			fileOffset += shift
		} else if fileOffset != 0 {
			fileOffset = start + shift
		}
		rg.Columns[i] = format.ColumnChunk{FileOffset: fileOffset, MetaData: md}
		rg.TotalCompressedSize += md.TotalCompressedSize
	}
	return rg, nil
}

// ckptParseFooter reads the footer at the end of a Parquet file's tail and
// returns it with where it starts in tail.
func ckptParseFooter(tail []byte) (*format.FileMetaData, int, error) {
	if len(tail) < 8 || string(tail[len(tail)-4:]) != "PAR1" {
		return nil, 0, fmt.Errorf("no parquet footer at the end of the file")
	}
	n := int(binary.LittleEndian.Uint32(tail[len(tail)-8:]))
	at := len(tail) - 8 - n
	if n <= 0 || at < 0 {
		return nil, 0, fmt.Errorf("parquet footer of %d bytes in a tail of %d", n, len(tail))
	}
	meta := new(format.FileMetaData)
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), tail[at:at+n], meta); err != nil {
		return nil, 0, fmt.Errorf("read parquet footer: %w", err)
	}
	return meta, at, nil
}

// ckptFileSchema is the schema a checkpoint file this package writes has in
// its footer: only a group of a file with exactly this schema is copied
// into a new checkpoint, whose footer declares it.
var ckptFileSchema = sync.OnceValues(func() ([]format.SchemaElement, error) {
	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, ckptSchema, parquet.Compression(&parquet.Snappy))
	if err := w.Close(); err != nil {
		return nil, err
	}
	meta, _, err := ckptParseFooter(buf.Bytes())
	if err != nil {
		return nil, err
	}
	return meta.Schema, nil
})
