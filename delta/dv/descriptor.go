package dv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"path"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/google/uuid"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Storage types of a deletion vector descriptor.
const (
	StorageInline   = "i"
	StorageRelative = "u"
	StorageAbsolute = "p"
)

// FileFormatVersion is the first byte of every deletion vector file.
const FileFormatVersion byte = 1

// uuidZ85Len is the length of a Z85-encoded 16-byte UUID.
const uuidZ85Len = 20

// ErrChecksum reports a deletion vector whose stored CRC-32 does not match
// its bytes: the file is corrupt and the rows it hides cannot be known.
var ErrChecksum = errors.New("deletion vector checksum mismatch")

// RelativePath returns the file path, relative to the table root, of a
// descriptor of storage type "u": the random prefix (all but the last 20
// characters) as a directory, then deletion_vector_<uuid>.bin with the
// UUID decoded from the last 20 Z85 characters.
func RelativePath(d *delta.DeletionVector) (string, error) {
	if d.StorageType != StorageRelative {
		return "", fmt.Errorf("derive deletion vector path: storage type %q is not %q", d.StorageType, StorageRelative)
	}
	s := d.PathOrInlineDv
	if len(s) < uuidZ85Len {
		return "", fmt.Errorf("derive deletion vector path: %q is shorter than a Z85 UUID", s)
	}
	prefix, enc := s[:len(s)-uuidZ85Len], s[len(s)-uuidZ85Len:]
	raw, err := DecodeZ85(enc)
	if err != nil {
		return "", fmt.Errorf("derive deletion vector path: %w", err)
	}
	id, err := uuid.FromBytes(raw)
	if err != nil {
		return "", fmt.Errorf("derive deletion vector path: %w", err)
	}
	name := "deletion_vector_" + id.String() + ".bin"
	if prefix == "" {
		return name, nil
	}
	return path.Join(prefix, name), nil
}

// Load returns the row indexes a descriptor marks as deleted. Path-based
// vectors are read through st, which is rooted at the table; an absolute
// ("p") path must lie under st's location. The cardinality in the
// descriptor is checked against the bitmap.
func Load(ctx context.Context, st storage.Storage, d *delta.DeletionVector) (*roaring64.Bitmap, error) {
	var data []byte
	switch d.StorageType {
	case StorageInline:
		raw, err := DecodeZ85(d.PathOrInlineDv)
		if err != nil {
			return nil, fmt.Errorf("load inline deletion vector: %w", err)
		}
		if int(d.SizeInBytes) > len(raw) || d.SizeInBytes < 0 {
			return nil, fmt.Errorf("load inline deletion vector: sizeInBytes %d exceeds the %d decoded bytes", d.SizeInBytes, len(raw))
		}
		data = raw[:d.SizeInBytes]
	case StorageRelative, StorageAbsolute:
		p, err := filePath(st, d)
		if err != nil {
			return nil, fmt.Errorf("load deletion vector: %w", err)
		}
		off := int64(1)
		if d.Offset != nil {
			off = int64(*d.Offset)
		}
		data, err = readVector(ctx, st, p, off, d.SizeInBytes)
		if err != nil {
			return nil, fmt.Errorf("load deletion vector %s: %w", p, err)
		}
	default:
		return nil, fmt.Errorf("load deletion vector: unknown storage type %q", d.StorageType)
	}
	bm, err := DecodeBitmap(data)
	if err != nil {
		return nil, err
	}
	if got := bm.GetCardinality(); got != uint64(d.Cardinality) {
		return nil, fmt.Errorf("load deletion vector: bitmap holds %d rows, descriptor says %d", got, d.Cardinality)
	}
	return bm, nil
}

// readVector reads the vector at offset of the file at p: only its bytes
// (and the version byte) when the storage reads in parts, since a file
// may hold the vectors of many data files.
func readVector(ctx context.Context, st storage.Storage, p string, offset int64, want int32) ([]byte, error) {
	if _, ok := st.(storage.RangeReader); !ok || want < 0 {
		file, err := st.Read(ctx, p)
		if err != nil {
			return nil, err
		}
		return Extract(file, offset, want)
	}
	f, err := storage.Open(ctx, st, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if offset < 1 || offset+8+int64(want) > f.Size() {
		return nil, fmt.Errorf("vector of %d bytes at offset %d outside the %d-byte file", want, offset, f.Size())
	}
	part := make([]byte, 1+4+int(want)+4)
	if _, err := f.ReadAt(part[:1], 0); err != nil {
		return nil, err
	}
	if _, err := f.ReadAt(part[1:], offset); err != nil {
		return nil, err
	}
	// part is now the file as Extract sees it with the vector at offset 1.
	return Extract(part, 1, want)
}

func filePath(st storage.Storage, d *delta.DeletionVector) (string, error) {
	if d.StorageType == StorageRelative {
		return RelativePath(d)
	}
	p, abs, err := delta.DecodePath(d.PathOrInlineDv)
	if err != nil {
		return "", err
	}
	if !abs && !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("absolute deletion vector path %q is relative", d.PathOrInlineDv)
	}
	root := strings.TrimSuffix(st.Location(), "/") + "/"
	if !strings.HasPrefix(p, root) {
		return "", fmt.Errorf("deletion vector %q lies outside the table at %s", d.PathOrInlineDv, st.Location())
	}
	return strings.TrimPrefix(p, root), nil
}

