package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// Report is everything a run measured; it is what -json writes.
type Report struct {
	OK       bool      `json:"ok"`
	Failure  string    `json:"failure,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Host     HostInfo  `json:"host"`
	Options  OptionSummary
	Broker   string          `json:"broker"`
	Counts   workload.Counts `json:"counts"`
	Produce  ProduceFigures  `json:"produce"`
	Prefill  *PrefillFigures `json:"prefill,omitempty"`
	Verify   []VerifyResult  `json:"verify"`

	// The figures, present only when the table verified.
	Throughput *ThroughputFigures `json:"throughput,omitempty"`
	Freshness  *FreshnessFigures  `json:"freshness,omitempty"`
	Memory     *MemoryFigures     `json:"memory,omitempty"`
	Table      *TableFigures      `json:"table,omitempty"`
	Decode     DecodeFigures      `json:"decode"`
	// DecodeRatio is end-to-end events/s over decode-only (both cores,
	// the mean of the measurements before and after the engine);
	// DecodeRatioFaster is over the faster of the two.
	DecodeRatio       float64 `json:"e2e_over_decode_both_cores,omitempty"`
	DecodeRatioFaster float64 `json:"e2e_over_decode_both_cores_faster,omitempty"`
	// CPURatio is the engine's events per CPU-second over decode-only's
	// records per CPU-second: the same comparison without the cores the
	// host did not give either of them (HostCPU's steal).
	CPURatio float64 `json:"e2e_over_decode_per_cpu_second,omitempty"`
	// ByPhase splits the end-to-end throughput between the commits that
	// only inserted (a snapshot's reads into new keys) and those that
	// updated, deleted or revived rows (the streamed changes): where
	// the run's time went when the two differ.
	ByPhase     []PhaseFigures     `json:"throughput_by_phase,omitempty"`
	CostBySize  []CostBucket       `json:"cost_by_table_size,omitempty"`
	Checkpoints *CheckpointFigures `json:"checkpoints,omitempty"`
	Peers       []PeerResult       `json:"peers,omitempty"`
	Engine      *EngineResult      `json:"engine,omitempty"`
	Series      []SeriesPoint      `json:"series,omitempty"`
	Extra       map[string]any     `json:"extra,omitempty"`
}

// HostInfo describes the machine and its load when the run started.
type HostInfo struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go"`
	LoadAvg   string `json:"loadavg"`
	// CPUPressure is /proc/pressure/cpu's "some" line: the share of time
	// runnable tasks waited for a core (others' load on a shared machine).
	CPUPressure    string `json:"cpu_pressure"`
	CPUPressureEnd string `json:"cpu_pressure_end,omitempty"`
	MemTotal       int64  `json:"mem_total"`
}

func cpuPressure() string {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first)
}

func hostInfo() HostInfo {
	h := HostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.TrimSpace(string(b))
	}
	h.CPUPressure = cpuPressure()
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			h.MemTotal = kb << 10
		}
	}
	return h
}

// OptionSummary records the run's settings.
type OptionSummary struct {
	Workload      workload.Config `json:"workload"`
	Rate          float64         `json:"rate"`
	Compression   string          `json:"compression"`
	MaxRecords    int             `json:"max_records,omitempty"`
	MaxBytes      int64           `json:"max_bytes,omitempty"`
	MaxLatency    string          `json:"max_latency,omitempty"`
	BacklogFactor int             `json:"backlog_factor,omitempty"`
	WriteMode     string          `json:"write_mode,omitempty"`
	// TableProperties are the pipeline's table_properties.
	TableProperties map[string]string `json:"table_properties,omitempty"`
	MemoryLimit     int64             `json:"memory_limit,omitempty"`
	FetchMaxBytes   int32             `json:"fetch_max_bytes,omitempty"`
	// KfakeBrokers is the in-process cluster's brokers (unset: one).
	KfakeBrokers  int  `json:"kfake_brokers,omitempty"`
	EngineProcess bool `json:"engine_process"`
}

func (o Options) summary() OptionSummary {
	s := OptionSummary{Workload: o.Workload, Rate: o.Rate, Compression: o.Compression, MaxRecords: o.MaxRecords,
		MaxBytes: o.MaxBytes, BacklogFactor: o.BacklogFactor, WriteMode: o.WriteMode, TableProperties: o.TableProperties, MemoryLimit: o.MemoryLimit, FetchMaxBytes: o.FetchMaxBytes,
		EngineProcess: len(o.EngineCommand) > 0}
	if len(o.Brokers) == 0 && o.KfakeBrokers > 1 {
		s.KfakeBrokers = o.KfakeBrokers
	}
	if s.Compression == "" {
		s.Compression = "lz4"
	}
	if o.MaxLatency > 0 {
		s.MaxLatency = o.MaxLatency.String()
	}
	return s
}

