package apply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/cdcapply/cdcapply/tombstone"
)

// Engine runs one pipeline: one consumer group feeding every configured
// table. A single goroutine (Run's) owns every table's buffer and applier;
// rebalance callbacks run only while Run has allowed them (the client is
// built with BlockRebalanceOnPoll), so they touch buffers without locks.
type Engine struct {
	cfg    *Config
	log    *slog.Logger
	clock  func() time.Time
	extra  []kgo.Opt
	tables []*tableRun

	// The buffered changes' blocks, used by the loop's goroutine only
	// (routeTo): changes and their key and sequence bytes.
	routedChanges routedBlock
	changeBytes   byteArena

	routeMu sync.Mutex                           // serializes adding to routes
	routes  atomic.Pointer[map[string]*tableRun] // topic -> table, resolved once per topic; replaced, never changed

	assignMu sync.Mutex // guards assigned
	// groupProtocol is the protocol of the group's last assignment (a
	// string).
	groupProtocol atomic.Value
	// inflow measures the tables' inflow for the table balancer.
	inflow *inflow
	// compactChecked holds the topics whose cleanup.policy an assignment
	// has looked at (warnCompacted), under compactMu.
	compactMu      sync.Mutex
	compactChecked map[string]bool
	assigned       map[string]map[int32]bool // partitions this instance owns
	// everAssigned is set by the first assignment; until then the poll
	// loop says once, after assignWaitLog, why nothing is read.
	everAssigned atomic.Bool

	client *kgo.Client // set by Run
	// kc is client for the Kafka client's own goroutines (adjustOffsets):
	// the group may assign partitions before Run's write of client is
	// visible to them. nil until then: they do without it.
	kc atomic.Pointer[kgo.Client]
	// OnCommit, when set, is called after every table commit (tests,
	// progress display). It runs on Run's goroutine.
	OnCommit func(table string, res *Result)
	// OnBatch, when set, is called after every committed stream batch
	// with its BatchReport (the bench harness). It runs on Run's goroutine.
	OnBatch func(*BatchReport)
	// OnOpened, when set, is called once Run has opened every table (a
	// table's key index is built then: seconds at 10M keys) and created
	// its Kafka client, just before the first poll (the bench harness
	// starts a paced stream then). It runs on Run's goroutine.
	OnOpened func()
	// OnCheckpoint, when set, is called with each log checkpoint's
	// outcome as it ends, on the checkpoint's goroutine (the bench
	// harness). Run returns after the last one.
	OnCheckpoint func(table string, o delta.CheckpointOutcome)

	// beforeApply, when set, runs before each table commit; tests use it
	// to pause an instance into a zombie. It runs on Run's goroutine;
	// applying, when set, runs on the batch's applying goroutine just
	// before Apply (tests hold a batch in flight with it).
	beforeApply func(table string)
	applying    func(table string)
	// wrapStore, when set, wraps each table's storage (tests inject
	// storage faults with it).
	wrapStore func(storage.Storage) storage.Storage
	// watermarkEvery is how often the loop, waiting for a table's batch
	// to land, asks the brokers for the end offsets of the table's
	// partitions (watermarkInterval; tests shorten it).
	watermarkEvery time.Duration
	// checkpointWait bounds how long a shutdown waits for the log
	// checkpoints still being written (checkpointShutdownWait; tests
	// shorten it).
	checkpointWait time.Duration

	// haltMu guards haltedView, the copy of the tables' halts that Halted
	// reads from other goroutines (tableRun.halted is the loop's own).
	// Held alone, for a map update or copy.
	haltMu     sync.Mutex
	haltedView map[string]error
	// repeats paces the log lines of errors that repeat for as long as
	// their cause lasts (a partition the broker refuses, group commits
	// refused): the first, then one a minute with the count.
	repeats repeatLog
	// fenced counts batches dropped because another instance advanced
	// their partitions (read by tests and, later, metrics).
	fenced atomic.Int64
	// batches recycles the buffers fetched batches are decompressed
	// into, whatever their codec; a record is released to it where the
	// engine is done with it (see batchPool).
	batches *batchPool
	// recordSlices gives franz-go the record slices fetched batches are
	// decoded into; Run recycles each record once routed.
	recordSlices recordSlices

	// predecodedUsed counts records routed with predecode's result, and
	// routed the records routed into a table's buffer (tests).
	predecodedUsed atomic.Int64
	routed         atomic.Int64
	// projectedAhead counts the changes routed as predecode projected
	// them (tests).
	projectedAhead atomic.Int64
	// rawKept counts changes routed with their record kept as Raw, and
	// rawRereads the batches read again to keep them (see keepRaw; tests).
	rawKept, rawRereads atomic.Int64

	// predecoded is predecode's result array, kept for the next poll (a
	// new array per poll was a tenth of the bytes the engine allocated).
	// Run clears what a poll used once it is routed, so it is all zero
	// when predecode starts.
	predecoded []predecoded
	// ahead holds each predecode worker's blocks for the changes it
	// projects (the loop's own, routedChanges and changeBytes, are not
	// shared), kept from poll to poll.
	ahead []projectArena

	metrics *Metrics  // nil: no metrics
	ready   readiness // /readyz: assignment and positions

	// registry is the pipeline's one schema registry client (nil: no Avro
	// table); it caches schemas by id for every table's decoder.
	registry debezium.Registry
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// Logger sets the structured logger (default: slog.Default()).
func Logger(l *slog.Logger) EngineOption { return func(e *Engine) { e.log = l } }

// EngineClock replaces time.Now (tests).
func EngineClock(now func() time.Time) EngineOption { return func(e *Engine) { e.clock = now } }

// KafkaOptions adds franz-go client options (tests: dialers, fast timeouts).
func KafkaOptions(opts ...kgo.Opt) EngineOption {
	return func(e *Engine) { e.extra = append(e.extra, opts...) }
}

// tableRun is the per-table state of the engine.
type tableRun struct {
	// tombs watches for deletes sent as Kafka tombstones alone while the
	// table skips tombstones (noteSkippedTombstone).
	tombs      tombstoneWatch
	points     *datafile.FileCache // data files kept open for stored-row reads
	cfg        TableConfig
	pattern    *regexp.Regexp
	store      storage.Storage
	qstore     storage.Storage // the quarantine table's
	applier    *TableApplier
	decoder    *debezium.Decoder
	quarantine *Quarantine
	// ckptMu guards ckpt: the last log checkpoint's outcome not yet
	// reported with a batch (the checkpoint's goroutine sets it).
	ckptMu sync.Mutex
	ckpt   *delta.CheckpointOutcome

	// reopen is set by the assignment callback: the table may have been
	// advanced by another instance, so the applier reloads before use.
	reopen atomic.Bool
	halted error

	// seenIDs are the topic IDs the table's fetches carried (poll loop
	// only): checked against the table's recorded ones (TopicsDomain)
	// when a topic's first appears or changes, and recorded by each batch.
	seenIDs map[string]seenTopicID

	// A registry outage holds the table: its buffer is dropped, its
	// partitions paused, records routed to it ignored until holdUntil,
	// when it is re-seeked to its positions and resumed (see holdTable).
	holdUntil    time.Time
	holdFailures int                // consecutive holds without a commit
	holdPaused   map[string][]int32 // partitions paused by the hold

	// fetchRetries are the partitions whose fetch a broker refused with
	// an error the client does not retry (an authorization taken away):
	// each is paused until its back-off ends, so neither the client nor
	// the loop spins on the refusal.
	fetchRetries map[checkpoint.TopicPartition]*fetchRetry

	// resynced is set when the table was re-seeked to its positions while
	// a poll was being handled: the rest of that poll's records for it
	// were fetched before the seek and are ignored (they come again from
	// the table's positions). Routing them would start a new batch above
	// the position, and committing it would skip the dropped records.
	resynced bool

	// loadOpened is set once Load has opened the applier (Run opens it
	// again: Load's commits are in the table by then).
	loadOpened bool

	buf tableBuffer

	// rawAll makes routing keep every change's record until its batch
	// commits (see keepRaw): set when a change whose record was released
	// turned out late beyond a purge horizon that rose after it was
	// routed, so the batch is read again with its records; cleared by the
	// next flush that finds every late change's record.
	rawAll bool
	// guardSnap and guardOf cache the purge guard of the applier's
	// snapshot guardSnap (see guard).
	guardSnap *delta.Snapshot
	guardOf   tombstone.Guard
	// burst is set when the table's last batch was flushed because it was
	// full (max_records or max_bytes): the stream was ahead of the table,
	// and what is buffered after it is a backlog's tail, flushed as soon
	// as the stream pauses however small it is (see idleFlushes).
	burst bool

	// inflight is the batch being applied on its own goroutine while the
	// loop reads on (nil: none). While it is set the applier belongs to
	// that goroutine: the loop reads the positions and layout it had
	// when the batch started (positions, layout) and settles the batch
	// before anything that would touch the applier.
	inflight *inflight
}

// inflight is one table batch applied off the loop (see startFlush).
type inflight struct {
	done chan struct{} // closed when Apply returned
	buf  tableBuffer   // the batch's buffer, taken out of the table
	b    *Batch

	rowsBefore             int
	refreshed, quarantined time.Duration
	// pos and layout are the applier's before the batch: what routing
	// reads while the batch is applied.
	pos    checkpoint.Positions
	layout *Layout
	guard  tombstone.Guard
	// topicIDs and topicIDsErr are the applier's TopicIDs before the
	// batch, read by the loop as pos is.
	topicIDs    map[string]string
	topicIDsErr error

	// Set by the applying goroutine before done is closed.
	res       *Result
	err       error
	committed time.Time
}

// positions returns the table's Kafka positions as the loop may read
// them: with a batch in flight, the positions before it (every record
// routed meanwhile is past them, and nothing is re-seeked until the batch
// is settled).
func (t *tableRun) positions() checkpoint.Positions {
	if t.inflight != nil {
		return t.inflight.pos
	}
	return t.applier.Positions()
}

// layout returns the table's layout as the loop may read it (layouts are
// immutable; with a batch in flight, the one it started with).
func (t *tableRun) layout() *Layout {
	if t.inflight != nil {
		return t.inflight.layout
	}
	return t.applier.Layout()
}

// guard returns the purge guard of the table as the loop may read it:
// with a batch in flight, the one the batch started with.
func (t *tableRun) guard() tombstone.Guard {
	if t.inflight != nil {
		return t.inflight.guard
	}
	if snap := t.applier.snap; snap != t.guardSnap {
		t.guardSnap, t.guardOf = snap, tombstone.NewGuard(snap)
	}
	return t.guardOf
}

// keepRaw reports whether routing keeps a change's Kafka record (Raw)
// until its batch commits. Raw is read only to quarantine a change the
// flush finds late beyond the purge horizon, and a kept record holds its
// whole decompressed fetch buffer (about 4 KiB a change in the 1M-key
// bench, against the 200-odd bytes of its values, which are copies):
// so a record is kept only when the horizon routing knows would already
// refuse the change. A horizon that rises before the flush (a purge
// committed meanwhile) is caught there: see startFlush.
func (t *tableRun) keepRaw(c *Change) bool {
	return t.rawAll || t.guard().Refuse(c.SourceTsMicros)
}

// tableBuffer is one table's pending batch.
type tableBuffer struct {
	changes  []*Change
	parts    map[checkpoint.TopicPartition]*partBuffer
	rejected []Rejected
	bytes    int64
	since    time.Time // when the first record of the batch arrived

	// For metrics: time spent decoding, the newest heartbeat's ts_ms and
	// schema changes made by the batch (reported when it commits).
	decode      time.Duration
	heartbeatMs int64
	schema      int
	// appended holds each routed record's Kafka timestamp (µs), in the
	// order read; kept only for OnBatch (BatchReport.AppendedMicros).
	appended []int64
}

// partBuffer accounts for one partition's records in the pending batch.
type partBuffer struct {
	rng                        checkpoint.Range
	read, skipped, quarantined int
	applied                    int
}

func (b *tableBuffer) empty() bool { return len(b.parts) == 0 }

func (b *tableBuffer) reset() {
	*b = tableBuffer{parts: map[checkpoint.TopicPartition]*partBuffer{}}
}

// NewEngine builds an engine for a validated configuration.
func NewEngine(cfg *Config, opts ...EngineOption) (*Engine, error) {
	e := &Engine{cfg: cfg, log: slog.Default(), clock: time.Now, assigned: map[string]map[int32]bool{}, watermarkEvery: watermarkInterval,
		checkpointWait: checkpointShutdownWait}
	for _, o := range opts {
		o(e)
	}
	e.inflow = newInflow(e.clock)
	// Records hold their decompressed batches while buffered: per table
	// up to backlog_factor batches being read and one committing, each up
	// to max_bytes, and a batch's buffers are released at its commit. The
	// pool keeps up to two max_bytes (and 256 buffers) for reuse and tracks
	// what records may hold, plus what the client has fetched ahead.
	live, free := int64(128<<20), int64(0)
	for _, t := range cfg.Tables {
		live += int64(t.Flush.BacklogFactor+2) * t.Flush.MaxBytes
		free = max(free, t.Flush.MaxBytes)
	}
	e.batches = newBatchPool(int(min(2*free, 256<<20)), int(min(live, 4<<30)))
	if needsRegistry(cfg) {
		reg, err := newRegistry(cfg.SchemaRegistry)
		if err != nil {
			return nil, err
		}
		e.registry = reg
	}
	for _, tc := range cfg.Tables {
		t, err := e.newTableRun(tc)
		if err != nil {
			return nil, err
		}
		e.tables = append(e.tables, t)
		e.metrics.tableStarted(tc.Name)
	}
	return e, nil
}

func (e *Engine) newTableRun(tc TableConfig) (*tableRun, error) {
	store, err := storage.ForLocation(tc.Location)
	if err != nil {
		return nil, fmt.Errorf("table %s: location: %w", tc.Name, err)
	}
	qstore, err := storage.ForLocation(tc.QuarantineLocation)
	if err != nil {
		return nil, fmt.Errorf("table %s: quarantine_location: %w", tc.Name, err)
	}
	t := &tableRun{cfg: tc, store: store, qstore: qstore}
	if e.wrapStore != nil {
		t.store = e.wrapStore(t.store)
	}
	t.buf.reset()
	if tc.TopicPattern != "" {
		re, err := regexp.Compile("^(?:" + tc.TopicPattern + ")$")
		if err != nil {
			return nil, fmt.Errorf("table %s: topic_pattern: %w", tc.Name, err)
		}
		t.pattern = re
	}
	dopts, err := decoderOptions(tc, e.registry)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", tc.Name, err)
	}
	t.decoder, err = debezium.New(dopts...)
	if err != nil {
		return nil, fmt.Errorf("table %s: build decoder: %w", tc.Name, err)
	}
	// One cache of open data files and one of deletion vectors per
	// table, shared by the layouts it goes through: files do not change
	// with the schema.
	t.points = datafile.NewFileCache(pointFilesOpen)
	vectors := newVectorCache()
	newFiles := func(l *Layout) (RowFiles, error) {
		var fileOpts []datafile.WriteOption
		if MergeMode(tc.WriteMode) == MergeOnRead {
			fileOpts = MergeOnReadFileOptions(l)
		}
		rf, err := NewParquetRowFiles(t.store, l, fileOpts...)
		if err != nil {
			return nil, err
		}
		rf.points, rf.vectors = t.points, vectors
		return rf, nil
	}
	// Log checkpoints are written beside the next batches, off the
	// commit's path: at 10M keys in merge-on-read one held a week's
	// tombstones and took seconds on every tenth commit. One in progress
	// shows as stage checkpoint until its outcome comes.
	done := func(o delta.CheckpointOutcome) { e.checkpointDone(t, o) }
	began := func(int64) { e.metrics.checkpointBegan(tc.Name) }
	t.applier = NewTableApplier(tc.Name, e.cfg.Pipeline.ID, delta.Open(t.store, delta.BackgroundCheckpoints(done), delta.CheckpointStartHandler(began)),
		newFiles, tc.KeyColumns, e.clock)
	t.applier.checkpointDone = done
	t.applier.onStage = func(stage string) { e.metrics.stageBegan(tc.Name, stage) }
	t.applier.SetBuildProgress(e.buildProgress(tc.Name, buildProgressEvery))
	if err := t.applier.SetMergeMode(MergeMode(tc.WriteMode)); err != nil {
		return nil, fmt.Errorf("table %s: write_mode: %w", tc.Name, err)
	}
	if err := t.applier.SetTableProperties(tc.TableProperties); err != nil {
		return nil, fmt.Errorf("table %s: table_properties: %w", tc.Name, err)
	}
	t.quarantine = NewQuarantine(tc.Name, e.cfg.Pipeline.ID, qstore, e.clock)
	return t, nil
}

