// Package debezium turns Kafka records written by Debezium into typed
// changes: which table, which key, which operation, which source sequence,
// which column values. It reads the Debezium envelope as JSON (with or
// without an inline schema) and as Avro in the Confluent wire format, and
// the flattened form of Debezium's ExtractNewRecordState transform.
//
// Decoding is a pure function of the record and the decoder's compiled
// schemas: no goroutines, no reflection on the hot path. Every record either
// becomes a Change (which may be a non-change class such as a heartbeat) or
// a *Rejection naming the record's topic, partition and offset.
package debezium

import (
	"strconv"
	"time"

	"github.com/cdcapply/cdcapply/schema"
)

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record as the decoder needs it, independent of the
// Kafka client. A nil Key or Value is a Kafka null.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
}

// Position is where a record sits in Kafka.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String renders the position as topic/partition@offset.
func (p Position) String() string {
	return p.Topic + "/" + strconv.Itoa(int(p.Partition)) + "@" + strconv.FormatInt(p.Offset, 10)
}

// Class says what kind of record a Change is. Only ClassChange is applied;
// the others are accounted for and skipped.
type Class uint8

// The record classes.
const (
	// ClassChange is a row change (create, update, delete, read, truncate).
	ClassChange Class = iota
	// ClassKafkaTombstone is the null-valued record Debezium writes after a
	// delete so that log compaction can drop the key.
	ClassKafkaTombstone
	// ClassHeartbeat is a heartbeat record (heartbeat topic, or a value
	// holding only ts_ms).
	ClassHeartbeat
	// ClassTransaction is a transaction metadata BEGIN or END marker.
	ClassTransaction
	// ClassSchemaChange is a schema change event (ddl, tableChanges).
	ClassSchemaChange
	// ClassMessage is a PostgreSQL logical decoding message
	// (pg_logical_emit_message), op "m" on the <prefix>.message topic: it
	// carries an application's prefix and bytes, never a row.
	ClassMessage
)

var classNames = [...]string{"change", "kafka_tombstone", "heartbeat", "transaction", "schema_change", "logical_message"}

// String names the class.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Op is a change operation, as Debezium's one-letter op field spells it.
type Op byte

// The operations.
const (
	OpNone     Op = 0
	OpCreate   Op = 'c'
	OpUpdate   Op = 'u'
	OpDelete   Op = 'd'
	OpRead     Op = 'r' // snapshot read
	OpTruncate Op = 't'
)

// String returns the op letter.
func (o Op) String() string {
	if o == OpNone {
		return ""
	}
	return string(rune(o))
}

// Table identifies the source table (or collection) of a change.
type Table struct {
	Database string
	Schema   string
	Table    string
}

// String renders the table as database.schema.table, skipping empty parts.
func (t Table) String() string {
	s := t.Database
	for _, p := range []string{t.Schema, t.Table} {
		if p == "" {
			continue
		}
		if s != "" {
			s += "."
		}
		s += p
	}
	return s
}

// Row is a row image: the struct type (column names and types, shared by
// every change decoded with the same schema) and one value per column. A
// column may hold schema.Unavailable. A Row with a nil Type is absent.
type Row struct {
	Type   *schema.Type
	Values []schema.Value
}

// Present reports whether the image exists.
func (r Row) Present() bool { return r.Type != nil }

// Columns returns the columns in order.
func (r Row) Columns() []schema.Field {
	if r.Type == nil {
		return nil
	}
	return r.Type.Fields
}

// Get returns the value of the named column.
func (r Row) Get(name string) (schema.Value, bool) {
	if r.Type == nil {
		return schema.Value{}, false
	}
	i := r.Type.Field(name)
	if i < 0 {
		return schema.Value{}, false
	}
	return r.Values[i], true
}

// Key is a change's primary key: column names and typed values in key
// column order.
type Key struct {
	Names  []string
	Values []schema.Value
}

// TxMarker is the content of a transaction metadata record.
type TxMarker struct {
	Status     string // BEGIN or END
	ID         string
	EventCount int64
}

// Change is one decoded record.
type Change struct {
	Class Class
	Op    Op
	Table Table
	Key   Key
	// Before and After are the row images; either may be absent (After for
	// a delete, Before for a create or when the source does not send it).
	Before, After Row
	// Seq orders changes to the same key; valid for ClassChange.
	Seq Sequence
	// SourceTsMs is the source commit time (source.ts_ms), TsMs the time
	// Debezium processed the change (ts_ms), both milliseconds since the
	// epoch, 0 if absent.
	SourceTsMs int64
	TsMs       int64
	// Snapshot is the source.snapshot marker ("true", "last", ... or "").
	Snapshot string
	// Tx is set for ClassTransaction.
	Tx TxMarker
	// Pos is where the record sits in Kafka.
	Pos Position
}
