package workload

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
)

// Copy says whether a record is a first delivery or a re-delivery.
type Copy uint8

// The delivery kinds.
const (
	// Original is a record's first delivery.
	Original Copy = iota
	// Duplicate is a record delivered again right after itself.
	Duplicate
	// Replay is a record delivered again as part of a run of recent records.
	Replay
)

// Change is what the generator meant by a change record: the decoder must
// read exactly this back.
type Change struct {
	Op  debezium.Op
	ID  int64
	Seq debezium.Sequence
	// SourceTsMs is source.ts_ms, the transaction's commit time.
	SourceTsMs int64
	// TxID is source.txId.
	TxID int64
	// DocUnavailable is set when the after image carries the unavailable
	// placeholder for doc.
	DocUnavailable bool

	valStamp, docStamp uint64
	docChanged         bool
}

// Event is one produced record with what the generator knows about it.
type Event struct {
	// Record is the Kafka record; Offset is the offset it gets when the
	// stream is produced in order into empty topics.
	Record debezium.Record
	// Class is the record's class as the decoder must classify it.
	Class debezium.Class
	// Copy tells first deliveries from re-deliveries.
	Copy Copy
	// Change is the row change of a change record, or the delete a Kafka
	// tombstone follows; nil for heartbeats.
	Change *Change
	// Displaced is set on a first delivery that arrives after a newer
	// change of its key.
	Displaced bool
}

// pendingRec is a change record held back for out-of-order or late
// delivery.
type pendingRec struct {
	due       int64 // deliver once this many records were delivered
	order     int64 // tie-break: the order it was held in
	ev        *Event
	released  bool
	overtaken bool
}

type pendingHeap []*pendingRec

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].order < h[j].order
}
func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)   { *h = append(*h, x.(*pendingRec)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Generator streams a workload's records. It is not safe for concurrent
// use.
type Generator struct {
	cfg    Config
	tbl    *table
	rng    *rand.Rand
	topic  string
	oracle *Oracle
	enc    encoder
	// keysOnly skips rendering values (OracleFor): the key still decides
	// the partition, and nothing rendered feeds the random source, so the
	// stream of changes is the same.
	keysOnly bool

	// Source position.
	lsn, lastCommit uint64
	txID            int64
	txLeft          int
	txIndex         int64
	txTs            time.Time
	snapshotted     int64
	streamed        int64
	nextNew         int64
	nextUnknown     int64
	live, dead      []int64

	// Delivery.
	out          []*Event
	outHead      int
	delivered    int64 // records queued for delivery so far: the clock of delays
	pending      pendingHeap
	pendingByKey map[int64]*pendingRec
	held         int64
	ring         []*Event
	ringNext     int
	ringFull     bool
	offsets      []int64 // next offset per partition of the table's topic
	hbOffset     int64
	sinceHB      int
}

// New builds a generator for the workload.
func New(cfg Config) (*Generator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new workload: %w", err)
	}
	if cfg.Keys < 1 {
		return nil, fmt.Errorf("new workload: keys %d: want at least 1", cfg.Keys)
	}
	tbl := newTable(cfg.Columns, cfg.StringWidth, cfg.DocWidth, cfg.NullPercent, cfg.Seed)
	g := &Generator{
		cfg:          cfg,
		tbl:          tbl,
		rng:          rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed_cafe_f00d)),
		topic:        cfg.Topic(),
		oracle:       &Oracle{tbl: tbl, keys: newKeyStates(int(cfg.Keys))},
		lsn:          cfg.StartLSN,
		lastCommit:   cfg.StartLSN,
		txID:         1000,
		nextNew:      cfg.SnapshotKeys + 1,
		nextUnknown:  cfg.Keys + 1,
		pendingByKey: map[int64]*pendingRec{},
		ring:         make([]*Event, max(cfg.ReplayLength, 1)),
		offsets:      make([]int64, cfg.Partitions),
	}
	g.enc = newEncoder(&g.cfg, tbl)
	return g, nil
}

// Config returns the workload's configuration with defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

// Topic is the table's topic.
func (g *Generator) Topic() string { return g.topic }

// HeartbeatTopic is the topic heartbeats go to.
func (g *Generator) HeartbeatTopic() string { return g.cfg.HeartbeatTopic }

// Oracle returns the expected table, complete once Next has returned false.
func (g *Generator) Oracle() *Oracle { return g.oracle }

// DeltaFields returns the source columns as the engine types them.
func (g *Generator) DeltaFields() ([]delta.StructField, error) { return g.tbl.deltaFields() }

// KeyColumns names the primary key columns.
func (g *Generator) KeyColumns() []string { return []string{"id"} }

