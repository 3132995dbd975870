package schema

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// AvroKind is an Avro schema type.
type AvroKind uint8

// The Avro schema types.
const (
	AvroNull AvroKind = iota
	AvroBoolean
	AvroInt
	AvroLong
	AvroFloat
	AvroDouble
	AvroBytes
	AvroString
	AvroRecord
	AvroEnum
	AvroArray
	AvroMap
	AvroUnion
	AvroFixed
)

var avroPrimitive = map[string]AvroKind{
	"null": AvroNull, "boolean": AvroBoolean, "int": AvroInt, "long": AvroLong,
	"float": AvroFloat, "double": AvroDouble, "bytes": AvroBytes, "string": AvroString,
}

// AvroNode is one node of a parsed Avro writer schema: the decode plan a
// binary decoder walks. Named types referenced twice are the same node.
type AvroNode struct {
	Kind     AvroKind
	Name     string // full name of a record, enum or fixed
	Fields   []AvroField
	Branches []*AvroNode // union branches
	Items    *AvroNode   // array items
	Values   *AvroNode   // map values
	Symbols  []string    // enum symbols
	Size     int         // fixed size
	// NullBranch is the index of the "null" branch of a union, or -1.
	NullBranch int
	// Col is the column type values of this node convert with (for a union
	// with one non-null branch, that branch's type made optional).
	Col *Type

	connectType string // "connect.type": int8/int16 ride in Avro int
	connectName string
	logical     string
	params      map[string]string
	building    bool
}

// AvroField is a record field.
type AvroField struct {
	Name string
	Node *AvroNode
}

// ParseAvro parses an Avro schema (as a schema registry stores it) into a
// decode plan whose nodes carry their column types. Connect metadata
// (connect.name, connect.parameters, connect.type) and Avro logical types
// decide the semantic type, as Confluent's AvroConverter writes them.
func ParseAvro(text string, opts *Options) (*AvroNode, error) {
	var raw any
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("parse avro schema: %w", err)
	}
	p := avroParser{named: map[string]*AvroNode{}}
	n, err := p.node(raw, "")
	if err != nil {
		return nil, fmt.Errorf("parse avro schema: %w", err)
	}
	if _, err := n.column("", opts); err != nil {
		return nil, fmt.Errorf("parse avro schema: %w", err)
	}
	return n, nil
}

type avroParser struct {
	named map[string]*AvroNode
	depth int
}

func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func (p *avroParser) node(raw any, ns string) (*AvroNode, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > 64 {
		return nil, fmt.Errorf("schema nested deeper than 64")
	}
	switch r := raw.(type) {
	case string:
		if k, ok := avroPrimitive[r]; ok {
			return &AvroNode{Kind: k, NullBranch: -1}, nil
		}
		if n, ok := p.named[fullName(r, ns)]; ok {
			return n, nil
		}
		if n, ok := p.named[r]; ok {
			return n, nil
		}
		return nil, fmt.Errorf("unknown type %q", r)
	case []any:
		u := &AvroNode{Kind: AvroUnion, NullBranch: -1}
		for i, b := range r {
			bn, err := p.node(b, ns)
			if err != nil {
				return nil, err
			}
			if bn.Kind == AvroNull {
				u.NullBranch = i
			}
			u.Branches = append(u.Branches, bn)
		}
		if len(u.Branches) == 0 {
			return nil, fmt.Errorf("empty union")
		}
		return u, nil
	case map[string]any:
		return p.object(r, ns)
	}
	return nil, fmt.Errorf("unexpected schema JSON %T", raw)
}

func (p *avroParser) object(r map[string]any, ns string) (*AvroNode, error) {
	typ, _ := r["type"].(string)
	n := &AvroNode{NullBranch: -1}
	n.connectType, _ = r["connect.type"].(string)
	n.connectName, _ = r["connect.name"].(string)
	n.logical, _ = r["logicalType"].(string)
	if cp, ok := r["connect.parameters"].(map[string]any); ok {
		n.params = map[string]string{}
		for k, v := range cp {
			if s, ok := v.(string); ok {
				n.params[k] = s
			}
		}
	}
	if n.logical == "decimal" {
		if n.params == nil {
			n.params = map[string]string{}
		}
		if _, ok := n.params["scale"]; !ok {
			if s, ok := r["scale"].(float64); ok {
				n.params["scale"] = strconv.Itoa(int(s))
			} else {
				n.params["scale"] = "0"
			}
		}
		// A Connect schema without a precision (PostgreSQL money, numeric
		// without precision) gets the AvroConverter's placeholder precision
		// 64 in Avro; only a schema that did not come from Connect has a
		// real one.
		if _, ok := n.params["connect.decimal.precision"]; !ok && n.connectName == "" {
			if pr, ok := r["precision"].(float64); ok {
				n.params["connect.decimal.precision"] = strconv.Itoa(int(pr))
			}
		}
	}
	switch typ {
	case "record", "error":
		name, _ := r["name"].(string)
		if nsv, ok := r["namespace"].(string); ok && !strings.Contains(name, ".") {
			ns = nsv
		}
		n.Kind = AvroRecord
		n.Name = fullName(name, ns)
		if i := strings.LastIndex(n.Name, "."); i >= 0 {
			ns = n.Name[:i]
		}
		p.named[n.Name] = n
		fields, _ := r["fields"].([]any)
		for _, f := range fields {
			fm, ok := f.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("record %s: field is %T", n.Name, f)
			}
			fname, _ := fm["name"].(string)
			fn, err := p.node(fm["type"], ns)
			if err != nil {
				return nil, fmt.Errorf("record %s field %s: %w", n.Name, fname, err)
			}
			n.Fields = append(n.Fields, AvroField{Name: fname, Node: fn})
		}
		return n, nil
	case "enum":
		name, _ := r["name"].(string)
		if nsv, ok := r["namespace"].(string); ok && !strings.Contains(name, ".") {
			ns = nsv
		}
		n.Kind, n.Name = AvroEnum, fullName(name, ns)
		syms, _ := r["symbols"].([]any)
		for _, s := range syms {
			str, _ := s.(string)
			n.Symbols = append(n.Symbols, str)
		}
		p.named[n.Name] = n
		return n, nil
	case "fixed":
		name, _ := r["name"].(string)
		n.Kind, n.Name = AvroFixed, fullName(name, ns)
		size, _ := r["size"].(float64)
		if size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("fixed %s: size %v", n.Name, size)
		}
		n.Size = int(size)
		p.named[n.Name] = n
		return n, nil
	case "array":
		items, err := p.node(r["items"], ns)
		if err != nil {
			return nil, err
		}
		n.Kind, n.Items = AvroArray, items
		return n, nil
	case "map":
		vals, err := p.node(r["values"], ns)
		if err != nil {
			return nil, err
		}
		n.Kind, n.Values = AvroMap, vals
		return n, nil
	}
	if k, ok := avroPrimitive[typ]; ok {
		n.Kind = k
		return n, nil
	}
	// {"type": {...}} or {"type": "SomeNamedType"}
	if r["type"] != nil {
		inner, err := p.node(r["type"], ns)
		if err != nil {
			return nil, err
		}
		return inner, nil
	}
	return nil, fmt.Errorf("unknown type %v", r["type"])
}

