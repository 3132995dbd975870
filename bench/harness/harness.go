// Package harness is the end-to-end benchmark behind `cdcapply bench`: it
// generates a Debezium workload (bench/workload), produces it into Kafka
// (an in-process kfake broker, or real brokers), runs the real apply
// engine on it (in a separate process by default, so its peak RSS is its
// own), verifies the final table against the workload's oracle, and
// reports throughput, freshness, memory, bytes written, write
// amplification, per-batch cost against table size, a decode-only
// baseline measured in the same run, and the peers (bench/peers) on the
// same stream. A table that differs from the oracle is a failure, never a
// figure.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Options configure one bench run.
type Options struct {
	// Workload is the generated stream (Events, Keys, Columns, the op mix,
	// irregularities...). Its Clock is set by the harness in rate mode.
	Workload workload.Config
	// Rate, when positive, produces the stream at that many records per
	// second while the engine runs, with source commit times taken from
	// the wall clock (the freshness figure). Zero produces the whole
	// stream first and then starts the engine (the throughput figure).
	Rate float64
	// Brokers are real Kafka brokers; empty starts an in-process kfake
	// of KfakeBrokers brokers (0: one), which gives each partition a
	// leader drawn at random among them.
	Brokers      []string
	KfakeBrokers int
	// Compression of the produced batches: none, lz4, snappy, zstd, gzip.
	Compression string
	// Dir is the run's directory: the table, the pipeline file, the stream
	// file for the peers, the report. The table is replaced.
	Dir string

	// Flush and WriteMode become the pipeline's defaults (zero: the
	// engine's own defaults).
	MaxRecords int
	MaxBytes   int64
	MaxLatency time.Duration
	// BacklogFactor is flush.backlog_factor (0: the engine's default).
	BacklogFactor int
	WriteMode     string
	// TableProperties become the pipeline's defaults' table_properties.
	TableProperties map[string]string
	// MemoryLimit is the pipeline's memory_limit (0: none).
	MemoryLimit int64
	// FetchMaxBytes is the pipeline's kafka.fetch_max_bytes (0: the
	// engine's default).
	FetchMaxBytes int32
	// CPUProfile is where the engine side writes a Go CPU profile of its
	// run (empty: none).
	CPUProfile string
	// Trace is where the engine side writes a Go execution trace of its
	// run (empty: none).
	Trace string
	// HeapProfile is where the engine side writes a heap profile taken
	// near its heap's peak (empty: none).
	HeapProfile string
	// HeapProfileEvery, with HeapProfile, also writes a series of heap
	// profiles, one every that long (Job.HeapProfileEvery).
	HeapProfileEvery time.Duration

	// EngineCommand starts the engine process (e.g. `cdcapply bench
	// -engine`); it speaks ServeEngine's protocol on stdin/stdout. Empty
	// runs the engine inside this process (tests; RSS then not isolated).
	EngineCommand []string
	// DecodeCommand starts the decode-only process (e.g. `cdcapply bench
	// -decode-only`, speaking ServeDecode's protocol). Empty measures
	// decode-only inside this process.
	DecodeCommand []string
	// Timeout bounds the engine's part (0: none beyond ctx).
	Timeout time.Duration

	// DecodeSample is how many records of the stream (spread evenly over
	// it) the decode-only measurement decodes; DecodeTime the least time
	// each decode measurement runs for.
	DecodeSample int
	DecodeTime   time.Duration

	// VerifyDeltaRS also reads the final table with delta-rs.
	VerifyDeltaRS bool

	// Peers to run on the same stream after ours (deltars, spark), with
	// the python from PeerPython or bench/peers/setup.sh, micro-batches of
	// PeerBatch records (0: the engine's max_records).
	Peers      []string
	PeerPython string
	PeerBatch  int
	// RepoRoot holds bench/peers (found from the working directory when
	// empty).
	RepoRoot string

	// Log receives progress lines (nil: discarded).
	Log io.Writer

	// Prefill writes the snapshot phase's reads straight into the table
	// before the engine starts (apply.Engine.Load, no broker); the engine
	// then reads only the streamed changes. For tables too large to put
	// their snapshot through Kafka (10M keys).
	Prefill bool

	// Corrupt, when set, runs on the table's directory after the engine
	// and before verification: tests damage the table to check that the
	// harness reports failure.
	Corrupt func(tableDir string) error
}

// ErrVerify is returned when the final table is not the oracle's.
var ErrVerify = errors.New("the table differs from the oracle")

