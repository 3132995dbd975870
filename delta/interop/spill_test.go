package interop_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestSpilledCheckpointReadByDeltalake: checkpoints holding more removes
// than one row group, written first from removes held in memory
// (version 20) and then from a snapshot that reads them back from that
// checkpoint a row group at a time (version 30), are read by delta-rs
// and by a fresh load of ours as the oracle's table.
func TestSpilledCheckpointReadByDeltalake(t *testing.T) {
	o := buildOurTable(t, false) // versions 0-14, a checkpoint at 10
	const gone = 70_000          // over the 65,536 rows of a row group
	var fakes []fileRows
	for i := range gone {
		fakes = append(fakes, fileRows{add: &delta.Add{Path: fmt.Sprintf("gone/part-%06d.parquet", i), Size: 100,
			ModificationTime: 1, DataChange: true, PartitionValues: map[string]*string{}}})
	}
	o.commit(o.table.Begin(o.snap), fakes, nil, nil) // v15
	var removed []*delta.Add
	for _, f := range fakes {
		removed = append(removed, f.add)
	}
	o.commit(o.table.Begin(o.snap), nil, removed, nil) // v16
	for v := 17; v <= 30; v++ {
		rows := o.newRows(3, 0, regions[v%len(regions)], buckets[v%len(buckets)])
		o.commit(o.table.Begin(o.snap), []fileRows{o.writeFile(rows)}, nil, nil)
	}
	if o.snap.Version != 30 {
		t.Fatalf("at version %d, want 30", o.snap.Version)
	}
	for _, v := range []int64{20, 30} {
		data, err := o.st.Read(o.ctx, filepath.ToSlash(filepath.Join(delta.LogDir, fmt.Sprintf("%020d.checkpoint.parquet", v))))
		if err != nil {
			t.Fatal(err)
		}
		f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(f.RowGroups()); n < 2 {
			t.Fatalf("checkpoint %d has %d row group(s); the test needs several", v, n)
		}
		// Checkpoint 30 copies checkpoint 20's full group of removes
		// whole (no page index: parquet-go writes one for every group it
		// encodes); delta-rs must read it as any other.
		copied := 0
		for _, rg := range f.Metadata().RowGroups {
			indexed := false
			for _, c := range rg.Columns {
				indexed = indexed || c.ColumnIndexOffset > 0 || c.OffsetIndexOffset > 0
			}
			if !indexed {
				copied++
			}
		}
		if want := map[int64]int{20: 0, 30: 1}[v]; copied != want {
			t.Fatalf("checkpoint %d has %d row groups copied from the checkpoint before, want %d", v, copied, want)
		}
	}

	snap, err := delta.Open(storage.NewLocal(o.root)).Snapshot(o.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.CheckpointVersion() != 30 || snap.NumTombstones() < gone {
		t.Fatalf("reloaded from checkpoint %d with %d tombstones, want 30 and at least %d", snap.CheckpointVersion(), snap.NumTombstones(), gone)
	}
	tombs, err := snap.Tombstones(o.ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range tombs {
		seen[r.Path] = true
	}
	for _, f := range fakes {
		if !seen[f.add.Path] {
			t.Fatalf("checkpoint 30 lost the remove of %s", f.add.Path)
		}
	}

	apps := []string{"never-written"}
	for app := range o.txns {
		apps = append(apps, app)
	}
	sort.Strings(apps)
	py := readWithDeltalake(t, o.root, false, apps...)
	if py.Version != 30 {
		t.Fatalf("deltalake read version %d, we wrote 30", py.Version)
	}
	compareOracle(t, o, o.history[len(o.history)-1], py, apps)
	compareTxns(t, snap, py, apps)
}
