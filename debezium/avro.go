package debezium

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cdcapply/cdcapply/schema"
)

var errAvro = errors.New("avro binary")

// The role of a top-level field of an Avro value, decided once per schema.
const (
	roleSkip = iota
	roleBefore
	roleAfter
	roleSource
	roleOp
	roleTsMs
	roleStatus
	roleTxID
	roleEventCount
	roleDDL
	roleOther
	roleMetaOp      // flattened __op
	roleMetaDeleted // flattened __deleted
	roleMetaTsMs    // flattened __ts_ms
	roleMetaSrc     // flattened __<source field>, src id in arg
	roleMetaExtra   // flattened configured field, extra index in arg
	roleColumn      // flattened column, row index in arg
)

type avroRole struct {
	role int
	arg  int
}

// avroPlan is the decode plan of one writer schema (one registry id).
type avroPlan struct {
	root          *schema.AvroNode
	err           error
	roles         []avroRole
	before, after *schema.Type
	row           *schema.Type // flattened row type
	srcRoles      []avroRole   // per source record field: roleMetaSrc/roleMetaExtra/roleSkip
	tables        tableCache
}

func (d *Decoder) compileAvro(text string) *avroPlan {
	root, err := schema.ParseAvro(text, &d.cfg.opts)
	if err != nil {
		return &avroPlan{err: err}
	}
	if root.Kind != schema.AvroRecord {
		return &avroPlan{err: fmt.Errorf("top-level avro type is not a record")}
	}
	p := &avroPlan{root: root, roles: make([]avroRole, len(root.Fields))}
	// Transaction metadata keeps its own shape under the flattening
	// transform; its fields (status, id, event_count) are never columns.
	flat := d.cfg.envelope == EnvelopeFlattened && root.Field("status") < 0 &&
		!(len(root.Fields) > 0 && heartbeatShape(root.Fields[0].Name, len(root.Fields))) &&
		!messageShape(root.Field("op"), root.Field("message"))
	var cols []schema.Field
	for i, f := range root.Fields {
		if flat {
			if x, ok := strings.CutPrefix(f.Name, "__"); ok {
				switch x {
				case "op":
					p.roles[i] = avroRole{role: roleMetaOp}
				case "deleted":
					p.roles[i] = avroRole{role: roleMetaDeleted}
				case "ts_ms":
					p.roles[i] = avroRole{role: roleMetaTsMs}
				default:
					if id := srcID([]byte(strings.TrimPrefix(x, "source_"))); id >= 0 {
						p.roles[i] = avroRole{role: roleMetaSrc, arg: id}
					} else if j := indexOf(d.cfg.extra, f.Name); j >= 0 {
						p.roles[i] = avroRole{role: roleMetaExtra, arg: j}
					}
				}
				continue
			}
			switch f.Name {
			case "ddl", "tableChanges", "historyRecord":
				p.roles[i] = avroRole{role: roleDDL}
				continue
			}
			p.roles[i] = avroRole{role: roleColumn, arg: len(cols)}
			cols = append(cols, schema.Field{Name: f.Name, Type: f.Node.Col})
			continue
		}
		switch f.Name {
		case "before", "after":
			n, _ := f.Node.Unwrap()
			var rt *schema.Type
			switch n.Kind {
			case schema.AvroRecord:
				rt = n.Col
			case schema.AvroString:
				rt = schema.NewStruct("", []schema.Field{{Name: DocumentColumn, Type: n.Col}}, &d.cfg.opts)
			default:
				p.roles[i] = avroRole{role: roleOther}
				continue
			}
			if f.Name == "before" {
				p.roles[i], p.before = avroRole{role: roleBefore}, rt
			} else {
				p.roles[i], p.after = avroRole{role: roleAfter}, rt
			}
		case "source":
			p.roles[i] = avroRole{role: roleSource}
			if n, _ := f.Node.Unwrap(); n.Kind == schema.AvroRecord {
				p.srcRoles = make([]avroRole, len(n.Fields))
				for j, sf := range n.Fields {
					if id := srcID([]byte(sf.Name)); id >= 0 {
						p.srcRoles[j] = avroRole{role: roleMetaSrc, arg: id}
					} else if k := indexOf(d.cfg.extra, sf.Name); k >= 0 {
						p.srcRoles[j] = avroRole{role: roleMetaExtra, arg: k}
					}
				}
			}
		case "op":
			p.roles[i] = avroRole{role: roleOp}
		case "ts_ms":
			p.roles[i] = avroRole{role: roleTsMs}
		case "status":
			p.roles[i] = avroRole{role: roleStatus}
		case "id":
			p.roles[i] = avroRole{role: roleTxID}
		case "event_count":
			p.roles[i] = avroRole{role: roleEventCount}
		case "ddl", "tableChanges", "historyRecord":
			p.roles[i] = avroRole{role: roleDDL}
		default:
			p.roles[i] = avroRole{role: roleOther}
		}
	}
	if flat {
		p.row = schema.NewStruct(root.Name, cols, &d.cfg.opts)
	}
	return p
}