// Extract returns the bitmap bytes of the vector stored at offset in a
// deletion vector file: it checks the file's version byte, the size field
// against want (when want >= 0) and the CRC-32 that follows the data.
func Extract(file []byte, offset int64, want int32) ([]byte, error) {
	if len(file) == 0 {
		return nil, errors.New("empty deletion vector file")
	}
	if file[0] != FileFormatVersion {
		return nil, fmt.Errorf("deletion vector file version %d, want %d", file[0], FileFormatVersion)
	}
	if offset < 1 || offset > int64(len(file))-4 {
		return nil, fmt.Errorf("offset %d outside the %d-byte file", offset, len(file))
	}
	size := int64(binary.BigEndian.Uint32(file[offset:]))
	if want >= 0 && size != int64(want) {
		return nil, fmt.Errorf("stored size %d, descriptor says %d", size, want)
	}
	start := offset + 4
	if size > int64(len(file))-start-4 {
		return nil, fmt.Errorf("size %d at offset %d runs past the %d-byte file", size, offset, len(file))
	}
	data := file[start : start+size]
	sum := binary.BigEndian.Uint32(file[start+size:])
	if got := crc32.ChecksumIEEE(data); got != sum {
		return nil, fmt.Errorf("at offset %d: crc %08x, stored %08x: %w", offset, got, sum, ErrChecksum)
	}
	return data, nil
}

// Vector is a bitmap encoded once in the protocol's portable format,
// ready to be stored inline or in a file: a writer that first needs its
// size (to choose between the two) does not encode it again.
type Vector struct {
	data        []byte
	cardinality int64
	maxRow      *int64
}

// Encode encodes b.
func Encode(b *roaring64.Bitmap) (Vector, error) {
	data, err := EncodeBitmap(b)
	if err != nil {
		return Vector{}, err
	}
	return Vector{data: data, cardinality: int64(b.GetCardinality()), maxRow: maxRowIndex(b)}, nil
}

// Size is the encoded vector's size in bytes.
func (v Vector) Size() int { return len(v.data) }

// Inline returns an inline ("i") descriptor holding v. Inline vectors keep
// small deletes inside the log, with no extra file to write or vacuum.
func (v Vector) Inline() *delta.DeletionVector {
	return &delta.DeletionVector{
		StorageType:    StorageInline,
		PathOrInlineDv: EncodeZ85(v.data),
		SizeInBytes:    int32(len(v.data)),
		Cardinality:    v.cardinality,
		MaxRowIndex:    v.maxRow,
	}
}

// Inline returns an inline ("i") descriptor holding b.
func Inline(b *roaring64.Bitmap) (*delta.DeletionVector, error) {
	v, err := Encode(b)
	if err != nil {
		return nil, err
	}
	return v.Inline(), nil
}

// Write stores b in a new deletion vector file of its own (at offset 1)
// and returns its "u" descriptor (WriteMany of one vector).
func Write(ctx context.Context, st storage.Storage, b *roaring64.Bitmap, prefix string) (*delta.DeletionVector, error) {
	v, err := Encode(b)
	if err != nil {
		return nil, fmt.Errorf("write deletion vector: %w", err)
	}
	ds, err := WriteMany(ctx, st, []Vector{v}, prefix)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

// WriteMany stores the vectors in one new deletion vector file, one after
// the other (each its size, data and CRC-32, the first at offset 1), and
// returns a "u" descriptor per vector with its offset. A commit that
// hides rows in many data files writes one file instead of one per data
// file. The file is named from a fresh UUID (under prefix when it is not
// empty) and written with WriteIfAbsent, so a UUID clash can never
// overwrite vectors other files depend on.
func WriteMany(ctx context.Context, st storage.Storage, vs []Vector, prefix string) ([]*delta.DeletionVector, error) {
	if strings.ContainsAny(prefix, "/") {
		return nil, fmt.Errorf("write deletion vectors: prefix %q must not contain '/'", prefix)
	}
	if len(vs) == 0 {
		return nil, nil
	}
	id := uuid.New()
	name := prefix + EncodeZ85(id[:])
	var buf bytes.Buffer
	buf.WriteByte(FileFormatVersion)
	out := make([]*delta.DeletionVector, len(vs))
	var n [4]byte
	for i, v := range vs {
		if buf.Len() > math.MaxInt32-len(v.data)-8 {
			return nil, fmt.Errorf("write deletion vectors: %d vectors pass the 2 GiB a file's offsets can address", len(vs))
		}
		out[i] = &delta.DeletionVector{
			StorageType:    StorageRelative,
			PathOrInlineDv: name,
			Offset:         ptr(int32(buf.Len())),
			SizeInBytes:    int32(len(v.data)),
			Cardinality:    v.cardinality,
			MaxRowIndex:    v.maxRow,
		}
		binary.BigEndian.PutUint32(n[:], uint32(len(v.data)))
		buf.Write(n[:])
		buf.Write(v.data)
		binary.BigEndian.PutUint32(n[:], crc32.ChecksumIEEE(v.data))
		buf.Write(n[:])
	}
	p, err := RelativePath(out[0])
	if err != nil {
		return nil, fmt.Errorf("write deletion vectors: %w", err)
	}
	if err := st.WriteIfAbsent(ctx, p, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("write deletion vectors: %w", err)
	}
	return out, nil
}

func maxRowIndex(b *roaring64.Bitmap) *int64 {
	if b.IsEmpty() {
		return nil
	}
	return ptr(int64(b.Maximum()))
}

func ptr[T any](v T) *T { return &v }
