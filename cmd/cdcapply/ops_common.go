package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// opsSubcommands are the table operations of issue 7: tombstone purge,
// vacuum, restore, optimize, time-travel show and the current view.
func opsSubcommands() []subcommand {
	return []subcommand{
		{"tombstones", "tombstone stats, or purge tombstones older than the table's maximum lateness (tombstones stats|purge)", runTombstones},
		{"vacuum", "delete data files no longer referenced and older than the retention", runVacuum},
		{"restore", "restore the table's files as of a version or time and rewind the stream's Kafka positions", runRestore},
		{"optimize", "compact small files without changing rows (dataChange=false)", runOptimize},
		{"show", "print a table's rows as of a version or time", runShow},
		{"view-ddl", "print the CREATE VIEW that hides tombstones and engine columns", runViewDDL},
		{"status", "per table: version, last commit, positions and lag, freshness, row counts, purge horizon, readable versions, halt state", runStatus},
	}
}

// tableFlags locate a table: --table PATH, or --config FILE with --name
// (which also supplies max lateness, key columns, brokers and pipeline).
type tableFlags struct {
	table, config, name string
}

func (f *tableFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.table, "table", "", "table location (a local directory or s3://bucket/prefix)")
	fs.StringVar(&f.config, "config", "", "pipeline configuration file; with --name, the table's settings come from it")
	fs.StringVar(&f.name, "name", "", "table name in --config")
}

// resolve returns the table location and, with --config, the pipeline
// configuration and the table's entry in it.
func (f *tableFlags) resolve(fs *flag.FlagSet) (string, *apply.Config, *apply.TableConfig, error) {
	if f.table == "" && fs.NArg() > 0 {
		f.table = fs.Arg(0)
	}
	if f.config == "" {
		if f.table == "" {
			return "", nil, nil, fmt.Errorf("%s: give --table PATH (or --config FILE --name TABLE): %w", fs.Name(), errUsage)
		}
		return f.table, nil, nil, nil
	}
	cfg, err := apply.LoadConfig(f.config)
	if err != nil {
		return "", nil, nil, err
	}
	for i := range cfg.Tables {
		tc := &cfg.Tables[i]
		if (f.name != "" && tc.Name == f.name) || (f.name == "" && f.table != "" && tc.Location == f.table) {
			return tc.Location, cfg, tc, nil
		}
	}
	return "", nil, nil, fmt.Errorf("%s: no table named %q (or at %q) in %s", fs.Name(), f.name, f.table, f.config)
}

// openTable opens the table at loc: a local directory or s3://bucket/prefix.
func openTable(loc string) (*delta.Table, error) {
	st, err := storage.ForLocation(loc)
	if err != nil {
		return nil, err
	}
	return delta.Open(st), nil
}

// auditLogger writes the operations' audit lines as JSON to w.
func auditLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// parseFlags parses args, printing usage on error as errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// progress reports a long operation: a rewritten \r line on a terminal,
// else a log line at most every interval.
type progress struct {
	w        io.Writer
	tty      bool
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last time.Time // guarded by mu
	line bool      // a \r line is open; guarded by mu
}

func newProgress(w io.Writer, log *slog.Logger) *progress {
	p := &progress{w: w, log: log, interval: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 100*time.Millisecond
		}
	}
	return p
}

// report shows msg (with its key-value pairs) unless one was shown less
// than an interval ago.
func (p *progress) report(msg string, kv ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	if p.tty {
		var b strings.Builder
		b.WriteString("\r" + msg)
		for i := 0; i+1 < len(kv); i += 2 {
			fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
		}
		b.WriteString("   ")
		fmt.Fprint(p.w, b.String())
		p.line = true
		return
	}
	p.log.Info(msg, kv...)
}

// done ends an open \r line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line {
		fmt.Fprintln(p.w)
		p.line = false
	}
}
