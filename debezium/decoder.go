package debezium

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// Format is how record values (or keys) are serialized.
type Format uint8

// The formats.
const (
	// FormatJSON is Kafka Connect's JsonConverter output, with an inline
	// schema (schemas.enable=true) or without one, detected per record.
	// Without an inline schema the columns are typed by TableSchema.
	FormatJSON Format = iota + 1
	// FormatAvro is Avro in the Confluent wire format (magic byte 0, four
	// byte schema id, Avro binary), schemas from SchemaRegistry.
	FormatAvro
)

// Envelope is the shape of a record value.
type Envelope uint8

// The envelope shapes.
const (
	// EnvelopeDebezium is Debezium's change envelope: before, after,
	// source, op, ts_ms (and transaction).
	EnvelopeDebezium Envelope = iota + 1
	// EnvelopeFlattened is the output of the ExtractNewRecordState
	// transform: the row's columns at top level, metadata in fields named
	// __op, __deleted, __lsn, __source_ts_ms, ... (add.fields). Deletes must
	// be rewritten (delete.handling.mode=rewrite, __deleted=true) to be seen.
	// Top-level fields whose name starts with "__" are metadata, never
	// columns.
	EnvelopeFlattened
)

// Option configures a Decoder.
type Option func(*config) error

type config struct {
	valueFormat     Format
	keyFormat       Format
	envelope        Envelope
	connector       Connector
	seqFields       []SequenceField
	keyColumns      []string
	opts            schema.Options
	tables          map[string]delta.StructType
	rowTypes        map[string]*schema.Type
	registry        Registry
	heartbeatPrefix string
	tombstoneKeys   bool
	extra           []string // see extraName
}

// ValueFormat sets how record values are serialized (default FormatJSON).
// Keys use the same format unless KeyFormat says otherwise.
func ValueFormat(f Format) Option {
	return func(c *config) error { c.valueFormat = f; return nil }
}

// KeyFormat sets how record keys are serialized.
func KeyFormat(f Format) Option {
	return func(c *config) error { c.keyFormat = f; return nil }
}

// EnvelopeShape sets the shape of record values (default EnvelopeDebezium).
func EnvelopeShape(e Envelope) Option {
	return func(c *config) error { c.envelope = e; return nil }
}

// SourceConnector sets which connector wrote the records; it decides how
// the sequence is read.
func SourceConnector(k Connector) Option {
	return func(c *config) error { c.connector = k; return nil }
}

// SequenceFields orders changes by the given field paths instead of a
// connector's built-in sequence.
func SequenceFields(fields ...SequenceField) Option {
	return func(c *config) error {
		if len(fields) == 0 || len(fields) > MaxParts {
			return fmt.Errorf("sequence fields: want 1 to %d fields, got %d", MaxParts, len(fields))
		}
		for _, f := range fields {
			if f.Kind < FieldInt || f.Kind > FieldLSN {
				return fmt.Errorf("sequence field %q: no kind", f.Path)
			}
		}
		c.connector = ConnectorFields
		c.seqFields = fields
		c.extra = nil
		for _, f := range fields {
			if n, ok := extraName(f.Path); ok {
				c.extra = append(c.extra, n)
			}
		}
		return nil
	}
}

// KeyColumns takes the key from these columns of the row image instead of
// from the Kafka record key.
func KeyColumns(cols ...string) Option {
	return func(c *config) error { c.keyColumns = cols; return nil }
}

// TombstoneKeys decodes the key of a Kafka tombstone (a null-valued
// record) into its Change, which is otherwise returned without one: a
// table that deletes on tombstones (a compacted topic, where compaction
// removes a delete's change event once its tombstone follows) needs it.
func TombstoneKeys() Option {
	return func(c *config) error { c.tombstoneKeys = true; return nil }
}

// BinaryHandling is the connector's binary.handling.mode.
func BinaryHandling(m schema.BinaryMode) Option {
	return func(c *config) error { c.opts.Binary = m; return nil }
}

