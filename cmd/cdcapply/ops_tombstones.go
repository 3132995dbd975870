package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/tombstone"
)

// runTombstones is `cdcapply tombstones stats|purge`.
func runTombstones(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "stats" && args[0] != "purge") {
		fmt.Fprintln(stderr, "usage: cdcapply tombstones stats|purge --table PATH --max-lateness D [flags]")
		return errUsage
	}
	verb := args[0]
	fs := flag.NewFlagSet("tombstones "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	maxLate := fs.Duration("max-lateness", 0, "the table's maximum lateness (default: max_lateness from --config)")
	olderThan := fs.Duration("older-than", 0, "purge tombstones older than this (at least the maximum lateness; default: the maximum lateness)")
	dry := fs.Bool("dry-run", false, "print what would be purged and change nothing")
	maxFiles := fs.Int("max-files", 0, "rewrite at most this many files in one run (0: no bound)")
	maxRows := fs.Int64("max-rows", 0, "purge at most this many tombstones in one run (0: no bound)")
	keys := fs.String("key", "", "comma-separated key columns for the listed keys (default: key_columns from --config)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	loc, _, tc, err := tf.resolve(fs)
	if err != nil {
		return err
	}
	lateness := *maxLate
	if lateness == 0 && tc != nil {
		lateness = time.Duration(tc.MaxLateness)
	}
	if lateness <= 0 {
		return fmt.Errorf("tombstones %s: the table's maximum lateness is needed: --max-lateness or --config: %w", verb, errUsage)
	}
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	if verb == "stats" {
		st, err := tombstone.ReadStats(ctx, tbl, lateness, time.Now())
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(st)
		}
		fmt.Fprintf(stdout, "table %s version %d: %d files, %d rows, %d tombstones\n", loc, st.Version, st.Files, st.Rows, st.Tombstones)
		fmt.Fprintf(stdout, "older than the maximum lateness %s (source time before %s): %d tombstones in %d files\n",
			lateness, microsText(st.CutoffMicros), st.Eligible, st.EligibleFiles)
		if st.OldestMicros != 0 {
			fmt.Fprintf(stdout, "oldest tombstone: %s\n", microsText(st.OldestMicros))
		}
		if st.HasHorizon {
			fmt.Fprintf(stdout, "purge horizon: %s (%d rows purged so far)\n", microsText(st.Horizon.SourceTsMicros), st.Horizon.PurgedRows)
		} else {
			fmt.Fprintln(stdout, "purge horizon: none (never purged)")
		}
		return nil
	}
	opts := tombstone.PurgeOptions{MaxLateness: lateness, OlderThan: *olderThan, DryRun: *dry, MaxFiles: *maxFiles,
		MaxRows: *maxRows, Logger: auditLogger(stderr)}
	if *keys != "" {
		opts.KeyColumns = strings.Split(*keys, ",")
	} else if tc != nil {
		opts.KeyColumns = tc.KeyColumns
	}
	prog := newProgress(stderr, opts.Logger)
	opts.Progress = func(files int, rows int64) { prog.report("purge", "filesRead", files, "tombstones", rows) }
	res, err := tombstone.Purge(ctx, tbl, opts)
	prog.done()
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	what := "purged"
	if res.DryRun {
		what = "would purge"
	}
	fmt.Fprintf(stdout, "%s %d tombstones with source time before %s from %d files\n", what, res.Rows, microsText(res.CutoffMicros), len(res.Files))
	for _, f := range res.Files {
		fmt.Fprintf(stdout, "  file %s\n", f)
	}
	for _, k := range res.Keys {
		fmt.Fprintf(stdout, "  key %s\n", k)
	}
	if int64(len(res.Keys)) < res.Rows {
		fmt.Fprintf(stdout, "  ... and %d more keys\n", res.Rows-int64(len(res.Keys)))
	}
	if res.More {
		fmt.Fprintln(stdout, "stopped at --max-files/--max-rows: more tombstones are eligible")
	}
	if res.Version >= 0 {
		fmt.Fprintf(stdout, "committed version %d; purge horizon now %s\n", res.Version, microsText(res.Horizon.SourceTsMicros))
	}
	return nil
}

func microsText(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }
