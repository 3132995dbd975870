package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/debezium"
)

// collectStream generates the run's stream again (same configuration,
// without the wall clock) and keeps every k-th record of the table's topic
// so that about n records spread over the whole stream (snapshot reads and
// streamed changes in their proportions) are kept for the decode-only
// measurement, and says of each whether it is a snapshot read; when file
// is not empty it also writes the table's records there as JSON lines for
// the peers (bench/peers/CONTRACT.md).
func collectStream(cfg workload.Config, n int, file string) ([]debezium.Record, []bool, error) {
	cfg.Clock = nil
	o, err := workload.OracleFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	total := o.Counts().TableRecords
	stride := max(1, total/int64(max(n, 1)))
	g, err := workload.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	var w *bufio.Writer
	if file != "" {
		f, err := os.Create(file)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: write the stream file: %w", err)
		}
		defer f.Close()
		w = bufio.NewWriterSize(f, 4<<20)
	}
	var out []debezium.Record
	var reads []bool
	var ev workload.Event
	var line []byte
	var i int64
	for g.Next(&ev) {
		if ev.Record.Topic != g.Topic() {
			continue
		}
		if w != nil {
			line = workload.AppendJSONLine(line[:0], &ev.Record)
			if _, err := w.Write(line); err != nil {
				return nil, nil, fmt.Errorf("bench: write the stream file: %w", err)
			}
		}
		if i%stride == 0 && len(out) < n {
			out = append(out, ev.Record)
			reads = append(reads, ev.Change != nil && ev.Change.Op == debezium.OpRead && ev.Class == debezium.ClassChange)
		}
		i++
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return nil, nil, fmt.Errorf("bench: write the stream file: %w", err)
		}
	}
	return out, reads, nil
}

// decodeSample is the decode-only sample, whole and split into its
// snapshot reads and its other records, split once when it is collected
// (before the collection that leaves the decoders the sample alone).
type decodeSample struct {
	all, reads, rest []debezium.Record
}

func splitSample(sample []debezium.Record, reads []bool) decodeSample {
	s := decodeSample{all: sample}
	for i := range sample {
		if reads[i] {
			s.reads = append(s.reads, sample[i])
		} else {
			s.rest = append(s.rest, sample[i])
		}
	}
	return s
}

// DecodeFigures are the decode-only measurements: the engine's decoder
// (Debezium JSON, PostgreSQL sequences, key column id) over the sampled
// records in memory, no Kafka, no table.
type DecodeFigures struct {
	Sample int `json:"sample_records"`
	// OneCore is one goroutine; BothCores is two goroutines, each over
	// half the sample, in records per second.
	OneCore   float64 `json:"one_core_records_per_sec"`
	BothCores float64 `json:"both_cores_records_per_sec"`
	Workers   int     `json:"workers"`
	// PerCPUSecond is records decoded per CPU-second of this process
	// during the two-goroutine measurement: less sensitive than the wall
	// clock figures to other processes competing for the cores.
	PerCPUSecond float64 `json:"records_per_cpu_second"`
	// ReadsBothCores and ChangesBothCores are BothCores over the
	// sample's snapshot reads alone and over its other records alone
	// (streamed changes, Kafka tombstones, duplicates): the baselines of
	// the report's two phases. Unset when the sample lacks either.
	ReadsBothCores   float64 `json:"reads_both_cores_records_per_sec,omitempty"`
	ChangesBothCores float64 `json:"changes_both_cores_records_per_sec,omitempty"`
	// OwnProcess says the figures were measured in a process of their own
	// (DecodeCommand), whose heap is the sample alone; otherwise in the
	// harness's process, where the collector also marks the generator's
	// oracle and the broker's data while the decoders allocate.
	OwnProcess bool `json:"own_process"`
	// Before and After are the two measurements, just before the engine
	// started and after it finished; OneCore, BothCores and PerCPUSecond
	// are their means (the host's speed drifts over a run, and the engine
	// ran between them). Unset in a single measurement.
	Before *DecodeFigures `json:"before,omitempty"`
	After  *DecodeFigures `json:"after,omitempty"`
	// HostCPU is the whole machine's CPU while the measurement ran (the
	// harness reads it around the request): the share stolen from the
	// decoders, to set beside the engine's (EngineResult.HostCPU).
	HostCPU *HostCPU `json:"host_cpu,omitempty"`
	// Error is a failure reported by the decode-only process.
	Error string `json:"error,omitempty"`
}

