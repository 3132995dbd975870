package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// ckptConformanceDir finds the shared conformance tables (real tables
// written by Spark and delta-rs). Missing data skips the test locally and
// fails it in CI, so CI cannot pass by testing less.
func ckptConformanceDir(t testing.TB) string {
	t.Helper()
	// DELTA_CONFORMANCE is what the replay tests read; the rest are the
	// usual places next to the repository.
	dirs := []string{os.Getenv("DELTA_CONFORMANCE"), os.Getenv("CDCAPPLY_CONFORMANCE"), "../../shared/delta-conformance", "/work/shared/delta-conformance"}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "golden")); err == nil {
			abs, err := filepath.Abs(d)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("delta conformance data not found (set DELTA_CONFORMANCE)")
	}
	t.Skip("delta conformance data not found (set DELTA_CONFORMANCE)")
	return ""
}

// ckptTable returns the table root of a conformance case: "golden/NAME"
// (unpacked into the test's temporary folder) or "kernel-data/NAME" (used
// in place; tests never write to it).
func ckptTable(t testing.TB, name string) string {
	t.Helper()
	base := ckptConformanceDir(t)
	kind, n, _ := strings.Cut(name, "/")
	if kind == "kernel-data" {
		return filepath.Join(base, kind, n)
	}
	dir := t.TempDir()
	cmd := exec.Command("tar", "--zstd", "-xf", filepath.Join(base, "golden", n+".tar.zst"), "-C", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", n, err, out)
	}
	return filepath.Join(dir, n, "delta")
}

// ckptCopyTable copies a table so a test can change it.
func ckptCopyTable(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("copy table: %v\n%s", err, out)
	}
	return dst
}

// ckptState is table state reduced from actions, enough to compare a
// checkpoint with the JSON commits it summarises. It is a deliberately
// simple replay, independent of the package's own, so the two check each
// other.
type ckptState struct {
	files      map[FileKey]*Add
	tombstones map[FileKey]*Remove
	txns       map[string]Txn
	domains    map[string]DomainMetadata
	protocol   *Protocol
	metadata   *Metadata
}

func newCkptState() *ckptState {
	return &ckptState{files: map[FileKey]*Add{}, tombstones: map[FileKey]*Remove{}, txns: map[string]Txn{}, domains: map[string]DomainMetadata{}}
}

func (s *ckptState) apply(acts []Action) {
	for _, a := range acts {
		switch {
		case a.Add != nil:
			k := a.Add.Key()
			s.files[k] = a.Add
			delete(s.tombstones, k)
		case a.Remove != nil:
			k := a.Remove.Key()
			delete(s.files, k)
			s.tombstones[k] = a.Remove
		case a.Txn != nil:
			s.txns[a.Txn.AppID] = *a.Txn
		case a.DomainMetadata != nil:
			if a.DomainMetadata.Removed {
				delete(s.domains, a.DomainMetadata.Domain)
			} else {
				s.domains[a.DomainMetadata.Domain] = *a.DomainMetadata
			}
		case a.Protocol != nil:
			s.protocol = a.Protocol
		case a.Metadata != nil:
			s.metadata = a.Metadata
		}
	}
}

// ckptReplayJSON replays the JSON commits 0..upto of a table.
func ckptReplayJSON(t testing.TB, store storage.Storage, upto int64) *ckptState {
	t.Helper()
	s := newCkptState()
	for v := int64(0); v <= upto; v++ {
		data, err := store.Read(context.Background(), fmt.Sprintf("%s/%020d.json", LogDir, v))
		if err != nil {
			t.Fatalf("read commit %d: %v", v, err)
		}
		acts, err := ParseActions(data)
		if err != nil {
			t.Fatalf("parse commit %d: %v", v, err)
		}
		s.apply(acts)
	}
	return s
}

