package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// opsTable is a table whose data files exist on disk with chosen ages,
// built through real commits: version 1 adds a and b with txn app1=5,
// version 2 removes a, adds c, moves app1 to 9, starts app2 at 3 and sets
// a cdcapply domain. Vacuum and restore only look at paths and ages, so
// the files hold placeholder bytes.
type opsTable struct {
	dir   string
	store *storage.Local
	tbl   *Table
	now   time.Time // the clock of the commits and of vacuum
}

func newOpsTable(t *testing.T) *opsTable {
	t.Helper()
	ctx := context.Background()
	o := &opsTable{dir: t.TempDir(), now: time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)}
	o.store = storage.NewLocal(o.dir)
	o.tbl, _ = createTable(t, o.store, nil, Clock(func() time.Time { return o.now }))
	snap, err := o.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o.file(t, "a.parquet", 30*24*time.Hour)
	o.file(t, "b.parquet", 30*24*time.Hour)
	tx := o.tbl.Begin(snap)
	tx.Add(fakeAdd("a"), fakeAdd("b"))
	tx.SetTxn("app1", 5)
	c, err := tx.Commit(ctx, "WRITE", nil)
	if err != nil {
		t.Fatal(err)
	}
	o.file(t, "c.parquet", 10*24*time.Hour)
	tx = o.tbl.Begin(c.Snapshot)
	a, _ := c.Snapshot.File(FileKey{Path: "a.parquet"})
	tx.RemoveFile(a, true)
	tx.Add(fakeAdd("c"))
	tx.SetTxn("app1", 9)
	tx.SetTxn("app2", 3)
	tx.SetDomain(DomainMetadata{Domain: "cdcapply.tombstones", Configuration: `{"horizonSourceTsMicros":1}`})
	if _, err := tx.Commit(ctx, "WRITE", nil); err != nil {
		t.Fatal(err)
	}
	return o
}

