package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/s3test"
)

// TestContract runs what every Storage promises (storage.go) against the
// local file system and against an S3-compatible server (scripts/s3.sh).
func TestContract(t *testing.T) {
	stores := map[string]func(t *testing.T) storage.Storage{
		"local": func(t *testing.T) storage.Storage { return storage.NewLocal(t.TempDir()) },
		"s3": func(t *testing.T) storage.Storage {
			cfg, err := storage.S3ConfigFromEnv(s3test.Location(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.ListPage = 2       // every listing here takes several pages
			cfg.PartSize = 5 << 20 // S3's smallest: write-from-large takes three parts
			st, err := storage.NewS3(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
	cases := []struct {
		name string
		run  func(t *testing.T, st storage.Storage)
	}{
		{"write-if-absent", contractWriteIfAbsent},
		{"write-if-absent-race", contractRace},
		{"read-list-delete", contractReadListDelete},
		{"open-read-at", contractOpen},
		{"write-from", contractWriteFrom},
		{"write-from-large", contractWriteFromLarge},
	}
	for _, name := range []string{"local", "s3"} {
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, stores[name](t)) })
			}
		})
	}
}

func contractWriteIfAbsent(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	if err := st.WriteIfAbsent(ctx, "_delta_log/00.json", []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := st.WriteIfAbsent(ctx, "_delta_log/00.json", []byte("second"))
	if !errors.Is(err, storage.ErrExist) {
		t.Fatalf("second write: want ErrExist, got %v", err)
	}
	if !strings.Contains(err.Error(), "_delta_log/00.json") {
		t.Errorf("the error does not name the file: %v", err)
	}
	b, err := st.Read(ctx, "_delta_log/00.json")
	if err != nil || string(b) != "first" {
		t.Fatalf("read = %q, %v; the loser must not change the file", b, err)
	}
	// Neither write left anything else behind (a temporary file).
	files, err := st.List(ctx, "_delta_log")
	if err != nil || len(files) != 1 || files[0].Path != "_delta_log/00.json" || files[0].Size != 5 {
		t.Fatalf("list = %+v, %v; want the one file of 5 bytes", files, err)
	}
}

// contractRace: of many writers racing for one name exactly one wins, and
// the file holds the winner's bytes; repeated, since a store that checks
// and stores in two steps loses only now and then.
func contractRace(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		const n = 8
		name := fmt.Sprintf("_delta_log/%020d.json", round)
		var wg sync.WaitGroup
		wins := make(chan int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				err := st.WriteIfAbsent(ctx, name, []byte(fmt.Sprintf("writer-%02d", i)))
				switch {
				case err == nil:
					wins <- i
				case !errors.Is(err, storage.ErrExist):
					t.Errorf("round %d writer %d: %v", round, i, err)
				}
			}(i)
		}
		wg.Wait()
		close(wins)
		var winners []int
		for w := range wins {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: winners = %v, want exactly one", round, winners)
		}
		b, err := st.Read(ctx, name)
		if err != nil || string(b) != fmt.Sprintf("writer-%02d", winners[0]) {
			t.Fatalf("round %d: file holds %q (%v), winner was %d", round, b, err, winners[0])
		}
	}
}

