package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cdcapply/cdcapply/delta"
)

// Base is the Kafka Connect schema type a value travels as.
type Base uint8

// The Kafka Connect schema types.
const (
	BaseInvalid Base = iota
	BaseInt8
	BaseInt16
	BaseInt32
	BaseInt64
	BaseFloat32
	BaseFloat64
	BaseBool
	BaseString
	BaseBytes
	BaseArray
	BaseMap
	BaseStruct
)

var baseByName = map[string]Base{
	"int8": BaseInt8, "int16": BaseInt16, "int32": BaseInt32, "int64": BaseInt64,
	"float": BaseFloat32, "float32": BaseFloat32, "double": BaseFloat64, "float64": BaseFloat64,
	"boolean": BaseBool, "string": BaseString, "bytes": BaseBytes,
	"array": BaseArray, "map": BaseMap, "struct": BaseStruct,
}

var baseNames = [...]string{"invalid", "int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes", "array", "map", "struct"}

// String names the base type as Kafka Connect spells it.
func (b Base) String() string {
	if int(b) < len(baseNames) {
		return baseNames[b]
	}
	return "base(" + strconv.Itoa(int(b)) + ")"
}

// Logical is the semantic type (the Connect schema name) that decides how a
// base value converts: io.debezium.time.MicroTimestamp is an int64 of
// microseconds, org.apache.kafka.connect.data.Date an int32 of days, ...
type Logical uint8

// The semantic types this package converts. Unknown schema names fall back
// to LogicalNone: the base type alone decides.
const (
	LogicalNone Logical = iota
	LogicalDecimal
	LogicalVariableScaleDecimal
	LogicalDate
	LogicalTimeMillis
	LogicalMicroTime
	LogicalNanoTime
	LogicalTimestampMillis
	LogicalMicroTimestamp
	LogicalNanoTimestamp
	LogicalZonedTimestamp
	LogicalZonedTime
	LogicalYear
	LogicalMicroDuration
	LogicalInterval
	LogicalJSON
	LogicalXML
	LogicalUUID
	LogicalEnum
	LogicalEnumSet
	LogicalBits
	LogicalGeometry
)

// Semantic names as Debezium and Kafka Connect write them in schemas.
var logicalByName = map[string]Logical{
	"org.apache.kafka.connect.data.Decimal":   LogicalDecimal,
	"io.debezium.data.VariableScaleDecimal":   LogicalVariableScaleDecimal,
	"org.apache.kafka.connect.data.Date":      LogicalDate,
	"io.debezium.time.Date":                   LogicalDate,
	"org.apache.kafka.connect.data.Time":      LogicalTimeMillis,
	"io.debezium.time.Time":                   LogicalTimeMillis,
	"io.debezium.time.MicroTime":              LogicalMicroTime,
	"io.debezium.time.NanoTime":               LogicalNanoTime,
	"org.apache.kafka.connect.data.Timestamp": LogicalTimestampMillis,
	"io.debezium.time.Timestamp":              LogicalTimestampMillis,
	"io.debezium.time.MicroTimestamp":         LogicalMicroTimestamp,
	"io.debezium.time.NanoTimestamp":          LogicalNanoTimestamp,
	"io.debezium.time.ZonedTimestamp":         LogicalZonedTimestamp,
	"io.debezium.time.ZonedTime":              LogicalZonedTime,
	"io.debezium.time.Year":                   LogicalYear,
	"io.debezium.time.MicroDuration":          LogicalMicroDuration,
	"io.debezium.time.Interval":               LogicalInterval,
	"io.debezium.data.Json":                   LogicalJSON,
	"io.debezium.data.Xml":                    LogicalXML,
	"io.debezium.data.Uuid":                   LogicalUUID,
	"io.debezium.data.Enum":                   LogicalEnum,
	"io.debezium.data.EnumSet":                LogicalEnumSet,
	"io.debezium.data.Bits":                   LogicalBits,
	"io.debezium.data.geometry.Geometry":      LogicalGeometry,
	"io.debezium.data.geometry.Geography":     LogicalGeometry,
	"io.debezium.data.geometry.Point":         LogicalGeometry,
}

// Type is a compiled column type: how the value travels (Base, Logical,
// parameters) and what it becomes in Delta (Delta).
type Type struct {
	Base     Base
	Logical  Logical
	Name     string // the Connect schema name, "" if none
	Optional bool
	// Scale and Precision are the Decimal parameters as the schema gives
	// them (Precision 0 when the schema has none).
	Scale     int
	Precision int
	// DecimalAsString is set when a decimal cannot be a Delta decimal
	// (precision above 38, scale above 38): its values become exact text.
	DecimalAsString bool
	Elem            *Type   // array element
	Key, Val        *Type   // map key and value
	Fields          []Field // struct fields
	// Delta is the Delta column type values of this type are written as.
	Delta delta.DataType

	names []string // field names of a struct, in order

	opts *Options
}

