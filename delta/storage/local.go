package storage

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// TempPrefix starts the name of every temporary file Local writes before it
// links or renames it into place. A crash can leave such files behind; they
// are never referenced by the log and vacuum may delete them.
const TempPrefix = ".cdcapply-tmp-"

// Local is Storage on the local file system rooted at a directory.
type Local struct {
	root string
}

// NewLocal returns local storage rooted at dir. The directory is created on
// the first write, not here, so opening a missing table is not a side effect.
func NewLocal(dir string) *Local {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return &Local{root: abs}
}

// Location returns the root directory.
func (l *Local) Location() string { return l.root }

func (l *Local) full(p string) (string, error) {
	clean := path.Clean("/" + p)
	if clean == "/" && p != "" && p != "." && p != "/" {
		return "", fmt.Errorf("resolve path %q: outside %s", p, l.root)
	}
	return filepath.Join(l.root, filepath.FromSlash(clean)), nil
}

// List implements Storage.
func (l *Local) List(ctx context.Context, dir string) ([]FileInfo, error) {
	base, err := l.full(dir)
	if err != nil {
		return nil, err
	}
	var out []FileInfo
	err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		out = append(out, FileInfo{Path: filepath.ToSlash(rel), Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s/%s: %w", l.root, dir, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Stat implements Stater.
func (l *Local) Stat(ctx context.Context, p string) (FileInfo, error) {
	full, err := l.full(p)
	if err != nil {
		return FileInfo{}, err
	}
	info, err := os.Stat(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return FileInfo{}, fmt.Errorf("stat %s: %w", full, ErrNotExist)
		}
		return FileInfo{}, fmt.Errorf("stat %s: %w", full, err)
	}
	if info.IsDir() {
		return FileInfo{}, fmt.Errorf("stat %s: a directory: %w", full, ErrNotExist)
	}
	rel, err := filepath.Rel(l.root, full)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Path: filepath.ToSlash(rel), Size: info.Size(), ModTime: info.ModTime()}, nil
}

// Open implements RangeReader.
func (l *Local) Open(ctx context.Context, p string) (File, error) {
	full, err := l.full(p)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open %s: %w", full, ErrNotExist)
		}
		return nil, fmt.Errorf("open %s: %w", full, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", full, err)
	}
	lf := &localFile{f: f, size: info.Size()}
	if lf.data = mapFile(f, lf.size); lf.data != nil {
		// The mapping outlives the descriptor: a cache of open data
		// files holds no descriptors.
		f.Close()
		lf.f = nil
	}
	return lf, nil
}

// localFile reads a file opened by Local.Open: from its read-only memory
// mapping where the system maps it, else with pread. Data files never
// change once written (a vacuum unlinks them, which leaves a mapping
// valid), so a mapping sees the bytes a read would. A stored-row read of
// merge-on-read touches a few values of most pages of a file batch after
// batch; from the mapping each page costs neither a system call nor a
// copy (Mapped).
type localFile struct {
	f    *os.File // nil once mapped
	data []byte   // the mapping, nil if none
	size int64
}

func (f *localFile) Size() int64 { return f.size }

// Mapped returns the file's bytes while the file is open. They must not
// be written, nor kept past Close: unmapped memory faults when touched.
func (f *localFile) Mapped() []byte { return f.data }

// DropResident takes the mapping's pages out of the process's resident
// set (they stay in the page cache): a reader that keeps files mapped
// across batches calls it between them, so that the table's pages do not
// count in the process's RSS for as long as the file stays open.
func (f *localFile) DropResident() {
	if f.data != nil {
		dropResident(f.data)
	}
}

