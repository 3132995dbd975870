// Command cmd drives the synthetic workload from a shell: produce it into
// Kafka, verify a Delta table against its oracle, or dump its records.
//
//	go run ./bench/workload/cmd produce -brokers localhost:9092 -events 1000000
//	go run ./bench/workload/cmd verify -table ./orders -events 1000000
//	go run ./bench/workload/cmd dump -events 20
//
// The same flags must be given to produce and verify: verify rebuilds the
// oracle from the configuration instead of storing it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/delta/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

// errMismatch is returned when verify finds a table that is not the oracle.
var errMismatch = errors.New("table differs from the oracle")

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: workload produce|verify|dump [flags]")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	cfg := workload.Default()
	configFile := fs.String("config", "", "JSON file with a workload.Config (flags given after it override it)")
	fs.Func("config-json", "inline JSON workload.Config", func(s string) error { return json.Unmarshal([]byte(s), &cfg) })
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	fs.Int64Var(&cfg.Keys, "keys", cfg.Keys, "key space")
	fs.Int64Var(&cfg.SnapshotKeys, "snapshot-keys", cfg.SnapshotKeys, "rows read by the initial snapshot")
	fs.Int64Var(&cfg.Events, "events", cfg.Events, "streamed changes after the snapshot")
	fs.Func("partitions", fmt.Sprintf("partitions of the table's topic (default %d)", cfg.Partitions), func(s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		cfg.Partitions = int32(n)
		return err
	})
	fs.IntVar(&cfg.Columns, "columns", cfg.Columns, "columns per row")
	fs.Float64Var(&cfg.Update, "update", cfg.Update, "weight of updates")
	fs.Float64Var(&cfg.Insert, "insert", cfg.Insert, "weight of inserts")
	fs.Float64Var(&cfg.Delete, "delete", cfg.Delete, "weight of deletes")
	fs.Float64Var(&cfg.OutOfOrder, "out-of-order", cfg.OutOfOrder, "fraction delivered out of order")
	fs.Float64Var(&cfg.Late, "late", cfg.Late, "fraction delivered late")
	fs.Float64Var(&cfg.Duplicates, "duplicates", cfg.Duplicates, "fraction delivered twice")
	fs.Float64Var(&cfg.Replays, "replays", cfg.Replays, "chance per change of a replay run")
	fs.Int64Var(&cfg.HotKeys, "hot-keys", cfg.HotKeys, "number of hot keys")
	fs.Float64Var(&cfg.HotFraction, "hot-fraction", cfg.HotFraction, "fraction of updates and deletes to hot keys")
	brokers := fs.String("brokers", "localhost:9092", "produce: comma-separated brokers")
	rate := fs.Float64("rate", 0, "produce: records per second (0: as fast as the brokers take them)")
	fs.BoolFunc("wall-clock", "stamp source commit times with the wall clock (freshness runs)", func(string) error {
		cfg.Clock = time.Now
		return nil
	})
	batch := fs.Int("batch", 10_000, "produce: records per synchronous produce")
	tableDir := fs.String("table", "", "verify: the Delta table's directory")
	deltaRS := fs.Bool("deltars", false, "verify: also read the table with delta-rs")
	tableOnly := fs.Bool("table-only", false, "dump: only the table's topic (no heartbeats), as bench/peers read it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			return fmt.Errorf("read config: %w", err)
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("read config %s: %w", *configFile, err)
		}
		if err := fs.Parse(args); err != nil { // flags override the file
			return err
		}
	}
	switch cmd {
	case "produce":
		return produce(ctx, cfg, strings.Split(*brokers, ","), *batch, *rate, out)
	case "verify":
		return verify(ctx, cfg, *tableDir, *deltaRS, out)
	case "dump":
		return dump(cfg, *tableOnly, out)
	}
	return fmt.Errorf("unknown command %q: want produce, verify or dump", cmd)
}

func produce(ctx context.Context, cfg workload.Config, brokers []string, batch int, rate float64, out io.Writer) error {
	g, err := workload.New(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		return fmt.Errorf("connect to %v: %w", brokers, err)
	}
	defer cl.Close()
	if err := workload.CreateTopics(ctx, cl, g, -1); err != nil {
		return err
	}
	last := time.Now()
	progress := func(st workload.ProduceStats) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(out, "%d records, %.0f records/s\n", st.Records, st.PerSecond())
		}
	}
	var st workload.ProduceStats
	if rate > 0 {
		st, err = workload.ProduceAt(ctx, cl, g, rate, progress)
	} else {
		st, err = workload.Produce(ctx, cl, g, batch, progress)
	}
	if err != nil {
		return err
	}
	c := g.Oracle().Counts()
	fmt.Fprintf(out, "produced %d records (%d MiB) in %s: %.0f records/s; %d moved from their predicted offset\n",
		st.Records, st.Bytes>>20, st.Elapsed.Round(time.Millisecond), st.PerSecond(), st.Moved)
	fmt.Fprintf(out, "counts: %+v\n", c)
	return nil
}

func verify(ctx context.Context, cfg workload.Config, dir string, withDeltaRS bool, out io.Writer) error {
	if dir == "" {
		return errors.New("verify: -table is required")
	}
	o, err := workload.OracleFor(cfg)
	if err != nil {
		return err
	}
	diff, err := workload.Verify(ctx, storage.NewLocal(dir), o, 10)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "cdcapply reader: %s\n", diff)
	ok := diff.OK()
	if withDeltaRS {
		rs, err := workload.FindDeltaRS()
		if err != nil {
			return err
		}
		d, err := rs.Verify(ctx, dir, o, 10)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "delta-rs: %s\n", d)
		ok = ok && d.OK()
	}
	if !ok {
		return errMismatch
	}
	return nil
}

// dump writes the records as JSON lines in the form of the recorded
// fixtures (debezium/testdata/real): topic, partition, offset, timestamp,
// key and value in base64 (workload.AppendJSONLine). tableOnly leaves out
// records of other topics (heartbeats), as the bench peers' input does.
func dump(cfg workload.Config, tableOnly bool, out io.Writer) error {
	g, err := workload.New(cfg)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var ev workload.Event
	var line []byte
	for g.Next(&ev) {
		if tableOnly && ev.Record.Topic != g.Topic() {
			continue
		}
		line = workload.AppendJSONLine(line[:0], &ev.Record)
		if _, err := w.Write(line); err != nil {
			return fmt.Errorf("dump records: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("dump records: %w", err)
	}
	return nil
}