// BinaryColumns names columns that the connector sends as text because of
// binary.handling.mode (base64 or hex); they decode to Delta binary.
func BinaryColumns(cols ...string) Option {
	return func(c *config) error {
		if c.opts.BinaryColumns == nil {
			c.opts.BinaryColumns = map[string]bool{}
		}
		for _, col := range cols {
			c.opts.BinaryColumns[col] = true
		}
		return nil
	}
}

// DecimalHandling is the connector's decimal.handling.mode; it tells how
// schema-less JSON carries Delta decimal columns.
func DecimalHandling(m schema.DecimalMode) Option {
	return func(c *config) error { c.opts.Decimal = m; return nil }
}

// TableSchema types the columns of schema-less JSON records on topic (""
// for every topic without its own schema) by the table's Delta schema.
func TableSchema(topic string, st delta.StructType) Option {
	return func(c *config) error {
		if c.tables == nil {
			c.tables = map[string]delta.StructType{}
		}
		c.tables[topic] = st
		return nil
	}
}

// RowType types the columns of schema-less JSON records on topic ("" for
// every topic) by a compiled row type, for example the Connect schema of the
// table's value (schema.ParseConnect) when its exact Debezium logical types
// matter: millisecond versus microsecond timestamps, time of day, intervals.
func RowType(topic string, t *schema.Type) Option {
	return func(c *config) error {
		if t == nil || t.Base != schema.BaseStruct {
			return fmt.Errorf("row type for %q: not a struct", topic)
		}
		if c.rowTypes == nil {
			c.rowTypes = map[string]*schema.Type{}
		}
		c.rowTypes[topic] = t
		return nil
	}
}

// SchemaRegistry resolves Avro schema ids.
func SchemaRegistry(r Registry) Option {
	return func(c *config) error { c.registry = r; return nil }
}

// HeartbeatTopicPrefix sets the prefix of heartbeat topics (default
// "__debezium-heartbeat").
func HeartbeatTopicPrefix(p string) Option {
	return func(c *config) error { c.heartbeatPrefix = p; return nil }
}

// Decoder turns records into changes. It is safe for concurrent use; its
// compiled schemas are cached by inline schema text and registry id.
type Decoder struct {
	cfg config

	tableTypes map[string]*schema.Type // from TableSchema and RowType, compiled once
	tablePlan  map[string]*jsonPlan    // the same as plans for schema-less JSON

	mu          sync.Mutex
	plans       map[string]*jsonPlan // inline schema text -> plan
	lastPlan    map[string]*jsonPlan // topic -> last inline value plan (fast path)
	lastKeyPlan map[string]*jsonPlan // topic -> last inline key plan
	avro        map[int]*avroPlan
}

// New builds a decoder.
func New(opts ...Option) (*Decoder, error) {
	d := &Decoder{
		cfg:         config{valueFormat: FormatJSON, envelope: EnvelopeDebezium, heartbeatPrefix: "__debezium-heartbeat"},
		tableTypes:  map[string]*schema.Type{},
		plans:       map[string]*jsonPlan{},
		lastPlan:    map[string]*jsonPlan{},
		lastKeyPlan: map[string]*jsonPlan{},
		avro:        map[int]*avroPlan{},
	}
	for _, o := range opts {
		if err := o(&d.cfg); err != nil {
			return nil, fmt.Errorf("new decoder: %w", err)
		}
	}
	if d.cfg.keyFormat == 0 {
		d.cfg.keyFormat = d.cfg.valueFormat
	}
	if d.cfg.connector == 0 {
		return nil, errors.New("new decoder: no source connector (SourceConnector or SequenceFields)")
	}
	if (d.cfg.valueFormat == FormatAvro || d.cfg.keyFormat == FormatAvro) && d.cfg.registry == nil {
		return nil, errors.New("new decoder: avro needs a SchemaRegistry")
	}
	for topic, st := range d.cfg.tables {
		t, err := schema.FromDelta(st, &d.cfg.opts)
		if err != nil {
			return nil, fmt.Errorf("new decoder: table schema for %q: %w", topic, err)
		}
		d.tableTypes[topic] = t
	}
	for topic, t := range d.cfg.rowTypes {
		d.tableTypes[topic] = t
	}
	d.tablePlan = make(map[string]*jsonPlan, len(d.tableTypes))
	for topic, t := range d.tableTypes {
		d.tablePlan[topic] = tablePlan(t)
	}
	return d, nil
}

