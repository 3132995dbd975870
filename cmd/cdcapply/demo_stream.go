package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// runStreamDemo is `cdcapply demo`: the whole pipeline on embedded
// defaults. It starts an in-process Kafka-protocol broker (kfake) on
// localhost, feeds it a synthetic OLTP change stream in Debezium JSON
// (inserts, updates, deletes, out-of-order and duplicate events, replays,
// TOAST placeholders, Kafka tombstones, heartbeats), applies it with the
// real engine into a local Delta table under ./cdcapply-demo/, shows
// progress, and ends by checking the table against the generator's oracle.
func runStreamDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "cdcapply-demo", "where the demo's tables go (replaced on each run)")
	events := fs.Int64("events", 50_000, "streamed row changes after the initial snapshot")
	keys := fs.Int64("keys", 10_000, "distinct primary keys")
	rate := fs.Float64("rate", 20_000, "records per second fed to the broker (0: as fast as possible)")
	verbose := fs.Bool("v", false, "log the engine's commits")
	metricsAddr := fs.String("metrics-address", "", "serve /metrics, /healthz and /readyz (as `run` does) on this host:port while the demo runs; source times then come from the wall clock, so freshness is real")
	linger := fs.Duration("linger", 0, "with -metrics-address: keep the idle engine serving this long after the check (freshness ages visibly)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if err := os.RemoveAll(*dir); err != nil {
		return fmt.Errorf("clear %s: %w", *dir, err)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}

	wcfg := workload.Default()
	wcfg.Seed = 2026
	wcfg.Events = *events
	wcfg.Keys = *keys
	wcfg.SnapshotKeys = *keys / 2
	wcfg.Partitions = 3
	if *metricsAddr != "" {
		// Source commit times from the wall clock, so the freshness the
		// metrics show is the real apply delay (the oracle does not change).
		wcfg.Clock = time.Now
		wcfg.StartTime = time.Now() // the initial snapshot's source time
	}
	g, err := workload.New(wcfg)
	if err != nil {
		return err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return fmt.Errorf("start the in-process broker: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(stdout, "cdcapply demo: in-process Kafka on %s, topic %s (%d partitions)\n", brokers[0], g.Topic(), wcfg.Partitions)
	fmt.Fprintf(stdout, "  workload: %d snapshot rows, %d changes over %d keys (updates, deletes, revivals, out-of-order, duplicates, replays, TOAST placeholders)\n",
		wcfg.SnapshotKeys, wcfg.Events, wcfg.Keys)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := workload.CreateTopics(ctx, cl, g, 1); err != nil {
		return err
	}

	table := filepath.Join(abs, "orders")
	cfgYAML := fmt.Sprintf(`pipeline: {id: demo}
kafka: {brokers: [%s], group: cdcapply-demo}
defaults: {flush: {max_latency: 500ms}}
tables:
  - {name: orders, topic: %s, location: %s, key_columns: [id]}
`, brokers[0], g.Topic(), table)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	cfgPath := filepath.Join(abs, "pipeline.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o644); err != nil {
		return err
	}
	cfg, err := apply.ParseConfig(cfgPath, []byte(cfgYAML))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	opts := []apply.EngineOption{apply.Logger(log)}
	reg := prometheus.NewRegistry()
	if *metricsAddr != "" {
		// The same registry and handler `cdcapply run` serves.
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts = append(opts, apply.WithMetrics(apply.NewMetrics(reg)))
	}
	e, err := apply.NewEngine(cfg, opts...)
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		stopHTTP, err := serveHTTP(*metricsAddr, e.Handler(reg, false), log)
		if err != nil {
			return err
		}
		defer stopHTTP()
		fmt.Fprintf(stdout, "  metrics: http://%s/metrics\n", *metricsAddr)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()

	// Produce while the engine applies; count what goes to the table's topic.
	prodDone := make(chan error, 1)
	var produced workload.ProduceStats
	go func() {
		var err error
		if *rate > 0 {
			produced, err = workload.ProduceAt(runCtx, cl, g, *rate, nil)
		} else {
			produced, err = workload.Produce(runCtx, cl, g, 5000, nil)
		}
		prodDone <- err
	}()
	ends := map[int32]int64{}
	var total int64
	oracleGen, err := workload.New(wcfg)
	if err != nil {
		return err
	}
	var ev workload.Event
	for oracleGen.Next(&ev) {
		if ev.Record.Topic == g.Topic() {
			ends[ev.Record.Partition] = ev.Record.Offset + 1
			total++
		}
	}

	p := newProgress(stdout, slog.New(slog.NewTextHandler(stdout, nil)))
	if !p.tty {
		p.interval = 2 * time.Second
	}
	start := time.Now()
	applied := func() (int64, *delta.Snapshot) {
		snap, err := delta.Open(storage.NewLocal(table)).Snapshot(ctx)
		if err != nil {
			return 0, nil
		}
		pos := checkpoint.Restore(snap, "demo")
		var n int64
		for part := range ends {
			next, _ := pos.Next(checkpoint.TopicPartition{Topic: g.Topic(), Partition: part})
			n += next
		}
		return n, snap
	}
	var snap *delta.Snapshot
	for {
		var n int64
		n, snap = applied()
		var version int64 = -1
		if snap != nil {
			version = snap.Version
		}
		p.report("applying", "records", fmt.Sprintf("%d/%d", n, total), "percent", fmt.Sprintf("%.0f", 100*float64(n)/float64(max(total, 1))), "version", version)
		if n >= total {
			break
		}
		if halted := e.Halted(); len(halted) > 0 {
			stop()
			<-done
			return fmt.Errorf("demo: a table halted: %v", halted)
		}
		select {
		case err := <-done:
			return fmt.Errorf("demo: the engine stopped early: %v", err)
		case <-ctx.Done():
			stop()
			<-done
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	p.done()
	elapsed := time.Since(start)
	if err := <-prodDone; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("demo: produce: %w", err)
	}
	if *metricsAddr != "" && *linger > 0 {
		fmt.Fprintf(stdout, "  all applied; the engine idles for %s (-linger)\n", *linger)
		select {
		case <-time.After(*linger):
		case <-ctx.Done():
		}
	}
	stop()
	if err := <-done; err != nil {
		return err
	}

	diff, err := workload.Verify(ctx, storage.NewLocal(table), g.Oracle(), 5)
	if err != nil {
		return err
	}
	c := g.Oracle().Counts()
	fmt.Fprintf(stdout, "\n  %d records (%d changes, %d duplicates/replays, %d Kafka tombstones) applied in %s, %d table versions\n",
		total, c.ChangeRecords, c.Duplicates+c.Replays, c.KafkaTombstones, elapsed.Round(time.Millisecond), snap.Version+1)
	fmt.Fprintf(stdout, "  table: %s\n", table)
	if !diff.OK() {
		fmt.Fprintf(stdout, "  RESULT: FAIL: the table differs from the oracle: %s\n", diff)
		return fmt.Errorf("demo: the table differs from the oracle")
	}
	fmt.Fprintf(stdout, "  RESULT: OK: the table equals the oracle (%s)\n", diff)
	fmt.Fprintf(stdout, "  produced %d records, %.1f MiB\n", produced.Records, float64(produced.Bytes)/(1<<20))
	fmt.Fprintf(stdout, "  try: go run ./cmd/cdcapply show --table %s --limit 5\n", table)
	return nil
}
