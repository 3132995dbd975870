package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// goState is what the analysis tracks of a goroutine.
type goState uint8

const (
	goIdle     goState = iota // waiting, blocked or gone
	goRunning                 // on a P
	goRunnable                // ready, waiting for a P
	goSyscall                 // in a system call outside the runtime
)

// Report is where a trace's cores went: how long 0, 1, ... goroutines ran
// at once, and each spell with fewer running than there were Ps, by
// cause.
type Report struct {
	Procs   int       // Ps seen in the trace (GOMAXPROCS)
	Seconds float64   // first to last event
	Running []float64 // seconds with i goroutines running
	// Idle is core-seconds left unused (Procs - running, summed over
	// time), by cause:
	//   "runnable: ..."  goroutines were ready but not on a P, naming
	//                    the system calls in progress (a goroutine in a
	//                    syscall keeps its P until the runtime's monitor
	//                    takes it back, up to 10 ms later);
	//   "syscall: ..."   nothing ready, a goroutine in a system call
	//                    (kernel CPU for a write, idle for an fsync);
	//   "alone: F"       nothing ready and no system call: the named
	//                    goroutine (by the function it started in) ran
	//                    while everything else waited;
	//   "none: until R @ F"  nothing ran at all, until a goroutine that
	//                    had blocked for reason R (channel, network,
	//                    select, sleep ...) in function F was woken;
	//                    "none" when the trace ended first.
	Idle map[string]float64
	// Syscalls is seconds spent in system calls, by call site.
	Syscalls map[string]float64
}

// Analyze reads a runtime/trace execution trace.
func Analyze(r io.Reader) (*Report, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	rep := &Report{Idle: map[string]float64{}, Syscalls: map[string]float64{}}
	state := map[trace.GoID]goState{}
	startFn := map[trace.GoID]string{}
	sysSite := map[trace.GoID]string{}
	sysSince := map[trace.GoID]trace.Time{}
	// blockedOn is where each waiting goroutine blocked, and noneFor the
	// seconds of the current spell in which nothing ran: they go to the
	// wait of the goroutine whose wake-up ends the spell.
	blockedOn := map[trace.GoID]string{}
	noneFor := 0.0
	procs := map[trace.ProcID]bool{}
	var first, last trace.Time
	running := map[int]float64{}
	// Seconds by goroutines running and cause, turned into unused
	// core-seconds once the number of Ps is known.
	type spell struct {
		n    int
		what string
	}
	spells := map[spell]float64{}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read trace: %w", err)
		}
		if p := ev.Proc(); p != trace.NoProc {
			procs[p] = true
		}
		t := ev.Time()
		if first == 0 {
			first = t
		}
		if last != 0 && t > last {
			d := float64(t-last) / 1e9
			n, what := classify(state, startFn, sysSite)
			running[n] += d
			if what == "none" {
				noneFor += d
			} else {
				spells[spell{n, what}] += d
			}
		}
		last = t
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if _, ok := startFn[g]; !ok {
			startFn[g] = outermost(st.Stack, ev.Stack())
		}
		if from == trace.GoSyscall {
			if site := sysSite[g]; site != "" {
				rep.Syscalls[site] += float64(t-sysSince[g]) / 1e9
			}
			delete(sysSite, g)
		}
		if from == trace.GoWaiting && (to == trace.GoRunnable || to == trace.GoRunning) {
			// The runtime's own goroutines (the trace reader, timers
			// of its own) waking do not end what the program waits for.
			if site, ok := blockedOn[g]; ok && noneFor > 0 {
				spells[spell{0, "none: until " + site}] += noneFor
				noneFor = 0
			}
			delete(blockedOn, g)
		}
		switch to {
		case trace.GoWaiting:
			state[g] = goIdle
			if site, ok := blockSite(st.Reason, st.Stack, ev.Stack()); ok {
				blockedOn[g] = site
			}
		case trace.GoRunning:
			state[g] = goRunning
		case trace.GoRunnable:
			state[g] = goRunnable
		case trace.GoSyscall:
			site := callSite(ev.Stack())
			if strings.HasPrefix(site, "runtime.") {
				// The runtime's own long waits (signal delivery, the
				// trace reader) are not work the program waits for.
				state[g] = goIdle
				continue
			}
			state[g] = goSyscall
			sysSite[g], sysSince[g] = site, t
		default:
			state[g] = goIdle
		}
	}
	if noneFor > 0 {
		spells[spell{0, "none"}] += noneFor
	}
	rep.Procs = len(procs)
	rep.Seconds = float64(last-first) / 1e9
	for n := 0; n <= max(rep.Procs, maxKey(running)); n++ {
		rep.Running = append(rep.Running, running[n])
	}
	for s, d := range spells {
		if s.n < rep.Procs {
			rep.Idle[s.what] += d * float64(rep.Procs-s.n)
		}
	}
	return rep, nil
}

