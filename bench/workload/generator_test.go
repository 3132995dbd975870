package workload

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/schema"
)

// busy is a small workload with every irregularity turned up, so a few
// thousand records exercise each of them many times.
func busy(seed uint64) Config {
	c := Default()
	c.Seed = seed
	c.Keys, c.SnapshotKeys, c.Events = 300, 60, 6000
	c.Partitions = 3
	c.HotKeys, c.HotFraction = 10, 0.3
	c.Insert, c.Update, c.Delete = 0.15, 0.65, 0.2
	c.Revival, c.UnknownDeletes = 0.2, 0.05
	c.OutOfOrder, c.OutOfOrderWindow = 0.08, 40
	c.Late, c.LateDelay = 0.02, 500
	c.Duplicates, c.Replays, c.ReplayLength = 0.05, 0.01, 30
	c.HeartbeatEvery = 250
	c.StringWidth, c.DocWidth = 8, 40
	return c
}

func drain(t testing.TB, g *Generator) []Event {
	t.Helper()
	var out []Event
	var ev Event
	for g.Next(&ev) {
		out = append(out, ev)
	}
	return out
}

func newGen(t testing.TB, c Config) *Generator {
	t.Helper()
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDeterministicForASeed(t *testing.T) {
	a, b := drain(t, newGen(t, busy(7))), drain(t, newGen(t, busy(7)))
	if len(a) != len(b) {
		t.Fatalf("same seed: %d vs %d records", len(a), len(b))
	}
	for i := range a {
		ra, rb := a[i].Record, b[i].Record
		if ra.Topic != rb.Topic || ra.Partition != rb.Partition || ra.Offset != rb.Offset ||
			!bytes.Equal(ra.Key, rb.Key) || !bytes.Equal(ra.Value, rb.Value) || !ra.Timestamp.Equal(rb.Timestamp) {
			t.Fatalf("same seed: record %d differs:\n%s\n%s", i, ra.Value, rb.Value)
		}
	}
	c := drain(t, newGen(t, busy(8)))
	same := len(c) == len(a)
	for i := 0; same && i < len(a); i++ {
		same = bytes.Equal(a[i].Record.Value, c[i].Record.Value)
	}
	if same {
		t.Fatal("another seed gave the same stream")
	}
}

// TestDecodesAsMeant decodes every record with the real decoder and checks
// it reads exactly the change the generator meant, and that the stream's
// counts are what the records are.
func TestDecodesAsMeant(t *testing.T) {
	ctx := context.Background()
	g := newGen(t, busy(3))
	dec, err := debezium.New(debezium.SourceConnector(debezium.ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	var n Counts
	nextOffset := map[string]int64{}
	for _, ev := range drain(t, g) {
		rec := ev.Record
		tp := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
		if rec.Offset != nextOffset[tp] {
			t.Fatalf("%s: offset %d, want %d", tp, rec.Offset, nextOffset[tp])
		}
		nextOffset[tp]++
		got, err := dec.Decode(ctx, &rec)
		if err != nil {
			t.Fatalf("decode %s@%d: %v\n%s", tp, rec.Offset, err, rec.Value)
		}
		if got.Class != ev.Class {
			t.Fatalf("%s@%d: class %v, want %v", tp, rec.Offset, got.Class, ev.Class)
		}
		n.Records++
		switch ev.Class {
		case debezium.ClassHeartbeat:
			n.Heartbeats++
			continue
		case debezium.ClassKafkaTombstone:
			n.KafkaTombstones++
			if ev.Change.Op != debezium.OpDelete || partitionOf(rec.Key, 3) != rec.Partition {
				t.Fatalf("tombstone at %s@%d does not follow a delete of its key", tp, rec.Offset)
			}
			continue
		}
		want := ev.Change
		switch ev.Copy {
		case Original:
			n.Changes++
		case Duplicate:
			n.Duplicates++
		case Replay:
			n.Replays++
		}
		if ev.Displaced {
			n.Displaced++
		}
		if got.Op != want.Op || got.Seq.Compare(want.Seq) != 0 || !bytes.Equal(got.Seq.Key(), want.Seq.Key()) ||
			got.SourceTsMs != want.SourceTsMs || got.Table.Table != g.Config().Table || got.Table.Schema != g.Config().Schema {
			t.Fatalf("%s@%d: decoded op %v seq %v ts %d table %v, want op %v seq %v ts %d",
				tp, rec.Offset, got.Op, got.Seq, got.SourceTsMs, got.Table, want.Op, want.Seq, want.SourceTsMs)
		}
		if len(got.Key.Values) != 1 || !got.Key.Values[0].Equal(schema.Int(want.ID)) {
			t.Fatalf("%s@%d: key %v, want id %d", tp, rec.Offset, got.Key.Values, want.ID)
		}
		if partitionOf(rec.Key, 3) != rec.Partition {
			t.Fatalf("%s@%d: key %d is not in its hash partition", tp, rec.Offset, want.ID)
		}
		if want.Op == debezium.OpDelete {
			if got.After.Present() || !got.Before.Present() || !got.Before.Values[0].Equal(schema.Int(want.ID)) {
				t.Fatalf("%s@%d: delete images: before %v after %v", tp, rec.Offset, got.Before.Values, got.After.Values)
			}
			continue
		}
		if got.Before.Present() {
			t.Fatalf("%s@%d: %v carries a before image", tp, rec.Offset, want.Op)
		}
		if len(got.After.Values) != len(g.tbl.cols) {
			t.Fatalf("%s@%d: %d columns", tp, rec.Offset, len(got.After.Values))
		}
		for c, v := range got.After.Values {
			stamp := want.valStamp
			if c == g.tbl.docCol() {
				stamp = want.docStamp
			}
			exp := g.tbl.value(want.ID, stamp, c)
			if c == g.tbl.docCol() && want.DocUnavailable {
				exp = schema.Unavailable
				if ev.Copy == Original {
					n.Placeholders++
				}
			}
			if !v.Equal(exp) {
				t.Fatalf("%s@%d column %s: decoded %#v, want %#v", tp, rec.Offset, g.tbl.cols[c].name, v, exp)
			}
		}
	}
	c := g.Oracle().Counts()
	if c.Records != n.Records || c.Heartbeats != n.Heartbeats || c.KafkaTombstones != n.KafkaTombstones ||
		c.Changes != n.Changes || c.Duplicates != n.Duplicates || c.Replays < n.Replays || c.Displaced != n.Displaced ||
		c.Placeholders != n.Placeholders {
		t.Errorf("counts %+v\nrecords say %+v", c, n)
	}
	if c.Changes != c.Reads+c.Creates+c.Updates+c.Deletes || c.Changes != g.cfg.SnapshotKeys+g.cfg.Events {
		t.Errorf("changes %d != reads+creates+updates+deletes %d, or != snapshot+events", c.Changes, c.Reads+c.Creates+c.Updates+c.Deletes)
	}
	if c.SkippedRecords() != c.KafkaTombstones-0 && g.HeartbeatTopic() != g.Topic() {
		// Replayed tombstones are tombstones: skipped like the first ones.
		t.Errorf("skipped %d, want the %d Kafka tombstones", c.SkippedRecords(), c.KafkaTombstones)
	}
	// Every feature must have happened, or the test checks less than it says.
	for name, v := range map[string]int64{"reads": c.Reads, "creates": c.Creates, "updates": c.Updates, "deletes": c.Deletes,
		"unknown deletes": c.UnknownDeletes, "revivals": c.Revivals, "duplicates": c.Duplicates, "replays": c.Replays,
		"kafka tombstones": c.KafkaTombstones, "heartbeats": c.Heartbeats, "displaced": c.Displaced, "placeholders": c.Placeholders} {
		if v == 0 {
			t.Errorf("no %s in the stream", name)
		}
	}
}

// naiveRow is the reference model: a key's row after applying its changes
// one by one in sequence order.
type naiveRow struct {
	seq     debezium.Sequence
	deleted bool
	values  []schema.Value
}

// naiveTable decodes every record and applies each key's changes sorted by
// sequence, with the rules stated plainly: an equal sequence is a replay,
// an unavailable value keeps the previous one, a delete keeps the last
// values (NULL for a key never seen).
func naiveTable(t *testing.T, events []Event, ncols int) map[int64]*naiveRow {
	t.Helper()
	ctx := context.Background()
	dec, err := debezium.New(debezium.SourceConnector(debezium.ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[int64][]debezium.Change{}
	for i := range events {
		ch, err := dec.Decode(ctx, &events[i].Record)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Class != debezium.ClassChange {
			continue
		}
		id := ch.Key.Values[0].I
		byKey[id] = append(byKey[id], ch)
	}
	out := map[int64]*naiveRow{}
	for id, chs := range byKey {
		sort.SliceStable(chs, func(i, j int) bool { return chs[i].Seq.Compare(chs[j].Seq) < 0 })
		var row *naiveRow
		for _, ch := range chs {
			if row != nil && ch.Seq.Compare(row.seq) == 0 {
				continue
			}
			next := &naiveRow{seq: ch.Seq, deleted: ch.Op == debezium.OpDelete, values: make([]schema.Value, ncols)}
			next.values[0] = schema.Int(id)
			for c := 1; c < ncols; c++ {
				var v schema.Value
				if ch.Op == debezium.OpDelete {
					v = schema.Unavailable
				} else {
					v = ch.After.Values[c]
				}
				if v.IsUnavailable() {
					v = schema.Null
					if row != nil {
						v = row.values[c]
					}
				}
				next.values[c] = v
			}
			row = next
		}
		out[id] = row
	}
	return out
}

func TestOracleEqualsNaiveReference(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		cfg := busy(seed)
		if seed%2 == 0 {
			cfg.Keys, cfg.SnapshotKeys, cfg.HotKeys = 40, 0, 5 // every key revisited many times
		}
		g := newGen(t, cfg)
		events := drain(t, g)
		naive := naiveTable(t, events, len(g.tbl.cols))
		o := g.Oracle()
		if o.Len() != int64(len(naive)) {
			t.Fatalf("seed %d: oracle holds %d rows, reference %d", seed, o.Len(), len(naive))
		}
		o.Rows(func(r Row) bool {
			n := naive[r.ID]
			if n == nil {
				t.Fatalf("seed %d: oracle has key %d, reference does not", seed, r.ID)
			}
			if !bytes.Equal(r.Seq, n.seq.Key()) || r.Deleted != n.deleted {
				t.Fatalf("seed %d key %d: oracle seq %x deleted %v, reference %v %v", seed, r.ID, r.Seq, r.Deleted, n.seq, n.deleted)
			}
			for c := range r.Values {
				if !r.Values[c].Equal(n.values[c]) {
					t.Fatalf("seed %d key %d column %d: oracle %#v, reference %#v", seed, r.ID, c, r.Values[c], n.values[c])
				}
			}
			return true
		})
	}
}

func TestConfigRejectsNonsense(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"two columns":       func(c *Config) { c.Columns = 2 },
		"fraction above 1":  func(c *Config) { c.Late = 1.5 },
		"negative events":   func(c *Config) { c.Events = -1 },
		"snapshot too big":  func(c *Config) { c.SnapshotKeys = c.Keys + 1 },
		"null percent 101%": func(c *Config) { c.NullPercent = 101 },
	} {
		c := Default()
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestOracleForEqualsGeneratorOracle(t *testing.T) {
	cfg := busy(9)
	g := newGen(t, cfg)
	drain(t, g)
	o, err := OracleFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.Counts() != g.Oracle().Counts() || o.Len() != g.Oracle().Len() {
		t.Fatalf("counts %+v\nwant   %+v", o.Counts(), g.Oracle().Counts())
	}
	g.Oracle().Rows(func(want Row) bool {
		got, ok := o.Row(want.ID)
		if !ok || !bytes.Equal(got.Seq, want.Seq) || got.Deleted != want.Deleted || fmt.Sprint(got.Values) != fmt.Sprint(want.Values) {
			t.Fatalf("key %d: %+v, want %+v", want.ID, got, want)
		}
		return true
	})
}

// TestNextSnapshotSplitsTheStream: taking the snapshot phase with
// NextSnapshot and the rest with Next gives the same records as Next
// alone; the first part holds every snapshot read and, of the change
// records, only reads; the second part holds no first delivery of a read.
func TestNextSnapshotSplitsTheStream(t *testing.T) {
	cfg := busy(7)
	cfg.SnapshotKeys = 200
	cfg.HeartbeatEvery = 50 // heartbeats fall inside the snapshot phase
	whole := drain(t, newGen(t, cfg))
	g := newGen(t, cfg)
	var snap []Event
	var ev Event
	for g.NextSnapshot(&ev) {
		snap = append(snap, ev)
	}
	if g.NextSnapshot(&ev) {
		t.Fatal("NextSnapshot gave a record after reporting the end of the snapshot phase")
	}
	rest := drain(t, g)
	if len(snap)+len(rest) != len(whole) {
		t.Fatalf("%d + %d records, want %d", len(snap), len(rest), len(whole))
	}
	for i, ev := range append(snap, rest...) {
		if !bytes.Equal(ev.Record.Value, whole[i].Record.Value) || ev.Record.Topic != whole[i].Record.Topic {
			t.Fatalf("record %d differs from the unsplit stream", i)
		}
	}
	reads, heartbeats := 0, 0
	for _, ev := range snap {
		switch {
		case ev.Class == debezium.ClassHeartbeat:
			heartbeats++
		case ev.Class != debezium.ClassChange || ev.Change.Op != debezium.OpRead:
			t.Fatalf("snapshot phase holds a %v record of op %v", ev.Class, ev.Change.Op)
		case ev.Copy == Original:
			reads++
		}
	}
	if reads != int(cfg.SnapshotKeys) || heartbeats == 0 {
		t.Fatalf("snapshot phase: %d reads (want %d), %d heartbeats (want some)", reads, cfg.SnapshotKeys, heartbeats)
	}
	for _, ev := range rest {
		if ev.Class == debezium.ClassChange && ev.Change.Op == debezium.OpRead && ev.Copy == Original {
			t.Fatalf("a snapshot read of key %d after the snapshot phase", ev.Change.ID)
		}
	}
}

// TestKeyStatesGrowInChunks: states added past the table's keep their
// place and the table's (a pointer taken before stays the state), new
// ones start in neither list, growing never copies what is there, and a
// small workload's states stay small.
func TestKeyStatesGrowInChunks(t *testing.T) {
	const n = 20_000
	k := newKeyStates(n)
	if k.chunk != 2500 {
		t.Fatalf("chunks of %d states for a table of %d keys, want 2500", k.chunk, n)
	}
	first, last := k.at(0), k.at(n-1)
	first.lsn, last.lsn = 7, 9
	k.add()
	past := k.at(n)
	past.lsn = 11
	for range 2*k.chunk + 3 {
		k.add()
	}
	if k.len() != n+2*k.chunk+4 || len(k.more) != 3 || cap(k.table) != n {
		t.Fatalf("%d states, %d chunks past %d: want %d and 3 past %d", k.len(), len(k.more), cap(k.table), n+2*k.chunk+4, n)
	}
	if k.at(0) != first || k.at(n-1) != last || k.at(n) != past || first.lsn != 7 || last.lsn != 9 || past.lsn != 11 {
		t.Fatal("a state moved when the states grew")
	}
	for i := n - 5; i < k.len(); i++ {
		if s := k.at(i); s.pos != -1 || s.flags != 0 || (i != n-1 && i != n && s.lsn != 0) {
			t.Fatalf("state %d: %+v", i, *s)
		}
	}
	if small := newKeyStates(10); small.chunk != 1024 || len(small.table) != 10 {
		t.Fatalf("10 keys: %d states, chunks of %d", len(small.table), small.chunk)
	}
}
