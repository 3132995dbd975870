package apply

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// crashStream is a Kafka partition's worth of orders changes with
// increasing sequences, and its oracle.
func crashStream(n int, seed uint64) ([]*Change, ordersOracle) {
	return keyedStream(n, 12, seed)
}

// keyedStream is crashStream over ids 0..keys-1.
func keyedStream(n, keys int, seed uint64) ([]*Change, ordersOracle) {
	rng := rand.New(rand.NewPCG(seed, 3))
	oracle := ordersOracle{}
	var out []*Change
	for i := 0; i < n; i++ {
		id := rng.IntN(keys)
		op := []string{"c", "u", "u", "d"}[rng.IntN(4)]
		status := fmt.Sprintf("s%d", i+1)
		c := refChange(int64(id), uint64(i+1), op, status, int64(i))
		out = append(out, c)
		oracle.apply(id, op, status)
	}
	return out, oracle
}

// runFrom applies the stream from the table's position in batches of
// size, as the engine would after a (re)start. It stops at the first
// error and returns it.
func runFrom(ctx context.Context, store storage.Storage, stream []*Change, size int) error {
	return runFromMode(ctx, store, stream, size, CopyOnWrite)
}

func runFromMode(ctx context.Context, store storage.Storage, stream []*Change, size int, mode MergeMode) error {
	return runFromModeWith(ctx, store, stream, size, mode, false)
}

// runFromModeWith is runFromMode, with the log checkpoint written in the
// background (as the engine does) when background is set: a crash while
// it is written ends the run as it would end the process.
func runFromModeWith(ctx context.Context, store storage.Storage, stream []*Change, size int, mode MergeMode, background bool) (err error) {
	newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
	var opts []delta.Option
	var mu sync.Mutex
	var ckptErr error
	if background {
		opts = append(opts, delta.BackgroundCheckpoints(func(o delta.CheckpointOutcome) {
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(o.Err, storage.ErrCrashed) && ckptErr == nil {
				ckptErr = o.Err
			}
		}))
	}
	tbl := delta.Open(store, opts...)
	defer func() {
		tbl.WaitCheckpoints()
		if err == nil {
			err = ckptErr
		}
	}()
	a := NewTableApplier("orders", "p", tbl, newFiles, []string{"id"}, nil)
	if err := a.SetMergeMode(mode); err != nil {
		return err
	}
	if err := a.Open(ctx); err != nil {
		return err
	}
	if a.Layout() == nil {
		if err := a.SetLayout(refLayout); err != nil {
			return err
		}
	}
	tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
	next, _ := a.Positions().Next(tp)
	for from := int(next); from < len(stream); from += size {
		to := min(from+size, len(stream))
		b := &Batch{Changes: stream[from:to], Read: to - from,
			Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: int64(from), Next: int64(to)}}}
		if _, err := a.Apply(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// tableState reads "id status deleted" rows and the position of a table.
func tableState(t *testing.T, store storage.Storage) ([]string, int64) {
	t.Helper()
	ctx := context.Background()
	newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Snapshot() == nil {
		return nil, 0
	}
	var out []string
	for _, add := range a.Snapshot().Files() {
		rows, err := a.rf.ReadRows(ctx, add)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			status := "<nil>"
			if !r.Values[1].IsNull() {
				status = r.Values[1].S
			}
			out = append(out, fmt.Sprintf("%d %s %v", r.Values[0].I, status, r.Deleted))
		}
	}
	sort.Strings(out)
	next, _ := a.Positions().Next(checkpoint.TopicPartition{Topic: "orders", Partition: 0})
	return out, next
}

// TestCrashAtEveryStorageOperation crashes the apply path before and after
// every storage operation of an 11-batch run (data file reads and writes,
// commits, the log checkpoint at version 10 and its cleanup). After each
// crash the table is a valid prefix: its rows equal the oracle of exactly
// the records its position says were applied. A restart from the table's
// position then converges to the full oracle: nothing lost or doubled.
func TestCrashAtEveryStorageOperation(t *testing.T) {
	crashAtEveryStorageOperation(t, CopyOnWrite)
}

// TestCrashAtEveryStorageOperationMergeOnRead is the same in merge-on-read
// mode: deletion vectors (inline and in files) are written before the
// commit that references them, and a crash anywhere leaves a valid prefix.
func TestCrashAtEveryStorageOperationMergeOnRead(t *testing.T) {
	defer setInlineDVLimit(35)() // one-row vectors inline (34 bytes), larger ones in files
	crashAtEveryStorageOperation(t, MergeOnRead)
}

