// Command opsplot scrapes a cdcapply /metrics endpoint at a fixed interval
// until it stops answering, and renders what an SRE watches (lag per
// partition, freshness, records/s and rows/s, the Delta version) as an SVG
// chart, with the raw samples as CSV beside it. scripts/ops-plot.sh runs it
// against `cdcapply demo -metrics-address`; the README's operations section
// shows the result (docs/ops-demo.svg).
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:19464/metrics", "the /metrics endpoint to scrape")
	interval := flag.Duration("interval", time.Second, "scrape interval")
	window := flag.Int("rate-window", 10, "samples per rate window (like rate() over window*interval)")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for the endpoint's first answer")
	out := flag.String("out", "docs/ops-demo.svg", "SVG to write")
	csvOut := flag.String("csv", "docs/ops-demo.csv", "CSV of the samples to write")
	title := flag.String("title", "cdcapply demo", "chart title")
	caption := flag.String("caption", "", "lines under the title (a newline separates them): the command that produced the run")
	fromCSV := flag.Bool("from-csv", false, "do not scrape: draw the samples already in -csv again")
	flag.Parse()
	var samples []sample
	var err error
	if *fromCSV {
		samples, err = readCSV(*csvOut)
	} else {
		samples, err = scrape(context.Background(), *url, *interval, *wait)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "opsplot:", err)
		os.Exit(1)
	}
	if len(samples) < 3 {
		fmt.Fprintf(os.Stderr, "opsplot: only %d samples\n", len(samples))
		os.Exit(1)
	}
	if !*fromCSV {
		if err := writeCSV(*csvOut, samples); err != nil {
			fmt.Fprintln(os.Stderr, "opsplot:", err)
			os.Exit(1)
		}
	}
	svg := render(samples, *window, *title, *caption)
	if err := os.WriteFile(*out, []byte(svg), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "opsplot:", err)
		os.Exit(1)
	}
	fmt.Printf("opsplot: %d samples over %.0fs -> %s, %s\n", len(samples), samples[len(samples)-1].t, *out, *csvOut)
}

// sample is one scrape: the series opsplot plots.
type sample struct {
	t         float64            // seconds since the first scrape
	lag       map[string]float64 // per "topic[partition]"
	freshness float64            // max over tables; NaN before the first commit
	records   float64            // sum of cdcapply_records_total
	rows      float64            // sum of cdcapply_rows_written_total
	version   float64            // max cdcapply_table_version; NaN before
}

func scrape(ctx context.Context, url string, interval, wait time.Duration) ([]sample, error) {
	client := &http.Client{Timeout: interval * 3}
	var out []sample
	var start time.Time
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		at := time.Now()
		s, err := scrapeOnce(ctx, client, url)
		switch {
		case err != nil && len(out) == 0 && time.Now().Before(deadline):
			// not up yet
		case err != nil && len(out) == 0:
			return nil, fmt.Errorf("no answer from %s within %s: %w", url, wait, err)
		case err != nil:
			return out, nil // the run ended
		default:
			if start.IsZero() {
				start = at
			}
			s.t = at.Sub(start).Seconds()
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C:
		}
	}
}

func scrapeOnce(ctx context.Context, c *http.Client, url string) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parse(resp.Body)
}

// parse reads the Prometheus text exposition format and keeps the series
// opsplot plots.
func parse(r io.Reader) (sample, error) {
	s := sample{lag: map[string]float64{}, freshness: math.NaN(), version: math.NaN()}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseLine(line)
		if err != nil {
			return s, err
		}
		switch name {
		case "cdcapply_partition_lag_records":
			s.lag[labels["topic"]+"["+labels["partition"]+"]"] += value
		case "cdcapply_table_freshness_seconds":
			if math.IsNaN(s.freshness) || value > s.freshness {
				s.freshness = value
			}
		case "cdcapply_records_total":
			s.records += value
		case "cdcapply_rows_written_total":
			s.rows += value
		case "cdcapply_table_version":
			if math.IsNaN(s.version) || value > s.version {
				s.version = value
			}
		}
	}
	return s, sc.Err()
}