// heartbeatShape reports whether a value whose first field is called first
// and which has n fields is a heartbeat: Debezium's heartbeat value is
// {ts_ms} alone, which the flattening transform passes through.
func heartbeatShape(first string, n int) bool { return n == 1 && first == "ts_ms" }

// messageShape reports whether a value with fields op and message at these
// indexes (-1: absent) is a PostgreSQL logical decoding message, which the
// flattening transform passes through unchanged (its schema is not an
// Envelope), so it is read in envelope shape.
func messageShape(op, message int) bool { return op >= 0 && message >= 0 }

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// avroPlanFor returns the plan for the wire-format payload's schema id.
func (d *Decoder) avroPlanFor(ctx context.Context, b []byte, pos Position, malformed Reason) (*avroPlan, []byte, *Rejection) {
	if len(b) < 5 || b[0] != 0 {
		return nil, nil, reject(pos, malformed, nil, "not the Confluent wire format (magic byte 0 and a schema id)")
	}
	id := int(binary.BigEndian.Uint32(b[1:5]))
	d.mu.Lock()
	p := d.avro[id]
	d.mu.Unlock()
	if p == nil {
		text, err := d.cfg.registry.SchemaText(ctx, id)
		if err != nil {
			if errors.Is(err, ErrUnknownSchema) {
				return nil, nil, reject(pos, ReasonUnknownSchemaID, err, "schema id %d", id)
			}
			return nil, nil, reject(pos, ReasonRegistryUnavailable, err, "schema id %d", id)
		}
		p = d.compileAvro(text)
		d.mu.Lock()
		d.avro[id] = p
		d.mu.Unlock()
	}
	if p.err != nil {
		return nil, nil, reject(pos, ReasonBadSchema, p.err, "schema id %d", id)
	}
	return p, b[5:], nil
}