func (f *localFile) ReadAt(p []byte, off int64) (int, error) {
	if f.data == nil {
		if f.f == nil {
			return 0, os.ErrClosed
		}
		return f.f.ReadAt(p, off)
	}
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	if off >= int64(len(f.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *localFile) Close() error {
	if f.data != nil {
		b := f.data
		f.data = nil
		return unmapFile(b)
	}
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// Read implements Storage.
func (l *Local) Read(ctx context.Context, p string) ([]byte, error) {
	full, err := l.full(p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w", full, ErrNotExist)
		}
		return nil, fmt.Errorf("read %s: %w", full, err)
	}
	return b, nil
}

// writeTemp writes data to a fresh temporary file next to full and fsyncs it.
func writeTemp(full string, data []byte) (string, error) {
	tmp, _, err := writeTempWith(full, func(f io.Writer) error {
		_, err := f.Write(data)
		return err
	})
	return tmp, err
}

// writeTempFrom writes what fill writes to a fresh temporary file next to
// full, through a buffer, and fsyncs it. It returns the file and the
// bytes written; on error no temporary file is left.
func writeTempFrom(full string, fill func(io.Writer) error) (string, int64, error) {
	return writeTempWith(full, func(f io.Writer) error {
		bw := streamBuffers.Get().(*bufio.Writer)
		bw.Reset(f)
		defer func() {
			bw.Reset(nil) // the file is not kept alive by the pool
			streamBuffers.Put(bw)
		}()
		if err := fill(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// writeTempWith creates a fresh temporary file next to full, lets write
// fill it, and fsyncs it; on error it removes it.
func writeTempWith(full string, write func(io.Writer) error) (string, int64, error) {
	dir := filepath.Dir(full)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, TempPrefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", 0, err
	}
	cw := &countingWriter{f: f}
	err = write(cw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", 0, err
	}
	return tmp, cw.n, nil
}

// streamBuffer is the buffer between a streamed write's producer and its
// file: large enough that the producer's small writes do not each cost a
// system call.
const streamBuffer = 1 << 20

// streamBuffers keeps the streamed writes' buffers: the engine streams a
// data file every batch, and a fresh megabyte each time is memory the
// system must hand over and zero again.
var streamBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, streamBuffer) }}

// countingWriter counts what is written to a temporary file and, once a
// write's bytes reach writebackBytes, starts their writeback
// (startWriteback) so the fsync that ends the file waits for less.
type countingWriter struct {
	f *os.File
	n int64
	// pending is the count of bytes written since writeback was last
	// started: the file's last pending bytes.
	pending int64
}

// writebackBytes is how many written bytes start their writeback: a
// streamed write's buffer (streamBuffer) each time it is flushed. A small
// file (a commit, a deletion vector) is left to its fsync whole.
const writebackBytes = streamBuffer

// writeback is startWriteback; tests replace it to see the ranges.
var writeback = startWriteback

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	c.n += int64(n)
	c.pending += int64(n)
	if c.pending >= writebackBytes {
		writeback(c.f, c.n-c.pending, c.pending)
		c.pending = 0
	}
	return n, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteIfAbsent implements Storage. The content is written to a temporary
// file and fsynced first, then hard-linked to the final name: link fails with
// EEXIST if another writer won, so a reader never sees a partial file.
func (l *Local) WriteIfAbsent(ctx context.Context, p string, data []byte) error {
	full, err := l.full(p)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(full, data)
	if err != nil {
		return fmt.Errorf("write %s: %w", full, err)
	}
	return place(tmp, full, true)
}

// Write implements Storage with temp-then-rename.
func (l *Local) Write(ctx context.Context, p string, data []byte) error {
	full, err := l.full(p)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(full, data)
	if err != nil {
		return fmt.Errorf("write %s: %w", full, err)
	}
	return place(tmp, full, false)
}

// WriteFrom implements StreamWriter: fill writes to a temporary file,
// which is then put in place as WriteIfAbsent (ifAbsent) or Write puts
// theirs.
func (l *Local) WriteFrom(ctx context.Context, p string, ifAbsent bool, fill func(io.Writer) error) (int64, error) {
	full, err := l.full(p)
	if err != nil {
		return 0, err
	}
	tmp, n, err := writeTempFrom(full, fill)
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", full, err)
	}
	if err := place(tmp, full, ifAbsent); err != nil {
		if errors.Is(err, ErrExist) {
			return n, err
		}
		return 0, err
	}
	return n, nil
}

// place puts the temporary file tmp under full, by a hard link that fails
// if full exists (ifAbsent; tmp is then removed) or by a rename, and
// syncs the directory.
func place(tmp, full string, ifAbsent bool) error {
	if ifAbsent {
		defer os.Remove(tmp)
		if err := os.Link(tmp, full); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("write %s: %w", full, ErrExist)
			}
			return fmt.Errorf("write %s: %w", full, err)
		}
	} else if err := os.Rename(tmp, full); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", full, err)
	}
	if err := syncDir(filepath.Dir(full)); err != nil {
		return fmt.Errorf("sync dir of %s: %w", full, err)
	}
	return nil
}

// Delete implements Storage.
func (l *Local) Delete(ctx context.Context, p string) error {
	full, err := l.full(p)
	if err != nil {
		return err
	}
	if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", full, err)
	}
	return nil
}

// IsTemp reports whether a listed path is a temporary file of an unfinished write.
func IsTemp(p string) bool { return strings.HasPrefix(path.Base(p), TempPrefix) }
