package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// writtenByDeltalake is write_table.py's report: the tables it wrote and the
// app ids to ask about in each.
type writtenByDeltalake struct {
	Tables map[string][]string `json:"tables"`
}

// TestDeltalakeTablesReadByUs has delta-rs write tables through creates,
// appends, a delete, a merge, a predicate overwrite and a checkpoint, with
// app transactions, and checks that our log replay and data file reader
// see exactly what deltalake itself reads back, at the latest version and
// at every earlier one (time travel): the live files, the txn versions and
// every row.
func TestDeltalakeTablesReadByUs(t *testing.T) {
	dir := t.TempDir()
	var written writtenByDeltalake
	runPython(t, "write_table.py", &written, dir)
	if len(written.Tables) == 0 {
		t.Fatal("write_table.py reported no tables")
	}
	for name, appIDs := range written.Tables {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			root := filepath.Join(dir, name)
			want := readWithDeltalake(t, root, true, appIDs...)
			table := delta.Open(storage.NewLocal(root))

			snap, err := table.Snapshot(ctx)
			if err != nil {
				t.Fatalf("load snapshot: %v", err)
			}
			if snap.Version != want.Version {
				t.Errorf("version: we read %d, deltalake %d", snap.Version, want.Version)
			}
			// write_table.py checkpoints at version 3 and commits after it, so
			// replay must start from that checkpoint and add JSON commits.
			if got := snap.CheckpointVersion(); got != 3 {
				t.Errorf("replay started from checkpoint %d, want the one deltalake wrote at 3", got)
			}
			compareSnapshot(t, ctx, root, snap, want, appIDs)

			for _, old := range want.History {
				snap, err := table.SnapshotAt(ctx, old.Version)
				if err != nil {
					t.Fatalf("load version %d: %v", old.Version, err)
				}
				t.Run(fmt.Sprintf("v%d", old.Version), func(t *testing.T) {
					compareSnapshot(t, ctx, root, snap, old, appIDs)
				})
			}
		})
	}
}

// compareSnapshot checks our snapshot of a deltalake-written table against
// deltalake's view of the same version.
func compareSnapshot(t *testing.T, ctx context.Context, root string, snap *delta.Snapshot, want pyTable, appIDs []string) {
	t.Helper()
	if snap.Version != want.Version {
		t.Fatalf("comparing our version %d with deltalake's %d", snap.Version, want.Version)
	}
	if strings.Join(snap.Metadata.PartitionColumns, ",") != strings.Join(want.PartitionColumns, ",") {
		t.Errorf("partition columns: we read %q, deltalake %q", snap.Metadata.PartitionColumns, want.PartitionColumns)
	}
	var files []string
	for _, a := range snap.Files() {
		p, abs, err := delta.DecodePath(a.Path)
		if err != nil {
			t.Fatalf("decode path %q: %v", a.Path, err)
		}
		if abs {
			t.Fatalf("deltalake wrote an absolute path %q", a.Path)
		}
		files = append(files, p)
	}
	sort.Strings(files)
	if !reflect.DeepEqual(files, want.Files) {
		t.Errorf("live files:\n we:        %q\n deltalake: %q", files, want.Files)
	}
	compareTxns(t, snap, want, appIDs)
	compareDeltalakeRows(t, ctx, root, snap, want)
}

// compareTxns checks that both readers agree on the latest txn version of
// every app id asked about, and that we know of no app id deltalake was
// not asked about.
func compareTxns(t *testing.T, snap *delta.Snapshot, py pyTable, appIDs []string) {
	t.Helper()
	asked := map[string]bool{}
	for _, app := range appIDs {
		asked[app] = true
		ours, ok := snap.Txn(app)
		theirs := py.Txn[app]
		switch {
		case ok && theirs == nil:
			t.Errorf("txn %q: we read version %d, deltalake none", app, ours.Version)
		case !ok && theirs != nil:
			t.Errorf("txn %q: we read none, deltalake version %d", app, *theirs)
		case ok && ours.Version != *theirs:
			t.Errorf("txn %q: we read version %d, deltalake %d", app, ours.Version, *theirs)
		}
	}
	for app := range snap.Txns() {
		if !asked[app] {
			t.Errorf("txn %q: we read it but the test did not ask deltalake about it", app)
		}
	}
}
