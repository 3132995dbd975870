package delta

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DataType is a Delta column type: a PrimitiveType, DecimalType, ArrayType,
// MapType or StructType, with the protocol's JSON form.
type DataType interface {
	// String returns the type's name as the protocol spells it (for complex
	// types a short human form).
	String() string
	isDataType()
}

// PrimitiveType is one of the protocol's primitive type names.
type PrimitiveType string

// The primitive types of the protocol.
const (
	String       PrimitiveType = "string"
	Long         PrimitiveType = "long"
	Integer      PrimitiveType = "integer"
	Short        PrimitiveType = "short"
	Byte         PrimitiveType = "byte"
	Float        PrimitiveType = "float"
	Double       PrimitiveType = "double"
	Boolean      PrimitiveType = "boolean"
	Binary       PrimitiveType = "binary"
	Date         PrimitiveType = "date"
	Timestamp    PrimitiveType = "timestamp"
	TimestampNTZ PrimitiveType = "timestamp_ntz"
	Void         PrimitiveType = "void"
)

func (p PrimitiveType) String() string { return string(p) }
func (PrimitiveType) isDataType()      {}

// DecimalType is decimal(Precision, Scale); precision is at most 38.
type DecimalType struct {
	Precision int
	Scale     int
}

func (d DecimalType) String() string { return fmt.Sprintf("decimal(%d,%d)", d.Precision, d.Scale) }
func (DecimalType) isDataType()      {}

// ArrayType is a list of ElementType.
type ArrayType struct {
	ElementType  DataType
	ContainsNull bool
}

func (a ArrayType) String() string { return "array<" + a.ElementType.String() + ">" }
func (ArrayType) isDataType()      {}

// MapType maps KeyType to ValueType.
type MapType struct {
	KeyType           DataType
	ValueType         DataType
	ValueContainsNull bool
}

func (m MapType) String() string {
	return "map<" + m.KeyType.String() + "," + m.ValueType.String() + ">"
}
func (MapType) isDataType() {}

// StructField is one named field of a StructType.
type StructField struct {
	Name     string
	Type     DataType
	Nullable bool
	// Metadata is kept as read so that unknown keys (column mapping, type
	// widening, comments) survive a rewrite of the schema.
	Metadata map[string]any
}

// StructType is an ordered list of fields; a table schema is a StructType.
type StructType struct {
	Fields []StructField
}

func (s StructType) String() string {
	parts := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		parts[i] = f.Name + ":" + f.Type.String()
	}
	return "struct<" + strings.Join(parts, ",") + ">"
}
func (StructType) isDataType() {}

// Field returns the field with the given name (exact match) and its index.
func (s StructType) Field(name string) (StructField, int, bool) {
	for i, f := range s.Fields {
		if f.Name == name {
			return f, i, true
		}
	}
	return StructField{}, -1, false
}

// ParseSchema parses a metaData.schemaString.
func ParseSchema(schemaString string) (StructType, error) {
	var raw json.RawMessage = json.RawMessage(schemaString)
	t, err := parseType(raw)
	if err != nil {
		return StructType{}, fmt.Errorf("parse schema: %w", err)
	}
	st, ok := t.(StructType)
	if !ok {
		return StructType{}, fmt.Errorf("parse schema: top level is %s, not a struct", t)
	}
	return st, nil
}

// SchemaString returns the JSON form of s for metaData.schemaString.
func SchemaString(s StructType) (string, error) {
	b, err := json.Marshal(typeJSON(s))
	if err != nil {
		return "", fmt.Errorf("encode schema: %w", err)
	}
	return string(b), nil
}

var decimalRe = regexp.MustCompile(`^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$`)

