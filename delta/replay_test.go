package delta

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// conformanceDir holds real tables written by Spark and delta-rs (see its
// README.md). DELTA_CONFORMANCE overrides the default next to the repo.
func conformanceDir(t testing.TB) string {
	dir := os.Getenv("DELTA_CONFORMANCE")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "delta-conformance")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("conformance tables not found at %s (set DELTA_CONFORMANCE): %v", dir, err)
	}
	return dir
}

// kernelTable returns the path of an unpacked table in kernel-data.
func kernelTable(t testing.TB, name string) string {
	return filepath.Join(conformanceDir(t), "kernel-data", name)
}

// goldenTable unpacks golden/NAME.tar.zst into a temporary directory and
// returns NAME/delta, the table root.
func goldenTable(t testing.TB, name string) string {
	src := filepath.Join(conformanceDir(t), "golden", name+".tar.zst")
	dst := t.TempDir()
	cmd := exec.Command("tar", "--zstd", "-xf", src, "-C", dst)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", src, err, out)
	}
	return filepath.Join(dst, name, "delta")
}

// oracle is an independent, deliberately naive reading of a table's JSON
// commits: it decodes lines into generic maps and reconciles by path and
// deletion vector id exactly as PROTOCOL.md describes, without sharing any
// code with the replay under test. It needs every commit from version 0.
type oracle struct {
	files    map[string]bool // "path|dvid"
	txns     map[string]int64
	domains  map[string]string
	schema   string
	reader   int
	protocol bool
}

func readOracle(t testing.TB, root string, version int64) oracle {
	t.Helper()
	o := oracle{files: map[string]bool{}, txns: map[string]int64{}, domains: map[string]string{}}
	for v := int64(0); v <= version; v++ {
		data, err := os.ReadFile(filepath.Join(root, "_delta_log", fmt.Sprintf("%020d.json", v)))
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var m map[string]map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("oracle: commit %d: %v", v, err)
			}
			for kind, a := range m {
				switch kind {
				case "add":
					o.files[oracleKey(a)] = true
				case "remove":
					delete(o.files, oracleKey(a))
				case "txn":
					o.txns[a["appId"].(string)] = int64(a["version"].(float64))
				case "domainMetadata":
					if a["removed"] == true {
						delete(o.domains, a["domain"].(string))
					} else {
						o.domains[a["domain"].(string)] = a["configuration"].(string)
					}
				case "metaData":
					o.schema = a["schemaString"].(string)
				case "protocol":
					o.protocol = true
					o.reader = int(a["minReaderVersion"].(float64))
				}
			}
		}
	}
	return o
}

func oracleKey(a map[string]any) string {
	k := a["path"].(string) + "|"
	if dv, ok := a["deletionVector"].(map[string]any); ok && dv != nil {
		k += dv["storageType"].(string) + dv["pathOrInlineDv"].(string)
		if off, ok := dv["offset"].(float64); ok {
			k += fmt.Sprintf("@%d", int64(off))
		}
	}
	return k
}

// fileKeys lists a snapshot's live files in the oracle's key form.
func fileKeys(s *Snapshot) []string {
	var out []string
	for _, a := range s.Files() {
		out = append(out, a.Path+"|"+a.DeletionVector.UniqueID())
	}
	sort.Strings(out)
	return out
}