// FasterBothCores is the higher of the two both-cores measurements (the
// mean when there is only one): the baseline least favourable to the
// engine.
func (f DecodeFigures) FasterBothCores() float64 {
	if f.Before == nil || f.After == nil {
		return f.BothCores
	}
	return max(f.Before.BothCores, f.After.BothCores)
}

// meanOf combines the measurements before and after the engine.
func meanOf(before, after DecodeFigures) DecodeFigures {
	return DecodeFigures{
		Sample: after.Sample, Workers: after.Workers, OwnProcess: before.OwnProcess && after.OwnProcess,
		OneCore: (before.OneCore + after.OneCore) / 2, BothCores: (before.BothCores + after.BothCores) / 2,
		PerCPUSecond:   (before.PerCPUSecond + after.PerCPUSecond) / 2,
		ReadsBothCores: (before.ReadsBothCores + after.ReadsBothCores) / 2, ChangesBothCores: (before.ChangesBothCores + after.ChangesBothCores) / 2,
		Before: &before, After: &after,
	}
}

// DecodeJob is what the decode-only process is given: the run's workload
// (the stream is generated again from it), how many records to sample and
// the least time of each measurement.
type DecodeJob struct {
	Workload workload.Config `json:"workload"`
	Sample   int             `json:"sample"`
	MinTime  time.Duration   `json:"min_time"`
}

// decodeRun is a decode-only baseline ready to measure: in a process of
// its own when command is set (the harness's heap, with the oracle and
// the broker's data, would make the decoders' collections dearer: in one
// 1M-key run two goroutines decoded 394k records/s in the harness and
// 431k-516k in a process of their own), else here. The process
// generates its sample while the harness produces the stream, then idles
// until asked to measure, so a measurement never overlaps the engine.
type decodeRun struct {
	job     DecodeJob
	sample  decodeSample // in this process
	command []string
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
}

func startDecodeOnly(ctx context.Context, command []string, job DecodeJob) (*decodeRun, error) {
	d := &decodeRun{job: job, command: command}
	if len(command) == 0 {
		sample, reads, err := collectStream(job.Workload, job.Sample, "")
		if err != nil {
			return nil, err
		}
		d.sample = splitSample(sample, reads)
		return d, nil
	}
	cmd, in, out, err := startChild(ctx, command, "decode-only")
	if err != nil {
		return nil, err
	}
	d.cmd, d.in, d.out = cmd, in, bufio.NewScanner(out)
	if err := jsonLine(in, job); err != nil {
		d.close()
		return nil, fmt.Errorf("bench: write to the decode-only process: %w", err)
	}
	return d, nil
}

// measure takes one measurement.
func (d *decodeRun) measure(ctx context.Context) (DecodeFigures, error) {
	host := startHostSpan()
	f, err := d.measureOnce(ctx)
	f.HostCPU = host.end()
	return f, err
}

func (d *decodeRun) measureOnce(ctx context.Context) (DecodeFigures, error) {
	if d.cmd == nil {
		return measureDecode(ctx, d.sample, d.job.MinTime)
	}
	if _, err := io.WriteString(d.in, "measure\n"); err != nil {
		return DecodeFigures{}, d.failed(fmt.Errorf("ask for a measurement: %w", err))
	}
	if !d.out.Scan() {
		return DecodeFigures{}, d.failed(fmt.Errorf("gave no result (%v)", d.out.Err()))
	}
	var f DecodeFigures
	if err := json.Unmarshal(d.out.Bytes(), &f); err != nil {
		return DecodeFigures{}, d.failed(fmt.Errorf("gave no result: %w", err))
	}
	if f.Error != "" {
		return DecodeFigures{}, d.failed(errors.New(f.Error))
	}
	return f, nil
}

// failed ends the process and adds how it ended to err.
func (d *decodeRun) failed(err error) error {
	if werr := d.stop(); werr != nil {
		err = fmt.Errorf("%w; %v", err, werr)
	}
	return fmt.Errorf("bench: the decode-only process %v: %w", d.command, err)
}

// close ends the process, whatever it is doing: a run that fails early
// does not wait for it to finish generating its sample.
func (d *decodeRun) close() {
	if d != nil {
		_ = d.stop()
	}
}

