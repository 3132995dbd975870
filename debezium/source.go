package debezium

import (
	"strconv"
	"strings"

	"github.com/cdcapply/cdcapply/schema"
)

// sequence builds the change's typed sequence from its source block (or
// flattened metadata, or configured paths). A missing or null element that
// the connector's order needs rejects the change as null_sequence.
func (d *Decoder) sequence(env *envelope, ch *Change) (Sequence, *Rejection) {
	src := &env.src
	seq := Sequence{Connector: d.cfg.connector}
	null := func(what string) (Sequence, *Rejection) {
		return Sequence{}, reject(env.pos, ReasonNullSequence, nil, "%s sequence: %s missing or null", d.cfg.connector, what)
	}
	bad := func(what string, err error) (Sequence, *Rejection) {
		return Sequence{}, reject(env.pos, ReasonBadSequence, err, "%s sequence: %s", d.cfg.connector, what)
	}
	switch d.cfg.connector {
	case ConnectorPostgres:
		// source.sequence is ["lastCommitLsn","lsn"]: the commit LSN of
		// the previous transaction orders transactions by commit, the lsn
		// orders events inside one. lastCommitLsn is null before the
		// connector has seen a commit (snapshot reads, first events after
		// start); a null part sorts below every LSN, which puts those
		// events before anything streamed after a known commit.
		if v := src[srcSequence]; v.kind == svString {
			var parts [2]Part
			n, err := parsePGSequence(v, &parts)
			if err != nil {
				return bad("source.sequence", err)
			}
			if n != 2 {
				return bad("source.sequence", errWant2)
			}
			if parts[1].Kind == PartNull {
				return null("source.sequence lsn")
			}
			seq.add(parts[0])
			seq.add(parts[1])
			return seq, nil
		}
		lsn, ok, err := srcUint(src[srcLsn])
		if err != nil {
			return bad("source.lsn", err)
		}
		if !ok {
			return null("source.sequence and source.lsn")
		}
		seq.add(Part{Kind: PartNull})
		seq.add(Part{Kind: PartUint, U: lsn})
	case ConnectorMySQL:
		f := src[srcFile]
		if f.kind != svString {
			return null("source.file")
		}
		idx, err := parseBinlogIndex(f.str())
		if err != nil {
			return bad("source.file", err)
		}
		pos, ok, err := srcUint(src[srcPos])
		if err != nil {
			return bad("source.pos", err)
		}
		if !ok {
			return null("source.pos")
		}
		row, _, err := srcUint(src[srcRow])
		if err != nil {
			return bad("source.row", err)
		}
		seq.add(Part{Kind: PartUint, U: idx})
		seq.add(Part{Kind: PartUint, U: pos})
		seq.add(Part{Kind: PartUint, U: row})
	case ConnectorSQLServer:
		c := src[srcCommitLsn]
		if c.kind != svString {
			return null("source.commit_lsn")
		}
		hi, lo, err := parseSQLServerLSN(c.str())
		if err != nil {
			return bad("source.commit_lsn", err)
		}
		seq.add(Part{Kind: PartUint, U: hi})
		seq.add(Part{Kind: PartUint, U: lo})
		// change_lsn is null for snapshot reads: null sorts lowest.
		if cl := src[srcChangeLsn]; cl.kind == svString {
			hi, lo, err := parseSQLServerLSN(cl.str())
			if err != nil {
				return bad("source.change_lsn", err)
			}
			seq.add(Part{Kind: PartUint, U: hi})
			seq.add(Part{Kind: PartUint, U: lo})
		} else {
			seq.add(Part{Kind: PartNull})
			seq.add(Part{Kind: PartNull})
		}
		if n, ok, err := srcUint(src[srcEventSerialNo]); err != nil {
			return bad("source.event_serial_no", err)
		} else if ok {
			seq.add(Part{Kind: PartUint, U: n})
		} else {
			seq.add(Part{Kind: PartNull})
		}
	case ConnectorMongoDB:
		// The oplog/change stream position is the cluster time (seconds,
		// ordinal); Debezium sends the seconds as ts_ms (x1000) or ts_sec.
		ts, ok, err := srcUint(src[srcTsMs])
		if err != nil {
			return bad("source.ts_ms", err)
		}
		if !ok {
			sec, ok2, err := srcUint(src[srcTsSec])
			if err != nil {
				return bad("source.ts_sec", err)
			}
			if !ok2 {
				return null("source.ts_ms")
			}
			ts = sec * 1000
		}
		ord, ok, err := srcUint(src[srcOrd])
		if err != nil {
			return bad("source.ord", err)
		}
		if !ok {
			return null("source.ord")
		}
		seq.add(Part{Kind: PartUint, U: ts})
		seq.add(Part{Kind: PartUint, U: ord})
	case ConnectorOracle:
		// Order by commit SCN first (commit order, like PostgreSQL's
		// lastCommitLsn; null for snapshot reads sorts lowest), then the
		// change's SCN, then the statement sequence inside one SCN.
		scn, ok, err := srcUint(src[srcScn])
		if err != nil {
			return bad("source.scn", err)
		}
		if !ok {
			return null("source.scn")
		}
		if c, ok, err := srcUint(src[srcCommitScn]); err != nil {
			return bad("source.commit_scn", err)
		} else if ok {
			seq.add(Part{Kind: PartUint, U: c})
		} else {
			seq.add(Part{Kind: PartNull})
		}
		seq.add(Part{Kind: PartUint, U: scn})
		ssn, _, err := srcUint(src[srcSsn])
		if err != nil {
			return bad("source.ssn", err)
		}
		seq.add(Part{Kind: PartUint, U: ssn})
	case ConnectorFields:
		for i, f := range d.cfg.seqFields {
			v, ok := d.fieldValue(env, ch, i)
			if !ok {
				return null(f.Path)
			}
			p, err := typePart(v, f.Kind)
			if err != nil {
				return bad(f.Path, err)
			}
			seq.add(p)
		}
	}
	return seq, nil
}

