package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
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
// measurement; when file is not empty it also writes the table's records
// there as JSON lines for the peers (bench/peers/CONTRACT.md).
func collectStream(cfg workload.Config, n int, file string) ([]debezium.Record, error) {
	cfg.Clock = nil
	o, err := workload.OracleFor(cfg)
	if err != nil {
		return nil, err
	}
	total := o.Counts().TableRecords
	stride := max(1, total/int64(max(n, 1)))
	g, err := workload.New(cfg)
	if err != nil {
		return nil, err
	}
	var w *bufio.Writer
	if file != "" {
		f, err := os.Create(file)
		if err != nil {
			return nil, fmt.Errorf("bench: write the stream file: %w", err)
		}
		defer f.Close()
		w = bufio.NewWriterSize(f, 4<<20)
	}
	var out []debezium.Record
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
				return nil, fmt.Errorf("bench: write the stream file: %w", err)
			}
		}
		if i%stride == 0 && len(out) < n {
			out = append(out, ev.Record)
		}
		i++
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return nil, fmt.Errorf("bench: write the stream file: %w", err)
		}
	}
	return out, nil
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
}

// measureDecode decodes the sample with one goroutine and then with two,
// each for at least minTime (whole passes over its share).
func measureDecode(ctx context.Context, sample []debezium.Record, minTime time.Duration) (DecodeFigures, error) {
	f := DecodeFigures{Sample: len(sample), Workers: 2}
	if len(sample) == 0 {
		return f, nil
	}
	one, _, err := decodeWith(ctx, sample, 1, minTime)
	if err != nil {
		return f, err
	}
	both, perCPU, err := decodeWith(ctx, sample, 2, minTime)
	if err != nil {
		return f, err
	}
	f.OneCore, f.BothCores, f.PerCPUSecond = one, both, perCPU
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