// file writes a file under the table root aged age before o.now.
func (o *opsTable) file(t *testing.T, name string, age time.Duration) {
	t.Helper()
	p := filepath.Join(o.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := o.now.Add(-age)
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func (o *opsTable) exists(name string) bool {
	_, err := os.Stat(filepath.Join(o.dir, filepath.FromSlash(name)))
	return err == nil
}

func dur(d time.Duration) *time.Duration { return &d }

func TestVacuum(t *testing.T) {
	ctx := context.Background()
	o := newOpsTable(t)
	// Orphans: a data file of a commit that never landed and a temp file
	// of a crashed write, both old; a young orphan (maybe a commit being
	// written now); a hidden folder vacuum must not enter.
	o.file(t, "orphan.parquet", 8*24*time.Hour)
	o.file(t, "sub/"+storage.TempPrefix+"x", 8*24*time.Hour)
	o.file(t, "young.parquet", time.Hour)
	o.file(t, "_index/old.bin", 80*24*time.Hour)
	o.now = o.now.Add(2 * time.Hour)
	clock := func() time.Time { return o.now }

	_, err := Vacuum(ctx, o.tbl, VacuumOptions{Retention: dur(time.Hour), Now: clock})
	if !errors.Is(err, ErrRetentionTooShort) || !strings.Contains(err.Error(), "1h0m0s is shorter than the table's 168h0m0s") {
		t.Fatalf("short retention: err = %v, want ErrRetentionTooShort naming both", err)
	}

	var progress []VacuumProgress
	dry, err := Vacuum(ctx, o.tbl, VacuumOptions{DryRun: true, Now: clock, Progress: func(p VacuumProgress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	// a.parquet was removed 2h ago: its tombstone is within the week.
	want := []string{"orphan.parquet", "sub/" + storage.TempPrefix + "x"}
	if !reflect.DeepEqual(dry.Files, want) || dry.Deleted != 0 || dry.Scanned != 6 {
		t.Fatalf("dry run: files %v deleted %d scanned %d, want %v, 0, 6", dry.Files, dry.Deleted, dry.Scanned, want)
	}
	if !o.exists("orphan.parquet") || len(progress) != 6 || progress[5].Candidates != 2 {
		t.Fatalf("dry run deleted a file or reported progress %v", progress)
	}

	res, err := Vacuum(ctx, o.tbl, VacuumOptions{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 2 || o.exists("orphan.parquet") || o.exists("sub/"+storage.TempPrefix+"x") {
		t.Fatalf("vacuum deleted %d: %v", res.Deleted, res.Files)
	}
	for _, keep := range []string{"a.parquet", "b.parquet", "c.parquet", "young.parquet", "_index/old.bin"} {
		if !o.exists(keep) {
			t.Errorf("vacuum deleted %s", keep)
		}
	}
	acts, err := o.tbl.ReadCommit(ctx, res.AuditVersion)
	if err != nil || len(acts) != 1 || acts[0].CommitInfo == nil || acts[0].CommitInfo.Operation != "VACUUM END" {
		t.Fatalf("audit commit %d: %v %+v", res.AuditVersion, err, acts)
	}

	// A forced zero retention also takes the removed a.parquet and the
	// young orphan; live files stay.
	res, err = Vacuum(ctx, o.tbl, VacuumOptions{Retention: dur(0), Force: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.parquet", "young.parquet"}; !reflect.DeepEqual(res.Files, want) {
		t.Fatalf("forced vacuum deleted %v, want %v", res.Files, want)
	}
	if !o.exists("b.parquet") || !o.exists("c.parquet") || !o.exists(filepath.Join(LogDir, "00000000000000000000.json")) {
		t.Fatal("forced vacuum deleted a live file or the log")
	}
}

func TestVacuumTableRetentionProperty(t *testing.T) {
	ctx := context.Background()
	o := newOpsTable(t)
	snap, _ := o.tbl.Snapshot(ctx)
	tx := o.tbl.Begin(snap)
	tx.SetMetadata(testMetadata(map[string]string{"delta.deletedFileRetentionDuration": "interval 1 hours"}))
	if _, err := tx.Commit(ctx, "SET TBLPROPERTIES", nil); err != nil {
		t.Fatal(err)
	}
	o.now = o.now.Add(2 * time.Hour)
	res, err := Vacuum(ctx, o.tbl, VacuumOptions{DryRun: true, Now: func() time.Time { return o.now }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Retention != time.Hour || !reflect.DeepEqual(res.Files, []string{"a.parquet"}) {
		t.Fatalf("retention %s files %v, want 1h and the removed a.parquet", res.Retention, res.Files)
	}
}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	o := newOpsTable(t)

	_, err := Restore(ctx, o.tbl, RestoreTarget{Version: 1}, RestoreOptions{LogStarts: map[string]int64{"app1": 7, "app2": 0}})
	var gap *OffsetGapError
	if !errors.As(err, &gap) || !errors.Is(err, ErrOffsetsGone) || len(gap.Gaps) != 1 || gap.Gaps[0] != (OffsetGap{"app1", 5, 7}) ||
		!strings.Contains(err.Error(), "app1 needs 5 but the source starts at 7 (5..6 are gone)") {
		t.Fatalf("restore over a Kafka gap: err = %v", err)
	}
	if snap, _ := o.tbl.Snapshot(ctx); snap.Version != 2 {
		t.Fatalf("refused restore committed version %d", snap.Version)
	}

	res, err := Restore(ctx, o.tbl, RestoreTarget{Version: 1}, RestoreOptions{LogStarts: map[string]int64{"app1": 2}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := o.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := o.tbl.SnapshotAt(ctx, 1)
	if got, want := comparableFiles(snap), comparableFiles(v1); len(got) != 2 || got[0].Path != want[0].Path || got[1].Path != want[1].Path {
		t.Fatalf("restored files %v, want %v", got, want)
	}
	// app1 goes back to 5; app2 did not exist at version 1: from the start.
	for app, want := range map[string]int64{"app1": 5, "app2": 0} {
		if tx, _ := snap.Txn(app); tx.Version != want {
			t.Errorf("txn %s = %d, want %d", app, tx.Version, want)
		}
	}
	if _, ok := snap.Domain("cdcapply.tombstones"); ok {
		t.Error("the domain set after version 1 survived the restore")
	}
	if res.FilesRemoved != 1 || res.FilesRestored != 1 || res.Version != 3 {
		t.Errorf("result %+v", res)
	}
	acts, _ := o.tbl.ReadCommit(ctx, 3)
	if ci := acts[0].CommitInfo; ci == nil || ci.Operation != "RESTORE" || ci.OperationParameters["version"] != float64(1) {
		t.Errorf("commitInfo %+v", acts[0].CommitInfo)
	}
	for _, a := range acts {
		if a.Add != nil && !a.Add.DataChange {
			t.Errorf("restored add %s without dataChange", a.Add.Path)
		}
	}
}

func TestRestoreRefusesVacuumedVersion(t *testing.T) {
	ctx := context.Background()
	o := newOpsTable(t)
	if _, err := Vacuum(ctx, o.tbl, VacuumOptions{Retention: dur(0), Force: true, Now: func() time.Time { return o.now.Add(time.Second) }}); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(ctx, o.tbl, RestoreTarget{Version: 1}, RestoreOptions{})
	var miss *MissingFilesError
	if !errors.As(err, &miss) || !errors.Is(err, ErrFilesMissing) || !reflect.DeepEqual(miss.Files, []string{"a.parquet"}) ||
		!strings.Contains(err.Error(), "version 1: 1 of its files are missing from storage (removed by vacuum?): a.parquet") {
		t.Fatalf("restore of a vacuumed version: err = %v", err)
	}
	// The latest version is complete.
	snap, _ := o.tbl.Snapshot(ctx)
	if m, err := MissingFiles(ctx, o.tbl, snap); err != nil || len(m) != 0 {
		t.Fatalf("latest version missing %v (%v)", m, err)
	}
}

func TestRestoreByTimestamp(t *testing.T) {
	ctx := context.Background()
	o := newOpsTable(t)
	base := time.Now().Add(-3 * time.Hour)
	for v := int64(0); v <= 2; v++ {
		p := filepath.Join(o.dir, LogDir, commitName(v))
		mt := base.Add(time.Duration(v) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Restore(ctx, o.tbl, RestoreTarget{ByTimestamp: true, Timestamp: base.Add(90 * time.Minute)}, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != 1 || res.Txns["app1"] != 5 {
		t.Fatalf("restore by time: %+v, want version 1", res)
	}
	acts, _ := o.tbl.ReadCommit(ctx, res.Version)
	if _, ok := acts[0].CommitInfo.OperationParameters["timestamp"]; !ok {
		t.Errorf("commitInfo lacks the timestamp: %+v", acts[0].CommitInfo.OperationParameters)
	}
	if _, err := Restore(ctx, o.tbl, RestoreTarget{Version: res.Version}, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "not older than the latest version") {
		t.Fatalf("restore to the latest version: %v", err)
	}
}
