package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cdcapply/cdcapply/maintenance"
)

// runOptimize is `cdcapply optimize`.
func runOptimize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("optimize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	target := fs.Int64("target-size", 128<<20, "compact files smaller than this into files of about this size (bytes)")
	minFiles := fs.Int("min-files", 2, "rewrite a group only when it has at least this many files")
	dry := fs.Bool("dry-run", false, "print the groups and write nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	loc, _, _, err := tf.resolve(fs)
	if err != nil {
		return err
	}
	log := auditLogger(stderr)
	prog := newProgress(stderr, log)
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{TargetSize: *target, MinFiles: *minFiles,
		DryRun: *dry, Logger: log, Progress: func(groups, files int) { prog.report("optimize", "groups", groups, "files", files) }})
	prog.done()
	if err != nil {
		return err
	}
	for i, g := range res.Groups {
		fmt.Fprintf(stdout, "group %d: %d files\n", i+1, len(g))
	}
	if res.Version < 0 {
		fmt.Fprintf(stdout, "nothing committed (%d groups, %d files)\n", len(res.Groups), res.FilesRemoved)
		return nil
	}
	fmt.Fprintf(stdout, "committed version %d: %d files (%d bytes) compacted into %d (%d bytes), %d rows\n",
		res.Version, res.FilesRemoved, res.BytesRemoved, res.FilesAdded, res.BytesAdded, res.Rows)
	return nil
}
