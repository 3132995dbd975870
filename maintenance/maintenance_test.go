package maintenance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/internal/pyenv"
	"github.com/cdcapply/cdcapply/maintenance"
)

// smallFiles writes keys 1..8 over four batches, each leaving a small
// file (batch 3 rewrites batch 1's file to update key 2, batch 4 deletes
// key 5), and returns the table's rows.
func smallFiles(t *testing.T) (string, *opstest.Stream, []string) {
	dir := t.TempDir()
	s := newStream(t, dir)
	ts := opstest.Now.Add(-time.Hour)
	s.Apply(opstest.Change(1, 1, "c", "a", ts, 0), opstest.Change(2, 1, "c", "b", ts, 0), opstest.Change(3, 1, "c", "c", ts, 0))
	s.Apply(opstest.Change(4, 2, "c", "d", ts, 0), opstest.Change(5, 2, "c", "e", ts, 0), opstest.Change(6, 2, "c", "f", ts, 0))
	s.Apply(opstest.Change(2, 3, "u", "b2", ts, 0))
	s.Apply(opstest.Change(7, 4, "c", "g", ts, 0), opstest.Change(8, 4, "c", "h", ts, 0), opstest.Change(5, 4, "d", "", ts, 0))
	want := []string{"1 a false", "2 b2 false", "3 c false", "4 d false", "5 e true", "6 f false", "7 g false", "8 h false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("set-up table %v, want %v", got, want)
	}
	return dir, s, want
}

func TestOptimizeKeepsRows(t *testing.T) {
	ctx := context.Background()
	dir, s, want := smallFiles(t)
	tbl := delta.Open(storage.NewLocal(dir))
	before, _ := tbl.Snapshot(ctx)
	if before.NumFiles() < 3 {
		t.Fatalf("set-up left %d files, want several small ones", before.NumFiles())
	}
	dry, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{DryRun: true})
	if err != nil || dry.Version != -1 || len(dry.Groups) != 1 || len(dry.Groups[0]) != before.NumFiles() {
		t.Fatalf("dry run %+v %v", dry, err)
	}
	res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := tbl.Snapshot(ctx)
	if after.NumFiles() != 1 || res.FilesRemoved != before.NumFiles() || res.Rows != 8 {
		t.Fatalf("optimize %+v left %d files", res, after.NumFiles())
	}
	acts, _ := tbl.ReadCommit(ctx, res.Version)
	for _, a := range acts {
		if (a.Add != nil && a.Add.DataChange) || (a.Remove != nil && a.Remove.DataChange) {
			t.Fatalf("compaction action with dataChange=true: %+v %+v", a.Add, a.Remove)
		}
	}
	if acts[0].CommitInfo.Operation != "OPTIMIZE" {
		t.Fatalf("operation %q", acts[0].CommitInfo.Operation)
	}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("our reader after optimize: %v, want %v", got, want)
	}
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs after optimize: %v, want %v", got, want)
	}
	// The stream goes on over the compacted file after re-reading.
	s.Reopen()
	s.Apply(opstest.Change(3, 9, "u", "c2", opstest.Now, 0))
	want[2] = "3 c2 false"
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs after the stream resumed: %v, want %v", got, want)
	}
}

// TestOptimizeAlongsideStream lands a stream commit between compaction's
// read and its commit: an insert of new keys does not conflict; an
// update that rewrote a compacted file does, and compaction retries.
func TestOptimizeAlongsideStream(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		attempts int
	}{
		{"append", 1},
		{"rewrite", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s, want := smallFiles(t)
			tbl := delta.Open(storage.NewLocal(dir))
			hook := func(ctx context.Context, attempt int) error {
				if attempt != 1 {
					return nil
				}
				if tc.name == "append" {
					s.Apply(opstest.Change(9, 9, "c", "i", opstest.Now, 0))
				} else {
					s.Apply(opstest.Change(1, 9, "u", "a2", opstest.Now, 0))
				}
				return nil
			}
			res, err := maintenance.Optimize(ctx, tbl, maintenance.OptimizeOptions{BeforeCommit: hook})
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != tc.attempts {
				t.Fatalf("attempts %d, want %d", res.Attempts, tc.attempts)
			}
			if tc.name == "append" {
				want = append(want, "9 i false")
			} else {
				want[0] = "1 a2 false"
			}
			sort.Strings(want)
			if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
				t.Fatalf("table %v, want %v", got, want)
			}
		})
	}
}

func TestOptimizeGivesUp(t *testing.T) {
	dir, s, _ := smallFiles(t)
	tbl := delta.Open(storage.NewLocal(dir))
	n := 0
	hook := func(ctx context.Context, attempt int) error {
		n++
		s.Apply(opstest.Change(1, uint64(10+n), "u", "again", opstest.Now, 0))
		s.Reopen()
		return nil
	}
	_, err := maintenance.Optimize(context.Background(), tbl, maintenance.OptimizeOptions{BeforeCommit: hook, MaxAttempts: 2})
	if !errors.Is(err, delta.ErrConcurrentDeleteDelete) || !strings.Contains(err.Error(), "gave up after 2 attempts") {
		t.Fatalf("err = %v", err)
	}
}

