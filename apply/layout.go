package apply

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/schema"
)

// The engine columns every table carries after its source columns. Their
// names start with ReservedPrefix, which source columns may not use.
const (
	// ColSeq holds the source sequence as lowercase hex of its
	// order-preserving key, so that string order is sequence order in
	// every engine that reads the table (and min/max stats stay meaningful).
	ColSeq = ReservedPrefix + "seq"
	// ColDeleted is the soft-delete flag of a tombstone.
	ColDeleted = ReservedPrefix + "deleted"
	// ColSourceTs is the source commit time of the change that wrote the row.
	ColSourceTs = ReservedPrefix + "source_ts"
	// ColAppliedAt is when cdcapply committed the row.
	ColAppliedAt = ReservedPrefix + "applied_at"
)

// engineColumns are appended to the source columns in this order.
var engineColumns = []delta.StructField{
	{Name: ColSeq, Type: delta.String, Nullable: false},
	{Name: ColDeleted, Type: delta.Boolean, Nullable: false},
	{Name: ColSourceTs, Type: delta.Timestamp, Nullable: true},
	{Name: ColAppliedAt, Type: delta.Timestamp, Nullable: false},
}

// Layout is a table's columns: the source columns in table order, then the
// engine columns, and which source columns form the key.
type Layout struct {
	// Source are the source columns, in table order.
	Source []delta.StructField
	// Key are indexes into Source of the key columns, in key order.
	Key []int

	index map[string]int
	// proj is the projection of the row type Project saw last: every
	// change decoded with one schema shares its type, so a stream's
	// changes map their columns to the table's without a name lookup.
	proj atomic.Pointer[projection]
}

// projection maps the columns of one row type to a layout's.
type projection struct {
	typ *schema.Type
	// cols holds the layout column of each of typ's fields, -1 for a
	// field the table lacks.
	cols []int
	// key holds, for each of the layout's key columns (Key order), the
	// index of typ's field of that name, -1 if typ has none.
	key []int
	// missing is set when some field of typ is not a layout column;
	// identity when typ's fields are the layout's columns in order.
	missing, identity bool
}

// projectionOf returns the projection of t, cached for the next change.
func (l *Layout) projectionOf(t *schema.Type) *projection {
	if p := l.proj.Load(); p != nil && p.typ == t {
		return p
	}
	p := &projection{typ: t, cols: make([]int, len(t.Fields)), key: make([]int, len(l.Key))}
	for i, f := range t.Fields {
		col, ok := l.index[f.Name]
		if !ok {
			col = -1
			p.missing = true
		}
		p.cols[i] = col
	}
	for j, k := range l.Key {
		p.key[j] = t.Field(l.Source[k].Name)
	}
	p.identity = len(t.Fields) == len(l.Source)
	for i, col := range p.cols {
		p.identity = p.identity && col == i
	}
	l.proj.Store(p)
	return p
}

// NewLayout builds a layout from source columns and key column names.
func NewLayout(source []delta.StructField, key []string) (*Layout, error) {
	l := &Layout{Source: source, index: make(map[string]int, len(source))}
	for i, f := range source {
		if strings.HasPrefix(f.Name, ReservedPrefix) {
			return nil, fmt.Errorf("build layout: source column %q uses the reserved prefix %q", f.Name, ReservedPrefix)
		}
		if _, dup := l.index[f.Name]; dup {
			return nil, fmt.Errorf("build layout: duplicate column %q", f.Name)
		}
		l.index[f.Name] = i
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("build layout: no key columns")
	}
	for _, k := range key {
		i, ok := l.index[k]
		if !ok {
			return nil, fmt.Errorf("build layout: key column %q is not a column of the table", k)
		}
		l.Key = append(l.Key, i)
	}
	return l, nil
}

// LayoutFromTable recovers a layout from an existing table's schema: every
// column before the engine columns is a source column. It refuses a table
// whose engine columns are missing or of another type, since applying into
// it would break the sequence guard.
func LayoutFromTable(st delta.StructType, key []string) (*Layout, error) {
	n := len(st.Fields) - len(engineColumns)
	if n < 0 {
		return nil, fmt.Errorf("check table schema: it lacks cdcapply's engine columns %s", engineNames())
	}
	var source []delta.StructField
	for _, f := range st.Fields {
		if !strings.HasPrefix(f.Name, ReservedPrefix) {
			source = append(source, f)
		}
	}
	for _, want := range engineColumns {
		got, _, ok := st.Field(want.Name)
		if !ok || got.Type.String() != want.Type.String() {
			return nil, fmt.Errorf("check table schema: engine column %s must be %s", want.Name, want.Type)
		}
	}
	return NewLayout(source, key)
}

