// Package opstest builds real cdcapply tables through the apply engine for
// the table operations' tests (packages tombstone and maintenance), so the
// files have the real layout: a two-column orders table (id, status),
// source changes, a stream that commits them as the apply loop does, and
// the rows read back by our reader and by delta-rs.
package opstest

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

// Now is the tests' clock.
var Now = time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)

// Layout is the orders table: id (the key), status.
var Layout = func() *apply.Layout {
	l, err := apply.NewLayout([]delta.StructField{
		{Name: "id", Type: delta.Long, Nullable: false},
		{Name: "status", Type: delta.String, Nullable: true},
	}, []string{"id"})
	if err != nil {
		panic(err)
	}
	return l
}()

// Seq is source sequence n.
func Seq(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Change is one source change: op c/u/d, sequence, source time, offset.
func Change(id int64, seq uint64, op, status string, ts time.Time, off int64) *apply.Change {
	c := &apply.Change{Seq: Seq(seq), Pos: apply.Position{Topic: "orders", Partition: 0, Offset: off}, Delete: op == "d",
		SourceTsMicros: ts.UnixMicro(), Values: []schema.Value{schema.Int(id), schema.String(status)}}
	if c.Delete {
		c.Values[1] = schema.Unavailable
	}
	c.Key = apply.EncodeKey(c.Values, Layout.Key)
	return c
}

// Stream applies batches to a table the way the apply loop does, from
// the table's recorded position.
type Stream struct {
	T     testing.TB
	Store *storage.Local
	A     *apply.TableApplier
	// Mode is the merge mode (copy-on-write when empty); with KeepFiles a
	// merge-on-read table keeps a file per batch and deletion vectors on
	// the older ones (no folding), as optimize's tests want. Both take
	// effect at the next Reopen.
	Mode      apply.MergeMode
	KeepFiles bool
}

// NewStream opens a stream on the table at dir (created by the first
// batch).
func NewStream(t testing.TB, dir string, mode apply.MergeMode, keepFiles bool) *Stream {
	s := &Stream{T: t, Store: storage.NewLocal(dir), Mode: mode, KeepFiles: keepFiles}
	s.Reopen()
	return s
}

// Reopen re-reads the table, as the apply loop does after a conflict.
func (s *Stream) Reopen() {
	s.T.Helper()
	newFiles := func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(s.Store, l) }
	s.A = apply.NewTableApplier("orders", "p", delta.Open(s.Store), newFiles, []string{"id"}, func() time.Time { return Now })
	if err := s.A.SetMergeMode(s.Mode); err != nil {
		s.T.Fatal(err)
	}
	if s.KeepFiles {
		s.A.SetFolding(false)
	}
	if err := s.A.Open(context.Background()); err != nil {
		s.T.Fatal(err)
	}
	if s.A.Layout() == nil {
		if err := s.A.SetLayout(Layout); err != nil {
			s.T.Fatal(err)
		}
	}
}

// Apply commits changes as one batch at the next offsets.
func (s *Stream) Apply(changes ...*apply.Change) *apply.Result {
	s.T.Helper()
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	from, _ := s.A.Positions().Next(tp)
	for i, c := range changes {
		c.Pos.Offset = from + int64(i)
	}
	res, err := s.A.Apply(context.Background(), &apply.Batch{Changes: changes, Read: len(changes),
		Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: from, Next: from + int64(len(changes))}}})
	if err != nil {
		s.T.Fatal(err)
	}
	return res
}

// Rows returns "id status deleted" of every row of the latest version, by
// our reader, sorted.
func Rows(t testing.TB, dir string) []string {
	t.Helper()
	s := NewStream(t, dir, "", false)
	rf, err := apply.NewParquetRowFiles(s.Store, s.A.Layout())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, add := range s.A.Snapshot().Files() {
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

// DeltaRSRows reads the table with delta-rs (the interop test's script)
// and returns "id status deleted" per row, sorted.
func DeltaRSRows(t testing.TB, dir string) []string {
	t.Helper()
	return deltaRSRows(t, dir, "delta", "interop", "testdata", "read_table.py")
}

// DeltaRSRowsDV is DeltaRSRows through delta-rs's query engine, the read
// path that applies deletion vectors (a merge-on-read table).
func DeltaRSRowsDV(t testing.TB, dir string) []string {
	t.Helper()
	return deltaRSRows(t, dir, "apply", "testdata", "read_dv_table.py")
}

// deltaRSRows runs the repository's script (its path below the root) on
// the table at dir.
func deltaRSRows(t testing.TB, dir string, script ...string) []string {
	t.Helper()
	py := pyenv.Python(t)
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join(append([]string{root}, script...)...), dir)
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

// Same reports whether two row lists are equal.
func Same(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
