package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PrefillFigures describe writing the snapshot straight into the table
// (-prefill): not part of the engine's figures.
type PrefillFigures struct {
	// Records are the snapshot phase's records of the table's topic that
	// were loaded (reads and their duplicates); Rows the table's rows
	// after it; Commits the Delta versions it wrote.
	Records int64   `json:"records"`
	Rows    int64   `json:"rows"`
	Commits int     `json:"commits"`
	Seconds float64 `json:"seconds"`
	// Produced are the snapshot phase's other records (heartbeats), sent
	// to Kafka ahead of the streamed changes.
	Produced int64 `json:"produced"`
}

// prefillChunk is how many snapshot records one Load commits: a few
// hundred MB of JSON and decoded rows in the harness process at a time.
const prefillChunk = 100_000

// prefill takes the generator's snapshot phase and writes its reads into
// the table with apply.Engine.Load (the engine's own decoder, layout and
// merge, in this process, no broker), so a table of millions of rows
// exists before the engine starts without putting its snapshot through
// Kafka. The engine then reads only the streamed changes; the oracle is
// the generator's as always, so the verification covers the loaded rows.
func prefill(ctx context.Context, job Job, table string, g *workload.Generator, cl *kgo.Client, logf func(string, ...any)) (PrefillFigures, error) {
	var fig PrefillFigures
	cfg, err := apply.ParseConfig(job.ConfigPath, []byte(job.ConfigYAML))
	if err != nil {
		return fig, err
	}
	e, err := apply.NewEngine(cfg, apply.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return fig, err
	}
	start := time.Now()
	recs := make([]debezium.Record, 0, prefillChunk)
	var other []*kgo.Record
	load := func() error {
		if len(recs) == 0 {
			return nil
		}
		res, err := e.Load(ctx, table, recs)
		if err != nil {
			return fmt.Errorf("bench: prefill: %w", err)
		}
		fig.Commits++
		fig.Rows += int64(res.Counts.Insert)
		logf("prefill: %d snapshot records in the table (version %d, %.0f records/s)", fig.Records, res.Version, float64(fig.Records)/time.Since(start).Seconds())
		clear(recs)
		recs = recs[:0]
		return nil
	}
	var ev workload.Event
	for g.NextSnapshot(&ev) {
		if ev.Record.Topic == g.Topic() && ev.Class == debezium.ClassChange {
			recs = append(recs, ev.Record)
			fig.Records++
			if len(recs) == prefillChunk {
				if err := load(); err != nil {
					return fig, err
				}
			}
			continue
		}
		r := ev.Record
		kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		other = append(other, kr)
	}
	if err := load(); err != nil {
		return fig, err
	}
	if len(other) > 0 {
		if err := cl.ProduceSync(ctx, other...).FirstErr(); err != nil {
			return fig, fmt.Errorf("bench: prefill: produce the snapshot phase's other records: %w", err)
		}
		fig.Produced = int64(len(other))
	}
	fig.Seconds = time.Since(start).Seconds()
	return fig, nil
}
