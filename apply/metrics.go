package apply

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/tombstone"
)

// Metrics are the engine's Prometheus metrics. One value is built from a
// Registerer the caller owns (no global registry) and handed to the
// engine with WithMetrics; the design record design/metrics.md lists
// every series and what it means.
//
// Records and rows are counted when the table commit that accounts for
// them lands, never when they are read: a batch dropped by a resync is
// read again, and counting at read time would count it twice.
type Metrics struct {
	now func() time.Time // freshness reference (tests pin it)

	records       *prometheus.CounterVec
	rows          *prometheus.CounterVec
	batchRecords  *prometheus.HistogramVec
	stageSeconds  *prometheus.HistogramVec
	version       *prometheus.GaugeVec
	fenced        *prometheus.CounterVec
	commitFailed  *prometheus.CounterVec
	ckptFailed    *prometheus.CounterVec
	registryFails *prometheus.CounterVec
	groupCommits  *prometheus.CounterVec
	fetchErrors   *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	schemaChanges *prometheus.CounterVec
	running       *prometheus.GaugeVec
	halted        *prometheus.GaugeVec
	lag           *prometheus.GaugeVec
	sourceTime    *prometheus.GaugeVec
	purgeHorizon  *prometheus.GaugeVec
	tableRows     *prometheus.GaugeVec
	logFiles      *prometheus.GaugeVec
	indexRefresh  *prometheus.CounterVec
	groupAssign   *prometheus.GaugeVec
	freshness     *prometheus.Desc
	inProgress    *prometheus.Desc

	kafka *kprom.Metrics

	mu sync.Mutex // guards hwm, pos, owner, freshAsOf, busy and checkpointing
	// hwm is the latest high watermark seen per partition in a fetch.
	hwm map[checkpoint.TopicPartition]int64
	// pos is the table's next offset to apply per partition.
	pos map[checkpoint.TopicPartition]int64
	// owner names the table of each partition with a lag series.
	owner map[checkpoint.TopicPartition]string
	// freshAsOf is the source time up to which each table is complete.
	freshAsOf map[string]time.Time
	// busy is the stage each table's batch is in now, and since when.
	busy map[string]busyStage
	// checkpointing is when each table's background log checkpoint
	// started, while one runs (beside the batches' stages).
	checkpointing map[string]time.Time
}

// busyStage is a stage under way: cdcapply_stage_in_progress_seconds.
type busyStage struct {
	stage string
	since time.Time
}

// Stage names of cdcapply_stage_duration_seconds.
const (
	stageDecode     = "decode"     // decode and project every record of the batch
	stageRefresh    = "refresh"    // catch up with other writers' commits
	stageQuarantine = "quarantine" // write the batch's rejected records
	stagePlan       = "plan"       // reduce, plan against the key index, write data files
	stageCommit     = "commit"     // the one Delta log commit
	// stageCheckpoint is a log checkpoint and the log cleanup after it,
	// observed as each ends; it runs beside the batches, so it can be in
	// progress while a batch is in another stage.
	stageCheckpoint = "checkpoint"
	// stageOpen is shown in progress only (never observed): the table's
	// log read and key index built or caught up, at start, on a resync and
	// on a new assignment.
	stageOpen = "open"
)

