package harness

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// line is one line of a panel.
type line struct {
	name  string
	color string
	xs    []float64 // seconds
	ys    []float64
}

// WriteSVG plots the run over time, one panel each: throughput (records
// committed per second, each commit's records spread over the time since
// the previous one), per commit either the batch's freshness p50 and p99
// (rate runs, wall-clock source times) or its plan + commit time
// (preproduced runs), and the engine's RSS. A plain SVG file, no
// dependencies.
func (r *Report) WriteSVG(path string) error {
	if len(r.Series) == 0 || r.Engine == nil {
		return fmt.Errorf("bench: no series to plot (failed run)")
	}
	var secs, ev []float64
	for _, p := range r.Series {
		secs, ev = append(secs, p.T-0.5), append(ev, p.EventsPerSec)
	}
	var at, p50, p99, apply []float64
	for _, b := range r.Engine.Batches {
		at = append(at, b.At/1000)
		p50, p99, apply = append(p50, b.FreshP50), append(p99, b.FreshP99), append(apply, b.PlanMs+b.CommitMs)
	}
	var st, rss []float64
	for _, s := range r.Engine.Samples {
		st, rss = append(st, s.At/1000), append(rss, float64(s.RSS)/(1<<20))
	}
	xmax := r.Engine.DoneAt / 1000
	const w, ph, top = 900.0, 200.0, 40.0
	var b strings.Builder
	h := top + 3*(ph+50)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	o := r.Options.Workload
	title := fmt.Sprintf("cdcapply bench: %d keys, %d changes, %d columns, rate %s; %.0f events/s",
		o.Keys, o.Events, o.Columns, rateText(r.Options.Rate), r.Throughput.EventsPerSec)
	if r.Freshness.WallClock {
		title += fmt.Sprintf(", freshness p99 %.0f ms", r.Freshness.P99)
	}
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="13">%s</text>`+"\n", html.EscapeString(title))
	panel(&b, top, w, ph, xmax, "records committed per second", []line{{"events/s", "#1f77b4", secs, ev}})
	if r.Freshness.WallClock {
		panel(&b, top+ph+50, w, ph, xmax, "freshness of each committed batch, ms (source commit to table commit)",
			[]line{{"p50", "#2ca02c", at, p50}, {"p99", "#d62728", at, p99}})
	} else {
		panel(&b, top+ph+50, w, ph, xmax, "plan + write + commit time of each batch, ms", []line{{"apply", "#ff7f0e", at, apply}})
	}
	panel(&b, top+2*(ph+50), w, ph, xmax, "engine RSS, MiB", []line{{"RSS", "#9467bd", st, rss}})
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "max (preproduced)"
	}
	return fmt.Sprintf("%.0f/s", rate)
}

// niceStep is a 1-2-5 step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func panel(b *strings.Builder, y0, w, h, xmax float64, title string, lines []line) {
	const left, right = 70.0, 20.0
	pw := w - left - right
	ymax := 0.0
	for _, l := range lines {
		for _, y := range l.ys {
			ymax = max(ymax, y)
		}
	}
	ystep := niceStep(ymax, 4)
	ymax = math.Max(ystep, math.Ceil(ymax/ystep)*ystep)
	xstep := niceStep(xmax, 10)
	px := func(x float64) float64 { return left + pw*x/math.Max(xmax, 1e-9) }
	py := func(y float64) float64 { return y0 + h - h*y/ymax }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="12">%s</text>`+"\n", left, y0-6, html.EscapeString(title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, pw, h)
	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, left, py(y), left+pw, py(y))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, py(y)+4, short(y))
	}
	for x := 0.0; x <= xmax; x += xstep {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s s</text>`+"\n", px(x), y0+h+14, short(x))
	}
	for i, l := range lines {
		var pts []string
		for j, y := range l.ys {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(l.xs[j]), py(y)))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", l.color, strings.Join(pts, " "))
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", left+pw-60*float64(len(lines)-i), y0+14, l.color, html.EscapeString(l.name))
	}
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case v >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/1e2)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*10)/10)
}
