package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cdcapply/cdcapply/delta"
)

// runVacuum is `cdcapply vacuum`.
func runVacuum(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vacuum", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	retention := fs.Duration("retention", -1, "keep files removed within this long (default: the table's delta.deletedFileRetentionDuration, 7 days)")
	force := fs.Bool("force", false, "allow a retention shorter than the table's: older versions become unreadable and a writer's in-flight files may go")
	dry := fs.Bool("dry-run", false, "list the files that would be deleted and delete nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	loc, _, _, err := tf.resolve(fs)
	if err != nil {
		return err
	}
	log := auditLogger(stderr)
	prog := newProgress(stderr, log)
	opts := delta.VacuumOptions{Force: *force, DryRun: *dry, Logger: log, Progress: func(p delta.VacuumProgress) {
		prog.report("vacuum", "scanned", p.Scanned, "candidates", p.Candidates, "deleted", p.Deleted)
	}}
	if *retention >= 0 {
		opts.Retention = retention
	}
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	res, err := delta.Vacuum(ctx, tbl, opts)
	prog.done()
	if err != nil {
		return err
	}
	what := "deleted"
	if res.DryRun {
		what = "would delete"
	}
	for _, f := range res.Files {
		fmt.Fprintf(stdout, "%s %s\n", what, f)
	}
	fmt.Fprintf(stdout, "%s %d of %d files (%d bytes), retention %s, references of version %d kept\n",
		what, len(res.Files), res.Scanned, res.Bytes, res.Retention, res.Version)
	return nil
}