// Next fills ev with the next record and reports whether there was one.
// The record's byte slices are new and owned by the caller.
func (g *Generator) Next(ev *Event) bool {
	for g.outHead == len(g.out) {
		g.out, g.outHead = g.out[:0], 0
		if !g.step() {
			return false
		}
	}
	*ev = *g.out[g.outHead]
	g.out[g.outHead] = nil
	g.outHead++
	return true
}

// NextSnapshot is Next while the stream is in its snapshot phase: it
// fills ev with the next record only if the snapshot reads are not all
// delivered yet (the records among them, such as duplicates of reads and
// heartbeats, included), and reports false, taking nothing, once the next
// record belongs to the streamed changes. A prefill takes the snapshot
// this way and produces the rest with Next.
func (g *Generator) NextSnapshot(ev *Event) bool {
	if g.outHead == len(g.out) && g.snapshotted >= g.cfg.SnapshotKeys {
		return false
	}
	return g.Next(ev)
}

// step generates the next source change (or releases the last held
// records) and queues what it delivers; false when the stream is over.
func (g *Generator) step() bool {
	switch {
	case g.snapshotted < g.cfg.SnapshotKeys:
		g.snapshotRead()
	case g.streamed < g.cfg.Events:
		g.streamChange()
	case len(g.pending) > 0:
		p := heap.Pop(&g.pending).(*pendingRec)
		if !p.released {
			g.release(p)
		}
	default:
		return false
	}
	return true
}

func (g *Generator) snapshotRead() {
	g.snapshotted++
	id := g.snapshotted
	s := g.oracle.keys.at(int(id - 1))
	s.flags = fExists | fNullFirst
	s.first, s.lsn = 0, g.cfg.StartLSN
	s.valStamp, s.docStamp = g.cfg.StartLSN, g.cfg.StartLSN
	g.setLive(id, s)
	// A snapshot read's source time is when the connector read the row:
	// the wall clock when Clock is set (freshness runs), else StartTime.
	ts := g.cfg.StartTime
	if g.cfg.Clock != nil {
		ts = g.cfg.Clock()
	}
	ch := &Change{Op: debezium.OpRead, ID: id, Seq: pgSequence(0, g.cfg.StartLSN, true),
		SourceTsMs: ts.UnixMilli(), TxID: g.txID, valStamp: s.valStamp, docStamp: s.docStamp, docChanged: true}
	snap := "true"
	if g.snapshotted == g.cfg.SnapshotKeys {
		snap = "last"
	}
	g.oracle.counts.Reads++
	g.deliver(g.changeEvent(ch, snap))
}

// setLive moves a key to the live list (from the dead list or nowhere).
func (g *Generator) setLive(id int64, s *keyState) {
	if s.pos >= 0 && s.flags&fDeleted == 0 {
		return
	}
	g.unlist(id, s)
	s.pos = int32(len(g.live))
	g.live = append(g.live, id)
}

func (g *Generator) setDead(id int64, s *keyState) {
	g.unlist(id, s)
	s.pos = int32(len(g.dead))
	g.dead = append(g.dead, id)
}

// unlist removes a key from the list its flags say it is in.
func (g *Generator) unlist(id int64, s *keyState) {
	if s.pos < 0 {
		return
	}
	list := &g.live
	if s.flags&fDeleted != 0 {
		list = &g.dead
	}
	last := (*list)[len(*list)-1]
	(*list)[s.pos] = last
	g.oracle.keys.at(int(last - 1)).pos = s.pos
	*list = (*list)[:len(*list)-1]
	s.pos = -1
}

func (g *Generator) pickLive() int64 {
	if g.cfg.HotKeys > 0 && g.rng.Float64() < g.cfg.HotFraction {
		hot := min(g.cfg.HotKeys, g.cfg.Keys)
		for range 4 {
			id := 1 + g.rng.Int64N(hot)
			if s := g.oracle.keys.at(int(id - 1)); s.flags&fExists != 0 && s.flags&fDeleted == 0 {
				return id
			}
		}
	}
	return g.live[g.rng.IntN(len(g.live))]
}

// chooseOp picks the operation and key of the next change.
func (g *Generator) chooseOp() (debezium.Op, int64) {
	total := g.cfg.Insert + g.cfg.Update + g.cfg.Delete
	x := g.rng.Float64() * total
	op := debezium.OpCreate
	switch {
	case x < g.cfg.Update:
		op = debezium.OpUpdate
	case x < g.cfg.Update+g.cfg.Delete:
		op = debezium.OpDelete
	}
	if op == debezium.OpDelete && g.cfg.UnknownDeletes > 0 && g.rng.Float64() < g.cfg.UnknownDeletes {
		id := g.nextUnknown
		g.nextUnknown++
		g.oracle.keys.add()
		return op, id
	}
	if op != debezium.OpCreate && len(g.live) == 0 {
		op = debezium.OpCreate
	}
	if op == debezium.OpCreate {
		revive := len(g.dead) > 0 && (g.nextNew > g.cfg.Keys || g.rng.Float64() < g.cfg.Revival)
		switch {
		case revive:
			return op, g.dead[g.rng.IntN(len(g.dead))]
		case g.nextNew <= g.cfg.Keys:
			g.nextNew++
			return op, g.nextNew - 1
		default: // every key is live
			op = debezium.OpUpdate
		}
	}
	return op, g.pickLive()
}

