package tombstone_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
	"github.com/cdcapply/cdcapply/schema"
)

// The operations tests build real cdcapply tables through the apply
// engine, so the files have the real layout, then run the operations on
// them and read the result back with our reader and with delta-rs.

var opsNow = time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)

var opsLayout = func() *apply.Layout {
	l, err := apply.NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: false},
		{Name: "status", Type: delta.String, Nullable: true},
	}, []string{"id"})
	if err != nil {
		panic(err)
	}
	return l
}()

func seqBytes(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// change is one source change: op c/u/d, sequence, source time, offset.
func change(id int64, seq uint64, op, status string, ts time.Time, off int64) *apply.Change {
	c := &apply.Change{Seq: seqBytes(seq), Pos: apply.Position{Topic: "orders", Partition: 0, Offset: off}, Delete: op == "d",
		SourceTsMicros: ts.UnixMicro(), Values: []schema.Value{schema.Int(id), schema.String(status)}}
	if c.Delete {
		c.Values[1] = schema.Unavailable
	}
	c.Key = apply.EncodeKey(c.Values, opsLayout.Key)
	return c
}

// stream applies batches to a table the way the apply loop does, from
// the table's recorded position.
type stream struct {
	t     *testing.T
	store *storage.Local
	a     *apply.TableApplier
}

func newStream(t *testing.T, dir string) *stream {
	s := &stream{t: t, store: storage.NewLocal(dir)}
	s.reopen()
	return s
}

// reopen re-reads the table, as the apply loop does after a conflict.
func (s *stream) reopen() {
	s.t.Helper()
	newFiles := func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(s.store, l) }
	s.a = apply.NewTableApplier("orders", "p", delta.Open(s.store), newFiles, []string{"id"}, func() time.Time { return opsNow })
	if err := s.a.Open(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	if s.a.Layout() == nil {
		if err := s.a.SetLayout(opsLayout); err != nil {
			s.t.Fatal(err)
		}
	}
}

// apply commits changes as one batch at the next offsets.
func (s *stream) apply(changes ...*apply.Change) *apply.Result {
	s.t.Helper()
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	from, _ := s.a.Positions().Next(tp)
	for i, c := range changes {
		c.Pos.Offset = from + int64(i)
	}
	res, err := s.a.Apply(context.Background(), &apply.Batch{Changes: changes, Read: len(changes),
		Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: from, Next: from + int64(len(changes))}}})
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// rows returns "id status deleted" of every row of the latest version, by
// our reader, sorted.
func rows(t *testing.T, dir string) []string {
	t.Helper()
	s := newStream(t, dir)
	rf, err := apply.NewParquetRowFiles(s.store, s.a.Layout())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, add := range s.a.Snapshot().Files() {
		rs, err := rf.ReadRows(context.Background(), add)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%d %s %v", r.Values[0].I, r.Values[1].S, r.Deleted))
		}
	}
	sort.Strings(out)
	return out
}

// deltaRSRows reads the table with delta-rs and returns "id status
// deleted" per row, sorted.
func deltaRSRows(t *testing.T, dir string) []string {
	t.Helper()
	py := pyenv.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("..", "delta", "interop", "testdata", "read_table.py"), dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("delta-rs read of %s: %v\n%s", dir, err, errb.String())
	}
	var res struct {
		Rows []map[string]any `json:"rows"`
	}
	dec := json.NewDecoder(&out)
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, fmt.Sprintf("%v %v %v", r["id"], r["status"], r[apply.ColDeleted]))
	}
	sort.Strings(got)
	return got
}

func same(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func storageAt(dir string) *storage.Local { return storage.NewLocal(dir) }