func (d *Decoder) avroValue(ctx context.Context, rec *Record, env *envelope) *Rejection {
	p, body, rej := d.avroPlanFor(ctx, rec.Value, env.pos, ReasonMalformedAvro)
	if rej != nil {
		return rej
	}
	r := avroReader{b: body, slab: env.slab}
	env.tables = &p.tables
	var vals []schema.Value
	if p.row != nil {
		vals = r.slab.values(len(p.row.Fields))
		env.rowType = p.row
	} else {
		env.rowType = p.after
		if env.rowType == nil {
			env.rowType = p.before
		}
	}
	for i, f := range p.root.Fields {
		role := p.roles[i]
		switch role.role {
		case roleBefore, roleAfter:
			rt := p.after
			if role.role == roleBefore {
				rt = p.before
			}
			row, err := avroRow(&r, f.Node, rt)
			if err != nil {
				return valueRejection(env.pos, err, f.Name+" image")
			}
			if row.Present() {
				env.sawRow = true
			}
			if role.role == roleBefore {
				env.before = row
			} else {
				env.after = row
			}
		case roleSource:
			n, branch := f.Node.Unwrap()
			if branch >= 0 {
				if idx := r.long(); idx != int64(branch) {
					if r.err == nil && idx != int64(f.Node.NullBranch) {
						r.fail("bad union branch %d", idx)
					}
					continue
				}
			}
			env.sawSource = true
			for j, sf := range n.Fields {
				sr := avroRole{}
				if j < len(p.srcRoles) {
					sr = p.srcRoles[j]
				}
				switch sr.role {
				case roleMetaSrc:
					env.src[sr.arg] = avroScalar(&r, sf.Node)
				case roleMetaExtra:
					if env.extra == nil {
						env.extra = make([]srcVal, len(d.cfg.extra))
					}
					env.extra[sr.arg] = avroScalar(&r, sf.Node)
				default:
					r.skip(sf.Node, 0)
				}
			}
		case roleOp, roleMetaOp:
			v := avroScalar(&r, f.Node)
			if v.kind == svString {
				env.sawOp = true
				env.op = v.bytes()
			}
		case roleTsMs, roleMetaTsMs:
			env.sawTs = true
			if v := avroScalar(&r, f.Node); v.kind == svInt {
				env.tsMs = v.i
			}
		case roleStatus:
			env.sawStatus = true
			if v := avroScalar(&r, f.Node); v.kind == svString {
				env.tx.Status = string(v.bytes())
			}
		case roleTxID:
			if v := avroScalar(&r, f.Node); v.kind == svString {
				env.tx.ID = string(v.bytes())
			}
		case roleEventCount:
			if v := avroScalar(&r, f.Node); v.kind == svInt {
				env.tx.EventCount = v.i
			}
		case roleDDL:
			env.sawDDL = true
			r.skip(f.Node, 0)
		case roleMetaDeleted:
			v := avroScalar(&r, f.Node)
			env.deleted = v.kind == svString && string(v.bytes()) == "true"
		case roleMetaSrc:
			env.src[role.arg] = avroScalar(&r, f.Node)
		case roleMetaExtra:
			if env.extra == nil {
				env.extra = make([]srcVal, len(d.cfg.extra))
			}
			env.extra[role.arg] = avroScalar(&r, f.Node)
		case roleColumn:
			v, err := avroVal(&r, f.Node, 0)
			if err != nil {
				return valueRejection(env.pos, err, "column "+f.Name)
			}
			vals[role.arg] = v
			env.sawRow = true
		default:
			env.others++
			r.skip(f.Node, 0)
		}
		if r.err != nil {
			return reject(env.pos, ReasonMalformedAvro, r.err, "field %s", f.Name)
		}
	}
	if r.i != len(r.b) {
		return reject(env.pos, ReasonMalformedAvro, nil, "%d bytes after the record", len(r.b)-r.i)
	}
	if p.row != nil && env.sawRow {
		env.after = Row{Type: p.row, Values: vals}
	}
	return nil
}

// avroRow reads an optional row record (or document string).
func avroRow(r *avroReader, n *schema.AvroNode, rt *schema.Type) (Row, error) {
	if inner, _ := n.Unwrap(); inner.Kind == schema.AvroString {
		v, err := avroVal(r, n, 0)
		if err != nil || v.IsNull() {
			return Row{}, err
		}
		return Row{Type: rt, Values: []schema.Value{v}}, nil
	}
	rec, branch := n.Unwrap()
	if branch >= 0 {
		idx := r.long()
		if r.err != nil {
			return Row{}, r.err
		}
		if idx == int64(n.NullBranch) {
			return Row{}, nil
		}
		if idx != int64(branch) {
			r.fail("bad union branch %d", idx)
			return Row{}, r.err
		}
	}
	vals := r.slab.values(len(rec.Fields))
	for i, f := range rec.Fields {
		v, err := avroVal(r, f.Node, 0)
		if err != nil {
			return Row{}, fmt.Errorf("column %s: %w", f.Name, err)
		}
		vals[i] = v
	}
	return Row{Type: rt, Values: vals}, nil
}

