package workload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

func propertyConfig(seed uint64) workload.Config {
	c := workload.Default()
	c.Seed = seed
	c.Keys, c.SnapshotKeys, c.Events = 120, 30, 800
	c.Partitions = 3
	c.HotKeys, c.HotFraction = 8, 0.3
	c.Insert, c.Update, c.Delete = 0.15, 0.65, 0.2
	c.Revival, c.UnknownDeletes = 0.2, 0.05
	c.OutOfOrder, c.OutOfOrderWindow = 0.08, 30
	c.Late, c.LateDelay = 0.02, 300
	c.Duplicates, c.Replays, c.ReplayLength = 0.05, 0.01, 25
	c.HeartbeatEvery = 200
	c.StringWidth, c.DocWidth = 6, 24
	if seed%2 == 0 {
		c.HeartbeatTopic = c.Topic() // heartbeats the table's consumer must skip
	}
	return c
}

// applyStream runs a generated stream through the engine's pieces as the
// engine does: decode, project, then batches cut at random places, taking
// random runs from each partition (so partitions interleave in every
// order Kafka allows while each stays in order), committed by the table
// applier into real Parquet files. Every few batches the applier is
// re-opened from the table, as after a restart. It checks the accounting
// against the generator's counts and returns the generator.
func applyStream(t *testing.T, cfg workload.Config, store storage.Storage, rng *rand.Rand) *workload.Generator {
	t.Helper()
	ctx := context.Background()
	g, err := workload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := debezium.New(debezium.SourceConnector(debezium.ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	fields, err := g.DeltaFields()
	if err != nil {
		t.Fatal(err)
	}
	layout, err := apply.NewLayout(fields, g.KeyColumns())
	if err != nil {
		t.Fatal(err)
	}
	newFiles := func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(store, l) }
	open := func() *apply.TableApplier {
		a := apply.NewTableApplier("orders", "prop", delta.Open(store), newFiles, g.KeyColumns(), nil)
		if err := a.Open(ctx); err != nil {
			t.Fatal(err)
		}
		if a.Layout() == nil {
			if err := a.SetLayout(layout); err != nil {
				t.Fatal(err)
			}
		}
		return a
	}
	parts := make([][]debezium.Record, cfg.Partitions)
	var ev workload.Event
	for g.Next(&ev) {
		if ev.Record.Topic == g.Topic() {
			parts[ev.Record.Partition] = append(parts[ev.Record.Partition], ev.Record)
		}
	}
	a := open()
	var read, skipped, applied, stale int64
	for batchNo := 0; ; batchNo++ {
		b := &apply.Batch{Ranges: map[checkpoint.TopicPartition]checkpoint.Range{}}
		size := 1 + rng.IntN(120)
		for size > 0 {
			var open []int
			for p := range parts {
				if len(parts[p]) > 0 {
					open = append(open, p)
				}
			}
			if len(open) == 0 {
				break
			}
			p := open[rng.IntN(len(open))]
			n := min(1+rng.IntN(size), len(parts[p]))
			run := parts[p][:n]
			parts[p] = parts[p][n:]
			size -= n
			tp := checkpoint.TopicPartition{Topic: g.Topic(), Partition: int32(p)}
			r, ok := b.Ranges[tp]
			if !ok {
				r.From = run[0].Offset
			}
			r.Next = run[n-1].Offset + 1
			b.Ranges[tp] = r
			for i := range run {
				b.Read++
				ch, err := dec.Decode(ctx, &run[i])
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if ch.Class != debezium.ClassChange {
					b.Skipped++
					continue
				}
				c, err := a.Layout().Project(&ch)
				if err != nil {
					t.Fatalf("project: %v", err)
				}
				b.Changes = append(b.Changes, c)
			}
		}
		if b.Read == 0 {
			break
		}
		res, err := a.Apply(ctx, b)
		if err != nil {
			t.Fatalf("batch %d: %v", batchNo, err)
		}
		read += int64(b.Read)
		skipped += int64(b.Skipped)
		applied += int64(res.Counts.AppliedRecords)
		stale += int64(res.Counts.StaleRecords)
		if rng.IntN(8) == 0 {
			a = open()
		}
	}
	c := g.Oracle().Counts()
	if read != c.TableRecords || skipped != c.SkippedRecords() || applied+stale != c.ChangeRecords || read != applied+stale+skipped {
		t.Errorf("accounting: read %d (want %d) = applied %d + stale %d + skipped %d (want %d skipped, %d change records)",
			read, c.TableRecords, applied, stale, skipped, c.SkippedRecords(), c.ChangeRecords)
	}
	return g
}

// TestTableEqualsOracle is the apply engine's property test at the table
// level: random streams (snapshot reads, inserts, updates, deletes of known
// and unknown keys, revivals, TOAST placeholders, out-of-order and late
// deliveries, duplicates, replays, Kafka tombstones, heartbeats) cut into
// random batches end in a Delta table equal to the oracle, row for row.
func TestTableEqualsOracle(t *testing.T) {
	ctx := context.Background()
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		store := storage.NewLocal(t.TempDir())
		rng := rand.New(rand.NewPCG(seed, 99))
		g := applyStream(t, propertyConfig(seed), store, rng)
		diff, err := workload.Verify(ctx, store, g.Oracle(), 5)
		if err != nil {
			t.Fatal(err)
		}
		if !diff.OK() {
			t.Fatalf("seed %d: table differs from the oracle: %s", seed, diff)
		}
		if c := g.Oracle().Counts(); c.Displaced == 0 || c.Placeholders == 0 || c.Replays == 0 || c.UnknownDeletes == 0 || c.Revivals == 0 {
			t.Fatalf("seed %d: the stream lacks an irregularity it should test: %+v", seed, c)
		}
	}
}

