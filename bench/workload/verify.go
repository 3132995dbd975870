package workload

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
	"github.com/cdcapply/cdcapply/schema"
)

// The apply engine's columns the verifier reads (apply.ColSeq and
// apply.ColDeleted; a test keeps them equal). They are spelled out so that
// the engine's own tests can use this package without an import cycle.
const (
	colSeq     = "_cdc_seq"
	colDeleted = "_cdc_deleted"
)

// Diff is how a table differs from the oracle.
type Diff struct {
	// Expected is the rows the oracle expects, Rows the rows the table holds.
	Expected, Rows int64
	// Missing keys are expected but absent; Extra keys are present but not
	// expected; Duplicated keys are held by more than one row; Mismatched
	// keys are present with another sequence, deleted flag or value.
	Missing, Extra, Duplicated, Mismatched int64
	// Examples describe the first mismatches, expected against actual.
	Examples []string
}

// OK reports whether the table equals the oracle.
func (d *Diff) OK() bool {
	return d.Missing == 0 && d.Extra == 0 && d.Duplicated == 0 && d.Mismatched == 0 && d.Rows == d.Expected
}

// String summarises the diff with its examples, one per line.
func (d *Diff) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows, %d expected: %d missing, %d extra, %d duplicated, %d mismatched",
		d.Rows, d.Expected, d.Missing, d.Extra, d.Duplicated, d.Mismatched)
	for _, e := range d.Examples {
		b.WriteString("\n  ")
		b.WriteString(e)
	}
	return b.String()
}

// checker compares rows one at a time against the oracle, remembering
// which keys it saw in a bitset (memory: one bit per key).
type checker struct {
	o        *Oracle
	diff     Diff
	seen     []uint64
	examples int
}

func newChecker(o *Oracle, examples int) *checker {
	return &checker{o: o, seen: make([]uint64, (o.MaxID()+64)/64), examples: examples, diff: Diff{Expected: o.Len()}}
}

func (c *checker) note(format string, args ...any) {
	if len(c.diff.Examples) < c.examples {
		c.diff.Examples = append(c.diff.Examples, fmt.Sprintf(format, args...))
	}
}

// row checks one table row: its key, sequence (hex of the sequence key),
// deleted flag and the rendered value of every source column.
func (c *checker) row(id int64, seqHex string, deleted bool, cells []string) {
	c.diff.Rows++
	want, ok := c.o.Row(id)
	if !ok {
		c.diff.Extra++
		c.note("id=%d: not expected, table has seq %s deleted=%v", id, seqHex, deleted)
		return
	}
	if c.seen[id/64]&(1<<(id%64)) != 0 {
		c.diff.Duplicated++
		c.note("id=%d: more than one row", id)
		return
	}
	c.seen[id/64] |= 1 << (id % 64)
	var bad []string
	if ws := hex.EncodeToString(want.Seq); ws != seqHex {
		bad = append(bad, fmt.Sprintf("%s: want %s got %s", colSeq, ws, seqHex))
	}
	if want.Deleted != deleted {
		bad = append(bad, fmt.Sprintf("%s: want %v got %v", colDeleted, want.Deleted, deleted))
	}
	for i, v := range want.Values {
		if w := render(v); w != cells[i] {
			bad = append(bad, fmt.Sprintf("%s: want %s got %s", c.o.tbl.cols[i].name, clip(w), clip(cells[i])))
		}
	}
	if len(bad) > 0 {
		c.diff.Mismatched++
		c.note("id=%d: %s", id, strings.Join(bad, "; "))
	}
}

func (c *checker) finish() *Diff {
	if c.diff.Rows-c.diff.Extra-c.diff.Duplicated == c.diff.Expected {
		return &c.diff
	}
	c.o.Rows(func(r Row) bool {
		if c.seen[r.ID/64]&(1<<(r.ID%64)) == 0 {
			c.diff.Missing++
			c.note("id=%d: missing (want seq %x deleted=%v)", r.ID, r.Seq, r.Deleted)
		}
		return true
	})
	return &c.diff
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// render is the canonical text of a value both readers are compared in:
// integers and timestamps (microseconds) in decimal, decimals with their
// scale, strings quoted, NULL as null.
func render(v schema.Value) string {
	switch v.Kind {
	case schema.KindNull:
		return "null"
	case schema.KindInt:
		return strconv.FormatInt(v.I, 10)
	case schema.KindBool:
		return strconv.FormatBool(v.Bool())
	case schema.KindString:
		return strconv.Quote(v.S)
	case schema.KindDecimal:
		return decimalText(v)
	}
	return v.GoString()
}

// Verify reads the Delta table in store with this module's reader and
// compares it with the oracle, listing up to examples mismatches.
func Verify(ctx context.Context, store storage.Storage, o *Oracle, examples int) (*Diff, error) {
	snap, err := delta.Open(store).Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify table %s: %w", store.Location(), err)
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return nil, fmt.Errorf("verify table %s: %w", store.Location(), err)
	}
	c := newChecker(o, examples)
	names := o.Columns()
	cells := make([]string, len(names))
	for _, add := range snap.Files() {
		if err := verifyFile(ctx, store, layout, add, names, cells, c); err != nil {
			return nil, fmt.Errorf("verify table %s: %w", store.Location(), err)
		}
	}
	return c.finish(), nil
}

