package apply

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/schema"
)

// Position is where a record sits in Kafka. It breaks ties between changes
// with equal source sequences, deterministically.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Compare orders positions by topic, partition, then offset.
func (p Position) Compare(o Position) int {
	switch {
	case p.Topic < o.Topic:
		return -1
	case p.Topic > o.Topic:
		return 1
	case p.Partition < o.Partition:
		return -1
	case p.Partition > o.Partition:
		return 1
	case p.Offset < o.Offset:
		return -1
	case p.Offset > o.Offset:
		return 1
	}
	return 0
}

// Change is one keyed row change as the reducer and the merge see it: the
// decoder's output projected onto the table's columns.
type Change struct {
	// Key is the canonical encoding of the key columns' values.
	Key string
	// Seq is the order-preserving encoding of the source sequence:
	// bytes.Compare on two Seqs orders them as the source did.
	Seq []byte
	Pos Position
	// Delete marks a delete; its non-key Values are Unavailable, so they
	// fold from the row's previous version like any unchanged column.
	Delete bool
	// tombstone marks a delete made of a Kafka tombstone (kafka_tombstones:
	// delete). It has no source sequence: Reduce gives it the greatest of
	// the key's changes before it in the batch, planning at least the
	// stored row's, and it deletes a live row of the same sequence.
	tombstone bool
	// SourceTsMicros is the source commit time in microseconds since the epoch.
	SourceTsMicros int64
	// Values holds the table's source columns in table order. A value may
	// be schema.Unavailable: "unchanged since the previous version".
	Values []schema.Value
	// rare holds what few changes carry (nil for the rest, so that a
	// Change stays 128 bytes, two cache lines, in the routed blocks): the
	// Kafka record kept for quarantine and a moved row's old key.
	rare *changeRare
	// unavail notes the columns Values leaves unavailable, in
	// Reduced.unavail's form, set by Project while the decoder's values
	// are still in cache: Reduce then need not read a winner's values
	// (in key order they are scattered over the batch, and reading them
	// was Reduce's largest cost). Zero: not noted, Reduce scans.
	unavail uint64
}

// changeRare is what few changes carry besides their values.
type changeRare struct {
	// raw is the Kafka record the change came from, kept so that a change
	// refused at planning time (late beyond the purge horizon) can still
	// be quarantined as it arrived (see keepRaw).
	raw *debezium.Record
	// oldKey is the key the row had before an update changed its primary
	// key (Debezium's create event for the new key names it in
	// debezium.OldKeyHeader), set only when the change leaves columns
	// unavailable: an unchanged TOASTed column of the moved row, which
	// planning fills from the old key's last version (fillFromOldKeys).
	oldKey string
}

// Raw is the Kafka record kept with the change (nil: released when it
// was routed, or a change built directly).
func (c *Change) Raw() *debezium.Record {
	if c.rare == nil {
		return nil
	}
	return c.rare.raw
}

// OldKey is the key a moved row had before its primary key changed ("":
// not a move, or nothing of it to fill).
func (c *Change) OldKey() string {
	if c.rare == nil {
		return ""
	}
	return c.rare.oldKey
}

func (c *Change) setRaw(r *debezium.Record) {
	if c.rare == nil {
		c.rare = new(changeRare)
	}
	c.rare.raw = r
}

func (c *Change) setOldKey(k string) {
	if c.rare == nil {
		c.rare = new(changeRare)
	}
	c.rare.oldKey = k
}

// noteUnavailable returns values' unavailable columns in Reduced.unavail's
// form (bit 0 set, bit 1+c for column c), or 0 when a column past
// maxNotedColumn is unavailable.
func noteUnavailable(values []schema.Value) uint64 {
	m := uint64(1)
	for col := range values {
		if values[col].Kind == schema.KindUnavailable {
			if col > maxNotedColumn {
				return 0
			}
			m |= 1 << (col + 1)
		}
	}
	return m
}

// newer reports whether c is ordered after o: by sequence, then position.
func (c *Change) newer(o *Change) bool {
	if d := bytes.Compare(c.Seq, o.Seq); d != 0 {
		return d > 0
	}
	return c.Pos.Compare(o.Pos) > 0
}

// deletesStored reports whether c is a Kafka tombstone that deletes a
// stored row of sequence seq: a live one of the same sequence (planning
// raised the tombstone's to it).
func (c *Change) deletesStored(seq []byte, deleted bool) bool {
	return c.tombstone && !deleted && bytes.Equal(c.Seq, seq)
}

// Fill is a value for a column the winning change left unavailable, taken
// from the newest older change of the same key in the batch.
type Fill struct {
	Column int
	Value  schema.Value
	Seq    []byte
}