// classify counts the running goroutines and names what the rest are
// doing, for a spell in which not every P may be busy.
func classify(state map[trace.GoID]goState, startFn, sysSite map[trace.GoID]string) (int, string) {
	n, ready := 0, 0
	var alone string
	var sys []string
	for g, s := range state {
		switch s {
		case goRunning:
			n++
			alone = startFn[g]
		case goRunnable:
			ready++
		case goSyscall:
			sys = append(sys, sysSite[g])
		}
	}
	sort.Strings(sys)
	calls := strings.Join(sys, "; ")
	switch {
	case ready > 0:
		if calls == "" {
			calls = "no syscall"
		}
		return n, "runnable: " + calls
	case calls != "":
		return n, "syscall: " + calls
	case n == 1:
		return n, "alone: " + alone
	case n == 0:
		return n, "none"
	}
	return n, "other"
}

// outermost is the function a goroutine started in: the last frame of
// its own stack at its first transition, or of the event's.
func outermost(stacks ...trace.Stack) string {
	for _, st := range stacks {
		fn := ""
		for f := range st.Frames() {
			fn = f.Func
		}
		if fn != "" {
			return shortName(fn)
		}
	}
	return "?"
}

// callSite names a system call by its innermost frame and the first
// caller outside the standard library's wrappers: "syscall.Fsync @
// storage.writeTemp".
func callSite(st trace.Stack) string {
	call, caller := "", ""
	for f := range st.Frames() {
		fn := shortName(f.Func)
		if call == "" {
			call = fn
			continue
		}
		if !wrapper(fn) {
			caller = fn
			break
		}
	}
	if caller == "" {
		return call
	}
	return call + " @ " + caller
}

// blockSite names where a goroutine blocked: the reason the runtime gave
// and the first function outside the runtime and the standard library's
// channel, lock and network wrappers ("chan receive @
// apply.(*Engine).predecode"); false for a wait wholly inside the
// runtime (its trace reader, its own timers).
func blockSite(reason string, stacks ...trace.Stack) (string, bool) {
	if reason == "" {
		reason = "?"
	}
	for _, st := range stacks {
		for f := range st.Frames() {
			fn := shortName(f.Func)
			if !wrapper(fn) && !strings.HasPrefix(fn, "sync.") && !strings.HasPrefix(fn, "internal/") && !strings.HasPrefix(fn, "time.") {
				return reason + " @ " + fn, true
			}
		}
	}
	return "", false
}

// wrapper: a standard library package between a system call and the
// program that made it.
func wrapper(fn string) bool {
	for _, p := range []string{"syscall.", "poll.", "os.", "net.", "runtime.", "unix."} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// shortName drops a function's import path, keeping its package.
func shortName(fn string) string {
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

func maxKey(m map[int]float64) int {
	k := 0
	for n := range m {
		k = max(k, n)
	}
	return k
}

// Write prints the report, the largest causes first (top of each list).
func (r *Report) Write(w io.Writer, top int) {
	fmt.Fprintf(w, "%.2f s traced, %d Ps (%.2f core-seconds)\n", r.Seconds, r.Procs, r.Seconds*float64(r.Procs))
	busy := 0.0
	for n, s := range r.Running {
		fmt.Fprintf(w, "  %d running: %7.3f s (%4.1f%%)\n", n, s, 100*s/r.Seconds)
		busy += float64(n) * s
	}
	idle := 0.0
	for _, s := range r.Idle {
		idle += s
	}
	fmt.Fprintf(w, "%.2f cores running on average; %.3f core-seconds unused, by cause:\n", busy/r.Seconds, idle)
	writeTop(w, r.Idle, top)
	fmt.Fprintf(w, "system calls, seconds by site:\n")
	writeTop(w, r.Syscalls, top)
}

func writeTop(w io.Writer, m map[string]float64, top int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	for i, k := range keys {
		if i == top {
			fmt.Fprintf(w, "  ... %d more\n", len(keys)-top)
			break
		}
		fmt.Fprintf(w, "  %8.3f  %s\n", m[k], k)
	}
}
