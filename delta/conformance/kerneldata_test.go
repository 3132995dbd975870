package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
)

var kernelDataDir = filepath.Join(goldenDir, "..", "kernel-data")

// TestKernelDataAgainstPython reads the kernel-data tables, which ship no
// expected rows, and compares our rows with another reader's: delta-rs
// (the deltalake package) where it can open the table, and for the
// type-widening table (a reader feature delta-rs refuses) pyarrow's own
// casts of each file to the table's current column types.
func TestKernelDataAgainstPython(t *testing.T) {
	py := pyenv.Python(t)
	cases := []struct{ table, mode string }{
		{"app-txn-checkpoint", "deltalake"},
		{"app-txn-no-checkpoint", "deltalake"},
		{"basic_partitioned", "deltalake"},
		{"data-reader-timestamp_ntz", "deltalake"},
		{"mixed-nulls", "deltalake"},
		{"parsed-stats", "deltalake"},
		{"table-without-dv-small", "deltalake"},
		{"timestamp-truncation-stats", "deltalake"},
		{"type-widening", "cast"},
	}
	ctx := context.Background()
	type prepared struct {
		root   string
		layout datafile.Layout
		got    []arrow.RecordBatch
		out    string
	}
	var reqs []map[string]any
	var preps []prepared
	tmp := t.TempDir()
	for i, c := range cases {
		root, _ := filepath.Abs(filepath.Join(kernelDataDir, c.table))
		if _, err := os.Stat(filepath.Join(root, "delta", delta.LogDir)); err == nil {
			root = filepath.Join(root, "delta")
		}
		st := storage.NewLocal(root)
		snap, err := delta.Open(st).Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		layout, err := datafile.LayoutOf(&snap.Metadata)
		if err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		p := prepared{root: root, layout: layout, out: filepath.Join(tmp, fmt.Sprintf("%d.parquet", i))}
		for _, add := range snap.Files() {
			rec, err := datafile.Read(ctx, st, layout, add)
			if err != nil {
				t.Fatalf("%s: read %s: %v", c.table, add.Path, err)
			}
			t.Cleanup(rec.Release)
			p.got = append(p.got, rec)
		}
		req := map[string]any{"mode": c.mode, "table": root, "out": p.out}
		if c.mode == "cast" {
			var files []string
			for _, add := range snap.Files() {
				rel, _, _ := delta.DecodePath(add.Path)
				files = append(files, filepath.Join(root, rel))
			}
			var cols []map[string]string
			for _, f := range snap.Schema.Fields {
				cols = append(cols, map[string]string{"name": f.Name, "type": f.Type.String()})
			}
			req["files"], req["columns"] = files, cols
		}
		reqs = append(reqs, req)
		preps = append(preps, p)
	}
	reqPath := filepath.Join(tmp, "requests.json")
	b, _ := json.Marshal(reqs)
	if err := os.WriteFile(reqPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if msg, err := exec.CommandContext(cctx, py, filepath.Join("testdata", "expected_rows.py"), reqPath).CombinedOutput(); err != nil {
		t.Fatalf("python reader: %v\n%s", err, msg)
	}
	for i, c := range cases {
		p := preps[i]
		t.Run(c.table, func(t *testing.T) {
			data, err := os.ReadFile(p.out)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := datafile.ReadParquet(ctx, data)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Release()
			plain := datafile.Layout{Schema: p.layout.Schema, Mapping: datafile.MappingNone}
			want, err := plain.Conform(raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			if want.NumRows() == 0 {
				t.Fatal("the python reader returned no rows")
			}
			ws := []arrow.RecordBatch{want}
			if g, w := rowHashes(p.got, nil), rowHashes(ws, nil); !slices.Equal(g, w) {
				gs, wss := rowStrings(p.got, nil), rowStrings(ws, nil)
				t.Errorf("rows differ from the python reader's: got %d, want %d\n%s", len(gs), len(wss), diff(gs, wss))
			}
		})
	}
}