// ProduceFigures describe producing the stream (not part of the engine's
// figures).
type ProduceFigures struct {
	Records   int64   `json:"records"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"records_per_sec"`
	Moved     int64   `json:"moved"`
}

// VerifyResult is one reader's comparison of the table with the oracle.
type VerifyResult struct {
	Reader string `json:"reader"`
	OK     bool   `json:"ok"`
	Diff   string `json:"diff"`
}

// ThroughputFigures: records are the Kafka records of the table's topic
// the engine read (change records, copies, Kafka tombstones).
type ThroughputFigures struct {
	Records int64 `json:"records"`
	Changes int64 `json:"changes"`
	// Seconds runs from the first record's arrival to the last commit;
	// EventsPerSec is Records over it. WithStartup counts from the engine's
	// start (consumer group join, table open) instead.
	Seconds                 float64 `json:"seconds"`
	EventsPerSec            float64 `json:"events_per_sec"`
	ChangesPerSec           float64 `json:"changes_per_sec"`
	SecondsWithStartup      float64 `json:"seconds_with_startup"`
	EventsPerSecWithStartup float64 `json:"events_per_sec_with_startup"`
	Commits                 int     `json:"commits"`
	CPUSeconds              float64 `json:"engine_cpu_seconds"`
	// EventsPerCPUSecond is Records over the engine process's CPU time
	// (user + system, start-up included).
	EventsPerCPUSecond float64 `json:"events_per_engine_cpu_second"`
}

// FreshnessFigures: source commit time of each change to the end of the
// table commit that applied it.
type FreshnessFigures struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
	// Appended* are per record from its Kafka timestamp, which the
	// harness stamps when it sends the record with -rate, to the commit:
	// the engine's own delay. Freshness also counts what happened before
	// the send: the workload holds late changes back (-late, 2,500 to
	// 7,500 records on average) and out-of-order ones.
	AppendedP50  float64 `json:"appended_p50_ms"`
	AppendedP99  float64 `json:"appended_p99_ms"`
	AppendedP999 float64 `json:"appended_p999_ms"`
	AppendedMax  float64 `json:"appended_max_ms"`
	// Meaningful only in rate mode (source times from the wall clock).
	WallClock bool `json:"wall_clock"`
}

// MemoryFigures of the engine process.
type MemoryFigures struct {
	PeakRSS       int64 `json:"peak_rss"`
	PeakHeapInUse int64 `json:"peak_heap_inuse"`
	HeapSys       int64 `json:"heap_sys"`
	// RSSFirstHalfMax and RSSSecondHalfMax are the largest RSS samples in
	// each half of the run: a growing run shows a larger second half.
	RSSFirstHalfMax  int64 `json:"rss_first_half_max"`
	RSSSecondHalfMax int64 `json:"rss_second_half_max"`
	// LiveHeapMid and LiveHeapEnd are the Go heap the last collection
	// found reachable at the run's midpoint and at its end, and
	// LiveHeapGrowth its least-squares slope over the second half, in
	// bytes per minute. A memory limit keeps RSS flat while the live
	// heap grows (the collector then runs more often), so flat RSS alone
	// does not show flat memory.
	LiveHeapMid    int64   `json:"live_heap_mid"`
	LiveHeapEnd    int64   `json:"live_heap_end"`
	LiveHeapGrowth float64 `json:"live_heap_growth_per_min"`
	Isolated       bool    `json:"isolated"`
	// TotalAlloc is every byte the engine's Go heap allocated, NumGC its
	// collections: unlike the times, they hardly move with the machine.
	TotalAlloc int64 `json:"total_alloc"`
	NumGC      int64 `json:"num_gc"`
	// FetchBuffers were the decompressed record batches (any codec), FetchBuffersReused
	// those decompressed into a released buffer, FetchBuffersForgotten
	// those left to the collector with records out.
	FetchBuffers          int64 `json:"fetch_buffers"`
	FetchBuffersReused    int64 `json:"fetch_buffers_reused"`
	FetchBuffersForgotten int64 `json:"fetch_buffers_forgotten"`
}