// Decode turns one record into a Change, or returns a *Rejection naming the
// record's position. It never panics on any input.
func (d *Decoder) Decode(ctx context.Context, rec *Record) (Change, error) {
	pos := Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	if rec.Value == nil {
		return d.tombstone(ctx, rec, pos)
	}
	if d.cfg.heartbeatPrefix != "" && strings.HasPrefix(rec.Topic, d.cfg.heartbeatPrefix) {
		return Change{Class: ClassHeartbeat, Pos: pos}, nil
	}
	var env envelope
	env.pos = pos
	env.slab = getSlab()
	defer putSlab(env.slab)
	var rej *Rejection
	switch d.cfg.valueFormat {
	case FormatAvro:
		rej = d.avroValue(ctx, rec, &env)
	default:
		rej = d.jsonValue(rec, &env)
	}
	if rej != nil {
		return Change{}, rej
	}
	return d.finish(ctx, rec, &env)
}

// tombstone is the Change of a Kafka tombstone: its key when TombstoneKeys
// is set and the record has one (a key that cannot be read rejects the
// record), its Kafka timestamp as SourceTsMs (a tombstone carries no
// source block).
func (d *Decoder) tombstone(ctx context.Context, rec *Record, pos Position) (Change, error) {
	ch := Change{Class: ClassKafkaTombstone, Pos: pos}
	if !d.cfg.tombstoneKeys || rec.Key == nil || len(d.cfg.keyColumns) > 0 {
		return ch, nil
	}
	ch.SourceTsMs = rec.Timestamp.UnixMilli()
	env := envelope{pos: pos, slab: getSlab()}
	defer putSlab(env.slab)
	var rej *Rejection
	if d.cfg.keyFormat == FormatAvro {
		rej = d.avroKey(ctx, rec, &env, &ch.Key)
	} else {
		// A key without an inline schema is typed by the table's row
		// type, as a change's key is by its value's.
		if p := d.tablePlans(rec.Topic); p != nil {
			env.rowType = p.after
			if env.rowType == nil {
				env.rowType = p.row
			}
		}
		rej = d.jsonKey(rec, &env, &ch.Key)
	}
	if rej != nil {
		return Change{}, rej
	}
	for i, v := range ch.Key.Values {
		if v.IsNull() || v.IsUnavailable() {
			return Change{}, reject(pos, ReasonMissingKey, nil, "tombstone key field %q is null", ch.Key.Names[i])
		}
	}
	return ch, nil
}

// srcVal is one captured scalar of the source block (or a flattened
// metadata field): absent, null, integer or text.
type srcVal struct {
	kind uint8
	esc  bool  // the text is JSON string text still holding escapes
	n    int32 // text length
	i    int64
	p    *byte // text start (in the record buffer)
}

// strVal captures text without copying it; 24-byte srcVals keep the
// envelope (cleared for every record) small.
func strVal(b []byte, esc bool) srcVal {
	return srcVal{kind: svString, esc: esc, n: int32(len(b)), p: unsafe.SliceData(b)}
}

// bytes returns the captured text.
func (v srcVal) bytes() []byte {
	if v.p == nil {
		return nil
	}
	return unsafe.Slice(v.p, v.n)
}

// text returns the string value, unescaping JSON text when needed (rare:
// source fields are plain names and numbers, except source.sequence).
func (v srcVal) text() []byte {
	if !v.esc {
		return v.bytes()
	}
	out, err := unescapeInto(nil, v.bytes())
	if err != nil {
		return v.bytes()
	}
	return out
}

func (v srcVal) str() string {
	if v.kind != svString {
		return ""
	}
	return string(v.text())
}

const (
	svAbsent uint8 = iota
	svNull
	svInt
	svString
	svOther // bool, float, object: present but not a sequence scalar
)

// The source fields the decoder reads.
const (
	srcDB = iota
	srcSchema
	srcTable
	srcCollection
	srcSnapshot
	srcTsMs
	srcTsSec
	srcLsn
	srcSequence
	srcFile
	srcPos
	srcRow
	srcCommitLsn
	srcChangeLsn
	srcEventSerialNo
	srcOrd
	srcScn
	srcCommitScn
	srcSsn
	srcCount
)