// column computes (once) the column type of n; field names the column for
// options keyed by column name.
func (n *AvroNode) column(field string, opts *Options) (*Type, error) {
	if n.Col != nil {
		return n.Col, nil
	}
	if n.building {
		return nil, fmt.Errorf("recursive type %s", n.Name)
	}
	n.building = true
	defer func() { n.building = false }()
	t := &Type{Name: n.connectName}
	switch n.Kind {
	case AvroNull:
		// Only meaningful as a union branch; give it a harmless type.
		t.Base, t.Optional = BaseString, true
	case AvroBoolean:
		t.Base = BaseBool
	case AvroInt:
		t.Base = BaseInt32
		switch n.connectType {
		case "int8":
			t.Base = BaseInt8
		case "int16":
			t.Base = BaseInt16
		}
	case AvroLong:
		t.Base = BaseInt64
	case AvroFloat:
		t.Base = BaseFloat32
	case AvroDouble:
		t.Base = BaseFloat64
	case AvroBytes, AvroFixed:
		t.Base = BaseBytes
	case AvroString, AvroEnum:
		t.Base = BaseString
	case AvroRecord:
		t.Base = BaseStruct
		t.Fields = make([]Field, len(n.Fields))
		for i, f := range n.Fields {
			ft, err := f.Node.column(f.Name, opts)
			if err != nil {
				return nil, err
			}
			if ft.Optional != (f.Node.Kind == AvroUnion && f.Node.NullBranch >= 0) {
				// A named record reused as both optional and required.
				c := *ft
				c.Optional = f.Node.Kind == AvroUnion && f.Node.NullBranch >= 0
				ft = &c
			}
			t.Fields[i] = Field{Name: f.Name, Type: ft}
		}
	case AvroArray:
		et, err := n.Items.column(field, opts)
		if err != nil {
			return nil, err
		}
		t.Base, t.Elem = BaseArray, et
	case AvroMap:
		vt, err := n.Values.column(field, opts)
		if err != nil {
			return nil, err
		}
		kt := &Type{Base: BaseString}
		if err := kt.resolve(field, nil, opts); err != nil {
			return nil, err
		}
		t.Base, t.Key, t.Val = BaseMap, kt, vt
	case AvroUnion:
		var only *AvroNode
		for i, b := range n.Branches {
			if i == n.NullBranch {
				continue
			}
			if only != nil {
				return nil, fmt.Errorf("field %q: union with several non-null branches is not a column type", field)
			}
			only = b
		}
		if only == nil {
			return nil, fmt.Errorf("field %q: union of only null", field)
		}
		bt, err := only.column(field, opts)
		if err != nil {
			return nil, err
		}
		c := *bt
		c.Optional = n.NullBranch >= 0
		n.Col = &c
		return n.Col, nil
	}
	if t.Name == "" {
		switch n.logical {
		case "decimal":
			t.Name = "org.apache.kafka.connect.data.Decimal"
		case "date":
			t.Name = "org.apache.kafka.connect.data.Date"
		case "time-millis":
			t.Name = "org.apache.kafka.connect.data.Time"
		case "time-micros":
			t.Name = "io.debezium.time.MicroTime"
		case "timestamp-millis":
			t.Name = "org.apache.kafka.connect.data.Timestamp"
		case "timestamp-micros":
			t.Name = "io.debezium.time.MicroTimestamp"
		case "uuid":
			t.Name = "io.debezium.data.Uuid"
		}
	}
	if err := t.resolve(field, n.params, opts); err != nil {
		return nil, err
	}
	n.Col = t
	return t, nil
}

// Field returns the index of the record field called name, or -1.
func (n *AvroNode) Field(name string) int {
	for i := range n.Fields {
		if n.Fields[i].Name == name {
			return i
		}
	}
	return -1
}

// Unwrap returns the non-null branch of an optional union and its index,
// or n itself and -1 when n is not a union.
func (n *AvroNode) Unwrap() (*AvroNode, int) {
	if n.Kind != AvroUnion {
		return n, -1
	}
	for i, b := range n.Branches {
		if i != n.NullBranch {
			return b, i
		}
	}
	return n, -1
}
