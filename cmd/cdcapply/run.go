package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cdcapply/cdcapply/apply"
)

// engineSubcommands are the verbs of the streaming engine itself.
func engineSubcommands() []subcommand {
	return []subcommand{
		{"run", "apply the pipeline of a configuration file (-c pipeline.yaml) until interrupted", runRun},
		{"config", "config validate FILE | config schema: check a pipeline file, or print its JSON Schema", runConfig},
	}
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("c", "pipeline.yaml", "pipeline configuration file")
	format := fs.String("log-format", "json", "log format: json or text")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	instanceID := fs.String("instance-id", "", "this process's kafka.instance_id, over the file's: one pipeline file for the processes of a group (a StatefulSet's -instance-id $(POD_NAME), a systemd template's -instance-id %i)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *instanceID != "" {
		if err := apply.CheckInstanceID(*instanceID); err != nil {
			return fmt.Errorf("-instance-id: %w", err)
		}
	}
	log, err := newLogger(stderr, *format, *level)
	if err != nil {
		return err
	}
	cfg, err := apply.LoadConfig(*path)
	if err != nil {
		return err
	}
	if *instanceID != "" {
		cfg.Kafka.InstanceID = *instanceID
	}
	opts := []apply.EngineOption{apply.Logger(log)}
	reg := prometheus.NewRegistry()
	if cfg.Metrics.Address != "" {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts = append(opts, apply.WithMetrics(apply.NewMetrics(reg)))
	}
	e, err := apply.NewEngine(cfg, opts...)
	if err != nil {
		return err
	}
	if cfg.Metrics.Address != "" {
		stop, err := serveHTTP(cfg.Metrics.Address, e.Handler(reg, cfg.Metrics.PProf), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("starting", "pipeline", cfg.Pipeline.ID, "group", cfg.Kafka.Group, "instance_id", cfg.Kafka.InstanceID, "tables", len(cfg.Tables))
	if err := e.Run(ctx); err != nil {
		return err
	}
	if halted := e.Halted(); len(halted) > 0 {
		var errs []error
		for name, err := range halted {
			errs = append(errs, fmt.Errorf("table %s halted: %w", name, err))
		}
		return errors.Join(errs...)
	}
	log.Info("stopped", "pipeline", cfg.Pipeline.ID)
	return nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("parse -log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("parse -log-format %q: want json or text", format)
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: cdcapply config validate FILE | cdcapply config schema")
		return errUsage
	}
	switch args[0] {
	case "schema":
		_, err := stdout.Write(apply.ConfigSchema)
		return err
	case "validate":
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: cdcapply config validate FILE")
			return errUsage
		}
		cfg, err := apply.LoadConfig(args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: valid: pipeline %s, %d table(s)\n", args[1], cfg.Pipeline.ID, len(cfg.Tables))
		return nil
	}
	fmt.Fprintf(stderr, "cdcapply config: unknown action %q (want validate or schema)\n", args[0])
	return errUsage
}

// serveHTTP serves h on addr until the returned stop is called; stop
// shuts the server down and waits for its goroutine.
func serveHTTP(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn("metrics server shutdown", "addr", addr, "err", err)
		}
		<-done
	}, nil
}
