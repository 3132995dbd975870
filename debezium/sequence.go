package debezium

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Connector is the kind of source, which decides how a change's sequence
// is read from its source block.
type Connector uint8

// The connectors.
const (
	// ConnectorPostgres orders by (lastCommitLsn, lsn) from source.sequence,
	// falling back to (null, source.lsn).
	ConnectorPostgres Connector = iota + 1
	// ConnectorMySQL orders by (binlog file index, pos, row).
	ConnectorMySQL
	// ConnectorSQLServer orders by (commit_lsn, change_lsn, event_serial_no).
	ConnectorSQLServer
	// ConnectorMongoDB orders by (cluster time in ms, ord).
	ConnectorMongoDB
	// ConnectorOracle orders by (commit_scn, scn, ssn).
	ConnectorOracle
	// ConnectorFields orders by configured field paths.
	ConnectorFields
)

var connectorNames = map[Connector]string{
	ConnectorPostgres: "postgresql", ConnectorMySQL: "mysql", ConnectorSQLServer: "sqlserver",
	ConnectorMongoDB: "mongodb", ConnectorOracle: "oracle", ConnectorFields: "fields",
}

// String names the connector.
func (c Connector) String() string {
	if s, ok := connectorNames[c]; ok {
		return s
	}
	return "connector(" + strconv.Itoa(int(c)) + ")"
}

