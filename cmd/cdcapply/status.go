package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/status"
)

// statusEnv is what runStatus takes from the world; tests replace it so
// that golden output does not depend on the clock or on brokers.
type statusEnv struct {
	now     func() time.Time
	offsets func(seeds []string) status.EndOffsets
}

var liveStatusEnv = statusEnv{
	now: time.Now,
	offsets: func(seeds []string) status.EndOffsets {
		return status.Brokers{Seeds: seeds, Timeout: 3 * time.Second}
	},
}

// runStatus is `cdcapply status`.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return statusCommand(ctx, args, stdout, stderr, liveStatusEnv)
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer, env statusEnv) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	table := fs.String("table", "", "report on the table at this location (a local directory) instead of a configuration's tables")
	config := fs.String("config", "", "pipeline configuration file: report on all its tables (or --name)")
	name := fs.String("name", "", "with --config, only this table")
	pipeline := fs.String("pipeline", "", "with --table, the pipeline whose positions to report (default: every cdcapply pipeline in the table)")
	brokers := fs.String("brokers", "", "comma-separated Kafka brokers for lag (default: the configuration's; none: lag unknown)")
	group := fs.String("group", "", "consumer group whose members to show, with the partitions each reads (default: the configuration's kafka.group)")
	versions := fs.Int("versions", 20, "check this many recent versions for time travel")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *table == "" && fs.NArg() > 0 {
		*table = fs.Arg(0)
	}
	var sources []status.Source
	var seeds []string
	switch {
	case *config != "":
		cfg, err := apply.LoadConfig(*config)
		if err != nil {
			return err
		}
		seeds = cfg.Kafka.Brokers
		if *group == "" {
			*group = cfg.Kafka.Group
		}
		for _, tc := range cfg.Tables {
			if *name != "" && tc.Name != *name {
				continue
			}
			st, err := storage.ForLocation(tc.Location)
			if err != nil {
				return fmt.Errorf("status: table %s: %w", tc.Name, err)
			}
			src := status.Source{Name: tc.Name, Store: st, Pipeline: cfg.Pipeline.ID, MaxLateness: time.Duration(tc.MaxLateness),
				KafkaTombstones: tc.KafkaTombstones}
			if tc.Topic != "" {
				src.Topics = []string{tc.Topic}
			}
			sources = append(sources, src)
		}
		if len(sources) == 0 {
			return fmt.Errorf("status: no table named %q in %s", *name, *config)
		}
	case *table != "":
		st, err := storage.ForLocation(*table)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		sources = []status.Source{{Name: *table, Store: st, Pipeline: *pipeline}}
	default:
		return fmt.Errorf("status: give --config FILE or --table PATH: %w", errUsage)
	}
	if *brokers != "" {
		seeds = strings.Split(*brokers, ",")
	}
	opts := status.Options{Now: env.now, Versions: *versions}
	if len(seeds) > 0 {
		opts.Offsets = env.offsets(seeds)
		if d, ok := opts.Offsets.(status.GroupDescriber); ok && *group != "" {
			opts.Group, opts.Members = *group, d
		}
	}
	rep, err := status.Gather(ctx, sources, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteText(stdout)
}