func (g *Generator) streamChange() {
	if g.txLeft == 0 {
		g.txID++
		g.txLeft = 1 + g.rng.IntN(g.cfg.MaxTxSize)
		if g.cfg.Clock != nil {
			g.txTs = g.cfg.Clock()
		} else {
			g.txTs = g.cfg.StartTime.Add(time.Duration(g.txIndex) * g.cfg.TxInterval)
		}
		g.txIndex++
	}
	g.streamed++
	g.lsn += 8 * uint64(5+g.rng.IntN(30))
	op, id := g.chooseOp()
	s := g.oracle.keys.at(int(id - 1))
	ch := &Change{Op: op, ID: id, Seq: pgSequence(g.lastCommit, g.lsn, false), SourceTsMs: g.txTs.UnixMilli(), TxID: g.txID}
	c := &g.oracle.counts
	switch op {
	case debezium.OpCreate:
		if s.flags&fDeleted != 0 {
			c.Revivals++
		}
		c.Creates++
		s.valStamp, s.docStamp = g.lsn, g.lsn
		ch.docChanged = true
		g.setLive(id, s)
		s.flags &^= fDeleted
	case debezium.OpUpdate:
		c.Updates++
		s.valStamp = g.lsn
		if g.rng.Float64() < g.cfg.DocChange {
			s.docStamp = g.lsn
			ch.docChanged = true
		} else if !g.tbl.isNull(id, s.docStamp, g.tbl.docCol()) {
			ch.DocUnavailable = true
			c.Placeholders++
		}
	case debezium.OpDelete:
		c.Deletes++
		if s.flags&fExists == 0 {
			c.UnknownDeletes++
		}
		g.setDead(id, s)
		s.flags |= fDeleted
	}
	s.flags = s.flags&^fNullFirst | fExists
	s.first, s.lsn = g.lastCommit, g.lsn
	ch.valStamp, ch.docStamp = s.valStamp, s.docStamp
	g.txLeft--
	if g.txLeft == 0 {
		g.lsn += 48 // the commit record
		g.lastCommit = g.lsn
	}

	ev := g.changeEvent(ch, "false")
	if p := g.pendingByKey[id]; p != nil {
		if unsafeAfter(p.ev.Change, ch) {
			// ch folds a value only p carries: deliver p first.
			p.released = true
			g.release(p)
		} else {
			p.overtaken = true
		}
	}
	var delay int64
	if g.pendingByKey[id] == nil {
		switch x := g.rng.Float64(); {
		case x < g.cfg.OutOfOrder:
			delay = 1 + g.rng.Int64N(int64(g.cfg.OutOfOrderWindow))
		case x < g.cfg.OutOfOrder+g.cfg.Late:
			delay = int64(g.cfg.LateDelay)/2 + g.rng.Int64N(int64(g.cfg.LateDelay)+1)
		}
	}
	if delay > 0 {
		g.held++
		p := &pendingRec{due: g.delivered + delay, order: g.held, ev: ev}
		g.pendingByKey[id] = p
		heap.Push(&g.pending, p)
	} else {
		g.deliver(ev)
	}
	if g.rng.Float64() < g.cfg.Replays {
		g.replay(1 + g.rng.IntN(g.cfg.ReplayLength))
	}
	for len(g.pending) > 0 && g.pending[0].due <= g.delivered {
		p := heap.Pop(&g.pending).(*pendingRec)
		if !p.released {
			p.released = true
			g.release(p)
		}
	}
}

// unsafeAfter reports whether delivering d after e could change the final
// table: e folds a column (takes it from the previous version) that d
// wrote, so e applied without d would fold an older value.
func unsafeAfter(d, e *Change) bool {
	dWritesAll := d.Op == debezium.OpCreate || d.Op == debezium.OpRead
	dWritesDoc := dWritesAll || (d.Op == debezium.OpUpdate && d.docChanged)
	switch {
	case e.Op == debezium.OpDelete:
		return d.Op != debezium.OpDelete // a delete keeps every last value
	case e.Op == debezium.OpUpdate && e.DocUnavailable:
		return dWritesDoc
	}
	return false
}