// ParseConnector parses a connector name as String spells it.
func ParseConnector(s string) (Connector, error) {
	for c, n := range connectorNames {
		if n == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("parse connector %q: want postgresql, mysql, sqlserver, mongodb, oracle or fields", s)
}

// PartKind is the type of one sequence element.
type PartKind uint8

// The part kinds, in the order they sort when kinds differ: a null part
// sorts below any value.
const (
	PartNull PartKind = iota
	PartUint
	PartInt
	PartString
)

// Part is one typed element of a sequence tuple: unsigned values in U,
// signed values as their bits in U (see Int), text in S.
type Part struct {
	Kind PartKind
	U    uint64
	S    string
}

// IntPart returns a signed part.
func IntPart(i int64) Part { return Part{Kind: PartInt, U: uint64(i)} }

// Int returns the value of a signed part.
func (p Part) Int() int64 { return int64(p.U) }

// MaxParts is the longest sequence tuple.
const MaxParts = 6

// Sequence is a typed, totally ordered position of a change in its source's
// history. Compare orders sequences of the same connector; Key is an
// encoding whose byte order equals Compare's order.
type Sequence struct {
	Connector Connector
	N         uint8
	Parts     [MaxParts]Part
}

// Valid reports whether s holds a sequence.
func (s Sequence) Valid() bool { return s.Connector != 0 }

func (s *Sequence) add(p Part) {
	if int(s.N) < MaxParts {
		s.Parts[s.N] = p
		s.N++
	}
}

func comparePart(a, b Part) int {
	if a.Kind != b.Kind {
		if a.Kind < b.Kind {
			return -1
		}
		return 1
	}
	switch a.Kind {
	case PartUint:
		switch {
		case a.U < b.U:
			return -1
		case a.U > b.U:
			return 1
		}
	case PartInt:
		switch {
		case a.Int() < b.Int():
			return -1
		case a.Int() > b.Int():
			return 1
		}
	case PartString:
		return strings.Compare(a.S, b.S)
	}
	return 0
}

// Compare returns -1, 0 or +1 as s orders before, equal to or after o. It
// compares the connector first (sequences of different connectors never
// meet in one table, but the order stays total), then the parts in order; a
// tuple that is a prefix of another orders first.
func (s Sequence) Compare(o Sequence) int {
	if s.Connector != o.Connector {
		if s.Connector < o.Connector {
			return -1
		}
		return 1
	}
	n := min(s.N, o.N)
	for i := range n {
		if c := comparePart(s.Parts[i], o.Parts[i]); c != 0 {
			return c
		}
	}
	switch {
	case s.N < o.N:
		return -1
	case s.N > o.N:
		return 1
	}
	return 0
}

// AppendKey appends the order-preserving encoding of s to dst: the
// connector byte, then per part a kind byte and the value (unsigned
// big-endian; signed big-endian with the sign bit flipped; strings with
// 0x00 escaped as 0x00 0xFF and terminated by 0x00 0x01).
func (s Sequence) AppendKey(dst []byte) []byte {
	dst = append(dst, byte(s.Connector))
	for i := range s.N {
		p := s.Parts[i]
		dst = append(dst, byte(p.Kind))
		switch p.Kind {
		case PartUint:
			dst = binary.BigEndian.AppendUint64(dst, p.U)
		case PartInt:
			dst = binary.BigEndian.AppendUint64(dst, p.U^(1<<63))
		case PartString:
			for j := 0; j < len(p.S); j++ {
				c := p.S[j]
				dst = append(dst, c)
				if c == 0 {
					dst = append(dst, 0xFF)
				}
			}
			dst = append(dst, 0x00, 0x01)
		}
	}
	return dst
}

// Key returns the order-preserving encoding of s: for sequences a and b,
// bytes.Compare(a.Key(), b.Key()) == a.Compare(b).
func (s Sequence) Key() []byte { return s.AppendKey(make([]byte, 0, 2+int(s.N)*9)) }

// ErrBadSequenceKey reports bytes that are not a sequence key.
var ErrBadSequenceKey = errors.New("bad sequence key")

// ParseSequenceKey decodes a Key back into its sequence.
func ParseSequenceKey(b []byte) (Sequence, error) {
	var s Sequence
	if len(b) == 0 {
		return s, fmt.Errorf("parse sequence key: %w: empty", ErrBadSequenceKey)
	}
	s.Connector = Connector(b[0])
	if _, ok := connectorNames[s.Connector]; !ok {
		return Sequence{}, fmt.Errorf("parse sequence key: %w: connector byte %d", ErrBadSequenceKey, b[0])
	}
	b = b[1:]
	for len(b) > 0 {
		if s.N == MaxParts {
			return Sequence{}, fmt.Errorf("parse sequence key: %w: more than %d parts", ErrBadSequenceKey, MaxParts)
		}
		var p Part
		p.Kind = PartKind(b[0])
		b = b[1:]
		switch p.Kind {
		case PartNull:
		case PartUint, PartInt:
			if len(b) < 8 {
				return Sequence{}, fmt.Errorf("parse sequence key: %w: short integer", ErrBadSequenceKey)
			}
			v := binary.BigEndian.Uint64(b)
			if p.Kind == PartUint {
				p.U = v
			} else {
				p.U = v ^ (1 << 63)
			}
			b = b[8:]
		case PartString:
			var sb []byte
			for {
				i := bytes.IndexByte(b, 0)
				if i < 0 || i+1 >= len(b) {
					return Sequence{}, fmt.Errorf("parse sequence key: %w: unterminated string", ErrBadSequenceKey)
				}
				sb = append(sb, b[:i]...)
				switch b[i+1] {
				case 0xFF:
					sb = append(sb, 0)
					b = b[i+2:]
					continue
				case 0x01:
					b = b[i+2:]
				default:
					return Sequence{}, fmt.Errorf("parse sequence key: %w: bad escape", ErrBadSequenceKey)
				}
				break
			}
			p.S = string(sb)
		default:
			return Sequence{}, fmt.Errorf("parse sequence key: %w: part kind %d", ErrBadSequenceKey, p.Kind)
		}
		s.add(p)
	}
	return s, nil
}

// String renders the sequence for people, e.g. postgresql(null,0/16B3748).
func (s Sequence) String() string {
	if !s.Valid() {
		return "none"
	}
	var sb strings.Builder
	sb.WriteString(s.Connector.String())
	sb.WriteByte('(')
	for i := range s.N {
		if i > 0 {
			sb.WriteByte(',')
		}
		p := s.Parts[i]
		switch p.Kind {
		case PartNull:
			sb.WriteString("null")
		case PartUint:
			if s.Connector == ConnectorPostgres {
				sb.WriteString(FormatLSN(p.U))
			} else {
				sb.WriteString(strconv.FormatUint(p.U, 10))
			}
		case PartInt:
			sb.WriteString(strconv.FormatInt(p.Int(), 10))
		case PartString:
			sb.WriteString(strconv.Quote(p.S))
		}
	}
	sb.WriteByte(')')
	return sb.String()
}

// FormatLSN renders a PostgreSQL LSN in its X/X form.
func FormatLSN(v uint64) string {
	return strings.ToUpper(strconv.FormatUint(v>>32, 16)) + "/" + strings.ToUpper(strconv.FormatUint(v&0xFFFFFFFF, 16))
}

// ParseLSN parses a PostgreSQL LSN, either X/X or a decimal number.
func ParseLSN(s string) (uint64, error) {
	if hi, lo, ok := strings.Cut(s, "/"); ok {
		h, err := strconv.ParseUint(hi, 16, 32)
		if err != nil {
			return 0, fmt.Errorf("parse lsn %q: %w", s, err)
		}
		l, err := strconv.ParseUint(lo, 16, 32)
		if err != nil {
			return 0, fmt.Errorf("parse lsn %q: %w", s, err)
		}
		return h<<32 | l, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	return v, nil
}

// parseSQLServerLSN parses SQL Server's xxxxxxxx:xxxxxxxx:xxxx LSN into its
// high 64 bits (VLF and block) and low 16 bits (slot).
func parseSQLServerLSN(s string) (uint64, uint64, error) {
	a, rest, ok1 := strings.Cut(s, ":")
	b, c, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("parse sql server lsn %q: want xxxxxxxx:xxxxxxxx:xxxx", s)
	}
	av, err1 := strconv.ParseUint(a, 16, 32)
	bv, err2 := strconv.ParseUint(b, 16, 32)
	cv, err3 := strconv.ParseUint(c, 16, 16)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("parse sql server lsn %q: %w", s, err)
	}
	return av<<32 | bv, cv, nil
}