// Run performs one bench run and returns its report. A table that fails
// verification returns the report (OK false, no figures) and ErrVerify.
func Run(ctx context.Context, o Options) (*Report, error) {
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "bench: "+format+"\n", args...)
	}
	if o.Dir == "" {
		return nil, errors.New("bench: no run directory")
	}
	if o.DecodeSample <= 0 {
		o.DecodeSample = 200_000
	}
	if o.DecodeTime <= 0 {
		o.DecodeTime = 2 * time.Second
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	table := filepath.Join(dir, "orders")
	for _, p := range []string{table, table + "_quarantine"} {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("bench: clear %s: %w", p, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}

	rep := &Report{Started: time.Now().UTC(), Host: hostInfo(), Options: o.summary()}
	wcfg := o.Workload
	if len(o.Brokers) > 0 {
		// Fresh topics on a real broker: the engine reads its topic from
		// offset 0 and the ends must be this run's.
		wcfg.Server = fmt.Sprintf("%s%d", wcfg.Server, time.Now().Unix())
	}
	brokers := o.Brokers
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(max(1, o.KfakeBrokers)))
		if err != nil {
			return nil, fmt.Errorf("bench: start the in-process broker: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		rep.Broker = "kfake (in the harness process)"
		if o.KfakeBrokers > 1 {
			rep.Broker = fmt.Sprintf("kfake, %d brokers (in the harness process)", o.KfakeBrokers)
		}
	} else {
		rep.Broker = strings.Join(brokers, ",")
	}
	codec, err := compression(o.Compression)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %v: %w", brokers, err)
	}
	defer cl.Close()

	// The decode-only baseline samples the same stream (generated again,
	// without wall-clock times) while this process produces it; it
	// measures just before the engine starts and again after the table is
	// verified, never while the engine runs.
	logf("decode-only: %d sampled records", o.DecodeSample)
	dec, err := startDecodeOnly(ctx, o.DecodeCommand, DecodeJob{Workload: wcfg, Sample: o.DecodeSample, MinTime: o.DecodeTime})
	if err != nil {
		return nil, err
	}
	defer dec.close()
	var decodeBefore DecodeFigures
	measureBefore := func() error {
		decodeBefore, err = dec.measure(ctx)
		return err
	}
	if o.Rate > 0 {
		wcfg.Clock = time.Now
	}
	g, err := workload.New(wcfg)
	if err != nil {
		return nil, err
	}
	rf := int16(-1)
	if len(o.Brokers) == 0 {
		rf = 1
	}
	if err := workload.CreateTopics(ctx, cl, g, rf); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "pipeline.yaml")
	cfgYAML := o.pipelineYAML(brokers, g.Topic(), table)
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o644); err != nil {
		return nil, err
	}
	job := Job{ConfigYAML: cfgYAML, ConfigPath: cfgPath, Topic: g.Topic(), Timeout: o.Timeout, CPUProfile: o.CPUProfile, Trace: o.Trace, HeapProfile: o.HeapProfile, HeapProfileEvery: o.HeapProfileEvery}
	if o.Prefill {
		logf("prefill: writing the snapshot (%d keys) into the table without Kafka", wcfg.SnapshotKeys)
		pf, err := prefill(ctx, job, "orders", g, cl, logf)
		if err != nil {
			return nil, err
		}
		rep.Prefill = &pf
		logf("prefill: %d rows in %d commits in %.1fs", pf.Rows, pf.Commits, pf.Seconds)
	}

	engCtx := ctx
	if o.Timeout > 0 {
		// The engine side stops itself at o.Timeout and reports; this
		// bound only catches an engine process that does not.
		var cancel context.CancelFunc
		engCtx, cancel = context.WithTimeout(ctx, o.Timeout+time.Minute)
		defer cancel()
	}
	progress := func(st workload.ProduceStats) {}
	lastLog := time.Now()
	progress = func(st workload.ProduceStats) {
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			logf("produced %d records (%.0f/s)", st.Records, st.PerSecond())
		}
	}
	var eng *engineRun
	var produced workload.ProduceStats
	if o.Rate <= 0 {
		logf("producing the stream into %s before starting the engine", rep.Broker)
		produced, err = workload.Produce(ctx, cl, g, 10_000, progress)
		if err != nil {
			return nil, err
		}
		ends, err := endOffsets(ctx, cl, g.Topic())
		if err != nil {
			return nil, err
		}
		logf("produced %d records (%d MiB) in %s; decode-only, then the engine", produced.Records, produced.Bytes>>20, produced.Elapsed.Round(time.Millisecond))
		if err := measureBefore(); err != nil {
			return nil, err
		}
		if eng, err = startEngine(engCtx, o.EngineCommand, job); err != nil {
			return nil, err
		}
		if err := eng.sendEnds(ends); err != nil {
			return nil, err
		}
	} else {
		if err := measureBefore(); err != nil {
			return nil, err
		}
		if eng, err = startEngine(engCtx, o.EngineCommand, job); err != nil {
			return nil, err
		}
		if err := eng.waitReady(engCtx); err != nil {
			return nil, err
		}
		logf("engine running; producing at %.0f records/s with wall-clock source times", o.Rate)
		produced, err = workload.ProduceAt(ctx, cl, g, o.Rate, progress)
		if err != nil {
			eng.abort()
			return nil, err
		}
		ends, err := endOffsets(ctx, cl, g.Topic())
		if err != nil {
			eng.abort()
			return nil, err
		}
		if err := eng.sendEnds(ends); err != nil {
			return nil, err
		}
	}
	rep.Produce = ProduceFigures{Records: produced.Records, Bytes: produced.Bytes, Seconds: produced.Elapsed.Seconds(),
		PerSecond: produced.PerSecond(), Moved: produced.Moved}
	res, err := eng.wait()
	if err != nil {
		if res == nil {
			return nil, fmt.Errorf("bench: engine: %w", err)
		}
		// A timeout or a stopped engine: keep what it did (commits, memory
		// samples) for the JSON, but no figure is a result.
		rep.Engine = res
		rep.fail(fmt.Sprintf("the engine did not apply the whole stream: %v (%d of the stream's records in %d commits)", err, res.Records, len(res.Batches)))
		rep.Counts = g.Oracle().Counts()
		return rep, fmt.Errorf("bench: engine: %w", err)
	}
	rep.Engine = res
	logf("engine done: %d records, %d changes, %d commits", res.Records, res.Changes, len(res.Batches))
	cl.Close()

	if o.Corrupt != nil {
		if err := o.Corrupt(table); err != nil {
			return nil, fmt.Errorf("bench: corrupt hook: %w", err)
		}
	}
	oracle := g.Oracle()
	rep.Counts = oracle.Counts()
	logf("verifying the table against the oracle (%d rows)", oracle.Len())
	diff, err := workload.Verify(ctx, storage.NewLocal(table), oracle, 10)
	if err != nil {
		rep.fail("verify: " + err.Error())
		return rep, fmt.Errorf("%w: %v", ErrVerify, err)
	}
	rep.Verify = append(rep.Verify, VerifyResult{Reader: "cdcapply", OK: diff.OK(), Diff: diff.String()})
	if o.VerifyDeltaRS {
		rs, err := workload.FindDeltaRS()
		if err != nil {
			return nil, fmt.Errorf("bench: -verify-deltars: %w", err)
		}
		d, err := rs.Verify(ctx, table, oracle, 10)
		if err != nil {
			return nil, fmt.Errorf("bench: -verify-deltars: %w", err)
		}
		rep.Verify = append(rep.Verify, VerifyResult{Reader: "delta-rs", OK: d.OK(), Diff: d.String()})
	}
	for _, v := range rep.Verify {
		if !v.OK {
			rep.fail(v.Reader + " reader: " + v.Diff)
			return rep, ErrVerify
		}
	}
	want := rep.Counts.TableRecords
	if rep.Prefill != nil {
		want -= rep.Prefill.Records
	}
	if res.Records != want {
		// The table is right but the accounting is not: the figure would
		// count records twice (a resync) or miss some.
		rep.fail(fmt.Sprintf("the engine read %d records of the table's topic, the stream has %d for it", res.Records, want))
		return rep, ErrVerify
	}
	rep.OK = true

	if rep.Table, err = tableFigures(ctx, table); err != nil {
		return nil, err
	}
	rep.Table.ChangeRecords = rep.Counts.ChangeRecords
	if rep.Counts.ChangeRecords > 0 {
		rep.Table.RowsPerChange = float64(rep.Table.RowsWritten) / float64(rep.Counts.ChangeRecords)
	}

	logf("decode-only, after the engine")
	decodeAfter, err := dec.measure(ctx)
	if err != nil {
		return nil, err
	}
	dec.close()
	rep.Decode = meanOf(decodeBefore, decodeAfter)
	// The stream again (same seed, so the same records but for wall-clock
	// times in rate mode) for the peers.
	var streamFile string
	if len(o.Peers) > 0 {
		streamFile = filepath.Join(dir, "stream.jsonl")
		if _, _, err := collectStream(wcfg, 0, streamFile); err != nil {
			return nil, err
		}
	}
	rep.compute()

	for _, name := range o.Peers {
		logf("peer %s", name)
		pr := runPeer(ctx, o, name, streamFile, dir, oracle, rep.Engine.Records, logw)
		if pr.EventsPerSec > 0 && rep.Throughput.EventsPerSec > 0 && pr.OK {
			pr.Ratio = rep.Throughput.EventsPerSec / pr.EventsPerSec
		}
		rep.Peers = append(rep.Peers, pr)
	}
	rep.Finished = time.Now().UTC()
	rep.Host.CPUPressureEnd = cpuPressure()
	return rep, nil
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "lz4":
		return kgo.Lz4Compression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("bench: compression %q: want none, lz4, snappy, zstd or gzip", name)
}