func srcID(name []byte) int {
	switch string(name) {
	case "db":
		return srcDB
	case "schema":
		return srcSchema
	case "table":
		return srcTable
	case "collection":
		return srcCollection
	case "snapshot":
		return srcSnapshot
	case "ts_ms":
		return srcTsMs
	case "ts_sec":
		return srcTsSec
	case "lsn":
		return srcLsn
	case "sequence":
		return srcSequence
	case "file":
		return srcFile
	case "pos":
		return srcPos
	case "row":
		return srcRow
	case "commit_lsn":
		return srcCommitLsn
	case "change_lsn":
		return srcChangeLsn
	case "event_serial_no":
		return srcEventSerialNo
	case "ord":
		return srcOrd
	case "scn":
		return srcScn
	case "commit_scn":
		return srcCommitScn
	case "ssn":
		return srcSsn
	}
	return -1
}

// tableCache remembers the last table identity decoded with one schema:
// every record of a topic names the same table, so the strings are built
// once instead of per record.
type tableCache struct {
	last atomic.Pointer[Table]
}

func (c *tableCache) intern(db, sch, tbl srcVal) Table {
	if db.kind != svString && sch.kind != svString && tbl.kind != svString {
		return Table{} // flattened records without __db/__table
	}
	if c != nil {
		if p := c.last.Load(); p != nil && string(db.text()) == p.Database && string(sch.text()) == p.Schema && string(tbl.text()) == p.Table {
			return *p
		}
	}
	t := Table{Database: db.str(), Schema: sch.str(), Table: tbl.str()}
	if c != nil {
		c.last.Store(&t)
	}
	return t
}

// internSnapshot returns source.snapshot without allocating for the values
// Debezium uses.
func internSnapshot(v srcVal) string {
	switch string(v.bytes()) {
	case "true":
		return "true"
	case "false":
		return "false"
	case "last":
		return "last"
	case "first":
		return "first"
	case "first_in_data_collection":
		return "first_in_data_collection"
	case "last_in_data_collection":
		return "last_in_data_collection"
	case "incremental":
		return "incremental"
	}
	return v.str()
}

// envelope is what a value decoder extracts before the common rules
// (classification, key, sequence) run.
type envelope struct {
	pos           Position
	tables        *tableCache // of the schema the record was decoded with
	slab          *valueSlab  // row images are cut from it
	class         Class
	classified    bool
	op            []byte
	before, after Row
	rowType       *schema.Type // column types for keys
	src           [srcCount]srcVal
	extra         []srcVal // configured sequence fields not in src, indexed like cfg.extra
	tsMs          int64
	deleted       bool // flattened __deleted
	tx            TxMarker
	sawOp         bool
	sawSource     bool
	sawRow        bool
	sawTs         bool
	sawDDL        bool
	sawStatus     bool
	others        int
}

func (env *envelope) classify() {
	switch {
	case env.classified:
	case env.sawOp:
		env.class = ClassChange
	case env.sawStatus:
		env.class = ClassTransaction
	case env.sawDDL:
		env.class = ClassSchemaChange
	case env.sawTs && !env.sawRow && !env.sawSource && env.others == 0:
		env.class = ClassHeartbeat
	default:
		env.class = ClassChange // no op: rejected as unknown_op below
	}
	env.classified = true
}

