package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/bench/harness"
	"github.com/cdcapply/cdcapply/bench/workload"
)

// runBench is `cdcapply bench`: the end-to-end benchmark of bench/harness
// (see bench/README.md). It prints a human report, writes -json and -svg,
// and exits non-zero with FAIL when the table is not the oracle's.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := workload.Default()
	engine := fs.Bool("engine", false, "internal: be the engine process of a bench run (protocol on stdin/stdout)")
	decodeProc := fs.Bool("decode-only", false, "internal: be the decode-only process of a bench run (protocol on stdin/stdout)")
	dir := fs.String("dir", "bench-run", "run directory: the table, pipeline file, stream file for peers (the table is replaced)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "workload seed")
	fs.Int64Var(&cfg.Keys, "keys", cfg.Keys, "key space")
	snapshot := fs.Int64("snapshot-keys", -1, "rows read by the initial snapshot (default: all keys)")
	fs.Int64Var(&cfg.Events, "events", cfg.Events, "streamed changes after the snapshot")
	duration := fs.Duration("duration", 0, "with -rate: stream for this long instead of -events (events = rate x duration)")
	fs.IntVar(&cfg.Columns, "columns", cfg.Columns, "columns per row (key, a cycle of types, a TOASTed doc)")
	fs.IntVar(&cfg.StringWidth, "string-width", cfg.StringWidth, "length of text values")
	fs.IntVar(&cfg.DocWidth, "doc-width", cfg.DocWidth, "length of the TOASTed doc column")
	fs.Float64Var(&cfg.Insert, "insert", cfg.Insert, "weight of inserts")
	fs.Float64Var(&cfg.Update, "update", cfg.Update, "weight of updates")
	fs.Float64Var(&cfg.Delete, "delete", cfg.Delete, "weight of deletes")
	fs.Float64Var(&cfg.DocChange, "doc-change", cfg.DocChange, "fraction of updates that change doc (the rest send the TOAST placeholder)")
	fs.Float64Var(&cfg.OutOfOrder, "out-of-order", cfg.OutOfOrder, "fraction delivered out of order")
	fs.IntVar(&cfg.OutOfOrderWindow, "out-of-order-window", cfg.OutOfOrderWindow, "how many records late an out-of-order record may be")
	fs.Float64Var(&cfg.Late, "late", cfg.Late, "fraction delivered late (past flush boundaries)")
	fs.Float64Var(&cfg.Duplicates, "duplicates", cfg.Duplicates, "fraction delivered twice")
	fs.Float64Var(&cfg.Replays, "replays", cfg.Replays, "chance per change of replaying the last records")
	fs.Int64Var(&cfg.HotKeys, "hot-keys", cfg.HotKeys, "number of hot keys")
	fs.Float64Var(&cfg.HotFraction, "hot-fraction", cfg.HotFraction, "fraction of updates and deletes going to hot keys")
	partitions := fs.Int("partitions", int(cfg.Partitions), "partitions of the table's topic")
	rate := fs.Float64("rate", 0, "records/s produced while the engine runs, source times from the wall clock (freshness); 0: preproduce, then run as fast as possible (throughput)")
	brokers := fs.String("brokers", "", "real Kafka brokers (comma-separated); default an in-process kfake")
	compression := fs.String("compression", "lz4", "producer compression: none, lz4, snappy, zstd, gzip")
	maxRecords := fs.Int("max-records", 0, "flush.max_records (0: the engine's default)")
	memLimit := fs.Int64("memory-limit", 0, "the pipeline's memory_limit in bytes: the engine's soft memory limit (0: none)")
	maxBytes := fs.Int64("max-bytes", 0, "flush.max_bytes (0: the engine's default)")
	fetchMaxBytes := fs.Int("fetch-max-bytes", 0, "kafka.fetch_max_bytes: the bound of one fetch response, compressed (0: the engine's default)")
	kfakeBrokers := fs.Int("kfake-brokers", 1, "brokers of the in-process kfake (each partition's leader drawn at random among them)")
	maxLatency := fs.Duration("max-latency", 0, "flush.max_latency (0: the engine's default)")
	backlogFactor := fs.Int("backlog-factor", 0, "flush.backlog_factor (0: the engine's default)")
	mergeMode := fs.String("merge-mode", "", "the table's write_mode (copy-on-write, merge-on-read; empty: the engine's default)")
	tableProps := whereFlags{}
	fs.Var(tableProps, "table-property", "a Delta table property the pipeline sets, key=value (repeatable), e.g. delta.deletedFileRetentionDuration=interval 1 hour")
	prefill := fs.Bool("prefill", false, "write the snapshot straight into the table before the engine starts (no Kafka); the engine reads only the streamed changes")
	inProcess := fs.Bool("inprocess", false, "run the engine and decode-only inside this process (RSS then includes the broker and oracle)")
	timeout := fs.Duration("timeout", 0, "give up on the engine after this long (0: never)")
	decodeSample := fs.Int("decode-sample", 200_000, "records (spread over the stream) the decode-only measurement decodes")
	decodeTime := fs.Duration("decode-time", 2*time.Second, "least time of each decode-only measurement")
	verifyDeltaRS := fs.Bool("verify-deltars", false, "also verify the table read by delta-rs (the repo's .venv; test-sized tables)")
	peers := fs.String("peers", "", "peers to run on the same stream: deltars,spark (bench/peers)")
	peerPython := fs.String("peer-python", "", "python for the peers (default: what bench/peers/setup.sh prints)")
	peerBatch := fs.Int("peer-batch", 0, "records per peer micro-batch (default: max-records, else 50000)")
	repo := fs.String("repo", "", "the repository holding bench/peers (default: found upwards from the working directory)")
	jsonPath := fs.String("json", "", "write every figure as JSON to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the engine's run to this file")
	tracePath := fs.String("trace", "", "write a Go execution trace of the engine's run to this file (go tool trace)")
	heapProfile := fs.String("memprofile", "", "write a Go heap profile of the engine, taken near its heap's peak, to this file")
	heapEvery := fs.Duration("memprofile-every", 0, "with -memprofile: also write a heap profile every this long, to the -memprofile file with the elapsed seconds appended (.0060s, ...)")
	svgPath := fs.String("svg", "", "plot throughput, freshness and RSS over time to this SVG file")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *engine {
		return harness.ServeEngine(ctx, os.Stdin, stdout)
	}
	if *decodeProc {
		return harness.ServeDecode(ctx, os.Stdin, stdout)
	}
	if *snapshot < 0 {
		cfg.SnapshotKeys = cfg.Keys
	} else {
		cfg.SnapshotKeys = *snapshot
	}
	cfg.Partitions = int32(*partitions)
	if *fetchMaxBytes < 0 || *fetchMaxBytes > math.MaxInt32 {
		return fmt.Errorf("bench: -fetch-max-bytes %d: want 0 (the engine's default) or a positive 32-bit count of bytes", *fetchMaxBytes)
	}
	if *kfakeBrokers < 1 {
		return fmt.Errorf("bench: -kfake-brokers %d: want at least 1", *kfakeBrokers)
	}
	if *duration > 0 {
		if *rate <= 0 {
			return fmt.Errorf("bench: -duration needs -rate")
		}
		cfg.Events = int64(*rate * duration.Seconds())
	}
	o := harness.Options{
		Workload: cfg, Rate: *rate, Compression: *compression, Dir: *dir,
		MaxRecords: *maxRecords, MaxBytes: *maxBytes, MemoryLimit: *memLimit, FetchMaxBytes: int32(*fetchMaxBytes), KfakeBrokers: *kfakeBrokers, MaxLatency: *maxLatency, BacklogFactor: *backlogFactor, WriteMode: *mergeMode, TableProperties: tableProps, CPUProfile: *cpuProfile, Trace: *tracePath, HeapProfile: *heapProfile, HeapProfileEvery: *heapEvery,
		Timeout: *timeout, DecodeSample: *decodeSample, DecodeTime: *decodeTime,
		Prefill: *prefill, VerifyDeltaRS: *verifyDeltaRS, PeerPython: *peerPython, PeerBatch: *peerBatch, RepoRoot: *repo, Log: stderr,
	}
	if *brokers != "" {
		o.Brokers = strings.Split(*brokers, ",")
	}
	if *peers != "" {
		o.Peers = strings.Split(*peers, ",")
	}
	if !*inProcess {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable for the engine process: %w", err)
		}
		o.EngineCommand = []string{exe, "bench", "-engine"}
		o.DecodeCommand = []string{exe, "bench", "-decode-only"}
	}
	rep, err := harness.Run(ctx, o)
	if rep != nil {
		rep.Print(stdout)
		if *jsonPath != "" {
			if werr := rep.WriteJSON(*jsonPath); werr != nil {
				return werr
			}
			fmt.Fprintf(stdout, "  json: %s\n", *jsonPath)
		}
		if *svgPath != "" && rep.OK {
			if werr := rep.WriteSVG(*svgPath); werr != nil {
				return werr
			}
			fmt.Fprintf(stdout, "  plot: %s\n", *svgPath)
		}
	}
	if errors.Is(err, harness.ErrVerify) {
		return fmt.Errorf("bench: FAIL: %w", err)
	}
	if err != nil {
		return err
	}
	for _, p := range rep.Peers {
		if !p.OK {
			return fmt.Errorf("bench: peer %s failed: %s", p.Peer, p.Failure)
		}
	}
	abs, _ := filepath.Abs(*dir)
	fmt.Fprintf(stdout, "  run directory: %s\n", abs)
	return nil
}