// pipelineYAML is the engine's pipeline file: one table, the flush and
// write settings of the run as defaults.
func (o Options) pipelineYAML(brokers []string, topic, table string) string {
	var flush []string
	if o.MaxRecords > 0 {
		flush = append(flush, fmt.Sprintf("max_records: %d", o.MaxRecords))
	}
	if o.MaxBytes > 0 {
		flush = append(flush, fmt.Sprintf("max_bytes: %d", o.MaxBytes))
	}
	if o.MaxLatency > 0 {
		flush = append(flush, fmt.Sprintf("max_latency: %s", o.MaxLatency))
	}
	if o.BacklogFactor > 0 {
		flush = append(flush, fmt.Sprintf("backlog_factor: %d", o.BacklogFactor))
	}
	defaults := fmt.Sprintf("flush: {%s}", strings.Join(flush, ", "))
	if o.WriteMode != "" {
		defaults += ", write_mode: " + o.WriteMode
	}
	if len(o.TableProperties) > 0 {
		keys := make([]string, 0, len(o.TableProperties))
		for k := range o.TableProperties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		props := make([]string, len(keys))
		for i, k := range keys {
			props[i] = fmt.Sprintf("%s: %q", k, o.TableProperties[k])
		}
		defaults += fmt.Sprintf(", table_properties: {%s}", strings.Join(props, ", "))
	}
	q := make([]string, len(brokers))
	for i, b := range brokers {
		q[i] = fmt.Sprintf("%q", b)
	}
	pipeline := "id: bench"
	if o.MemoryLimit > 0 {
		pipeline += fmt.Sprintf(", memory_limit: %d", o.MemoryLimit)
	}
	kafka := fmt.Sprintf("brokers: [%s], group: %q", strings.Join(q, ", "), fmt.Sprintf("cdcapply-bench-%d", time.Now().UnixNano()))
	if o.FetchMaxBytes > 0 {
		kafka += fmt.Sprintf(", fetch_max_bytes: %d", o.FetchMaxBytes)
	}
	return fmt.Sprintf(`pipeline: {%s}
kafka: {%s}
defaults: {%s}
tables:
  - {name: orders, topic: %q, location: %q, key_columns: [id]}
`, pipeline, kafka, defaults, topic, table)
}

