package interop_test

import (
	"maps"
	"slices"
	"sort"
	"testing"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestMixedWriters alternates writers on one table: we write it, delta-rs
// deletes rows (pruning files by our stats), compacts and checkpoints on top
// of our log, then we commit again on top of delta-rs's log. After each
// writer, both readers must see the oracle's rows, the same files and the
// same app transactions.
func TestMixedWriters(t *testing.T) {
	o := buildOurTable(t, true)
	cols := columnsOf(o.layout.Schema)

	var modified struct {
		Version int64 `json:"version"`
	}
	runPython(t, "modify_table.py", &modified, o.root)
	if modified.Version <= o.snap.Version {
		t.Fatalf("deltalake left the table at version %d, we had written %d", modified.Version, o.snap.Version)
	}

	// The oracle after delta-rs's "DELETE WHERE id % 5 = 0".
	for p, rows := range o.live {
		o.live[p] = slices.DeleteFunc(slices.Clone(rows), func(r oracleRow) bool { return r[0].(int64)%5 == 0 })
	}
	o.txns["py-mixed"] = 1
	apps := []string{"py-mixed", "never-written"}
	for app := range o.txns {
		if app != "py-mixed" {
			apps = append(apps, app)
		}
	}
	sort.Strings(apps)

	table := delta.Open(storage.NewLocal(o.root))
	snap, err := table.Snapshot(o.ctx)
	if err != nil {
		t.Fatalf("load deltalake's commits on our table: %v", err)
	}
	if snap.Version != modified.Version {
		t.Fatalf("we read version %d, deltalake wrote %d", snap.Version, modified.Version)
	}
	if snap.CheckpointVersion() != modified.Version {
		t.Errorf("replay started from checkpoint %d, want deltalake's at %d", snap.CheckpointVersion(), modified.Version)
	}
	compareBothReaders(t, o, snap, cols, apps)

	// Now we write on top of delta-rs's commits and checkpoint. Its
	// versions (the delete, then the row-preserving compaction) all hold
	// the oracle's current rows.
	o.snap = snap
	for int64(len(o.history)) <= snap.Version {
		o.history = append(o.history, oracleState{live: maps.Clone(o.live), txns: maps.Clone(o.txns)})
	}
	tx := table.Begin(snap)
	r, b := regions[1], buckets[1]
	o.commit(tx, []fileRows{o.writeFile(o.newRows(4, 0, r, b))}, nil, map[string]int64{apps[0]: 1_000_000})
	snap, err = table.Snapshot(o.ctx)
	if err != nil {
		t.Fatalf("load our commit on deltalake's log: %v", err)
	}
	compareBothReaders(t, o, snap, cols, apps)
}

// compareBothReaders reads snap's version with deltalake and with our
// reader and checks both against the oracle's current rows and txns; the
// live files are compared between the readers, since a compaction we did
// not write chose them.
func compareBothReaders(t *testing.T, o *ourTable, snap *delta.Snapshot, cols []column, apps []string) {
	t.Helper()
	want := oracleState{}.keys(t, cols, oracleState{live: o.live})
	if len(want) == 0 {
		t.Fatal("the oracle holds no rows: the comparison would prove nothing")
	}
	py := readWithDeltalake(t, o.root, false, apps...)
	if py.Version != snap.Version {
		t.Fatalf("deltalake read version %d, we %d", py.Version, snap.Version)
	}
	theirs, err := jsonRows(cols, py.Rows)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRows("oracle", want, "deltalake", theirs); d != "" {
		t.Errorf("version %d: deltalake's rows differ from the oracle:\n%s", snap.Version, d)
	}
	_, ours := readRowsWithUs(t, o.ctx, o.root, snap)
	if d := diffRows("oracle", want, "ours", ours); d != "" {
		t.Errorf("version %d: our rows differ from the oracle:\n%s", snap.Version, d)
	}
	var files []string
	for _, a := range snap.Files() {
		p, _, err := delta.DecodePath(a.Path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	sort.Strings(files)
	if !slices.Equal(files, py.Files) {
		t.Errorf("version %d: live files:\n we:        %q\n deltalake: %q", snap.Version, files, py.Files)
	}
	for _, app := range apps {
		got := py.Txn[app]
		v, ok := o.txns[app]
		switch {
		case !ok && got != nil:
			t.Errorf("txn %q: deltalake read %d, none was written", app, *got)
		case ok && (got == nil || *got != v):
			t.Errorf("txn %q: deltalake read %s, written %d", app, fmtVersion(got), v)
		}
	}
	compareTxns(t, snap, py, apps)
}
