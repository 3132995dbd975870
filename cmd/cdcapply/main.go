// Command cdcapply is the CDC apply engine's command line: it dispatches
// to one subcommand and turns its error into an exit status.
//
// `demo` runs the whole pipeline on embedded defaults; `run` applies a
// pipeline file against real brokers; the operational subcommands
// (tombstones, vacuum, restore, optimize, show, view-ddl, config) work on
// tables and configuration files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "cdcapply:", err)
		os.Exit(1)
	}
}

// errUsage marks a command line that names no known subcommand or has bad
// flags; the usage has been printed already.
var errUsage = errors.New("usage")

// subcommand is one verb of the command line.
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func subcommands() []subcommand {
	return append([]subcommand{
		{"demo", "run the whole pipeline on embedded defaults (in-process Kafka, tables under ./cdcapply-demo) and check the result against an oracle", runStreamDemo},
		{"delta-demo", "write a local Delta table through the Delta core alone and read it back", runDemo},
		{"bench", "end-to-end benchmark: generated workload through Kafka and the engine, verified against the oracle (bench/README.md)", runBench},
	}, append(engineSubcommands(), opsSubcommands()...)...)
}

// run executes the subcommand named by args[0]; it is main without the
// process: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return nil
	}
	for _, c := range subcommands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "cdcapply: unknown subcommand %q\n\n", args[0])
	usage(stderr)
	return errUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cdcapply <subcommand> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "subcommands:")
	width := 0
	for _, c := range subcommands() {
		width = max(width, len(c.name))
	}
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
}