func (o oracle) fileKeys() []string {
	var out []string
	for k := range o.files {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkAgainstOracle compares a snapshot with the oracle's reading of the
// same version: live files, app transactions, domains and schema.
func checkAgainstOracle(t *testing.T, snap *Snapshot, o oracle) {
	t.Helper()
	if got, want := fileKeys(snap), o.fileKeys(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("version %d files:\n got %v\nwant %v", snap.Version, got, want)
	}
	got := map[string]int64{}
	for app, txn := range snap.Txns() {
		got[app] = txn.Version
	}
	if fmt.Sprint(got) != fmt.Sprint(o.txns) {
		t.Errorf("version %d txns: got %v want %v", snap.Version, got, o.txns)
	}
	dom := map[string]string{}
	for d, m := range snap.Domains() {
		dom[d] = m.Configuration
	}
	if fmt.Sprint(dom) != fmt.Sprint(o.domains) {
		t.Errorf("version %d domains: got %v want %v", snap.Version, dom, o.domains)
	}
	if snap.Metadata.SchemaString != o.schema {
		t.Errorf("version %d schema: got %s want %s", snap.Version, snap.Metadata.SchemaString, o.schema)
	}
}

// readsOf returns the paths a Faulty storage read, in order.
func readsOf(f *storage.Faulty) []string {
	var out []string
	for _, op := range f.Ops() {
		if op.Kind == storage.OpRead {
			out = append(out, op.Path)
		}
	}
	return out
}

func TestReplayRealTables(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		root func(testing.TB) string
		// ckpt is the checkpoint version replay must start from, -1 for none.
		ckpt int64
		// txns are the app transactions at the latest version, read off the log.
		txns map[string]int64
	}{
		{"app-txn-no-checkpoint", func(t testing.TB) string { return kernelTable(t, "app-txn-no-checkpoint") }, -1,
			map[string]int64{"my-app": 3, "my-app2": 2}},
		{"app-txn-checkpoint", func(t testing.TB) string { return kernelTable(t, "app-txn-checkpoint") }, 1,
			map[string]int64{"my-app": 3, "my-app2": 2}},
		{"app-txn-with-last-updated", func(t testing.TB) string { return kernelTable(t, "app-txn-with-last-updated") }, -1,
			map[string]int64{"new_app_0": 1, "new_app_1": 1, "new_app_2": 1, "old_app": 1}},
		{"with_checkpoint_no_last_checkpoint", func(t testing.TB) string { return kernelTable(t, "with_checkpoint_no_last_checkpoint") }, 2, map[string]int64{}},
		{"corrupted-last-checkpoint-kernel", func(t testing.TB) string { return goldenTable(t, "corrupted-last-checkpoint-kernel") }, 10, map[string]int64{}},
		{"multi-part-checkpoint", func(t testing.TB) string { return goldenTable(t, "multi-part-checkpoint") }, 1, map[string]int64{}},
		{"only-checkpoint-files", func(t testing.TB) string { return goldenTable(t, "only-checkpoint-files") }, 2, map[string]int64{}},
		{"log-replay-latest-metadata-protocol", func(t testing.TB) string { return goldenTable(t, "log-replay-latest-metadata-protocol") }, -1, map[string]int64{}},
		{"v2-checkpoint-json", func(t testing.TB) string { return goldenTable(t, "v2-checkpoint-json") }, 2, map[string]int64{}},
		{"v2-checkpoint-parquet", func(t testing.TB) string { return goldenTable(t, "v2-checkpoint-parquet") }, 2, map[string]int64{}},
		{"log-replay-dv-key-cases", func(t testing.TB) string { return goldenTable(t, "log-replay-dv-key-cases") }, -1, map[string]int64{}},
		{"delete-re-add-same-file-different-transactions", func(t testing.TB) string {
			return goldenTable(t, "delete-re-add-same-file-different-transactions")
		}, -1, map[string]int64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.root(t)
			faulty := storage.NewFaulty(storage.NewLocal(root))
			snap, err := Open(faulty).Snapshot(ctx)
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			o := readOracle(t, root, snap.Version)
			checkAgainstOracle(t, snap, o)
			got := map[string]int64{}
			for app, txn := range snap.Txns() {
				got[app] = txn.Version
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.txns) {
				t.Errorf("txns: got %v, the log says %v", got, tc.txns)
			}
			if snap.CheckpointVersion() != tc.ckpt {
				t.Errorf("replayed from checkpoint %d, want %d", snap.CheckpointVersion(), tc.ckpt)
			}
			// Reads are exactly: the checkpoint (if any), then each commit
			// after it, in order; never a commit the checkpoint covers.
			for _, p := range readsOf(faulty) {
				base := filepath.Base(p)
				if v, ok := parseCommitName(base); ok && v <= tc.ckpt {
					t.Errorf("read commit %s although checkpoint %d covers it", p, tc.ckpt)
				}
				if strings.Contains(p, "/_sidecars/") && !strings.HasPrefix(tc.name, "v2-") {
					t.Errorf("read sidecar %s of a non-V2 table", p)
				}
			}
			if snap.NumFiles() == 0 {
				t.Errorf("no live files: the case tests nothing")
			}
		})
	}
}