func (d *Decoder) finish(ctx context.Context, rec *Record, env *envelope) (Change, error) {
	env.classify()
	if env.class == ClassChange && len(env.op) == 1 && env.op[0] == 'm' {
		// A logical decoding message: no row, no table; skipped like a
		// heartbeat (its position still counts as read).
		env.class = ClassMessage
	}
	ch := Change{Class: env.class, Pos: env.pos, TsMs: env.tsMs}
	if env.class != ClassChange {
		ch.Tx = env.tx
		return ch, nil
	}
	switch {
	case len(env.op) == 1 && strings.IndexByte("cudrt", env.op[0]) >= 0:
		ch.Op = Op(env.op[0])
	case d.cfg.envelope == EnvelopeFlattened && len(env.op) == 0:
		// Without add.fields=op the flattened form only says whether the
		// row was deleted; anything else is an upsert.
		ch.Op = OpUpdate
		if env.deleted {
			ch.Op = OpDelete
		}
	default:
		return Change{}, reject(env.pos, ReasonUnknownOp, nil, "op %q", truncateBytes(env.op))
	}
	if d.cfg.envelope == EnvelopeFlattened && env.deleted {
		ch.Op = OpDelete
	}
	if d.cfg.envelope == EnvelopeFlattened && ch.Op == OpDelete && env.after.Present() {
		// The rewritten delete carries the deleted row where after would be.
		env.before, env.after = env.after, Row{}
	}
	ch.Before, ch.After = env.before, env.after
	switch ch.Op {
	case OpCreate, OpRead, OpUpdate:
		if !ch.After.Present() {
			return Change{}, reject(env.pos, ReasonMissingImage, nil, "op %s without an after image", ch.Op)
		}
	}
	tbl := env.src[srcTable]
	if tbl.kind != svString {
		tbl = env.src[srcCollection]
	}
	ch.Table = env.tables.intern(env.src[srcDB], env.src[srcSchema], tbl)
	if v := env.src[srcTsMs]; v.kind == svInt {
		ch.SourceTsMs = v.i
	}
	if v := env.src[srcSnapshot]; v.kind == svString {
		ch.Snapshot = internSnapshot(v)
	}
	seq, rej := d.sequence(env, &ch)
	if rej != nil {
		return Change{}, rej
	}
	ch.Seq = seq
	if ch.Op != OpTruncate {
		if rej := d.key(ctx, rec, env, &ch); rej != nil {
			return Change{}, rej
		}
	}
	return ch, nil
}

// key fills ch.Key from the configured key columns or the record key.
func (d *Decoder) key(ctx context.Context, rec *Record, env *envelope, ch *Change) *Rejection {
	if len(d.cfg.keyColumns) > 0 {
		img := ch.After
		if !img.Present() {
			img = ch.Before
		}
		if !img.Present() {
			return reject(env.pos, ReasonMissingKey, nil, "no row image to take key columns from")
		}
		ch.Key.Names = d.cfg.keyColumns
		ch.Key.Values = make([]schema.Value, len(d.cfg.keyColumns))
		for i, c := range d.cfg.keyColumns {
			v, ok := img.Get(c)
			if !ok || v.IsNull() || v.IsUnavailable() {
				return reject(env.pos, ReasonMissingKey, nil, "key column %q missing or null", c)
			}
			ch.Key.Values[i] = v
		}
		return nil
	}
	if rec.Key == nil {
		return reject(env.pos, ReasonMissingKey, nil, "record has no key")
	}
	var rej *Rejection
	if d.cfg.keyFormat == FormatAvro {
		rej = d.avroKey(ctx, rec, env, &ch.Key)
	} else {
		rej = d.jsonKey(rec, env, &ch.Key)
	}
	if rej != nil {
		return rej
	}
	if len(ch.Key.Values) == 0 {
		return reject(env.pos, ReasonMissingKey, nil, "record key has no fields")
	}
	for i, v := range ch.Key.Values {
		if v.IsNull() || v.IsUnavailable() {
			return reject(env.pos, ReasonMissingKey, nil, "key field %q is null", ch.Key.Names[i])
		}
	}
	return nil
}

// valueRejection maps a conversion error to its rejection.
func valueRejection(pos Position, err error, what string) *Rejection {
	var r *Rejection
	if errors.As(err, &r) {
		return r
	}
	switch {
	case errors.Is(err, schema.ErrOutOfRange):
		return reject(pos, ReasonOutOfRange, err, "%s", what)
	case errors.Is(err, schema.ErrInvalid):
		return reject(pos, ReasonInvalidValue, err, "%s", what)
	case errors.Is(err, errSyntax):
		return reject(pos, ReasonMalformedJSON, err, "%s", what)
	case errors.Is(err, errAvro):
		return reject(pos, ReasonMalformedAvro, err, "%s", what)
	}
	return reject(pos, ReasonInvalidValue, err, "%s", what)
}

func truncateBytes(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}
