package apply

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// refApplier opens a Parquet table of refLayout in store, in mode.
func refApplier(t *testing.T, store storage.Storage, mode MergeMode) *TableApplier {
	t.Helper()
	newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, func() time.Time { return time.UnixMilli(1_800_000_000_000) })
	if err := a.SetMergeMode(mode); err != nil {
		t.Fatal(err)
	}
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.Layout() == nil {
		if err := a.SetLayout(refLayout); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// moved is the create Debezium sends for a row whose primary key an update
// changed from oldID to id, under default replica identity: the TOASTed
// status the update left alone is unavailable, and the old key is named.
func moved(id, oldID int64, seq uint64, off int64) *Change {
	c := refChange(id, seq, "c", "", off)
	c.Values[1] = schema.Unavailable
	c.setOldKey(EncodeKey([]schema.Value{schema.Int(oldID)}, refLayout.Key))
	c.unavail = noteUnavailable(c.Values)
	return c
}

// TestPrimaryKeyChangeKeepsUnchangedColumns: a row moved to a new key
// keeps the columns the moving update left unavailable, taken from the
// old key's last version, wherever that is: the table (live, or the
// tombstone of the move's delete, applied before), an earlier change in
// the same batch, or the previous move of a chain. Without a source the
// column stays unresolved, as before. Both merge modes.
func TestPrimaryKeyChangeKeepsUnchangedColumns(t *testing.T) {
	cases := []struct {
		name    string
		batches [][]*Change
		want    []string // "id seq status deleted"
	}{{
		name: "old key in the table, delete and create in one batch",
		batches: [][]*Change{
			{refChange(1, 10, "c", "doc-1", 0)},
			{refChange(1, 20, "d", "", 1), moved(101, 1, 20, 2)},
		},
		want: []string{"1 20 doc-1 true", "101 20 doc-1 false"},
	}, {
		name: "the move's delete applied in an earlier batch (the old key's tombstone)",
		batches: [][]*Change{
			{refChange(1, 10, "c", "doc-1", 0)},
			{refChange(1, 20, "d", "", 1)},
			{moved(101, 1, 20, 2)},
		},
		want: []string{"1 20 doc-1 true", "101 20 doc-1 false"},
	}, {
		name: "the create before the old key's delete (another partition), later updated",
		batches: [][]*Change{
			{refChange(1, 10, "c", "doc-1", 0), refChange(1, 15, "u", "doc-1b", 1)},
			{moved(101, 1, 20, 2)},
			{refChange(1, 20, "d", "", 3)},
		},
		want: []string{"1 20 doc-1b true", "101 20 doc-1b false"},
	}, {
		name: "old key created and moved in one batch, then the new key updated leaving the column",
		batches: [][]*Change{
			{refChange(7, 1, "c", "seed", 0)},
			{refChange(1, 10, "c", "doc-1", 1), refChange(1, 20, "d", "", 2), moved(101, 1, 20, 3), func() *Change {
				c := refChange(101, 30, "u", "", 4)
				c.Values[1] = schema.Unavailable
				return c
			}()},
		},
		want: []string{"1 20 doc-1 true", "101 30 doc-1 false", "7 1 seed false"},
	}, {
		name: "a chain of moves in one batch",
		batches: [][]*Change{
			{refChange(1, 10, "c", "doc-1", 0)},
			{refChange(1, 20, "d", "", 1), moved(2, 1, 20, 2), refChange(2, 30, "d", "", 3), moved(3, 2, 30, 4)},
		},
		want: []string{"1 20 doc-1 true", "2 30 doc-1 true", "3 30 doc-1 false"},
	}, {
		name: "an old key newer than the move (changed since) is not a source",
		batches: [][]*Change{
			{refChange(1, 10, "c", "doc-1", 0), refChange(1, 40, "u", "doc-later", 1)},
			{moved(101, 1, 20, 2)},
		},
		want: []string{"1 40 doc-later false", "101 20  false"},
	}, {
		name: "an unknown old key leaves the column unresolved",
		batches: [][]*Change{
			{refChange(5, 10, "c", "x", 0)},
			{moved(101, 1, 20, 1)},
		},
		want: []string{"101 20  false", "5 10 x false"},
	}}
	for _, mode := range []MergeMode{CopyOnWrite, MergeOnRead} {
		for _, tc := range cases {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				store := storage.NewLocal(t.TempDir())
				a := refApplier(t, store, mode)
				off := int64(0)
				for i, changes := range tc.batches {
					n := int64(len(changes))
					if _, err := a.Apply(ctx, &Batch{Changes: changes, Ranges: rng(off, off+n), Read: int(n)}); err != nil {
						t.Fatalf("batch %d: %v", i, err)
					}
					off += n
				}
				rf, err := NewParquetRowFiles(store, refLayout)
				if err != nil {
					t.Fatal(err)
				}
				if got := tableRows(t, store, rf); strings.Join(got, "|") != strings.Join(tc.want, "|") {
					t.Fatalf("table:\n got %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

// TestEnginePrimaryKeyChangeHeader: through Kafka, the create of a moved
// row names its old key in Debezium's __debezium.oldkey header (a JSON
// object of the key columns, as Kafka Connect's default header converter
// writes it) and carries the column the update left alone as
// Debezium's placeholder; the table keeps the old key's value. A header
// that cannot be read is logged with the record's place and leaves the
// column unresolved, as before; nothing is quarantined.
func TestEnginePrimaryKeyChangeHeader(t *testing.T) {
	// With filler around them the moves arrive in one large poll, which
	// the engine decodes and projects ahead on both cores (the other
	// routing path).
	for _, filler := range []int{0, 4000} {
		t.Run(fmt.Sprintf("filler-%d", filler), func(t *testing.T) { primaryKeyChangeHeader(t, filler) })
	}
}

func primaryKeyChangeHeader(t *testing.T, filler int) {
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	var badOffset int64
	send := func(id int, lsn int64, op, status string, oldKey string) {
		k, v := dbzOrders(id, lsn, op, status)
		r := &kgo.Record{Topic: "orders", Key: k, Value: v}
		if oldKey != "" {
			r.Headers = []kgo.RecordHeader{{Key: "__debezium.context.taskId", Value: []byte("0")}, {Key: debezium.OldKeyHeader, Value: []byte(oldKey)}}
		}
		if err := p.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.ends[r.Partition] = r.Offset + 1
		if strings.Contains(oldKey, "not a number") {
			badOffset = r.Offset
		}
	}
	fill := func(from int) {
		for i := range filler / 2 {
			send(10_000+from+i, int64(1+from+i), "c", "f", "")
		}
	}
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	send(1, 100_000, "c", "doc-1", "")
	send(2, 100_001, "c", "doc-2", "")
	if filler > 0 {
		// The table exists before the large poll, so its records are
		// projected ahead (a poll that creates the table is not).
		_, stop := startEngineWith(t, testConfig(t, c.ListenAddrs(), dir), Logger(logger))
		waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
		stop()
	}
	fill(0)
	send(1, 100_010, "d", "", "")
	send(101, 100_010, "c", schema.Placeholder, `{"id":1}`)
	send(2, 100_020, "d", "", "")
	send(102, 100_020, "c", schema.Placeholder, `{"id":"not a number"}`)
	fill(filler / 2)

	e, stop := startEngineWith(t, testConfig(t, c.ListenAddrs(), dir), Logger(logger))
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	stop()
	if filler > 0 && e.projectedAhead.Load() == 0 {
		t.Fatalf("nothing was projected ahead (%d predecoded): the test did not exercise that path", e.predecodedUsed.Load())
	}
	var got []string
	for _, r := range readOrders(t, dir+"/orders") {
		if len(strings.Fields(r)[0]) < 5 { // not filler
			got = append(got, r)
		}
	}
	want := []string{"1 doc-1 true", "101 doc-1 false", "102 <nil> false", "2 doc-2 true"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("table:\n got %q\nwant %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if l := logs.String(); !strings.Contains(l, "cannot read the old key") || !strings.Contains(l, fmt.Sprintf("offset=%d", badOffset)) || !strings.Contains(l, "table=orders") {
		t.Fatalf("the unreadable header was not logged with its place (offset %d):\n%s", badOffset, l)
	}
	if q := quarantined(t, dir+"/orders"); len(q) != 0 {
		t.Fatalf("quarantined: %v", q)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
