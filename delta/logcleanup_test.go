package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// cleanupNow is the fixed "now" of the cleanup tests: noon, so the
// midnight truncation of the cut-off is visible.
var cleanupNow = time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)

// logFile is a file to create in _delta_log with an age in days.
type logFile struct {
	name    string
	ageDays float64
	content string
}

func commitName(v int64) string { return fmt.Sprintf("%020d.json", v) }

// commitsAged returns commits from..to, each ageDays old.
func commitsAged(from, to int64, ageDays float64) []logFile {
	var out []logFile
	for v := from; v <= to; v++ {
		out = append(out, logFile{name: commitName(v), ageDays: ageDays})
	}
	return out
}

func writeLogFiles(t *testing.T, dir string, files []logFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, LogDir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := cleanupNow.Add(-time.Duration(f.ageDays * float64(24*time.Hour)))
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

func listLogNames(t *testing.T, dir string) []string {
	t.Helper()
	infos, err := storage.NewLocal(dir).List(context.Background(), LogDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fi := range infos {
		out = append(out, strings.TrimPrefix(fi.Path, LogDir+"/"))
	}
	sort.Strings(out)
	return out
}

func v2Top(v int64, uuid string, sidecars ...string) logFile {
	content := fmt.Sprintf(`{"checkpointMetadata":{"version":%d}}`+"\n", v)
	for _, s := range sidecars {
		content += fmt.Sprintf(`{"sidecar":{"path":%q,"sizeInBytes":1,"modificationTime":1}}`+"\n", s)
	}
	return logFile{name: fmt.Sprintf("%020d.checkpoint.%s.json", v, uuid), content: content}
}

func TestCleanupExpiredLogs(t *testing.T) {
	ckpt := func(v int64, age float64) logFile {
		return logFile{name: fmt.Sprintf("%020d.checkpoint.parquet", v), ageDays: age}
	}
	const (
		uuidA = "00000000-0000-4000-8000-00000000000a"
		uuidB = "00000000-0000-4000-8000-00000000000b"
	)
	cases := []struct {
		name     string
		files    []logFile
		snapVer  int64
		conf     map[string]string
		deleted  []string // exactly these go
		noChange bool
	}{
		{
			name: "keeps the checkpoint below the cut-off commit",
			// Commits 0..15 are 40 days old, 16..25 recent: the cut-off commit
			// is 15, the newest checkpoint not after it is 10.
			files:   append(append(commitsAged(0, 15, 40), commitsAged(16, 25, 1)...), ckpt(10, 40), ckpt(20, 1), logFile{name: "00000000000000000003.crc", ageDays: 40}, logFile{name: "00000000000000000012.crc", ageDays: 40}),
			snapVer: 25,
			deleted: append(names(0, 9), "00000000000000000003.crc"),
		},
		{
			name:    "all old: newest checkpoint is the cut-off",
			files:   append(commitsAged(0, 25, 40), ckpt(10, 40), ckpt(20, 40)),
			snapVer: 25,
			deleted: append(names(0, 19), "00000000000000000010.checkpoint.parquet"),
		},
		{
			name:     "no checkpoint old enough",
			files:    append(append(commitsAged(0, 15, 40), commitsAged(16, 25, 1)...), ckpt(20, 1)),
			snapVer:  25,
			noChange: true,
		},
		{
			name:     "retention counts from midnight",
			files:    append(commitsAged(0, 12, 30.3), ckpt(10, 30.3)),
			snapVer:  12,
			noChange: true, // 30.3 days before noon is after midnight of the cut-off day
		},
		{
			name:    "table retention property",
			files:   append(append(commitsAged(0, 12, 3), commitsAged(13, 14, 0.1)...), ckpt(10, 3)),
			snapVer: 14,
			conf:    map[string]string{propLogRetention: "interval 2 days"},
			deleted: names(0, 9),
		},
		{
			name:     "cleanup disabled",
			files:    append(commitsAged(0, 25, 40), ckpt(10, 40), ckpt(20, 40)),
			snapVer:  25,
			conf:     map[string]string{propExpiredLogCleanup: "false"},
			noChange: true,
		},
		{
			name: "incomplete multi-part checkpoint is not a cut-off",
			files: append(commitsAged(0, 25, 40), ckpt(10, 40),
				logFile{name: "00000000000000000020.checkpoint.0000000001.0000000002.parquet", ageDays: 40}),
			snapVer: 25,
			deleted: names(0, 9),
		},
		{
			name: "complete multi-part checkpoint is a cut-off",
			files: append(commitsAged(0, 25, 40), ckpt(10, 40),
				logFile{name: "00000000000000000020.checkpoint.0000000001.0000000002.parquet", ageDays: 40},
				logFile{name: "00000000000000000020.checkpoint.0000000002.0000000002.parquet", ageDays: 40}),
			snapVer: 25,
			deleted: append(names(0, 19), "00000000000000000010.checkpoint.parquet"),
		},
		{
			name: "a skewed old mtime after a recent commit does not move the cut-off",
			files: append(append(append(commitsAged(0, 10, 40), commitsAged(11, 11, 1)...), commitsAged(12, 13, 40)...),
				ckpt(10, 40), ckpt(12, 40)),
			snapVer: 13,
			deleted: names(0, 9),
		},
		{
			name:    "nothing after the snapshot's version counts",
			files:   append(commitsAged(0, 25, 40), ckpt(10, 40), ckpt(20, 40)),
			snapVer: 15,
			deleted: names(0, 9),
		},
		{
			name: "compaction files starting at or below the cut-off go",
			files: append(commitsAged(0, 12, 40), ckpt(10, 40),
				logFile{name: "00000000000000000003.00000000000000000007.compacted.json", ageDays: 40},
				logFile{name: "00000000000000000010.00000000000000000011.compacted.json", ageDays: 40},
				logFile{name: "00000000000000000011.00000000000000000012.compacted.json", ageDays: 40}),
			snapVer: 12,
			deleted: append(names(0, 9), "00000000000000000003.00000000000000000007.compacted.json",
				"00000000000000000010.00000000000000000011.compacted.json"),
		},
		{
			name: "unreferenced old sidecars go, referenced and young ones stay",
			files: append(commitsAged(0, 25, 40),
				withAge(v2Top(10, uuidA, "a.parquet"), 40), withAge(v2Top(20, uuidB, "b.parquet"), 40),
				logFile{name: "_sidecars/a.parquet", ageDays: 40},
				logFile{name: "_sidecars/b.parquet", ageDays: 40},
				logFile{name: "_sidecars/orphan-old.parquet", ageDays: 40},
				logFile{name: "_sidecars/orphan-young.parquet", ageDays: 1}),
			snapVer: 25,
			deleted: append(names(0, 19), v2Top(10, uuidA).name, "_sidecars/a.parquet", "_sidecars/orphan-old.parquet"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLogFiles(t, dir, c.files)
			writeLogFiles(t, dir, []logFile{{name: "_last_checkpoint", ageDays: 40, content: `{"version":10,"size":1}`}})
			before := listLogNames(t, dir)
			snap := &Snapshot{Version: c.snapVer, Metadata: Metadata{Configuration: c.conf}}
			if err := CleanupExpiredLogs(context.Background(), storage.NewLocal(dir), snap, cleanupNow); err != nil {
				t.Fatalf("CleanupExpiredLogs: %v", err)
			}
			after := listLogNames(t, dir)
			var gone []string
			for _, n := range before {
				if !contains(after, n) {
					gone = append(gone, n)
				}
			}
			want := append([]string(nil), c.deleted...)
			sort.Strings(want)
			if c.noChange {
				want = nil
			}
			if !reflect.DeepEqual(gone, want) {
				t.Fatalf("deleted:\n got %v\nwant %v", gone, want)
			}
		})
	}
}

func withAge(f logFile, age float64) logFile { f.ageDays = age; return f }

// names lists commit file names from..to.
func names(from, to int64) []string {
	var out []string
	for v := from; v <= to; v++ {
		out = append(out, commitName(v))
	}
	return out
}

// TestCleanupExpiredLogsTable: on a real table, cleanup leaves a log that
// loads to the same latest state, while versions before the cut-off
// checkpoint are no longer available.
func TestCleanupExpiredLogsTable(t *testing.T) {
	ctx := context.Background()
	dir, last := ckptBuildTable(t, cleanupNow)
	store := storage.NewLocal(dir)
	snap := ckptLoad(t, dir)
	if err := writeCheckpoint(ctx, store, snap, cleanupNow); err != nil {
		t.Fatal(err)
	}
	// Age every log file past the default 30 days.
	var old []logFile
	for _, n := range listLogNames(t, dir) {
		old = append(old, logFile{name: n, ageDays: 31})
	}
	for _, f := range old {
		mt := cleanupNow.Add(-31 * 24 * time.Hour)
		if err := os.Chtimes(filepath.Join(dir, LogDir, f.name), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	if err := CleanupExpiredLogs(ctx, store, snap, cleanupNow); err != nil {
		t.Fatal(err)
	}
	got := listLogNames(t, dir)
	want := []string{fmt.Sprintf("%020d.checkpoint.parquet", last), commitName(last), "_last_checkpoint"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("log after cleanup %v, want %v", got, want)
	}
	again := ckptLoad(t, dir)
	if again.Version != last || !reflect.DeepEqual(ckptPaths(again.Files()), ckptPaths(snap.Files())) || !reflect.DeepEqual(again.Txns(), snap.Txns()) {
		t.Fatalf("state after cleanup differs")
	}
	if _, err := Open(store).SnapshotAt(ctx, last-1); !errors.Is(err, ErrVersionNotFound) {
		t.Fatalf("version %d after cleanup: %v, want ErrVersionNotFound", last-1, err)
	}
}

// TestCleanupExpiredLogsCrash: a crash at any storage operation of cleanup
// leaves a table that still loads to the same state.
func TestCleanupExpiredLogsCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	files := append(commitsAged(0, 12, 40), logFile{name: "00000000000000000008.checkpoint.parquet", ageDays: 40})
	writeLogFiles(t, dir, files)
	snap := &Snapshot{Version: 12}
	for op := 1; ; op++ {
		work := ckptCopyTable(t, dir)
		f := storage.NewFaulty(storage.NewLocal(work))
		f.CrashAt(op, false)
		err := CleanupExpiredLogs(ctx, f, snap, cleanupNow)
		left := listLogNames(t, work)
		// Whatever happened, the checkpoint and every commit after it remain.
		for _, n := range append(names(8, 12), "00000000000000000008.checkpoint.parquet") {
			if !contains(left, n) {
				t.Fatalf("crash at op %d: %s deleted", op, n)
			}
		}
		if !f.Crashed() {
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 6 {
				t.Fatalf("complete cleanup left %v", left)
			}
			break
		}
		if err == nil {
			t.Fatalf("crash at op %d not reported", op)
		}
	}
}

// TestLogCleanupOncePerCutoff: a writer lists its log for cleanup once for
// each cut-off (it moves at midnight UTC), not after every checkpoint: a
// listing reads every commit the retention keeps. A day later the next
// checkpoint's cleanup lists again and deletes what expired meanwhile.
func TestLogCleanupOncePerCutoff(t *testing.T) {
	ctx := context.Background()
	faulty := storage.NewFaulty(storage.NewLocal(t.TempDir()))
	now := time.Now().Add(40 * 24 * time.Hour) // every file beyond the 30-day retention
	tbl, snap := createTable(t, faulty, map[string]string{"delta.checkpointInterval": "2"},
		Clock(func() time.Time { return now }))
	commit := func(i int) {
		t.Helper()
		tx := tbl.Begin(snap)
		tx.Add(fakeAdd(fmt.Sprint("f", i)))
		c, err := tx.Commit(ctx, "WRITE", nil)
		if err != nil || c.CheckpointErr != nil {
			t.Fatalf("commit %d: %v %v", i, err, c.CheckpointErr)
		}
		snap = c.Snapshot
	}
	lists := func(from int) (n int) {
		for _, op := range faulty.Ops()[from:] {
			if op.Kind == storage.OpList && op.Path == LogDir {
				n++
			}
		}
		return n
	}
	exists := func(v int64) bool {
		_, err := faulty.Read(ctx, commitPath(v))
		return err == nil
	}
	from := faulty.Count()
	commit(1)
	commit(2) // checkpoint 2: cleanup lists, deletes commits 0 and 1
	if n := lists(from); n != 1 || exists(0) || exists(1) {
		t.Fatalf("first checkpoint: %d listings (want 1); commit 0 kept %v, 1 kept %v", n, exists(0), exists(1))
	}
	from = faulty.Count()
	for i := 3; i <= 6; i++ { // checkpoints 4 and 6, the same cut-off
		commit(i)
	}
	if n := lists(from); n != 0 {
		t.Errorf("checkpoints at the same cut-off listed the log %d times", n)
	}
	now = now.Add(24 * time.Hour)
	from = faulty.Count()
	commit(7)
	commit(8) // checkpoint 8, a day later: lists, deletes below 8
	if n := lists(from); n != 1 {
		t.Errorf("a day later: %d listings, want 1", n)
	}
	for v := int64(2); v < 8; v++ {
		if exists(v) {
			t.Errorf("commit %d kept after the next day's cleanup", v)
		}
	}
	if s, err := Open(storage.NewLocal(faulty.Location())).Snapshot(ctx); err != nil || s.Version != 8 || s.NumFiles() != 8 {
		t.Fatalf("the table after cleanup: %v %v", s, err)
	}
}
