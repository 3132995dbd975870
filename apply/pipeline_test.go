package apply

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// holdFirstApply makes the engine's first table commit wait, on its
// applying goroutine, until release is closed; entered receives when it
// starts waiting.
func holdFirstApply(e *Engine) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 1), make(chan struct{})
	var first atomic.Bool
	e.applying = func(string) {
		if first.CompareAndSwap(false, true) {
			entered <- struct{}{}
			<-release
		}
	}
	return entered, release
}

// heldEngine is an engine whose first table commit waits until release,
// with the batches it reported.
type heldEngine struct {
	e       *Engine
	entered chan struct{}
	release func()
	mu      sync.Mutex
	reports []*BatchReport
}

// startHeldEngine starts an engine on cfg with its first commit held; the
// commit is released and the engine stopped when the test ends.
func startHeldEngine(t *testing.T, cfg *Config) *heldEngine {
	h := &heldEngine{}
	var release chan struct{}
	e, stop := startEngineWith(t, cfg, func(e *Engine) {
		h.entered, release = holdFirstApply(e)
		e.OnBatch = func(r *BatchReport) {
			h.mu.Lock()
			h.reports = append(h.reports, r)
			h.mu.Unlock()
		}
	})
	var once sync.Once
	h.e, h.release = e, func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() {
		h.release()
		stop()
	})
	return h
}

// waitReports waits until n batches are reported and returns every
// batch reported.
func (h *heldEngine) waitReports(t *testing.T, n int) []*BatchReport {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		got := append([]*BatchReport(nil), h.reports...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches reported, want %d", len(got), n)
		}
	}
}

// tenRecordBatches is a kfake orders topic and a pipeline on it whose
// batches are flushed by max_records (10) only.
func tenRecordBatches(t *testing.T) (*producer, string, *Config) {
	c, p := kfakeOrders(t)
	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Tables[0].Flush.MaxRecords = 10
	cfg.Tables[0].Flush.MaxLatency = Duration(time.Hour)
	return p, dir, cfg
}

func waitOrFail(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// produceOrders sends updates i in [from, to) to a few repeating keys and
// applies them to the oracle.
func produceOrders(p *producer, o ordersOracle, from, to int) {
	for i := from; i < to; i++ {
		id := i % 7
		status := fmt.Sprintf("s%d", i)
		p.change(id, int64(100+i), "u", status)
		o.apply(id, "u", status)
	}
}

// TestEngineReadsWhileABatchCommits: a batch's commit runs off the loop,
// so the next batch is read and decoded while it is applied. The first
// batch is held in its commit until the engine has routed the second
// batch's records; then both land in order and the table equals the
// oracle. The second batch's first record arrived before the first batch
// committed, which a loop that applies between polls cannot do.
func TestEngineReadsWhileABatchCommits(t *testing.T) {
	p, dir, cfg := tenRecordBatches(t)
	o := ordersOracle{}
	h := startHeldEngine(t, cfg)

	produceOrders(p, o, 0, 10)
	waitOrFail(t, h.entered, "the first batch's commit")
	produceOrders(p, o, 10, 20)
	for deadline := time.Now().Add(30 * time.Second); h.e.routed.Load() < 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the engine routed %d records while the first batch was being committed; want the second batch's 10 too", h.e.routed.Load())
		}
	}
	h.release()
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)

	// The loop reports a batch when it settles it, just after its commit.
	reports := h.waitReports(t, 2)
	if len(reports) != 2 {
		t.Fatalf("%d batches committed, want 2", len(reports))
	}
	first, second := reports[0], reports[1]
	if first.Version >= second.Version || first.Ranges[checkpoint.TopicPartition{Topic: "orders"}].Next != 10 {
		t.Fatalf("batches out of order: versions %d, %d; first ranges %v", first.Version, second.Version, first.Ranges)
	}
	if !second.Started.Before(first.Committed) {
		t.Fatalf("the second batch started at %v, after the first committed at %v: nothing was read during the commit", second.Started, first.Committed)
	}
	if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table differs from the oracle:\n got %v\nwant %v", got, want)
	}
}

