package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
)

// deltaRS reads a table with the Python deltalake package (delta-rs), a
// reader we did not write, through the interop test's script.
func deltaRS(t *testing.T, dir string, appIDs ...string) (rows []map[string]any, txn map[string]any) {
	t.Helper()
	py := pyenv.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := filepath.Join("..", "delta", "interop", "testdata", "read_table.py")
	cmd := exec.CommandContext(ctx, py, append([]string{script, dir}, appIDs...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("delta-rs read of %s: %v\n%s", dir, err, errb.String())
	}
	var res struct {
		Rows []map[string]any `json:"rows"`
		Txn  map[string]any   `json:"txn"`
	}
	dec := json.NewDecoder(&out)
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res.Rows, res.Txn
}

// runPython runs a script with the deltalake venv's Python (skipping, or
// failing under CI=true, without it) and decodes its JSON output into out.
func runPython(t *testing.T, script string, out any, args ...string) {
	t.Helper()
	py := pyenv.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{script}, args...)...)
	var stdout, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, errb.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s %v: %v", script, args, err)
	}
}

// TestReferenceCaseReadByDeltaRS runs the design brief's worked example
// through the applier into real Parquet files and a real Delta log, and
// reads the table back with delta-rs: (1,30,shipped,live), (2,25,new,
// deleted), (3,15,new,live), with the Kafka position in the txn.
func TestReferenceCaseReadByDeltaRS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := storage.NewLocal(dir)
	newFiles := func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(refLayout); err != nil {
		t.Fatal(err)
	}
	batches := []*Batch{
		{Changes: []*Change{refChange(1, 10, "c", "new", 0), refChange(2, 10, "c", "new", 1)}, Ranges: rng(0, 2)},
		{Changes: []*Change{refChange(1, 30, "u", "shipped", 2), refChange(1, 20, "u", "paid", 3), refChange(2, 25, "d", "", 4), refChange(3, 15, "c", "new", 5)}, Ranges: rng(2, 6)},
		{Changes: []*Change{refChange(1, 22, "u", "paid-late", 6), refChange(2, 12, "u", "resurrected", 7)}, Ranges: rng(6, 8)},
		{Changes: []*Change{refChange(1, 30, "u", "shipped", 8), refChange(1, 20, "u", "paid", 9), refChange(2, 25, "d", "", 10), refChange(3, 15, "c", "new", 11)}, Ranges: rng(8, 12)},
	}
	for i, b := range batches {
		if _, err := a.Apply(ctx, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	rows, txn := deltaRS(t, dir, "cdcapply/p/orders/0")
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%v %v %v %v", r["id"], r[ColSeq], r["status"], r[ColDeleted]))
	}
	sort.Strings(got)
	want := []string{
		"1 " + SeqText(seqBytes(30)) + " shipped false",
		"2 " + SeqText(seqBytes(25)) + " new true",
		"3 " + SeqText(seqBytes(15)) + " new false",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delta-rs reads\n%v\nwant\n%v", got, want)
	}
	if fmt.Sprint(txn["cdcapply/p/orders/0"]) != "12" {
		t.Errorf("delta-rs txn version = %v, want 12 (the next offset)", txn)
	}
}

// deltaRSStates reads an orders table with delta-rs as sorted
// "id status deleted" lines, printed as one string.
func deltaRSStates(t *testing.T, dir string) string {
	t.Helper()
	rows, _ := deltaRS(t, dir)
	got := make([]string, 0, len(rows))
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%v %v %v", r["id"], r["status"], r[ColDeleted]))
	}
	sort.Strings(got)
	return fmt.Sprint(got)
}