var errWant2 = strconvError("want two elements")

// strconvError is a constant error text for sequence parsing failures.
type strconvError string

// Error returns the text.
func (e strconvError) Error() string { return string(e) }

// parsePGSequence reads the JSON array text of source.sequence, which in
// JSON records arrives escaped inside a string: "[\"1\",\"2\"]". It reads
// the text in place (escaped quotes count as quotes) without allocating.
func parsePGSequence(v srcVal, parts *[2]Part) (int, error) {
	b := v.bytes()
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	quote := func() bool { // consumes " or \" when next
		switch {
		case i < len(b) && b[i] == '"':
			i++
			return true
		case v.esc && i+1 < len(b) && b[i] == '\\' && b[i+1] == '"':
			i += 2
			return true
		}
		return false
	}
	bad := strconvError("source.sequence is not a JSON array of LSNs")
	ws()
	if i >= len(b) || b[i] != '[' {
		return 0, bad
	}
	i++
	n := 0
	for {
		ws()
		if i < len(b) && b[i] == ']' && n == 0 {
			i++
			break
		}
		var p Part
		switch {
		case len(b)-i >= 4 && string(b[i:i+4]) == "null":
			i += 4
		default:
			quoted := quote()
			start := i
			for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] >= 'A' && b[i] <= 'F' || b[i] >= 'a' && b[i] <= 'f' || b[i] == '/') {
				i++
			}
			u, err := parseLSNBytes(b[start:i])
			if err != nil || start == i {
				return 0, bad
			}
			if quoted && !quote() {
				return 0, bad
			}
			p = Part{Kind: PartUint, U: u}
		}
		if n < 2 {
			parts[n] = p
		}
		n++
		ws()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == ']' {
			i++
			break
		}
		return 0, bad
	}
	ws()
	if i != len(b) {
		return 0, bad
	}
	return n, nil
}

// srcUint reads an unsigned integer that may travel as a number or as
// decimal text (Oracle SCNs, PostgreSQL LSNs in some forms). ok is false
// when the field is absent or null.
func srcUint(v srcVal) (uint64, bool, error) {
	switch v.kind {
	case svInt:
		if v.i < 0 {
			return 0, false, strconvError("negative " + strconv.FormatInt(v.i, 10))
		}
		return uint64(v.i), true, nil
	case svString:
		if u, ok := parseDecimalUint(v.bytes()); ok && !v.esc {
			return u, true, nil
		}
		u, err := strconv.ParseUint(v.str(), 10, 64)
		if err != nil {
			return 0, false, err
		}
		return u, true, nil
	case svOther:
		return 0, false, strconvError("not an integer")
	}
	return 0, false, nil
}