func contractReadListDelete(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	if _, err := st.Read(ctx, "missing"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("read missing: %v", err)
	}
	if _, err := storage.Open(ctx, st, "missing"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("open missing: %v", err)
	}
	if got, err := st.List(ctx, "_delta_log"); err != nil || len(got) != 0 {
		t.Fatalf("list of a missing folder = %v, %v; want empty", got, err)
	}
	files := map[string]string{
		"_delta_log/00000000000000000000.json": "{}",
		"_delta_log/00000000000000000001.json": "{\"a\":1}",
		"_delta_log/_sidecars/s.parquet":       "side",
		"_delta_log2/x":                        "not in the log",
		"part-00000.parquet":                   "data",
		"deleted=true/part 01$.parquet":        "odd name",
	}
	for p, b := range files {
		if err := st.Write(ctx, p, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := st.List(ctx, "_delta_log")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range list {
		got = append(got, fmt.Sprintf("%s:%d", f.Path, f.Size))
		if f.ModTime.IsZero() {
			t.Errorf("%s has no modification time", f.Path)
		}
	}
	want := "_delta_log/00000000000000000000.json:2 _delta_log/00000000000000000001.json:7 _delta_log/_sidecars/s.parquet:4"
	if strings.Join(got, " ") != want {
		t.Fatalf("list _delta_log = %v\nwant %s", got, want)
	}
	all, err := st.List(ctx, "")
	if err != nil || len(all) != len(files) {
		t.Fatalf("list of the root = %v, %v; want the %d files", all, err, len(files))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Path >= all[i].Path {
			t.Fatalf("list is not sorted: %q before %q", all[i-1].Path, all[i].Path)
		}
	}
	for _, f := range list {
		fi, err := storage.Stat(ctx, st, f.Path)
		if err != nil || fi.Path != f.Path || fi.Size != f.Size || !fi.ModTime.Equal(f.ModTime) {
			t.Fatalf("stat %s = %+v, %v; the listing has %+v", f.Path, fi, err, f)
		}
	}
	for _, p := range []string{"_delta_log/00000000000000000002.json", "_delta_log/_sidecars", "_delta_log"} {
		if _, err := storage.Stat(ctx, st, p); !errors.Is(err, storage.ErrNotExist) {
			t.Fatalf("stat %s (no such file): %v", p, err)
		}
	}
	if b, err := st.Read(ctx, "deleted=true/part 01$.parquet"); err != nil || string(b) != "odd name" {
		t.Fatalf("read a name that needs escaping = %q, %v", b, err)
	}
	if err := st.Write(ctx, "part-00000.parquet", []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	if b, _ := st.Read(ctx, "part-00000.parquet"); string(b) != "replaced" {
		t.Fatalf("write did not replace: %q", b)
	}
	for i := 0; i < 2; i++ { // a second delete of the same path is not an error
		if err := st.Delete(ctx, "part-00000.parquet"); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if _, err := st.Read(ctx, "part-00000.parquet"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("read after delete: %v", err)
	}
	if _, err := st.Read(ctx, "../escape"); err == nil {
		t.Fatal("a path above the root was read")
	}
}

func contractOpen(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if err := st.WriteIfAbsent(ctx, "f.parquet", data); err != nil {
		t.Fatal(err)
	}
	f, err := storage.Open(ctx, st, "f.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(data)) {
		t.Fatalf("size %d, want %d", f.Size(), len(data))
	}
	buf := make([]byte, 25)
	if n, err := f.ReadAt(buf, 4013); n != 25 || err != nil || !bytes.Equal(buf, data[4013:4038]) {
		t.Fatalf("ReadAt(25 at 4013) = %d, %v, %q", n, err, buf[:n])
	}
	n, err := f.ReadAt(buf, int64(len(data))-10)
	if n != 10 || err != io.EOF || !bytes.Equal(buf[:10], data[len(data)-10:]) {
		t.Fatalf("ReadAt past the end = %d, %v; want 10, io.EOF", n, err)
	}
	if n, err := f.ReadAt(buf, int64(len(data))); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func contractWriteFrom(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	fill := func(w io.Writer) error { _, err := io.WriteString(w, "streamed"); return err }
	if n, err := storage.WriteFrom(ctx, st, "s.json", true, fill); err != nil || n != 8 {
		t.Fatalf("WriteFrom = %d, %v", n, err)
	}
	if _, err := storage.WriteFrom(ctx, st, "s.json", true, fill); !errors.Is(err, storage.ErrExist) {
		t.Fatalf("second WriteFrom if absent: %v", err)
	}
	boom := errors.New("boom")
	if _, err := storage.WriteFrom(ctx, st, "failed.json", true, func(w io.Writer) error {
		io.WriteString(w, "part")
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failing fill: %v", err)
	}
	if _, err := st.Read(ctx, "failed.json"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("a failed fill left a file: %v", err)
	}
	if b, _ := st.Read(ctx, "s.json"); string(b) != "streamed" {
		t.Fatalf("s.json = %q", b)
	}
}

// contractWriteFromLarge: a streamed write larger than S3's part size
// (a multipart upload there) appears whole, a second one if absent is
// refused and leaves the first, and a fill that fails after several
// megabytes leaves nothing.
func contractWriteFromLarge(t *testing.T, st storage.Storage) {
	ctx := context.Background()
	const size = 11<<20 + 12345
	fillWith := func(seed byte, failAfter int) func(io.Writer) error {
		return func(w io.Writer) error {
			chunk := make([]byte, 64<<10)
			for n := 0; n < size; n += len(chunk) {
				if failAfter > 0 && n >= failAfter {
					return errors.New("fill failed")
				}
				for i := range chunk {
					chunk[i] = seed + byte((n+i)%251)
				}
				k := min(len(chunk), size-n)
				if _, err := w.Write(chunk[:k]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if n, err := storage.WriteFrom(ctx, st, "big.checkpoint.parquet", true, fillWith(1, 0)); err != nil || n != size {
		t.Fatalf("WriteFrom = %d, %v", n, err)
	}
	if _, err := storage.WriteFrom(ctx, st, "big.checkpoint.parquet", true, fillWith(2, 0)); !errors.Is(err, storage.ErrExist) {
		t.Fatalf("a second large WriteFrom if absent: %v, want ErrExist", err)
	}
	b, err := st.Read(ctx, "big.checkpoint.parquet")
	if err != nil || len(b) != size {
		t.Fatalf("read back %d bytes, %v; want %d", len(b), err, size)
	}
	for i, c := range b {
		if c != 1+byte(i%251) {
			t.Fatalf("byte %d is %d, want the first writer's %d", i, c, 1+byte(i%251))
		}
	}
	if _, err := storage.WriteFrom(ctx, st, "failed-big.parquet", true, fillWith(3, 7<<20)); err == nil {
		t.Fatal("a fill that failed was written")
	}
	if _, err := st.Read(ctx, "failed-big.parquet"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("a fill failed after 7 MiB left an object: %v", err)
	}
}
