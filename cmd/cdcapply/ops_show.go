package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/maintenance"
)

// whereFlags collects repeated --where col=value conditions.
type whereFlags map[string]string

func (w whereFlags) String() string { return fmt.Sprint(map[string]string(w)) }

func (w whereFlags) Set(s string) error {
	col, val, ok := strings.Cut(s, "=")
	if !ok || col == "" {
		return fmt.Errorf("want col=value, got %q", s)
	}
	w[col] = val
	return nil
}

// runShow is `cdcapply show`.
func runShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	version := fs.Int64("version", -1, "read this version (default: the latest)")
	at := fs.String("timestamp", "", "read the latest version committed at or before this RFC 3339 time")
	where := whereFlags{}
	fs.Var(where, "where", "keep rows whose column prints as the value (col=value; repeatable)")
	limit := fs.Int("limit", 100, "print at most this many rows (0: all)")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	live := fs.Bool("live", false, "hide tombstones and engine columns, as the current view does")
	// Flags may follow the table path: parse, take the path, parse the rest.
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 && tf.table == "" {
		tf.table = fs.Arg(0)
		if err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	loc, _, _, err := tf.resolve(fs)
	if err != nil {
		return err
	}
	opts := maintenance.ShowOptions{Version: *version, Where: where, Limit: *limit, Live: *live}
	if *at != "" {
		if *version >= 0 {
			return fmt.Errorf("show: give --version or --timestamp, not both: %w", errUsage)
		}
		ts, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return fmt.Errorf("show: --timestamp: %w", err)
		}
		opts.ByTimestamp, opts.Timestamp = true, ts
	}
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	rows, err := maintenance.Show(ctx, tbl, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		return rows.WriteJSON(stdout)
	}
	fmt.Fprintf(stdout, "version %d\n", rows.Version)
	if err := rows.WriteTable(stdout); err != nil {
		return err
	}
	if rows.Truncated {
		fmt.Fprintf(stdout, "(first %d rows; --limit 0 for all)\n", len(rows.Values))
	}
	return nil
}
