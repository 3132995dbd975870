package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocalReadListDelete(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := NewLocal(dir)
	if _, err := s.Read(ctx, "missing"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("read missing: %v", err)
	}
	if files, err := s.List(ctx, "nothing-here"); err != nil || len(files) != 0 {
		t.Fatalf("list of a missing dir = %v, %v", files, err)
	}
	for _, p := range []string{"b/2", "a/1", "a/c/3"} {
		if err := s.Write(ctx, p, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Write(ctx, "a/1", []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	files, _ := s.List(ctx, "")
	var got []string
	for _, f := range files {
		got = append(got, f.Path)
	}
	if fmt.Sprint(got) != "[a/1 a/c/3 b/2]" {
		t.Fatalf("list = %v, want sorted [a/1 a/c/3 b/2]", got)
	}
	if b, _ := s.Read(ctx, "a/1"); string(b) != "replaced" {
		t.Fatalf("overwrite: %q", b)
	}
	if err := s.Delete(ctx, "a/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/1"); err != nil {
		t.Fatalf("deleting a missing file is not an error: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "1")); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
	// A path with ".." stays under the root.
	if err := s.Write(ctx, "../escape", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("a path escaped the root")
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); err != nil {
		t.Fatalf("the cleaned path should be under the root: %v", err)
	}
}

func TestFaultyCrashAndFail(t *testing.T) {
	ctx := context.Background()
	inner := NewLocal(t.TempDir())
	f := NewFaulty(inner)

	f.FailAt(1)
	if err := f.Write(ctx, "x", []byte("1")); !errors.Is(err, ErrInjected) {
		t.Fatalf("op 1: want ErrInjected, got %v", err)
	}
	if _, err := inner.Read(ctx, "x"); !errors.Is(err, ErrNotExist) {
		t.Fatal("a failed op must not take effect")
	}
	if err := f.Write(ctx, "x", []byte("2")); err != nil {
		t.Fatalf("op 2 after a one-off failure: %v", err)
	}

	f.CrashAt(3, true) // the write lands, then the process "dies"
	if err := f.WriteIfAbsent(ctx, "y", []byte("3")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("op 3: want ErrCrashed, got %v", err)
	}
	if b, err := inner.Read(ctx, "y"); err != nil || string(b) != "3" {
		t.Fatalf("crash-after op must take effect: %q %v", b, err)
	}
	if _, err := f.Read(ctx, "x"); !errors.Is(err, ErrCrashed) {
		t.Fatal("every op after a crash fails")
	}
	f.Restart()
	f.CrashAt(5, false)
	if err := f.Delete(ctx, "x"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("op 5: %v", err)
	}
	if _, err := inner.Read(ctx, "x"); err != nil {
		t.Fatal("a crash-before op must not take effect")
	}
	ops := f.Ops()
	if len(ops) != 5 || ops[0].Kind != OpWrite || ops[2].Kind != OpWriteIfAbsent || ops[4].Kind != OpDelete || f.Count() != 5 {
		t.Fatalf("op log = %v", ops)
	}
}

// TestOpenReadsParts: Open reads a file in parts through Local's
// RangeReader, and through Read (whole) for a storage without one; a
// missing file is ErrNotExist either way.
func TestOpenReadsParts(t *testing.T) {
	ctx := context.Background()
	l := NewLocal(t.TempDir())
	if err := l.Write(ctx, "d/f.bin", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	type onlyStorage struct{ Storage } // hides Local's Open
	for name, st := range map[string]Storage{"local": l, "whole": onlyStorage{l}} {
		f, err := Open(ctx, st, "d/f.bin")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		buf := make([]byte, 3)
		if n, err := f.ReadAt(buf, 4); err != nil || n != 3 || string(buf) != "456" || f.Size() != 10 {
			t.Errorf("%s: ReadAt(4) = %d %q %v, size %d; want 3 \"456\", size 10", name, n, buf, err, f.Size())
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if _, err := Open(ctx, st, "d/missing.bin"); !errors.Is(err, ErrNotExist) {
			t.Errorf("%s: open of a missing file: %v, want ErrNotExist", name, err)
		}
	}
}

// TestLocalFileMapped: Local's files are read from a memory mapping, with
// ReadAt's contract at the file's end, and neither read nor mapped once
// closed; an empty file opens and reads as empty.
func TestLocalFileMapped(t *testing.T) {
	ctx := context.Background()
	l := NewLocal(t.TempDir())
	if err := l.Write(ctx, "f.bin", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, "empty.bin", nil); err != nil {
		t.Fatal(err)
	}
	f, err := l.Open(ctx, "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	m, ok := f.(Mapped)
	if !ok || string(m.Mapped()) != "0123456789" {
		t.Fatalf("Mapped() = %v (%v), want the file's bytes", ok, m)
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 8); n != 2 || err != io.EOF || string(buf[:n]) != "89" {
		t.Errorf("ReadAt(8) of 4 bytes = %d %q %v, want 2 \"89\" EOF", n, buf[:n], err)
	}
	if n, err := f.ReadAt(buf, 10); n != 0 || err != io.EOF {
		t.Errorf("ReadAt(10) = %d %v, want 0 EOF", n, err)
	}
	if _, err := f.ReadAt(buf, -1); err == nil {
		t.Error("ReadAt(-1) succeeded")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Mapped() != nil {
		t.Error("still mapped after Close")
	}
	if _, err := f.ReadAt(buf, 0); err == nil {
		t.Error("ReadAt after Close succeeded")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	e, err := l.Open(ctx, "empty.bin")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.ReadAt(buf, 0); n != 0 || err != io.EOF || e.Size() != 0 {
		t.Errorf("empty file: ReadAt = %d %v, size %d; want 0 EOF 0", n, err, e.Size())
	}
	if err := e.Close(); err != nil {
		t.Error(err)
	}
}

// streamless hides Local's StreamWriter, so that WriteFrom takes its
// buffered path.
type streamless struct{ Storage }

// TestWriteFrom: a file written from a stream, by Local's StreamWriter
// and by the buffered path of a storage without one, appears whole under
// its name with the bytes fill wrote; if absent, an existing file is kept
// and ErrExist returned; a failing fill leaves neither the file nor a
// temporary one; otherwise an existing file is replaced.
func TestWriteFrom(t *testing.T) {
	ctx := context.Background()
	chunks := func(n int) func(io.Writer) error {
		return func(w io.Writer) error {
			for i := range n {
				if _, err := fmt.Fprintf(w, "chunk %d;", i); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var sb strings.Builder
	_ = chunks(20000)(&sb)
	want := sb.String()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		st   func(dir string) Storage
	}{
		{"local", func(dir string) Storage { return NewLocal(dir) }},
		{"buffered", func(dir string) Storage { return streamless{NewLocal(dir)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := tc.st(dir)
			n, err := WriteFrom(ctx, st, "_delta_log/01.checkpoint.parquet", true, chunks(20000))
			if err != nil || n != int64(len(want)) {
				t.Fatalf("write = %d, %v; want %d bytes", n, err, len(want))
			}
			b, err := st.Read(ctx, "_delta_log/01.checkpoint.parquet")
			if err != nil || string(b) != want {
				t.Fatalf("read %d bytes, %v; want what fill wrote", len(b), err)
			}
			if _, err := WriteFrom(ctx, st, "_delta_log/01.checkpoint.parquet", true, chunks(3)); !errors.Is(err, ErrExist) {
				t.Fatalf("second write if absent: want ErrExist, got %v", err)
			}
			if b, _ := st.Read(ctx, "_delta_log/01.checkpoint.parquet"); string(b) != want {
				t.Fatal("a write if absent changed the existing file")
			}
			_, err = WriteFrom(ctx, st, "_delta_log/02.checkpoint.parquet", true, func(w io.Writer) error {
				if err := chunks(5000)(w); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("failing fill: want its error, got %v", err)
			}
			if _, err := WriteFrom(ctx, st, "_delta_log/01.checkpoint.parquet", false, chunks(3)); err != nil {
				t.Fatal(err)
			}
			if b, _ := st.Read(ctx, "_delta_log/01.checkpoint.parquet"); string(b) != "chunk 0;chunk 1;chunk 2;" {
				t.Fatalf("write did not replace the file: %q", b)
			}
			ents, err := os.ReadDir(filepath.Join(dir, "_delta_log"))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 || ents[0].Name() != "01.checkpoint.parquet" {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Fatalf("files left: %v; want only 01.checkpoint.parquet (no failed file, no temporary one)", names)
			}
		})
	}
}

// TestWriteFromStartsWriteback checks a streamed write starts the
// writeback of what it wrote, megabyte by megabyte in order, leaving the
// rest to the fsync, and that a small write is left to the fsync whole;
// and that the file reads back as written with the real writeback.
func TestWriteFromStartsWriteback(t *testing.T) {
	ctx := context.Background()
	const size = 3*writebackBytes + writebackBytes/2
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	fill := func(w io.Writer) error {
		for off := 0; off < len(data); off += 4096 {
			if _, err := w.Write(data[off:min(off+4096, len(data))]); err != nil {
				return err
			}
		}
		return nil
	}
	type span struct{ off, n int64 }
	var spans []span
	real := writeback
	writeback = func(f *os.File, off, n int64) { spans = append(spans, span{off, n}) }
	defer func() { writeback = real }()
	st := NewLocal(t.TempDir())
	if _, err := WriteFrom(ctx, st, "part-0.parquet", true, fill); err != nil {
		t.Fatal(err)
	}
	var next int64
	for _, s := range spans {
		if s.off != next || s.n < writebackBytes {
			t.Fatalf("writeback started for %v: want contiguous ranges of at least %d bytes from 0", spans, writebackBytes)
		}
		next += s.n
	}
	if next > size || size-next >= writebackBytes {
		t.Fatalf("writeback started for %d of %d bytes (%v): want all but the last partial megabyte", next, size, spans)
	}
	spans = nil
	if err := st.WriteIfAbsent(ctx, "_delta_log/00.json", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if len(spans) != 0 {
		t.Fatalf("a 3-byte commit started writeback for %v", spans)
	}
	writeback = real
	if _, err := WriteFrom(ctx, st, "part-1.parquet", true, fill); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"part-0.parquet", "part-1.parquet"} {
		if b, err := st.Read(ctx, p); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("%s: read %d bytes (%v), not the %d written", p, len(b), err, len(data))
		}
	}
}

// BenchmarkWriteFromFsync streams a 7 MiB file (a merge-on-read change
// batch's data file in the 1M-key bench) into local storage and fsyncs
// it, with and without starting each megabyte's writeback as it is
// written: the write's time to durable is what a commit waits for.
func BenchmarkWriteFromFsync(b *testing.B) {
	ctx := context.Background()
	data := make([]byte, 7<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	fill := func(w io.Writer) error {
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := w.Write(data[off:min(off+64<<10, len(data))]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("writeback=%v", on), func(b *testing.B) {
			if !on {
				real := writeback
				writeback = func(*os.File, int64, int64) {}
				defer func() { writeback = real }()
			}
			st := NewLocal(b.TempDir())
			b.SetBytes(int64(len(data)))
			i := 0
			for b.Loop() {
				p := fmt.Sprintf("part-%d.parquet", i)
				if _, err := WriteFrom(ctx, st, p, true, fill); err != nil {
					b.Fatal(err)
				}
				if err := st.Delete(ctx, p); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