// avroVal reads one value and converts it by the node's column type.
func avroVal(r *avroReader, n *schema.AvroNode, depth int) (schema.Value, error) {
	if depth > 64 {
		r.fail("nested too deep")
		return schema.Value{}, r.err
	}
	if n.Kind == schema.AvroUnion {
		idx := r.long()
		if r.err != nil {
			return schema.Value{}, r.err
		}
		if idx < 0 || idx >= int64(len(n.Branches)) {
			r.fail("union branch %d of %d", idx, len(n.Branches))
			return schema.Value{}, r.err
		}
		if int(idx) == n.NullBranch {
			return schema.Null, nil
		}
		n = n.Branches[idx]
	}
	t := n.Col
	switch n.Kind {
	case schema.AvroNull:
		return schema.Null, nil
	case schema.AvroBoolean:
		if r.i >= len(r.b) {
			r.fail("short boolean")
			return schema.Value{}, r.err
		}
		v := r.b[r.i]
		r.i++
		if v > 1 {
			r.fail("boolean byte %d", v)
			return schema.Value{}, r.err
		}
		return t.FromBool(v == 1)
	case schema.AvroInt, schema.AvroLong:
		v := r.long()
		if r.err != nil {
			return schema.Value{}, r.err
		}
		if n.Kind == schema.AvroInt && (v < math.MinInt32 || v > math.MaxInt32) {
			r.fail("int %d out of 32 bits", v)
			return schema.Value{}, r.err
		}
		return t.FromInt(v)
	case schema.AvroFloat:
		if len(r.b)-r.i < 4 {
			r.fail("short float")
			return schema.Value{}, r.err
		}
		v := math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.i:]))
		r.i += 4
		return t.FromFloat(float64(v))
	case schema.AvroDouble:
		if len(r.b)-r.i < 8 {
			r.fail("short double")
			return schema.Value{}, r.err
		}
		v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:]))
		r.i += 8
		return t.FromFloat(v)
	case schema.AvroBytes:
		b := r.bytes()
		if r.err != nil {
			return schema.Value{}, r.err
		}
		return t.FromBytes(b)
	case schema.AvroFixed:
		b := r.fixed(n.Size)
		if r.err != nil {
			return schema.Value{}, r.err
		}
		return t.FromBytes(b)
	case schema.AvroString:
		b := r.bytes()
		if r.err != nil {
			return schema.Value{}, r.err
		}
		return t.FromString(string(b))
	case schema.AvroEnum:
		idx := r.long()
		if r.err != nil {
			return schema.Value{}, r.err
		}
		if idx < 0 || idx >= int64(len(n.Symbols)) {
			r.fail("enum index %d of %d", idx, len(n.Symbols))
			return schema.Value{}, r.err
		}
		return t.FromString(n.Symbols[idx])
	case schema.AvroRecord:
		vals := r.slab.values(len(n.Fields))
		for i, f := range n.Fields {
			v, err := avroVal(r, f.Node, depth+1)
			if err != nil {
				return schema.Value{}, err
			}
			vals[i] = v
		}
		return t.FinishStruct(vals)
	case schema.AvroArray:
		var elems []schema.Value
		for {
			count := r.blockCount(n.Items)
			if r.err != nil {
				return schema.Value{}, r.err
			}
			if count == 0 {
				break
			}
			for range count {
				v, err := avroVal(r, n.Items, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				elems = append(elems, v)
			}
		}
		return t.FinishList(elems), nil
	case schema.AvroMap:
		var pairs []schema.Value
		for {
			count := r.blockCount(n.Values)
			if r.err != nil {
				return schema.Value{}, r.err
			}
			if count == 0 {
				break
			}
			for range count {
				k := r.bytes()
				if r.err != nil {
					return schema.Value{}, r.err
				}
				kv, err := t.Key.FromString(string(k))
				if err != nil {
					return schema.Value{}, err
				}
				v, err := avroVal(r, n.Values, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				pairs = append(pairs, kv, v)
			}
		}
		return t.FinishMap(pairs), nil
	}
	r.fail("unexpected node kind %d", n.Kind)
	return schema.Value{}, r.err
}

// avroScalar reads a source or metadata field as a sequence scalar.
func avroScalar(r *avroReader, n *schema.AvroNode) srcVal {
	if n.Kind == schema.AvroUnion {
		idx := r.long()
		if r.err != nil || idx < 0 || idx >= int64(len(n.Branches)) {
			r.fail("bad union branch %d", idx)
			return srcVal{}
		}
		if int(idx) == n.NullBranch {
			return srcVal{kind: svNull}
		}
		n = n.Branches[idx]
	}
	switch n.Kind {
	case schema.AvroInt, schema.AvroLong:
		return srcVal{kind: svInt, i: r.long()}
	case schema.AvroString:
		return strVal(r.bytes(), false)
	case schema.AvroBoolean:
		if r.i >= len(r.b) {
			r.fail("short boolean")
			return srcVal{}
		}
		v := r.b[r.i]
		r.i++
		if v == 1 {
			return strVal(trueBytes, false)
		}
		return strVal(falseBytes, false)
	case schema.AvroEnum:
		idx := r.long()
		if idx < 0 || idx >= int64(len(n.Symbols)) {
			r.fail("enum index %d", idx)
			return srcVal{}
		}
		return strVal([]byte(n.Symbols[idx]), false)
	}
	r.skip(n, 0)
	return srcVal{kind: svOther}
}