// conditionalPut is a store that can tell whether it honours
// put-if-absent (storage.S3: older S3-compatible servers ignore
// If-None-Match and answer 200).
type conditionalPut interface {
	CheckConditionalPut(ctx context.Context) error
}

// checkConditionalPut refuses a table, or its quarantine, on a store that
// lets a second put-if-absent replace an object: there two writers, or a
// zombie and its successor, would replace each other's commits. Checked
// once a start, before the table is read.
func checkConditionalPut(ctx context.Context, t *tableRun) error {
	for _, st := range []storage.Storage{t.store, t.qstore} {
		if c, ok := st.(conditionalPut); ok {
			if err := c.CheckConditionalPut(ctx); err != nil {
				return fmt.Errorf("table %s: %w", t.cfg.Name, err)
			}
		}
	}
	return nil
}

func decoderOptions(tc TableConfig, reg debezium.Registry) ([]debezium.Option, error) {
	var opts []debezium.Option
	switch tc.Format {
	case "json", "json-noschema":
		opts = append(opts, debezium.ValueFormat(debezium.FormatJSON), debezium.EnvelopeShape(debezium.EnvelopeDebezium))
	case "flat-json":
		opts = append(opts, debezium.ValueFormat(debezium.FormatJSON), debezium.EnvelopeShape(debezium.EnvelopeFlattened))
	case "avro", "flat-avro":
		// Keys and values both in the Confluent wire format (the
		// AvroConverter, or any converter writing it, on both sides).
		if reg == nil {
			return nil, fmt.Errorf("format %q needs schema_registry", tc.Format)
		}
		env := debezium.EnvelopeDebezium
		if tc.Format == "flat-avro" {
			env = debezium.EnvelopeFlattened
		}
		opts = append(opts, debezium.ValueFormat(debezium.FormatAvro), debezium.EnvelopeShape(env), debezium.SchemaRegistry(reg))
	default:
		return nil, fmt.Errorf("format %q is not supported by the engine yet", tc.Format)
	}
	conn, err := debezium.ParseConnector(tc.Connector)
	if err != nil {
		return nil, err
	}
	opts = append(opts, debezium.SourceConnector(conn))
	if len(tc.KeyColumns) > 0 {
		opts = append(opts, debezium.KeyColumns(tc.KeyColumns...))
	}
	if tc.KafkaTombstones == "delete" {
		opts = append(opts, debezium.TombstoneKeys())
	}
	return opts, nil
}

// typeSchemaless gives a json-noschema table's decoder its column types:
// the table's own schema once it exists, plus the declared columns it does
// not have yet. A declared type that differs from the table's is an error,
// as is a table with neither (nothing could type its records).
func (e *Engine) typeSchemaless(t *tableRun) error {
	if t.cfg.Format != "json-noschema" {
		return nil
	}
	declared, err := t.cfg.DeclaredSchema()
	if err != nil {
		return err
	}
	merged := declared
	if l := t.applier.Layout(); l != nil {
		byName := map[string]delta.StructField{}
		for _, f := range declared.Fields {
			byName[f.Name] = f
		}
		merged = delta.StructType{}
		inTable := map[string]bool{}
		for _, f := range l.Source {
			if d, ok := byName[f.Name]; ok && d.Type.String() != f.Type.String() {
				return fmt.Errorf("table %s: column %s is %s in the table but declared %s under columns", t.cfg.Name, f.Name, f.Type, d.Type)
			}
			merged.Fields = append(merged.Fields, f)
			inTable[f.Name] = true
		}
		for _, f := range declared.Fields {
			if !inTable[f.Name] {
				merged.Fields = append(merged.Fields, f)
			}
		}
	}
	if len(merged.Fields) == 0 {
		return fmt.Errorf("table %s: format json-noschema needs columns: its records carry no types and the table does not exist yet", t.cfg.Name)
	}
	dopts, err := decoderOptions(t.cfg, e.registry)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.cfg.Name, err)
	}
	dec, err := debezium.New(append(dopts, debezium.TableSchema("", merged))...)
	if err != nil {
		return fmt.Errorf("table %s: build decoder: %w", t.cfg.Name, err)
	}
	t.decoder = dec
	return nil
}

// FetchBuffers reports the buffers compressed record batches were
// decompressed into: how many were filled, how many of those were
// released buffers used again, and how many the pool stopped tracking
// before all their records were released (left to the collector).
func (e *Engine) FetchBuffers() (filled, reused, forgotten int64) {
	return e.batches.stats()
}

// RecordSlices reports the record slices franz-go took from the engine's
// pool and how many of them were recycled ones.
func (e *Engine) RecordSlices() (got, reused int64) {
	return e.recordSlices.got.Load(), e.recordSlices.reused.Load()
}

// tableFor routes a topic to its table (nil: not ours).
func (e *Engine) tableFor(topic string) *tableRun {
	// Every record asks, from Run's goroutine and predecode's workers: a
	// read is one map lookup without a lock; a new topic copies the map.
	if m := e.routes.Load(); m != nil {
		if t, ok := (*m)[topic]; ok {
			return t
		}
	}
	e.routeMu.Lock()
	defer e.routeMu.Unlock()
	old := e.routes.Load()
	if old != nil {
		if t, ok := (*old)[topic]; ok {
			return t
		}
	}
	var found *tableRun
	for _, t := range e.tables {
		if t.cfg.Topic == topic || (t.pattern != nil && t.pattern.MatchString(topic)) {
			found = t
			break
		}
	}
	m := make(map[string]*tableRun, 1)
	if old != nil {
		m = maps.Clone(*old)
	}
	m[topic] = found
	e.routes.Store(&m)
	return found
}

// tableBalancer is the group balancer of kafka.assignment: tables; as the
// group's leader it logs each plan.
func (e *Engine) tableBalancer() tableBalancer {
	return tableBalancer{
		tableOf: e.tableName,
		rates:   e.inflow.rates,
		balanced: func(plan map[string][]string) {
			for member, units := range plan {
				e.log.Info("group balanced by table (this process leads the group)", "group", e.cfg.Kafka.Group, "member", member, "given", units)
			}
		},
	}
}

// tableName names the table that reads topic ("" when none does).
func (e *Engine) tableName(topic string) string {
	if t := e.tableFor(topic); t != nil {
		return t.cfg.Name
	}
	return ""
}

// groupSynced is told the protocol of each assignment, and records it
// (cdcapply_group_assignment) when it changes; under kafka.assignment:
// tables it also says so in the log (not at every rebalance): a fall back
// to cooperative-sticky may split tables again.
func (e *Engine) groupSynced(protocol string) {
	if prev, _ := e.groupProtocol.Swap(protocol).(string); prev == protocol {
		return
	}
	e.metrics.groupAssigned(e.cfg.Kafka.Group, e.cfg.Kafka.Assignment, protocol)
	if e.cfg.Kafka.Assignment == AssignPartitions {
		return
	}
	if protocol == groupTableProtocol {
		e.log.Info("the group assigns partitions by table (kafka.assignment: tables)", "group", e.cfg.Kafka.Group)
		return
	}
	e.log.Warn("the group assigns partitions by "+protocol+", not by table: some member does not offer "+groupTableProtocol+
		" (an older cdcapply, or kafka.assignment: partitions), so a table may be split between processes that then write it at once and conflict; cdcapply status names such tables",
		"group", e.cfg.Kafka.Group)
}