func TestShowTimeTravel(t *testing.T) {
	ctx := context.Background()
	dir, _, _ := smallFiles(t)
	tbl := delta.Open(storage.NewLocal(dir))
	r, err := maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Values) != 3 || r.Version != 0 || r.Columns[0] != "id" || len(r.Columns) != 6 {
		t.Fatalf("version 0: %+v", r)
	}
	r, err = maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: 2, Where: map[string]string{"id": "2"}})
	if err != nil || len(r.Values) != 1 || *r.Values[0][1] != "b2" {
		t.Fatalf("version 2 where id=2: %+v %v", r, err)
	}
	r, err = maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: -1, Live: true})
	if err != nil || len(r.Values) != 7 || len(r.Columns) != 2 {
		t.Fatalf("live rows: %+v %v", r, err)
	}
	r, err = maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: -1, Limit: 2})
	if err != nil || len(r.Values) != 2 || !r.Truncated {
		t.Fatalf("limit: %+v %v", r, err)
	}
	snap1, _ := tbl.SnapshotAt(ctx, 1)
	r, err = maintenance.Show(ctx, tbl, maintenance.ShowOptions{ByTimestamp: true, Timestamp: time.UnixMilli(snap1.Timestamp)})
	if err != nil || r.Version < 1 {
		t.Fatalf("by timestamp: %+v %v", r, err)
	}
	if _, err := maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: 99}); !errors.Is(err, delta.ErrVersionNotFound) {
		t.Fatalf("version 99: %v", err)
	}
	if _, err := maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: -1, Where: map[string]string{"nope": "1"}}); err == nil {
		t.Fatal("a where on a missing column was accepted")
	}
	var b bytes.Buffer
	r, _ = maintenance.Show(ctx, tbl, maintenance.ShowOptions{Version: 0, Live: true})
	if err := r.WriteTable(&b); err != nil || !strings.HasPrefix(b.String(), "id  status\n1   a\n") {
		t.Fatalf("table output %q", b.String())
	}
}

func TestViewDDL(t *testing.T) {
	ctx := context.Background()
	dir, _, want := smallFiles(t)
	snap, _ := delta.Open(storage.NewLocal(dir)).Snapshot(ctx)
	for _, tc := range []struct {
		d    maintenance.Dialect
		opts maintenance.ViewOptions
		want string
	}{
		{maintenance.Spark, maintenance.ViewOptions{Name: "orders_current", Location: "/t/or`ders"},
			"CREATE OR REPLACE VIEW orders_current AS\nSELECT\n  `id`,\n  `status`\nFROM delta.`/t/or``ders`\nWHERE NOT `_cdc_deleted`;\n"},
		{maintenance.Trino, maintenance.ViewOptions{Name: "delta.sales.orders_current", Table: "delta.sales.orders"},
			"CREATE OR REPLACE VIEW delta.sales.orders_current AS\nSELECT\n  \"id\",\n  \"status\"\nFROM delta.sales.orders\nWHERE NOT \"_cdc_deleted\";\n"},
		{maintenance.DuckDB, maintenance.ViewOptions{Name: "orders_current", Location: "/t/o'rders"},
			"CREATE OR REPLACE VIEW orders_current AS\nSELECT\n  \"id\",\n  \"status\"\nFROM delta_scan('/t/o''rders')\nWHERE NOT \"_cdc_deleted\";\n"},
	} {
		got, err := maintenance.ViewDDL(snap.Schema, tc.d, tc.opts)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v\n%s\nwant\n%s", tc.d, err, got, tc.want)
		}
	}
	if _, err := maintenance.ViewDDL(snap.Schema, maintenance.Trino, maintenance.ViewOptions{Name: "v"}); err == nil {
		t.Error("trino without a table name was accepted")
	}
	if _, err := maintenance.ViewDDL(snap.Schema, "oracle", maintenance.ViewOptions{Name: "v", Location: "/t"}); err == nil {
		t.Error("an unknown dialect was accepted")
	}

	// Run the view's query on the real table with DataFusion (through
	// delta-rs's QueryBuilder, whose SQL quotes like Trino's): it must
	// return exactly the live rows and only the source columns.
	ddl, err := maintenance.ViewDDL(snap.Schema, maintenance.Trino, maintenance.ViewOptions{Name: "v", Table: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	query := strings.TrimSuffix(strings.TrimSpace(ddl[strings.Index(ddl, "SELECT"):]), ";")
	script := `import json, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
qb = QueryBuilder().register("orders", DeltaTable(sys.argv[1]))
t = pa.table(qb.execute(sys.argv[2]).read_all())
print(json.dumps({"columns": t.column_names, "rows": t.to_pylist()}))
`
	cmd := exec.Command(pyenv.Python(t), "-c", script, dir, query)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("DataFusion on the view query: %v\n%s", err, stderr.String())
	}
	var res struct {
		Columns []string
		Rows    []map[string]any
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, strings.TrimSpace(strings.Join([]string{jsonText(r["id"]), jsonText(r["status"])}, " ")))
	}
	sort.Strings(got)
	var live []string
	for _, w := range want {
		if strings.HasSuffix(w, " false") {
			live = append(live, strings.TrimSuffix(w, " false"))
		}
	}
	if strings.Join(res.Columns, ",") != "id,status" || !opstest.Same(got, live) {
		t.Fatalf("the view returns columns %v rows %v, want id,status and %v", res.Columns, got, live)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}