// NewMetrics registers the engine's metrics and franz-go's client metrics
// (kprom, namespace cdcapply_kafka) with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	table := []string{"table"}
	m := &Metrics{
		now: time.Now,
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_records_total",
			Help: "Kafka records accounted for by committed batches, by outcome (applied, stale, skipped, quarantined); reason is set for quarantined records only."},
			[]string{"table", "outcome", "reason"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_rows_written_total",
			Help: "Rows written to the table by committed batches, by kind (insert, update, delete, revive)."},
			[]string{"table", "kind"}),
		batchRecords: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cdcapply_batch_records",
			Help:    "Kafka records per committed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}, table),
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cdcapply_stage_duration_seconds",
			Help:    "Time per committed batch spent in each stage (decode, refresh, quarantine, plan, commit); checkpoint is observed once per log checkpoint (written beside the batches after a checkpoint version's commit) and its log cleanup.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"table", "stage"}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_version",
			Help: "Delta version of the table's latest commit by this engine."}, table),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_commits_fenced_total",
			Help: "Batches dropped because another writer advanced one of their partitions (commit conflicts)."}, table),
		commitFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_commits_failed_total",
			Help: "Batches whose table commit failed for another reason and were read again from the table's positions."}, table),
		ckptFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_checkpoint_failures_total",
			Help: "Log checkpoints (or the log cleanup after them) that failed after their commit landed: the commit stands, readers replay more of the log until one succeeds."}, table),
		registryFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_schema_registry_failures_total",
			Help: "Records the table could not decode because the schema registry failed (unreachable, timed out, 5xx): each one holds the table, which reads it again after a back-off (0.2 s doubling to 30 s); nothing is quarantined or skipped."}, table),
		groupCommits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_group_offset_commit_failures_total",
			Help: "Consumer group offset commits after a table commit that failed, whole or for some partition (a missing group ACL, a commit late in a rebalance): the table and its positions are right, but tools reading the group's committed offsets see it behind; cdcapply_partition_lag_records stays true."}, table),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_fetch_errors_total",
			Help: "Fetch errors the Kafka client returned for the table's partitions, by error: the Kafka error code's name (TOPIC_AUTHORIZATION_FAILED, ...) or client. Errors the client retries itself (leader moves, a broker restarting) are not returned, so this counts what keeps the table from reading; an offset gap halts the table instead (cdcapply_table_halted)."},
			[]string{"table", "error"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_offsets_skipped_total",
			Help: "Offsets of the partition a table skipped under kafka.on_offset_gap: skip because retention deleted them before they were applied: an upper bound on the changes the table lost (a transaction marker or a compacted record takes an offset too). Counted at an assignment and while reading."},
			[]string{"table", "topic", "partition"}),
		schemaChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_schema_changes_total",
			Help: "Committed additive schema changes (new source columns joining the table)."}, table),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_running",
			Help: "1 while the table is being applied, 0 once it halted."}, table),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_halted",
			Help: "1 when the table halted, with the class of the reason (schema, truncate, offset_gap, topic_recreated, open)."}, []string{"table", "reason"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_partition_lag_records",
			Help: "High watermark of the partition minus the table's applied position. The watermark comes from the latest fetch, and while the engine waits for a commit (fetching nothing) from the brokers' end offsets every 10 s."},
			[]string{"table", "topic", "partition"}),
		sourceTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_source_time_seconds",
			Help: "Source commit time (Unix seconds) up to which the table is complete: the newest committed change, or a heartbeat read while the table had no lag."}, table),
		purgeHorizon: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_purge_horizon_seconds",
			Help: "The table's tombstone purge horizon (Unix seconds of source time); absent before the first purge."}, table),
		tableRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_rows",
			Help: "Rows the table holds by state: live, or tombstone (soft-deleted, kept until a purge); from the engine's key index after each commit and at start."},
			[]string{"table", "state"}),
		logFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_table_log_files",
			Help: "Data files in the table's Delta log state after each commit: live (add actions), or removed (remove actions kept until delta.deletedFileRetentionDuration expires them; every log checkpoint carries them, reading the previous checkpoint's back and writing them all again). Merge-on-read removes and re-adds each file whose deletion vector a commit changes."},
			[]string{"table", "state"}),
		indexRefresh: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdcapply_key_index_refreshes_total",
			Help: "Times a table's key index followed other writers' commits (purge, optimize, restore, another instance): caught_up from the files they changed, or rebuilt from every file (a schema or protocol change, a resync the applier's state could not be trusted for)."},
			[]string{"table", "how"}),
		groupAssign: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cdcapply_group_assignment",
			Help: "1 for the protocol the consumer group last assigned this process's partitions by (cdcapply-tables: each table whole to one process; cooperative-sticky: partitions, a table possibly split), labelled with the kafka.assignment the process is set to; assignment=tables with protocol cooperative-sticky means some member of the group does not offer table assignment (an older cdcapply, or assignment: partitions). Absent before the first assignment."},
			[]string{"group", "assignment", "protocol"}),
		freshness: prometheus.NewDesc("cdcapply_table_freshness_seconds",
			"Now minus cdcapply_table_source_time_seconds: how far the table is behind its source.", table, nil),
		inProgress: prometheus.NewDesc("cdcapply_stage_in_progress_seconds",
			"How long the table has been in the stage it is in now (open: the log read and the key index built or caught up, at start, after a failure or on a new assignment; then a batch's refresh, quarantine, plan, commit), and in a log checkpoint written beside the batches (checkpoint); present only while the table is in one. cdcapply_stage_duration_seconds is observed when a stage ends, so a stage that hangs (storage that does not answer) shows here only.",
			[]string{"table", "stage"}, nil),
		kafka:     kprom.NewMetrics("cdcapply_kafka", kprom.Registerer(reg)),
		hwm:       map[checkpoint.TopicPartition]int64{},
		pos:       map[checkpoint.TopicPartition]int64{},
		owner:     map[checkpoint.TopicPartition]string{},
		freshAsOf: map[string]time.Time{},
		busy:      map[string]busyStage{},

		checkpointing: map[string]time.Time{},
	}
	reg.MustRegister(m.records, m.rows, m.batchRecords, m.stageSeconds, m.version, m.fenced, m.commitFailed, m.ckptFailed, m.registryFails, m.groupCommits, m.fetchErrors, m.skipped,
		m.schemaChanges, m.running, m.halted, m.lag, m.sourceTime, m.purgeHorizon, m.tableRows, m.logFiles, m.indexRefresh, m.groupAssign, freshnessCollector{m})
	return m
}

