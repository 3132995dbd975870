package harness

import (
	"os"
	"strconv"
	"strings"
)

// HostCPU is how the machine's CPU time went over a span, from the
// aggregate "cpu" line of /proc/stat (every process, every core). On a
// virtual machine Steal is the time the hypervisor gave this machine's
// vCPUs to someone else: a process that wanted a core then did not run,
// and its wall-clock figures drop while its CPU-second figures do not.
// On this project's 2-core host a Must show 1 run saw 8-64% of the
// machine stolen in one 2-second sample and 1-2% in the next, which is
// why a wall-clock ratio of two measurements taken at different times
// needs the steal of each beside it.
type HostCPU struct {
	// CoreSeconds is the span's length times the cores.
	CoreSeconds float64 `json:"core_seconds"`
	// Busy is user, nice, system, irq and softirq time; Idle is idle and
	// iowait; Steal is stolen; each a share of CoreSeconds.
	Busy  float64 `json:"busy_share"`
	Idle  float64 `json:"idle_share"`
	Steal float64 `json:"steal_share"`
}

// cpuTicks are /proc/stat's first eight "cpu" fields: user, nice,
// system, idle, iowait, irq, softirq, steal (guest time is already in
// user and nice).
type cpuTicks [8]uint64

// readCPUTicks reads /proc/stat; false where there is none (not Linux).
func readCPUTicks() (cpuTicks, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, false
	}
	return parseCPUTicks(string(b))
}

func parseCPUTicks(stat string) (cpuTicks, bool) {
	var t cpuTicks
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 1+len(t) {
			return cpuTicks{}, false
		}
		for i := range t {
			v, err := strconv.ParseUint(f[1+i], 10, 64)
			if err != nil {
				return cpuTicks{}, false
			}
			t[i] = v
		}
		return t, true
	}
	return cpuTicks{}, false
}

// since is the CPU time from a to b as shares, nil when either read
// failed or no time passed.
func since(a cpuTicks, aok bool, b cpuTicks, bok bool) *HostCPU {
	if !aok || !bok {
		return nil
	}
	var d cpuTicks
	total := 0.0
	for i := range d {
		if b[i] < a[i] {
			return nil
		}
		d[i] = b[i] - a[i]
		total += float64(d[i])
	}
	if total == 0 {
		return nil
	}
	const user, nice, system, idle, iowait, irq, softirq, steal = 0, 1, 2, 3, 4, 5, 6, 7
	return &HostCPU{
		CoreSeconds: total / clockTicks,
		Busy:        float64(d[user]+d[nice]+d[system]+d[irq]+d[softirq]) / total,
		Idle:        float64(d[idle]+d[iowait]) / total,
		Steal:       float64(d[steal]) / total,
	}
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100

// hostSpan measures the machine's CPU from its creation to end.
type hostSpan struct {
	start cpuTicks
	ok    bool
}

func startHostSpan() hostSpan {
	t, ok := readCPUTicks()
	return hostSpan{t, ok}
}

func (s hostSpan) end() *HostCPU {
	t, ok := readCPUTicks()
	return since(s.start, s.ok, t, ok)
}