// TestTableEqualsOracleReadByDeltaRS reads one property-test table with
// delta-rs, a reader we did not write.
func TestTableEqualsOracleReadByDeltaRS(t *testing.T) {
	rs, err := workload.FindDeltaRS()
	if errors.Is(err, workload.ErrNoDeltaRS) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g := applyStream(t, propertyConfig(11), storage.NewLocal(dir), rand.New(rand.NewPCG(11, 5)))
	diff, err := rs.Verify(context.Background(), dir, g.Oracle(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.OK() {
		t.Fatalf("delta-rs sees a table that differs from the oracle: %s", diff)
	}
	other, err := workload.OracleFor(propertyConfig(12))
	if err != nil {
		t.Fatal(err)
	}
	if diff, err := rs.Verify(context.Background(), dir, other, 1); err != nil || diff.OK() || diff.Mismatched == 0 {
		t.Fatalf("delta-rs verification passed another seed's oracle: %v %v", diff, err)
	}
}

// TestVerifySeesDifferences: the verifier reports a table that is not the
// oracle's (another seed's table; half a stream) instead of passing it.
func TestVerifySeesDifferences(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	small := func(seed uint64) workload.Config {
		c := propertyConfig(seed)
		c.Events = 400
		return c
	}
	applyStream(t, small(3), store, rand.New(rand.NewPCG(3, 3)))
	other, err := workload.New(small(4))
	if err != nil {
		t.Fatal(err)
	}
	var ev workload.Event
	for other.Next(&ev) {
	}
	diff, err := workload.Verify(ctx, store, other.Oracle(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff.OK() || diff.Mismatched == 0 || len(diff.Examples) != 3 {
		t.Fatalf("another seed's table passed or was misreported: %s", diff)
	}
	longer := small(3)
	longer.Events += 200 // the same stream, continued: the table lacks its end
	g, err := workload.New(longer)
	if err != nil {
		t.Fatal(err)
	}
	for g.Next(&ev) {
	}
	diff, err = workload.Verify(ctx, store, g.Oracle(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff.OK() || diff.Missing+diff.Mismatched == 0 {
		t.Fatalf("a table missing the stream's end passed: %s", diff)
	}
}

func TestEngineColumnNames(t *testing.T) {
	// verify.go spells these out to stay importable from package apply.
	if apply.ColSeq != "_cdc_seq" || apply.ColDeleted != "_cdc_deleted" {
		t.Fatalf("engine columns renamed to %s, %s: update verify.go", apply.ColSeq, apply.ColDeleted)
	}
}

// TestBatchResolutionEqualsOracle is the same property over many more
// streams, with the engine's reducer and resolver on an in-memory table
// instead of Parquet files: cheap enough to try every seed's irregular
// orderings against every batching.
func TestBatchResolutionEqualsOracle(t *testing.T) {
	ctx := context.Background()
	dec, err := debezium.New(debezium.SourceConnector(debezium.ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := uint64(100); seed < uint64(100+seeds); seed++ {
		cfg := propertyConfig(seed)
		cfg.Events = 3000
		if seed%3 == 0 {
			cfg.Keys, cfg.SnapshotKeys, cfg.HotKeys = 25, 0, 4 // few keys, each changed many times
		}
		g, err := workload.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fields, err := g.DeltaFields()
		if err != nil {
			t.Fatal(err)
		}
		layout, err := apply.NewLayout(fields, g.KeyColumns())
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		table := map[string]*apply.StoredRow{}
		var batch []*apply.Change
		flush := func() {
			for _, r := range apply.Reduce(batch) {
				kind, vals, _ := r.Resolve(table[r.Winner.Key])
				if kind != apply.RowStale {
					table[r.Winner.Key] = &apply.StoredRow{Seq: r.Winner.Seq, Deleted: r.Winner.Delete, Values: vals}
				}
			}
			batch = batch[:0]
		}
		cut := 1 + rng.IntN(50)
		var ev workload.Event
		for g.Next(&ev) {
			ch, err := dec.Decode(ctx, &ev.Record)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Class == debezium.ClassChange {
				c, err := layout.Project(&ch)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, c)
			}
			if cut--; cut == 0 {
				flush()
				cut = 1 + rng.IntN(50)
			}
		}
		flush()
		o := g.Oracle()
		if int64(len(table)) != o.Len() {
			t.Fatalf("seed %d: %d rows, oracle %d", seed, len(table), o.Len())
		}
		o.Rows(func(want workload.Row) bool {
			got := table[apply.EncodeKey(want.Values, layout.Key)]
			if got == nil || string(got.Seq) != string(want.Seq) || got.Deleted != want.Deleted {
				t.Fatalf("seed %d id %d: got %+v, want seq %x deleted %v", seed, want.ID, got, want.Seq, want.Deleted)
			}
			for c := range want.Values {
				if !got.Values[c].Equal(want.Values[c]) {
					t.Fatalf("seed %d id %d column %d: got %#v, want %#v", seed, want.ID, c, got.Values[c], want.Values[c])
				}
			}
			return true
		})
	}
}