// Reduced is the outcome of reducing one key within a batch.
type Reduced struct {
	// Winner is the newest change of the key (source sequence, then position).
	Winner *Change
	// Fills has, for each column Winner left unavailable, the value of the
	// newest older change in the batch that carried one, if any.
	Fills []Fill
	// Changes lists every change of the key in the batch, oldest first.
	Changes []*Change
	// unavail notes the columns Winner left unavailable, set by Reduce
	// while the winner's values are in cache: bit 0 says it is noted,
	// bit 1+c that column c is unavailable. Zero (a Reduced built
	// otherwise, or a column past maxNotedColumn unavailable): scan.
	unavail uint64
	// prefix is the key's keyPrefix (set by Reduce; merging the shards
	// compares it before the keys).
	prefix keyPrefix
	// moved is set by Reduce when one of Changes moved a row from another
	// key (Change.OldKey): planning looks at those keys' changes only.
	moved bool
}

// maxNotedColumn is the last column Reduced.unavail can note.
const maxNotedColumn = 62

// unavailableColumns lists the columns the winner left unavailable.
func (r *Reduced) unavailableColumns() []int {
	var cols []int
	if r.unavail != 0 {
		for m := r.unavail >> 1; m != 0; m &= m - 1 {
			cols = append(cols, bits.TrailingZeros64(m))
		}
		return cols
	}
	for c, v := range r.Winner.Values {
		if v.IsUnavailable() {
			cols = append(cols, c)
		}
	}
	return cols
}

// Reduce groups a batch by key and picks each key's winner by source
// sequence (never arrival order), resolving unavailable columns from older
// changes in the batch. The result is sorted by key so that plans, files and
// commits are deterministic for a given batch whatever the arrival order.
func Reduce(batch []*Change) []Reduced {
	n := min(runtime.GOMAXPROCS(0), len(batch)/reduceShardMin)
	if n < 2 {
		return reduceShard(batch)
	}
	// Each key's changes go to one shard, in batch order; the shards'
	// sorted outcomes merge into one.
	seed := maphash.MakeSeed()
	shards := make([][]*Change, n)
	for i := range shards {
		shards[i] = make([]*Change, 0, len(batch)/n+len(batch)/(4*n))
	}
	for _, c := range batch {
		s := maphash.String(seed, c.Key) % uint64(n)
		shards[s] = append(shards[s], c)
	}
	outs := make([][]Reduced, n)
	var wg sync.WaitGroup
	for i := range shards {
		wg.Go(func() { outs[i] = reduceShard(shards[i]) })
	}
	wg.Wait()
	return mergeByKey(outs)
}

// reduceShardMin is the fewest changes per goroutine Reduce splits a
// batch into: grouping and sorting a batch's keys is one of the serial
// steps of its apply (about 11 ms for 18k changes), while the loop has
// usually read the next batch and waits.
const reduceShardMin = 4096

// lessKey orders two reduced keys by their prefixes, then their keys.
func (r *Reduced) lessKey(o *Reduced) bool {
	if d := r.prefix.compare(o.prefix); d != 0 {
		return d < 0
	}
	return r.Winner.Key < o.Winner.Key
}

// mergeByKey merges outcomes sorted by key, whose keys are disjoint.
func mergeByKey(outs [][]Reduced) []Reduced {
	total := 0
	for _, o := range outs {
		total += len(o)
	}
	merged := make([]Reduced, 0, total)
	for len(merged) < total {
		best := -1
		for i, o := range outs {
			if len(o) > 0 && (best < 0 || o[0].lessKey(&outs[best][0])) {
				best = i
			}
		}
		merged = append(merged, outs[best][0])
		outs[best] = outs[best][1:]
	}
	return merged
}