// release delivers a held record.
func (g *Generator) release(p *pendingRec) {
	if g.pendingByKey[p.ev.Change.ID] == p {
		delete(g.pendingByKey, p.ev.Change.ID)
	}
	if p.overtaken {
		p.ev.Displaced = true
		g.oracle.counts.Displaced++
	}
	g.deliver(p.ev)
}

// deliver queues a first delivery with what follows it: a duplicate, the
// Kafka tombstone of a delete.
func (g *Generator) deliver(ev *Event) {
	g.oracle.counts.Changes++
	g.queue(ev)
	g.remember(ev)
	if g.cfg.Duplicates > 0 && g.rng.Float64() < g.cfg.Duplicates {
		dup := *ev
		dup.Copy, dup.Displaced = Duplicate, false
		g.oracle.counts.Duplicates++
		g.queue(&dup)
	}
	if ev.Change.Op == debezium.OpDelete && g.cfg.KafkaTombstones {
		tomb := &Event{Class: debezium.ClassKafkaTombstone, Change: ev.Change, Record: debezium.Record{
			Topic: g.topic, Key: ev.Record.Key, Timestamp: ev.Record.Timestamp}}
		g.queue(tomb)
		g.remember(tomb)
	}
}

// remember keeps a delivered record in the replay ring.
func (g *Generator) remember(ev *Event) {
	if g.cfg.Replays == 0 {
		return
	}
	g.ring[g.ringNext] = ev
	g.ringNext++
	if g.ringNext == len(g.ring) {
		g.ringNext, g.ringFull = 0, true
	}
}

// replay re-delivers the last n remembered records in their order.
func (g *Generator) replay(n int) {
	have := g.ringNext
	if g.ringFull {
		have = len(g.ring)
	}
	n = min(n, have)
	for i := n; i > 0; i-- {
		src := g.ring[(g.ringNext-i+len(g.ring))%len(g.ring)]
		cp := *src
		cp.Copy, cp.Displaced = Replay, false
		g.oracle.counts.Replays++
		g.queue(&cp)
	}
}

// queue appends a record to the delivery order, assigning its partition
// and offset, and sends a heartbeat when one is due.
func (g *Generator) queue(ev *Event) {
	r := &ev.Record
	r.Partition = partitionOf(r.Key, g.cfg.Partitions)
	r.Offset = g.offsets[r.Partition]
	g.offsets[r.Partition]++
	g.delivered++
	c := &g.oracle.counts
	c.Records++
	c.TableRecords++
	if ev.Class == debezium.ClassChange {
		c.ChangeRecords++
	} else {
		c.KafkaTombstones++
	}
	g.out = append(g.out, ev)
	if g.cfg.HeartbeatEvery > 0 {
		g.sinceHB++
		if g.sinceHB >= g.cfg.HeartbeatEvery {
			g.sinceHB = 0
			g.heartbeat(ev.Record.Timestamp)
		}
	}
}

func (g *Generator) heartbeat(at time.Time) {
	hb := &Event{Class: debezium.ClassHeartbeat, Record: g.enc.heartbeat(at)}
	c := &g.oracle.counts
	c.Records++
	c.Heartbeats++
	if hb.Record.Topic == g.topic {
		hb.Record.Partition = partitionOf(hb.Record.Key, g.cfg.Partitions)
		hb.Record.Offset = g.offsets[hb.Record.Partition]
		g.offsets[hb.Record.Partition]++
		c.TableRecords++
	} else {
		hb.Record.Offset = g.hbOffset
		g.hbOffset++
	}
	g.out = append(g.out, hb)
}

func (g *Generator) changeEvent(ch *Change, snapshot string) *Event {
	if g.keysOnly {
		return &Event{Class: debezium.ClassChange, Change: ch, Record: debezium.Record{Topic: g.topic, Key: g.enc.key(ch.ID)}}
	}
	return &Event{Class: debezium.ClassChange, Change: ch, Record: g.enc.change(ch, snapshot)}
}

// OracleFor computes a workload's oracle without rendering its records'
// values (several times faster than generating them): a process that
// verifies a table another process produced rebuilds the oracle from the
// same configuration. The oracle does not depend on Config.Clock.
func OracleFor(cfg Config) (*Oracle, error) {
	g, err := New(cfg)
	if err != nil {
		return nil, err
	}
	g.keysOnly = true
	var ev Event
	for g.Next(&ev) {
	}
	return g.oracle, nil
}

// partitionOf is Kafka's default partitioner for keyed records:
// murmur2 of the key bytes, made positive, modulo the partition count.
func partitionOf(key []byte, n int32) int32 {
	if n <= 1 {
		return 0
	}
	return int32(murmur2(key)&0x7fffffff) % n
}

// murmur2 is the hash Kafka's Java client partitions keys with.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(data))
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