func (d *decodeRun) stop() error {
	if d.cmd == nil {
		return nil
	}
	d.in.Close()
	_ = d.cmd.Process.Kill() // an error only says it has exited already
	err := d.cmd.Wait()
	d.cmd = nil
	return err
}

// ServeDecode is the decode-only process: a DecodeJob as the first JSON
// line of in; then, for each further line, one measurement written as a
// JSON line of DecodeFigures on out, until in ends. The stream is
// generated here and its garbage collected before any measurement, so the
// decoders share the heap with the sample alone.
func ServeDecode(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	enc := json.NewEncoder(out)
	fail := func(err error) error {
		if encErr := enc.Encode(DecodeFigures{Error: err.Error()}); encErr != nil {
			return fmt.Errorf("bench decode-only: write the result: %w", encErr)
		}
		return err
	}
	line, err := r.ReadBytes('\n')
	var job DecodeJob
	if err == nil {
		err = json.Unmarshal(line, &job)
	}
	if err != nil {
		return fail(fmt.Errorf("bench decode-only: read the job: %w", err))
	}
	all, reads, err := collectStream(job.Workload, job.Sample, "")
	if err != nil {
		return fail(err)
	}
	sample := splitSample(all, reads)
	runtime.GC()
	for {
		if _, err := r.ReadBytes('\n'); err == io.EOF {
			return nil
		} else if err != nil {
			return fail(fmt.Errorf("bench decode-only: read: %w", err))
		}
		f, err := measureDecode(ctx, sample, job.MinTime)
		if err != nil {
			return fail(err)
		}
		f.OwnProcess = true
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("bench decode-only: write the result: %w", err)
		}
	}
}

// measureDecode decodes the sample with one goroutine and then with two,
// then its snapshot reads and its other records apart with two, each for
// at least minTime (whole passes over its share).
func measureDecode(ctx context.Context, sample decodeSample, minTime time.Duration) (DecodeFigures, error) {
	f := DecodeFigures{Sample: len(sample.all), Workers: 2}
	if len(sample.all) == 0 {
		return f, nil
	}
	one, _, err := decodeWith(ctx, sample.all, 1, minTime)
	if err != nil {
		return f, err
	}
	both, perCPU, err := decodeWith(ctx, sample.all, 2, minTime)
	if err != nil {
		return f, err
	}
	f.OneCore, f.BothCores, f.PerCPUSecond = one, both, perCPU
	if len(sample.reads) > 0 && len(sample.rest) > 0 {
		if f.ReadsBothCores, _, err = decodeWith(ctx, sample.reads, 2, minTime); err != nil {
			return f, err
		}
		if f.ChangesBothCores, _, err = decodeWith(ctx, sample.rest, 2, minTime); err != nil {
			return f, err
		}
	}
	return f, nil
}

func newDecoder() (*debezium.Decoder, error) {
	return debezium.New(debezium.ValueFormat(debezium.FormatJSON), debezium.EnvelopeShape(debezium.EnvelopeDebezium),
		debezium.SourceConnector(debezium.ConnectorPostgres), debezium.KeyColumns("id"))
}

// decodeWith returns records per second and records per CPU-second.
func decodeWith(ctx context.Context, sample []debezium.Record, workers int, minTime time.Duration) (float64, float64, error) {
	var wg sync.WaitGroup
	counts := make([]int64, workers)
	errs := make([]error, workers)
	cpu0 := cpuSeconds()
	start := time.Now()
	for w := range workers {
		part := sample[w*len(sample)/workers : (w+1)*len(sample)/workers]
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := newDecoder()
			if err != nil {
				errs[w] = err
				return
			}
			for time.Since(start) < minTime {
				for i := range part {
					if _, err := d.Decode(ctx, &part[i]); err != nil {
						errs[w] = fmt.Errorf("bench: decode-only: %s partition %d offset %d: %w", part[i].Topic, part[i].Partition, part[i].Offset, err)
						return
					}
				}
				counts[w] += int64(len(part))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuSeconds() - cpu0
	var n int64
	for w := range workers {
		if errs[w] != nil {
			return 0, 0, errs[w]
		}
		n += counts[w]
	}
	perCPU := 0.0
	if cpu > 0 {
		perCPU = float64(n) / cpu
	}
	return float64(n) / elapsed.Seconds(), perCPU, nil
}

// cpuSeconds is this process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