// parseBinlogIndex returns the numeric suffix of a MySQL binlog file name
// (mysql-bin.000012 -> 12): files roll over to the next index, so the index
// orders them where the name as text would break at 999999 -> 1000000.
func parseBinlogIndex(name string) (uint64, error) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return 0, fmt.Errorf("parse binlog file %q: no numeric suffix", name)
	}
	v, err := strconv.ParseUint(name[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse binlog file %q: %w", name, err)
	}
	return v, nil
}

// FieldKind is how a configured sequence field is typed.
type FieldKind uint8

// The configured field kinds.
const (
	FieldInt FieldKind = iota + 1
	FieldUint
	FieldString
	FieldLSN
)

// SequenceField is one configured sequence element: a path into the
// envelope (source.ts_ms, after.version, or a top-level field of the
// flattened form such as __source_ts_ms) and how to type it.
type SequenceField struct {
	Path string
	Kind FieldKind
}

// ParseSequenceField parses "path:kind" with kind int, uint, string or lsn.
func ParseSequenceField(s string) (SequenceField, error) {
	path, kind, ok := strings.Cut(s, ":")
	if !ok || path == "" {
		return SequenceField{}, fmt.Errorf("parse sequence field %q: want path:int|uint|string|lsn", s)
	}
	f := SequenceField{Path: path}
	switch kind {
	case "int":
		f.Kind = FieldInt
	case "uint":
		f.Kind = FieldUint
	case "string":
		f.Kind = FieldString
	case "lsn":
		f.Kind = FieldLSN
	default:
		return SequenceField{}, fmt.Errorf("parse sequence field %q: unknown kind %q", s, kind)
	}
	return f, nil
}
