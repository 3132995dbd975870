package delta

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

const testSchema = `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},` +
	`{"name":"part","type":"string","nullable":true,"metadata":{}}]}`

func testMetadata(conf map[string]string) Metadata {
	if conf == nil {
		conf = map[string]string{}
	}
	return Metadata{ID: "test-table", Format: Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString: testSchema, PartitionColumns: []string{}, Configuration: conf}
}

// createTable creates an empty table at store and returns it with its snapshot.
func createTable(t testing.TB, store storage.Storage, conf map[string]string, opts ...Option) (*Table, *Snapshot) {
	t.Helper()
	tbl := Open(store, opts...)
	tx := tbl.Begin(nil)
	tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
	tx.SetMetadata(testMetadata(conf))
	c, err := tx.Commit(context.Background(), "CREATE TABLE", nil)
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return tbl, c.Snapshot
}

func fakeAdd(name string) *Add {
	return &Add{Path: name + ".parquet", PartitionValues: map[string]*string{}, Size: int64(len(name)),
		ModificationTime: 1, DataChange: true}
}

// sameState compares what replay must reproduce: files, tombstones, txns,
// domains, protocol, metadata and version.
func sameState(t *testing.T, what string, got, want *Snapshot) {
	t.Helper()
	if got.Version != want.Version {
		t.Errorf("%s: version %d, want %d", what, got.Version, want.Version)
	}
	if !reflect.DeepEqual(comparableFiles(got), comparableFiles(want)) {
		t.Errorf("%s: files differ:\n got %v\nwant %v", what, fileKeys(got), fileKeys(want))
	}
	var gt, wt []string
	for _, r := range tombstonesOf(t, got) {
		gt = append(gt, r.Path+"|"+r.DeletionVector.UniqueID())
	}
	for _, r := range tombstonesOf(t, want) {
		wt = append(wt, r.Path+"|"+r.DeletionVector.UniqueID())
	}
	sort.Strings(gt)
	sort.Strings(wt)
	if !reflect.DeepEqual(gt, wt) {
		t.Errorf("%s: tombstones differ:\n got %v\nwant %v", what, gt, wt)
	}
	if !reflect.DeepEqual(got.Txns(), want.Txns()) {
		t.Errorf("%s: txns %v, want %v", what, got.Txns(), want.Txns())
	}
	if !reflect.DeepEqual(got.Domains(), want.Domains()) {
		t.Errorf("%s: domains %v, want %v", what, got.Domains(), want.Domains())
	}
	if !reflect.DeepEqual(got.Protocol, want.Protocol) || !reflect.DeepEqual(got.Metadata, want.Metadata) {
		t.Errorf("%s: protocol/metadata %+v %+v, want %+v %+v", what, got.Protocol, got.Metadata, want.Protocol, want.Metadata)
	}
}

// comparableFiles returns a snapshot's adds without dataChange, which a
// checkpoint legitimately rewrites to false.
func comparableFiles(s *Snapshot) []Add {
	var out []Add
	for _, a := range s.Files() {
		c := *a
		c.DataChange = false
		out = append(out, c)
	}
	return out
}

// TestCommitSnapshotMatchesReplay runs random commits (adds, removes, txns,
// domains) and checks after each that the snapshot derived by Commit equals
// a fresh replay of the log, and Update's incremental one too.
func TestCommitSnapshotMatchesReplay(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	// A large interval keeps this test about derivation, not checkpoints.
	tbl, snap := createTable(t, store, map[string]string{"delta.checkpointInterval": "1000"})
	rng := rand.New(rand.NewPCG(1, 2))
	old := snap
	next := 0
	for i := 0; i < 60; i++ {
		tx := tbl.Begin(snap)
		for j := rng.IntN(8); j >= 0; j-- {
			next++
			tx.Add(fakeAdd(fmt.Sprintf("f%04d", next)))
		}
		files := snap.Files()
		for _, a := range files {
			if rng.IntN(12) == 0 {
				tx.RemoveFile(a, true)
			}
		}
		tx.SetTxn(fmt.Sprintf("app-%d", rng.IntN(3)), int64(i))
		if i%7 == 0 {
			tx.SetDomain(DomainMetadata{Domain: "d", Configuration: fmt.Sprint(i), Removed: i%14 == 0})
		}
		c, err := tx.Commit(ctx, "WRITE", map[string]any{"mode": "Append"})
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		replayed, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, fmt.Sprintf("commit %d", i), c.Snapshot, replayed)
		snap = c.Snapshot
	}
	updated, err := tbl.Update(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "update", updated, snap)
	if snap.NumFiles() < 30 || snap.NumTombstones() == 0 {
		t.Fatalf("sequence too small to test anything: %d files, %d tombstones", snap.NumFiles(), snap.NumTombstones())
	}
}