// avroKey reads an Avro record key; its fields are the key columns.
func (d *Decoder) avroKey(ctx context.Context, rec *Record, env *envelope, key *Key) *Rejection {
	p, body, rej := d.avroPlanFor(ctx, rec.Key, env.pos, ReasonMalformedKey)
	if rej != nil {
		return rej
	}
	r := avroReader{b: body, slab: env.slab}
	key.Names = p.root.Col.FieldNames() // shared by every key of this schema
	key.Values = r.slab.values(len(p.root.Fields))
	for i, f := range p.root.Fields {
		v, err := avroVal(&r, f.Node, 0)
		if err != nil {
			rj := valueRejection(env.pos, err, "key field "+f.Name)
			if rj.Reason == ReasonMalformedAvro {
				rj.Reason = ReasonMalformedKey
			}
			return rj
		}
		key.Values[i] = v
	}
	if r.i != len(r.b) {
		return reject(env.pos, ReasonMalformedKey, nil, "%d bytes after the key", len(r.b)-r.i)
	}
	return nil
}

// avroReader reads Avro binary encoding; errors are sticky.
type avroReader struct {
	b    []byte
	i    int
	err  error
	slab *valueSlab // where row images are cut from
}

func (r *avroReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w at byte %d: %s", errAvro, r.i, fmt.Sprintf(format, args...))
	}
	r.i = len(r.b)
}

// long reads a zigzag varint.
func (r *avroReader) long() int64 {
	var u uint64
	var shift uint
	for {
		if r.i >= len(r.b) {
			r.fail("short varint")
			return 0
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
		shift += 7
		if shift > 63 {
			r.fail("varint too long")
			return 0
		}
	}
	return int64(u>>1) ^ -int64(u&1)
}

func (r *avroReader) bytes() []byte {
	n := r.long()
	if r.err != nil {
		return nil
	}
	if n < 0 || n > int64(len(r.b)-r.i) {
		r.fail("length %d with %d bytes left", n, len(r.b)-r.i)
		return nil
	}
	b := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return b
}

func (r *avroReader) fixed(n int) []byte {
	if n > len(r.b)-r.i {
		r.fail("fixed %d with %d bytes left", n, len(r.b)-r.i)
		return nil
	}
	b := r.b[r.i : r.i+n]
	r.i += n
	return b
}

// blockCount reads an array or map block header. Counts are bounded by the
// bytes left (every item but null takes at least one byte) so a corrupt
// count cannot make the decoder allocate or spin without bound.
func (r *avroReader) blockCount(item *schema.AvroNode) int64 {
	c := r.long()
	if r.err != nil {
		return 0
	}
	if c < 0 {
		if c == math.MinInt64 {
			r.fail("block count")
			return 0
		}
		c = -c
		r.long() // block size in bytes
	}
	limit := int64(len(r.b) - r.i)
	if item != nil && item.Kind == schema.AvroNull {
		limit = 1 << 16
	}
	if c > limit {
		r.fail("block count %d with %d bytes left", c, len(r.b)-r.i)
		return 0
	}
	return c
}

// skip reads past one value of n.
func (r *avroReader) skip(n *schema.AvroNode, depth int) {
	if depth > 64 {
		r.fail("nested too deep")
		return
	}
	switch n.Kind {
	case schema.AvroNull:
	case schema.AvroBoolean:
		r.fixed(1)
	case schema.AvroInt, schema.AvroLong, schema.AvroEnum:
		r.long()
	case schema.AvroFloat:
		r.fixed(4)
	case schema.AvroDouble:
		r.fixed(8)
	case schema.AvroBytes, schema.AvroString:
		r.bytes()
	case schema.AvroFixed:
		r.fixed(n.Size)
	case schema.AvroUnion:
		idx := r.long()
		if r.err != nil {
			return
		}
		if idx < 0 || idx >= int64(len(n.Branches)) {
			r.fail("union branch %d of %d", idx, len(n.Branches))
			return
		}
		r.skip(n.Branches[idx], depth+1)
	case schema.AvroRecord:
		for _, f := range n.Fields {
			r.skip(f.Node, depth+1)
		}
	case schema.AvroArray, schema.AvroMap:
		item := n.Items
		if n.Kind == schema.AvroMap {
			item = n.Values
		}
		for r.err == nil {
			c := r.blockCount(item)
			if c == 0 {
				return
			}
			for range c {
				if n.Kind == schema.AvroMap {
					r.bytes()
				}
				r.skip(item, depth+1)
				if r.err != nil {
					return
				}
			}
		}
	}
}
