package apply

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestEngineMidPollCommitFailureLosesNothing: one poll holds several
// batches (max_records 10, 60 records produced before the engine starts)
// and the commit of the second batch fails once. The engine drops that
// batch and seeks back to the table's position; the records of the same
// poll after the failed batch were fetched before the seek and must not
// start a new batch above the position (committing it would move the
// position past the dropped records, which are then skipped as already
// applied). The table must end equal to the oracle.
func TestEngineMidPollCommitFailureLosesNothing(t *testing.T) {
	c, p := kfakeOrders(t)
	o := ordersOracle{}
	for i := 0; i < 60; i++ {
		id := i % 13 // keys repeat across batches, and every batch writes some key for the last time
		if i >= 10 && i < 20 {
			id = 100 + i // the second batch's keys are written only there
		}
		status := fmt.Sprintf("s%d", i)
		p.change(id, int64(100+i), "u", status)
		o.apply(id, "u", status)
	}

	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Tables[0].Flush.MaxRecords = 10
	cfg.Tables[0].Flush.MaxLatency = Duration(time.Hour) // only max_records flushes mid-poll
	var failed atomic.Int32
	faults := refuseWrites(func(path string) bool {
		// The second batch's commit: version 1 of the log.
		return strings.HasSuffix(path, "_delta_log/00000000000000000001.json") && failed.CompareAndSwap(0, 1)
	})
	_, stop := startEngineWith(t, cfg, func(e *Engine) { e.wrapStore = faults })
	defer stop()
	waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	if failed.Load() != 1 {
		t.Fatal("the injected commit failure never happened: the test did not exercise the mid-poll resync")
	}
	if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table after a failed mid-poll commit differs from the oracle:\n got %v\nwant %v", got, want)
	}
}

// refuseWrites is an Engine.wrapStore that fails every write-if-absent
// (the log's commits and checkpoints, data files) whose path refuse
// accepts; every other operation passes.
func refuseWrites(refuse func(path string) bool) func(storage.Storage) storage.Storage {
	return func(inner storage.Storage) storage.Storage {
		f := storage.NewFaulty(inner)
		f.SetRule(func(op storage.Op) storage.Fault {
			if op.Kind == storage.OpWriteIfAbsent && refuse(op.Path) {
				return storage.Fail
			}
			return storage.Pass
		})
		return f
	}
}
