package apply

import (
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
)

// BatchReport describes one committed batch for the bench harness
// (`cdcapply bench`): what it held, how big the table was before it, where
// its time went, and the source commit time of every change, so freshness
// (source commit to committed in the table) is measured per change rather
// than from the batch's newest change as the metrics do.
type BatchReport struct {
	Table   string
	Version int64
	Result  *Result
	// Read, Skipped and Quarantined count the batch's records (Kafka
	// records of the table's partitions); Changes the decoded changes
	// handed to the applier.
	Read, Skipped, Quarantined, Changes int
	// Ranges are the offsets the batch covered per partition (its commit
	// made each partition's position Range.Next). Not modified afterwards.
	Ranges map[checkpoint.TopicPartition]checkpoint.Range
	// RowsBefore is the rows (live and tombstones) the table held before
	// the batch: the size of the key index.
	RowsBefore int
	// SourceMicros holds each change's source commit time, microseconds
	// since the epoch, in batch order.
	SourceMicros []int64
	// AppendedMicros holds the Kafka timestamp of each record the batch
	// read (Read of them, in the order read), microseconds since the
	// epoch: with producers that stamp the send time (Kafka Connect's, the
	// bench's with -rate) the commit minus it is the engine's own delay,
	// which freshness also counts with whatever held a change back before
	// it reached Kafka.
	AppendedMicros []int64
	// Decode is the time spent decoding the batch's records, Refresh the
	// catch-up with other writers, Quarantine the quarantine commit;
	// Result.Durations has plan (reduce, plan, data files) and commit.
	Decode, Refresh, Quarantine time.Duration
	// Started is when the batch's first record arrived, Committed when
	// its table commit returned.
	Started, Committed time.Time
}

// rows is the number of rows the table holds (0 before it exists).
func (a *TableApplier) rows() int {
	if a.index == nil {
		return 0
	}
	return a.index.Len()
}

// batchReport builds the OnBatch report of a batch that just committed.
func (t *tableRun) batchReport(f *inflight) *BatchReport {
	b := f.b
	r := &BatchReport{
		Table: t.cfg.Name, Version: f.res.Version, Result: f.res,
		Read: b.Read, Skipped: b.Skipped, Quarantined: b.Quarantined, Changes: len(b.Changes),
		Ranges:         b.Ranges,
		RowsBefore:     f.rowsBefore,
		SourceMicros:   make([]int64, len(b.Changes)),
		AppendedMicros: f.buf.appended,
		Decode:         f.buf.decode, Refresh: f.refreshed, Quarantine: f.quarantined,
		Started: f.buf.since, Committed: f.committed,
	}
	for i, c := range b.Changes {
		r.SourceMicros[i] = c.SourceTsMicros
	}
	return r
}