func engineNames() string {
	names := make([]string, len(engineColumns))
	for i, c := range engineColumns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// Schema returns the full table schema: source then engine columns.
func (l *Layout) Schema() delta.StructType {
	fields := make([]delta.StructField, 0, len(l.Source)+len(engineColumns))
	fields = append(fields, l.Source...)
	fields = append(fields, engineColumns...)
	return delta.StructType{Fields: fields}
}

// Column returns the index of a source column.
func (l *Layout) Column(name string) (int, bool) {
	i, ok := l.index[name]
	return i, ok
}

// KeyNames returns the key column names in key order.
func (l *Layout) KeyNames() []string {
	out := make([]string, len(l.Key))
	for i, k := range l.Key {
		out[i] = l.Source[k].Name
	}
	return out
}

// Missing returns the image's columns the layout does not have yet (schema
// drift), in image order.
func (l *Layout) Missing(row debezium.Row) []schema.Field {
	if row.Type != nil && !l.projectionOf(row.Type).missing {
		return nil // the common case, without a lookup per column
	}
	var out []schema.Field
	for _, f := range row.Columns() {
		if _, ok := l.index[f.Name]; !ok {
			out = append(out, f)
		}
	}
	return out
}

// ProjectError says why a decoded change cannot become a table row; the
// caller quarantines the record with Reason.
type ProjectError struct {
	Reason string
	Detail string
}

func (e *ProjectError) Error() string { return e.Reason + ": " + e.Detail }

// Project turns a decoded row change into the reducer's Change in this
// layout: values in table column order, deletes as images whose non-key
// columns are unavailable, the key encoded canonically and the sequence as
// its order-preserving key. Columns of the table the image lacks are NULL
// for creates and updates (the source no longer sends them), and the image
// must not have columns the layout lacks (extend the layout first). The
// change may take over the image's values (the caller gives ch up).
func (l *Layout) Project(ch *debezium.Change) (*Change, error) {
	out := new(Change)
	if err := l.projectInto(ch, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// projectInto is Project into a change the caller allocated (the engine
// allocates it together with the record it keeps), with its key and
// sequence bytes from arena (nil: allocated each).
func (l *Layout) projectInto(ch *debezium.Change, out *Change, arena *byteArena) error {
	// A Kafka tombstone (kafka_tombstones: delete) is a delete of its key
	// with no sequence (see Change.tombstone) and no image; its source
	// time is the record's Kafka timestamp.
	tomb := ch.Class == debezium.ClassKafkaTombstone
	if !tomb && !ch.Seq.Valid() {
		return &ProjectError{"null_sequence", "the change has no source sequence"}
	}
	*out = Change{
		Pos:            Position{Topic: ch.Pos.Topic, Partition: ch.Pos.Partition, Offset: ch.Pos.Offset},
		Delete:         ch.Op == debezium.OpDelete || tomb,
		tombstone:      tomb,
		SourceTsMicros: ch.SourceTsMs * 1000,
	}
	if !tomb {
		out.Seq = arena.sequence(ch.Seq)
	}
	img := ch.After
	if out.Delete {
		img = ch.Before
	}
	var p *projection
	if img.Present() {
		p = l.projectionOf(img.Type)
	}
	n := len(l.Source)
	shared := !out.Delete && p != nil && p.identity && len(img.Values) == n
	if shared {
		// The image is the row in table order: its values become the
		// change's (capacity cut, so that a schema evolution's append
		// copies instead of writing past them).
		out.Values = img.Values[:n:n]
	} else {
		out.Values = make([]schema.Value, n)
	}
	if out.Delete {
		for i := range out.Values {
			out.Values[i] = schema.Unavailable
		}
	}
	if p != nil {
		for i, col := range p.cols {
			if col < 0 {
				return &ProjectError{"schema_mismatch", fmt.Sprintf("column %q is not in the table", img.Type.Fields[i].Name)}
			}
			if !out.Delete && !shared {
				out.Values[col] = img.Values[i]
			}
		}
	} else if !out.Delete {
		return &ProjectError{"missing_image", fmt.Sprintf("op %s without an after image", ch.Op)}
	}
	// Key values: the row image's key columns, else the record key.
	for j, k := range l.Key {
		name := l.Source[k].Name
		var v schema.Value
		ok := p != nil && p.key[j] >= 0
		if ok {
			v = img.Values[p.key[j]]
		}
		if !ok || v.IsNull() || v.IsUnavailable() {
			v, ok = keyValue(ch.Key, name)
		}
		if !ok || v.IsNull() || v.IsUnavailable() {
			return &ProjectError{"missing_key", fmt.Sprintf("key column %q has no value", name)}
		}
		out.Values[k] = v
	}
	out.Key = arena.key(out.Values, l.Key)
	out.unavail = noteUnavailable(out.Values)
	return nil
}

// headerKey encodes a key carried in a record header (a JSON object of
// the key columns, debezium.HeaderKey) as EncodeKey does, its columns
// typed like rowType's.
func (l *Layout) headerKey(b []byte, rowType *schema.Type) (string, error) {
	if rowType == nil {
		return "", fmt.Errorf("no row type to read the key with")
	}
	k, err := debezium.HeaderKey(b, rowType)
	if err != nil {
		return "", err
	}
	values := make([]schema.Value, len(l.Source))
	for _, col := range l.Key {
		v, ok := keyValue(k, l.Source[col].Name)
		if !ok || v.IsNull() || v.IsUnavailable() {
			return "", fmt.Errorf("key column %q has no value", l.Source[col].Name)
		}
		values[col] = v
	}
	return EncodeKey(values, l.Key), nil
}

func keyValue(k debezium.Key, name string) (schema.Value, bool) {
	for i, n := range k.Names {
		if n == name {
			return k.Values[i], true
		}
	}
	return schema.Value{}, false
}

// EncodeKey encodes the key columns' values canonically: equal keys give
// equal strings whatever image or file they came from. Each value is a
// kind byte and a length-prefixed payload, so no two keys collide.
func EncodeKey(values []schema.Value, key []int) string {
	var buf [64]byte // most keys fit: one allocation, the string's
	b := buf[:0]
	for _, k := range key {
		b = appendKeyValue(b, values[k])
	}
	return string(b)
}

// byteArena holds the key and sequence bytes of the changes the engine
// routes, in blocks, instead of two small allocations per change. Its
// bytes are never written once handed out, and a block lives while any
// change that points into it does (changes are released batch by batch;
// the key index copies what it keeps).
type byteArena struct{ b []byte }

// byteArenaBlock is the size of the arena's blocks.
const byteArenaBlock = 64 << 10

// reserve makes room for n more bytes in the current block, starting a
// new one when it lacks them.
func (a *byteArena) reserve(n int) {
	if cap(a.b)-len(a.b) < n {
		a.b = make([]byte, 0, max(byteArenaBlock, n))
	}
}

// sequence returns s.Key() (from the arena unless a is nil).
func (a *byteArena) sequence(s debezium.Sequence) []byte {
	if a == nil {
		return s.Key()
	}
	a.reserve(2 + int(s.N)*9)
	start := len(a.b)
	a.b = s.AppendKey(a.b) // a longer key than reserved moves to a copy of the block: still never written
	return a.b[start:len(a.b):len(a.b)]
}

// key returns EncodeKey(values, key) (from the arena unless a is nil).
func (a *byteArena) key(values []schema.Value, key []int) string {
	if a == nil {
		return EncodeKey(values, key)
	}
	a.reserve(64)
	start := len(a.b)
	for _, k := range key {
		a.b = appendKeyValue(a.b, values[k])
	}
	if len(a.b) == start {
		return ""
	}
	return unsafe.String(&a.b[start], len(a.b)-start)
}

func appendKeyValue(b []byte, v schema.Value) []byte {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case schema.KindBool, schema.KindInt:
		b = binary.BigEndian.AppendUint64(b, uint64(v.I))
	case schema.KindFloat:
		b = binary.BigEndian.AppendUint64(b, uint64(v.I)) // the float's bits
	case schema.KindString:
		b = binary.AppendUvarint(b, uint64(len(v.S)))
		b = append(b, v.S...)
	case schema.KindBytes:
		b = binary.AppendUvarint(b, uint64(len(v.S)))
		b = append(b, v.S...)
	case schema.KindDecimal:
		// Scale is the column's, so equal numbers have equal unscaled values.
		b = binary.BigEndian.AppendUint64(b, uint64(v.Hi))
		b = binary.BigEndian.AppendUint64(b, uint64(v.I))
	case schema.KindList, schema.KindStruct, schema.KindMap:
		b = binary.AppendUvarint(b, uint64(len(v.Elems())))
		for _, e := range v.Elems() {
			b = appendKeyValue(b, e)
		}
	}
	return b
}

// SeqText renders a sequence key as stored in ColSeq.
func SeqText(seq []byte) string { return hex.EncodeToString(seq) }

func parseSeqText(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("parse sequence %q: %w", s, err)
	}
	return b, nil
}