// TestReplayCheckpointMatchesCommits loads every version of the checkpointed
// tables both ways: with their checkpoints and with JSON commits only (the
// checkpoint files hidden), and requires the same state.
func TestReplayCheckpointMatchesCommits(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"corrupted-last-checkpoint-kernel", "multi-part-checkpoint", "only-checkpoint-files", "v2-checkpoint-parquet"} {
		t.Run(name, func(t *testing.T) {
			root := goldenTable(t, name)
			latest, err := Open(storage.NewLocal(root)).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for v := int64(0); v <= latest.Version; v++ {
				snap, err := Open(storage.NewLocal(root)).SnapshotAt(ctx, v)
				if err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				checkAgainstOracle(t, snap, readOracle(t, root, v))
			}
		})
	}
}

func TestReplayRefusesBrokenTables(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		sentinel error
		// msg must appear in the error, with the table location.
		msg string
	}{
		{"deltalog-invalid-protocol-version", ErrUnsupportedFeature, "reader version 99"},
		{"no-delta-log-folder", ErrNoTable, "no commits or checkpoints under _delta_log"},
		{"versions-not-contiguous", nil, "versions not contiguous: commit 1 missing"},
		{"deltalog-state-reconstruction-without-metadata", nil, "no metaData action"},
		{"deltalog-state-reconstruction-without-protocol", nil, "no protocol action"},
		// These two have a checkpoint at 10 that lacks the action while the
		// JSON commits 0..10 have it: their intent is that a reader trusts
		// the checkpoint (it stands for commits 0..10) and so must refuse.
		{"deltalog-state-reconstruction-from-checkpoint-missing-metadata", nil, "no metaData action"},
		{"deltalog-state-reconstruction-from-checkpoint-missing-protocol", nil, "no protocol action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := goldenTable(t, tc.name)
			_, err := Open(storage.NewLocal(root)).Snapshot(ctx)
			if err == nil {
				t.Fatalf("snapshot of %s succeeded; want an error", tc.name)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if !strings.Contains(err.Error(), root) {
				t.Errorf("error %q does not name the table %s", err, root)
			}
		})
	}
}

// TestReplayLatestMetadataProtocol: the last metaData and protocol win.
func TestReplayLatestMetadataProtocol(t *testing.T) {
	root := goldenTable(t, "log-replay-latest-metadata-protocol")
	snap, err := Open(storage.NewLocal(root)).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Protocol.MinReaderVersion != 3 || snap.Protocol.MinWriterVersion != 7 ||
		strings.Join(snap.Protocol.WriterFeatures, ",") != "appendOnly,invariants" {
		t.Errorf("protocol %+v, want the one of version 2", snap.Protocol)
	}
	if len(snap.Schema.Fields) != 2 || snap.Schema.Fields[1].Name != "col2" {
		t.Errorf("schema %v, want the two-column one of version 1", snap.Schema)
	}
	if snap.NumFiles() != 4 {
		t.Errorf("files %d, want 4", snap.NumFiles())
	}
}

// TestTimeTravel checks version and timestamp time travel on the golden
// time-travel tables. Their commit files all carry one modification time,
// so the test first sets each commit file's time to its commitInfo
// timestamp, as a table written live would have.
func TestTimeTravel(t *testing.T) {
	ctx := context.Background()
	names := []string{"snapshot-vacuumed", "basic-with-inserts-deletes-checkpoint"}
	tt, _ := filepath.Glob(filepath.Join(conformanceDir(t), "golden", "time-travel-*.tar.zst"))
	for _, p := range tt {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".tar.zst"))
	}
	if len(names) < 8 {
		t.Fatalf("found only %v: the time-travel tables are missing", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			root := goldenTable(t, name)
			tbl := Open(storage.NewLocal(root))
			latest, err := tbl.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			times := make([]int64, latest.Version+1)
			for v := int64(0); v <= latest.Version; v++ {
				ci := firstCommitInfo(mustCommit(t, tbl, v))
				times[v] = ci.Timestamp
				p := filepath.Join(root, "_delta_log", fmt.Sprintf("%020d.json", v))
				if err := os.Chtimes(p, time.UnixMilli(ci.Timestamp), time.UnixMilli(ci.Timestamp)); err != nil {
					t.Fatal(err)
				}
			}
			for v := int64(0); v <= latest.Version; v++ {
				snap, err := tbl.SnapshotAt(ctx, v)
				if err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				checkAgainstOracle(t, snap, readOracle(t, root, v))
				if snap.Timestamp != times[v] {
					t.Errorf("version %d timestamp %d, want %d", v, snap.Timestamp, times[v])
				}
				// Exactly at the commit time, and just before the next one.
				for _, ts := range []int64{times[v], nextOr(times, v) - 1} {
					got, err := tbl.SnapshotAsOf(ctx, time.UnixMilli(ts))
					if err != nil {
						t.Fatalf("as of %d: %v", ts, err)
					}
					if got.Version != v {
						t.Errorf("as of %d: version %d, want %d", ts, got.Version, v)
					}
					if strings.Join(fileKeys(got), ",") != strings.Join(fileKeys(snap), ",") {
						t.Errorf("as of %d: file set differs from version %d", ts, v)
					}
				}
			}
			if _, err := tbl.SnapshotAsOf(ctx, time.UnixMilli(times[0]-1)); !errors.Is(err, ErrVersionNotFound) {
				t.Errorf("as of before version 0: %v, want ErrVersionNotFound", err)
			}
			if _, err := tbl.SnapshotAt(ctx, latest.Version+1); !errors.Is(err, ErrVersionNotFound) {
				t.Errorf("version after latest: %v, want ErrVersionNotFound", err)
			}
		})
	}
}