// TestEngineShutdownCommitsTheBatchInFlight: stopping the engine while a
// batch is being committed waits for that commit and settles it (reported,
// group offsets committed) before Run returns; it is not lost and the
// table does not halt.
func TestEngineShutdownCommitsTheBatchInFlight(t *testing.T) {
	p, dir, cfg := tenRecordBatches(t)
	o := ordersOracle{}
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	entered, release := holdFirstApply(e)
	var reported atomic.Int32
	e.OnCommit = func(string, *Result) { reported.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	produceOrders(p, o, 0, 10)
	waitOrFail(t, entered, "the batch's commit")
	cancel()
	select {
	case err := <-done:
		close(release)
		t.Fatalf("Run returned (%v) while a batch was being committed", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the batch in flight was released")
	}
	if n := reported.Load(); n != 1 {
		t.Fatalf("%d commits reported by the time Run returned, want 1 (the batch in flight, settled before return)", n)
	}
	snap, err := delta.Open(storage.NewLocal(dir + "/orders")).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if next, _ := checkpoint.Restore(snap, "shop").Next(checkpoint.TopicPartition{Topic: "orders"}); next != 10 {
		t.Fatalf("position after shutdown = %d, want 10: the batch in flight was not committed", next)
	}
	if h := e.Halted(); len(h) != 0 {
		t.Fatalf("halted on shutdown: %v", h)
	}
	if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table differs from the oracle:\n got %v\nwant %v", got, want)
	}
}

// TestEngineResyncWhileShuttingDownDoesNotHalt: a batch that fails while
// the engine is being stopped (its context cancelled) is dropped with
// what was read after it, and the table is not reloaded: reloading with
// the cancelled context would fail and halt a table that is fine. A
// restart reads from the table's positions.
func TestEngineResyncWhileShuttingDownDoesNotHalt(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, []string{"127.0.0.1:1"}, dir)
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	k, v := dbzOrders(1, 100, "c", "new")
	if _, err := e.Load(context.Background(), "orders", []debezium.Record{{Topic: "orders", Key: k, Value: v}}); err != nil {
		t.Fatal(err)
	}
	tr := e.tables[0]
	tr.buf.parts[checkpoint.TopicPartition{Topic: "orders"}] = &partBuffer{read: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.resync(ctx, tr)
	if h := e.Halted(); len(h) != 0 {
		t.Fatalf("a resync during shutdown halted the table: %v", h)
	}
	if !tr.buf.empty() || !tr.resynced {
		t.Fatal("the buffer read after the failed batch was kept")
	}
}

// TestEngineFlushesWhenTheStreamPauses: a backlog is committed as soon as
// the stream has nothing more, not after max_latency (an hour here):
//   - burst: 1200 changes, a tenth of max_records or more;
//   - backlog-tail: 2300 changes with max_records 1000, in full batches
//     and a tail of 300, under the idle flush's 1000 changes, flushed
//     because the batch before it was full.
//
// A trickle of 50 changes afterwards waits for max_latency (or, here,
// shutdown).
func TestEngineFlushesWhenTheStreamPauses(t *testing.T) {
	for _, tc := range []struct {
		name                string
		maxRecords, backlog int
		backlogFactor       int
	}{
		{"burst", 10_000, 1200, 0},
		{"backlog-tail", 1000, 2300, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := kfakeOrders(t)
			dir := t.TempDir()
			cfg := testConfig(t, c.ListenAddrs(), dir)
			cfg.Tables[0].Flush.MaxRecords = tc.maxRecords
			if tc.backlogFactor > 0 {
				cfg.Tables[0].Flush.BacklogFactor = tc.backlogFactor
			}
			cfg.Tables[0].Flush.MaxLatency = Duration(time.Hour)
			o := ordersOracle{}
			produceOrders(p, o, 0, tc.backlog)
			e, err := NewEngine(cfg, Logger(quietLogger()))
			if err != nil {
				t.Fatal(err)
			}
			committed := make(chan int64, 10)
			e.OnCommit = func(_ string, res *Result) { committed <- res.Version }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			position := func() int64 {
				snap, err := delta.Open(storage.NewLocal(dir + "/orders")).Snapshot(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				next, _ := checkpoint.Restore(snap, "shop").Next(checkpoint.TopicPartition{Topic: "orders"})
				return next
			}
			deadline := time.After(30 * time.Second)
			for at := int64(0); at < int64(tc.backlog); at = position() {
				select {
				case <-committed:
				case <-deadline:
					cancel()
					<-done
					t.Fatalf("position %d 30 s after a backlog of %d: it was not all committed when the stream paused", at, tc.backlog)
				}
			}
			produceOrders(p, o, tc.backlog, tc.backlog+50)
			select {
			case v := <-committed:
				t.Fatalf("a trickle of 50 changes after the backlog was committed (version %d) before max_latency", v)
			case <-time.After(time.Second):
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got, want := position(), int64(tc.backlog+50); got != want {
				t.Fatalf("position after shutdown = %d, want %d", got, want)
			}
			if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("table differs from the oracle:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestEngineBatchGrowsWhileACommitRuns: a batch that is due while the
// table's previous batch is still committing keeps reading, up to
// flush.backlog_factor times max_records, and is flushed when that commit
// lands; with a factor of 1 it waits at max_records. Every change lands
// once either way and the table equals the oracle.
func TestEngineBatchGrowsWhileACommitRuns(t *testing.T) {
	for _, factor := range []int{1, 2} {
		t.Run(fmt.Sprint(factor), func(t *testing.T) {
			p, dir, cfg := tenRecordBatches(t)
			cfg.Tables[0].Flush.BacklogFactor = factor
			o := ordersOracle{}
			h := startHeldEngine(t, cfg)

			produceOrders(p, o, 0, 10)
			waitOrFail(t, h.entered, "the first batch's commit")
			produceOrders(p, o, 10, 40)
			// The loop reads until the second batch holds factor x 10
			// changes, then waits for the first commit.
			bound := int64(10 + 10*factor)
			for deadline := time.Now().Add(30 * time.Second); h.e.routed.Load() < bound; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("routed %d records while the first batch was committing; want %d", h.e.routed.Load(), bound)
				}
			}
			time.Sleep(100 * time.Millisecond)
			if n := h.e.routed.Load(); n != bound {
				t.Fatalf("routed %d records while the first batch was committing; the bound is %d", n, bound)
			}
			h.release()
			waitPositions(t, dir+"/orders", "shop", "orders", p.ends)

			want := []int64{10, 10 * int64(factor)}
			for done := bound; done < 40; done += 10 {
				want = append(want, 10)
			}
			var got []int64
			for _, r := range h.waitReports(t, len(want)) {
				rng := r.Ranges[checkpoint.TopicPartition{Topic: "orders"}]
				got = append(got, rng.Next-rng.From)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("batch sizes %v, want %v", got, want)
			}
			if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("table differs from the oracle:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// TestBatchReportAppendedTimes: a batch report carries the Kafka
// timestamp of every record the batch read, in the order read, so the
// bench can tell the engine's own delay from a change's time before it
// reached Kafka. A truncate, committed alone, is left out of the batch
// before it, as it is of that batch's Read.
func TestBatchReportAppendedTimes(t *testing.T) {
	p, _, cfg := tenRecordBatches(t)
	// Where batches end depends on what each poll brings while a commit
	// is under way (a due batch reads on up to the backlog bound): the
	// last records may be fewer than ten, and are flushed by latency.
	cfg.Tables[0].Flush.MaxLatency = Duration(time.Second)
	var mu sync.Mutex
	var reports []*BatchReport
	_, stop := startEngineWith(t, cfg, func(e *Engine) {
		e.OnBatch = func(r *BatchReport) {
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		}
	})
	defer stop()
	base := time.UnixMicro(1_800_000_000_000_000)
	var want []int64
	send := func(k, v []byte, i int) {
		r := &kgo.Record{Topic: p.topic, Key: k, Value: v, Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		if err := p.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.ends[r.Partition] = r.Offset + 1
	}
	// 15 updates, a truncate (committed alone after the 5 buffered before
	// it, not a stream batch), 15 more: 3 batches of 10 records read.
	for i := range 31 {
		k, v := dbzOrders(i%7, int64(100+i), "u", fmt.Sprintf("s%d", i))
		if i == 15 {
			_, v = dbzOrders(0, int64(100+i), "t", "")
			k = nil
		} else {
			want = append(want, base.Add(time.Duration(i)*time.Millisecond).UnixMicro())
		}
		send(k, v, i)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		got := append([]*BatchReport(nil), reports...)
		mu.Unlock()
		var times []int64
		read := 0
		for _, r := range got {
			if len(r.AppendedMicros) != r.Read {
				t.Fatalf("batch at version %d: %d Kafka timestamps for %d records read", r.Version, len(r.AppendedMicros), r.Read)
			}
			times = append(times, r.AppendedMicros...)
			read += r.Read
		}
		if read >= len(want) {
			if fmt.Sprint(times) != fmt.Sprint(want) {
				t.Fatalf("Kafka timestamps reported\n got %v\nwant %v", times, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("batches reported %d records, want %d", read, len(want))
		}
	}
}

// TestOnOpenedAfterTheIndexIsBuilt: OnOpened is called once per Run, on
// its goroutine, after the table was opened with its key index built and
// before any batch: a restarted engine sees the rows the first one wrote.
func TestOnOpenedAfterTheIndexIsBuilt(t *testing.T) {
	p, dir, cfg := tenRecordBatches(t)
	o := ordersOracle{}
	_, stop := startEngineWith(t, cfg)
	produceOrders(p, o, 0, 10)
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	stop()

	var mu sync.Mutex
	var events []string
	_, stop = startEngineWith(t, cfg, func(e *Engine) {
		e.OnOpened = func() {
			mu.Lock()
			events = append(events, fmt.Sprintf("opened with %d rows", e.tables[0].applier.rows()))
			mu.Unlock()
		}
		e.OnBatch = func(r *BatchReport) {
			mu.Lock()
			events = append(events, fmt.Sprintf("batch with %d rows before", r.RowsBefore))
			mu.Unlock()
		}
	})
	defer stop()
	produceOrders(p, o, 10, 20)
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		got := fmt.Sprint(events)
		mu.Unlock()
		if got == "[opened with 7 rows batch with 7 rows before]" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %s, want the open (7 keys) then one batch", got)
		}
	}
}
