// Package storage is the small file-system interface the Delta log and data
// files are written through: list, read, write-if-absent, write and delete.
//
// The local file system is the embedded default. Put-if-absent is what makes
// Delta's optimistic concurrency safe, so every implementation must make
// WriteIfAbsent atomic: either the whole file appears under the name, or the
// call fails with ErrExist and the existing file is untouched.
package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	pathpkg "path"
	"strings"
	"sync"
	"time"
)

// ErrNotExist is returned (wrapped) when a path does not exist.
var ErrNotExist = errors.New("file does not exist")

// ErrExist is returned (wrapped) by WriteIfAbsent when the path already exists.
var ErrExist = errors.New("file already exists")

// FileInfo describes one file returned by List.
type FileInfo struct {
	// Path is slash-separated and relative to the storage root.
	Path    string
	Size    int64
	ModTime time.Time
}

// Storage is a flat namespace of immutable-ish files addressed by
// slash-separated paths relative to a root (a table location).
type Storage interface {
	// List returns every file under dir (recursively), sorted by Path.
	// A missing dir yields an empty list, not an error.
	List(ctx context.Context, dir string) ([]FileInfo, error)
	// Read returns the whole content of path, or an error wrapping ErrNotExist.
	Read(ctx context.Context, path string) ([]byte, error)
	// WriteIfAbsent atomically creates path with data; if path exists it
	// returns an error wrapping ErrExist and leaves the file as it was.
	// It does not keep data after it returns: callers reuse the buffer.
	WriteIfAbsent(ctx context.Context, path string, data []byte) error
	// Write atomically creates or replaces path with data.
	Write(ctx context.Context, path string, data []byte) error
	// Delete removes path. Deleting a missing path is not an error.
	Delete(ctx context.Context, path string) error
	// Location names the root for error messages (a directory or URL).
	Location() string
}

// File is an open file read in parts.
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Mapped is implemented by a File whose bytes may be in memory (Local's,
// memory-mapped): Mapped returns them, or nil when they are not. A reader
// may slice them instead of calling ReadAt while the file is open; it must
// not write them nor keep them past Close.
type Mapped interface {
	Mapped() []byte
}

// ResidentDropper is implemented by a File whose pages a reader keeping it
// open across reads should let go of between them (Local's mapped files,
// whose pages otherwise count in the process's RSS while they stay mapped).
type ResidentDropper interface {
	DropResident()
}

// RangeReader is implemented by storages that can read parts of a file
// without reading all of it: a reader that needs a few pages of a large
// Parquet file (stored-row reads of merge-on-read) opens it instead of
// calling Read.
type RangeReader interface {
	// Open opens path for reading in parts, or returns an error wrapping
	// ErrNotExist.
	Open(ctx context.Context, path string) (File, error)
}

// Stater is implemented by storages that can describe one file without
// listing its folder: a reader polling a long Delta log for its next
// commit asks for that one name, where a listing reads every commit the
// log retention keeps (30 days of them by default).
type Stater interface {
	// Stat describes path, or returns an error wrapping ErrNotExist.
	Stat(ctx context.Context, path string) (FileInfo, error)
}

// Stat describes path: through the storage's Stater when it has one,
// else from a listing of its folder.
func Stat(ctx context.Context, st Storage, p string) (FileInfo, error) {
	if s, ok := st.(Stater); ok {
		return s.Stat(ctx, p)
	}
	dir, _ := pathpkg.Split(p)
	infos, err := st.List(ctx, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return FileInfo{}, err
	}
	for _, fi := range infos {
		if fi.Path == p {
			return fi, nil
		}
	}
	return FileInfo{}, fmt.Errorf("stat %s/%s: %w", st.Location(), p, ErrNotExist)
}

// Open opens path for reading in parts: through the storage's
// RangeReader when it has one, else by reading the whole file (wrappers
// such as fault injectors keep working, whole).
func Open(ctx context.Context, st Storage, path string) (File, error) {
	if rr, ok := st.(RangeReader); ok {
		return rr.Open(ctx, path)
	}
	data, err := st.Read(ctx, path)
	if err != nil {
		return nil, err
	}
	return memFile{bytes.NewReader(data)}, nil
}

type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

// StreamWriter is implemented by storages that can write a file as it is
// produced, so that the writer never holds the whole of it: a log
// checkpoint holds every live file and unexpired remove of the table, and
// grows with delta.deletedFileRetentionDuration.
type StreamWriter interface {
	// WriteFrom creates path with the bytes fill writes, as WriteIfAbsent
	// (ifAbsent) or Write would: atomically, so that no reader sees part
	// of the file, and nothing is left under path when fill fails. It
	// returns the number of bytes fill wrote.
	WriteFrom(ctx context.Context, path string, ifAbsent bool, fill func(io.Writer) error) (int64, error)
}

// WriteFrom creates path with the bytes fill writes: streamed through
// the storage's StreamWriter when it has one, else gathered in memory and
// written with WriteIfAbsent (ifAbsent) or Write. With ifAbsent, a path
// that exists yields an error wrapping ErrExist after fill has run, and
// the existing file is left as it was.
func WriteFrom(ctx context.Context, st Storage, path string, ifAbsent bool, fill func(io.Writer) error) (int64, error) {
	if sw, ok := st.(StreamWriter); ok {
		return sw.WriteFrom(ctx, path, ifAbsent, fill)
	}
	buf := gatherBuffers.Get().(*bytes.Buffer)
	defer putGatherBuffer(buf)
	buf.Reset()
	if err := fill(buf); err != nil {
		return 0, err
	}
	if ifAbsent {
		return int64(buf.Len()), st.WriteIfAbsent(ctx, path, buf.Bytes())
	}
	return int64(buf.Len()), st.Write(ctx, path, buf.Bytes())
}

// gatherBuffers holds the buffers WriteFrom gathers a file in for a
// storage without StreamWriter, reused from one file to the next (a
// storage does not keep the bytes it is given).
var gatherBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxGatherBuffer is the largest buffer kept for reuse: a rare huge file
// (a compaction, a checkpoint) does not pin its size.
const maxGatherBuffer = 64 << 20

func putGatherBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxGatherBuffer {
		gatherBuffers.Put(b)
	}
}