// endOffsets asks the broker where each partition of topic ends.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("bench: end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	var ferr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = fmt.Errorf("bench: end offset of %s partition %d: %w", topic, o.Partition, o.Err)
		}
		ends[o.Partition] = o.Offset
	})
	return ends, ferr
}

// engineRun is the engine side of a run: a child process or a goroutine.
type engineRun struct {
	send   func(any) error
	ready  chan struct{}
	done   chan struct{}
	res    *EngineResult
	err    error
	cancel func()
}

func (r *engineRun) sendEnds(ends map[int32]int64) error { return r.send(Ends{Ends: ends}) }

func (r *engineRun) waitReady(ctx context.Context) error {
	select {
	case <-r.ready:
		return nil
	case <-r.done:
		return fmt.Errorf("bench: the engine stopped before it was ready: %v", r.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *engineRun) abort() {
	r.cancel()
	<-r.done
}

func (r *engineRun) wait() (*EngineResult, error) {
	<-r.done
	if r.err != nil && r.res != nil && r.res.Error == "" {
		r.res.Error = r.err.Error()
	}
	return r.res, r.err
}

func startEngine(ctx context.Context, command []string, job Job) (*engineRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &engineRun{ready: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	if len(command) == 0 {
		ends := make(chan Ends, 1)
		r.send = func(v any) error {
			ends <- v.(Ends)
			return nil
		}
		go func() {
			defer close(r.done)
			r.res, r.err = RunEngine(ctx, job, ends, func() { close(r.ready) }, true)
		}()
		return r, nil
	}
	return startEngineProcess(ctx, r, command, job)
}

// jsonLine writes v as one line.
func jsonLine(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}
