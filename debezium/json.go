package debezium

import (
	"bytes"
	"encoding/base64"
	"strings"

	"github.com/cdcapply/cdcapply/schema"
)

// jsonPlan is the compiled form of one inline schema (or of a table schema
// for schema-less records).
type jsonPlan struct {
	text          []byte
	env           *schema.Type // the whole value's struct type
	err           error        // why env could not be compiled
	before, after *schema.Type // envelope row types
	row           *schema.Type // flattened row type (no __ fields)
	tables        tableCache
}

func newJSONPlan(text []byte, env *schema.Type, err error, opts *schema.Options) *jsonPlan {
	p := &jsonPlan{text: text, env: env, err: err}
	if env == nil || env.Base != schema.BaseStruct {
		return p
	}
	p.before = imageType(env, "before", opts)
	p.after = imageType(env, "after", opts)
	cols := make([]schema.Field, 0, len(env.Fields))
	for _, f := range env.Fields {
		if !strings.HasPrefix(f.Name, "__") {
			cols = append(cols, f)
		}
	}
	p.row = schema.NewStruct(env.Name, cols, opts)
	return p
}

// DocumentColumn is the single column of a row image that Debezium sends
// as one JSON document (MongoDB's before and after) instead of a struct.
const DocumentColumn = "document"

// imageType returns the row type of the envelope's before or after field:
// its struct type, or for a document image (a string field, MongoDB) a
// one-column row holding the document text.
func imageType(env *schema.Type, name string, opts *schema.Options) *schema.Type {
	i := env.Field(name)
	if i < 0 {
		return nil
	}
	switch ft := env.Fields[i].Type; ft.Base {
	case schema.BaseStruct:
		return ft
	case schema.BaseString:
		return schema.NewStruct("", []schema.Field{{Name: DocumentColumn, Type: ft}}, opts)
	}
	return nil
}

func isDocumentRow(rt *schema.Type) bool {
	return len(rt.Fields) == 1 && rt.Fields[0].Name == DocumentColumn && rt.Fields[0].Type.Base == schema.BaseString
}

func tablePlan(rt *schema.Type) *jsonPlan {
	return &jsonPlan{env: rt, before: rt, after: rt, row: rt}
}

