package main

import (
	"bytes"
	"runtime"
	"runtime/trace"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spinAlone keeps one P busy for d while nothing else runs.
func spinAlone(d time.Duration, done chan<- uint64) {
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 10_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	done <- x
}

// sleepInSyscall blocks in a system call (not the runtime's sleep) for d.
func sleepInSyscall(d time.Duration, done chan<- uint64) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
	done <- 0
}

// TestAnalyzeAttributesIdleCores traces a program that first runs one
// goroutine alone, then sits in a system call, and checks that the
// report puts the unused P on the lone goroutine and the call's time on
// its site.
func TestAnalyzeAttributesIdleCores(t *testing.T) {
	rep := traced(t, func() {
		done := make(chan uint64)
		go spinAlone(200*time.Millisecond, done)
		<-done
		go sleepInSyscall(150*time.Millisecond, done)
		<-done
	})
	if rep.Procs != 2 {
		t.Fatalf("Procs = %d, want 2 (GOMAXPROCS)", rep.Procs)
	}
	// 200 ms with one of two Ps unused: 0.2 core-seconds, put on the
	// goroutine that ran alone (less if the host took the thread away
	// from under it: the trace still says running).
	if alone := sumOf(rep.Idle, "alone: ", ".spinAlone"); alone < 0.15 {
		t.Errorf("idle put on spinAlone = %.3f core-s, want >= 0.15 (200 ms alone on 2 Ps)", alone)
	}
	if sys := sumOf(rep.Syscalls, "syscall.Nanosleep @ ", ".sleepInSyscall"); sys < 0.14 {
		t.Errorf("time in Nanosleep at sleepInSyscall = %.3f s, want >= 0.14", sys)
	}
	// While it sleeps nothing runs: both Ps unused, the cause the call.
	if inCall := sumOf(rep.Idle, "syscall: syscall.Nanosleep @ ", ".sleepInSyscall"); inCall < 0.25 {
		t.Errorf("idle while in Nanosleep = %.3f core-s, want >= 0.25 (150 ms on 2 Ps)", inCall)
	}
	total := 0.0
	for _, s := range rep.Running {
		total += s
	}
	if d := total - rep.Seconds; d > 1e-6 || d < -1e-6 {
		t.Errorf("running spells add to %.6f s, the trace spans %.6f s", total, rep.Seconds)
	}
}

// traced runs run under an execution trace on two Ps and returns the
// trace's report (logged).
func traced(t *testing.T, run func()) *Report {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	run()
	trace.Stop()
	rep, err := Analyze(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.Write(&out, 10)
	t.Log("\n" + out.String())
	return rep
}

// sumOf adds the seconds of m's keys that have the prefix and suffix.
func sumOf(m map[string]float64, prefix, suffix string) float64 {
	sum := 0.0
	for k, s := range m {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, suffix) {
			sum += s
		}
	}
	return sum
}

func TestAnalyzeRejectsNonTrace(t *testing.T) {
	if _, err := Analyze(strings.NewReader("not a trace")); err == nil {
		t.Fatal("Analyze read a non-trace without error")
	}
}

// waitOn blocks on ch, then reports to done.
func waitOn(ch <-chan struct{}, done chan<- uint64) {
	<-ch
	done <- 0
}

// TestAnalyzeNamesWhatNothingWaitedFor: while nothing runs, a goroutine
// waits on a channel a timer fills 150 ms later; the report puts both
// Ps' idle time on that wait, named by the function that blocked.
func TestAnalyzeNamesWhatNothingWaitedFor(t *testing.T) {
	rep := traced(t, func() {
		ch, done := make(chan struct{}), make(chan uint64)
		go waitOn(ch, done)
		time.AfterFunc(150*time.Millisecond, func() { close(ch) })
		<-done
	})
	if got := sumOf(rep.Idle, "none: until chan receive @ ", ".waitOn"); got < 0.25 {
		t.Errorf("idle put on waitOn's channel = %.3f core-s, want >= 0.25 (150 ms on 2 Ps)", got)
	}
}