// TestLayeredMatchesMap drives the layered map through random changes,
// across several folds of the overlay, against a plain map, and checks
// that earlier versions never change.
func TestLayeredMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type version struct {
		m    layered[Add]
		want map[FileKey]*Add
	}
	cur := newLayered(map[FileKey]*Add{})
	want := map[FileKey]*Add{}
	var history []version
	for step := 0; step < 400; step++ {
		changes := map[FileKey]*Add{}
		for j := rng.IntN(10); j >= 0; j-- {
			k := FileKey{Path: fmt.Sprint(rng.IntN(600))}
			if rng.IntN(3) == 0 {
				changes[k] = nil
			} else {
				changes[k] = &Add{Path: k.Path, Size: int64(step)}
			}
		}
		cur = cur.with(changes)
		next := copyMap(want)
		for k, v := range changes {
			if v == nil {
				delete(next, k)
			} else {
				next[k] = v
			}
		}
		want = next
		history = append(history, version{cur, want})
	}
	for i, h := range history {
		got := map[FileKey]*Add{}
		h.m.each(func(k FileKey, v *Add) bool {
			if _, dup := got[k]; dup {
				t.Fatalf("version %d: key %v twice", i, k)
			}
			got[k] = v
			return true
		})
		if !reflect.DeepEqual(got, h.want) || h.m.len() != len(h.want) {
			t.Fatalf("version %d: layered map has %d entries (len %d), want %d", i, len(got), h.m.len(), len(h.want))
		}
		for k, v := range h.want {
			if g, ok := h.m.get(k); !ok || g != v {
				t.Fatalf("version %d: get(%v) = %v %v", i, k, g, ok)
			}
		}
	}
	if len(cur.over) > overlayLimit(len(cur.base)) {
		t.Errorf("overlay %d exceeds its limit %d", len(cur.over), overlayLimit(len(cur.base)))
	}
}

