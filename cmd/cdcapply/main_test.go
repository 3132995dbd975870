package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestDemo runs the demo twice in one folder (the second run must start
// over, not append) and checks the table it leaves against the figures it
// printed.
func TestDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	for i := 0; i < 2; i++ {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"delta-demo", "-dir", dir}, &out, &errOut); err != nil {
			t.Fatalf("run %d: %v\nstdout:\n%s\nstderr:\n%s", i, err, out.String(), errOut.String())
		}
		for _, want := range []string{"the Delta Lake core alone", "version      14", "checkpoint   10", "check: rows"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: output lacks %q:\n%s", i, want, out.String())
			}
		}
	}
	snap, err := delta.Open(storage.NewLocal(filepath.Join(dir, "customers"))).Snapshot(context.Background())
	if err != nil {
		t.Fatalf("open demo table: %v", err)
	}
	if snap.Version != demoBatches {
		t.Errorf("version %d, want %d: a re-run must start the table over", snap.Version, demoBatches)
	}
	pos := checkpoint.Restore(snap, demoPipeline)
	if len(pos) != demoParts {
		t.Errorf("positions for %d partitions, want %d", len(pos), demoParts)
	}
}

// TestDemoKeepsForeignFolder checks that the demo refuses to wipe a folder
// it did not create.
func TestDemoKeepsForeignFolder(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"delta-demo", "-dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not made by the demo") {
		t.Fatalf("demo in a foreign folder: err = %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("foreign file gone: %v", err)
	}
}

func TestUnknownSubcommand(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"frobnicate"}, &out, &errOut)
	if !errors.Is(err, errUsage) {
		t.Fatalf("err = %v, want errUsage", err)
	}
	if !strings.Contains(errOut.String(), "unknown subcommand") || !strings.Contains(errOut.String(), "demo") {
		t.Errorf("usage not printed:\n%s", errOut.String())
	}
	if err := run(context.Background(), nil, &out, &errOut); !errors.Is(err, errUsage) {
		t.Fatalf("no args: err = %v, want errUsage", err)
	}
}

// TestUsageAligned: every subcommand's summary starts in one column, so
// the list reads as a table whatever the longest name.
func TestUsageAligned(t *testing.T) {
	var b bytes.Buffer
	usage(&b)
	col := -1
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue
		}
		name := strings.Fields(line)[0]
		at := strings.Index(line, name) + len(name)
		summary := at + len(line[at:]) - len(strings.TrimLeft(line[at:], " "))
		if col == -1 {
			col = summary
		}
		if summary != col || at >= col {
			t.Errorf("%q: summary at column %d, want %d", line, summary, col)
		}
		n++
	}
	if n != len(subcommands()) {
		t.Errorf("%d subcommand lines, want %d:\n%s", n, len(subcommands()), b.String())
	}
}