func verifyFile(ctx context.Context, store storage.Storage, layout datafile.Layout, add *delta.Add, names, cells []string, c *checker) error {
	rec, err := datafile.Read(ctx, store, layout, add)
	if err != nil {
		return err
	}
	defer rec.Release()
	col := func(name string) (arrow.Array, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("file %s: no column %s", add.Path, name)
		}
		return rec.Column(idx[0]), nil
	}
	cols := make([]arrow.Array, len(names))
	for i, n := range names {
		if cols[i], err = col(n); err != nil {
			return err
		}
	}
	seqCol, err := col(colSeq)
	if err != nil {
		return err
	}
	delCol, err := col(colDeleted)
	if err != nil {
		return err
	}
	ids, ok1 := cols[0].(*array.Int64)
	seqs, ok2 := seqCol.(stringArray)
	dels, ok3 := delCol.(*array.Boolean)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("file %s: key, %s or %s has an unexpected type", add.Path, colSeq, colDeleted)
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		for i, a := range cols {
			v, err := arrowValue(a, r)
			if err != nil {
				return fmt.Errorf("file %s column %s: %w", add.Path, names[i], err)
			}
			cells[i] = render(v)
		}
		c.row(ids.Value(r), seqs.Value(r), dels.Value(r), cells)
	}
	return nil
}

// stringArray is any Arrow string column.
type stringArray interface {
	arrow.Array
	Value(int) string
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// arrowValue reads one cell of the column types the workload generates.
func arrowValue(a arrow.Array, r int) (schema.Value, error) {
	if a.IsNull(r) {
		return schema.Null, nil
	}
	switch a := a.(type) {
	case *array.Int32:
		return schema.Int(int64(a.Value(r))), nil
	case *array.Int64:
		return schema.Int(a.Value(r)), nil
	case *array.Boolean:
		return schema.Bool(a.Value(r)), nil
	case stringArray: // String, LargeString, StringView: other writers (the bench peers) use them
		return schema.String(a.Value(r)), nil
	case *array.Timestamp:
		// Microseconds whatever the unit (Spark's INT96 reads as nanoseconds).
		v, m := int64(a.Value(r)), int64(a.DataType().(*arrow.TimestampType).Unit.Multiplier())
		if um := int64(arrow.Microsecond.Multiplier()); m < um {
			return schema.Int(floorDiv(v, um/m)), nil
		}
		return schema.Int(v * (m / int64(arrow.Microsecond.Multiplier()))), nil
	case *array.Decimal128:
		d := a.Value(r)
		return schema.Value{Kind: schema.KindDecimal, I: int64(d.LowBits()), Hi: d.HighBits(),
			Scale: a.DataType().(*arrow.Decimal128Type).Scale}, nil
	}
	return schema.Null, fmt.Errorf("unexpected type %s", a.DataType())
}

// DeltaRS locates delta-rs's reader: a Python with the deltalake package
// and the interop test's read_table.py.
type DeltaRS struct {
	Python string
	Script string
}

// ErrNoDeltaRS reports that no Python with deltalake was found.
var ErrNoDeltaRS = pyenv.ErrNoPython

// FindDeltaRS looks for $CDCAPPLY_PYTHON or the repository's .venv, and
// for delta/interop/testdata/read_table.py, upwards from the working
// directory.
func FindDeltaRS() (DeltaRS, error) {
	py, root, err := pyenv.Find()
	if err != nil {
		return DeltaRS{}, fmt.Errorf("find delta-rs: %w", err)
	}
	d := DeltaRS{Python: py, Script: filepath.Join(root, "delta", "interop", "testdata", "read_table.py")}
	if _, err := os.Stat(d.Script); err != nil {
		return DeltaRS{}, fmt.Errorf("find delta-rs: %s: %w", d.Script, ErrNoDeltaRS)
	}
	return d, nil
}

// Verify reads the table at dir with delta-rs and compares it with the
// oracle. The whole table travels as JSON: meant for test-sized tables.
func (d DeltaRS) Verify(ctx context.Context, dir string, o *Oracle, examples int) (*Diff, error) {
	cmd := exec.CommandContext(ctx, d.Python, d.Script, dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("read table %s with delta-rs: %w: %s", dir, err, errb.String())
	}
	var res struct {
		Rows []map[string]any `json:"rows"`
	}
	dec := json.NewDecoder(&out)
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("read table %s with delta-rs: %w", dir, err)
	}
	c := newChecker(o, examples)
	names := o.Columns()
	cells := make([]string, len(names))
	for _, row := range res.Rows {
		id, err := row[names[0]].(json.Number).Int64()
		if err != nil {
			return nil, fmt.Errorf("read table %s with delta-rs: key %v: %w", dir, row[names[0]], err)
		}
		for i, n := range names {
			switch v := row[n].(type) {
			case nil:
				cells[i] = "null"
			case string:
				if o.tbl.cols[i].kind == colDecimal {
					cells[i] = v // the script renders decimals as plain text with the scale
				} else {
					cells[i] = strconv.Quote(v)
				}
			default:
				cells[i] = fmt.Sprint(v)
			}
		}
		seq, _ := row[colSeq].(string)
		del, _ := row[colDeleted].(bool)
		c.row(id, seq, del, cells)
	}
	return c.finish(), nil
}
