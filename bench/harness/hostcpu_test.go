package harness

import (
	"math"
	"runtime"
	"strings"
	"testing"
)

// TestHostCPUShares: two /proc/stat readings give the span's busy, idle
// and stolen shares; a reading without the cpu line, or one that went
// backwards, gives none.
func TestHostCPUShares(t *testing.T) {
	a, aok := parseCPUTicks("cpu  1000 0 200 5000 10 0 5 100 0 0\ncpu0 500 0 100 2500 5 0 2 50 0 0\nintr 1\n")
	// 300 ticks user, 40 system, 120 idle, 20 iowait, 10 softirq, 110 steal: 600 in all.
	b, bok := parseCPUTicks("cpu  1300 0 240 5120 30 0 15 210 0 0\n")
	h := since(a, aok, b, bok)
	if h == nil {
		t.Fatal("no figures from two good readings")
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !near(h.CoreSeconds, 6) || !near(h.Busy, 350.0/600) || !near(h.Idle, 140.0/600) || !near(h.Steal, 110.0/600) {
		t.Errorf("got %+v, want 6 core-seconds, busy 350/600, idle 140/600, steal 110/600", *h)
	}
	if _, ok := parseCPUTicks("cpu0 1 2 3 4 5 6 7 8\n"); ok {
		t.Error("parsed a per-core line as the machine's")
	}
	if _, ok := parseCPUTicks("cpu 1 2 3\n"); ok {
		t.Error("parsed a short cpu line")
	}
	if since(b, bok, a, aok) != nil {
		t.Error("figures from readings that went backwards")
	}
	if since(a, false, b, bok) != nil {
		t.Error("figures from a failed reading")
	}
	if line := hostCPULine(h, DecodeFigures{Before: &DecodeFigures{HostCPU: &HostCPU{Steal: 0.02}}, After: &DecodeFigures{}}); !strings.Contains(line, "18.3% stolen") || !strings.Contains(line, "decode-only 2.0% before") || strings.Contains(line, "after") {
		t.Errorf("report line %q", line)
	}
	if runtime.GOOS == "linux" {
		if _, ok := readCPUTicks(); !ok {
			t.Error("no cpu line in this machine's /proc/stat")
		}
	}
}

// TestLiveHeapTrend: the live heap's slope is fitted over the second half
// of the run only (the index build and the first batches grow the heap
// before the steady state), samples before the first collection are left
// out, and a flat heap has no slope.
func TestLiveHeapTrend(t *testing.T) {
	const mib = 1 << 20
	var samples []Sample
	for at := 0.0; at <= 600_000; at += 1000 { // ten minutes, a sample a second
		live := int64(500 * mib)
		switch {
		case at < 2000:
			live = 0 // no collection yet
		case at < 300_000:
			live = int64(at) * mib / 1000 // the build: a MiB a second
		default:
			live = 500*mib + int64((at-300_000)/60_000*6*mib) // then 6 MiB a minute
		}
		samples = append(samples, Sample{At: at, LiveHeap: live})
	}
	mid, end, perMin := liveHeapTrend(samples, 600_000)
	if mid != 500*mib || end != 530*mib {
		t.Errorf("mid %d end %d MiB, want 500 and 530", mid/mib, end/mib)
	}
	if perMin < 5.99*mib || perMin > 6.01*mib {
		t.Errorf("growth %.3f MiB a minute, want 6", perMin/mib)
	}
	for i := range samples {
		samples[i].LiveHeap = 700 * mib
	}
	if _, _, perMin := liveHeapTrend(samples, 600_000); perMin != 0 {
		t.Errorf("flat heap: growth %v", perMin)
	}
	if mid, end, perMin := liveHeapTrend(nil, 0); mid != 0 || end != 0 || perMin != 0 {
		t.Errorf("no samples: %d %d %v", mid, end, perMin)
	}
}