// inlinePlan reads the inline schema at s (the value of a "schema" member)
// and returns its compiled plan. The common case, the same schema as the
// topic's previous record, costs one memory comparison.
func (d *Decoder) inlinePlan(s *scanner, topic string, last map[string]*jsonPlan) (*jsonPlan, bool) {
	s.ws()
	rest := s.b[s.i:]
	d.mu.Lock()
	p := last[topic]
	d.mu.Unlock()
	if p != nil && bytes.HasPrefix(rest, p.text) {
		s.i += len(p.text)
		return p, true
	}
	sp := s.span()
	if s.err != nil {
		return nil, false
	}
	if string(sp) == "null" {
		return nil, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p = d.plans[string(sp)]
	if p == nil {
		text := bytes.Clone(sp)
		t, err := schema.ParseConnect(text, &d.cfg.opts)
		p = newJSONPlan(text, t, err, &d.cfg.opts)
		if len(d.plans) > 4096 {
			// Schemas change rarely; a flood of distinct ones is input
			// abuse, not a working set worth keeping.
			clear(d.plans)
		}
		d.plans[string(text)] = p
	}
	last[topic] = p
	return p, true
}

func (d *Decoder) jsonValue(rec *Record, env *envelope) *Rejection {
	s := scanner{b: rec.Value, slab: env.slab}
	if !s.expect('{') {
		return reject(env.pos, ReasonMalformedJSON, s.err, "value")
	}
	start := s.i
	key, esc, ok := s.member(true)
	var plan *jsonPlan
	if ok && !esc && string(key) == "schema" {
		p, ok := d.inlinePlan(&s, rec.Topic, d.lastPlan)
		if !ok {
			return reject(env.pos, ReasonMalformedJSON, s.err, "value schema")
		}
		key, _, ok := s.member(false)
		if !ok || string(key) != "payload" {
			return reject(env.pos, ReasonMalformedJSON, s.err, "value: want payload after schema")
		}
		plan = p
		if plan == nil {
			plan = d.tablePlans(rec.Topic)
		}
		if s.null() {
			// A null payload is how the JsonConverter spells a null value.
			env.class, env.classified = ClassKafkaTombstone, true
		} else {
			if !s.expect('{') {
				return reject(env.pos, ReasonMalformedJSON, s.err, "payload")
			}
			if rej := d.jsonBody(&s, plan, env); rej != nil {
				return rej
			}
		}
		if _, _, more := s.member(false); more || s.err != nil {
			return reject(env.pos, ReasonMalformedJSON, s.err, "value: members after payload")
		}
	} else {
		if s.err != nil {
			return reject(env.pos, ReasonMalformedJSON, s.err, "value")
		}
		s.i = start
		if rej := d.jsonBody(&s, d.tablePlans(rec.Topic), env); rej != nil {
			return rej
		}
	}
	s.end()
	if s.err != nil {
		return reject(env.pos, ReasonMalformedJSON, s.err, "value")
	}
	return nil
}

func (d *Decoder) tablePlans(topic string) *jsonPlan {
	if p, ok := d.tablePlan[topic]; ok {
		return p
	}
	return d.tablePlan[""]
}

// jsonBody reads the members of the envelope (or flattened row) whose '{'
// has been consumed.
func (d *Decoder) jsonBody(s *scanner, plan *jsonPlan, env *envelope) *Rejection {
	flat := d.cfg.envelope == EnvelopeFlattened && !isTransactionTopic(env.pos.Topic) &&
		!(plan != nil && plan.row != nil && len(plan.row.Fields) > 0 && heartbeatShape(plan.row.Fields[0].Name, len(plan.row.Fields))) &&
		!(plan != nil && plan.row != nil && messageShape(plan.row.Field("op"), plan.row.Field("message")))
	if plan != nil {
		env.tables = &plan.tables
	}
	var row *schema.Type
	var vals []schema.Value
	if flat && plan != nil && plan.row != nil {
		row = plan.row
		env.rowType = row
		vals = s.slab.values(len(row.Fields))
	}
	if plan != nil && !flat {
		env.rowType = plan.after
		if env.rowType == nil {
			env.rowType = plan.before
		}
	}
	next := 0
	var unknown []byte // first flattened member that is no column
	for first := true; ; first = false {
		key, esc, ok := s.member(first)
		if !ok {
			break
		}
		if esc {
			k, err := unescape(key)
			if err != nil {
				s.fail("%v", err)
				break
			}
			key = []byte(k)
		}
		if flat {
			if len(key) > 2 && key[0] == '_' && key[1] == '_' {
				d.jsonMeta(s, key, env)
				continue
			}
			if row != nil {
				idx := -1
				if next < len(row.Fields) && row.Fields[next].Name == string(key) {
					idx = next
				} else {
					idx = row.Field(string(key))
				}
				if idx >= 0 {
					v, err := jsonVal(s, row.Fields[idx].Type, 0)
					if err != nil {
						return valueRejection(env.pos, err, "column "+row.Fields[idx].Name)
					}
					vals[idx] = v
					next = idx + 1
					env.sawRow = true
					continue
				}
			}
			if d.envelopeMember(s, key, env) {
				continue
			}
			// Decide after the whole value: a schema change event (ddl) has
			// members no table has.
			if unknown == nil {
				unknown = key
			}
			s.skip()
			continue
		}
		switch string(key) {
		case "before", "after":
			if s.null() {
				continue
			}
			env.sawRow = true
			rt := (*schema.Type)(nil)
			if plan != nil {
				rt = plan.after
				if key[0] == 'b' {
					rt = plan.before
				}
			}
			if rt == nil {
				if plan != nil && plan.err != nil {
					return reject(env.pos, ReasonBadSchema, plan.err, "inline schema")
				}
				return reject(env.pos, ReasonNoTableSchema, nil, "no schema for the %s image", key)
			}
			var r Row
			if s.peek() == '"' && isDocumentRow(rt) {
				v, err := jsonVal(s, rt.Fields[0].Type, 0)
				if err != nil {
					return valueRejection(env.pos, err, string(key)+" document")
				}
				r = Row{Type: rt, Values: []schema.Value{v}}
			} else {
				var rej *Rejection
				if r, rej = jsonRow(s, rt, env.pos); rej != nil {
					return rej
				}
			}
			if key[0] == 'b' {
				env.before = r
			} else {
				env.after = r
			}
		case "source":
			d.jsonSource(s, env)
		case "op":
			if s.null() {
				continue
			}
			env.sawOp = true
			env.op, _ = s.rawString()
		default:
			if !d.envelopeMember(s, key, env) {
				env.others++
				s.skip()
			}
		}
		if s.err != nil {
			break
		}
	}
	if s.err != nil {
		return reject(env.pos, ReasonMalformedJSON, s.err, "value")
	}
	if unknown != nil && !env.sawDDL {
		if row == nil {
			return reject(env.pos, ReasonNoTableSchema, nil, "no schema for column %q", truncateBytes(unknown))
		}
		return reject(env.pos, ReasonUnknownColumn, nil, "column %q is not in the table schema", truncateBytes(unknown))
	}
	if flat && env.sawRow {
		env.after = Row{Type: row, Values: vals}
	}
	return nil
}

// envelopeMember handles the top-level members shared by every value
// shape (timestamps, transaction markers, schema change events); it
// reports whether it consumed the member.
func (d *Decoder) envelopeMember(s *scanner, key []byte, env *envelope) bool {
	switch string(key) {
	case "ts_ms":
		env.sawTs = true
		if !s.null() {
			i, _, isInt := s.number()
			if !isInt && s.err == nil {
				s.fail("ts_ms is not an integer")
			}
			env.tsMs = i
		}
	case "ddl", "tableChanges", "historyRecord":
		env.sawDDL = true
		s.skip()
	case "status":
		env.sawStatus = true
		if !s.null() {
			env.tx.Status = s.str()
		}
	case "id":
		if s.peek() == '"' {
			env.tx.ID = s.str()
		} else {
			s.skip()
		}
	case "event_count":
		if !s.null() {
			env.tx.EventCount, _, _ = s.number()
		}
	case "op":
		// Reached only by a flattened value whose table has no column
		// "op": a record the flattening transform passed through in
		// envelope shape (a logical decoding message, op "m").
		if !s.null() {
			env.sawOp = true
			env.op, _ = s.rawString()
		}
	case "message":
		env.others++
		s.skip()
	case "transaction", "data_collections", "databaseName", "schemaName", "source", "before", "after":
		if string(key) == "source" {
			d.jsonSource(s, env)
			return true
		}
		env.others++
		s.skip()
	default:
		return false
	}
	return true
}

// jsonMeta reads a flattened metadata member (__op, __deleted,
// __source_ts_ms, __lsn, ...).
func (d *Decoder) jsonMeta(s *scanner, key []byte, env *envelope) {
	name := key[2:]
	switch string(name) {
	case "op":
		if !s.null() {
			env.sawOp = true
			env.op, _ = s.rawString()
		}
		return
	case "deleted":
		switch s.peek() {
		case '"':
			raw, _ := s.rawString()
			env.deleted = string(raw) == "true"
		case 't', 'f':
			env.deleted = s.boolean()
		default:
			s.skip()
		}
		return
	case "ts_ms":
		env.sawTs = true
		if !s.null() {
			env.tsMs, _, _ = s.number()
		}
		return
	}
	id := srcID(bytes.TrimPrefix(name, []byte("source_")))
	if id >= 0 {
		env.src[id] = jsonScalar(s)
		return
	}
	for j, n := range d.cfg.extra {
		if n == string(key) {
			if env.extra == nil {
				env.extra = make([]srcVal, len(d.cfg.extra))
			}
			env.extra[j] = jsonScalar(s)
			return
		}
	}
	s.skip()
}

// jsonSource captures the source block's fields the decoder needs.
func (d *Decoder) jsonSource(s *scanner, env *envelope) {
	if s.null() {
		return
	}
	if !s.expect('{') {
		return
	}
	env.sawSource = true
	for first := true; ; first = false {
		key, _, ok := s.member(first)
		if !ok {
			return
		}
		if id := srcID(key); id >= 0 {
			env.src[id] = jsonScalar(s)
			continue
		}
		matched := false
		for j, n := range d.cfg.extra {
			if n == string(key) {
				if env.extra == nil {
					env.extra = make([]srcVal, len(d.cfg.extra))
				}
				env.extra[j] = jsonScalar(s)
				matched = true
				break
			}
		}
		if !matched {
			s.skip()
		}
	}
}

var (
	trueBytes  = []byte("true")
	falseBytes = []byte("false")
)

func jsonScalar(s *scanner) srcVal {
	switch c := s.peek(); {
	case c == 'n':
		s.null()
		return srcVal{kind: svNull}
	case c == '"':
		raw, esc := s.rawString()
		return strVal(raw, esc)
	case c == 't' || c == 'f':
		// Old connectors send snapshot as a boolean.
		if s.boolean() {
			return strVal(trueBytes, false)
		}
		return strVal(falseBytes, false)
	case c == '-' || (c >= '0' && c <= '9'):
		i, _, isInt := s.number()
		if isInt {
			return srcVal{kind: svInt, i: i}
		}
		return srcVal{kind: svOther}
	}
	s.skip()
	return srcVal{kind: svOther}
}

// jsonRow reads a row image object typed by rt.
func jsonRow(s *scanner, rt *schema.Type, pos Position) (Row, *Rejection) {
	if !s.expect('{') {
		return Row{}, reject(pos, ReasonMalformedJSON, s.err, "row image")
	}
	vals := s.slab.values(len(rt.Fields))
	next := 0
	for first := true; ; first = false {
		key, esc, ok := s.member(first)
		if !ok {
			break
		}
		idx := -1
		if !esc && next < len(rt.Fields) && rt.Fields[next].Name == string(key) {
			idx = next
		} else {
			k := string(key)
			if esc {
				var err error
				if k, err = unescape(key); err != nil {
					return Row{}, reject(pos, ReasonMalformedJSON, err, "column name")
				}
			}
			idx = rt.Field(k)
			if idx < 0 {
				return Row{}, reject(pos, ReasonUnknownColumn, nil, "column %q is not in the schema", truncateBytes([]byte(k)))
			}
		}
		v, err := jsonVal(s, rt.Fields[idx].Type, 0)
		if err != nil {
			return Row{}, valueRejection(pos, err, "column "+rt.Fields[idx].Name)
		}
		vals[idx] = v
		next = idx + 1
	}
	if s.err != nil {
		return Row{}, reject(pos, ReasonMalformedJSON, s.err, "row image")
	}
	return Row{Type: rt, Values: vals}, nil
}

// jsonVal reads one value typed by t.
func jsonVal(s *scanner, t *schema.Type, depth int) (schema.Value, error) {
	if depth > 64 {
		s.fail("nested too deep")
		return schema.Value{}, s.err
	}
	switch c := s.peek(); {
	case c == 'n':
		if s.null() {
			return schema.Null, nil
		}
		return schema.Value{}, s.err
	case c == '"':
		raw, esc := s.rawString()
		if s.err != nil {
			return schema.Value{}, s.err
		}
		if esc {
			str, err := unescape(raw)
			if err != nil {
				s.fail("%v", err)
				return schema.Value{}, s.err
			}
			return t.FromString(str)
		}
		if t.IsPlainText() {
			if len(raw) == len(schema.Placeholder) && string(raw) == schema.Placeholder {
				return schema.Unavailable, nil
			}
			return schema.String(string(raw)), nil
		}
		if t.Base == schema.BaseBytes && t.Name == "" || t.Logical == schema.LogicalBits {
			// base64 straight from the input bytes: no string on the way.
			buf := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
			n, err := base64.StdEncoding.Decode(buf, raw)
			if err == nil {
				return t.FromOwnedBytes(buf[:n])
			}
			if string(raw) == schema.Placeholder {
				return schema.Unavailable, nil
			}
			return schema.Value{}, schema.InvalidBase64(t, err)
		}
		if t.Base == schema.BaseBytes && t.Logical == schema.LogicalDecimal && len(raw) <= 64 {
			// A decimal's unscaled bytes only live until they are read.
			var buf [48]byte
			n, err := base64.StdEncoding.Decode(buf[:], raw)
			if err == nil {
				return t.DecimalFromUnscaled(buf[:n])
			}
			return t.FromStringBytes(raw)
		}
		return t.FromStringBytes(raw)
	case c == 't' || c == 'f':
		b := s.boolean()
		if s.err != nil {
			return schema.Value{}, s.err
		}
		return t.FromBool(b)
	case c == '{':
		s.i++
		switch t.Base {
		case schema.BaseStruct:
			vals := s.slab.values(len(t.Fields))
			for first := true; ; first = false {
				key, esc, ok := s.member(first)
				if !ok {
					break
				}
				k := string(key)
				if esc {
					k, _ = unescape(key)
				}
				idx := t.Field(k)
				if idx < 0 {
					s.skip()
					continue
				}
				v, err := jsonVal(s, t.Fields[idx].Type, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				vals[idx] = v
			}
			if s.err != nil {
				return schema.Value{}, s.err
			}
			return t.FinishStruct(vals)
		case schema.BaseMap:
			var pairs []schema.Value
			for first := true; ; first = false {
				key, esc, ok := s.member(first)
				if !ok {
					break
				}
				k := string(key)
				if esc {
					k, _ = unescape(key)
				}
				kv, err := t.Key.FromString(k)
				if err != nil {
					s.skip()
					return schema.Value{}, err
				}
				v, err := jsonVal(s, t.Val, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				pairs = append(pairs, kv, v)
			}
			if s.err != nil {
				return schema.Value{}, s.err
			}
			return t.FinishMap(pairs), nil
		}
		s.i--
		s.skip()
		return schema.Value{}, schema.Mismatch(t, "object")
	case c == '[':
		s.i++
		switch t.Base {
		case schema.BaseArray:
			// Collect on the stack, then allocate the exact size once.
			var scratch [8]schema.Value
			elems := scratch[:0]
			for first := true; s.element(first); first = false {
				v, err := jsonVal(s, t.Elem, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				elems = append(elems, v)
			}
			if s.err != nil {
				return schema.Value{}, s.err
			}
			var out []schema.Value
			if len(elems) > 0 {
				out = s.slab.values(len(elems))
				copy(out, elems)
			}
			return t.FinishList(out), nil
		case schema.BaseMap:
			// Maps with non-string keys travel as [[k, v], ...].
			var pairs []schema.Value
			for first := true; s.element(first); first = false {
				if !s.expect('[') {
					return schema.Value{}, s.err
				}
				kv, err := jsonVal(s, t.Key, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				if !s.expect(',') {
					return schema.Value{}, s.err
				}
				v, err := jsonVal(s, t.Val, depth+1)
				if err != nil {
					return schema.Value{}, err
				}
				if !s.expect(']') {
					return schema.Value{}, s.err
				}
				pairs = append(pairs, kv, v)
			}
			if s.err != nil {
				return schema.Value{}, s.err
			}
			return t.FinishMap(pairs), nil
		}
		s.i--
		s.skip()
		return schema.Value{}, schema.Mismatch(t, "array")
	case c == '-' || (c >= '0' && c <= '9'):
		i, f, isInt := s.number()
		if s.err != nil {
			return schema.Value{}, s.err
		}
		if isInt {
			return t.FromInt(i)
		}
		return t.FromFloat(f)
	}
	s.fail("unexpected value")
	return schema.Value{}, s.err
}

// jsonKey reads the record key: an object of key columns, with or without
// an inline key schema. Without one, key columns are typed like the row's
// columns of the same name.
func (d *Decoder) jsonKey(rec *Record, env *envelope, key *Key) *Rejection {
	s := scanner{b: rec.Key, slab: env.slab}
	if !s.expect('{') {
		return reject(env.pos, ReasonMalformedKey, s.err, "key")
	}
	start := s.i
	k, esc, ok := s.member(true)
	kt := env.rowType
	if ok && !esc && string(k) == "schema" {
		p, ok := d.inlinePlan(&s, rec.Topic, d.lastKeyPlan)
		if !ok {
			return reject(env.pos, ReasonMalformedKey, s.err, "key schema")
		}
		if p != nil {
			if p.err != nil {
				return reject(env.pos, ReasonBadSchema, p.err, "key schema")
			}
			kt = p.env
		}
		k2, _, ok := s.member(false)
		if !ok || string(k2) != "payload" {
			return reject(env.pos, ReasonMalformedKey, s.err, "key: want payload after schema")
		}
		if !s.expect('{') {
			return reject(env.pos, ReasonMalformedKey, s.err, "key payload")
		}
		if rej := readKey(&s, kt, env.pos, key); rej != nil {
			return rej
		}
		if _, _, more := s.member(false); more {
			return reject(env.pos, ReasonMalformedKey, s.err, "key: members after payload")
		}
	} else {
		s.err = nil
		s.i = start
		if rej := readKey(&s, kt, env.pos, key); rej != nil {
			return rej
		}
	}
	s.end()
	if s.err != nil {
		return reject(env.pos, ReasonMalformedKey, s.err, "key")
	}
	return nil
}

// OldKeyHeader is the header Debezium puts on the create event of a row
// whose primary key an update changed: the row's key before the update.
// (The delete event of the old key carries the new one in
// "__debezium.newkey".)
const OldKeyHeader = "__debezium.oldkey"

// HeaderKey decodes a key carried in a header, such as OldKeyHeader's:
// Kafka Connect's default header converter writes the key struct as a
// JSON object of its columns, whatever the record's own format. Each
// column is typed like rowType's column of the same name.
func HeaderKey(b []byte, rowType *schema.Type) (Key, error) {
	var key Key
	s := scanner{b: b}
	if !s.expect('{') {
		return Key{}, reject(Position{}, ReasonMalformedKey, s.err, "header key")
	}
	if rej := readKey(&s, rowType, Position{}, &key); rej != nil {
		return Key{}, rej
	}
	s.end()
	if s.err != nil {
		return Key{}, reject(Position{}, ReasonMalformedKey, s.err, "header key")
	}
	return key, nil
}

func readKey(s *scanner, kt *schema.Type, pos Position, key *Key) *Rejection {
	if kt == nil {
		return reject(pos, ReasonNoTableSchema, nil, "no schema to type the key")
	}
	// Most keys have a few columns: collect them on the stack (kept small,
	// it is cleared for every record), longer keys grow on the heap.
	var vals [4]schema.Value
	var idxs [4]int
	n := 0
	for first := true; ; first = false {
		k, esc, ok := s.member(first)
		if !ok {
			break
		}
		name := string(k)
		if esc {
			var err error
			if name, err = unescape(k); err != nil {
				return reject(pos, ReasonMalformedKey, err, "key field name")
			}
		}
		idx := kt.Field(name)
		if idx < 0 {
			return reject(pos, ReasonMalformedKey, nil, "key field %q is not a column", truncateBytes(k))
		}
		v, err := jsonVal(s, kt.Fields[idx].Type, 0)
		if err != nil {
			r := valueRejection(pos, err, "key field "+kt.Fields[idx].Name)
			if r.Reason == ReasonMalformedJSON {
				r.Reason = ReasonMalformedKey
			}
			return r
		}
		if n < len(vals) {
			vals[n], idxs[n] = v, idx
		} else {
			if n == len(vals) {
				key.Values = append(key.Values, vals[:]...)
				for _, i := range idxs {
					key.Names = append(key.Names, kt.Fields[i].Name)
				}
			}
			key.Values = append(key.Values, v)
			key.Names = append(key.Names, kt.Fields[idx].Name)
		}
		n++
	}
	if s.err != nil {
		return reject(pos, ReasonMalformedKey, s.err, "key")
	}
	if n > len(vals) {
		return nil
	}
	key.Values = s.slab.values(n)
	copy(key.Values, vals[:n])
	// Key fields that are consecutive columns in schema order (the whole
	// key schema, or a leading run of the row's columns) share the
	// schema's name slice.
	run := n > 0
	for i := 1; i < n && run; i++ {
		run = idxs[i] == idxs[0]+i
	}
	if run {
		key.Names = kt.FieldNames()[idxs[0] : idxs[0]+n : idxs[0]+n]
		return nil
	}
	key.Names = make([]string, n)
	for i := range n {
		key.Names[i] = kt.Fields[idxs[i]].Name
	}
	return nil
}

// isTransactionTopic reports whether topic is Debezium's transaction
// metadata topic (<topic.prefix>.transaction). ExtractNewRecordState passes
// its records through unflattened, so they are read as envelopes whatever
// the configured shape.
func isTransactionTopic(topic string) bool { return strings.HasSuffix(topic, ".transaction") }
