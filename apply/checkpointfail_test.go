package apply

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEngineCheckpointFailureIsReported: every log checkpoint fails to be
// written (a full or read-only log directory would do it). The commits
// stand, so the table must still converge to the oracle, but the failure
// must not be silent: each checkpoint version logs it with the table and
// version and counts it in cdcapply_checkpoint_failures_total, and the
// checkpoint stage is observed once per checkpoint version.
func TestEngineCheckpointFailureIsReported(t *testing.T) {
	c, p := kfakeOrders(t)
	o := ordersOracle{}
	for i := 0; i < 200; i++ {
		id := i % 17
		status := fmt.Sprintf("s%d", i)
		p.change(id, int64(100+i), "u", status)
		o.apply(id, "u", status)
	}

	dir := t.TempDir()
	cfg := testConfig(t, c.ListenAddrs(), dir)
	cfg.Tables[0].Flush.MaxRecords = 10
	cfg.Tables[0].Flush.MaxLatency = Duration(time.Hour)
	cfg.Tables[0].TableProperties = map[string]string{"delta.checkpointInterval": "2"}
	var refused atomic.Int32
	faults := refuseWrites(func(path string) bool {
		if !strings.HasSuffix(path, ".checkpoint.parquet") {
			return false
		}
		refused.Add(1)
		return true
	})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var log syncBuffer
	_, stop := startEngineWith(t, cfg, func(e *Engine) { e.wrapStore = faults }, WithMetrics(m),
		Logger(slog.New(slog.NewTextHandler(&log, nil))))
	snap := waitPositions(t, dir+"/orders", "shop", "orders", p.ends)
	stop()
	if got, want := readOrders(t, dir+"/orders"), o.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table differs from the oracle:\n got %v\nwant %v", got, want)
	}
	if snap.Version < 4 {
		t.Fatalf("table at version %d: fewer than two checkpoint versions, the test exercised too little", snap.Version)
	}
	tried := int(refused.Load())
	if tried < 2 {
		t.Fatalf("%d checkpoint writes refused: the test did not exercise failing checkpoints", tried)
	}
	if got := int(testutil.ToFloat64(m.ckptFailed.WithLabelValues("orders"))); got != tried {
		t.Errorf("cdcapply_checkpoint_failures_total = %d, want %d (each refused checkpoint)", got, tried)
	}
	h := histogram(t, reg, "cdcapply_stage_duration_seconds", map[string]string{"table": "orders", "stage": stageCheckpoint})
	if got := int(h.GetSampleCount()); got != tried {
		t.Errorf("checkpoint stage observed %d times, want %d (once per checkpoint version)", got, tried)
	}
	logged := strings.Count(log.String(), "log checkpoint failed")
	if logged != tried {
		t.Errorf("%d \"log checkpoint failed\" lines, want %d:\n%s", logged, tried, log.String())
	}
	if !strings.Contains(log.String(), "table=orders") || !strings.Contains(log.String(), "version=2 ") {
		t.Errorf("the failure's log line does not name the table and version:\n%s", log.String())
	}
}
