package workload

import (
	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/schema"
)

// keyState is one key's source state, which is also its expected row: the
// generator produces changes in sequence order and the delivery rule makes
// the table converge to the latest change per key.
type keyState struct {
	first, lsn         uint64 // the sequence [first, lsn] of the latest change
	valStamp, docStamp uint64 // which version wrote the ordinary columns and doc (0: never, all NULL)
	pos                int32  // index in the generator's live or dead list, -1 when in neither
	flags              uint8
}

// keyStates holds the keys' states by id-1: the table's keys in one
// slice of their exact number, and the stream's keys past them (deletes of
// keys the source never had) in chunks of an eighth of that (at least
// 1,024, at most keyChunk), added as needed. With one slice, the first
// such delete copied all the states (400 MB at 10M keys), a pause of
// seconds for the producer of a paced run on this VM (its fresh memory is
// slow to touch); with chunks of a fixed large size, every small workload
// paid for a large first chunk.
type keyStates struct {
	table []keyState   // the table's keys
	more  [][]keyState // the keys past them, chunk by chunk
	chunk int          // the length of each of more
	n     int
}

const keyChunk = 1 << 20

// newKeyStates returns n states, each in neither list (pos -1).
func newKeyStates(n int) keyStates {
	k := keyStates{table: make([]keyState, n), chunk: min(max(n/8, 1024), keyChunk), n: n}
	for i := range k.table {
		k.table[i].pos = -1
	}
	return k
}

// len is the number of states.
func (k *keyStates) len() int { return k.n }

// at returns state i (id-1); it stays where it is while states are added.
func (k *keyStates) at(i int) *keyState {
	if i < len(k.table) {
		return &k.table[i]
	}
	i -= len(k.table)
	return &k.more[i/k.chunk][i%k.chunk]
}

// add appends a state in neither list.
func (k *keyStates) add() {
	if k.n == len(k.table)+len(k.more)*k.chunk {
		k.more = append(k.more, make([]keyState, k.chunk))
	}
	k.at(k.n).pos = -1
	k.n++
}

const (
	fExists    uint8 = 1 << iota // some change of the key was generated
	fDeleted                     // the latest change is a delete
	fNullFirst                   // the sequence's first element is null (snapshot read)
)

// Counts are the stream's figures that do not depend on how a consumer
// cuts it into batches, for checking an engine's accounting.
type Counts struct {
	// Records is every record produced, on all topics.
	Records int64
	// TableRecords is the records on the table's topic (everything but
	// heartbeats sent to a separate topic).
	TableRecords int64
	// Changes are first deliveries of row changes; Reads, Creates,
	// Updates and Deletes split them by op.
	Changes                          int64
	Reads, Creates, Updates, Deletes int64
	// UnknownDeletes and Revivals are deletes of keys the source never had
	// and inserts of previously deleted keys.
	UnknownDeletes, Revivals int64
	// Duplicates and Replays are re-deliveries of change records (a
	// replayed Kafka tombstone counts in Replays and KafkaTombstones).
	Duplicates, Replays int64
	// KafkaTombstones and Heartbeats are records every consumer skips.
	KafkaTombstones, Heartbeats int64
	// Displaced counts first deliveries that arrived after a newer change
	// of their key (out of order or late): stale when batches separate them.
	Displaced int64
	// Placeholders counts first deliveries carrying the unavailable
	// placeholder.
	Placeholders int64
	// ChangeRecords is the row-change records on the table's topic, first
	// deliveries and copies: an engine's applied plus stale records.
	ChangeRecords int64
}

// SkippedRecords is the records on the table's topic a consumer skips:
// Kafka tombstones, and heartbeats when they travel on the table's topic.
func (c Counts) SkippedRecords() int64 { return c.TableRecords - c.ChangeRecords }

// Oracle is the expected final table, maintained as the generator makes
// changes. It holds a few words per key. It is complete once the
// generator's stream is exhausted (records it still delays do not change
// it: they are already accounted for).
type Oracle struct {
	tbl    *table
	keys   keyStates // by id-1
	counts Counts
}

// Row is a key's expected row.
type Row struct {
	// ID is the key.
	ID int64
	// Seq is the order-preserving sequence key of the key's latest change
	// (debezium.Sequence.Key), as the engine stores it.
	Seq []byte
	// Deleted is the soft-delete flag.
	Deleted bool
	// Values are the source columns in table order. A deleted row keeps
	// the values of its last live version (NULL for a key the source
	// never had).
	Values []schema.Value
}

func (o *Oracle) state(id int64) *keyState {
	if id < 1 || id > int64(o.keys.len()) {
		return nil
	}
	s := o.keys.at(int(id - 1))
	if s.flags&fExists == 0 {
		return nil
	}
	return s
}

// Len returns the number of rows the table must hold, tombstones included.
func (o *Oracle) Len() int64 {
	var n int64
	for i := range o.keys.len() {
		if o.keys.at(i).flags&fExists != 0 {
			n++
		}
	}
	return n
}

// MaxID is the largest key id the stream may have used.
func (o *Oracle) MaxID() int64 { return int64(o.keys.len()) }

// Row returns the expected row of key id, false if the table must not
// hold it.
func (o *Oracle) Row(id int64) (Row, bool) {
	s := o.state(id)
	if s == nil {
		return Row{}, false
	}
	r := Row{ID: id, Seq: o.seq(s).Key(), Deleted: s.flags&fDeleted != 0, Values: make([]schema.Value, len(o.tbl.cols))}
	for c := range o.tbl.cols {
		stamp := s.valStamp
		if c == o.tbl.docCol() {
			stamp = s.docStamp
		}
		r.Values[c] = o.tbl.value(id, stamp, c)
	}
	return r, true
}

// Rows calls f with every expected row in key order until f returns false.
func (o *Oracle) Rows(f func(Row) bool) {
	for i := range o.keys.len() {
		if r, ok := o.Row(int64(i) + 1); ok && !f(r) {
			return
		}
	}
}

// Counts returns the stream's batching-independent figures so far.
func (o *Oracle) Counts() Counts { return o.counts }

// Columns returns the source column names in table order.
func (o *Oracle) Columns() []string {
	out := make([]string, len(o.tbl.cols))
	for i, c := range o.tbl.cols {
		out[i] = c.name
	}
	return out
}

func (o *Oracle) seq(s *keyState) debezium.Sequence {
	return pgSequence(s.first, s.lsn, s.flags&fNullFirst != 0)
}

// pgSequence is the decoder's sequence for source.sequence [first, lsn].
func pgSequence(first, lsn uint64, nullFirst bool) debezium.Sequence {
	seq := debezium.Sequence{Connector: debezium.ConnectorPostgres, N: 2}
	if nullFirst {
		seq.Parts[0] = debezium.Part{Kind: debezium.PartNull}
	} else {
		seq.Parts[0] = debezium.Part{Kind: debezium.PartUint, U: first}
	}
	seq.Parts[1] = debezium.Part{Kind: debezium.PartUint, U: lsn}
	return seq
}
