package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"

	"github.com/cdcapply/cdcapply/maintenance"
)

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// runViewDDL is `cdcapply view-ddl`.
func runViewDDL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("view-ddl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	tf.register(fs)
	dialect := fs.String("dialect", "", "spark, trino or duckdb")
	view := fs.String("view", "", "view name (default: <table directory>_current)")
	trinoTable := fs.String("trino-table", "", "the table's name in Trino's Delta connector (catalog.schema.table), for --dialect trino")
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
	tbl, err := openTable(loc)
	if err != nil {
		return err
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("view-ddl: %w", err)
	}
	name := *view
	if name == "" {
		name = nonIdent.ReplaceAllString(filepath.Base(loc), "_") + "_current"
	}
	abs, err := filepath.Abs(loc)
	if err != nil {
		return fmt.Errorf("view-ddl: %w", err)
	}
	ddl, err := maintenance.ViewDDL(snap.Schema, maintenance.Dialect(*dialect), maintenance.ViewOptions{Name: name, Location: abs, Table: *trinoTable})
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, ddl)
	return err
}