func parseType(raw json.RawMessage) (DataType, error) {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		return parsePrimitive(name)
	}
	var obj struct {
		Type              string            `json:"type"`
		Fields            []json.RawMessage `json:"fields"`
		ElementType       json.RawMessage   `json:"elementType"`
		ContainsNull      *bool             `json:"containsNull"`
		KeyType           json.RawMessage   `json:"keyType"`
		ValueType         json.RawMessage   `json:"valueType"`
		ValueContainsNull *bool             `json:"valueContainsNull"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode type %s: %w", truncate(string(raw)), err)
	}
	switch obj.Type {
	case "struct":
		st := StructType{Fields: make([]StructField, 0, len(obj.Fields))}
		for _, fr := range obj.Fields {
			var f struct {
				Name     string          `json:"name"`
				Type     json.RawMessage `json:"type"`
				Nullable *bool           `json:"nullable"`
				Metadata map[string]any  `json:"metadata"`
			}
			if err := json.Unmarshal(fr, &f); err != nil {
				return nil, fmt.Errorf("decode field %s: %w", truncate(string(fr)), err)
			}
			ft, err := parseType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			nullable := true
			if f.Nullable != nil {
				nullable = *f.Nullable
			}
			st.Fields = append(st.Fields, StructField{Name: f.Name, Type: ft, Nullable: nullable, Metadata: f.Metadata})
		}
		return st, nil
	case "array":
		et, err := parseType(obj.ElementType)
		if err != nil {
			return nil, fmt.Errorf("array element: %w", err)
		}
		return ArrayType{ElementType: et, ContainsNull: obj.ContainsNull == nil || *obj.ContainsNull}, nil
	case "map":
		kt, err := parseType(obj.KeyType)
		if err != nil {
			return nil, fmt.Errorf("map key: %w", err)
		}
		vt, err := parseType(obj.ValueType)
		if err != nil {
			return nil, fmt.Errorf("map value: %w", err)
		}
		return MapType{KeyType: kt, ValueType: vt, ValueContainsNull: obj.ValueContainsNull == nil || *obj.ValueContainsNull}, nil
	default:
		return nil, fmt.Errorf("unknown complex type %q", obj.Type)
	}
}

// ParsePrimitiveType parses a primitive type name as the protocol writes
// it in a schema ("long", "string", "decimal(12,2)", "timestamp_ntz", ...).
func ParsePrimitiveType(name string) (DataType, error) { return parsePrimitive(name) }

func parsePrimitive(name string) (DataType, error) {
	switch p := PrimitiveType(name); p {
	case String, Long, Integer, Short, Byte, Float, Double, Boolean, Binary, Date, Timestamp, TimestampNTZ, Void:
		return p, nil
	}
	if name == "decimal" { // legacy spelling means the default precision
		return DecimalType{Precision: 10, Scale: 0}, nil
	}
	if m := decimalRe.FindStringSubmatch(name); m != nil {
		p, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		if p < 1 || p > 38 || s < 0 || s > p {
			return nil, fmt.Errorf("invalid %s: precision must be 1..38 and scale 0..precision", name)
		}
		return DecimalType{Precision: p, Scale: s}, nil
	}
	return nil, fmt.Errorf("unknown type %q", name)
}

func typeJSON(t DataType) any {
	switch t := t.(type) {
	case PrimitiveType:
		return string(t)
	case DecimalType:
		return t.String()
	case ArrayType:
		return map[string]any{"type": "array", "elementType": typeJSON(t.ElementType), "containsNull": t.ContainsNull}
	case MapType:
		return map[string]any{"type": "map", "keyType": typeJSON(t.KeyType), "valueType": typeJSON(t.ValueType), "valueContainsNull": t.ValueContainsNull}
	case StructType:
		fields := make([]any, len(t.Fields))
		for i, f := range t.Fields {
			md := f.Metadata
			if md == nil {
				md = map[string]any{}
			}
			fields[i] = orderedField{Name: f.Name, Type: typeJSON(f.Type), Nullable: f.Nullable, Metadata: md}
		}
		return orderedStruct{Type: "struct", Fields: fields}
	default:
		panic(fmt.Sprintf("delta: unknown DataType %T", t))
	}
}

// orderedStruct and orderedField fix the key order of the JSON we write to
// the order Spark writes, which keeps diffs against other writers readable.
type orderedStruct struct {
	Type   string `json:"type"`
	Fields []any  `json:"fields"`
}

type orderedField struct {
	Name     string         `json:"name"`
	Type     any            `json:"type"`
	Nullable bool           `json:"nullable"`
	Metadata map[string]any `json:"metadata"`
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