// TestCrashAtEveryStorageOperationBackgroundCheckpoint is the same with
// the log checkpoint at version 10 and its cleanup written in the
// background, as the engine writes them: a crash while they are written
// leaves a valid table and a restart converges.
func TestCrashAtEveryStorageOperationBackgroundCheckpoint(t *testing.T) {
	crashAtEveryStorageOperationWith(t, CopyOnWrite, true)
}

func crashAtEveryStorageOperation(t *testing.T, mode MergeMode) {
	crashAtEveryStorageOperationWith(t, mode, false)
}

func crashAtEveryStorageOperationWith(t *testing.T, mode MergeMode, background bool) {
	ctx := context.Background()
	stream, oracle := crashStream(44, 1)
	const size = 4
	runFromMode := func(ctx context.Context, store storage.Storage, stream []*Change, size int, mode MergeMode) error {
		return runFromModeWith(ctx, store, stream, size, mode, background)
	}

	// A clean run counts the operations.
	clean := storage.NewFaulty(storage.NewLocal(t.TempDir()))
	if err := runFromMode(ctx, clean, stream, size, mode); err != nil {
		t.Fatal(err)
	}
	total := clean.Count()
	if background {
		ckpt := 0
		for _, op := range clean.Ops() {
			if strings.HasSuffix(op.Path, ".checkpoint.parquet") {
				ckpt++
			}
		}
		if ckpt == 0 {
			t.Fatal("the clean run wrote no log checkpoint: the test would not crash one in the background")
		}
	}
	if mode == MergeOnRead {
		var dvFiles int
		for _, op := range clean.Ops() {
			if strings.Contains(op.Path, "deletion_vector_") {
				dvFiles++
			}
		}
		if inline, file := dvKinds(t, clean); inline == 0 || dvFiles == 0 {
			t.Fatalf("the merge-on-read run left %d inline and %d file deletion vectors live and wrote %d vector files: the test would not exercise them", inline, file, dvFiles)
		}
		// Folding moved rows out of small files: some data file was
		// read whole (ReadRows) and never rewritten in place.
		snap, err := delta.Open(clean).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(snap.Files()); n > foldKeepSmall+2 {
			t.Fatalf("%d live files after %d batches: folding did not run, the crashes would not cover it", n, len(stream)/size)
		}
	}
	if got, _ := tableState(t, clean); fmt.Sprint(got) != fmt.Sprint(oracle.rows()) {
		t.Fatalf("clean run differs from the oracle:\n got %v\nwant %v", got, oracle.rows())
	}
	prefixOracle := func(n int64) []string {
		o := ordersOracle{}
		for _, c := range stream[:n] {
			op := "u"
			if c.Delete {
				op = "d"
			}
			o.apply(int(c.Values[0].I), op, c.Values[1].S)
		}
		return o.rows()
	}
	crashes := 0
	for n := 1; n <= total; n++ {
		for _, after := range []bool{false, true} {
			dir := t.TempDir()
			f := storage.NewFaulty(storage.NewLocal(dir))
			f.CrashAt(n, after)
			err := runFromMode(ctx, f, stream, size, mode)
			if err == nil {
				continue // the crash point was past the end of this run
			}
			if !errors.Is(err, storage.ErrCrashed) {
				t.Fatalf("crash at op %d (after=%v): unexpected error %v", n, after, err)
			}
			crashes++
			restarted := storage.NewLocal(dir)
			rows, pos := tableState(t, restarted)
			if want := prefixOracle(pos); fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Fatalf("crash at op %d (after=%v, %s): table at position %d differs from the oracle of its prefix:\n got %v\nwant %v",
					n, after, f.Ops()[n-1], pos, rows, want)
			}
			if err := runFromMode(ctx, restarted, stream, size, mode); err != nil {
				t.Fatalf("restart after crash at op %d: %v", n, err)
			}
			rows, pos = tableState(t, restarted)
			if pos != int64(len(stream)) || fmt.Sprint(rows) != fmt.Sprint(oracle.rows()) {
				t.Fatalf("crash at op %d (after=%v): after restart position %d rows\n%v\nwant %v", n, after, pos, rows, oracle.rows())
			}
		}
	}
	if crashes < total {
		t.Fatalf("only %d crashes injected over %d operations", crashes, total)
	}
	t.Logf("%d storage operations, %d crashes injected, every restart converged", total, crashes)
}