// WithMetrics makes the engine record into m.
func WithMetrics(m *Metrics) EngineOption { return func(e *Engine) { e.metrics = m } }

// kafkaHooks returns the client hooks feeding the kprom metrics.
func (m *Metrics) kafkaHooks() kgo.Opt { return kgo.WithHooks(m.kafka) }

// freshnessCollector computes freshness and the time of the stages under
// way at scrape time, so an idle table grows stale, and a stuck stage
// grows old, on the dashboard without any event having to update them.
type freshnessCollector struct{ m *Metrics }

func (c freshnessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.freshness
	ch <- c.m.inProgress
}

func (c freshnessCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	now := c.m.now()
	for table, at := range c.m.freshAsOf {
		ch <- prometheus.MustNewConstMetric(c.m.freshness, prometheus.GaugeValue, now.Sub(at).Seconds(), table)
	}
	for table, b := range c.m.busy {
		ch <- prometheus.MustNewConstMetric(c.m.inProgress, prometheus.GaugeValue, now.Sub(b.since).Seconds(), table, b.stage)
	}
	for table, since := range c.m.checkpointing {
		ch <- prometheus.MustNewConstMetric(c.m.inProgress, prometheus.GaugeValue, now.Sub(since).Seconds(), table, stageCheckpoint)
	}
}

// stageBegan notes that table's batch entered stage.
func (m *Metrics) stageBegan(table, stage string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.busy[table] = busyStage{stage, m.now()}
	m.mu.Unlock()
}

// stageEnded notes that table has no batch in a stage any more.
func (m *Metrics) stageEnded(table string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.busy, table)
	m.mu.Unlock()
}

// tableStarted puts a table's state series in place.
func (m *Metrics) tableStarted(table string) {
	if m == nil {
		return
	}
	m.running.WithLabelValues(table).Set(1)
}

// rowsHeld sets the table's live and tombstoned row counts.
func (m *Metrics) rowsHeld(table string, keys, tombstones int) {
	if m == nil {
		return
	}
	m.tableRows.WithLabelValues(table, "live").Set(float64(keys - tombstones))
	m.tableRows.WithLabelValues(table, "tombstone").Set(float64(tombstones))
}

// indexRefreshed counts a key index that followed other writers' commits.
func (m *Metrics) indexRefreshed(table string, rebuilt bool) {
	if m == nil {
		return
	}
	how := "caught_up"
	if rebuilt {
		how = "rebuilt"
	}
	m.indexRefresh.WithLabelValues(table, how).Inc()
}

// groupAssigned records the protocol the group last assigned by (one
// series: a process is in one group).
func (m *Metrics) groupAssigned(group, assignment, protocol string) {
	if m == nil {
		return
	}
	m.groupAssign.Reset()
	m.groupAssign.WithLabelValues(group, assignment, protocol).Set(1)
}

// tableHalted flips the table's state to halted with the reason class.
func (m *Metrics) tableHalted(table, reason string) {
	if m == nil {
		return
	}
	m.running.WithLabelValues(table).Set(0)
	m.halted.WithLabelValues(table, reason).Set(1)
}