func nextOr(times []int64, v int64) int64 {
	if int(v)+1 < len(times) {
		return times[v+1]
	}
	return times[v] + 1000
}

func mustCommit(t testing.TB, tbl *Table, v int64) []Action {
	t.Helper()
	actions, err := tbl.ReadCommit(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	return actions
}

// TestReplayCanonicalPaths: Spark wrote the add of a local file as "/p" and
// its remove as "file:/p" or "file:///p"; they are one file, so the table
// is empty afterwards.
func TestReplayCanonicalPaths(t *testing.T) {
	for _, name := range []string{"canonicalized-paths-normal-a", "canonicalized-paths-normal-b",
		"canonicalized-paths-special-a", "canonicalized-paths-special-b"} {
		t.Run(name, func(t *testing.T) {
			snap, err := Open(storage.NewLocal(goldenTable(t, name))).Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if snap.NumFiles() != 0 || snap.NumTombstones() != 1 {
				t.Errorf("%d files, %d tombstones; want the add cancelled by its remove: %v", snap.NumFiles(), snap.NumTombstones(), fileKeys(snap))
			}
		})
	}
}

// writeLog writes hand-made commits (one JSON action per line) with the
// given file modification times in Unix ms.
func writeLog(t *testing.T, root string, mtimes []int64, commits ...[]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, LogDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for v, lines := range commits {
		p := filepath.Join(root, LogDir, fmt.Sprintf("%020d.json", v))
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.UnixMilli(mtimes[v]), time.UnixMilli(mtimes[v])); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInCommitTimestamps: with the inCommitTimestamp feature enabled, commit
// times come from commitInfo, not file times, for the versions from its
// enablement on; earlier versions keep file times.
func TestInCommitTimestamps(t *testing.T) {
	ctx := context.Background()
	schema := strings.ReplaceAll(testSchema, `"`, `\"`)
	meta := func(conf string) string {
		return `{"metaData":{"id":"t","format":{"provider":"parquet","options":{}},"schemaString":"` + schema +
			`","partitionColumns":[],"configuration":{` + conf + `}}}`
	}
	ictProto := `{"protocol":{"minReaderVersion":1,"minWriterVersion":7,"writerFeatures":["inCommitTimestamp"]}}`
	add := func(p string) string {
		return `{"add":{"path":"` + p + `","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}`
	}
	ci := func(ict int64) string {
		return fmt.Sprintf(`{"commitInfo":{"timestamp":1,"inCommitTimestamp":%d,"operation":"WRITE"}}`, ict)
	}

	t.Run("from creation", func(t *testing.T) {
		root := t.TempDir()
		// File times run backwards: only the in-commit timestamps are right.
		writeLog(t, root, []int64{9000, 8000, 7000},
			[]string{ci(1000), ictProto, meta(`"delta.enableInCommitTimestamps":"true"`)},
			[]string{ci(2000), add("a")},
			[]string{ci(3000), add("b")})
		tbl := Open(storage.NewLocal(root))
		for v, want := range []int64{1000, 2000, 3000} {
			s, err := tbl.SnapshotAt(ctx, int64(v))
			if err != nil {
				t.Fatal(err)
			}
			if s.Timestamp != want {
				t.Errorf("version %d timestamp %d, want %d", v, s.Timestamp, want)
			}
		}
		for _, c := range []struct{ at, want int64 }{{1000, 0}, {2500, 1}, {3000, 2}, {99999, 2}} {
			if v, err := tbl.VersionAsOf(ctx, time.UnixMilli(c.at)); err != nil || v != c.want {
				t.Errorf("as of %d: version %d (%v), want %d", c.at, v, err, c.want)
			}
		}
		if _, err := tbl.VersionAsOf(ctx, time.UnixMilli(999)); !errors.Is(err, ErrVersionNotFound) {
			t.Errorf("as of 999: %v, want ErrVersionNotFound", err)
		}
		old, _ := tbl.SnapshotAt(ctx, 0)
		if up, err := tbl.Update(ctx, old); err != nil || up.Timestamp != 3000 || up.NumFiles() != 2 {
			t.Errorf("update: %v %v", up, err)
		}
	})
	t.Run("enabled at version 2", func(t *testing.T) {
		root := t.TempDir()
		writeLog(t, root, []int64{100, 200, 9000, 9500},
			[]string{`{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}`, meta("")},
			[]string{add("a")},
			[]string{ci(3000), ictProto, meta(`"delta.enableInCommitTimestamps":"true","delta.inCommitTimestampEnablementVersion":"2","delta.inCommitTimestampEnablementTimestamp":"3000"`)},
			[]string{ci(4000), add("b")})
		tbl := Open(storage.NewLocal(root))
		for _, c := range []struct{ at, want int64 }{{100, 0}, {199, 0}, {250, 1}, {2999, 1}, {3000, 2}, {3999, 2}, {4000, 3}} {
			if v, err := tbl.VersionAsOf(ctx, time.UnixMilli(c.at)); err != nil || v != c.want {
				t.Errorf("as of %d: version %d (%v), want %d", c.at, v, err, c.want)
			}
		}
		if s, err := tbl.SnapshotAt(ctx, 1); err != nil || s.Timestamp != 200 {
			t.Errorf("version 1 before enablement: %v %v, want file time 200", s, err)
		}
	})
}

// TestReplayAfterLogCleanup: once cleanup deleted commits 0..9 behind the
// checkpoint at 10, versions before 10 are ErrVersionNotFound, 10 and later
// load, and Update from an old snapshot falls back to the checkpoint.
func TestReplayAfterLogCleanup(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	later := time.Now().Add(40 * 24 * time.Hour) // beyond the 30-day log retention
	tbl, snap := createTable(t, store, nil, Clock(func() time.Time { return later }))
	var v3 *Snapshot
	for i := 1; i <= 12; i++ {
		tx := tbl.Begin(snap)
		tx.Add(fakeAdd(fmt.Sprint("f", i)))
		tx.SetTxn("app", int64(i))
		c, err := tx.Commit(ctx, "WRITE", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.CheckpointErr != nil {
			t.Fatalf("checkpoint at %d: %v", c.Version, c.CheckpointErr)
		}
		if i == 3 {
			v3 = c.Snapshot
		}
		snap = c.Snapshot
	}
	if _, err := store.Read(ctx, commitPath(0)); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("commit 0 still there (%v): cleanup did not run, the test tests nothing", err)
	}
	for _, v := range []int64{0, 5, 9} {
		if _, err := tbl.SnapshotAt(ctx, v); !errors.Is(err, ErrVersionNotFound) || !strings.Contains(err.Error(), "cleaned up") {
			t.Errorf("version %d: %v, want ErrVersionNotFound saying the log was cleaned up", v, err)
		}
	}
	for _, v := range []int64{10, 12} {
		s, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if s.CheckpointVersion() != 10 || s.NumFiles() != int(v) {
			t.Errorf("version %d: checkpoint %d, %d files", v, s.CheckpointVersion(), s.NumFiles())
		}
	}
	up, err := tbl.Update(ctx, v3)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "update across cleanup", up, snap)
	if _, err := tbl.SnapshotAsOf(ctx, time.Unix(0, 0)); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("as of 1970: %v, want ErrVersionNotFound", err)
	}
	if s, err := tbl.SnapshotAsOf(ctx, later.Add(time.Hour)); err != nil || s.Version != 12 {
		t.Errorf("as of now: %v %v, want version 12", s, err)
	}
}