// kafkaOptions builds the franz-go client of the pipeline.
func (e *Engine) kafkaOptions() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(e.cfg.Kafka.Brokers...),
		kgo.ConsumerGroup(e.cfg.Kafka.Group),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onRevoked),
		kgo.AdjustFetchOffsetsFn(e.adjustOffsets),
		kgo.WithDecompressor(newFetchDecompressor(e.batches)),
		kgo.WithPools(&e.recordSlices),
	}
	maxBytes, maxPartBytes := e.cfg.Kafka.fetchLimits()
	opts = append(opts, kgo.FetchMaxBytes(maxBytes), kgo.FetchMaxPartitionBytes(maxPartBytes))
	if e.cfg.Kafka.ClientID != "" {
		opts = append(opts, kgo.ClientID(e.cfg.Kafka.ClientID))
	}
	if id := e.cfg.Kafka.InstanceID; id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	if st := e.cfg.Kafka.SessionTimeout; st > 0 {
		opts = append(opts, kgo.SessionTimeout(time.Duration(st)))
	}
	if e.cfg.Kafka.Assignment == AssignPartitions {
		opts = append(opts, kgo.Balancers(syncWatch{kgo.CooperativeStickyBalancer(), e.groupSynced}))
	} else {
		// cooperative-sticky second: the protocol of a group whose members
		// do not all offer the table protocol (an older cdcapply in a
		// rolling upgrade, a process set to partitions).
		opts = append(opts, kgo.Balancers(syncWatch{e.tableBalancer(), e.groupSynced}, syncWatch{kgo.CooperativeStickyBalancer(), e.groupSynced}))
	}
	// A position gone by retention must surface as an error, not a silent
	// jump: the client reports OffsetOutOfRange instead of resetting, and
	// the engine halts the table or, under on_offset_gap: skip, says what
	// it skips and seeks past it (skipGap).
	opts = append(opts, kgo.ConsumeResetOffset(kgo.NoResetOffset()))
	var topics []string
	regex := false
	for _, t := range e.tables {
		if t.pattern != nil {
			regex = true
		}
	}
	for _, t := range e.tables {
		switch {
		case regex && t.pattern != nil:
			topics = append(topics, t.pattern.String())
		case regex:
			topics = append(topics, "^"+regexp.QuoteMeta(t.cfg.Topic)+"$")
		default:
			topics = append(topics, t.cfg.Topic)
		}
	}
	opts = append(opts, kgo.ConsumeTopics(topics...))
	if regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if e.metrics != nil {
		opts = append(opts, e.metrics.kafkaHooks())
	}
	return append(opts, e.extra...)
}

// Run consumes until ctx is done or a fatal error. Tables that fail stop
// alone (halted, their partitions paused); the others go on. On return
// every pending batch has been flushed or dropped, never half-applied.
func (e *Engine) Run(ctx context.Context) error {
	if lim := e.cfg.Pipeline.MemoryLimit; lim > 0 {
		prev := debug.SetMemoryLimit(lim)
		defer debug.SetMemoryLimit(prev)
		e.log.Info("memory limit set", "pipeline", e.cfg.Pipeline.ID, "bytes", lim)
	}
	for _, t := range e.tables {
		// A large table's key index takes seconds to build (10M keys:
		// several), so the start says what it read and how long it took.
		opened := time.Now()
		e.metrics.stageBegan(t.cfg.Name, stageOpen)
		if err := checkConditionalPut(ctx, t); err != nil {
			return err
		}
		if err := t.applier.Open(ctx); err != nil {
			return err
		}
		if snap := t.applier.Snapshot(); snap != nil {
			e.log.Info("table opened, key index built", "table", t.cfg.Name, "version", snap.Version,
				"files", snap.NumFiles(), "keys", t.applier.rows(), "took", time.Since(opened).Round(time.Millisecond))
		}
		if err := e.typeSchemaless(t); err != nil {
			return err
		}
		if err := t.quarantine.Open(ctx); err != nil {
			return err
		}
		e.metrics.stageEnded(t.cfg.Name)
		e.recordResume(ctx, t)
		if t.applier.index != nil {
			e.metrics.rowsHeld(t.cfg.Name, t.applier.index.Len(), t.applier.index.Tombstones())
		}
	}
	defer func() {
		for _, t := range e.tables {
			t.points.Close()
		}
	}()
	cl, err := kgo.NewClient(e.kafkaOptions()...)
	if err != nil {
		return fmt.Errorf("create kafka client: %w", err)
	}
	e.client = cl
	e.kc.Store(cl)
	defer cl.Close()
	if e.OnOpened != nil {
		e.OnOpened()
	}

	// Each poll's bound is worked out before the rebalance callbacks may
	// run (AllowRebalance, below): they drop revoked partitions' records
	// from the buffers it reads.
	wait := e.pollWait()
	var runErr error // what stops the loop other than ctx
	joined, waitLogged := e.clock(), false
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, wait)
		for _, t := range e.tables {
			// A batch that commits while the loop waits for records
			// ends the wait: its offsets, metrics and hooks go out now.
			if f := t.inflight; f != nil {
				go func() {
					select {
					case <-f.done:
						cancel()
					case <-pctx.Done():
					}
				}()
			}
		}
		fetches := cl.PollRecords(pctx, 10_000)
		// The stream paused: the poll waited out idleFlushWait and found
		// nothing (not a wait cut short by a commit).
		idle := wait >= idleFlushWait && errors.Is(pctx.Err(), context.DeadlineExceeded) && fetches.NumRecords() == 0
		cancel()
		for _, t := range e.tables {
			t.resynced = false
		}
		if fetches.IsClientClosed() {
			break
		}
		e.settleDone(ctx)
		e.metrics.fetched(fetches)
		e.inflow.fetched(fetches, e.tableName)
		e.checkTopicIDs(fetches)
		var stop error
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if gs := (*kgo.ErrGroupSession)(nil); errors.As(err, &gs) {
				if err := e.groupError(err); stop == nil {
					stop = err
				}
				return
			}
			e.fetchError(topic, partition, err)
		})
		if stop != nil {
			// Fenced: the partitions are another member's now (the
			// client has called onLost, which dropped their buffered
			// records); this poll's records are not routed.
			e.log.Error("stopping", "pipeline", e.cfg.Pipeline.ID, "err", stop)
			runErr = stop
			break
		}
		if !waitLogged && !e.everAssigned.Load() && e.clock().Sub(joined) >= assignWaitLog {
			waitLogged = true
			e.logAssignWait()
		}
		recs := fetches.Records()
		pre := e.predecode(ctx, recs)
		for i, r := range recs {
			p := predecodedAt(pre, i)
			// A poll can hold more records than a batch may: flush as
			// soon as a table reaches max_records, mid-poll (the
			// partitions cannot move while the poll is being handled).
			t := e.route(ctx, r, p)
			// Routed: nothing refers to the record any more (a kept one
			// is a copy), so its slot goes back to franz-go's pool.
			r.Recycle()
			if t != nil && t.halted == nil && len(t.buf.changes) >= t.cfg.Flush.MaxRecords && !t.mayGrow() {
				e.startFlush(ctx, t)
			}
		}
		// Routed: the array is kept for the next poll but must not keep
		// this one's records and values alive meanwhile (small polls do
		// not predecode, so the next large one may be far off).
		clear(pre)
		e.settleDone(ctx)
		now := e.clock()
		for _, t := range e.tables {
			if t.halted == nil && (e.due(t, now) || idle && t.idleFlushes()) && !t.mayGrow() {
				e.startFlush(ctx, t)
			}
			if !t.holdUntil.IsZero() && !now.Before(t.holdUntil) {
				e.releaseTable(t)
			}
			e.resumeFetches(t, now)
		}
		wait = e.pollWait()
		cl.AllowRebalance()
	}
	// Shut down: settle the batches in flight, then flush what is
	// buffered while we still own the partitions.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range e.tables {
		if !e.settle(fctx, t) {
			continue
		}
		if t.halted == nil && !t.buf.empty() {
			e.flush(fctx, t)
		}
	}
	// A log checkpoint still being written is finished, its outcome
	// reported: stopping it half-way would only waste it. One that does
	// not finish in checkpointWait (storage that stopped answering) is
	// left: the commits stand, and a checkpoint is written whole or not
	// at all, so readers replay the log from the previous one.
	cctx, ccancel := context.WithTimeout(context.Background(), e.checkpointWait)
	defer ccancel()
	for _, t := range e.tables {
		if v, finished := t.applier.table.WaitCheckpointsUntil(cctx); !finished {
			e.log.Warn("log checkpoint still being written at shutdown; left unfinished (the commits stand, readers replay the log from the previous checkpoint)",
				"table", t.cfg.Name, "location", t.cfg.Location, "version", v, "waited", e.checkpointWait)
		}
	}
	cl.AllowRebalance()
	return runErr
}

// checkpointShutdownWait bounds a shutdown's wait for the log checkpoints
// still being written, after the 30 s its batches may take: within the
// 60 s stop timeouts of deploy/ (systemd, Kubernetes).
const checkpointShutdownWait = 20 * time.Second

// A batch of at least idleFlushRecords changes is flushed when the stream
// pauses, a poll finding nothing for idleFlushWait, instead of waiting out
// max_latency: the end of a burst (a backlog read to its end, a bulk
// update) commits at once. Smaller batches, a trickle, still gather for
// max_latency, so idle flushes add at most one commit per
// idleFlushRecords changes.
const idleFlushWait = 50 * time.Millisecond

func idleFlushRecords(f FlushPolicy) int { return max(1000, f.MaxRecords/10) }

// idleFlushes reports whether t's batch is flushed when the stream pauses:
// it holds idleFlushRecords changes, or it is the tail of a backlog whose
// previous batch was flushed full (burst). The tail of a backlog read to
// its end is committed at once instead of waiting out max_latency; this
// adds at most one commit per backlog, while a trickle, whose batches are
// flushed by max_latency, still gathers.
func (t *tableRun) idleFlushes() bool {
	return !t.buf.empty() && (t.burst || len(t.buf.changes) >= idleFlushRecords(t.cfg.Flush))
}