func TestCommitInfoAndLayout(t *testing.T) {
	ctx := context.Background()
	tbl, snap := createTable(t, storage.NewLocal(t.TempDir()), nil, EngineVersion("1.2.3"))
	tx := tbl.Begin(snap)
	tx.Add(fakeAdd("a"))
	tx.SetTxn("topic-0", 42)
	c, err := tx.Commit(ctx, "STREAMING UPDATE", map[string]any{"outputMode": "Append"})
	if err != nil {
		t.Fatal(err)
	}
	actions := mustCommit(t, tbl, c.Version)
	ci := actions[0].CommitInfo
	if ci == nil {
		t.Fatalf("first action is not commitInfo: %+v", actions[0])
	}
	if ci.Operation != "STREAMING UPDATE" || ci.OperationParameters["outputMode"] != "Append" ||
		ci.ReadVersion == nil || *ci.ReadVersion != 0 || ci.IsBlindAppend == nil || !*ci.IsBlindAppend ||
		ci.EngineInfo != "cdcapply/1.2.3" || ci.TxnID == "" || ci.Timestamp == 0 {
		t.Errorf("commitInfo %+v", ci)
	}
	if txn, ok := c.Snapshot.Txn("topic-0"); !ok || txn.Version != 42 || txn.LastUpdated == nil {
		t.Errorf("txn %+v %v", txn, ok)
	}
	// A transaction that reads is not a blind append.
	tx = tbl.Begin(c.Snapshot)
	for _, a := range tx.ReadFiles(nil) {
		tx.RemoveFile(a, true)
	}
	c, err = tx.Commit(ctx, "DELETE", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ci := firstCommitInfo(mustCommit(t, tbl, c.Version)); *ci.IsBlindAppend {
		t.Errorf("delete marked as blind append")
	}
	if _, err := tx.Commit(ctx, "DELETE", nil); err == nil {
		t.Errorf("second Commit of one transaction succeeded")
	}
}

func TestCommitRefusals(t *testing.T) {
	ctx := context.Background()
	tbl, snap := createTable(t, storage.NewLocal(t.TempDir()), map[string]string{"delta.appendOnly": "true"})
	tx := tbl.Begin(snap)
	tx.Add(fakeAdd("a"))
	c, err := tx.Commit(ctx, "WRITE", nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		build func(tx *Transaction)
		msg   string
	}{
		{"append-only remove", func(tx *Transaction) { tx.RemoveFile(c.Snapshot.Files()[0], true) }, "append-only"},
		{"remove of a missing file", func(tx *Transaction) {
			tx.Remove(&Remove{Path: "nope.parquet", DataChange: false})
		}, "not a live file"},
		{"duplicate add", func(tx *Transaction) { tx.Add(fakeAdd("b"), fakeAdd("b")) }, "added twice"},
		{"partition values", func(tx *Transaction) {
			a := fakeAdd("c")
			v := "x"
			a.PartitionValues = map[string]*string{"part": &v}
			tx.Add(a)
		}, "partition values"},
		{"unknown partition column", func(tx *Transaction) {
			m := testMetadata(nil)
			m.PartitionColumns = []string{"nope"}
			tx.SetMetadata(m)
		}, "partition column"},
		{"writer feature", func(tx *Transaction) {
			tx.SetProtocol(Protocol{MinReaderVersion: 3, MinWriterVersion: 7, WriterFeatures: []string{"rowTracking"}})
		}, `writer feature "rowTracking"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx := tbl.Begin(c.Snapshot)
			tc.build(tx)
			_, err := tx.Commit(ctx, "WRITE", nil)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("commit error %v, want one saying %q", err, tc.msg)
			}
		})
	}
	// Compaction (dataChange=false) may remove from an append-only table.
	tx = tbl.Begin(c.Snapshot)
	tx.RemoveFile(c.Snapshot.Files()[0], false)
	b := fakeAdd("compacted")
	b.DataChange = false
	tx.Add(b)
	if _, err := tx.Commit(ctx, "OPTIMIZE", nil); err != nil {
		t.Errorf("compaction of an append-only table: %v", err)
	}
	// Creating without protocol or metadata is refused.
	if _, err := Open(storage.NewLocal(t.TempDir())).Begin(nil).Commit(ctx, "CREATE TABLE", nil); err == nil {
		t.Errorf("created a table without protocol and metadata")
	}
}

func TestFeatureChecks(t *testing.T) {
	inv := `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{"delta.invariants":"{\"expression\":{\"expression\":\"id > 0\"}}"}}]}`
	gen := `{"type":"struct","fields":[{"name":"s","type":{"type":"struct","fields":[{"name":"g","type":"long","nullable":true,"metadata":{"delta.generationExpression":"1"}}]},"nullable":true,"metadata":{}}]}`
	meta := func(schema string, conf map[string]string) Metadata {
		m := testMetadata(conf)
		if schema != "" {
			m.SchemaString = schema
		}
		return m
	}
	cases := []struct {
		name      string
		p         Protocol
		m         Metadata
		readErr   string // "" = readable
		writeErr  string // "" = writable
		writeOnly bool
	}{
		{"legacy 1/2", Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, meta("", nil), "", "", false},
		{"legacy invariants used", Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, meta(inv, nil), "", `"invariants" (column id`, false},
		{"legacy 4 with CDF on", Protocol{MinReaderVersion: 1, MinWriterVersion: 4}, meta("", map[string]string{"delta.enableChangeDataFeed": "true"}), "", `"changeDataFeed"`, false},
		{"legacy 4 generated nested", Protocol{MinReaderVersion: 1, MinWriterVersion: 4}, meta(gen, nil), "", `"generatedColumns" (column s.g`, false},
		{"legacy 3 constraint", Protocol{MinReaderVersion: 1, MinWriterVersion: 3}, meta("", map[string]string{"delta.constraints.pos": "id > 0"}), "", `"checkConstraints"`, false},
		{"legacy 4 unused", Protocol{MinReaderVersion: 1, MinWriterVersion: 4}, meta("", nil), "", "", false},
		{"legacy 2/5 column mapping", Protocol{MinReaderVersion: 2, MinWriterVersion: 5}, meta("", map[string]string{"delta.columnMapping.mode": "name"}), "", `"columnMapping"`, false},
		{"reader 99", Protocol{MinReaderVersion: 99, MinWriterVersion: 7}, meta("", nil), "reader version 99", "reader version 99", false},
		{"writer 8", Protocol{MinReaderVersion: 1, MinWriterVersion: 8}, meta("", nil), "", "writer version 8", false},
		{"dv", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors", "domainMetadata", "appendOnly"}}, meta("", nil), "", "", false},
		{"reader feature unknown", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"variantType"}}, meta("", nil), `reader feature "variantType"`, `reader feature "variantType"`, false},
		{"v2 checkpoint read only", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"v2Checkpoint"}, WriterFeatures: []string{"v2Checkpoint"}}, meta("", nil), "", `"v2Checkpoint"`, false},
		{"named column mapping", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"columnMapping"}, WriterFeatures: []string{"columnMapping"}}, meta("", nil), "", `"columnMapping"`, false},
		{"ICT", Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"inCommitTimestamp"}}, meta("", nil), "", "", false},
		{"row tracking", Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"rowTracking"}}, meta("", nil), "", `"rowTracking"`, false},
		{"named CDF", Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"changeDataFeed"}}, meta("", nil), "", `"changeDataFeed"`, false},
		{"named invariants unused", Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"invariants"}}, meta("", nil), "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error, want string) {
				t.Helper()
				switch {
				case want == "" && err != nil:
					t.Errorf("%s refused: %v", what, err)
				case want != "" && err == nil:
					t.Errorf("%s allowed; want refusal %q", what, want)
				case want != "" && (!errors.Is(err, ErrUnsupportedFeature) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tbl-loc")):
					t.Errorf("%s error %q, want ErrUnsupportedFeature naming %q and the table", what, err, want)
				}
			}
			check("read", checkRead("tbl-loc", tc.p), tc.readErr)
			check("write", checkWrite("tbl-loc", tc.p, tc.m), tc.writeErr)
		})
	}
}

// TestConflicts commits one transaction between another's read and its
// commit, for each rule, and checks the loser's typed error or retry.
func TestConflicts(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		winner func(tx *Transaction, s *Snapshot)
		loser  func(tx *Transaction, s *Snapshot)
		want   error // nil: the loser is retried and lands
	}{
		{"blind appends", func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("w")) },
			func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("l")) }, nil},
		{"different apps", func(tx *Transaction, s *Snapshot) { tx.SetTxn("p0", 1) },
			func(tx *Transaction, s *Snapshot) { tx.ReadTxn("p1"); tx.SetTxn("p1", 1) }, nil},
		{"same app", func(tx *Transaction, s *Snapshot) { tx.SetTxn("p0", 1) },
			func(tx *Transaction, s *Snapshot) { tx.ReadTxn("p0"); tx.SetTxn("p0", 1); tx.Add(fakeAdd("l")) }, ErrConcurrentTransaction},
		{"same app written blind", func(tx *Transaction, s *Snapshot) { tx.SetTxn("p0", 5) },
			func(tx *Transaction, s *Snapshot) { tx.SetTxn("p0", 4) }, ErrConcurrentTransaction},
		{"delete-delete", func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[0], true) },
			func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[0], true) }, ErrConcurrentDeleteDelete},
		{"delete-read", func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[0], true) },
			func(tx *Transaction, s *Snapshot) { tx.ReadFile(s.Files()[0].Key()); tx.Add(fakeAdd("l")) }, ErrConcurrentDeleteRead},
		{"compaction removes what was read", func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[0], false) },
			func(tx *Transaction, s *Snapshot) { tx.ReadFiles(nil); tx.Add(fakeAdd("l")) }, ErrConcurrentDeleteRead},
		{"delete of another file", func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[0], true) },
			func(tx *Transaction, s *Snapshot) { tx.RemoveFile(s.Files()[1], true) }, nil},
		{"append vs whole-table read", func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("w")) },
			func(tx *Transaction, s *Snapshot) { tx.ReadFiles(nil); tx.Add(fakeAdd("l")) }, ErrConcurrentAppend},
		{"append matching predicate", func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("w")) },
			func(tx *Transaction, s *Snapshot) {
				tx.ReadFiles(func(a *Add) bool { return strings.HasPrefix(a.Path, "w") })
				tx.Add(fakeAdd("l"))
			}, ErrConcurrentAppend},
		{"append not matching predicate", func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("w")) },
			func(tx *Transaction, s *Snapshot) {
				tx.ReadFiles(func(a *Add) bool { return strings.HasPrefix(a.Path, "zzz") })
				tx.Add(fakeAdd("l"))
			}, nil},
		{"compaction add vs whole-table read", func(tx *Transaction, s *Snapshot) {
			a := fakeAdd("w")
			a.DataChange = false
			tx.Add(a)
		}, func(tx *Transaction, s *Snapshot) { tx.ReadFiles(nil); tx.Add(fakeAdd("l")) }, nil},
		{"metadata", func(tx *Transaction, s *Snapshot) { tx.SetMetadata(testMetadata(map[string]string{"k": "v"})) },
			func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("l")) }, ErrMetadataChanged},
		{"protocol", func(tx *Transaction, s *Snapshot) { tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 3}) },
			func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("l")) }, ErrProtocolChanged},
		{"metadata change loses to an append", func(tx *Transaction, s *Snapshot) { tx.Add(fakeAdd("w")) },
			func(tx *Transaction, s *Snapshot) { tx.SetMetadata(testMetadata(map[string]string{"k": "v"})) }, ErrConcurrentAppend},
		{"same domain", func(tx *Transaction, s *Snapshot) { tx.SetDomain(DomainMetadata{Domain: "x", Configuration: "1"}) },
			func(tx *Transaction, s *Snapshot) { tx.SetDomain(DomainMetadata{Domain: "x", Configuration: "2"}) }, ErrConcurrentDomainMetadata},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl, snap := createTable(t, storage.NewLocal(t.TempDir()), nil)
			seed := tbl.Begin(snap)
			seed.Add(fakeAdd("s1"), fakeAdd("s2"))
			c, err := seed.Commit(ctx, "WRITE", nil)
			if err != nil {
				t.Fatal(err)
			}
			s := c.Snapshot
			loser := tbl.Begin(s)
			tc.loser(loser, s)
			winner := tbl.Begin(s)
			tc.winner(winner, s)
			wc, err := winner.Commit(ctx, "WRITE", nil)
			if err != nil {
				t.Fatalf("winner: %v", err)
			}
			lc, err := loser.Commit(ctx, "WRITE", nil)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("loser: %v; want a retry past the winner", err)
				}
				if lc.Version != wc.Version+1 || lc.Retries != 1 {
					t.Errorf("loser landed at %d after %d retries; want %d after 1", lc.Version, lc.Retries, wc.Version+1)
				}
				replayed, err := tbl.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				sameState(t, "after retry", lc.Snapshot, replayed)
				return
			}
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, tc.want) || !errors.Is(err, ErrConflict) {
				t.Fatalf("loser error %v; want a *ConflictError of kind %v", err, tc.want)
			}
			if ce.WinningVersion != wc.Version || ce.ReadVersion != s.Version {
				t.Errorf("conflict versions %d/%d, want %d/%d", ce.WinningVersion, ce.ReadVersion, wc.Version, s.Version)
			}
			if latest, _ := tbl.Snapshot(ctx); latest.Version != wc.Version {
				t.Errorf("loser wrote version %d", latest.Version)
			}
		})
	}
}

// TestConcurrentCreate: two transactions creating one table; the second
// learns the table was created concurrently and writes nothing.
func TestConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var txs []*Transaction
	for i := 0; i < 2; i++ {
		tx := Open(storage.NewLocal(dir)).Begin(nil)
		tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
		tx.SetMetadata(testMetadata(map[string]string{"creator": fmt.Sprint(i)}))
		txs = append(txs, tx)
	}
	if _, err := txs[0].Commit(ctx, "CREATE TABLE", nil); err != nil {
		t.Fatal(err)
	}
	_, err := txs[1].Commit(ctx, "CREATE TABLE", nil)
	if !errors.Is(err, ErrProtocolChanged) || !strings.Contains(err.Error(), "created concurrently") {
		t.Fatalf("second create: %v, want ErrProtocolChanged (created concurrently)", err)
	}
	snap, err := Open(storage.NewLocal(dir)).Snapshot(ctx)
	if err != nil || snap.Version != 0 || snap.Metadata.Configuration["creator"] != "0" {
		t.Fatalf("table %v %v; want version 0 by the first creator", snap, err)
	}
}

func TestCommitRetriesExhausted(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	tbl, snap := createTable(t, store, nil)
	tight := Open(store, MaxCommitRetries(1))
	loser := tight.Begin(snap)
	loser.Add(fakeAdd("l"))
	for i := 0; i < 2; i++ {
		tx := tbl.Begin(snap)
		tx.Add(fakeAdd(fmt.Sprint("w", i)))
		if _, err := tx.Commit(ctx, "WRITE", nil); err != nil && i == 0 {
			t.Fatal(err)
		}
		snap, _ = tbl.Snapshot(ctx)
	}
	_, err := loser.Commit(ctx, "WRITE", nil)
	if !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("error %v, want ErrRetriesExhausted", err)
	}
}

// TestCommitAmbiguousWrite: a write that fails in a way that may or may not
// have landed is reported as ErrCommitUnknown, and resolved when it can be
// read back.
func TestCommitAmbiguousWrite(t *testing.T) {
	ctx := context.Background()
	faulty := storage.NewFaulty(storage.NewLocal(t.TempDir()))
	tbl, snap := createTable(t, faulty, nil)
	// Crash right after the commit file lands: nothing can be read back.
	faulty.SetRule(func(op storage.Op) storage.Fault {
		if op.Kind == storage.OpWriteIfAbsent {
			return storage.CrashAfter
		}
		return storage.Pass
	})
	tx := tbl.Begin(snap)
	tx.Add(fakeAdd("a"))
	if _, err := tx.Commit(ctx, "WRITE", nil); !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("error %v, want ErrCommitUnknown", err)
	}
	faulty.Restart()
	if s, err := tbl.Snapshot(ctx); err != nil || s.Version != 1 {
		t.Fatalf("after restart: %v %v; the commit had landed", s, err)
	}
	// A write that failed before taking effect: nothing to read back, so
	// the outcome stays unknown (an object store could still apply it).
	snap, _ = tbl.Snapshot(ctx)
	faulty.SetRule(func(op storage.Op) storage.Fault {
		if op.Kind == storage.OpWriteIfAbsent {
			return storage.Fail
		}
		return storage.Pass
	})
	tx = tbl.Begin(snap)
	tx.Add(fakeAdd("b"))
	if _, err := tx.Commit(ctx, "WRITE", nil); !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("error %v, want ErrCommitUnknown (nothing to read back)", err)
	}
	faulty.Restart()
	if s, _ := tbl.Snapshot(ctx); s.Version != 1 {
		t.Fatalf("version %d after a failed write", s.Version)
	}
	// A write that landed but reported an error is resolved by reading it
	// back: our txnId is there, so the commit succeeded.
	lying := Open(&landedButFailed{Storage: faulty})
	tx = lying.Begin(snap)
	tx.Add(fakeAdd("c"))
	c, err := tx.Commit(ctx, "WRITE", nil)
	if err != nil || c.Version != 2 {
		t.Fatalf("commit %v %v; want version 2 resolved by reading it back", c, err)
	}
	if _, ok := c.Snapshot.File(fakeAdd("c").Key()); !ok {
		t.Errorf("resolved commit's snapshot lacks its file")
	}
}

// landedButFailed writes, then reports a timeout, like an object store
// request whose response was lost.
type landedButFailed struct{ storage.Storage }

func (l *landedButFailed) WriteIfAbsent(ctx context.Context, p string, data []byte) error {
	if err := l.Storage.WriteIfAbsent(ctx, p, data); err != nil {
		return err
	}
	return errors.New("request timed out")
}

// TestCommitInCommitTimestamps: on a table created with in-commit
// timestamps, every commit carries one, strictly increasing even when the
// clock goes backwards or a race is lost, and replay reports the same times.
func TestCommitInCommitTimestamps(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	now := int64(10_000)
	tbl := Open(store, Clock(func() time.Time { now -= 1000; return time.UnixMilli(now) }))
	tx := tbl.Begin(nil)
	tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{FeatureInCommitTimestamp}})
	tx.SetMetadata(testMetadata(map[string]string{"delta.enableInCommitTimestamps": "true"}))
	c, err := tx.Commit(ctx, "CREATE TABLE", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := c.Snapshot
	// Two transactions on one snapshot: the second loses the race to the
	// first and must still come out 1ms after it.
	a, b := tbl.Begin(snap), tbl.Begin(snap)
	a.Add(fakeAdd("a"))
	b.Add(fakeAdd("b"))
	var times []int64
	for _, tx := range []*Transaction{a, b} {
		c, err := tx.Commit(ctx, "WRITE", nil)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, c.Snapshot.Timestamp)
	}
	want := []int64{snap.Timestamp + 1, snap.Timestamp + 2}
	if !reflect.DeepEqual(times, want) {
		t.Errorf("commit times %v, want %v (monotonic despite the clock)", times, want)
	}
	for v := int64(0); v <= 2; v++ {
		ci := firstCommitInfo(mustCommit(t, tbl, v))
		s, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if ci.InCommitTimestamp == nil || *ci.InCommitTimestamp != s.Timestamp {
			t.Errorf("version %d: commitInfo %v, replayed timestamp %d", v, ci.InCommitTimestamp, s.Timestamp)
		}
	}
	if v, err := tbl.VersionAsOf(ctx, time.UnixMilli(times[0])); err != nil || v != 1 {
		t.Errorf("as of %d: %d %v, want 1", times[0], v, err)
	}

	// Enabling on a table with history is refused: the enablement version
	// is not known before the commit lands.
	plain, psnap := createTable(t, storage.NewLocal(t.TempDir()), nil)
	tx = plain.Begin(psnap)
	tx.SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{FeatureInCommitTimestamp}})
	tx.SetMetadata(testMetadata(map[string]string{"delta.enableInCommitTimestamps": "true"}))
	if _, err := tx.Commit(ctx, "SET TBLPROPERTIES", nil); !errors.Is(err, ErrUnsupportedFeature) {
		t.Errorf("enabling in-commit timestamps: %v, want ErrUnsupportedFeature", err)
	}
}

// TestTombstonesCarryNoStats: RemoveFile writes no stats into the remove
// (optional there, and most of a tombstone's size), and a snapshot keeps
// the removes of other writers without theirs, whether derived by a
// commit or replayed from the log.
func TestTombstonesCarryNoStats(t *testing.T) {
	ctx := context.Background()
	tbl, snap := createTable(t, storage.NewLocal(t.TempDir()), nil)
	stats := `{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":3},"nullCount":{"id":0}}`
	a, b := fakeAdd("a"), fakeAdd("b")
	a.Stats, b.Stats = stats, stats
	tx := tbl.Begin(snap)
	tx.Add(a, b)
	c, err := tx.Commit(ctx, "WRITE", nil)
	if err != nil {
		t.Fatal(err)
	}
	tx = tbl.Begin(c.Snapshot)
	tx.RemoveFile(a, true)
	ts := int64(5)
	tx.Remove(&Remove{Path: b.Path, DeletionTimestamp: &ts, DataChange: true, Stats: stats}) // as another writer may
	c, err = tx.Commit(ctx, "DELETE", nil)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]string{}
	for _, act := range mustCommit(t, tbl, c.Version) {
		if act.Remove != nil {
			logged[act.Remove.Path] = act.Remove.Stats
		}
	}
	if s, ok := logged[a.Path]; !ok || s != "" {
		t.Errorf("RemoveFile logged stats %q (present %v), want none", s, ok)
	}
	if logged[b.Path] != stats {
		t.Errorf("an explicit remove's stats were not logged as given: %q", logged[b.Path])
	}
	replayed, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Snapshot{"derived": c.Snapshot, "replayed": replayed} {
		if s.NumTombstones() != 2 {
			t.Fatalf("%s: %d tombstones, want 2", name, s.NumTombstones())
		}
		for _, r := range tombstonesOf(t, s) {
			if r.Stats != "" || r.Size == nil && r.Path == a.Path {
				t.Errorf("%s: tombstone %s keeps stats %q or lost its size", name, r.Path, r.Stats)
			}
		}
	}
}

// TestCommitExpiresTombstonesAtCheckpoint: a writer that keeps committing
// keeps the snapshot a reader of its checkpoints finds. At each
// checkpoint the tombstones older than delta.deletedFileRetentionDuration
// leave the checkpoint and the writer's snapshot alike, so a long-running
// writer holds only the retention's worth of them, not every remove of
// its run (a merge-on-read stream removes a file per deletion vector it
// changes, about a hundred a commit at 10M keys).
// replaceFiles commits the removal of every file of snap and the add of
// file i: a tombstone per file a commit.
func replaceFiles(t *testing.T, tbl *Table, snap *Snapshot, i int) *Committed {
	t.Helper()
	tx := tbl.Begin(snap)
	for _, a := range snap.Files() {
		tx.RemoveFile(a, true)
	}
	tx.Add(fakeAdd(fmt.Sprintf("f%03d", i)))
	c, err := tx.Commit(context.Background(), "WRITE", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCommitExpiresTombstonesAtCheckpoint(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	now := time.UnixMilli(1_800_000_000_000)
	tbl, snap := createTable(t, store, map[string]string{"delta.deletedFileRetentionDuration": "interval 1 hours", "delta.checkpointInterval": "5"},
		Clock(func() time.Time { return now }))
	dropped := false
	const commits = 40
	for i := 1; i <= commits; i++ {
		now = now.Add(10 * time.Minute)
		c := replaceFiles(t, tbl, snap, i)
		if c.CheckpointErr != nil {
			t.Fatalf("checkpoint at %d: %v", c.Version, c.CheckpointErr)
		}
		if want := c.Version%5 == 0; c.Checkpointed != want || (c.CheckpointTook > 0) != want {
			t.Fatalf("version %d: Checkpointed %v, CheckpointTook %v; a checkpoint was due: %v", c.Version, c.Checkpointed, c.CheckpointTook, want)
		}
		replayed, err := Open(store).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, fmt.Sprintf("commit %d", i), c.Snapshot, replayed)
		if c.Snapshot.NumTombstones() < snap.NumTombstones() {
			dropped = true
		}
		// An hour of removes (six) and up to four since the checkpoint.
		if n := c.Snapshot.NumTombstones(); n > 11 {
			t.Fatalf("commit %d: %d tombstones held, retention 1 hour at one remove each 10 minutes", i, n)
		}
		snap = c.Snapshot
	}
	if !dropped {
		t.Fatal("no checkpoint dropped a tombstone: the test exercised nothing")
	}
}

// tombstonesOf is Snapshot.Tombstones for a test: reading a spilled
// checkpoint back must not fail.
func tombstonesOf(tb testing.TB, s *Snapshot) []*Remove {
	tb.Helper()
	out, err := s.Tombstones(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
