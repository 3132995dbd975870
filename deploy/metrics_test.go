package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcapply/cdcapply/apply"
)

// capturingRegisterer records every collector registered through it
// (before passing it on to a real registry), so the test can ask each for
// its descriptors: a Vec without children does not appear in Gather.
type capturingRegisterer struct {
	reg *prometheus.Registry

	mu   sync.Mutex
	cols []prometheus.Collector
}

func (c *capturingRegisterer) Register(col prometheus.Collector) error {
	if err := c.reg.Register(col); err != nil {
		return err
	}
	c.mu.Lock()
	c.cols = append(c.cols, col)
	c.mu.Unlock()
	return nil
}

func (c *capturingRegisterer) MustRegister(cols ...prometheus.Collector) {
	for _, col := range cols {
		if err := c.Register(col); err != nil {
			panic(err)
		}
	}
}

func (c *capturingRegisterer) Unregister(col prometheus.Collector) bool { return c.reg.Unregister(col) }

func (c *capturingRegisterer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cols)
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// names returns the fully qualified name of every descriptor.
func (c *capturingRegisterer) names(t *testing.T) map[string]bool {
	c.mu.Lock()
	cols := slices.Clone(c.cols)
	c.mu.Unlock()
	out := map[string]bool{}
	for _, col := range cols {
		ch := make(chan *prometheus.Desc)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqNameRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no fqName in descriptor %s", d)
			}
			out[m[1]] = true
		}
	}
	return out
}

var (
	registeredOnce sync.Once
	registered     map[string]bool
	registeredErr  error
)

// registeredMetrics is the set of metric names `cdcapply run` serves: the
// engine's (apply.NewMetrics), franz-go's kprom client metrics (registered
// when the engine creates its Kafka client, so the engine is really run
// against an in-process broker until they appear), and the Go and process
// collectors run.go adds.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	registeredOnce.Do(func() { registered, registeredErr = buildRegistered(t) })
	if registeredErr != nil {
		t.Fatal(registeredErr)
	}
	return registered
}

func buildRegistered(t *testing.T) (map[string]bool, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dir := t.TempDir()
	cfg, err := apply.ParseConfig("deploy-test.yaml", []byte(fmt.Sprintf(`
pipeline: {id: deploytest}
kafka: {brokers: [%s], group: deploytest}
tables:
  - {name: orders, topic: orders, location: %s, key_columns: [id]}
`, c.ListenAddrs()[0], filepath.Join(dir, "orders"))))
	if err != nil {
		return nil, err
	}
	reg := &capturingRegisterer{reg: prometheus.NewRegistry()}
	// As cmd/cdcapply/run.go does when metrics.address is set.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := apply.NewMetrics(reg)
	before := reg.count()
	e, err := apply.NewEngine(cfg, apply.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))), apply.WithMetrics(m))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for reg.count() == before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return nil, fmt.Errorf("engine run: %w", err)
	}
	if reg.count() == before {
		return nil, fmt.Errorf("the engine's Kafka client registered no kprom metrics within 30s")
	}
	return reg.names(t), nil
}

// metricKnown reports whether name is served: a registered name, a
// histogram's or summary's _bucket/_sum/_count series of one, or one of
// the series Prometheus itself adds to every scrape (up, scrape_*).
func metricKnown(reg map[string]bool, name string) bool {
	if reg[name] || name == "up" || strings.HasPrefix(name, "scrape_") {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && reg[base] {
			return true
		}
	}
	return false
}

func TestRegisteredMetrics(t *testing.T) {
	reg := registeredMetrics(t)
	// A sample of each source, so the set cannot be silently empty or partial.
	for _, want := range []string{
		"cdcapply_records_total", "cdcapply_table_freshness_seconds", "cdcapply_partition_lag_records",
		"cdcapply_stage_duration_seconds", "cdcapply_kafka_connect_errors_total",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !reg[want] {
			names := make([]string, 0, len(reg))
			for n := range reg {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Errorf("%s not registered; registered: %s", want, strings.Join(names, " "))
		}
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"cdcapply_stage_duration_seconds_bucket", true},
		{"cdcapply_batch_records_count", true},
		{"up", true},
		{"cdcapply_tombstones", false},
		{"cdcapply_records", false},
		{"cdcapply_records_total_bucket", true}, // the suffix rule does not know types
	} {
		if got := metricKnown(reg, tc.name); got != tc.want {
			t.Errorf("metricKnown(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  string
	}{
		{expr: `cdcapply_table_version`, want: []string{"cdcapply_table_version"}},
		{expr: `cdcapply_table_halted{table=~"$table"} == 1`, want: []string{"cdcapply_table_halted"}},
		{expr: `histogram_quantile(0.99, sum by (le, stage) (rate(cdcapply_stage_duration_seconds_bucket{table=~"${table}", stage!="x{y}"}[$__rate_interval])))`,
			want: []string{"cdcapply_stage_duration_seconds_bucket"}},
		{expr: `sum(rate(a_total[5m])) by (table) / on(table) group_left(reason) sum without (x) (b_total offset 1h30m)`,
			want: []string{"a_total", "b_total"}},
		{expr: `max by (table) (cdcapply_partition_lag_records) > 0 unless on (table) sum by (table) (increase(cdcapply_rows_written_total[15m])) > 0`,
			want: []string{"cdcapply_partition_lag_records", "cdcapply_rows_written_total"}},
		{expr: `time() - cdcapply_table_purge_horizon_seconds > bool 1e3`, want: []string{"cdcapply_table_purge_horizon_seconds"}},
		{expr: `vector($sla_seconds) + 0 * x:recorded:rate5m @ end() and y[10m:1m]`, want: []string{"x:recorded:rate5m", "y"}},
		{expr: `label_replace(up, "a", "$1", "instance", "(.*)") or [[old_var]] + topk(3, z)`, want: []string{"up", "z"}},
		{expr: `deriv(lag[10m]) > 0.5 and lag > .5 # comment naming not_a_metric`, want: []string{"lag"}},
		{expr: `rat(x[5m])`, err: "unknown PromQL function"},
		{expr: `{__name__="x"}`, err: "__name__"},
		{expr: `sum(x{a="b}) `, err: "unclosed"},
	} {
		got, err := MetricNames(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("MetricNames(%q) error = %v, want one containing %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