// TableFigures are the bytes and rows written.
type TableFigures struct {
	Version       int64   `json:"version"`
	DataBytes     int64   `json:"data_bytes_written"`
	LogBytes      int64   `json:"log_bytes_written"`
	LiveBytes     int64   `json:"live_bytes"`
	LiveFiles     int     `json:"live_files"`
	RowsWritten   int64   `json:"rows_written"`
	LiveRows      int64   `json:"live_rows"`
	ChangeRecords int64   `json:"change_records"`
	WriteAmp      float64 `json:"write_amplification_bytes"`
	RowsPerChange float64 `json:"rows_written_per_change"`
}

// CheckpointFigures are the log checkpoints the engine wrote (each
// delta.checkpointInterval-th version, beside the commits), in
// milliseconds each took with the log cleanup after it. FirstMs and
// LastMs are the medians of the first and the last tenth of them (at
// least one each): a checkpoint that grows over the run (tombstones kept
// for a long retention) shows as LastMs well above FirstMs. Skipped
// counts checkpoint versions reached while the previous checkpoint was
// still being written; Failed those that failed.
type CheckpointFigures struct {
	Count   int     `json:"count"`
	Skipped int     `json:"skipped,omitempty"`
	Failed  int     `json:"failed,omitempty"`
	P50Ms   float64 `json:"p50_ms"`
	MaxMs   float64 `json:"max_ms"`
	FirstMs float64 `json:"first_tenth_median_ms"`
	LastMs  float64 `json:"last_tenth_median_ms"`
}