// Field is a named struct field (a column when the struct is a row).
type Field struct {
	Name string
	Type *Type
}

// BinaryMode is Debezium's binary.handling.mode: how bytes columns travel.
type BinaryMode uint8

// The binary.handling.mode values.
const (
	BinaryBytes BinaryMode = iota
	BinaryBase64
	BinaryBase64URLSafe
	BinaryHex
)

// ParseBinaryMode parses a binary.handling.mode setting.
func ParseBinaryMode(s string) (BinaryMode, error) {
	switch s {
	case "", "bytes":
		return BinaryBytes, nil
	case "base64":
		return BinaryBase64, nil
	case "base64-url-safe":
		return BinaryBase64URLSafe, nil
	case "hex":
		return BinaryHex, nil
	}
	return 0, fmt.Errorf("parse binary.handling.mode %q: want bytes, base64, base64-url-safe or hex", s)
}

// DecimalMode is Debezium's decimal.handling.mode.
type DecimalMode uint8

// The decimal.handling.mode values.
const (
	DecimalPrecise DecimalMode = iota
	DecimalDouble
	DecimalString
)

// ParseDecimalMode parses a decimal.handling.mode setting.
func ParseDecimalMode(s string) (DecimalMode, error) {
	switch s {
	case "", "precise":
		return DecimalPrecise, nil
	case "double":
		return DecimalDouble, nil
	case "string":
		return DecimalString, nil
	}
	return 0, fmt.Errorf("parse decimal.handling.mode %q: want precise, double or string", s)
}

// Options are the connector settings that change how values travel but
// that a schema does not always spell out.
type Options struct {
	// Binary tells how binary columns are encoded when Debezium sends them
	// as strings; it matters for schema-less JSON binary columns, for
	// columns listed in BinaryColumns and for recognising the unavailable
	// placeholder in its encoded form.
	Binary BinaryMode
	// BinaryColumns names string-typed columns (as the schema says) that
	// are really binary columns encoded by Binary; they become Delta binary.
	BinaryColumns map[string]bool
	// Decimal tells how a schema-less JSON value for a Delta decimal column
	// travels: base64 unscaled bytes, a JSON number or a decimal string.
	Decimal DecimalMode
}

var defaultOptions = &Options{}

// ErrOutOfRange reports a value that does not fit its column type.
var ErrOutOfRange = errors.New("value out of range")

// ErrInvalid reports a value that does not have its column type's form.
var ErrInvalid = errors.New("invalid value")