// pollWait bounds a poll so that latency and idle flushes happen on time.
func (e *Engine) pollWait() time.Duration {
	wait := time.Second
	now := e.clock()
	for _, t := range e.tables {
		if !t.holdUntil.IsZero() && t.holdUntil.Sub(now) < wait {
			wait = t.holdUntil.Sub(now)
		}
		for _, r := range t.fetchRetries {
			if r.paused {
				wait = min(wait, r.until.Sub(now))
			}
		}
		if t.buf.empty() || t.committing() {
			// While a commit runs the batch cannot flush anyway; the
			// commit landing ends the poll.
			continue
		}
		left := time.Duration(t.cfg.Flush.MaxLatency) - now.Sub(t.buf.since)
		if t.idleFlushes() {
			left = min(left, idleFlushWait)
		}
		if left < wait {
			wait = left
		}
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

// committing reports whether t's previous batch is still being applied.
func (t *tableRun) committing() bool {
	f := t.inflight
	if f == nil {
		return false
	}
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// mayGrow reports whether t's batch, due, keeps reading instead of
// waiting for the previous batch's commit: the batch could not start
// before that commit lands anyway, and the records read meanwhile join
// it, so a backlog is applied in fewer, larger batches instead of the
// loop idling (a batch's stored-row reads touch most of a merge-on-read
// table's pages however few rows it holds). flush.backlog_factor times
// max_records and max_bytes bound it.
func (t *tableRun) mayGrow() bool {
	if !t.committing() {
		return false
	}
	f := t.cfg.Flush
	k := max(f.BacklogFactor, 1)
	return len(t.buf.changes) < k*f.MaxRecords && t.buf.bytes < int64(k)*f.MaxBytes
}

func (e *Engine) due(t *tableRun, now time.Time) bool {
	if t.buf.empty() {
		return false
	}
	f := t.cfg.Flush
	return len(t.buf.changes) >= f.MaxRecords || t.buf.bytes >= f.MaxBytes || now.Sub(t.buf.since) >= time.Duration(f.MaxLatency)
}

// assignWaitLog is how long after the Kafka client starts the engine says,
// once, that the group has assigned it nothing yet.
const assignWaitLog = 10 * time.Second

// logAssignWait says why a process may read nothing for a while after a
// start: the usual cause is a restart after a crash, whose dead member
// the group keeps until its session lapses.
func (e *Engine) logAssignWait() {
	k := e.cfg.Kafka
	st := time.Duration(k.SessionTimeout)
	if st == 0 {
		st = DefaultSessionTimeout
	}
	if missing, err := e.missingTopics(); err != nil {
		e.log.Warn("no partitions assigned yet, and the tables' topics could not be looked up", "group", k.Group, "waited", assignWaitLog, "err", err)
	} else if len(missing) > 0 {
		e.log.Warn("no partitions assigned yet: tables' topics are not in the cluster (a misspelt topic, or one Debezium has not created yet: it is read once it exists)",
			"group", k.Group, "missing", missing, "waited", assignWaitLog)
		return
	}
	if k.InstanceID != "" {
		e.log.Warn("no partitions assigned yet: the group has not assigned this static member any (other members may own them all, or the group is rebalancing)",
			"group", k.Group, "instance_id", k.InstanceID, "waited", assignWaitLog)
		return
	}
	e.log.Warn("no partitions assigned yet: if a process of this group crashed, the group waits for its session to time out before it assigns its partitions; kafka.instance_id lets a restarted process take them back at once",
		"group", k.Group, "session_timeout", st, "waited", assignWaitLog)
}

// missingTopics returns the tables' topics (not patterns) that the
// cluster does not have, each as "table: topic", asking the brokers once
// (no topic is created by asking).
func (e *Engine) missingTopics() ([]string, error) {
	var topics []string
	for _, t := range e.tables {
		if t.pattern == nil {
			topics = append(topics, t.cfg.Topic)
		}
	}
	if len(topics) == 0 || e.client == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	td, err := kadm.NewClient(e.client).ListTopics(ctx, topics...)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range e.tables {
		if t.pattern != nil {
			continue
		}
		if d, ok := td[t.cfg.Topic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			out = append(out, t.cfg.Name+": "+t.cfg.Topic)
		}
	}
	return out, nil
}

// groupError handles an error of the consumer group's management, which
// the client hands to a poll without a topic, and returns the error that
// stops Run, if any. The client rejoins by itself after a back-off; the
// error is logged once a minute with the group. A static member fenced by
// another process with the same kafka.instance_id must not rejoin: the
// two would take the group slot from each other in turn, so Run stops.
func (e *Engine) groupError(err error) error {
	k := e.cfg.Kafka
	if errors.Is(err, kerr.FencedInstanceID) {
		return fmt.Errorf("consumer group %s: another process joined with the same kafka.instance_id %q and fenced this one (an instance_id must be unique per process): %w", k.Group, k.InstanceID, err)
	}
	if log, repeat := e.repeats.due(groupErrKey(fetchErrorClass(err)), e.clock()); log {
		e.log.Warn("consumer group error; the Kafka client rejoins after a back-off", append([]any{"group", k.Group, "instance_id", k.InstanceID, "err", err}, repeat...)...)
	}
	return nil
}

// groupErrKey is the class of a consumer group error, for repeatLog.
type groupErrKey string

// fetchError handles a partition's fetch error: a position deleted by
// retention halts the table loudly; anything else is logged (franz-go
// retries retriable errors itself).
func (e *Engine) fetchError(topic string, partition int32, err error) {
	t := e.tableFor(topic)
	if t == nil {
		e.log.Error("fetch error", "topic", topic, "partition", partition, "err", err)
		return
	}
	if errors.Is(err, kerr.OffsetOutOfRange) {
		tp := checkpoint.TopicPartition{Topic: topic, Partition: partition}
		b := e.logBounds(tp) // asked once, for the skip and the halt's words
		if e.cfg.Kafka.OnOffsetGap == "skip" && e.skipGap(t, tp, b, err) {
			return
		}
		e.halt(t, "offset_gap", e.offsetGap(t, tp, b, err))
		return
	}
	if loss, ok := errors.AsType[*kgo.ErrDataLoss](err); ok {
		e.dataLoss(t, checkpoint.TopicPartition{Topic: topic, Partition: partition}, loss)
		return
	}
	if errors.Is(err, kerr.UnknownTopicID) {
		// The client reports it only after several refusals in a row (a
		// new topic's first moments are retried): the topic this process
		// reads is gone, and the client will not read its name again.
		was := t.seenIDs[topic].s
		if was == "" {
			recorded, _ := t.recordedTopicIDs()
			was = recorded[topic]
		}
		e.halt(t, haltTopicRecreated, &TopicRecreatedError{Table: t.cfg.Name, Topic: topic,
			Recorded: was, Next: nextOffsetsOf(t.positions(), topic)})
		return
	}
	class := fetchErrorClass(err)
	e.metrics.fetchFailed(t.cfg.Name, class)
	now := e.clock()
	if class != "client" {
		// A Kafka error the client returned rather than retried: it
		// would fetch the partition again at once, and be refused again.
		e.backOffFetch(t, checkpoint.TopicPartition{Topic: topic, Partition: partition}, now)
	}
	if log, repeat := e.repeats.due(fetchErrKey{topic, partition, class}, now); log {
		e.log.Warn("fetch error", append([]any{"table", t.cfg.Name, "topic", topic, "partition", partition, "err", err}, repeat...)...)
	}
}

// offsetGap explains a partition's OFFSET_OUT_OF_RANGE from the log's
// bounds b, asked of the brokers: offsets deleted by retention before they
// were applied (which, and how many), or a log that ends before the
// table's position (truncated by an unclean leader election, or a topic
// recreated on brokers that send no topic IDs).
func (e *Engine) offsetGap(t *tableRun, tp checkpoint.TopicPartition, b logRange, err error) error {
	pos := t.positions()
	next, _ := pos.Next(tp)
	start, end, lerr := b.start, b.end, b.err
	switch {
	case lerr != nil:
		return fmt.Errorf("table %s: topic %s partition %d: the next offset to apply (%d) is no longer in Kafka (deleted by retention, or past the end of a truncated log; its bounds could not be read: %v); changes would be lost: %w",
			t.cfg.Name, tp.Topic, tp.Partition, next, lerr, err)
	case next > end:
		return fmt.Errorf("table %s: topic %s partition %d: the log ends at offset %d, before the next offset to apply (%d): it was truncated (an unclean leader election) or the topic recreated, %s: %w",
			t.cfg.Name, tp.Topic, tp.Partition, end, next, truncatedLoss(end, next), err)
	}
	if gerr := checkpoint.CheckGap(t.cfg.Name, pos, tp, start); gerr != nil {
		return fmt.Errorf("%w; %d records lost unless the source is snapshotted again: %w", gerr, start-next, err)
	}
	return fmt.Errorf("table %s: topic %s partition %d: the next offset to apply (%d) was refused although the log holds %d..%d: %w",
		t.cfg.Name, tp.Topic, tp.Partition, next, start, end, err)
}

// dataLoss handles the client's report that tp's log was truncated below
// offsets it had read (an unclean leader election: the new leader's log
// for the epoch read at ends at loss.ResetTo, where the client moved).
// The records read past it came from a log that no longer exists. When
// the table applied none of them, its buffer is dropped and its
// partitions read again from its positions: nothing is lost. Otherwise
// the table holds changes the log no longer has, and the records the log
// gets at those offsets would be taken for applied ones and skipped: the
// table halts under either on_offset_gap setting.
func (e *Engine) dataLoss(t *tableRun, tp checkpoint.TopicPartition, loss *kgo.ErrDataLoss) {
	ctx := context.Background()
	if !e.settle(ctx, t) {
		return // the batch in flight failed: resynced from the positions
	}
	next, _ := t.applier.Positions().Next(tp)
	if next <= loss.ResetTo {
		e.log.Warn("the partition's log was truncated below offsets read but not yet applied (an unclean leader election); reading again from the table's position", "table", t.cfg.Name, "topic", tp.Topic, "partition", tp.Partition,
			"read_to", loss.ConsumedTo, "log_end", loss.ResetTo, "position", next)
		e.rewind(t)
		return
	}
	e.halt(t, "offset_gap", fmt.Errorf("table %s: topic %s partition %d: the log was truncated (an unclean leader election) to end at offset %d, below the table's position (%d): the table holds changes the log no longer has, %s: %w",
		t.cfg.Name, tp.Topic, tp.Partition, loss.ResetTo, next, truncatedLoss(loss.ResetTo, next), loss))
}

// truncatedLoss says what a log ending at end, before the table's next
// offset, costs and what to do (the halt's words for either way the
// engine learns of it).
func truncatedLoss(end, next int64) string {
	return fmt.Sprintf("and the records it gets at offsets %d..%d would be skipped (under either on_offset_gap setting); restore the table to a version whose position is at most %d (cdcapply restore) to read them, or rebuild it",
		end, next-1, end)
}

// skipGap handles, under on_offset_gap: skip, a partition refused with
// OFFSET_OUT_OF_RANGE while being read: offsets retention deleted before
// the engine read them are logged, counted and skipped (the partition is
// sought to the log's start). It returns false when the log's bounds b
// end before the offset to read (truncated, or a topic recreated on
// brokers that send no topic IDs): its next records would take offsets
// the table has read, so the table halts under either setting. A refusal the log's
// bounds do not explain, or bounds that cannot be read, backs off and
// asks again at the next refusal.
func (e *Engine) skipGap(t *tableRun, tp checkpoint.TopicPartition, b logRange, err error) bool {
	next := t.readNext(tp)
	start, end, lerr := b.start, b.end, b.err
	switch {
	case lerr == nil && next > end:
		return false
	case lerr == nil && next < start:
		e.log.Warn("skipping offsets deleted by retention before they were applied (on_offset_gap: skip)", "table", t.cfg.Name, "topic", tp.Topic, "partition", tp.Partition,
			"from", next, "to", start-1, "skipped", start-next)
		e.metrics.offsetsSkipped(t.cfg.Name, tp, start-next)
		e.client.SetOffsets(map[string]map[int32]kgo.EpochOffset{tp.Topic: {tp.Partition: {Epoch: -1, Offset: start}}})
		return true
	}
	now := e.clock()
	e.metrics.fetchFailed(t.cfg.Name, fetchErrorClass(err))
	e.backOffFetch(t, tp, now)
	if log, repeat := e.repeats.due(fetchErrKey{tp.Topic, tp.Partition, "skip_gap"}, now); log {
		why := fmt.Sprintf("the log holds %d..%d", start, end)
		if lerr != nil {
			why = "the log's bounds could not be read: " + lerr.Error()
		}
		e.log.Warn("offset out of range under on_offset_gap: skip, not explained by the log's bounds; asking again after a back-off", append([]any{"table", t.cfg.Name, "topic", tp.Topic, "partition", tp.Partition,
			"offset", next, "bounds", why, "err", err}, repeat...)...)
	}
	return true
}

// readNext is the next offset of tp the loop reads: past the records
// buffered, else the table's position (a batch in flight included).
func (t *tableRun) readNext(tp checkpoint.TopicPartition) int64 {
	if pb := t.buf.parts[tp]; pb != nil {
		return pb.rng.Next
	}
	next, _ := t.positions().Next(tp)
	return next
}

// logRange is a partition's log bounds as the brokers gave them: its
// start offset and end offset (high watermark), or why they could not.
type logRange struct {
	start, end int64
	err        error
}

// logBounds asks the brokers for tp's log start offset and end offset
// (high watermark), within 5 s.
func (e *Engine) logBounds(tp checkpoint.TopicPartition) logRange {
	if e.client == nil {
		return logRange{err: errors.New("no Kafka client")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(e.client)
	starts, err := adm.ListStartOffsets(ctx, tp.Topic)
	if err != nil {
		return logRange{err: err}
	}
	ends, err := adm.ListEndOffsets(ctx, tp.Topic)
	if err != nil {
		return logRange{err: err}
	}
	s, ok1 := starts.Lookup(tp.Topic, tp.Partition)
	n, ok2 := ends.Lookup(tp.Topic, tp.Partition)
	switch {
	case !ok1 || !ok2:
		return logRange{err: fmt.Errorf("the brokers did not list partition %s", tp)}
	case s.Err != nil:
		return logRange{err: s.Err}
	case n.Err != nil:
		return logRange{err: n.Err}
	}
	return logRange{start: s.Offset, end: n.Offset}
}

// fetchRetry is a partition's fetch back-off: refusals in a row (none for
// fetchRetryForget resets the count), the last one, and whether it is
// paused until until.
type fetchRetry struct {
	failures    int
	last, until time.Time
	paused      bool
}

// fetchRetryForget is how long after its last refusal a partition's
// back-off starts again from retryBackoffMin.
const fetchRetryForget = 2 * retryBackoffMax

// backOffFetch pauses fetching tp, refused by a broker, until its back-off
// ends (resumeFetches). A paused partition's buffered data is dropped
// without moving its position, so nothing is skipped.
func (e *Engine) backOffFetch(t *tableRun, tp checkpoint.TopicPartition, now time.Time) {
	if e.client == nil {
		return
	}
	if t.fetchRetries == nil {
		t.fetchRetries = map[checkpoint.TopicPartition]*fetchRetry{}
	}
	r := t.fetchRetries[tp]
	if r == nil || now.Sub(r.last) > fetchRetryForget {
		r = &fetchRetry{}
		t.fetchRetries[tp] = r
	}
	r.failures++
	r.last, r.until = now, now.Add(retryBackoff(r.failures))
	if !r.paused {
		e.client.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
		r.paused = true
	}
}

// resumeFetches resumes the partitions of t whose fetch back-off ended (a
// halted table's stay paused; a held table's resume with its release),
// and forgets those not refused for fetchRetryForget.
func (e *Engine) resumeFetches(t *tableRun, now time.Time) {
	for tp, r := range t.fetchRetries {
		switch {
		case r.paused && !now.Before(r.until):
			r.paused = false
			if t.halted == nil && t.holdUntil.IsZero() {
				e.client.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
			}
		case !r.paused && now.Sub(r.last) > fetchRetryForget:
			delete(t.fetchRetries, tp)
		}
	}
}

// repeatLogEvery is how often an error that repeats is logged (each one
// is counted in its metric).
const repeatLogEvery = time.Minute

// repeatLog paces log lines by key: due says to log a key's first
// occurrence, then at most one every repeatLogEvery, with how many came
// since. Safe for concurrent use (group commits report on the client's
// goroutines).
type repeatLog struct {
	mu   sync.Mutex
	last map[any]*repeated
}

type repeated struct {
	logged time.Time
	since  int
}

// due counts an occurrence of k at now and reports whether to log it;
// past the first, the attributes to add: how many came since the last
// line ("repeated") and over how long ("in").
func (l *repeatLog) due(k any, now time.Time) (bool, []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.last[k]
	if r == nil {
		if l.last == nil {
			l.last = map[any]*repeated{}
		}
		r = &repeated{}
		l.last[k] = r
	}
	r.since++
	if !r.logged.IsZero() && now.Sub(r.logged) < repeatLogEvery {
		return false, nil
	}
	var attrs []any
	if !r.logged.IsZero() {
		attrs = []any{"repeated", r.since, "in", now.Sub(r.logged).Round(time.Second)}
	}
	r.logged, r.since = now, 0
	return true, attrs
}

// fetchErrKey is a partition and the class of its fetch error.
type fetchErrKey struct {
	topic     string
	partition int32
	class     string
}

// groupCommitKey is a table whose group commits fail.
type groupCommitKey struct{ table string }

// fetchErrorClass is a fetch error's label: the Kafka error code's name
// (TOPIC_AUTHORIZATION_FAILED, UNSUPPORTED_COMPRESSION_TYPE, ...), or
// "client" for an error of the client's own.
func fetchErrorClass(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return "client"
}

// halt stops one table: its buffer is dropped and its partitions paused.
// reason is a short class for the halted metric's label (the error itself
// has unbounded text).
func (e *Engine) halt(t *tableRun, reason string, err error) {
	if t.halted != nil {
		return
	}
	// A batch in flight holds records before the one that halts the
	// table: let it land (or fail: then a restart reads it again).
	e.finish(context.Background(), t, false)
	t.halted = err
	e.haltMu.Lock()
	if e.haltedView == nil {
		e.haltedView = map[string]error{}
	}
	e.haltedView[t.cfg.Name] = err
	e.haltMu.Unlock()
	t.buf.reset()
	e.metrics.tableHalted(t.cfg.Name, reason)
	e.log.Error("table halted", "table", t.cfg.Name, "reason", reason, "err", err)
	e.recordHalt(t, reason, err)
	if e.client == nil {
		return
	}
	e.client.PauseFetchPartitions(e.assignedOf(t))
}

// Halted returns each halted table's reason.
// Safe to call while the engine runs.
func (e *Engine) Halted() map[string]error {
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	out := make(map[string]error, len(e.haltedView))
	for name, err := range e.haltedView {
		out[name] = err
	}
	return out
}

// predecoded is a record of a poll decoded ahead of routing.
type predecoded struct {
	dec  *debezium.Decoder // nil: not decoded ahead
	rec  debezium.Record
	ch   debezium.Change
	err  error
	took time.Duration
	// rc, when not nil, is the change already projected onto layout
	// (without Raw: routing keeps the record or releases it), which
	// routing takes as it is while the table still has that layout.
	rc     *Change
	layout *Layout
}

// projectArena is where one predecode worker projects changes.
type projectArena struct {
	changes routedBlock
	bytes   byteArena
}

// predecodeMin is the fewest records of a poll worth decoding on more
// than one goroutine.
const predecodeMin = 512

// predecode decodes a poll's records on up to GOMAXPROCS goroutines
// before they are routed one by one, so decoding uses both cores (it is
// the engine's largest share of work that does not touch table state).
// Decoders are safe for concurrent use; the table state read here (route,
// halt, decoder) is only changed by Run's goroutine, which waits. route
// uses a result only when its table still has the decoder that made it
// (a reopen may replace it); otherwise it decodes again. It returns nil
// for a small poll or one core.
func (e *Engine) predecode(ctx context.Context, recs []*kgo.Record) []predecoded {
	workers := min(runtime.GOMAXPROCS(0), len(recs)/predecodeMin)
	if workers < 2 {
		return nil
	}
	if cap(e.predecoded) < len(recs) {
		e.predecoded = make([]predecoded, len(recs))
	}
	out := e.predecoded[:len(recs)]
	if len(e.ahead) < workers {
		e.ahead = make([]projectArena, workers)
	}
	const chunk = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		arena := &e.ahead[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(chunk)) - chunk
				if from >= len(recs) {
					return
				}
				// A chunk is timed as a whole (a clock read per record
				// cost as much as 3% of the engine's CPU) and its time
				// shared among the records it decoded.
				started := time.Now()
				decoded := 0
				var topic string
				var t *tableRun
				for i := from; i < min(from+chunk, len(recs)); i++ {
					r := recs[i]
					if t == nil || r.Topic != topic {
						topic, t = r.Topic, e.tableFor(r.Topic)
					}
					if t == nil || t.halted != nil || !t.holdUntil.IsZero() {
						continue
					}
					p := &out[i]
					p.rc, p.layout = nil, nil // Run clears the array; a slot never keeps another poll's change
					p.dec, p.rec = t.decoder, kafkaRecord(r)
					p.ch, p.err = p.dec.Decode(ctx, &p.rec)
					if p.err == nil {
						p.projectAhead(t.layout(), arena)
					}
					decoded++
				}
				if decoded > 0 {
					share := time.Since(started) / time.Duration(decoded)
					for i := from; i < min(from+chunk, len(recs)); i++ {
						if out[i].dec != nil {
							out[i].took = share
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// predecodedAt is record i's slot of predecode's result (nil: the poll
// was not decoded ahead).
func predecodedAt(pre []predecoded, i int) *predecoded {
	if pre == nil {
		return nil
	}
	return &pre[i]
}

// projectAhead projects a decoded row change onto l while its values
// are in this core's cache, when routing would take it as it is: l
// exists and has every column of the image, so ensureLayout has nothing
// to do. Anything else (no layout yet, new columns, a change that cannot
// be projected, not a row change) is left to routeTo, which reports it.
func (p *predecoded) projectAhead(l *Layout, arena *projectArena) {
	ch := &p.ch
	if l == nil || ch.Class != debezium.ClassChange || ch.Op == debezium.OpTruncate {
		return
	}
	img := ch.After
	if !img.Present() {
		img = ch.Before
	}
	if !img.Present() || len(l.Missing(img)) > 0 {
		return
	}
	rc := arena.changes.next()
	if l.projectInto(ch, rc, &arena.bytes) != nil {
		*rc = Change{} // dropped: routeTo projects and reports it
		return
	}
	p.rc, p.layout = rc, l // routeTo keeps the record as Raw or releases it
}

// kafkaRecord is r as the decoder takes it.
func kafkaRecord(r *kgo.Record) debezium.Record {
	rec := debezium.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, debezium.Header{Key: h.Key, Value: h.Value})
	}
	return rec
}

// route decodes one record into its table's pending batch (pre, when not
// nil, is the record decoded ahead by predecode) and returns the table
// (nil: the topic is not ours).
func (e *Engine) route(ctx context.Context, r *kgo.Record, pre *predecoded) *tableRun {
	t := e.tableFor(r.Topic)
	e.routeTo(ctx, t, r, pre)
	return t
}

// routeTo is route for a record whose table (nil: none) is known.
func (e *Engine) routeTo(ctx context.Context, t *tableRun, r *kgo.Record, pre *predecoded) {
	if t == nil || t.halted != nil || !t.holdUntil.IsZero() {
		return // held: re-read from the table's positions on release
	}
	if t.resynced {
		return // re-seeked during this poll: read again from the positions
	}
	if t.reopen.Swap(false) {
		if !e.settle(ctx, t) {
			return // resynced, which reopened the table
		}
		if err := e.reload(ctx, t); err != nil {
			e.halt(t, "open", err)
			return
		}
		if err := e.typeSchemaless(t); err != nil {
			e.halt(t, "schema", err)
			return
		}
	}
	tp := checkpoint.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	if t.positions().Applied(tp, r.Offset) {
		// Fetched before a re-seek: already in the table and accounted
		// for by the commit that applied it.
		e.batches.releaseRecord(r)
		return
	}
	pb := t.buf.parts[tp]
	if pb == nil {
		pb = &partBuffer{rng: checkpoint.Range{From: r.Offset}}
		t.buf.parts[tp] = pb
		if len(t.buf.parts) == 1 {
			t.buf.since = e.clock()
		}
	}
	pb.rng.Next = r.Offset + 1
	pb.read++
	e.routed.Add(1)
	if e.OnBatch != nil {
		t.buf.appended = append(t.buf.appended, r.Timestamp.UnixMicro())
	}
	t.buf.bytes += int64(len(r.Key) + len(r.Value))

	if pre != nil && pre.rc != nil && pre.dec == t.decoder && pre.layout == t.layout() {
		// A row change decoded and projected ahead onto the table's
		// current layout, which has all its columns (ensureLayout would
		// do nothing).
		t.buf.decode += pre.took
		e.predecodedUsed.Add(1)
		e.projectedAhead.Add(1)
		e.noteOldKey(t, pre.rc, &pre.ch, &pre.rec)
		e.keepOrRelease(t, r, pre.rc, &pre.rec)
		t.buf.changes = append(t.buf.changes, pre.rc)
		t.tombs.deletes = t.tombs.deletes || pre.rc.Delete
		return
	}
	var rec debezium.Record
	var ch debezium.Change
	var err error
	if pre != nil && pre.dec != nil && pre.dec == t.decoder {
		rec, ch, err = pre.rec, pre.ch, pre.err
		t.buf.decode += pre.took
		e.predecodedUsed.Add(1)
	} else {
		decodeStart := time.Now()
		rec = kafkaRecord(r)
		ch, err = t.decoder.Decode(ctx, &rec)
		t.buf.decode += time.Since(decodeStart)
	}
	if err != nil {
		var rej *debezium.Rejection
		if errors.As(err, &rej) && (rej.Reason == debezium.ReasonUnknownColumn || rej.Reason == debezium.ReasonNoTableSchema) && t.cfg.Format == "json-noschema" {
			// A column nobody declared: every later record would carry it
			// too. Stop loudly instead of quarantining the stream; once it
			// is declared in columns, a restart resumes from the positions.
			e.halt(t, "schema", fmt.Errorf("table %s: topic %s partition %d offset %d: %w (declare it under the table's columns)", t.cfg.Name, r.Topic, r.Partition, r.Offset, err))
			return
		}
		if !errors.As(err, &rej) || rej.Retryable() {
			// Not the record's fault (the schema registry could not be
			// asked): never quarantine or skip it. Apply nothing of this
			// table, hold it and retry from its positions after a back-off.
			e.holdTable(ctx, t, r, err)
			return
		}
		e.reject(t, pb, &rec, string(rej.Reason), rej.Error())
		return
	}
	switch ch.Class {
	case debezium.ClassChange:
	case debezium.ClassHeartbeat:
		pb.skipped++
		t.buf.heartbeatMs = max(t.buf.heartbeatMs, ch.TsMs)
		e.batches.releaseRecord(r)
		return
	case debezium.ClassKafkaTombstone:
		if t.cfg.KafkaTombstones != "delete" || len(ch.Key.Values) == 0 || t.layout() == nil {
			pb.skipped++ // carried by its delete event; or keyless, or no table yet to delete from
			e.noteSkippedTombstone(t, r)
			e.batches.releaseRecord(r)
			return
		}
	default: // a schema change event, a transaction marker, a message
		pb.skipped++
		e.batches.releaseRecord(r)
		return
	}
	// A tombstone here is a delete (kafka_tombstones: delete): it has no
	// image to evolve the layout with; projectInto takes its key.
	tomb := ch.Class == debezium.ClassKafkaTombstone
	if ch.Op == debezium.OpTruncate {
		e.truncate(ctx, t, tp, pb, r, &ch)
		return
	}
	if !tomb {
		if err := e.ensureLayout(ctx, t, &ch); err != nil {
			if errors.Is(err, errResynced) {
				return
			}
			var pe *ProjectError
			if errors.As(err, &pe) {
				e.reject(t, pb, &rec, pe.Reason, pe.Error())
				return
			}
			e.halt(t, "schema", err)
			return
		}
	}
	rc := e.routedChanges.next()
	if err := t.layout().projectInto(&ch, rc, &e.changeBytes); err != nil {
		var pe *ProjectError
		if errors.As(err, &pe) {
			e.reject(t, pb, &rec, pe.Reason, fmt.Sprintf("%s: %s", ch.Pos, pe.Detail))
			return
		}
		e.halt(t, "schema", err)
		return
	}
	e.noteOldKey(t, rc, &ch, &rec)
	e.keepOrRelease(t, r, rc, &rec)
	t.buf.changes = append(t.buf.changes, rc)
	t.tombs.deletes = t.tombs.deletes || rc.Delete
}

// tombstoneWatch counts the Kafka tombstones a table skipped and notes
// whether it met a delete event since the engine started.
type tombstoneWatch struct {
	skipped         int
	deletes, warned bool
}

// tombstonesAlone is how many skipped tombstones, with no delete event
// met, make noteSkippedTombstone warn: a tombstone trails its delete event,
// so a few may come first after a start between the two, not ten.
const tombstonesAlone = 10

// noteSkippedTombstone counts a tombstone table t skipped and warns once
// when tombstonesAlone of them came and no delete event: the table's
// deletes arrive as tombstones alone (ExtractNewRecordState's default,
// or a topic compacted ahead of the table), and skipping loses them.
func (e *Engine) noteSkippedTombstone(t *tableRun, r *kgo.Record) {
	w := &t.tombs
	w.skipped++
	if w.deletes || w.warned || w.skipped < tombstonesAlone {
		return
	}
	w.warned = true
	e.log.Warn("the table skipped Kafka tombstones and has met no delete event since the start: its deletes seem to arrive as tombstones alone (ExtractNewRecordState's delete.tombstone.handling.mode=tombstone, its default; or a compacted topic read behind its cleaner), and kafka_tombstones: skip ignores them, so deleted rows stay live; set kafka_tombstones: delete",
		"table", t.cfg.Name, "tombstones", w.skipped, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
}

// noteOldKey sets c's OldKey from rec's debezium.OldKeyHeader when c is the
// create of a row whose primary key an update changed and leaves columns
// unavailable (an unchanged TOASTed column under default replica
// identity): planning fills them from the old key's row. A header that
// cannot be read is logged and the change applied as before, those
// columns unresolved (NULL, counted in the commit's unresolvedColumns).
func (e *Engine) noteOldKey(t *tableRun, c *Change, ch *debezium.Change, rec *debezium.Record) {
	if c.Delete || c.unavail == 1 || len(rec.Headers) == 0 {
		return // nothing unavailable (bit 0 alone: noted, none), or no headers
	}
	for _, h := range rec.Headers {
		if h.Key != debezium.OldKeyHeader {
			continue
		}
		k, err := t.layout().headerKey(h.Value, ch.After.Type)
		if err != nil {
			e.log.Warn("primary-key change: cannot read the old key; its unavailable columns stay unresolved",
				"table", t.cfg.Name, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "header", debezium.OldKeyHeader, "err", err)
			return
		}
		c.setOldKey(k)
		return
	}
}

// keepOrRelease keeps a routed change's record as its Raw when keepRaw
// says so (released when its batch commits), else releases it now: the
// change holds copies of its values, and its fetch buffer goes back to
// the pool while the batch is still being read.
func (e *Engine) keepOrRelease(t *tableRun, r *kgo.Record, c *Change, rec *debezium.Record) {
	if t.keepRaw(c) {
		raw := new(debezium.Record)
		*raw = *rec
		c.setRaw(raw)
		e.rawKept.Add(1)
		return
	}
	e.batches.releaseRecord(r)
}

// routedBlock allocates routed changes in blocks: a block lives while any
// change in it is buffered or committing, then goes to the collector with
// the last of them.
type routedBlock struct{ free []Change }

// routedBlockLen is the number of changes in a block: 16 (about 2 KiB)
// rather than 128, since a block is zeroed when allocated and a small one
// is still in cache when its changes are written (with 128, the first
// write of each change missed: 200 of the projection's 350 ms in a
// profile of BenchmarkPredecodeRoute).
const routedBlockLen = 16

// next returns a zeroed change.
func (b *routedBlock) next() *Change {
	if len(b.free) == 0 {
		b.free = make([]Change, routedBlockLen)
	}
	rc := &b.free[0]
	b.free = b.free[1:]
	return rc
}

// truncate applies a source TRUNCATE by the table's truncate policy. For
// "tombstone" everything buffered before it is committed first, then the
// truncate alone, so it deletes exactly the rows older than it.
func (e *Engine) truncate(ctx context.Context, t *tableRun, tp checkpoint.TopicPartition, pb *partBuffer, r *kgo.Record, ch *debezium.Change) {
	if !e.settle(ctx, t) {
		return // resynced: the truncate is read again
	}
	switch {
	case t.cfg.TruncatePolicy == "ignore", t.applier.Layout() == nil:
		pb.skipped++
		return
	case t.cfg.TruncatePolicy == "fail":
		e.halt(t, "truncate", fmt.Errorf("table %s: topic %s partition %d offset %d: source truncate and truncate_policy is fail", t.cfg.Name, r.Topic, r.Partition, r.Offset))
		return
	}
	// Take the truncate record out of the pending batch, commit the rest.
	if pb.rng.From == r.Offset {
		delete(t.buf.parts, tp)
	} else {
		pb.read--
		pb.rng.Next = r.Offset
	}
	if n := len(t.buf.appended); n > 0 {
		t.buf.appended = t.buf.appended[:n-1] // the truncate's, noted when it was routed
	}
	if !t.buf.empty() && !e.flush(ctx, t) {
		return // resynced: the truncate is read again
	}
	c := &Change{Seq: ch.Seq.Key(), SourceTsMicros: ch.SourceTsMs * 1000,
		Pos: Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}}
	b := &Batch{Read: 1, Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: r.Offset, Next: r.Offset + 1}}}
	t.noteBatchTopicID(b, tp.Topic)
	res, err := t.applier.Truncate(ctx, c, b)
	e.metrics.stageEnded(t.cfg.Name)
	if errors.Is(err, ErrTopicRecreated) {
		e.halt(t, haltTopicRecreated, err)
		return
	}
	if err != nil {
		e.log.Error("truncate failed; retrying from the table's positions", "table", t.cfg.Name, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		e.resync(ctx, t)
		return
	}
	e.log.Info("source truncate applied", "table", t.cfg.Name, "version", res.Version, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "rows_deleted", res.Counts.Delete)
	t.takeCheckpoint(res)
	e.metrics.committed(batchDone{table: t.cfg.Name, batch: b, res: res, newestMicro: c.SourceTsMicros})
	e.commitGroupOffsets(ctx, t.cfg.Name, b.Ranges)
	if e.OnCommit != nil {
		e.OnCommit(t.cfg.Name, res)
	}
}

func (e *Engine) reject(t *tableRun, pb *partBuffer, rec *debezium.Record, reason, detail string) {
	pb.quarantined++
	t.buf.rejected = append(t.buf.rejected, Rejected{Record: *rec, Reason: reason, Detail: detail})
	e.log.Warn("record quarantined", "table", t.cfg.Name, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", reason, "detail", detail)
}

// ensureLayout creates the table's layout from the first change, and
// extends it when an image carries columns the table lacks (additive
// schema policy); other policies stop the table.
func (e *Engine) ensureLayout(ctx context.Context, t *tableRun, ch *debezium.Change) error {
	img := ch.After
	if !img.Present() {
		img = ch.Before
	}
	if !img.Present() {
		return &ProjectError{"missing_image", "a change with neither before nor after image"}
	}
	l := t.layout()
	if l == nil {
		keys := t.cfg.KeyColumns
		if len(keys) == 0 {
			keys = ch.Key.Names
		}
		var source []delta.StructField
		for _, f := range img.Columns() {
			source = append(source, deltaField(f, contains(keys, f.Name)))
		}
		nl, err := NewLayout(source, keys)
		if err != nil {
			return fmt.Errorf("table %s: %w", t.cfg.Name, err)
		}
		return t.applier.SetLayout(nl)
	}
	missing := l.Missing(img)
	if len(missing) == 0 {
		return nil
	}
	if t.cfg.SchemaPolicy != "additive" {
		names := make([]string, len(missing))
		for i, f := range missing {
			names[i] = f.Name
		}
		return fmt.Errorf("table %s: topic %s partition %d offset %d: new source column(s) %v and schema_policy is %q",
			t.cfg.Name, ch.Pos.Topic, ch.Pos.Partition, ch.Pos.Offset, names, t.cfg.SchemaPolicy)
	}
	// Evolving changes the applier: the batch in flight lands first.
	if !e.settle(ctx, t) {
		return errResynced
	}
	cols := make([]delta.StructField, len(missing))
	names := make([]string, len(missing))
	for i, f := range missing {
		cols[i] = deltaField(f, false)
		names[i] = f.Name
	}
	if err := t.applier.Evolve(cols); err != nil {
		return err
	}
	t.buf.schema++
	// Changes already buffered were decoded before the columns existed:
	// the source had no value for them.
	n := len(t.applier.Layout().Source)
	for _, c := range t.buf.changes {
		for len(c.Values) < n {
			c.Values = append(c.Values, schema.Null)
		}
	}
	e.log.Info("schema evolved: new source columns join the table in the next commit", "table", t.cfg.Name,
		"topic", ch.Pos.Topic, "partition", ch.Pos.Partition, "offset", ch.Pos.Offset, "columns", names)
	return nil
}

func deltaField(f schema.Field, key bool) delta.StructField {
	return delta.StructField{Name: f.Name, Type: f.Type.Delta, Nullable: !key}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// flush commits a table's pending batch and waits for the commit: see
// startFlush and settle. It returns false when the table was resynced.
func (e *Engine) flush(ctx context.Context, t *tableRun) bool {
	return e.startFlush(ctx, t) && e.settle(ctx, t)
}

// errResynced says the table was resynced while a record was routed: the
// record is read again from the table's positions.
var errResynced = errors.New("table resynced")

// startFlush begins committing a table's pending batch: the batch in
// flight is settled first (one at a time per table), then, on the loop,
// the catch-up with other writers, the horizon split and the quarantine
// commit (idempotent, its own txns); then the table commit with the data
// and positions runs on its own goroutine, so the loop reads and decodes
// the next batch meanwhile. settle finishes it. It returns false when the
// table was resynced.
func (e *Engine) startFlush(ctx context.Context, t *tableRun) bool {
	if !e.settle(ctx, t) {
		return false
	}
	if t.buf.empty() {
		return true
	}
	// Each stage is shown while under way; a batch that goes no further
	// than the loop's stages ends them here, one that is launched when
	// its goroutine returns.
	launched := false
	defer func() {
		if !launched {
			e.metrics.stageEnded(t.cfg.Name)
		}
	}()
	e.metrics.stageBegan(t.cfg.Name, stageRefresh)
	refreshStart := time.Now()
	caught, err := t.applier.Refresh(ctx)
	if err != nil {
		e.log.Error("refresh failed; retrying from the table's positions", "table", t.cfg.Name, "err", err)
		e.resync(ctx, t)
		return false
	}
	e.noteRefreshed(t, caught)
	late, kept := t.applier.LateBeyondHorizon(t.buf.changes)
	for _, c := range late {
		if c.Raw() == nil {
			// Routed while the horizon routing knew would have let it
			// in, so its record was released (keepRaw): a purge raised
			// the horizon since. Read the batch again, keeping records.
			e.log.Warn("a change is late beyond a purge horizon that rose after it was read; reading the batch again with its records kept to quarantine it",
				"table", t.cfg.Name, "topic", c.Pos.Topic, "partition", c.Pos.Partition, "offset", c.Pos.Offset)
			t.rawAll = true
			e.rawRereads.Add(1)
			e.resync(ctx, t)
			return false
		}
	}
	t.rawAll = false
	for _, c := range late {
		tp := checkpoint.TopicPartition{Topic: c.Pos.Topic, Partition: c.Pos.Partition}
		raw := c.Raw()
		e.reject(t, t.buf.parts[tp], raw, tombstone.ReasonLateBeyondHorizon,
			fmt.Sprintf("%s: no row for the key and the change is older than the table's purge horizon", raw.Topic+"/"+fmt.Sprint(raw.Partition)+"@"+fmt.Sprint(raw.Offset)))
	}
	t.buf.changes = kept
	refreshed := time.Since(refreshStart)
	b := &Batch{Changes: t.buf.changes, Ranges: map[checkpoint.TopicPartition]checkpoint.Range{}}
	for tp, pb := range t.buf.parts {
		t.noteBatchTopicID(b, tp.Topic)
		b.Ranges[tp] = pb.rng
		b.Read += pb.read
		b.Skipped += pb.skipped
		b.Quarantined += pb.quarantined
	}
	quarantineStart := time.Now()
	if len(t.buf.rejected) > 0 {
		e.metrics.stageBegan(t.cfg.Name, stageQuarantine)
		if err := t.quarantine.Write(ctx, t.buf.rejected); err != nil {
			e.log.Error("quarantine write failed; retrying from the table's positions", "table", t.cfg.Name, "err", err)
			e.resync(ctx, t)
			return false
		}
		// The quarantine holds copies of their bytes now; only their
		// reasons are read after this (metrics).
		e.batches.releaseRejected(t.buf.rejected)
	}
	if t.applier.Layout() == nil {
		// Only skipped or quarantined records and no table yet: the
		// positions have nowhere to go until the first change creates it.
		// The records will be read again; the quarantine is idempotent.
		t.buf.reset()
		return true
	}
	quarantined := time.Since(quarantineStart)
	if e.beforeApply != nil {
		e.beforeApply(t.cfg.Name)
	}
	t.burst = len(t.buf.changes) >= t.cfg.Flush.MaxRecords || t.buf.bytes >= t.cfg.Flush.MaxBytes
	f := &inflight{done: make(chan struct{}), buf: t.buf, b: b,
		rowsBefore: t.applier.rows(), refreshed: refreshed, quarantined: quarantined,
		pos: t.applier.Positions(), layout: t.applier.Layout(), guard: t.guard()}
	f.topicIDs, f.topicIDsErr = t.applier.TopicIDs()
	t.buf.reset()
	t.inflight = f
	// The commit is not cut short by the engine's shutdown: a batch whose
	// data files are written is committed, and Run's shutdown waits.
	actx := context.WithoutCancel(ctx)
	launched = true
	go func() {
		defer close(f.done)
		defer e.metrics.stageEnded(t.cfg.Name) // before done: the next batch's stages come after
		if e.applying != nil {
			e.applying(t.cfg.Name)
		}
		f.res, f.err = t.applier.Apply(actx, b)
		f.committed = time.Now()
	}()
	return true
}

// settleDone settles every table's batch that has finished applying,
// without waiting for the others.
func (e *Engine) settleDone(ctx context.Context) {
	for _, t := range e.tables {
		if f := t.inflight; f != nil {
			select {
			case <-f.done:
				e.settle(ctx, t)
			default:
			}
		}
	}
}

// settle waits for the table's batch in flight, if any, and finishes it:
// reported and its group offsets committed, or, if it failed, the table
// resynced (false).
func (e *Engine) settle(ctx context.Context, t *tableRun) bool {
	return e.finish(ctx, t, true)
}

// finish waits for and finishes the batch in flight. A failed batch is
// resynced when recover is set; otherwise (the table halts) it is only
// logged: a restart reads it again from the table's positions.
func (e *Engine) finish(ctx context.Context, t *tableRun, recover bool) bool {
	f := t.inflight
	if f == nil {
		return true
	}
	e.await(t, f)
	t.inflight = nil
	b, res, err := f.b, f.res, f.err
	if err != nil {
		e.metrics.commitFailedFor(t.cfg.Name, errors.Is(err, ErrFenced))
		switch {
		case errors.Is(err, ErrFenced):
			e.fenced.Add(1)
			e.log.Warn("batch fenced: another instance advanced a partition; re-reading positions from the table", "table", t.cfg.Name, "err", err)
		case recover && errors.Is(err, ErrTopicRecreated):
			// Reading it again would meet the same topic: nothing but a
			// rebuild of the table helps. (Without recover the table is
			// being halted already.)
			e.halt(t, haltTopicRecreated, err)
			return false
		case recover:
			e.log.Error("table commit failed; retrying from the table's positions", "table", t.cfg.Name, "err", err)
		default:
			e.log.Error("table commit failed; the table halts and reads it again from its positions on restart", "table", t.cfg.Name, "err", err)
		}
		if recover {
			e.resync(ctx, t)
		}
		return false
	}
	t.takeCheckpoint(res)
	if e.OnBatch != nil {
		e.OnBatch(t.batchReport(f))
	}
	e.log.Info("committed", "table", t.cfg.Name, "version", res.Version, "records", b.Read,
		"inserted", res.Counts.Insert, "updated", res.Counts.Update, "deleted", res.Counts.Delete,
		"revived", res.Counts.Revive, "stale", res.Counts.StaleRecords, "skipped", b.Skipped, "quarantined", b.Quarantined)
	if res.CheckpointSkipped {
		e.log.Debug("log checkpoint skipped: the previous one is still being written; the next checkpoint version covers this one", "table", t.cfg.Name, "version", res.Version)
	}
	e.commitGroupOffsets(ctx, t.cfg.Name, b.Ranges)
	e.recordCommit(t, &f.buf, b, res, f.refreshed, f.quarantined)
	t.holdFailures = 0
	if e.OnCommit != nil {
		e.OnCommit(t.cfg.Name, res)
	}
	// The batch is done with its records (the changes' values are
	// copies; only Raw points into the fetched bytes).
	e.batches.releaseChanges(b.Changes)
	return true
}

// watermarkInterval is how often a wait for a batch to land refreshes the
// lag of the table's partitions. While the loop waits (the next batch is
// due and its backlog is full) nothing is fetched, so no fetch brings a
// high watermark: without asking, a commit stuck on its storage would
// show a lag frozen at the last fetch's while the source goes on, and an
// alert on growing lag would never fire.
const watermarkInterval = 10 * time.Second

// await waits for the batch in flight f of table t to return, refreshing
// the lag of t's partitions from the brokers every watermarkEvery.
func (e *Engine) await(t *tableRun, f *inflight) {
	if e.metrics == nil || e.client == nil || e.watermarkEvery <= 0 {
		<-f.done
		return
	}
	tick := time.NewTicker(e.watermarkEvery)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-tick.C:
			e.refreshWatermarks(t, f.done)
		}
	}
}

// refreshWatermarks asks the brokers for the end offsets of t's assigned
// partitions and records them as high watermarks. It gives up when done
// closes (the batch landed: the loop has better to do than wait for an
// answer) or after watermarkEvery. A failure is logged at debug level
// only: an unreachable broker has its own series.
func (e *Engine) refreshWatermarks(t *tableRun, done <-chan struct{}) {
	assigned := e.assignedOf(t)
	if len(assigned) == 0 {
		return
	}
	topics := make([]string, 0, len(assigned))
	for topic := range assigned {
		topics = append(topics, topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.watermarkEvery)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	listed, err := kadm.NewClient(e.client).ListEndOffsets(ctx, topics...)
	if err != nil {
		e.log.Debug("end offsets not listed while waiting for a commit", "table", t.cfg.Name, "err", err)
		return
	}
	ends := map[checkpoint.TopicPartition]int64{}
	listed.Each(func(lo kadm.ListedOffset) {
		if lo.Err == nil && slices.Contains(assigned[lo.Topic], lo.Partition) {
			ends[checkpoint.TopicPartition{Topic: lo.Topic, Partition: lo.Partition}] = lo.Offset
		}
	})
	e.metrics.watermarks(ends)
}

// checkpointDone reports a log checkpoint's outcome as it ends (on the
// checkpoint's goroutine, or the commit's when written during it): a
// failure is logged with the table and version (the commits stand;
// readers replay more of the log until a later checkpoint lands, and each
// checkpoint version tries again) and counted, its time observed, and the
// outcome kept for the next batch's result.
func (e *Engine) checkpointDone(t *tableRun, o delta.CheckpointOutcome) {
	if o.Err != nil {
		e.log.Warn("log checkpoint failed; the commits stand and the next checkpoint version tries again", "table", t.cfg.Name, "version", o.Version,
			"took", o.Took, "err", o.Err)
	} else {
		e.log.Debug("log checkpoint written", "table", t.cfg.Name, "version", o.Version, "took", o.Took)
	}
	e.metrics.checkpointed(t.cfg.Name, o.Took, o.Err)
	if e.OnCheckpoint != nil {
		e.OnCheckpoint(t.cfg.Name, o)
	}
	t.ckptMu.Lock()
	t.ckpt = &o
	t.ckptMu.Unlock()
}

// takeCheckpoint reports with res the log checkpoint that ended since
// the previous result, if one did.
func (t *tableRun) takeCheckpoint(res *Result) {
	t.ckptMu.Lock()
	o := t.ckpt
	t.ckpt = nil
	t.ckptMu.Unlock()
	if o != nil {
		res.setCheckpoint(*o)
	}
}

// resync drops a table's buffer, reloads the table and seeks its assigned
// partitions back to the table's positions: the one recovery for fencing,
// failed commits and outcome-unknown commits alike, since the table's txn
// actions say exactly what is applied.
// buildProgressEvery is how often a key index build in progress is logged.
const buildProgressEvery = 5 * time.Second

// buildProgress logs a key index build that takes long, at most once per
// interval: files read of the table's, keys so far, time spent. A build
// done within the first interval says nothing here (Run logs its end).
func (e *Engine) buildProgress(table string, every time.Duration) BuildProgress {
	var started, last time.Time
	return func(read, files, keys int) {
		now := time.Now()
		if read == 0 {
			started, last = now, now
			return
		}
		if now.Sub(last) < every || read == files {
			return
		}
		last = now
		e.log.Info("building key index", "table", table, "files_read", read, "files", files, "keys", keys,
			"elapsed", now.Sub(started).Round(time.Millisecond))
	}
}

// reload brings a table's applier to the table's latest version for a
// resync or a new assignment (TableApplier.Reload), saying what it did;
// meanwhile the table is in stage open.
func (e *Engine) reload(ctx context.Context, t *tableRun) error {
	e.metrics.stageBegan(t.cfg.Name, stageOpen)
	defer e.metrics.stageEnded(t.cfg.Name)
	r, err := t.applier.Reload(ctx)
	if err != nil {
		return err
	}
	e.noteRefreshed(t, r)
	return nil
}

// noteRefreshed logs and counts how a table's key index followed the
// table (nil: nothing changed): caught up with other writers' commits (a
// purge, an optimize, a restore, another instance), with what it read and
// dropped, or built again, and why.
func (e *Engine) noteRefreshed(t *tableRun, r *Refreshed) {
	if r == nil {
		return
	}
	e.metrics.indexRefreshed(t.cfg.Name, r.Rebuilt)
	attrs := []any{"table", t.cfg.Name, "from_version", r.From, "to_version", r.To, "took", r.Took.Round(time.Millisecond)}
	if r.Rebuilt {
		keys := 0
		if ix := t.applier.index; ix != nil {
			keys = ix.Len()
		}
		e.log.Info("key index built again from every file", append(attrs, "reason", r.Reason, "keys", keys)...)
		return
	}
	e.log.Info("other writers committed; key index caught up", append(attrs,
		"files_removed", r.CatchUp.FilesRemoved, "files_added", r.CatchUp.FilesAdded,
		"rows_read", r.CatchUp.RowsRead, "keys_added", r.CatchUp.KeysAdded, "keys_dropped", r.CatchUp.KeysDropped)...)
}

func (e *Engine) resync(ctx context.Context, t *tableRun) {
	t.buf.reset()
	t.resynced = true // also on a halt below: the poll's rest is not applied
	if ctx.Err() != nil {
		// Shutting down: reloading the table now would fail for the
		// cancelled context and halt it. Nothing after the failure is
		// applied; a restart reads it again from the table's positions.
		e.log.Warn("not resynced: shutting down; the table's positions are where a restart reads from", "table", t.cfg.Name)
		return
	}
	if err := e.reload(ctx, t); err != nil {
		e.halt(t, "open", err)
		return
	}
	if err := e.typeSchemaless(t); err != nil {
		e.halt(t, "schema", err)
		return
	}
	if err := t.quarantine.Open(ctx); err != nil {
		e.halt(t, "open", err)
		return
	}
	e.rewind(t)
}

// commitGroupOffsets commits table's positions after a batch to the
// consumer group, for lag tooling that reads the group's offsets.
func (e *Engine) commitGroupOffsets(ctx context.Context, table string, ranges map[checkpoint.TopicPartition]checkpoint.Range) {
	if e.client == nil {
		return
	}
	offs := map[string]map[int32]kgo.EpochOffset{}
	for tp, r := range ranges {
		if offs[tp.Topic] == nil {
			offs[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		offs[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: r.Next}
	}
	// The table is the truth; a failed group commit only makes lag
	// tooling see the group behind, so it is logged and counted, not
	// retried (the next batch commits newer offsets). A partition can
	// fail alone (a missing group ACL, a commit late in a rebalance), so
	// the response's partitions are checked too.
	e.client.CommitOffsets(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		failed := failedCommits(req, resp)
		if err == nil && len(failed) == 0 {
			return
		}
		e.metrics.groupCommitFailed(table)
		if log, repeat := e.repeats.due(groupCommitKey{table}, e.clock()); log {
			e.log.Warn("group offset commit failed: the table and its positions are right, but tools reading the group's offsets see it behind",
				append([]any{"table", table, "group", e.cfg.Kafka.Group, "partitions", failed, "err", err}, repeat...)...)
		}
	})
}

// failedCommits lists the partitions resp reports failed, as
// "topic/partition: error". From OffsetCommit v10 the response names
// topics by ID only; their names come from the request.
func failedCommits(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse) []string {
	if resp == nil {
		return nil
	}
	names := map[[16]byte]string{}
	if req != nil {
		for _, t := range req.Topics {
			names[t.TopicID] = t.Topic
		}
	}
	var failed []string
	for _, t := range resp.Topics {
		topic := t.Topic
		if topic == "" {
			topic = names[t.TopicID]
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				failed = append(failed, fmt.Sprintf("%s/%d: %v", topic, p.Partition, err))
			}
		}
	}
	return failed
}

// onAssigned marks the tables of newly assigned partitions for reload: an
// instance that lost and regained a partition must not trust its index.
func (e *Engine) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	e.everAssigned.Store(true)
	e.assignMu.Lock()
	for topic, parts := range assigned {
		if e.assigned[topic] == nil {
			e.assigned[topic] = map[int32]bool{}
		}
		for _, p := range parts {
			e.assigned[topic][p] = true
		}
	}
	e.assignMu.Unlock()
	e.inflow.assigned(assigned, e.tableName)
	e.ready.assigned(assigned)
	for topic := range assigned {
		if t := e.tableFor(topic); t != nil {
			t.reopen.Store(true)
		}
	}
}

// onRevoked drops the buffered records of revoked or lost partitions; their
// next owner reads them again from the table's positions.
func (e *Engine) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	e.assignMu.Lock()
	for topic, parts := range revoked {
		for _, p := range parts {
			delete(e.assigned[topic], p)
		}
	}
	e.assignMu.Unlock()
	e.inflow.revoked(revoked)
	e.ready.revoked(revoked)
	for topic, parts := range revoked {
		t := e.tableFor(topic)
		if t == nil {
			continue
		}
		for _, p := range parts {
			e.metrics.revoked(t.cfg.Name, checkpoint.TopicPartition{Topic: topic, Partition: p})
		}
		if f := t.inflight; f != nil {
			// Hand the partitions over after the batch in flight lands
			// (or fails): the next owner then reads its positions. Run
			// reports it when it settles it.
			<-f.done
		}
		gone := map[checkpoint.TopicPartition]bool{}
		for _, p := range parts {
			tp := checkpoint.TopicPartition{Topic: topic, Partition: p}
			if _, ok := t.buf.parts[tp]; ok {
				gone[tp] = true
				delete(t.buf.parts, tp)
			}
		}
		if len(gone) == 0 {
			continue
		}
		kept := t.buf.changes[:0]
		for _, c := range t.buf.changes {
			if !gone[checkpoint.TopicPartition{Topic: c.Pos.Topic, Partition: c.Pos.Partition}] {
				kept = append(kept, c)
			}
		}
		t.buf.changes = kept
		rej := t.buf.rejected[:0]
		for _, r := range t.buf.rejected {
			if !gone[checkpoint.TopicPartition{Topic: r.Record.Topic, Partition: r.Record.Partition}] {
				rej = append(rej, r)
			}
		}
		t.buf.rejected = rej
		e.log.Info("partitions revoked; dropped their buffered records", "table", t.cfg.Name, "topic", topic, "partitions", parts)
	}
}

// adjustOffsets seeks every assigned partition to its table's position,
// read fresh from the table (never from the group's committed offsets).
func (e *Engine) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	byTable := map[*tableRun]checkpoint.Positions{}
	starts := e.skipStarts(ctx, offsets)
	e.warnCompacted(ctx, offsets)
	for topic, parts := range offsets {
		t := e.tableFor(topic)
		if t == nil {
			for p := range parts {
				e.ready.positioned(topic, p) // not ours: nothing to restore
			}
			continue
		}
		pos, ok := byTable[t]
		if !ok {
			snap, err := delta.Open(t.store).Snapshot(ctx)
			if err != nil && !errors.Is(err, delta.ErrNoTable) {
				return nil, fmt.Errorf("read positions of table %s: %w", t.cfg.Name, err)
			}
			pos = checkpoint.Restore(snap, e.cfg.Pipeline.ID)
			byTable[t] = pos
		}
		for p := range parts {
			tp := checkpoint.TopicPartition{Topic: topic, Partition: p}
			next, has := pos.Next(tp)
			if lo, ok := starts.Lookup(topic, p); ok && lo.Err == nil && next < lo.Offset {
				e.log.Warn("skipping offsets deleted by retention before they were applied (on_offset_gap: skip)", "table", t.cfg.Name, "topic", topic, "partition", p,
					"from", next, "to", lo.Offset-1, "skipped", lo.Offset-next)
				e.metrics.offsetsSkipped(t.cfg.Name, tp, lo.Offset-next)
				next = lo.Offset
			}
			switch {
			case has:
				parts[p] = kgo.NewOffset().At(next).WithEpoch(-1)
			case e.cfg.Kafka.OnOffsetGap == "skip":
				parts[p] = kgo.NewOffset().AtStart()
			default:
				// A table that never saw this partition needs offset 0:
				// if retention removed it, the fetch fails loudly.
				parts[p] = kgo.NewOffset().At(0).WithEpoch(-1)
			}
			e.metrics.positioned(t.cfg.Name, checkpoint.TopicPartition{Topic: topic, Partition: p}, next)
			e.ready.positioned(topic, p)
			e.log.Info("partition assigned", "table", t.cfg.Name, "topic", topic, "partition", p, "position", next, "from_table", has)
		}
	}
	return offsets, nil
}

// Compacted says whether a topic's cleanup.policy (compact, delete, or
// both comma-separated) compacts it.
func Compacted(policy string) bool {
	for p := range strings.SplitSeq(policy, ",") {
		if strings.TrimSpace(p) == "compact" {
			return true
		}
	}
	return false
}

// warnCompacted warns, once per topic and process, of each newly
// assigned topic that is compacted while its table skips Kafka
// tombstones: a table behind the log cleaner meets a delete whose change
// event the cleaner removed as its tombstone alone, and would keep the
// row. One DescribeConfigs request for the topics not looked at yet.
func (e *Engine) warnCompacted(ctx context.Context, offsets map[string]map[int32]kgo.Offset) {
	cl := e.kc.Load()
	if cl == nil {
		return
	}
	var topics []string
	e.compactMu.Lock()
	for topic := range offsets {
		if t := e.tableFor(topic); t != nil && t.cfg.KafkaTombstones != "delete" && !e.compactChecked[topic] {
			topics = append(topics, topic)
		}
	}
	e.compactMu.Unlock()
	if len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		e.log.Debug("could not read the assigned topics' cleanup.policy", "topics", topics, "err", err)
		return
	}
	e.compactMu.Lock()
	defer e.compactMu.Unlock()
	if e.compactChecked == nil {
		e.compactChecked = map[string]bool{}
	}
	for _, rc := range rcs {
		if rc.Err != nil || e.compactChecked[rc.Name] {
			continue
		}
		e.compactChecked[rc.Name] = true
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && Compacted(*c.Value) {
				e.log.Warn("the table's topic is compacted and kafka_tombstones is skip: a delete whose change event the log cleaner removed reaches the table as a Kafka tombstone alone, and the row stays live; set kafka_tombstones: delete (each key's changes in source order, as one connector writes them), or keep the table within the topic's min.compaction.lag.ms",
					"table", e.tableFor(rc.Name).cfg.Name, "topic", rc.Name, "cleanup.policy", *c.Value)
			}
		}
	}
}

// skipStarts returns, under on_offset_gap: skip, the log start offsets of
// the assigned topics that are tables', in one request: the client moves
// a position deleted by retention to the log's start without a word, so
// adjustOffsets says what is skipped.
func (e *Engine) skipStarts(ctx context.Context, offsets map[string]map[int32]kgo.Offset) kadm.ListedOffsets {
	cl := e.kc.Load()
	if e.cfg.Kafka.OnOffsetGap != "skip" || cl == nil {
		return nil
	}
	var topics []string
	for topic := range offsets {
		if e.tableFor(topic) != nil {
			topics = append(topics, topic)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topics...)
	if err != nil {
		e.log.Warn("on_offset_gap is skip, and the log start offsets could not be read: offsets skipped at this assignment are not logged", "topics", topics, "err", err)
		return nil
	}
	return starts
}

// assignedOf returns the partitions of table t this instance owns.
func (e *Engine) assignedOf(t *tableRun) map[string][]int32 {
	e.assignMu.Lock()
	defer e.assignMu.Unlock()
	out := map[string][]int32{}
	for topic, parts := range e.assigned {
		if e.tableFor(topic) != t {
			continue
		}
		for p := range parts {
			out[topic] = append(out[topic], p)
		}
	}
	return out
}