// checkpointFigures summarises the checkpoints (in the order they ended)
// and the batches' skipped ones; nil when there were neither.
func checkpointFigures(cs []CheckpointStat, bs []BatchStat) *CheckpointFigures {
	f := &CheckpointFigures{Count: len(cs)}
	for _, b := range bs {
		if b.CheckpointSkipped {
			f.Skipped++
		}
	}
	var ms []float64
	for _, c := range cs {
		ms = append(ms, c.Ms)
		if c.Err != "" {
			f.Failed++
		}
	}
	if len(ms) == 0 {
		if f.Skipped == 0 {
			return nil
		}
		return f
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	tenth := max(1, len(ms)/10)
	f.P50Ms, f.MaxMs = median(ms), slices.Max(ms)
	f.FirstMs, f.LastMs = median(ms[:tenth]), median(ms[len(ms)-tenth:])
	return f
}

// CostBucket groups commits by the table's size before them.
type CostBucket struct {
	Label        string  `json:"label"`
	Commits      int     `json:"commits"`
	MeanRows     float64 `json:"mean_rows_before"`
	MeanChanges  float64 `json:"mean_changes"`
	MeanApplyMs  float64 `json:"mean_apply_ms"` // plan + commit
	UsPerChange  float64 `json:"us_per_change"`
	MeanRewrites float64 `json:"mean_files_rewritten"`
}

// SeriesPoint is one second of the run (by commit time).
type SeriesPoint struct {
	T            float64 `json:"t_s"`
	EventsPerSec float64 `json:"events_per_sec"`
	FreshP50     float64 `json:"fresh_p50_ms"`
	FreshP99     float64 `json:"fresh_p99_ms"`
	RSS          int64   `json:"rss"`
}

func (r *Report) fail(msg string) {
	r.OK = false
	r.Failure = msg
	r.Throughput, r.Freshness, r.Memory, r.CostBySize, r.Series, r.ByPhase = nil, nil, nil, nil, nil, nil
}

// compute derives the figures from the engine's result.
func (r *Report) compute() {
	e := r.Engine
	if e == nil {
		return
	}
	t := &ThroughputFigures{Records: e.Records, Changes: e.Changes, Commits: len(e.Batches),
		Seconds: (e.DoneAt - e.FirstAt) / 1000, SecondsWithStartup: e.DoneAt / 1000, CPUSeconds: e.CPUUser + e.CPUSys}
	if t.Seconds > 0 {
		t.EventsPerSec = float64(t.Records) / t.Seconds
		t.ChangesPerSec = float64(t.Changes) / t.Seconds
	}
	if t.CPUSeconds > 0 {
		t.EventsPerCPUSecond = float64(t.Records) / t.CPUSeconds
	}
	if t.SecondsWithStartup > 0 {
		t.EventsPerSecWithStartup = float64(t.Records) / t.SecondsWithStartup
	}
	r.Throughput = t
	r.Freshness = &FreshnessFigures{P50: e.FreshP50, P99: e.FreshP99, P999: e.FreshP999, Max: e.FreshMax, Mean: e.FreshMean,
		AppendedP50: e.AppendedP50, AppendedP99: e.AppendedP99, AppendedP999: e.AppendedP999, AppendedMax: e.AppendedMax,
		WallClock: r.Options.Rate > 0}
	m := &MemoryFigures{PeakRSS: e.PeakRSS, PeakHeapInUse: e.PeakHeapInUse, HeapSys: e.HeapSys, Isolated: !e.InProcess,
		TotalAlloc: e.TotalAlloc, NumGC: e.NumGC, FetchBuffers: e.FetchBuffers, FetchBuffersReused: e.FetchBuffersReused,
		FetchBuffersForgotten: e.FetchBuffersForgotten}
	for _, s := range e.Samples {
		if s.At < e.DoneAt/2 {
			m.RSSFirstHalfMax = max(m.RSSFirstHalfMax, s.RSS)
		} else {
			m.RSSSecondHalfMax = max(m.RSSSecondHalfMax, s.RSS)
		}
	}
	m.LiveHeapMid, m.LiveHeapEnd, m.LiveHeapGrowth = liveHeapTrend(e.Samples, e.DoneAt)
	r.Memory = m
	if r.Decode.BothCores > 0 {
		r.DecodeRatio = t.EventsPerSec / r.Decode.BothCores
		r.DecodeRatioFaster = t.EventsPerSec / r.Decode.FasterBothCores()
	}
	if r.Decode.PerCPUSecond > 0 {
		r.CPURatio = t.EventsPerCPUSecond / r.Decode.PerCPUSecond
	}
	r.ByPhase = byPhase(e, r.Decode)
	r.CostBySize = costBySize(e.Batches)
	r.Checkpoints = checkpointFigures(e.Checkpoints, e.Batches)
	r.Series = series(e)
}

// PhaseFigures is the throughput of one kind of commit: its records over
// the time from the commit before it (the first commit's from the first
// record), summed over the commits of that kind.
type PhaseFigures struct {
	Phase        string  `json:"phase"`
	Commits      int     `json:"commits"`
	Records      int64   `json:"records"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// OverDecode is EventsPerSec over the decode-only rate (both cores)
	// of the phase's records: the sample's snapshot reads for the
	// inserts, its other records for the changes. Commits at the
	// boundary mix the two, so it is close to, not exactly, the phase's
	// own ratio.
	OverDecode float64 `json:"over_decode_both_cores,omitempty"`
}

// The phases byPhase reports.
const (
	phaseInserts = "inserts only"
	phaseChanges = "updates or deletes"
)

// byPhase splits the run's commits into those that only inserted and
// those that updated, deleted or revived a row, with each kind's records
// and the time since the commit before each (a batch is read while the
// one before commits, so the span between commits is a batch's share of
// the run), each set beside its decode-only rate (d's ReadsBothCores,
// ChangesBothCores).
func byPhase(e *EngineResult, d DecodeFigures) []PhaseFigures {
	phases := [2]PhaseFigures{{Phase: phaseInserts}, {Phase: phaseChanges}}
	bases := [2]float64{d.ReadsBothCores, d.ChangesBothCores}
	prev := max(e.FirstAt, 0) // -1: no record arrived
	for _, b := range e.Batches {
		f := &phases[1]
		if b.Updated+b.Deleted+b.Revived == 0 {
			f = &phases[0]
		}
		f.Commits++
		f.Records += int64(b.Records)
		f.Seconds += max((b.At-prev)/1000, 0)
		prev = b.At
	}
	var out []PhaseFigures
	for i, f := range phases {
		if f.Commits == 0 {
			continue
		}
		if f.Seconds > 0 {
			f.EventsPerSec = float64(f.Records) / f.Seconds
		}
		if bases[i] > 0 {
			f.OverDecode = f.EventsPerSec / bases[i]
		}
		out = append(out, f)
	}
	return out
}

// costBySize groups commits by decade of the table's rows before them.
func costBySize(bs []BatchStat) []CostBucket {
	type acc struct {
		n                         int
		rows, changes, ms, rewrit float64
	}
	byDecade := map[int]*acc{}
	for _, b := range bs {
		d := 0
		for x := b.RowsBefore; x >= 10; x /= 10 {
			d++
		}
		a := byDecade[d]
		if a == nil {
			a = &acc{}
			byDecade[d] = a
		}
		a.n++
		a.rows += float64(b.RowsBefore)
		a.changes += float64(b.Changes)
		a.ms += b.PlanMs + b.CommitMs
		a.rewrit += float64(b.FilesDel)
	}
	var ds []int
	for d := range byDecade {
		ds = append(ds, d)
	}
	sort.Ints(ds)
	var out []CostBucket
	for _, d := range ds {
		a := byDecade[d]
		lo := int64(1)
		for range d {
			lo *= 10
		}
		label := fmt.Sprintf("%s-%s", humanCount(lo), humanCount(lo*10))
		if d == 0 {
			label = "0-10"
		}
		c := CostBucket{Label: label, Commits: a.n, MeanRows: a.rows / float64(a.n), MeanChanges: a.changes / float64(a.n),
			MeanApplyMs: a.ms / float64(a.n), MeanRewrites: a.rewrit / float64(a.n)}
		if a.changes > 0 {
			c.UsPerChange = a.ms * 1000 / a.changes
		}
		out = append(out, c)
	}
	return out
}

// series buckets the run by second: the records of each commit spread
// evenly over the time since the previous commit (so a commit every few
// seconds reads as a rate, not a spike), the freshness quantiles of the
// batches committed in that second (the worst batch's), and the largest RSS
// sample.
func series(e *EngineResult) []SeriesPoint {
	if len(e.Batches) == 0 {
		return nil
	}
	n := int(e.DoneAt/1000) + 1
	pts := make([]SeriesPoint, n)
	for i := range pts {
		pts[i].T = float64(i + 1)
	}
	prev := max(e.FirstAt, 0) // -1: no record arrived
	for _, b := range e.Batches {
		i := min(int(b.At/1000), n-1)
		pts[i].FreshP50 = max(pts[i].FreshP50, b.FreshP50)
		pts[i].FreshP99 = max(pts[i].FreshP99, b.FreshP99)
		from, to := max(prev, 0), b.At
		prev = b.At
		if to <= from {
			pts[i].EventsPerSec += float64(b.Records)
			continue
		}
		per := float64(b.Records) / (to - from) // records per ms
		for s := int(from / 1000); s <= min(int(to/1000), n-1); s++ {
			lo, hi := max(from, float64(s)*1000), min(to, float64(s+1)*1000)
			if hi > lo {
				pts[s].EventsPerSec += per * (hi - lo)
			}
		}
	}
	for _, s := range e.Samples {
		i := min(int(s.At/1000), n-1)
		pts[i].RSS = max(pts[i].RSS, s.RSS)
	}
	return pts
}

// tableFigures reads the table's directory and log: bytes of every file
// ever written (nothing is vacuumed during a run), the live files of the
// last version, and the rows written (numRecords of every add of a data
// file not added before: re-adding a file with a new deletion vector
// writes no rows). Live rows exclude rows a deletion vector hides.
func tableFigures(ctx context.Context, dir string) (*TableFigures, error) {
	f := &TableFigures{}
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case strings.HasPrefix(rel, "_delta_log"+string(filepath.Separator)):
			f.LogBytes += info.Size()
			if strings.HasSuffix(p, ".json") {
				n, err := rowsAdded(p, seen)
				if err != nil {
					return err
				}
				f.RowsWritten += n
			}
		case strings.HasSuffix(p, ".parquet"):
			f.DataBytes += info.Size()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: table figures of %s: %w", dir, err)
	}
	snap, err := delta.Open(storage.NewLocal(dir)).Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: table figures of %s: %w", dir, err)
	}
	f.Version = snap.Version
	for _, a := range snap.Files() {
		f.LiveBytes += a.Size
		f.LiveFiles++
		f.LiveRows += statsRecords(a.Stats)
		if a.DeletionVector != nil {
			f.LiveRows -= a.DeletionVector.Cardinality
		}
	}
	if f.LiveBytes > 0 {
		f.WriteAmp = float64(f.DataBytes+f.LogBytes) / float64(f.LiveBytes)
	}
	return f, nil
}

func statsRecords(stats string) int64 {
	var s struct {
		NumRecords int64 `json:"numRecords"`
	}
	_ = json.Unmarshal([]byte(stats), &s)
	return s.NumRecords
}

// rowsAdded sums numRecords over the add actions of one commit file whose
// data file was not added before (seen, updated).
func rowsAdded(path string, seen map[string]bool) (int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	var n int64
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.HasPrefix(string(line[:min(len(line), 8)]), `{"add"`) {
			continue
		}
		var a struct {
			Add struct {
				Path  string `json:"path"`
				Stats string `json:"stats"`
			} `json:"add"`
		}
		if err := json.Unmarshal(line, &a); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		if seen[a.Add.Path] {
			continue
		}
		seen[a.Add.Path] = true
		n += statsRecords(a.Add.Stats)
	}
	return n, sc.Err()
}

func humanCount(n int64) string {
	switch {
	case n >= 1_000_000_000 && n%1_000_000_000 == 0:
		return fmt.Sprintf("%dG", n/1_000_000_000)
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// hostCPULine sets the machine's stolen CPU during the engine's run
// beside the decode-only measurements'.
func hostCPULine(eng *HostCPU, dec DecodeFigures) string {
	if eng == nil {
		return ""
	}
	line := fmt.Sprintf("engine run %.1f%% stolen by the hypervisor (%.1f%% busy, %.1f%% idle)", 100*eng.Steal, 100*eng.Busy, 100*eng.Idle)
	var parts []string
	for _, m := range []struct {
		when string
		f    *DecodeFigures
	}{{"before", dec.Before}, {"after", dec.After}} {
		if m.f != nil && m.f.HostCPU != nil {
			parts = append(parts, fmt.Sprintf("%.1f%% %s", 100*m.f.HostCPU.Steal, m.when))
		}
	}
	if len(parts) > 0 {
		line += "; decode-only " + strings.Join(parts, ", ")
	}
	return line
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Print writes the human report. A failed run prints FAIL and no figures.
func (r *Report) Print(w io.Writer) {
	o := r.Options.Workload
	fmt.Fprintf(w, "cdcapply bench: %d keys (%d snapshot), %d changes, %d columns, mix insert/update/delete %.2g/%.2g/%.2g, broker %s, compression %s\n",
		o.Keys, o.SnapshotKeys, o.Events, o.Columns, o.Insert, o.Update, o.Delete, r.Broker, r.Options.Compression)
	fmt.Fprintf(w, "  host: %d CPUs, %s, load average at start %s\n", r.Host.CPUs, r.Host.GoVersion, r.Host.LoadAvg)
	fmt.Fprintf(w, "  cpu pressure at start: %s; at end: %s\n", r.Host.CPUPressure, r.Host.CPUPressureEnd)
	c := r.Counts
	fmt.Fprintf(w, "  stream: %d records on the table's topic (%d change records, %d duplicates, %d replays, %d Kafka tombstones, %d displaced)\n",
		c.TableRecords, c.ChangeRecords, c.Duplicates, c.Replays, c.KafkaTombstones, c.Displaced)
	if r.Options.Rate > 0 {
		fmt.Fprintf(w, "  produced at %.0f records/s while the engine ran: %d records in %.1fs (%.0f/s)\n", r.Options.Rate, r.Produce.Records, r.Produce.Seconds, r.Produce.PerSecond)
	} else {
		fmt.Fprintf(w, "  preproduced before the engine started: %d records, %s in %.1fs (not counted)\n", r.Produce.Records, mib(r.Produce.Bytes), r.Produce.Seconds)
	}
	if p := r.Prefill; p != nil {
		fmt.Fprintf(w, "  prefilled without Kafka before the engine started: %d snapshot records, %d rows in %d commits in %.1fs (not counted)\n", p.Records, p.Rows, p.Commits, p.Seconds)
	}
	for _, v := range r.Verify {
		status := "OK"
		if !v.OK {
			status = "FAIL"
		}
		fmt.Fprintf(w, "  verify (%s reader): %s: %s\n", v.Reader, status, v.Diff)
	}
	if !r.OK {
		fmt.Fprintf(w, "FAIL: %s\n", r.Failure)
		fmt.Fprintf(w, "FAIL: no figures: the run did not end in the oracle's table\n")
		if r.Engine != nil && len(r.Engine.Batches) > 0 {
			// What an unfinished run did, for diagnosis (also in the JSON).
			fmt.Fprintf(w, "  (unfinished run: per-batch cost of its %d commits, not a result)\n", len(r.Engine.Batches))
			printCost(w, costBySize(r.Engine.Batches))
		}
		return
	}
	t := r.Throughput
	fmt.Fprintf(w, "\n  %-34s %12.0f events/s  (%d records in %.2fs, first record to last commit; %d commits)\n", "throughput, end to end", t.EventsPerSec, t.Records, t.Seconds, t.Commits)
	fmt.Fprintf(w, "  %-34s %12.0f changes/s\n", "", t.ChangesPerSec)
	fmt.Fprintf(w, "  %-34s %12.0f events/s  (%.2fs from engine start, group join included)\n", "  with start-up", t.EventsPerSecWithStartup, t.SecondsWithStartup)
	where := "in the harness process"
	if r.Decode.OwnProcess {
		where = "own process"
	}
	when := ""
	if b, a := r.Decode.Before, r.Decode.After; b != nil && a != nil {
		when = fmt.Sprintf("mean of %.0f before and %.0f after the engine; ", b.BothCores, a.BothCores)
	}
	fmt.Fprintf(w, "  %-34s %12.0f records/s (%s1 core %.0f/s; %d sampled records; %s)\n", "decode only, both cores", r.Decode.BothCores, when, r.Decode.OneCore, r.Decode.Sample, where)
	if r.Decode.ReadsBothCores > 0 {
		fmt.Fprintf(w, "  %-34s %12.0f records/s of the snapshot's reads, %.0f/s of the other records\n", "", r.Decode.ReadsBothCores, r.Decode.ChangesBothCores)
	}
	fmt.Fprintf(w, "  %-34s %12.2f", "end to end / decode-only (2 cores)", r.DecodeRatio)
	if r.DecodeRatioFaster > 0 && r.DecodeRatioFaster != r.DecodeRatio {
		fmt.Fprintf(w, "  (%.2f against the faster measurement)", r.DecodeRatioFaster)
	}
	fmt.Fprintln(w)
	for _, p := range r.ByPhase {
		fmt.Fprintf(w, "  %-34s %12.0f events/s  (%.2f of its records' decode-only; %d records in %.2fs, %d commits)\n", "  commits with "+p.Phase, p.EventsPerSec, p.OverDecode, p.Records, p.Seconds, p.Commits)
	}
	fmt.Fprintf(w, "  %-34s %12.1f s CPU (%.2f cores busy on average); %.0f events per CPU-second (decode-only: %.0f records per CPU-second; ratio %.2f)\n",
		"engine CPU", t.CPUSeconds, t.CPUSeconds/max(t.SecondsWithStartup, 1e-9), t.EventsPerCPUSecond, r.Decode.PerCPUSecond, r.CPURatio)
	if e := r.Engine; e != nil {
		fmt.Fprintf(w, "  %-34s %12.1f s in the kernel; %d minor page faults\n", "  of which", e.CPUSys, e.MinorFaults)
		if line := hostCPULine(e.HostCPU, r.Decode); line != "" {
			fmt.Fprintf(w, "  %-34s %s\n", "host CPU, whole machine", line)
		}
	}
	if f := r.Freshness; f.WallClock {
		fmt.Fprintf(w, "  %-34s p50 %.0f ms, p99 %.0f ms, p99.9 %.0f ms, max %.0f ms (source commit, wall clock, to table commit; per change)\n", "freshness", f.P50, f.P99, f.P999, f.Max)
		fmt.Fprintf(w, "  %-34s p50 %.0f ms, p99 %.0f ms, p99.9 %.0f ms, max %.0f ms (sent to Kafka to table commit; per record: the engine's own delay, without the workload's late and out-of-order hold-back)\n", "  since appended to Kafka", f.AppendedP50, f.AppendedP99, f.AppendedP999, f.AppendedMax)
		if e := r.Engine; e != nil {
			fmt.Fprintf(w, "  %-34s %.1f s after the engine started, when it had opened the table (key index built)\n", "  stream started", e.OpenedAt/1000)
		}
	} else {
		fmt.Fprintf(w, "  %-34s not measured: the stream was preproduced with generated source times (run with -rate)\n", "freshness")
	}
	m := r.Memory
	iso := "engine in its own process"
	if !m.Isolated {
		iso = "NOT isolated: engine ran inside the harness with the broker and oracle"
	}
	fmt.Fprintf(w, "  %-34s %s (VmHWM; %s); Go heap objects peak %s; RSS max first half %s, second half %s\n", "peak RSS", mib(m.PeakRSS), iso,
		mib(m.PeakHeapInUse), mib(m.RSSFirstHalfMax), mib(m.RSSSecondHalfMax))
	fmt.Fprintf(w, "  %-34s %s at the midpoint, %s at the end: %+.1f MiB a minute over the second half\n", "Go live heap (after collections)",
		mib(m.LiveHeapMid), mib(m.LiveHeapEnd), m.LiveHeapGrowth/(1<<20))
	fmt.Fprintf(w, "  %-34s %s allocated, %d collections; %d compressed batches decompressed, %d into reused buffers, %d left to the collector\n", "Go heap",
		mib(m.TotalAlloc), m.NumGC, m.FetchBuffers, m.FetchBuffersReused, m.FetchBuffersForgotten)
	tb := r.Table
	fmt.Fprintf(w, "  %-34s data %s + log %s; live %s in %d files (version %d)\n", "bytes written", mib(tb.DataBytes), mib(tb.LogBytes), mib(tb.LiveBytes), tb.LiveFiles, tb.Version)
	fmt.Fprintf(w, "  %-34s %.2f (bytes written / live bytes); %.2f rows written per change record (%d rows, %d change records, %d rows live)\n",
		"write amplification", tb.WriteAmp, tb.RowsPerChange, tb.RowsWritten, tb.ChangeRecords, tb.LiveRows)
	if c := r.Checkpoints; c != nil {
		fmt.Fprintf(w, "  %-34s %d written beside the commits (%d skipped while one ran, %d failed): p50 %.0f ms, max %.0f ms; median of the first tenth %.0f ms, of the last tenth %.0f ms\n",
			"log checkpoints", c.Count, c.Skipped, c.Failed, c.P50Ms, c.MaxMs, c.FirstMs, c.LastMs)
	}
	fmt.Fprintf(w, "\n  per-batch cost by table size (plan + write + commit):\n")
	printCost(w, r.CostBySize)
	if len(r.Peers) > 0 {
		fmt.Fprintf(w, "\n  peers on the same stream:\n")
		fmt.Fprintf(w, "    %-10s %10s %10s %12s %8s %12s  %s\n", "engine", "events", "seconds", "events/s", "batches", "ours/peer", "verified")
		fmt.Fprintf(w, "    %-10s %10d %10.2f %12.0f %8d %12s  %s\n", "cdcapply", t.Records, t.Seconds, t.EventsPerSec, t.Commits, "1", "OK")
		for _, p := range r.Peers {
			ratio := "-"
			if p.Ratio > 0 {
				ratio = fmt.Sprintf("%.1fx", p.Ratio)
			}
			status := "OK"
			if !p.OK {
				status = "FAIL: " + p.Failure
			}
			fmt.Fprintf(w, "    %-10s %10d %10.2f %12.0f %8d %12s  %s\n", p.Peer, p.Events, p.Seconds, p.EventsPerSec, p.Batches, ratio, status)
		}
	}
}

func printCost(w io.Writer, cs []CostBucket) {
	fmt.Fprintf(w, "    %-12s %8s %12s %10s %12s %10s %10s\n", "rows before", "commits", "mean rows", "changes", "apply ms", "µs/change", "removed")
	for _, b := range cs {
		fmt.Fprintf(w, "    %-12s %8d %12.0f %10.0f %12.1f %10.2f %10.1f\n", b.Label, b.Commits, b.MeanRows, b.MeanChanges, b.MeanApplyMs, b.UsPerChange, b.MeanRewrites)
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// liveHeapTrend returns the live heap of the first sample at or after the
// run's midpoint, of the last sample, and the least-squares slope of the
// live heap over the samples from the midpoint on, in bytes per minute
// (0 with fewer than two such samples). Samples taken before the first
// collection (live heap 0) are left out.
func liveHeapTrend(samples []Sample, doneAt float64) (mid, end int64, perMin float64) {
	var xs, ys []float64
	for _, s := range samples {
		if s.LiveHeap == 0 || s.At < doneAt/2 {
			continue
		}
		if len(xs) == 0 {
			mid = s.LiveHeap
		}
		end = s.LiveHeap
		xs, ys = append(xs, s.At/60000), append(ys, float64(s.LiveHeap))
	}
	if len(xs) < 2 {
		return mid, end, 0
	}
	// Centred on the means, so a flat heap fits a slope of exactly 0.
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx > 0 {
		perMin = sxy / sxx
	}
	return mid, end, perMin
}