// fetched records the high watermarks of a poll and refreshes the lag of
// every partition it names.
func (m *Metrics) fetched(fetches kgo.Fetches) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.HighWatermark < 0 {
			return
		}
		tp := checkpoint.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		m.hwm[tp] = p.HighWatermark
		m.setLagLocked(tp)
	})
}

// watermarks records high watermarks listed by the brokers (while the
// loop waits for a commit and fetches nothing) and refreshes the lag of
// the partitions they name. A watermark never moves back: a fetch's may
// be newer than the listing.
func (m *Metrics) watermarks(ends map[checkpoint.TopicPartition]int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for tp, end := range ends {
		if end > m.hwm[tp] {
			m.hwm[tp] = end
			m.setLagLocked(tp)
		}
	}
}

// positioned records a partition's position as read from its table (on
// assignment) or as moved by a commit.
func (m *Metrics) positioned(table string, tp checkpoint.TopicPartition, next int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owner[tp] = table
	m.pos[tp] = next
	m.setLagLocked(tp)
}

// revoked removes the lag series of partitions this instance gave up: the
// new owner reports them.
func (m *Metrics) revoked(table string, tp checkpoint.TopicPartition) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pos, tp)
	delete(m.owner, tp)
	m.lag.DeleteLabelValues(table, tp.Topic, strconv.Itoa(int(tp.Partition)))
}

func (m *Metrics) setLagLocked(tp checkpoint.TopicPartition) {
	table, owned := m.owner[tp]
	hwm, seen := m.hwm[tp]
	if !owned || !seen {
		return
	}
	lag := hwm - m.pos[tp]
	if lag < 0 {
		lag = 0 // the fetch that showed the watermark is older than the commit
	}
	m.lag.WithLabelValues(table, tp.Topic, strconv.Itoa(int(tp.Partition))).Set(float64(lag))
}

// behindLocked reports whether any partition of table has known lag.
func (m *Metrics) behindLocked(table string) bool {
	for tp, t := range m.owner {
		if t != table {
			continue
		}
		if hwm, ok := m.hwm[tp]; ok && hwm > m.pos[tp] {
			return true
		}
	}
	return false
}

// batchDone is what one committed batch reports.
type batchDone struct {
	table       string
	batch       *Batch
	res         *Result
	quarantined map[string]int // by reason
	schema      int            // additive schema changes committed
	decode      time.Duration
	refresh     time.Duration
	quarantine  time.Duration
	newestMicro int64 // newest source time of the batch's changes
	heartbeatMs int64 // newest heartbeat ts_ms read in the batch
	horizon     *tombstone.Horizon
}

// checkpointBegan notes that table's background log checkpoint started.
func (m *Metrics) checkpointBegan(table string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.checkpointing[table] = m.now()
	m.mu.Unlock()
}

// checkpointed records a log checkpoint's outcome: its time as the
// checkpoint stage, which is no longer in progress, and its failure.
func (m *Metrics) checkpointed(table string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.checkpointing, table)
	m.mu.Unlock()
	m.stageSeconds.WithLabelValues(table, stageCheckpoint).Observe(took.Seconds())
	if err != nil {
		m.ckptFailed.WithLabelValues(table).Inc()
	}
}

