package interop_test

import (
	"context"
	"testing"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// readRowsWithUs reads every live file of snap with our data file reader
// and returns the canonical rows.
func readRowsWithUs(t *testing.T, ctx context.Context, root string, snap *delta.Snapshot) ([]column, []string) {
	t.Helper()
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		t.Fatalf("table layout: %v", err)
	}
	cols := columnsOf(snap.Schema)
	st := storage.NewLocal(root)
	var rows []string
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, st, layout, add)
		if err != nil {
			t.Fatalf("read %s: %v", add.Path, err)
		}
		got, err := arrowRows(cols, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("read %s: %v", add.Path, err)
		}
		rows = append(rows, got...)
	}
	return cols, rows
}

// compareDeltalakeRows checks that our reader returns exactly deltalake's rows.
func compareDeltalakeRows(t *testing.T, ctx context.Context, root string, snap *delta.Snapshot, py pyTable) {
	t.Helper()
	cols, ours := readRowsWithUs(t, ctx, root, snap)
	theirs, err := jsonRows(cols, py.Rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(theirs) == 0 {
		t.Fatal("deltalake read no rows: the comparison would prove nothing")
	}
	if d := diffRows("deltalake", theirs, "ours", ours); d != "" {
		t.Errorf("rows differ:\n%s", d)
	}
}