// TestReplaySkipsIncompleteOrDamagedCheckpoints: a multi-part checkpoint
// missing a part is never read, and a checkpoint that cannot be decoded is
// passed over for the JSON commits; either way the state is the log's.
func TestReplaySkipsIncompleteOrDamagedCheckpoints(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, table string
		damage      func(t *testing.T, logDir string)
		wantRead    bool // whether replay may read (and reject) the checkpoint
	}{
		{"missing part", "multi-part-checkpoint", func(t *testing.T, logDir string) {
			if err := os.Remove(filepath.Join(logDir, "00000000000000000001.checkpoint.0000000002.0000000002.parquet")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"truncated classic", "with_checkpoint_no_last_checkpoint", func(t *testing.T, logDir string) {
			p := filepath.Join(logDir, "00000000000000000002.checkpoint.parquet")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data[:len(data)/2], 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var root string
			if tc.table == "multi-part-checkpoint" {
				root = goldenTable(t, tc.table)
			} else {
				root = t.TempDir()
				if out, err := exec.Command("cp", "-r", kernelTable(t, tc.table)+"/.", root).CombinedOutput(); err != nil {
					t.Fatalf("copy table: %v %s", err, out)
				}
			}
			tc.damage(t, filepath.Join(root, LogDir))
			faulty := storage.NewFaulty(storage.NewLocal(root))
			snap, err := Open(faulty).Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if snap.CheckpointVersion() != -1 {
				t.Errorf("replayed from checkpoint %d", snap.CheckpointVersion())
			}
			checkAgainstOracle(t, snap, readOracle(t, root, snap.Version))
			readCkpt := false
			for _, p := range readsOf(faulty) {
				readCkpt = readCkpt || strings.Contains(p, ".checkpoint.")
			}
			if readCkpt != tc.wantRead {
				t.Errorf("read a checkpoint file: %v, want %v (reads %v)", readCkpt, tc.wantRead, readsOf(faulty))
			}
		})
	}
}

// TestUpdateProbesTheNextCommits: Update finds other writers' commits by
// asking for the next names, without listing the log (a listing reads
// every commit the retention keeps, and a writer updates before every
// batch); the snapshot, commit time included where file times run
// backwards, equals a full load's. Where the snapshot's own commit is gone
// (the table deleted and created again) it lists, and says the log went
// back.
func TestUpdateProbesTheNextCommits(t *testing.T) {
	ctx := context.Background()
	schema := strings.ReplaceAll(testSchema, `"`, `\"`)
	meta := `{"metaData":{"id":"t","format":{"provider":"parquet","options":{}},"schemaString":"` + schema +
		`","partitionColumns":[],"configuration":{}}}`
	proto := `{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}`
	add := func(p string) string {
		return `{"add":{"path":"` + p + `","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}`
	}
	root := t.TempDir()
	// Versions 2-4 have file times before version 1's: their commit
	// times are 5001, 5002 and 5003.
	writeLog(t, root, []int64{100, 5000, 4000, 4500, 4800},
		[]string{proto, meta}, []string{add("a")}, []string{add("b")}, []string{add("c")}, []string{add("d")})
	faulty := storage.NewFaulty(storage.NewLocal(root))
	tbl := Open(faulty)
	old, err := tbl.SnapshotAt(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	full, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lists := func(from int) (n int) {
		for _, op := range faulty.Ops()[from:] {
			if op.Kind == storage.OpList {
				n++
			}
		}
		return n
	}
	from := faulty.Count()
	up, err := tbl.Update(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if up.Version != 4 || up.NumFiles() != 4 || up.Timestamp != 5003 || up.Timestamp != full.Timestamp {
		t.Errorf("update: version %d, %d files, time %d; want 4, 4, 5003 (a full load's time %d)", up.Version, up.NumFiles(), up.Timestamp, full.Timestamp)
	}
	sameState(t, "update by probe", up, full)
	if n := lists(from); n != 0 {
		t.Errorf("update listed the log %d times", n)
	}
	from = faulty.Count()
	if again, err := tbl.Update(ctx, up); err != nil || again != up {
		t.Errorf("update with nothing new: %v, %v; want the same snapshot", again, err)
	}
	if n := lists(from); n != 0 {
		t.Errorf("an update with nothing new listed the log %d times", n)
	}
	// The table deleted and created again, with two versions.
	if err := os.RemoveAll(filepath.Join(root, LogDir)); err != nil {
		t.Fatal(err)
	}
	writeLog(t, root, []int64{100, 200}, []string{proto, meta}, []string{add("x")})
	if _, err := tbl.Update(ctx, up); err == nil || !strings.Contains(err.Error(), "behind the snapshot") {
		t.Errorf("update after the log went back: %v, want the listing's error", err)
	}
}