// reduceShard is Reduce on one goroutine.
func reduceShard(batch []*Change) []Reduced {
	// Group without a slice per key: number the keys in arrival order and
	// count each key's changes, sort the distinct keys, then place the
	// changes key after key into one array (batch order within a key).
	ids := make(map[string]int32, len(batch))
	groups := make([]keyGroup, 0, len(batch))
	keys := make([]string, 0, len(batch))
	gid := make([]int32, len(batch))
	moved, tombs := false, false
	for i, c := range batch {
		moved = moved || c.rare != nil && c.rare.oldKey != "" // rare sits by unavail
		tombs = tombs || c.tombstone
		id, ok := ids[c.Key]
		if !ok {
			id = int32(len(groups))
			ids[c.Key] = id
			groups = append(groups, keyGroup{prefix: prefixOf(c.Key), id: id, unavail: c.unavail})
			keys = append(keys, c.Key)
		}
		gid[i] = id
		groups[id].n++
	}
	groups = sortGroups(groups, keys)
	next := make([]int32, len(groups)) // by id: where its next change goes
	off := int32(0)
	for _, kg := range groups {
		next[kg.id] = off
		off += kg.n
	}
	placed := make([]*Change, len(batch))
	for i, c := range batch {
		placed[next[gid[i]]] = c
		next[gid[i]]++
	}
	out := make([]Reduced, 0, len(groups))
	off = 0
	for _, kg := range groups {
		g := placed[off : off+kg.n : off+kg.n]
		off += kg.n
		unavail := kg.unavail // the key's only change's
		if tombs && len(g) > 1 {
			inheritSeqs(g)
		}
		if len(g) > 1 {
			slices.SortFunc(g, func(a, b *Change) int {
				switch {
				case a.newer(b):
					return 1
				case b.newer(a):
					return -1
				}
				return 0
			})
			unavail = g[len(g)-1].unavail
		}
		w := g[len(g)-1]
		r := Reduced{Winner: w, Changes: g, unavail: unavail, prefix: kg.prefix}
		if r.unavail == 0 { // not noted by Project
			r.unavail = noteUnavailable(w.Values)
		}
		switch {
		case len(g) == 1: // only older changes of the batch can fill
		case r.unavail != 0:
			for m := r.unavail >> 1; m != 0; m &= m - 1 {
				r.fill(bits.TrailingZeros64(m))
			}
		default: // a column past maxNotedColumn
			for _, col := range r.unavailableColumns() {
				r.fill(col)
			}
		}
		out = append(out, r)
	}
	if moved { // rare: a primary-key change with unavailable columns
		for i := range out {
			out[i].moved = slices.ContainsFunc(out[i].Changes, func(c *Change) bool { return c.OldKey() != "" })
		}
	}
	return out
}

// inheritSeqs gives each Kafka tombstone among a key's changes (in batch
// order, which within a partition is the topic's) the greatest sequence
// of the changes before it: a tombstone has none of its own, and deletes
// what came before it. Ordered by sequence, then position, it follows
// them (the delete event it trails, or the last update of a stream whose
// deletes are tombstones alone) and precedes any later change (a row
// inserted again). A tombstone before every sequenced change keeps none.
func inheritSeqs(g []*Change) {
	var top []byte
	for _, c := range g {
		switch {
		case !c.tombstone:
			if bytes.Compare(c.Seq, top) > 0 {
				top = c.Seq
			}
		case top != nil:
			c.Seq = top
		}
	}
}

// keyGroup is one distinct key of a batch being reduced: its prefix, its
// number in arrival order, its count of changes and its first change's
// unavailable columns. It holds no pointer (reduceShard keeps the keys by
// number), so sorting moves it without write barriers, and Reduce reads
// a key's only change (the usual case) no more once it is grouped: in
// key order the changes lie scattered over the batch.
type keyGroup struct {
	prefix  keyPrefix
	unavail uint64
	id, n   int32
}

// sortGroups sorts groups by key: by prefix with a radix sort (one stable
// counting pass per byte position, only positions where the prefixes
// differ: three for a batch of integer keys below 2^24), then runs of
// equal prefixes (keys longer than 16 bytes, or equal but for trailing
// zero bytes) by their bytes. It returns groups or a scratch copy. A
// comparison sort of the keys was Reduce's largest step.
func sortGroups(groups []keyGroup, keys []string) []keyGroup {
	if len(groups) < 64 {
		slices.SortFunc(groups, func(a, b keyGroup) int {
			if d := a.prefix.compare(b.prefix); d != 0 {
				return d
			}
			return strings.Compare(keys[a.id], keys[b.id])
		})
		return groups
	}
	var diff keyPrefix // the bits where some prefix differs from the first
	first := groups[0].prefix
	for i := range groups {
		diff[0] |= groups[i].prefix[0] ^ first[0]
		diff[1] |= groups[i].prefix[1] ^ first[1]
	}
	var counts [256]int
	scratch := make([]keyGroup, len(groups))
	for d := range 16 { // d 0 is the prefix's last byte
		word, shift := 1-d/8, 8*(d%8)
		if byte(diff[word]>>shift) == 0 {
			continue
		}
		clear(counts[:])
		for i := range groups {
			counts[byte(groups[i].prefix[word]>>shift)]++
		}
		off := 0
		for b, n := range counts {
			counts[b] = off
			off += n
		}
		for i := range groups {
			b := byte(groups[i].prefix[word] >> shift)
			scratch[counts[b]] = groups[i]
			counts[b]++
		}
		groups, scratch = scratch, groups
	}
	for i := 0; i < len(groups); {
		j := i + 1
		for j < len(groups) && groups[j].prefix == groups[i].prefix {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(groups[i:j], func(a, b keyGroup) int { return strings.Compare(keys[a.id], keys[b.id]) })
		}
		i = j
	}
	return groups
}