// committed records a committed batch: outcomes, rows, stages, version,
// positions (and so lag) and freshness.
func (m *Metrics) committed(d batchDone) {
	if m == nil {
		return
	}
	t, b, c := d.table, d.batch, d.res.Counts
	m.records.WithLabelValues(t, "applied", "").Add(float64(c.AppliedRecords))
	m.records.WithLabelValues(t, "stale", "").Add(float64(c.StaleRecords))
	m.records.WithLabelValues(t, "skipped", "").Add(float64(b.Skipped))
	for reason, n := range d.quarantined {
		m.records.WithLabelValues(t, "quarantined", reason).Add(float64(n))
	}
	m.rows.WithLabelValues(t, "insert").Add(float64(c.Insert))
	m.rows.WithLabelValues(t, "update").Add(float64(c.Update))
	m.rows.WithLabelValues(t, "delete").Add(float64(c.Delete))
	m.rows.WithLabelValues(t, "revive").Add(float64(c.Revive))
	m.batchRecords.WithLabelValues(t).Observe(float64(b.Read))
	m.stageSeconds.WithLabelValues(t, stageDecode).Observe(d.decode.Seconds())
	m.stageSeconds.WithLabelValues(t, stageRefresh).Observe(d.refresh.Seconds())
	m.stageSeconds.WithLabelValues(t, stageQuarantine).Observe(d.quarantine.Seconds())
	m.stageSeconds.WithLabelValues(t, stagePlan).Observe(d.res.Durations.Plan.Seconds())
	m.stageSeconds.WithLabelValues(t, stageCommit).Observe(d.res.Durations.Commit.Seconds())
	m.version.WithLabelValues(t).Set(float64(d.res.Version))
	if d.schema > 0 {
		m.schemaChanges.WithLabelValues(t).Add(float64(d.schema))
	}
	if d.horizon != nil {
		m.purgeHorizon.WithLabelValues(t).Set(float64(d.horizon.SourceTsMicros) / 1e6)
	}
	m.rowsHeld(t, d.res.Keys, d.res.Tombstones)
	m.logFiles.WithLabelValues(t, "live").Set(float64(d.res.LogFiles))
	m.logFiles.WithLabelValues(t, "removed").Set(float64(d.res.LogRemoved))

	m.mu.Lock()
	defer m.mu.Unlock()
	for tp, r := range b.Ranges {
		m.owner[tp] = t
		m.pos[tp] = r.Next
		m.setLagLocked(tp)
	}
	fresh := m.freshAsOf[t]
	if d.newestMicro > 0 {
		if at := time.UnixMicro(d.newestMicro); at.After(fresh) {
			fresh = at
		}
	}
	// A heartbeat says the source had nothing newer to send up to its
	// time. It proves the table complete to that time only if nothing of
	// the table is left unapplied: no lag on any partition.
	if d.heartbeatMs > 0 && !m.behindLocked(t) {
		if at := time.UnixMilli(d.heartbeatMs); at.After(fresh) {
			fresh = at
		}
	}
	if !fresh.IsZero() {
		m.freshAsOf[t] = fresh
		m.sourceTime.WithLabelValues(t).Set(float64(fresh.UnixMicro()) / 1e6)
	}
}

// registryFailed counts a record of table held for the schema registry.
func (m *Metrics) registryFailed(table string) {
	if m == nil {
		return
	}
	m.registryFails.WithLabelValues(table).Inc()
}

// groupCommitFailed counts a failed group offset commit of table.
func (m *Metrics) groupCommitFailed(table string) {
	if m == nil {
		return
	}
	m.groupCommits.WithLabelValues(table).Inc()
}

// fetchFailed counts a fetch error of table's partitions.
func (m *Metrics) fetchFailed(table, class string) {
	if m == nil {
		return
	}
	m.fetchErrors.WithLabelValues(table, class).Inc()
}

// offsetsSkipped counts offsets of tp that table skipped, deleted by
// retention before they were applied (on_offset_gap: skip).
func (m *Metrics) offsetsSkipped(table string, tp checkpoint.TopicPartition, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.skipped.WithLabelValues(table, tp.Topic, strconv.Itoa(int(tp.Partition))).Add(float64(n))
}

// commitFailed counts a batch whose commit did not land.
func (m *Metrics) commitFailedFor(table string, fenced bool) {
	if m == nil {
		return
	}
	if fenced {
		m.fenced.WithLabelValues(table).Inc()
		return
	}
	m.commitFailed.WithLabelValues(table).Inc()
}

// recordCommit reports a committed batch of table t to the metrics.
func (e *Engine) recordCommit(t *tableRun, buf *tableBuffer, b *Batch, res *Result, refresh, quarantine time.Duration) {
	if e.metrics == nil {
		return
	}
	d := batchDone{table: t.cfg.Name, batch: b, res: res, schema: buf.schema, decode: buf.decode,
		refresh: refresh, quarantine: quarantine, heartbeatMs: buf.heartbeatMs}
	if len(buf.rejected) > 0 {
		d.quarantined = map[string]int{}
		for _, r := range buf.rejected {
			d.quarantined[r.Reason]++
		}
	}
	for _, c := range b.Changes {
		d.newestMicro = max(d.newestMicro, c.SourceTsMicros)
	}
	if snap := t.applier.Snapshot(); snap != nil {
		if h, ok := tombstone.NewGuard(snap).Horizon(); ok {
			d.horizon = &h
		}
	}
	e.metrics.committed(d)
}
