package datafile

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// streamProbe is a local storage that records the writes a streamed file
// reaches it in.
type streamProbe struct {
	*storage.Local
	writes, largest, total int64
}

func (p *streamProbe) WriteFrom(ctx context.Context, path string, ifAbsent bool, fill func(io.Writer) error) (int64, error) {
	return p.Local.WriteFrom(ctx, path, ifAbsent, func(w io.Writer) error {
		return fill(probeWriter{w, p})
	})
}

type probeWriter struct {
	w io.Writer
	p *streamProbe
}

func (w probeWriter) Write(b []byte) (int, error) {
	w.p.writes++
	w.p.largest = max(w.p.largest, int64(len(b)))
	w.p.total += int64(len(b))
	return w.w.Write(b)
}

// gathering hides the local storage's StreamWriter: a file is gathered in
// memory and stored with WriteIfAbsent.
type gathering struct{ storage.Storage }

// TestWriteStreamsIntoStorage checks that a data file reaches a storage
// that streams in parts as it is encoded, never handed over whole (by the
// flat writer and by parquet-go), that the add's size is the bytes
// written, and that a storage without streaming gets the same file.
func TestWriteStreamsIntoStorage(t *testing.T) {
	ctx := context.Background()
	flat := flatExtraLayout()
	nested := allTypes(t, MappingNone)
	pv := "p"
	for _, c := range []struct {
		name  string
		l     Layout
		rec   func() arrow.RecordBatch
		parts map[string]*string
		opts  []WriteOption
	}{
		{"flat", flat, func() arrow.RecordBatch { return flatExtraRecord(t, 20_000) }, nil,
			[]WriteOption{PlainValues(), Compression(Lz4Raw), PageBytes(4096), RowGroupRows(8192)}},
		{"parquet-go", nested, func() arrow.RecordBatch { return sampleRecord(t, nested, 5000) }, map[string]*string{"part": &pv},
			[]WriteOption{Compression(Snappy), PageBytes(4096)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := c.rec()
			defer rec.Release()
			if got := flatWritable(rec, writeOptions{plain: true}); got != (c.name == "flat") {
				t.Fatalf("flatWritable %v: the case does not take the writer it names", got)
			}
			dir := t.TempDir()
			probe := &streamProbe{Local: storage.NewLocal(dir)}
			add, err := Write(ctx, probe, c.l, rec, c.parts, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if probe.total != add.Size {
				t.Errorf("%d bytes reached the storage, the add says %d", probe.total, add.Size)
			}
			if probe.writes < 2 || probe.largest >= add.Size {
				t.Errorf("the %d-byte file reached the storage in %d writes, the largest %d bytes: held whole", add.Size, probe.writes, probe.largest)
			}
			fi, err := os.Stat(filepath.Join(dir, add.Path))
			if err != nil || fi.Size() != add.Size {
				t.Fatalf("the stored file: %v, size %v; the add says %d", err, fi, add.Size)
			}
			got, err := Read(ctx, probe, c.l, add)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()

			gdir := t.TempDir()
			gst := gathering{storage.NewLocal(gdir)}
			gadd, err := Write(ctx, gst, c.l, rec, c.parts, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if gadd.Size != add.Size || gadd.Stats != add.Stats {
				t.Errorf("gathered: size %d stats %s; streamed: %d %s", gadd.Size, gadd.Stats, add.Size, add.Stats)
			}
			want, err := Read(ctx, gst, c.l, gadd)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			if !array.RecordApproxEqual(got, want, array.WithNaNsEqual(true), array.WithAbsTolerance(0)) {
				t.Fatalf("the streamed file reads back as\n%v\nthe gathered one as\n%v", got, want)
			}
			for i := range int(rec.NumCols()) {
				if !array.ApproxEqual(got.Column(i), rec.Column(i), array.WithNaNsEqual(true), array.WithAbsTolerance(0)) {
					t.Errorf("column %s differs from what was written", rec.ColumnName(i))
				}
			}
		})
	}
}