// reduceAgain works out r's unavailable columns and fills again after
// some of its changes' values were filled in (fillFromOldKeys).
func (r *Reduced) reduceAgain() {
	r.unavail = noteUnavailable(r.Winner.Values)
	r.Fills = r.Fills[:0]
	for _, col := range r.unavailableColumns() {
		r.fill(col)
	}
}

// fill notes, for column col that the winner left unavailable, the value
// of the newest older change in the batch that carried one.
func (r *Reduced) fill(col int) {
	g, w := r.Changes, r.Winner
	for k := len(g) - 2; k >= 0; k-- {
		// An older change with the same sequence is a replay of the
		// winner, not a previous version (unless the winner is a Kafka
		// tombstone, whose sequence is the one of the change it follows).
		if bytes.Equal(g[k].Seq, w.Seq) && !w.tombstone {
			continue
		}
		if ov := g[k].Values[col]; !ov.IsUnavailable() {
			r.Fills = append(r.Fills, Fill{Column: col, Value: ov, Seq: g[k].Seq})
			return
		}
	}
}

// keyPrefix is a key's first 16 bytes as two big-endian words, zero
// padded: comparing prefixes orders keys as comparing their bytes does,
// except that equal prefixes need the keys themselves compared.
type keyPrefix [2]uint64

func prefixOf(key string) keyPrefix {
	var b [16]byte
	copy(b[:], key)
	return keyPrefix{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (p keyPrefix) compare(o keyPrefix) int {
	switch {
	case p[0] != o[0]:
		return cmp.Compare(p[0], o[0])
	case p[1] != o[1]:
		return cmp.Compare(p[1], o[1])
	}
	return 0
}

// StoredRow is a key's current row in the table.
type StoredRow struct {
	Seq     []byte
	Deleted bool
	Values  []schema.Value
}

// RowKind says what applying a reduced key does to the table.
type RowKind uint8

// The row kinds, as counted in metrics and commitInfo.
const (
	// RowStale: the table already holds this sequence or a newer one.
	RowStale RowKind = iota
	// RowInsert: a new key.
	RowInsert
	// RowUpdate: a live key changes.
	RowUpdate
	// RowDelete: a key becomes a tombstone (known or not).
	RowDelete
	// RowRevive: a tombstoned key comes back with a newer change.
	RowRevive
)

var rowKindNames = [...]string{"stale", "insert", "update", "delete", "revive"}

func (k RowKind) String() string { return rowKindNames[k] }

// Resolve decides what the key's row becomes given the table's current row
// (nil when the table has none). A winner whose sequence is not strictly
// greater than the stored one changes nothing (equal is a replay). Every
// column the winner left unavailable takes the value of the newest version
// older than the winner that carried one, from the batch or the table,
// whichever is newer; with none, it is NULL (never the placeholder).
// unresolved counts such NULLs.
func (r *Reduced) Resolve(stored *StoredRow) (kind RowKind, values []schema.Value, unresolved int) {
	w := r.Winner
	if stored != nil && bytes.Compare(w.Seq, stored.Seq) <= 0 && !w.deletesStored(stored.Seq, stored.Deleted) {
		return RowStale, nil, 0
	}
	if r.unavail == 1 {
		// A full image is the row as it is; the row shares the winner's
		// values, which nothing writes once the batch is reduced.
		return r.kind(stored), w.Values, 0
	}
	values = make([]schema.Value, len(w.Values))
	copy(values, w.Values)
	fi := 0
	for col, v := range values {
		if !v.IsUnavailable() {
			continue
		}
		var fill *Fill
		for fi < len(r.Fills) && r.Fills[fi].Column < col {
			fi++
		}
		if fi < len(r.Fills) && r.Fills[fi].Column == col {
			fill = &r.Fills[fi]
		}
		switch {
		case fill != nil && (stored == nil || bytes.Compare(fill.Seq, stored.Seq) > 0):
			values[col] = fill.Value
		case stored != nil && col < len(stored.Values) && !stored.Values[col].IsUnavailable():
			values[col] = stored.Values[col]
		case fill != nil:
			values[col] = fill.Value
		default:
			values[col] = schema.Null
			unresolved++
		}
	}
	return r.kind(stored), values, unresolved
}

// kind is what applying the winner does to stored (not stale).
func (r *Reduced) kind(stored *StoredRow) RowKind {
	switch {
	case r.Winner.Delete:
		return RowDelete
	case stored == nil:
		return RowInsert
	case stored.Deleted:
		return RowRevive
	default:
		return RowUpdate
	}
}