// ckptFiles lists the storage paths of the checkpoint of version v.
func ckptFiles(t testing.TB, store storage.Storage, v int64) []string {
	t.Helper()
	infos, err := store.List(context.Background(), LogDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fi := range infos {
		if path.Dir(fi.Path) != LogDir {
			continue
		}
		if n, ok := ckptParseName(path.Base(fi.Path)); ok && n.version == v {
			out = append(out, fi.Path)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no checkpoint of version %d", v)
	}
	return out
}

func TestReadCheckpointConformance(t *testing.T) {
	cases := []struct {
		table   string
		version int64
		// sidecars is the number of sidecar actions the checkpoint holds:
		// _last_checkpoint's size counts them, readCheckpoint resolves them.
		sidecars int
		// stats is false where the checkpoint stores stats_parsed only.
		stats bool
		// noMetadata marks the case whose checkpoint was stripped of its
		// metaData action on purpose (a reader must refuse the table).
		noMetadata bool
	}{
		{"golden/checkpoint", 10, 0, true, false},
		{"golden/corrupted-last-checkpoint-kernel", 10, 0, true, false},
		{"golden/basic-with-inserts-deletes-checkpoint", 10, 0, true, false},
		{"golden/dv-partitioned-with-checkpoint", 10, 0, true, false},
		{"golden/multi-part-checkpoint", 1, 0, true, false},
		{"golden/only-checkpoint-files", 1, 0, true, false},
		{"golden/only-checkpoint-files", 2, 0, true, false},
		{"golden/v2-checkpoint-json", 2, 2, true, false},
		{"golden/v2-checkpoint-parquet", 2, 2, true, false},
		{"golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata", 10, 0, true, true},
		{"kernel-data/app-txn-checkpoint", 1, 0, true, false},
		{"kernel-data/parsed-stats", 3, 0, true, false},
		{"kernel-data/v1-multi-part-struct-stats-only", 5, 0, false, false},
		{"kernel-data/v1-single-part-struct-stats-only", 5, 0, false, false},
		{"kernel-data/with_checkpoint_no_last_checkpoint", 2, 0, true, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s@%d", c.table, c.version), func(t *testing.T) {
			ctx := context.Background()
			store := storage.NewLocal(ckptTable(t, c.table))
			paths := ckptFiles(t, store, c.version)
			acts, err := readCheckpoint(ctx, store, c.version, paths)
			if err != nil {
				t.Fatalf("readCheckpoint: %v", err)
			}
			got := newCkptState()
			got.apply(acts)
			want := ckptReplayJSON(t, store, c.version)

			// The live file set and each file's description agree.
			if len(got.files) != len(want.files) {
				t.Errorf("files: checkpoint has %d, commits give %d", len(got.files), len(want.files))
			}
			for k, w := range want.files {
				g, ok := got.files[k]
				if !ok {
					t.Errorf("file %v missing from checkpoint", k)
					continue
				}
				// dataChange is not compared: checkpoint writers store false.
				if g.Size != w.Size || g.ModificationTime != w.ModificationTime || !reflect.DeepEqual(g.PartitionValues, w.PartitionValues) ||
					!reflect.DeepEqual(g.DeletionVector, w.DeletionVector) || len(g.Tags)+len(w.Tags) > 0 && !reflect.DeepEqual(g.Tags, w.Tags) {
					t.Errorf("file %v:\ncheckpoint %+v\ncommits    %+v", k, *g, *w)
				}
				// Checkpoints without a stats column get theirs rebuilt
				// from stats_parsed: the same values either way.
				if !ckptSameJSON(t, g.Stats, w.Stats) {
					t.Errorf("file %v stats (stats column: %v): checkpoint %q, commits %q", k, c.stats, g.Stats, w.Stats)
				}
			}
			// Tombstones in a checkpoint are removes the commits made (the
			// writer may have expired some).
			for k := range got.tombstones {
				if _, ok := want.tombstones[k]; !ok {
					t.Errorf("tombstone %v not removed by any commit", k)
				}
			}
			if !reflect.DeepEqual(got.txns, want.txns) {
				t.Errorf("txns: checkpoint %v, commits %v", got.txns, want.txns)
			}
			if !reflect.DeepEqual(got.domains, want.domains) {
				t.Errorf("domains: checkpoint %v, commits %v", got.domains, want.domains)
			}
			if !reflect.DeepEqual(got.protocol, want.protocol) {
				t.Errorf("protocol: checkpoint %+v, commits %+v", got.protocol, want.protocol)
			}
			switch {
			case c.noMetadata:
				if got.metadata != nil {
					t.Errorf("metadata %+v in a checkpoint stripped of it", *got.metadata)
				}
			case got.metadata == nil:
				t.Errorf("no metadata in checkpoint")
			default:
				// Writers re-serialise the schema; compare it as JSON.
				g, w := *got.metadata, *want.metadata
				if !ckptSameJSON(t, g.SchemaString, w.SchemaString) {
					t.Errorf("schema: checkpoint %s, commits %s", g.SchemaString, w.SchemaString)
				}
				g.SchemaString, w.SchemaString = "", ""
				if !reflect.DeepEqual(g, w) {
					t.Errorf("metadata:\ncheckpoint %+v\ncommits    %+v", g, w)
				}
			}

			// _last_checkpoint, where it names this version, counts the
			// same actions.
			lc, err := readLastCheckpoint(ctx, store)
			if err != nil {
				t.Fatalf("readLastCheckpoint: %v", err)
			}
			if lc != nil && lc.Version == c.version && !c.noMetadata {
				if int(lc.Size) != len(acts)+c.sidecars {
					t.Errorf("_last_checkpoint size %d, read %d actions and %d sidecars", lc.Size, len(acts), c.sidecars)
				}
				if lc.NumOfAddFiles != nil && int(*lc.NumOfAddFiles) != len(got.files) {
					t.Errorf("_last_checkpoint numOfAddFiles %d, read %d", *lc.NumOfAddFiles, len(got.files))
				}
			}
			for _, a := range acts {
				if a.Sidecar != nil {
					t.Errorf("sidecar action %+v left unresolved", *a.Sidecar)
				}
			}
			// The removes-only read (a spilled snapshot's) gives the same
			// removes, sidecars resolved, and nothing else.
			var wantRm []Remove
			for _, a := range acts {
				if a.Remove != nil {
					wantRm = append(wantRm, *a.Remove)
				}
			}
			var gotRm []Remove
			err = eachCheckpointRemove(ctx, store, c.version, paths, func(r *Remove) bool {
				gotRm = append(gotRm, *r)
				return true
			})
			if err != nil {
				t.Fatalf("eachCheckpointRemove: %v", err)
			}
			if !reflect.DeepEqual(gotRm, wantRm) {
				t.Errorf("removes-only read: %d removes %+v, the full read %d %+v", len(gotRm), gotRm, len(wantRm), wantRm)
			}
		})
	}
}

// TestReadCheckpointV2Metadata checks that a V2 checkpoint's
// checkpointMetadata action comes back and its adds come from the sidecars.
func TestReadCheckpointV2Metadata(t *testing.T) {
	for _, name := range []string{"golden/v2-checkpoint-json", "golden/v2-checkpoint-parquet"} {
		store := storage.NewLocal(ckptTable(t, name))
		acts, err := readCheckpoint(context.Background(), store, 2, ckptFiles(t, store, 2))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var cms, adds int
		for _, a := range acts {
			if a.CheckpointMetadata != nil {
				cms++
				if a.CheckpointMetadata.Version != 2 {
					t.Errorf("%s: checkpointMetadata version %d", name, a.CheckpointMetadata.Version)
				}
			}
			if a.Add != nil {
				adds++
			}
		}
		if cms != 1 || adds == 0 {
			t.Errorf("%s: %d checkpointMetadata actions and %d adds", name, cms, adds)
		}
	}
}

func TestReadCheckpointRejectsIncompleteParts(t *testing.T) {
	store := storage.NewLocal(ckptTable(t, "golden/multi-part-checkpoint"))
	paths := ckptFiles(t, store, 1)
	sort.Strings(paths)
	cases := map[string][]string{
		"one of two parts": paths[:1],
		"part twice":       {paths[0], paths[0]},
		"wrong version":    paths,
		"no files":         nil,
	}
	for name, ps := range cases {
		v := int64(1)
		if name == "wrong version" {
			v = 2
		}
		if _, err := readCheckpoint(context.Background(), store, v, ps); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := readCheckpoint(context.Background(), store, 1, paths); err != nil {
		t.Errorf("both parts: %v", err)
	}
}

func TestReadCheckpointMissingSidecar(t *testing.T) {
	dir := ckptCopyTable(t, ckptTable(t, "golden/v2-checkpoint-parquet"))
	store := storage.NewLocal(dir)
	side, err := filepath.Glob(filepath.Join(dir, LogDir, "_sidecars", "*.parquet"))
	if err != nil || len(side) == 0 {
		t.Fatalf("no sidecars: %v", err)
	}
	if err := os.Remove(side[0]); err != nil {
		t.Fatal(err)
	}
	_, err = readCheckpoint(context.Background(), store, 2, ckptFiles(t, store, 2))
	if err == nil || !strings.Contains(err.Error(), "read checkpoint 2") {
		t.Fatalf("missing sidecar: err = %v", err)
	}
}

func TestReadLastCheckpoint(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		content string // "" means no file
		want    *LastCheckpoint
	}{
		{name: "missing"},
		{name: "empty", content: " "},
		{name: "not json", content: "{\"version\":3,"},
		{name: "no version", content: `{"size":3}`},
		{name: "negative version", content: `{"version":-1,"size":3}`},
		{name: "zero parts", content: `{"version":3,"size":3,"parts":0}`},
		{name: "classic", content: `{"version":3,"size":6,"sizeInBytes":22972,"numOfAddFiles":4}`,
			want: &LastCheckpoint{Version: 3, Size: 6, SizeInBytes: ckptI64(22972), NumOfAddFiles: ckptI64(4)}},
		{name: "multi-part", content: `{"version":1,"size":12,"parts":2,"checksum":"x"}`,
			want: &LastCheckpoint{Version: 1, Size: 12, Parts: ckptInt(2), Checksum: "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := storage.NewLocal(t.TempDir())
			if c.content != "" {
				if err := store.Write(ctx, lastCheckpointPath, []byte(c.content)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := readLastCheckpoint(ctx, store)
			if err != nil {
				t.Fatalf("readLastCheckpoint: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
	// The conformance table whose _last_checkpoint is empty.
	lc, err := readLastCheckpoint(ctx, storage.NewLocal(ckptTable(t, "golden/corrupted-last-checkpoint-kernel")))
	if err != nil || lc != nil {
		t.Fatalf("corrupted _last_checkpoint: %+v, %v", lc, err)
	}
	// A V2 hint keeps its inlined top-level file description.
	lc, err = readLastCheckpoint(ctx, storage.NewLocal(ckptTable(t, "golden/v2-checkpoint-json")))
	if err != nil || lc == nil || lc.V2Checkpoint == nil || len(lc.V2Checkpoint.SidecarFiles) != 2 || len(lc.V2Checkpoint.NonFileActions) != 3 {
		t.Fatalf("v2 _last_checkpoint: %+v, %v", lc, err)
	}
}

func TestReadLastCheckpointReadError(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	// A directory where the file should be: a read error that is not
	// "missing" must surface, not be taken for "no hint".
	if err := os.MkdirAll(filepath.Join(store.Location(), LogDir, "_last_checkpoint"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := readLastCheckpoint(ctx, store); err == nil {
		t.Fatal("no error reading a directory as _last_checkpoint")
	}
}

func TestCkptParseName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
		want ckptName
	}{
		{"00000000000000000010.checkpoint.parquet", true, ckptName{version: 10, ext: "parquet"}},
		{"00000000000000000001.checkpoint.0000000002.0000000003.parquet", true, ckptName{version: 1, part: 2, parts: 3, ext: "parquet"}},
		{"00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json", true, ckptName{version: 2, uuid: "6374b053-df23-479b-b2cf-c9c550132b49", ext: "json"}},
		{"00000000000000000002.checkpoint.e8fa2696-9728-4e9c-b285-634743fdd4fb.parquet", true, ckptName{version: 2, uuid: "e8fa2696-9728-4e9c-b285-634743fdd4fb", ext: "parquet"}},
		{"00000000000000000010.json", false, ckptName{}},
		{"00000000000000000010.crc", false, ckptName{}},
		{"_last_checkpoint", false, ckptName{}},
		{"00000000000000000010.checkpoint.json", false, ckptName{}},
		{"00000000000000000001.checkpoint.0000000004.0000000003.parquet", false, ckptName{}},
		{"00000000000000000002.checkpoint.0000000001.0000000002.bd1885fd-6ec0-4370-b0f5-43b5162fd4de.parquet", false, ckptName{}},
		{"0000000000000000010.checkpoint.parquet", false, ckptName{}},
		{"+0000000000000000010.checkpoint.parquet", false, ckptName{}},
		{"00000000000000000001.checkpoint.+000000002.0000000003.parquet", false, ckptName{}},
	}
	for _, c := range cases {
		got, ok := ckptParseName(c.name)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestCkptSidecarPath(t *testing.T) {
	cases := map[string]string{
		"a.parquet":     sidecarDir + "/a.parquet",
		"a%20b.parquet": sidecarDir + "/a b.parquet",
		"file:///tbl/_delta_log/_sidecars/c.parquet": sidecarDir + "/c.parquet",
		"../../x.parquet": sidecarDir + "/x.parquet",
	}
	for in, want := range cases {
		got, err := ckptSidecarPath(in)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", in, got, err, want)
		}
	}
}

// ckptSameJSON reports whether two JSON texts hold the same value.
func ckptSameJSON(t testing.TB, a, b string) bool {
	t.Helper()
	if a == b {
		return true
	}
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Errorf("parse %q: %v", a, err)
		return false
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Errorf("parse %q: %v", b, err)
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func ckptI64(n int64) *int64 { return &n }
func ckptInt(n int) *int     { return &n }

// FuzzCheckpointDecode feeds mutated checkpoint files to the Parquet
// decoder: a corrupt checkpoint must give an error, never a panic or a
// hang, because replay falls back to another checkpoint on error.
func FuzzCheckpointDecode(f *testing.F) {
	one := int64(1)
	day := "2026-01-01"
	acts := []Action{
		{Protocol: &Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"deletionVectors"}}},
		{Metadata: &Metadata{ID: "id", PartitionColumns: []string{"day"}, Configuration: map[string]string{"k": "v"}}},
		{Txn: &Txn{AppID: "app", Version: 1, LastUpdated: &one}},
		{Add: &Add{Path: "a", PartitionValues: map[string]*string{"day": &day, "n": nil}, Size: 1,
			DeletionVector: &DeletionVector{StorageType: "u", Cardinality: 1}}},
		{Remove: &Remove{Path: "b", DeletionTimestamp: &one}},
	}
	seed, err := encodeCheckpoint(acts)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	// A Spark-written checkpoint as a second seed, when the data is here.
	for _, dir := range []string{os.Getenv("DELTA_CONFORMANCE"), "../../shared/delta-conformance"} {
		if b, err := os.ReadFile(filepath.Join(dir, "kernel-data/app-txn-checkpoint/_delta_log/00000000000000000001.checkpoint.parquet")); dir != "" && err == nil {
			f.Add(b)
			break
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The removes-only read (a spilled snapshot's, by row group) must
		// fail as cleanly as the full one.
		// Read light (keys and deletion times), a group's whole decode must
		// give the same removes with the rest of their fields.
		for _, light := range []bool{false, true} {
			_ = ckptEachRemoveRowGroup(bytes.NewReader(data), int64(len(data)), light, func(acts []Action, g *ckptGroup) bool {
				var keys []*Remove
				for _, a := range acts {
					if a.Remove == nil && a.Sidecar == nil {
						t.Fatalf("removes-only read decoded %+v", a)
					}
					if a.Remove != nil {
						keys = append(keys, a.Remove)
					}
				}
				if !light || g.full == nil {
					return true
				}
				whole, err := g.full()
				if err != nil {
					return false
				}
				if len(whole) != len(keys) {
					t.Fatalf("light read %d removes, whole %d", len(keys), len(whole))
				}
				for i, r := range whole {
					k := keys[i]
					if r.Key() != k.Key() || !reflect.DeepEqual(r.DeletionTimestamp, k.DeletionTimestamp) || (r.Stats != "") != (k.Stats != "") {
						t.Fatalf("remove %d read light %+v, whole %+v", i, k, r)
					}
				}
				return true
			})
		}
		acts, err := decodeCkptBytes(data)
		// The load's read, which counts the removes instead of decoding
		// them, must agree with the full one on everything else.
		lean, removes, lerr := ckptDecodeParquet(bytes.NewReader(data), int64(len(data)), nil, true)
		if err != nil {
			return
		}
		for _, a := range acts {
			if a == (Action{}) {
				t.Fatal("empty action decoded")
			}
		}
		if lerr != nil {
			t.Fatalf("the full read succeeded, the read without removes failed: %v", lerr)
		}
		var want []Action
		wantRemoves := 0
		for _, a := range acts {
			if a.Remove != nil {
				wantRemoves++
				continue
			}
			want = append(want, a)
		}
		if removes != wantRemoves || !reflect.DeepEqual(lean, want) {
			t.Fatalf("read without removes: %d actions and %d removes; the full read has %d others and %d removes", len(lean), removes, len(want), wantRemoves)
		}
	})
}

// TestDecodeCheckpointManyRowGroupsAndPages: rows spread over several row
// groups and small pages (maps and lists crossing page boundaries) decode
// to the same actions as one big group.
func TestDecodeCheckpointManyRowGroupsAndPages(t *testing.T) {
	var acts []Action
	acts = append(acts, Action{Protocol: &Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors", "domainMetadata"}}})
	for i := 0; i < 300; i++ {
		pv := map[string]*string{"a": ckptStr(fmt.Sprint(i % 7)), "b": nil, "c": ckptStr(strings.Repeat("x", i%50))}
		add := &Add{Path: fmt.Sprintf("f-%04d.parquet", i), PartitionValues: pv, Size: int64(i), ModificationTime: int64(i * 10),
			Stats: fmt.Sprintf(`{"numRecords":%d}`, i)}
		if i%3 == 0 {
			add.Tags = map[string]string{"k": fmt.Sprint(i)}
		}
		if i%5 == 0 {
			add.DeletionVector = &DeletionVector{StorageType: "u", PathOrInlineDv: fmt.Sprint("dv", i), SizeInBytes: 1, Cardinality: int64(i)}
		}
		acts = append(acts, Action{Add: add})
		if i%11 == 0 {
			acts = append(acts, Action{Txn: &Txn{AppID: fmt.Sprint("app-", i), Version: int64(i)}})
		}
	}
	rows := make([]ckptRow, len(acts))
	for i, a := range acts {
		rows[i] = ckptRowOf(a)
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[ckptRow](&buf, parquet.MaxRowsPerRowGroup(37), parquet.PageBufferSize(512),
		parquet.Compression(&parquet.Zstd))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.RowGroups()) < 5 {
		t.Fatalf("only %d row groups", len(f.RowGroups()))
	}
	got, err := decodeCkptBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(acts) {
		t.Fatalf("decoded %d of %d actions", len(got), len(acts))
	}
	for i := range acts {
		want := acts[i]
		if want.Add != nil {
			w := *want.Add
			w.DataChange = false
			want.Add = &w
		}
		g, _ := json.Marshal(got[i])
		e, _ := json.Marshal(want)
		if !bytes.Equal(g, e) {
			t.Fatalf("action %d:\ngot  %s\nwant %s", i, g, e)
		}
	}
}

// FuzzParseLastCheckpoint: any bytes either parse to a usable hint or are
// treated as no hint; a usable one survives a write and a read unchanged.
func FuzzParseLastCheckpoint(f *testing.F) {
	f.Add([]byte(`{"version":3,"size":6,"sizeInBytes":22972,"numOfAddFiles":4}`))
	f.Add([]byte(`{"version":1,"size":12,"parts":2,"checksum":"x"}`))
	f.Add([]byte(`{"version":2,"size":9,"v2Checkpoint":{"path":"a.json","sizeInBytes":1,"modificationTime":2,"nonFileActions":[{"checkpointMetadata":{"version":2}}],"sidecarFiles":[{"path":"s.parquet","sizeInBytes":1,"modificationTime":1}]}}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		lc, ok := parseLastCheckpoint(data)
		if !ok {
			if lc != nil {
				t.Fatal("unusable hint returned")
			}
			return
		}
		if lc.Version < 0 || lc.Size < 0 || (lc.Parts != nil && *lc.Parts < 1) {
			t.Fatalf("usable hint out of range: %+v", lc)
		}
		b, err := json.Marshal(lc)
		if err != nil {
			t.Fatal(err)
		}
		again, ok := parseLastCheckpoint(b)
		if !ok || again.Version != lc.Version || again.Size != lc.Size || !reflect.DeepEqual(again.Parts, lc.Parts) {
			t.Fatalf("round trip: %+v -> %s -> %+v", lc, b, again)
		}
	})
}

// FuzzCkptParseName: a name that parses is exactly the name its parts
// format to, so listing and writing agree on what a checkpoint file is.
func FuzzCkptParseName(f *testing.F) {
	for _, s := range []string{
		"00000000000000000010.checkpoint.parquet",
		"00000000000000000001.checkpoint.0000000002.0000000003.parquet",
		"00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json",
		"00000000000000000010.json",
		"+0000000000000000010.checkpoint.parquet",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ckptParseName(s)
		if !ok {
			return
		}
		var back string
		switch {
		case n.parts > 0:
			back = fmt.Sprintf("%020d.checkpoint.%010d.%010d.%s", n.version, n.part, n.parts, n.ext)
		case n.uuid != "":
			back = fmt.Sprintf("%020d.checkpoint.%s.%s", n.version, n.uuid, n.ext)
		default:
			back = fmt.Sprintf("%020d.checkpoint.%s", n.version, n.ext)
		}
		if back != s {
			t.Fatalf("%q parsed to %+v, which formats to %q", s, n, back)
		}
	})
}

// decodeCkptBytes decodes a whole Parquet checkpoint file held in memory,
// removes included.
func decodeCkptBytes(data []byte) ([]Action, error) {
	acts, _, err := ckptDecodeParquet(bytes.NewReader(data), int64(len(data)), nil, false)
	return acts, err
}

// readCheckpoint is readCheckpointActions with the removes: every action
// of the checkpoint.
func readCheckpoint(ctx context.Context, store storage.Storage, version int64, paths []string) ([]Action, error) {
	acts, _, err := readCheckpointActions(ctx, store, version, paths, false)
	return acts, err
}

// TestDecodeCheckpointNullMapsAsEmpty: a checkpoint whose writer left a
// required map or list null (a metaData's configuration, partition
// columns and format options, an add's partition values) decodes to the
// empty values the JSON form always carries, so an action read from it is
// written again as the protocol wants ({} and [], never null) and equals
// what ParseActions gives for the same action.
func TestDecodeCheckpointNullMapsAsEmpty(t *testing.T) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[ckptRow](&buf)
	rows := []ckptRow{
		{Metadata: &ckptMetadata{ID: ckptStr("id"), Format: &ckptFormat{Provider: ckptStr("parquet")}, SchemaString: ckptStr(`{"type":"struct","fields":[]}`)}},
		{Add: &ckptAdd{Path: ckptStr("a.parquet"), Size: ckptI64(1), ModificationTime: ckptI64(2), DataChange: new(bool)}},
	}
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := decodeCkptBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseActions([]byte(`{"metaData":{"id":"id","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":[],"configuration":{}}}
{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":2,"dataChange":false}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		e, _ := json.Marshal(want)
		t.Fatalf("decoded\n%s\nwant (ParseActions)\n%s", g, e)
	}
}
