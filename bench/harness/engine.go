package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta"
)

// Job is what the engine side of a bench run is given: the pipeline file
// and the table's topic. It travels as the first JSON line on the engine
// process's stdin; the second line is the Ends, sent once the stream is
// produced (at once for a preproduced stream).
type Job struct {
	ConfigYAML string `json:"config_yaml"`
	ConfigPath string `json:"config_path"`
	Topic      string `json:"topic"`
	// Sample is how often RSS and the Go heap are sampled.
	Sample time.Duration `json:"sample"`
	// Timeout, when set, stops the engine side after that long; it then
	// reports what it did with an error.
	Timeout time.Duration `json:"timeout,omitempty"`
	// CPUProfile, when set, is a file the engine side writes a Go CPU
	// profile of its whole run to (go tool pprof).
	CPUProfile string `json:"cpu_profile,omitempty"`
	// Trace, when set, is a file the engine side writes a Go execution
	// trace of its whole run to (go tool trace): where the cores wait.
	Trace string `json:"trace,omitempty"`
	// HeapProfile, when set, is a file the engine side writes a Go heap
	// profile to each time the sampled heap passes its peak by 10%, so
	// the file ends as the heap near its largest (go tool pprof).
	HeapProfile string `json:"heap_profile,omitempty"`
	// HeapProfileEvery, when set with HeapProfile, also writes a heap
	// profile every that long, to HeapProfile with the run's elapsed
	// seconds appended (".0060s", ".0120s", ...): a series whose
	// differences show what keeps growing, where two profiles cannot tell
	// growth from buffers in flight at that moment.
	HeapProfileEvery time.Duration `json:"heap_profile_every,omitempty"`
}

// Ends are the offsets one past the last record of each partition of the
// table's topic: the engine side stops once the table's positions reach
// them.
type Ends struct {
	Ends map[int32]int64 `json:"ends"`
}

// BatchStat is one committed batch as the harness reports it.
type BatchStat struct {
	// At is the commit time, milliseconds since the engine started.
	At         float64 `json:"at_ms"`
	Version    int64   `json:"version"`
	Records    int     `json:"records"`
	Changes    int     `json:"changes"`
	RowsBefore int     `json:"rows_before"`
	Inserted   int     `json:"inserted"`
	Updated    int     `json:"updated"`
	Deleted    int     `json:"deleted"`
	Revived    int     `json:"revived"`
	Stale      int     `json:"stale"`
	FilesAdd   int     `json:"files_added"`
	FilesDel   int     `json:"files_removed"`
	// Stage durations in milliseconds: decode (while buffering), refresh,
	// plan (reduce, plan, data files written), commit (the Delta log)
	// and the log checkpoint that ended since the previous batch (written
	// beside the commits; EngineResult.Checkpoints has every one).
	DecodeMs     float64 `json:"decode_ms"`
	RefreshMs    float64 `json:"refresh_ms"`
	PlanMs       float64 `json:"plan_ms"`
	CommitMs     float64 `json:"commit_ms"`
	CheckpointMs float64 `json:"checkpoint_ms,omitempty"`
	Checkpoint   bool    `json:"checkpoint,omitempty"` // a log checkpoint ended since the previous batch
	// CheckpointSkipped: this version was a checkpoint version, skipped
	// while the previous checkpoint was still being written.
	CheckpointSkipped bool `json:"checkpoint_skipped,omitempty"`
	// Fresh* are the batch's change freshness quantiles (source commit time
	// to this commit), milliseconds.
	FreshP50 float64 `json:"fresh_p50_ms"`
	FreshP99 float64 `json:"fresh_p99_ms"`
	FreshMax float64 `json:"fresh_max_ms"`
	// Appended* are the same from each record's Kafka timestamp (with
	// -rate the time the harness sent it) instead of its source commit.
	AppendedP99 float64 `json:"appended_p99_ms"`
	AppendedMax float64 `json:"appended_max_ms"`
}

// CheckpointStat is one log checkpoint: its version, how long it and the
// log cleanup after it took, and its failure.
type CheckpointStat struct {
	Version int64   `json:"version"`
	Ms      float64 `json:"ms"`
	Err     string  `json:"error,omitempty"`
}

// Sample is one memory reading of the engine process.
type Sample struct {
	At        float64 `json:"at_ms"`
	RSS       int64   `json:"rss"`
	HeapInUse int64   `json:"heap_inuse"`
	// LiveHeap is the heap the last collection found reachable: what the
	// engine holds, without the garbage HeapInUse also counts, and what
	// a memory limit cannot hide (RSS stays at the limit while the
	// collector works harder to keep a growing live heap under it).
	LiveHeap int64 `json:"live_heap"`
}