// fieldValue reads configured sequence field i.
func (d *Decoder) fieldValue(env *envelope, ch *Change, i int) (srcVal, bool) {
	f := d.cfg.seqFields[i]
	path := f.Path
	switch {
	case path == "ts_ms" || path == "__ts_ms":
		if !env.sawTs {
			return srcVal{}, false
		}
		return srcVal{kind: svInt, i: env.tsMs}, true
	case strings.HasPrefix(path, "after.") || strings.HasPrefix(path, "before.") || !strings.Contains(path, ".") && !strings.HasPrefix(path, "__"):
		img := ch.After
		col := path
		if rest, ok := strings.CutPrefix(path, "before."); ok {
			img, col = ch.Before, rest
		} else if rest, ok := strings.CutPrefix(path, "after."); ok {
			col = rest
		} else if !img.Present() {
			img = ch.Before // flattened delete: the row sits in before
		}
		v, ok := img.Get(col)
		if !ok {
			return srcVal{}, false
		}
		return valueSrc(v)
	}
	name := strings.TrimPrefix(strings.TrimPrefix(path, "source."), "__")
	if id := srcID([]byte(strings.TrimPrefix(name, "source_"))); id >= 0 {
		v := env.src[id]
		return v, v.kind == svInt || v.kind == svString
	}
	if en, ok := extraName(path); ok {
		for j, n := range d.cfg.extra {
			if n == en && j < len(env.extra) {
				v := env.extra[j]
				return v, v.kind == svInt || v.kind == svString
			}
		}
	}
	return srcVal{}, false
}

// extraName returns the name under which a decoder captures a configured
// source field outside the fixed set: the bare field name for source.X
// paths (matched inside the source block), the full name for flattened __X
// paths (matched at top level).
func extraName(path string) (string, bool) {
	if x, ok := strings.CutPrefix(path, "source."); ok {
		return x, srcID([]byte(x)) < 0
	}
	if x, ok := strings.CutPrefix(path, "__"); ok {
		switch x {
		case "op", "deleted", "ts_ms":
			return "", false
		}
		return path, srcID([]byte(strings.TrimPrefix(x, "source_"))) < 0
	}
	return "", false
}

func valueSrc(v schema.Value) (srcVal, bool) {
	switch v.Kind {
	case schema.KindInt:
		return srcVal{kind: svInt, i: v.I}, true
	case schema.KindString:
		return strVal([]byte(v.S), false), true
	case schema.KindDecimal:
		return strVal([]byte(v.DecimalString()), false), true
	}
	return srcVal{}, false
}

func typePart(v srcVal, k FieldKind) (Part, error) {
	switch k {
	case FieldInt:
		if v.kind == svInt {
			return IntPart(v.i), nil
		}
		i, err := strconv.ParseInt(v.str(), 10, 64)
		if err != nil {
			return Part{}, err
		}
		return IntPart(i), nil
	case FieldUint:
		u, _, err := srcUint(v)
		return Part{Kind: PartUint, U: u}, err
	case FieldLSN:
		if v.kind == svInt {
			if v.i < 0 {
				return Part{}, strconvError("negative lsn")
			}
			return Part{Kind: PartUint, U: uint64(v.i)}, nil
		}
		u, err := ParseLSN(v.str())
		return Part{Kind: PartUint, U: u}, err
	default:
		if v.kind == svInt {
			return Part{Kind: PartString, S: strconv.FormatInt(v.i, 10)}, nil
		}
		return Part{Kind: PartString, S: v.str()}, nil
	}
}

// parseDecimalUint parses plain decimal digits without allocating.
func parseDecimalUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (1<<64-1-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	return u, true
}

// parseLSNBytes is ParseLSN for text in a record buffer, without
// allocating in the common decimal form.
func parseLSNBytes(b []byte) (uint64, error) {
	if u, ok := parseDecimalUint(b); ok {
		return u, nil
	}
	return ParseLSN(string(b))
}