// parseLine splits `name{a="x",b="y"} value`.
func parseLine(line string) (string, map[string]string, float64, error) {
	labels := map[string]string{}
	var name, rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		name = line[:i]
		j := i + 1
		for j < len(line) && line[j] != '}' {
			eq := strings.IndexByte(line[j:], '=')
			if eq < 0 || j+eq+1 >= len(line) || line[j+eq+1] != '"' {
				return "", nil, 0, fmt.Errorf("bad labels in %q", line)
			}
			key := line[j : j+eq]
			k := j + eq + 2
			var val strings.Builder
			for ; k < len(line) && line[k] != '"'; k++ {
				if line[k] == '\\' && k+1 < len(line) {
					k++
					switch line[k] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[k])
					}
					continue
				}
				val.WriteByte(line[k])
			}
			labels[key] = val.String()
			j = k + 1
			if j < len(line) && line[j] == ',' {
				j++
			}
		}
		rest = strings.TrimSpace(line[min(j+1, len(line)):])
	} else {
		name, rest, _ = strings.Cut(line, " ")
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, fmt.Errorf("no value in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("value in %q: %w", line, err)
	}
	return name, labels, v, nil
}

func partitions(samples []sample) []string {
	set := map[string]bool{}
	for _, s := range samples {
		for k := range s.lag {
			set[k] = true
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	parts := partitions(samples)
	head := []string{"t_seconds"}
	for _, p := range parts {
		head = append(head, "lag "+p)
	}
	head = append(head, "freshness_seconds", "records_total", "rows_written_total", "table_version")
	_ = w.Write(head)
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, s := range samples {
		row := []string{strconv.FormatFloat(s.t, 'f', 3, 64)}
		for _, p := range parts {
			row = append(row, num(s.lag[p]))
		}
		row = append(row, num(s.freshness), num(s.records), num(s.rows), num(s.version))
		_ = w.Write(row)
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// readCSV reads what writeCSV wrote.
func readCSV(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	head := rows[0]
	num := func(v string) (float64, error) {
		if v == "" {
			return math.NaN(), nil
		}
		return strconv.ParseFloat(v, 64)
	}
	var out []sample
	for _, row := range rows[1:] {
		if len(row) != len(head) {
			return nil, fmt.Errorf("%s: a row of %d fields, header has %d", path, len(row), len(head))
		}
		s := sample{lag: map[string]float64{}}
		for i, h := range head {
			v, err := num(row[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, h, err)
			}
			switch {
			case h == "t_seconds":
				s.t = v
			case strings.HasPrefix(h, "lag "):
				s.lag[strings.TrimPrefix(h, "lag ")] = v
			case h == "freshness_seconds":
				s.freshness = v
			case h == "records_total":
				s.records = v
			case h == "rows_written_total":
				s.rows = v
			case h == "table_version":
				s.version = v
			default:
				return nil, fmt.Errorf("%s: unknown column %q", path, h)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// series is one line of a panel.
type series struct {
	name  string
	color string
	xs    []float64
	ys    []float64 // NaN: no point
}

// rate is the per-second increase of a counter over window samples, like
// PromQL's rate() over window*interval (counters here never reset).
func rate(samples []sample, window int, f func(sample) float64) ([]float64, []float64) {
	var xs, ys []float64
	for i := range samples {
		j := max(0, i-window)
		if i == j {
			continue
		}
		dt := samples[i].t - samples[j].t
		xs = append(xs, samples[i].t)
		ys = append(ys, (f(samples[i])-f(samples[j]))/dt)
	}
	return xs, ys
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}

func render(samples []sample, window int, title, caption string) string {
	xmax := samples[len(samples)-1].t
	var panels []panelSpec

	var lag []series
	for i, p := range partitions(samples) {
		s := series{name: "lag " + p, color: palette[i%len(palette)]}
		for _, sm := range samples {
			s.xs = append(s.xs, sm.t)
			s.ys = append(s.ys, sm.lag[p])
		}
		lag = append(lag, s)
	}
	panels = append(panels, panelSpec{"Lag per topic-partition (records): cdcapply_partition_lag_records", "records", lag})

	fresh := series{name: "freshness", color: palette[3]}
	for _, sm := range samples {
		fresh.xs = append(fresh.xs, sm.t)
		fresh.ys = append(fresh.ys, sm.freshness)
	}
	panels = append(panels, panelSpec{"Freshness (s): cdcapply_table_freshness_seconds", "seconds", []series{fresh}})

	rx, ry := rate(samples, window, func(s sample) float64 { return s.records })
	wx, wy := rate(samples, window, func(s sample) float64 { return s.rows })
	panels = append(panels, panelSpec{fmt.Sprintf("Throughput (per s, rate over %d samples): records and rows written", window), "per second", []series{
		{name: "records/s (cdcapply_records_total)", color: palette[0], xs: rx, ys: ry},
		{name: "rows/s (cdcapply_rows_written_total)", color: palette[2], xs: wx, ys: wy},
	}})

	ver := series{name: "Delta version", color: palette[4]}
	for _, sm := range samples {
		ver.xs = append(ver.xs, sm.t)
		ver.ys = append(ver.ys, sm.version)
	}
	panels = append(panels, panelSpec{"Delta table version: cdcapply_table_version", "version", []series{ver}})

	const width, left, right, top, panelH, gap = 960.0, 80.0, 20.0, 80.0, 170.0, 60.0
	height := top + float64(len(panels))*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i, line := range strings.Split(caption, "\n") {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="11" fill="#444">%s</text>`+"\n", left, 42+14*i, html.EscapeString(line))
	}
	for i, p := range panels {
		y0 := top + float64(i)*(panelH+gap)
		drawPanel(&b, p, left, y0, width-left-right, panelH, xmax)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

type panelSpec struct {
	title string
	unit  string
	lines []series
}

func drawPanel(b *strings.Builder, p panelSpec, x0, y0, w, h, xmax float64) {
	ymax := 0.0
	for _, s := range p.lines {
		for _, y := range s.ys {
			if !math.IsNaN(y) && !math.IsInf(y, 0) && y > ymax {
				ymax = y
			}
		}
	}
	yticks := niceTicks(ymax)
	ytop := yticks[len(yticks)-1]
	xticks := niceTicks(xmax)
	xtop := math.Max(xmax, 1)
	px := func(x float64) float64 { return x0 + x/xtop*w }
	py := func(y float64) float64 { return y0 + 20 + h - y/ytop*h }
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x0, y0+12, html.EscapeString(p.title))
	for _, t := range yticks {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x0, py(t), x0+w, py(t))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", x0-6, py(t)+4, human(t))
	}
	for _, t := range xticks {
		if t > xtop {
			break
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px(t), y0+20, px(t), y0+20+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%ss</text>`+"\n", px(t), y0+20+h+14, human(t))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", x0, y0+20, w, h)
	for i, s := range p.lines {
		var path strings.Builder
		pen := false
		for k := range s.xs {
			y := s.ys[k]
			if math.IsNaN(y) || math.IsInf(y, 0) {
				pen = false
				continue
			}
			if pen {
				fmt.Fprintf(&path, " L%.1f,%.1f", px(s.xs[k]), py(y))
			} else {
				fmt.Fprintf(&path, " M%.1f,%.1f", px(s.xs[k]), py(y))
				pen = true
			}
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`+"\n", strings.TrimSpace(path.String()), s.color)
		lx := x0 + w - 260
		ly := y0 + 34 + float64(i)*15
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly-4, lx+18, ly-4, s.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, ly, html.EscapeString(s.name))
	}
}

// niceTicks returns 0 and round steps up to at least max.
func niceTicks(maxv float64) []float64 {
	if maxv <= 0 || math.IsNaN(maxv) {
		return []float64{0, 1}
	}
	raw := maxv / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= maxv {
			break
		}
	}
	return out
}

func human(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}