// EngineResult is what the engine side reports back.
type EngineResult struct {
	// InProcess is true when the engine ran inside the harness's own
	// process: its RSS then includes the broker, generator and oracle.
	InProcess bool    `json:"in_process"`
	PID       int     `json:"pid"`
	Started   int64   `json:"started_unix_ms"`
	OpenedAt  float64 `json:"opened_ms"`       // the table opened and its key index built: ready
	FirstAt   float64 `json:"first_record_ms"` // first record of the first batch arrived
	DoneAt    float64 `json:"done_ms"`         // last commit
	Records   int64   `json:"records"`
	Changes   int64   `json:"changes"`
	Batches   []BatchStat
	Samples   []Sample
	// Freshness over every change of the run, milliseconds.
	FreshP50  float64 `json:"fresh_p50_ms"`
	FreshP99  float64 `json:"fresh_p99_ms"`
	FreshP999 float64 `json:"fresh_p999_ms"`
	FreshMax  float64 `json:"fresh_max_ms"`
	FreshMean float64 `json:"fresh_mean_ms"`
	// Appended* measure every record read from its Kafka timestamp to
	// the commit of its batch, milliseconds: the engine's own delay when
	// the producer stamps the send time (-rate), without the time the
	// workload held late and out-of-order changes back, which freshness
	// counts.
	AppendedP50  float64 `json:"appended_p50_ms"`
	AppendedP99  float64 `json:"appended_p99_ms"`
	AppendedP999 float64 `json:"appended_p999_ms"`
	AppendedMax  float64 `json:"appended_max_ms"`
	// PeakRSS is VmHWM of the process at the end; PeakHeapInUse the largest
	// sampled Go heap in use; HeapSys the Go heap reserved at the end.
	PeakRSS       int64 `json:"peak_rss"`
	PeakHeapInUse int64 `json:"peak_heap_inuse"`
	HeapSys       int64 `json:"heap_sys"`
	TotalAlloc    int64 `json:"total_alloc"`
	NumGC         int64 `json:"num_gc"`
	// FetchBuffers, FetchBuffersReused and FetchBuffersForgotten:
	// Engine.FetchBuffers at the end.
	FetchBuffers          int64   `json:"fetch_buffers"`
	FetchBuffersReused    int64   `json:"fetch_buffers_reused"`
	FetchBuffersForgotten int64   `json:"fetch_buffers_forgotten"`
	CPUUser               float64 `json:"cpu_user_s"`
	CPUSys                float64 `json:"cpu_sys_s"`
	// MinorFaults counts the engine process's minor page faults (memory
	// touched for the first time, or again after the runtime returned
	// it): their kernel time is part of CPUSys, and a CPU profile
	// charges it to the instruction that touched the page.
	MinorFaults int64 `json:"minor_faults"`
	// Checkpoints are the log checkpoints the engine wrote, as each ended.
	Checkpoints []CheckpointStat `json:"checkpoints,omitempty"`
	// HostCPU is the whole machine's CPU from the engine's start to the
	// stream applied: how much of it the hypervisor stole meanwhile.
	HostCPU *HostCPU `json:"host_cpu,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// RunEngine runs the real apply engine on job until the table's positions
// reach the ends received on ends, and measures it. ready is called once
// the engine is running (the stream may then be produced).
func RunEngine(ctx context.Context, job Job, ends <-chan Ends, ready func(), inProcess bool) (*EngineResult, error) {
	cfg, err := apply.ParseConfig(job.ConfigPath, []byte(job.ConfigYAML))
	if err != nil {
		return nil, err
	}
	e, err := apply.NewEngine(cfg, apply.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, err
	}
	if job.Sample <= 0 {
		job.Sample = 250 * time.Millisecond
	}
	if job.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, job.Timeout)
		defer cancel()
	}
	for _, p := range []struct {
		what, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"cpu profile", job.CPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"trace", job.Trace, trace.Start, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			return nil, fmt.Errorf("bench engine: %s: %w", p.what, err)
		}
		if err := p.start(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("bench engine: %s: %w", p.what, err)
		}
		defer func() { p.stop(); f.Close() }()
	}
	res := &EngineResult{InProcess: inProcess, PID: os.Getpid()}
	host := startHostSpan()
	start := time.Now()
	res.Started = start.UnixMilli()
	res.FirstAt = -1

	// The hook runs on the engine's goroutine: it only hands the report
	// to the collector, which does the sorting and bookkeeping.
	reports := make(chan *apply.BatchReport, 1024)
	e.OnBatch = func(r *apply.BatchReport) { reports <- r }
	opened := make(chan time.Time, 1)
	e.OnOpened = func() { opened <- time.Now() }
	var ckptMu sync.Mutex // guards res.Checkpoints against the checkpoints' goroutine
	e.OnCheckpoint = func(_ string, o delta.CheckpointOutcome) {
		st := CheckpointStat{Version: o.Version, Ms: ms(o.Took)}
		if o.Err != nil {
			st.Err = o.Err.Error()
		}
		ckptMu.Lock()
		res.Checkpoints = append(res.Checkpoints, st)
		ckptMu.Unlock()
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- e.Run(runCtx) }()

	var mu sync.Mutex // guards res.Samples and peak heap against the sampler
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(job.Sample)
		defer tick.Stop()
		nextSeries := job.HeapProfileEvery
		for {
			s := Sample{At: ms(time.Since(start)), RSS: procStatus("VmRSS")}
			s.HeapInUse, s.LiveHeap = heapFigures()
			mu.Lock()
			res.Samples = append(res.Samples, s)
			grew := s.HeapInUse > res.PeakHeapInUse+res.PeakHeapInUse/10
			res.PeakHeapInUse = max(res.PeakHeapInUse, s.HeapInUse)
			mu.Unlock()
			if grew && job.HeapProfile != "" {
				if err := writeHeapProfile(job.HeapProfile); err != nil {
					fmt.Fprintln(os.Stderr, "bench engine:", err)
				}
			}
			if el := time.Since(start); job.HeapProfile != "" && nextSeries > 0 && el >= nextSeries {
				name := fmt.Sprintf("%s.%04ds", job.HeapProfile, int(nextSeries/time.Second))
				if err := writeHeapProfile(name); err != nil {
					fmt.Fprintln(os.Stderr, "bench engine:", err)
				}
				for nextSeries <= el {
					nextSeries += job.HeapProfileEvery
				}
			}
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	// Ready once the table is open and its key index built: a paced
	// stream starts then, so freshness is the engine's steady state and
	// the start-up (seconds for a large table) is its own figure.
	select {
	case at := <-opened:
		res.OpenedAt = ms(at.Sub(start))
	case err := <-runErr:
		runErr <- err // stopped before opening: the loop below reports it
	case <-ctx.Done():
	}
	if ready != nil {
		ready()
	}

	all, allAppended := newHist(), newHist()
	next := map[int32]int64{}
	var want map[int32]int64
	var fresh, appended []int64
	done := func() bool {
		if want == nil {
			return false
		}
		for p, end := range want {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	halted := time.NewTicker(time.Second)
	defer halted.Stop()
	var failure error
loop:
	for !done() {
		select {
		case r := <-reports:
			committed := r.Committed
			if res.FirstAt < 0 || ms(r.Started.Sub(start)) < res.FirstAt {
				res.FirstAt = ms(r.Started.Sub(start))
			}
			fresh = fresh[:0]
			for _, us := range r.SourceMicros {
				f := committed.UnixMicro() - us
				fresh = append(fresh, f)
				all.add(f)
			}
			appended = appended[:0]
			for _, us := range r.AppendedMicros {
				d := committed.UnixMicro() - us
				appended = append(appended, d)
				allAppended.add(d)
			}
			slices.Sort(fresh)
			slices.Sort(appended)
			q := func(x float64) float64 { return sortedQuantile(fresh, x) }
			qa := func(x float64) float64 { return sortedQuantile(appended, x) }
			c := r.Result.Counts
			res.Batches = append(res.Batches, BatchStat{
				At: ms(committed.Sub(start)), Version: r.Version, Records: r.Read, Changes: r.Changes,
				RowsBefore: r.RowsBefore, Inserted: c.Insert, Updated: c.Update, Deleted: c.Delete, Revived: c.Revive,
				Stale: c.StaleRecords, FilesAdd: r.Result.Files.Added, FilesDel: r.Result.Files.Removed,
				DecodeMs: ms(r.Decode), RefreshMs: ms(r.Refresh), PlanMs: ms(r.Result.Durations.Plan), CommitMs: ms(r.Result.Durations.Commit), CheckpointMs: ms(r.Result.Durations.Checkpoint), Checkpoint: r.Result.Checkpointed, CheckpointSkipped: r.Result.CheckpointSkipped,
				FreshP50: q(0.5), FreshP99: q(0.99), FreshMax: q(1), AppendedP99: qa(0.99), AppendedMax: qa(1),
			})
			res.Records += int64(r.Read)
			res.Changes += int64(r.Changes)
			res.DoneAt = ms(committed.Sub(start))
			for tp, rng := range r.Ranges {
				if tp.Topic == job.Topic {
					next[tp.Partition] = max(next[tp.Partition], rng.Next)
				}
			}
		case en := <-ends:
			want = en.Ends
			ends = nil
		case err := <-runErr:
			failure = fmt.Errorf("the engine stopped before applying the stream: %v", err)
			runErr = nil
			break loop
		case <-halted.C:
			if h := e.Halted(); len(h) > 0 {
				failure = fmt.Errorf("a table halted: %v", h)
				break loop
			}
		case <-ctx.Done():
			failure = fmt.Errorf("stopped before the table reached the stream's end: %w", ctx.Err())
			break loop
		}
	}
	res.HostCPU = host.end()
	if job.Trace != "" {
		// The trace ends with the stream applied: the engine's shutdown
		// (its idle wait for the sampler, the client's close) would
		// otherwise read as idle cores in tracegaps.
		trace.Stop()
	}
	stop()
	if runErr != nil {
		if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) && failure == nil {
			failure = fmt.Errorf("engine: %w", err)
		}
	}
	<-sampleDone

	res.FreshP50, res.FreshP99 = ms(all.quantile(0.5)), ms(all.quantile(0.99))
	res.FreshP999, res.FreshMax, res.FreshMean = ms(all.quantile(0.999)), float64(all.max)/1000, ms(all.mean())
	res.AppendedP50, res.AppendedP99 = ms(allAppended.quantile(0.5)), ms(allAppended.quantile(0.99))
	res.AppendedP999, res.AppendedMax = ms(allAppended.quantile(0.999)), float64(allAppended.max)/1000
	res.PeakRSS = procStatus("VmHWM")
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	res.HeapSys, res.TotalAlloc, res.NumGC = int64(m.HeapSys), int64(m.TotalAlloc), int64(m.NumGC)
	res.FetchBuffers, res.FetchBuffersReused, res.FetchBuffersForgotten = e.FetchBuffers()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.CPUUser = time.Duration(ru.Utime.Nano()).Seconds()
		res.CPUSys = time.Duration(ru.Stime.Nano()).Seconds()
		res.MinorFaults = ru.Minflt
	}
	if failure != nil {
		res.Error = failure.Error()
		return res, failure
	}
	return res, nil
}

// heapFigures reads, in one call and without stopping the world, the
// bytes of Go heap objects (live and not yet swept) and the heap the last
// collection marked reachable.
func heapFigures() (inUse, live int64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	return v(0), v(1)
}

// procStatus reads a "kB" field of /proc/self/status in bytes (0 where
// there is no /proc).
func procStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n << 10
		}
	}
	return 0
}

// ServeEngine is the engine process's side of the protocol: the Job as
// the first JSON line of in, then the Ends as the second; it writes
// {"ready":true} once the engine runs and the EngineResult as the last
// line of out.
func ServeEngine(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 1<<20)
	var job Job
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("bench engine: read the job: %w", err)
	}
	if err := json.Unmarshal(line, &job); err != nil {
		return fmt.Errorf("bench engine: read the job: %w", err)
	}
	ends := make(chan Ends, 1)
	readErr := make(chan error, 1)
	go func() {
		line, err := r.ReadBytes('\n')
		if err != nil {
			readErr <- fmt.Errorf("bench engine: read the ends: %w", err)
			return
		}
		var en Ends
		if err := json.Unmarshal(line, &en); err != nil {
			readErr <- fmt.Errorf("bench engine: read the ends: %w", err)
			return
		}
		ends <- en
	}()
	enc := json.NewEncoder(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case err := <-readErr:
			fmt.Fprintln(os.Stderr, err)
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := RunEngine(ctx, job, ends, func() { _ = enc.Encode(map[string]bool{"ready": true}) }, false)
	if res == nil {
		res = &EngineResult{Error: err.Error()}
	}
	if encErr := enc.Encode(res); encErr != nil {
		return fmt.Errorf("bench engine: write the result: %w", encErr)
	}
	return err
}

// writeHeapProfile replaces path with a heap profile of this process.
func writeHeapProfile(path string) error {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

// sortedQuantile is the q-quantile of sorted microseconds, in
// milliseconds (0 for none).
func sortedQuantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]) / 1000
}
