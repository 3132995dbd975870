package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const expo = `# HELP cdcapply_partition_lag_records x
# TYPE cdcapply_partition_lag_records gauge
cdcapply_partition_lag_records{partition="0",table="orders",topic="t"} 12
cdcapply_partition_lag_records{partition="1",table="orders",topic="t"} 3
cdcapply_partition_lag_records{partition="0",table="items",topic="t"} 5
cdcapply_records_total{outcome="applied",reason="",table="orders"} 100
cdcapply_records_total{outcome="quarantined",reason="a \"quoted\", reason",table="orders"} 7
cdcapply_rows_written_total{kind="insert",table="orders"} 90
cdcapply_table_freshness_seconds{table="orders"} 1.5e+01
cdcapply_table_freshness_seconds{table="items"} 2
cdcapply_table_version{table="orders"} 4
go_goroutines 12
`
	s, err := parse(strings.NewReader(expo))
	if err != nil {
		t.Fatal(err)
	}
	if s.lag["t[0]"] != 17 || s.lag["t[1]"] != 3 || len(s.lag) != 2 {
		t.Errorf("lag %v", s.lag)
	}
	if s.records != 107 || s.rows != 90 || s.freshness != 15 || s.version != 4 {
		t.Errorf("records %v rows %v freshness %v version %v", s.records, s.rows, s.freshness, s.version)
	}
	empty, err := parse(strings.NewReader("go_goroutines 1\n"))
	if err != nil || !math.IsNaN(empty.freshness) || !math.IsNaN(empty.version) {
		t.Errorf("before any commit: %+v, %v", empty, err)
	}
	if _, err := parse(strings.NewReader("cdcapply_table_version{table=orders} 1\n")); err == nil {
		t.Error("unquoted label value accepted")
	}
}

func TestCSVRoundTrip(t *testing.T) {
	in := []sample{
		{t: 0, lag: map[string]float64{"t[0]": 1}, freshness: math.NaN(), version: math.NaN()},
		{t: 1.5, lag: map[string]float64{"t[0]": 0}, freshness: 2.25, records: 10, rows: 8, version: 3},
	}
	p := filepath.Join(t.TempDir(), "s.csv")
	if err := writeCSV(p, in); err != nil {
		t.Fatal(err)
	}
	out, err := readCSV(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[1].t != 1.5 || out[1].lag["t[0]"] != 0 || out[0].lag["t[0]"] != 1 ||
		!math.IsNaN(out[0].freshness) || out[1].freshness != 2.25 || out[1].records != 10 || out[1].rows != 8 || out[1].version != 3 {
		t.Errorf("round trip: %+v", out)
	}
}

func TestRateAndTicks(t *testing.T) {
	samples := []sample{{t: 0, records: 0}, {t: 1, records: 10}, {t: 2, records: 30}, {t: 3, records: 30}}
	xs, ys := rate(samples, 2, func(s sample) float64 { return s.records })
	if len(xs) != 3 || ys[0] != 10 || ys[1] != 15 || ys[2] != 10 {
		t.Errorf("rate: %v %v", xs, ys)
	}
	ticks := niceTicks(1234)
	if ticks[0] != 0 || ticks[len(ticks)-1] < 1234 || len(ticks) > 8 {
		t.Errorf("ticks %v", ticks)
	}
	svg := render(append(samples, sample{t: 4, records: 40, freshness: 2, version: 1}), 2, "t", "a\nb")
	if !strings.HasPrefix(svg, "<svg") || strings.Count(svg, "<path") != 4 || !strings.Contains(svg, ">b</text>") {
		t.Errorf("svg:\n%s", svg)
	}
}