// connectSchema is the JSON form of a Kafka Connect schema, as the JSON
// converter inlines it with schemas.enable=true.
type connectSchema struct {
	Type       string            `json:"type"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Parameters map[string]string `json:"parameters"`
	Fields     []connectSchema   `json:"fields"`
	Items      *connectSchema    `json:"items"`
	Keys       *connectSchema    `json:"keys"`
	Values     *connectSchema    `json:"values"`
}

// ParseConnect compiles a Kafka Connect schema in its JSON converter form.
func ParseConnect(data []byte, opts *Options) (*Type, error) {
	var cs connectSchema
	if err := json.Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("parse connect schema: %w", err)
	}
	t, err := compileConnect(&cs, "", opts)
	if err != nil {
		return nil, fmt.Errorf("parse connect schema: %w", err)
	}
	return t, nil
}

func compileConnect(cs *connectSchema, field string, opts *Options) (*Type, error) {
	base, ok := baseByName[cs.Type]
	if !ok {
		return nil, fmt.Errorf("field %q: unknown connect type %q", field, cs.Type)
	}
	t := &Type{Base: base, Name: cs.Name, Optional: cs.Optional}
	switch base {
	case BaseArray:
		if cs.Items == nil {
			return nil, fmt.Errorf("field %q: array without items", field)
		}
		e, err := compileConnect(cs.Items, field, opts)
		if err != nil {
			return nil, err
		}
		t.Elem = e
	case BaseMap:
		if cs.Keys == nil || cs.Values == nil {
			return nil, fmt.Errorf("field %q: map without keys or values", field)
		}
		k, err := compileConnect(cs.Keys, field, opts)
		if err != nil {
			return nil, err
		}
		v, err := compileConnect(cs.Values, field, opts)
		if err != nil {
			return nil, err
		}
		t.Key, t.Val = k, v
	case BaseStruct:
		t.Fields = make([]Field, len(cs.Fields))
		for i := range cs.Fields {
			f, err := compileConnect(&cs.Fields[i], cs.Fields[i].Field, opts)
			if err != nil {
				return nil, err
			}
			t.Fields[i] = Field{Name: cs.Fields[i].Field, Type: f}
		}
	}
	if err := t.resolve(field, cs.Parameters, opts); err != nil {
		return nil, err
	}
	return t, nil
}

// resolve fills Logical, decimal parameters and the Delta type once Base,
// Name and the children are set. field is the column name (for
// BinaryColumns and error messages).
func (t *Type) resolve(field string, params map[string]string, opts *Options) error {
	if opts == nil {
		opts = defaultOptions
	}
	t.opts = opts
	t.setNames()
	t.Logical = logicalByName[t.Name]
	if t.Logical == LogicalNone && t.Base == BaseString && opts.BinaryColumns[field] {
		// A binary column Debezium sent as base64 or hex text.
		t.Base = BaseBytes
		t.Logical = LogicalNone
		t.Delta = delta.Binary
		t.Name = binaryTextName
		return nil
	}
	if t.Logical == LogicalDecimal {
		s, err := strconv.Atoi(params["scale"])
		if err != nil {
			return fmt.Errorf("field %q: decimal without a valid scale parameter %q", field, params["scale"])
		}
		t.Scale = s
		if p := params["connect.decimal.precision"]; p != "" {
			if t.Precision, err = strconv.Atoi(p); err != nil {
				return fmt.Errorf("field %q: decimal precision %q: %w", field, p, err)
			}
		}
	}
	d, err := t.deltaType()
	if err != nil {
		return fmt.Errorf("field %q: %w", field, err)
	}
	t.Delta = d
	return nil
}

// binaryTextName marks a string column re-typed as binary by BinaryColumns,
// whose values are decoded with Options.Binary.
const binaryTextName = "cdcapply.binary.text"

// deltaType decides the Delta column type; see the type table in the
// package's design notes.
func (t *Type) deltaType() (delta.DataType, error) {
	switch t.Logical {
	case LogicalDecimal:
		p, s := t.Precision, t.Scale
		if p == 0 {
			// No precision parameter (e.g. MySQL unsigned bigint in
			// precise mode): take the widest Delta decimal.
			p = 38
		}
		if s < 0 {
			// PostgreSQL 15 allows negative scale; Delta does not, so the
			// value is stored at scale 0 with the extra integer digits.
			p, s = p-s, 0
		}
		if s > p {
			p = s
		}
		if p > 38 {
			t.DecimalAsString = true
			return delta.String, nil
		}
		return delta.DecimalType{Precision: p, Scale: s}, nil
	case LogicalVariableScaleDecimal:
		return delta.String, nil
	case LogicalDate:
		return delta.Date, nil
	case LogicalTimeMillis, LogicalMicroTime, LogicalNanoTime:
		return delta.Long, nil
	case LogicalTimestampMillis, LogicalMicroTimestamp, LogicalNanoTimestamp, LogicalZonedTimestamp:
		return delta.Timestamp, nil
	case LogicalYear:
		return delta.Integer, nil
	case LogicalMicroDuration:
		return delta.Long, nil
	case LogicalBits:
		return delta.Binary, nil
	}
	switch t.Base {
	case BaseInt8:
		return delta.Byte, nil
	case BaseInt16:
		return delta.Short, nil
	case BaseInt32:
		return delta.Integer, nil
	case BaseInt64:
		return delta.Long, nil
	case BaseFloat32:
		return delta.Float, nil
	case BaseFloat64:
		return delta.Double, nil
	case BaseBool:
		return delta.Boolean, nil
	case BaseString:
		return delta.String, nil
	case BaseBytes:
		return delta.Binary, nil
	case BaseArray:
		return delta.ArrayType{ElementType: t.Elem.Delta, ContainsNull: t.Elem.Optional}, nil
	case BaseMap:
		return delta.MapType{KeyType: t.Key.Delta, ValueType: t.Val.Delta, ValueContainsNull: t.Val.Optional}, nil
	case BaseStruct:
		st := delta.StructType{Fields: make([]delta.StructField, len(t.Fields))}
		for i, f := range t.Fields {
			st.Fields[i] = delta.StructField{Name: f.Name, Type: f.Type.Delta, Nullable: f.Type.Optional}
		}
		return st, nil
	}
	return nil, fmt.Errorf("no Delta type for %s", t.Base)
}

func (t *Type) setNames() {
	if t.Base != BaseStruct {
		return
	}
	t.names = make([]string, len(t.Fields))
	for i, f := range t.Fields {
		t.names[i] = f.Name
	}
}

// FieldNames returns the names of a struct's fields in order. The slice is
// shared by every caller and must not be modified.
func (t *Type) FieldNames() []string { return t.names }

// Field returns the index of the struct field called name, or -1.
func (t *Type) Field(name string) int {
	for i := range t.Fields {
		if t.Fields[i].Name == name {
			return i
		}
	}
	return -1
}

// DeltaSchema returns the Delta struct for a row type.
func (t *Type) DeltaSchema() (delta.StructType, error) {
	st, ok := t.Delta.(delta.StructType)
	if !ok {
		return delta.StructType{}, fmt.Errorf("delta schema: %s is not a struct", t.Base)
	}
	return st, nil
}

// FromDelta builds the row type for schema-less JSON from the table's Delta
// schema: each Delta type is read in the form Debezium sends it by default
// (timestamps as microseconds or ISO text, dates as days, binary per
// opts.Binary, decimals per opts.Decimal).
func FromDelta(st delta.StructType, opts *Options) (*Type, error) {
	if opts == nil {
		opts = defaultOptions
	}
	t, err := fromDelta(st, true, opts)
	if err != nil {
		return nil, fmt.Errorf("schema from delta: %w", err)
	}
	return t, nil
}

func fromDelta(dt delta.DataType, nullable bool, opts *Options) (*Type, error) {
	t := &Type{Optional: nullable, opts: opts, Delta: dt}
	switch d := dt.(type) {
	case delta.PrimitiveType:
		switch d {
		case delta.Byte:
			t.Base = BaseInt8
		case delta.Short:
			t.Base = BaseInt16
		case delta.Integer:
			t.Base = BaseInt32
		case delta.Long:
			t.Base = BaseInt64
		case delta.Float:
			t.Base = BaseFloat32
		case delta.Double:
			t.Base = BaseFloat64
		case delta.Boolean:
			t.Base = BaseBool
		case delta.String:
			t.Base = BaseString
		case delta.Binary:
			t.Base = BaseBytes
			if opts.Binary != BinaryBytes {
				t.Name = binaryTextName
			}
		case delta.Date:
			t.Base, t.Logical = BaseInt32, LogicalDate
		case delta.Timestamp, delta.TimestampNTZ:
			// Numbers are microseconds (Debezium's default adaptive
			// precision for PostgreSQL); strings are ZonedTimestamp text.
			t.Base, t.Logical = BaseInt64, LogicalMicroTimestamp
		default:
			return nil, fmt.Errorf("no Debezium form for Delta type %s", d)
		}
	case delta.DecimalType:
		t.Logical, t.Precision, t.Scale = LogicalDecimal, d.Precision, d.Scale
		switch opts.Decimal {
		case DecimalPrecise:
			t.Base = BaseBytes
		case DecimalDouble:
			t.Base = BaseFloat64
		case DecimalString:
			t.Base = BaseString
		}
	case delta.ArrayType:
		e, err := fromDelta(d.ElementType, d.ContainsNull, opts)
		if err != nil {
			return nil, err
		}
		t.Base, t.Elem = BaseArray, e
	case delta.MapType:
		k, err := fromDelta(d.KeyType, false, opts)
		if err != nil {
			return nil, err
		}
		v, err := fromDelta(d.ValueType, d.ValueContainsNull, opts)
		if err != nil {
			return nil, err
		}
		t.Base, t.Key, t.Val = BaseMap, k, v
	case delta.StructType:
		t.Base = BaseStruct
		t.Fields = make([]Field, len(d.Fields))
		for i, f := range d.Fields {
			ft, err := fromDelta(f.Type, f.Nullable, opts)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			t.Fields[i] = Field{Name: f.Name, Type: ft}
		}
		t.setNames()
	default:
		return nil, fmt.Errorf("no Debezium form for Delta type %T", dt)
	}
	return t, nil
}

// NewStruct builds a struct type from fields (for example a row type
// without the flattened form's metadata fields).
func NewStruct(name string, fields []Field, opts *Options) *Type {
	t := &Type{Base: BaseStruct, Name: name, Fields: fields}
	if opts == nil {
		opts = defaultOptions
	}
	t.opts = opts
	t.setNames()
	d, _ := t.deltaType() // a struct of compiled fields always has one
	t.Delta = d
	return t
}
