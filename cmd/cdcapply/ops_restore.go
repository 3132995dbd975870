package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
)

// runRestore is `cdcapply restore`.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	toVersion := fs.Int64("to-version", -1, "restore this version")
	toTime := fs.String("to-timestamp", "", "restore the latest version committed at or before this RFC 3339 time")
	brokers := fs.String("brokers", "", "comma-separated Kafka brokers, to check that the rewound offsets are still held (default: from --config)")
	acceptGap := fs.Bool("accept-gap", false, "restore even when Kafka no longer holds rewound offsets (those records are lost to the replay)")
	dry := fs.Bool("dry-run", false, "check and print the restore without committing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	loc, cfg, _, err := tf.resolve(fs)
	if err != nil {
		return err
	}
	var target delta.RestoreTarget
	switch {
	case *toVersion >= 0 && *toTime == "":
		target.Version = *toVersion
	case *toVersion < 0 && *toTime != "":
		ts, err := time.Parse(time.RFC3339Nano, *toTime)
		if err != nil {
			return fmt.Errorf("restore: --to-timestamp: %w", err)
		}
		target = delta.RestoreTarget{Timestamp: ts, ByTimestamp: true}
	default:
		return fmt.Errorf("restore: give exactly one of --to-version and --to-timestamp: %w", errUsage)
	}
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	seeds := splitList(*brokers)
	if len(seeds) == 0 && cfg != nil {
		seeds = cfg.Kafka.Brokers
	}
	opts := delta.RestoreOptions{AcceptGap: *acceptGap, DryRun: *dry, Logger: auditLogger(stderr)}
	if len(seeds) > 0 {
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		opts.LogStarts, err = logStarts(ctx, seeds, snap.Txns())
		if err != nil {
			return err
		}
	} else if !*acceptGap {
		fmt.Fprintln(stderr, "restore: no --brokers: Kafka retention of the rewound offsets is not checked")
	}
	res, err := delta.Restore(ctx, tbl, target, opts)
	if err != nil {
		return err
	}
	what := "restored"
	if *dry {
		what = "would restore"
	}
	fmt.Fprintf(stdout, "%s version %d over version %d: %d files removed, %d files restored\n", what, res.Restored, res.From, res.FilesRemoved, res.FilesRestored)
	apps := make([]string, 0, len(res.Txns))
	for a := range res.Txns {
		apps = append(apps, a)
	}
	sort.Strings(apps)
	for _, a := range apps {
		fmt.Fprintf(stdout, "  position %s rewound to %d\n", a, res.Txns[a])
	}
	for _, g := range res.Gaps {
		fmt.Fprintf(stdout, "  GAP accepted: %s needs offset %d, Kafka starts at %d\n", g.AppID, g.Version, g.LogStart)
	}
	if res.Version >= 0 {
		fmt.Fprintf(stdout, "committed version %d; the stream replays from the rewound positions\n", res.Version)
	}
	return nil
}

// logStarts asks Kafka for the log-start offset of every partition the
// table has a cdcapply position for, keyed by txn appId.
func logStarts(ctx context.Context, seeds []string, txns map[string]delta.Txn) (map[string]int64, error) {
	byTP := map[checkpoint.TopicPartition]string{}
	topics := map[string]bool{}
	for app := range txns {
		if _, tp, ok := checkpoint.ParseAppID(app); ok {
			byTP[tp] = app
			topics[tp.Topic] = true
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, fmt.Errorf("restore: connect to Kafka: %w", err)
	}
	defer cl.Close()
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("restore: list Kafka log-start offsets: %w", err)
	}
	out := map[string]int64{}
	for tp, app := range byTP {
		o, ok := listed.Lookup(tp.Topic, tp.Partition)
		switch {
		case !ok:
			return nil, fmt.Errorf("restore: Kafka has no partition %s (deleted topic?): cannot check its offsets", tp)
		case o.Err != nil:
			return nil, fmt.Errorf("restore: log-start offset of %s: %w", tp, o.Err)
		}
		out[app] = o.Offset
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
