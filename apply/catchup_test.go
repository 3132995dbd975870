package apply

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/maintenance"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/cdcapply/cdcapply/tombstone"
)

// checkSlots fails unless the slot table holds exactly one slot per
// entry, each reachable by find from its key's home.
func checkSlots(t *testing.T, ix *KeyIndex) {
	t.Helper()
	seen := make([]bool, ix.entries.n)
	for _, s := range ix.slots {
		if s == 0 {
			continue
		}
		i := int(s&0xffffffff) - 1
		if i < 0 || i >= ix.entries.n || seen[i] {
			t.Fatalf("slot names entry %d of %d (seen before: %v)", i, ix.entries.n, i >= 0 && i < len(seen) && seen[i])
		}
		seen[i] = true
	}
	for i := range ix.entries.n {
		if !seen[i] {
			t.Fatalf("entry %d has no slot", i)
		}
		if at, ok := ix.find(string(ix.keyBytes(i))); !ok || at != i {
			t.Fatalf("entry %d: find gives %d, %v", i, at, ok)
		}
	}
}

// TestKeyIndexRemove: random inserts, updates (sequences of changing
// length, so records move in the arena) and removals held near the
// slot table's full load, where probe runs are long and wrap around the
// table's end: every held key keeps its sequence, flag, file and row,
// removed keys are not found, every entry has exactly one slot that find
// reaches, and the tombstone count follows. Entries at the end of a
// chunk are removed too (the last entry moves into the hole).
func TestKeyIndexRemove(t *testing.T) {
	type want struct {
		seq     string
		deleted bool
		file    fileID
		row     int64
	}
	ix := NewKeyIndex(scaleLayout)
	held := map[string]want{}
	var keys []string
	rng := rand.New(rand.NewPCG(11, 12))
	key := func(n int) string { return fmt.Sprintf("key-%d-%s", n, strings.Repeat("x", n%9)) }
	wrapped := false
	for op := 0; op < 60_000; op++ {
		// Keep about 3000 keys in a table of 4096 slots (load ~0.73).
		if len(keys) > 2900 && rng.IntN(2) == 0 || len(keys) > 3050 {
			j := rng.IntN(len(keys))
			k := keys[j]
			i, ok := ix.find(k)
			if !ok {
				t.Fatalf("op %d: held key %q not found before its removal", op, k)
			}
			if err := ix.remove(i); err != nil {
				t.Fatal(err)
			}
			delete(held, k)
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			if _, ok := ix.find(k); ok {
				t.Fatalf("op %d: removed key %q still found", op, k)
			}
		} else {
			k := key(rng.IntN(20_000))
			w := want{seq: string(pgSeq(uint64(rng.IntN(1 << uint(4+rng.IntN(40)))))), deleted: rng.IntN(3) == 0, file: fileID(rng.IntN(5)), row: int64(rng.IntN(1000))}
			if _, ok := held[k]; !ok {
				keys = append(keys, k)
			}
			held[k] = w
			if err := ix.upsert(k, []byte(w.seq), w.deleted, w.file, w.row); err != nil {
				t.Fatal(err)
			}
		}
		if ix.slots[0] != 0 && ix.slots[len(ix.slots)-1] != 0 {
			wrapped = true
		}
		if op%5000 == 0 || op == 59_999 {
			if ix.Len() != len(held) {
				t.Fatalf("op %d: index holds %d keys, want %d", op, ix.Len(), len(held))
			}
			tombs := 0
			for k, w := range held {
				e, ok := ix.lookup(k)
				if !ok || string(e.seq) != w.seq || e.deleted != w.deleted || e.file != w.file || e.row != w.row {
					t.Fatalf("op %d: key %q: %+v %v, want %+v", op, k, e, ok, w)
				}
				if w.deleted {
					tombs++
				}
			}
			if ix.Tombstones() != tombs {
				t.Fatalf("op %d: index counts %d tombstones, want %d", op, ix.Tombstones(), tombs)
			}
			checkSlots(t, ix)
		}
	}
	if len(ix.slots) != 4096 || !wrapped {
		t.Fatalf("%d slots, a run wrapped around the end: %v: the test did not exercise what it is for", len(ix.slots), wrapped)
	}
	// Empty the index: the last removals leave no slot behind.
	for len(keys) > 0 {
		i, _ := ix.find(keys[len(keys)-1])
		if err := ix.remove(i); err != nil {
			t.Fatal(err)
		}
		keys = keys[:len(keys)-1]
	}
	for _, s := range ix.slots {
		if s != 0 {
			t.Fatal("an emptied index keeps a slot")
		}
	}
	if ix.Len() != 0 || ix.Tombstones() != 0 {
		t.Fatalf("emptied index: %d keys, %d tombstones", ix.Len(), ix.Tombstones())
	}
}

// TestDropKeysShrinks: a catch-up's drop of the keys of gone files, by
// both of its ways (one by one when few, packed in one pass when at
// least an eighth of the index), leaves every other key as it was,
// finds none of the dropped ones, keeps one reachable slot per entry and
// the tombstone count, and shrinks the slot table to what a build would
// make once it is four times that. The keys are of varying length and
// some sequences changed length, so records sit anywhere in the arena;
// keys are spread over files so that every part of the entries moves.
func TestDropKeysShrinks(t *testing.T) {
	type want struct {
		seq     string
		deleted bool
		row     int64
		file    fileID
	}
	key := func(n int) string { return fmt.Sprintf("k%d-%s", n, strings.Repeat("y", n%7)) }
	build := func(t *testing.T, ix *KeyIndex, n, files int) map[string]want {
		t.Helper()
		held := map[string]want{}
		rng := rand.New(rand.NewPCG(uint64(n), uint64(files)))
		for i := range n {
			w := want{seq: string(pgSeq(uint64(1 + rng.IntN(1<<20)))), deleted: rng.IntN(4) == 0, row: int64(i / files), file: fileID(i % files)}
			if err := ix.upsert(key(i), []byte(w.seq), w.deleted, w.file, w.row); err != nil {
				t.Fatal(err)
			}
			held[key(i)] = w
		}
		for i := 0; i < n; i += 3 { // a sequence of another length moves the record
			w := held[key(i)]
			w.seq = string(pgSeq(uint64(1<<40 + i)))
			if err := ix.upsert(key(i), []byte(w.seq), w.deleted, w.file, w.row); err != nil {
				t.Fatal(err)
			}
			held[key(i)] = w
		}
		return held
	}
	drop := func(t *testing.T, ix *KeyIndex, held map[string]want, gone map[fileID]bool, wantSlots int) {
		t.Helper()
		wantDropped := 0
		for k, w := range held {
			if gone[w.file] {
				delete(held, k)
				wantDropped++
			}
		}
		dropped, err := ix.dropKeys(func(f fileID) bool { return gone[f] })
		if err != nil {
			t.Fatal(err)
		}
		if dropped != wantDropped || ix.Len() != len(held) {
			t.Fatalf("dropped %d keys, %d held; want %d and %d", dropped, ix.Len(), wantDropped, len(held))
		}
		tombs := 0
		for k, w := range held {
			e, ok := ix.lookup(k)
			if !ok || string(e.seq) != w.seq || e.deleted != w.deleted || e.file != w.file || e.row != w.row {
				t.Fatalf("key %q: %+v %v, want %+v", k, e, ok, w)
			}
			if w.deleted {
				tombs++
			}
		}
		if ix.Tombstones() != tombs {
			t.Fatalf("%d tombstones counted, want %d", ix.Tombstones(), tombs)
		}
		for i := range ix.entries.n {
			if gone[ix.entries.at(i).file] {
				t.Fatalf("entry %d is still in a gone file", i)
			}
		}
		checkSlots(t, ix)
		if len(ix.slots) != wantSlots {
			t.Fatalf("%d slots for %d keys, want %d", len(ix.slots), ix.Len(), wantSlots)
		}
	}
	t.Run("few-then-most", func(t *testing.T) {
		ix := NewKeyIndex(scaleLayout)
		held := build(t, ix, 40_000, 10)
		if len(ix.slots) != 65536 {
			t.Fatalf("%d slots for 40k keys, want 65536", len(ix.slots))
		}
		// A tenth: one by one; 36k keys still need 65536 slots.
		drop(t, ix, held, map[fileID]bool{3: true}, 65536)
		// Eight of the nine files left: packed, and 4k keys need 8192.
		drop(t, ix, held, map[fileID]bool{0: true, 1: true, 2: true, 4: true, 5: true, 6: true, 7: true, 8: true}, 8192)
		// The rest: an empty index of the smallest table.
		drop(t, ix, held, map[fileID]bool{9: true}, 16)
		// It still takes keys.
		held = build(t, ix, 1000, 2)
		drop(t, ix, held, map[fileID]bool{0: true}, 2048)
	})
	t.Run("packed-not-sparse", func(t *testing.T) {
		ix := NewKeyIndex(scaleLayout)
		held := build(t, ix, 20_000, 4)
		// A quarter: packed, but 15k keys still need the 32768 slots.
		drop(t, ix, held, map[fileID]bool{2: true}, 32768)
	})
	t.Run("few-from-a-sparse-table", func(t *testing.T) {
		// A table reserved for more rows than it holds keys (rows its
		// deletion vectors hide count in numRecords): a small drop
		// shrinks it too.
		ix := NewKeyIndex(scaleLayout)
		ix.reserve(100_000)
		held := build(t, ix, 1000, 10)
		drop(t, ix, held, map[fileID]bool{5: true}, 2048)
	})
}

// TestFileIDsStayBounded: a merge-on-read stream of many small batches
// takes a file id per batch while folding and a purge take files away;
// the index numbers the live files again once gone ones hold most of the
// ids, after its own commits and after a catch-up, so the ids stay
// within twice the live files (filesCompactMin lowered to 8), and the
// index still says what one built afresh says. Without the renumbering
// the ids reach one per file ever added (about 150 here).
func TestFileIDsStayBounded(t *testing.T) {
	defer func(m int) { filesCompactMin = m }(filesCompactMin)
	filesCompactMin = 8
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	a := refApplier(t, store, MergeOnRead)
	stream, oracle := keyedStream(600, 50, 21)
	purgeable(stream)
	added, most := 0, 0
	const size = 4
	for from := 0; from < len(stream); from += size {
		res, err := a.Apply(ctx, &Batch{Changes: stream[from : from+size], Read: size, Ranges: rng(int64(from), int64(from+size))})
		if err != nil {
			t.Fatal(err)
		}
		added += res.Files.Added
		most = max(most, len(a.index.files))
		if live := len(a.index.byPath); len(a.index.files) > max(2*live, filesCompactMin)+size {
			t.Fatalf("batch at %d: %d file ids for %d live files", from, len(a.index.files), live)
		}
		if from == len(stream)/2 {
			sameAsRebuilt(t, store, a, MergeOnRead, "halfway")
			pr, err := tombstone.Purge(ctx, delta.Open(store), tombstone.PurgeOptions{MaxLateness: time.Hour, Logger: quietLogger()})
			if err != nil || pr.Rows == 0 {
				t.Fatalf("purge %+v, %v: want tombstones purged", pr, err)
			}
			before := len(a.index.files)
			r, err := a.Refresh(ctx)
			if err != nil || r == nil || r.Rebuilt || r.CatchUp.KeysDropped == 0 {
				t.Fatalf("refresh after the purge: %+v, %v: want a catch-up dropping keys", r, err)
			}
			if live := len(a.index.byPath); len(a.index.files) >= 2*live && len(a.index.files) >= filesCompactMin {
				t.Fatalf("after the catch-up: %d file ids for %d live files (%d before)", len(a.index.files), live, before)
			}
			sameAsRebuilt(t, store, a, MergeOnRead, "after the purge's catch-up")
		}
	}
	if added < 4*most {
		t.Fatalf("%d files added, at most %d ids: the stream did not take ids faster than they are renumbered", added, most)
	}
	sameAsRebuilt(t, store, a, MergeOnRead, "at the end")
	sameLiveRows(t, store, oracle)
}

// indexDump is what an index says of each key, with its file named by
// path and deletion vector, and of the files it knows.
func indexDump(t *testing.T, ix *KeyIndex) (map[string]string, []string) {
	t.Helper()
	out := map[string]string{}
	for i := range ix.entries.n {
		key, _ := ix.record(i)
		e := ix.state(i)
		add := ix.files[e.file]
		if add == nil {
			t.Fatalf("key %s is in file #%d, which is gone", ix.renderKey(string(key)), e.file)
		}
		out[ix.renderKey(string(key))] = fmt.Sprintf("seq %x deleted %v file %s dv %q row %d", e.seq, e.deleted, add.Path, add.DeletionVector.UniqueID(), e.row)
	}
	var files []string
	for id, add := range ix.files {
		if add == nil {
			continue
		}
		if ix.byPath[add.Path] != fileID(id) {
			t.Fatalf("file %s is #%d but byPath says #%d", add.Path, id, ix.byPath[add.Path])
		}
		files = append(files, add.Path+" "+add.DeletionVector.UniqueID())
	}
	if len(ix.byPath) != len(files) {
		t.Fatalf("byPath holds %d paths for %d files", len(ix.byPath), len(files))
	}
	return out, files
}

// sameAsRebuilt fails unless a's key index says what an index built
// afresh from the table says, key by key and file by file.
func sameAsRebuilt(t *testing.T, store storage.Storage, a *TableApplier, mode MergeMode, what string) {
	t.Helper()
	fresh := refApplier(t, store, mode)
	if fresh.Snapshot().Version != a.Snapshot().Version {
		t.Fatalf("%s: applier at version %d, table at %d", what, a.Snapshot().Version, fresh.Snapshot().Version)
	}
	got, gotFiles := indexDump(t, a.index)
	want, wantFiles := indexDump(t, fresh.index)
	if !reflect.DeepEqual(got, want) {
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: key %s: index %q, rebuilt %q", what, k, got[k], w)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: key %s: index %q, absent from the rebuilt index", what, k, g)
			}
		}
		t.FailNow()
	}
	if len(gotFiles) != a.Snapshot().NumFiles() || !sameSet(gotFiles, wantFiles) {
		t.Fatalf("%s: index knows files %v, rebuilt %v (%d in the snapshot)", what, gotFiles, wantFiles, a.Snapshot().NumFiles())
	}
	if a.index.Tombstones() != fresh.index.Tombstones() {
		t.Fatalf("%s: %d tombstones counted, rebuilt %d", what, a.index.Tombstones(), fresh.index.Tombstones())
	}
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// liveRows keeps the rows of tableState or ordersOracle.rows that are not
// tombstones (a purge removes tombstones, so only live rows are compared).
func liveRows(rows []string) []string {
	var out []string
	for _, r := range rows {
		if !strings.HasSuffix(r, " true") {
			out = append(out, r)
		}
	}
	return out
}

// sameLiveRows fails unless the table's live rows are the oracle's (a
// purge removes tombstones, so only live rows are compared).
func sameLiveRows(t *testing.T, store storage.Storage, oracle ordersOracle) {
	t.Helper()
	rows, _ := tableState(t, store)
	if got, want := liveRows(rows), liveRows(oracle.rows()); !reflect.DeepEqual(got, want) {
		t.Fatalf("live rows\n got %v\nwant %v", got, want)
	}
}

// purgeable gives a stream's changes source times in 2020, older than
// any purge's cut-off, so a purge removes their tombstones.
func purgeable(stream []*Change) {
	for i, c := range stream {
		c.SourceTsMicros = 1_600_000_000_000_000 + int64(i)
	}
}

// TestRefreshCatchesUpWithOtherWriters: between the stream's batches,
// other writers commit: a tombstone purge, an optimize, another instance
// taking the partition for a batch (merge-on-read: a new deletion vector
// on a file the index knows), and a restore to an earlier version after
// which the stream replays from the rewound position. After each, Refresh
// catches the key index up without rebuilding it, and the index equals
// one built afresh from the table, key by key; the stream's next batches
// apply on it and the table's live rows end equal to the oracle's.
func TestRefreshCatchesUpWithOtherWriters(t *testing.T) {
	defer noFold()() // merge-on-read: files keep deletion vectors for optimize to compact
	for _, mode := range []MergeMode{CopyOnWrite, MergeOnRead} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			store := storage.NewLocal(t.TempDir())
			table := delta.Open(store)
			a := refApplier(t, store, mode)
			stream, oracle := keyedStream(400, 200, 21)
			purgeable(stream)
			tp := checkpoint.TopicPartition{Topic: "orders", Partition: 0}
			applyBy := func(w *TableApplier, from, to int) {
				t.Helper()
				if _, err := w.Apply(ctx, &Batch{Changes: stream[from:to], Read: to - from, Ranges: rng(int64(from), int64(to))}); err != nil {
					t.Fatalf("apply [%d, %d): %v", from, to, err)
				}
			}
			refresh := func(what string, wantDropped bool) *Refreshed {
				t.Helper()
				r, err := a.Refresh(ctx)
				if err != nil {
					t.Fatalf("%s: refresh: %v", what, err)
				}
				if r == nil || r.Rebuilt {
					t.Fatalf("%s: refresh %+v: want a catch-up without a rebuild", what, r)
				}
				if r.CatchUp.FilesRemoved == 0 && r.CatchUp.FilesAdded == 0 {
					t.Fatalf("%s: refresh %+v changed no file", what, r)
				}
				if wantDropped != (r.CatchUp.KeysDropped > 0) {
					t.Fatalf("%s: refresh dropped %d keys", what, r.CatchUp.KeysDropped)
				}
				t.Logf("%s: versions %d to %d, %+v", what, r.From, r.To, r.CatchUp)
				sameAsRebuilt(t, store, a, mode, what)
				return r
			}
			for from := 0; from < 100; from += 25 {
				applyBy(a, from, from+25)
			}
			restoreTo := a.Snapshot().Version

			// A purge of every tombstone.
			pr, err := tombstone.Purge(ctx, table, tombstone.PurgeOptions{MaxLateness: time.Hour, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if pr.Rows == 0 {
				t.Fatal("the purge removed no tombstone: the test checks nothing")
			}
			refresh("after a purge", true)
			applyBy(a, 100, 125)

			// Another instance applies a batch (a rebalance gave it the
			// partition), then the stream goes on here.
			b := refApplier(t, store, mode)
			applyBy(b, 125, 150)
			dvs := map[string]string{}
			for _, add := range a.Snapshot().Files() {
				dvs[add.Path] = add.DeletionVector.UniqueID()
			}
			refresh("after another instance's batch", false)
			newVectors := 0
			for _, add := range a.Snapshot().Files() {
				if dv, known := dvs[add.Path]; known && dv != add.DeletionVector.UniqueID() {
					newVectors++
				}
			}
			if (mode == MergeOnRead) != (newVectors > 0) {
				t.Fatalf("%d files the index knew got a new deletion vector from the other instance", newVectors)
			}
			applyBy(a, 150, 175)
			applyBy(a, 175, 200)

			// An optimize compacts the small files.
			or, err := maintenance.Optimize(ctx, table, maintenance.OptimizeOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if or.FilesRemoved == 0 {
				t.Fatal("optimize compacted nothing: the test checks nothing")
			}
			refresh("after an optimize", false)
			applyBy(a, 200, 250)

			// A restore to before the purge: the stream replays from
			// the rewound position.
			if _, err := delta.Restore(ctx, table, delta.RestoreTarget{Version: restoreTo}, delta.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			if r := refresh("after a restore", true); r.CatchUp.KeysAdded == 0 {
				t.Fatalf("after a restore to before the purge: %+v: want the purged tombstones back", r.CatchUp)
			}
			next, _ := a.Positions().Next(tp)
			if next != 100 {
				t.Fatalf("restored position %d, want 100", next)
			}
			for from := int(next); from < len(stream); from += 25 {
				applyBy(a, from, min(from+25, len(stream)))
			}
			sameAsRebuilt(t, store, a, mode, "at the end")
			sameLiveRows(t, store, oracle)
		})
	}
}

// TestRefreshRebuildsWhenItMust: a foreign commit that changes the
// table's metadata makes Refresh rebuild the index (and say why); one
// that adds a second row for a held key makes it fail, naming the key,
// and the applier then refuses batches instead of applying on an index
// that describes no version of the table, until a Reload (the engine's
// resync) reopens it. Reload also reopens after a dropped batch that
// evolved the layout, and reads nothing when nothing changed.
func TestRefreshRebuildsWhenItMust(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	table := delta.Open(store)
	a := refApplier(t, store, CopyOnWrite)
	stream, _ := crashStream(100, 5)
	if _, err := a.Apply(ctx, &Batch{Changes: stream[:50], Read: 50, Ranges: rng(0, 50)}); err != nil {
		t.Fatal(err)
	}

	snap := a.Snapshot()
	tx := table.Begin(snap)
	md := snap.Metadata
	md.Configuration = map[string]string{"owner": "ops"}
	for k, v := range snap.Metadata.Configuration {
		md.Configuration[k] = v
	}
	tx.SetMetadata(md)
	if _, err := tx.Commit(ctx, "SET TBLPROPERTIES", nil); err != nil {
		t.Fatal(err)
	}
	r, err := a.Refresh(ctx)
	if err != nil || r == nil || !r.Rebuilt || !strings.Contains(r.Reason, "metadata") {
		t.Fatalf("refresh after a metadata change: %+v, %v: want a rebuild for the metadata", r, err)
	}
	sameAsRebuilt(t, store, a, CopyOnWrite, "after a metadata change")

	// Another writer adds a file with a key the table holds.
	held := stream[0]
	rf, err := NewParquetRowFiles(store, a.Layout())
	if err != nil {
		t.Fatal(err)
	}
	add, err := rf.WriteRows(ctx, []Row{{Values: []schema.Value{schema.Int(held.Values[0].I), schema.String("dup")}, Seq: seqBytes(999)}})
	if err != nil {
		t.Fatal(err)
	}
	tx = table.Begin(a.Snapshot())
	tx.Add(add)
	if _, err := tx.Commit(ctx, "WRITE", nil); err != nil {
		t.Fatal(err)
	}
	r, err = a.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), errTwoRows.Error()) || !strings.Contains(err.Error(), "more than one row") || !strings.Contains(err.Error(), fmt.Sprintf("id=%d", held.Values[0].I)) {
		t.Fatalf("refresh after a second row for a key: %+v, %v: want the catch-up's finding and the rebuild's, the key named", r, err)
	}
	_, err = a.Apply(ctx, &Batch{Changes: stream[50:60], Read: 10, Ranges: rng(50, 60)})
	if err == nil || !strings.Contains(err.Error(), "not reopened after a failed refresh") {
		t.Fatalf("apply after a failed refresh: %v", err)
	}
	if err := a.Open(ctx); err == nil {
		t.Fatal("open of a table with two rows for one key succeeded")
	}

	// The other writer takes its file back: a resync's Reload reopens
	// (the applier is broken, a catch-up cannot be trusted) and batches
	// apply again.
	snap, err = table.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx = table.Begin(snap)
	tx.RemoveFile(add, true)
	if _, err := tx.Commit(ctx, "DELETE", nil); err != nil {
		t.Fatal(err)
	}
	r, err = a.Reload(ctx)
	if err != nil || r == nil || !r.Rebuilt || !strings.Contains(r.Reason, "refresh failed") {
		t.Fatalf("reload of a broken applier: %+v, %v: want a rebuild", r, err)
	}
	if _, err := a.Apply(ctx, &Batch{Changes: stream[50:60], Read: 10, Ranges: rng(50, 60)}); err != nil {
		t.Fatal(err)
	}
	sameAsRebuilt(t, store, a, CopyOnWrite, "after the reload")

	// A dropped batch that evolved the layout: Reload reopens, and the
	// layout is the table's again.
	if err := a.Evolve([]delta.StructField{{Name: "note", Type: delta.String}}); err != nil {
		t.Fatal(err)
	}
	r, err = a.Reload(ctx)
	if err != nil || r == nil || !r.Rebuilt || !strings.Contains(r.Reason, "schema") {
		t.Fatalf("reload after an evolution: %+v, %v: want a rebuild", r, err)
	}
	if _, ok := a.Layout().Column("note"); ok {
		t.Fatal("the dropped batch's column is still in the layout")
	}
	// Nothing changed since: a reload reads nothing.
	if r, err := a.Reload(ctx); r != nil || err != nil {
		t.Fatalf("reload with nothing new: %+v, %v", r, err)
	}
}

// TestCommitPastOtherWritersCatchesUp: a purge lands after the stream's
// last refresh, and the stream's next batch (new keys only, on another
// partition) commits past it without conflict. The key index follows
// the purge's files in that commit, so it equals one built afresh, and
// the stream goes on over the purged keys without a resync.
func TestCommitPastOtherWritersCatchesUp(t *testing.T) {
	for _, mode := range []MergeMode{CopyOnWrite, MergeOnRead} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			store := storage.NewLocal(t.TempDir())
			a := refApplier(t, store, mode)
			stream, oracle := keyedStream(200, 60, 8)
			purgeable(stream)
			for from := 0; from < 100; from += 25 {
				if _, err := a.Apply(ctx, &Batch{Changes: stream[from : from+25], Read: 25, Ranges: rng(int64(from), int64(from+25))}); err != nil {
					t.Fatal(err)
				}
			}
			pr, err := tombstone.Purge(ctx, delta.Open(store), tombstone.PurgeOptions{MaxLateness: time.Hour, Logger: quietLogger()})
			if err != nil || pr.Rows == 0 {
				t.Fatalf("purge %+v, %v: want tombstones purged", pr, err)
			}
			var fresh []*Change
			for i := range 10 {
				id := int64(1000 + i)
				c := refChange(id, uint64(500+i), "c", "fresh", int64(i))
				c.Pos.Partition = 1
				fresh = append(fresh, c)
				oracle.apply(int(id), "c", "fresh")
			}
			read := a.Snapshot().Version
			res, err := a.Apply(ctx, &Batch{Changes: fresh, Read: len(fresh),
				Ranges: map[checkpoint.TopicPartition]checkpoint.Range{{Topic: "orders", Partition: 1}: {From: 0, Next: 10}}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != read+2 {
				t.Fatalf("committed version %d reading %d: the batch did not commit past the purge", res.Version, read)
			}
			sameAsRebuilt(t, store, a, mode, "after a commit past a purge")
			for from := 100; from < len(stream); from += 25 {
				if _, err := a.Apply(ctx, &Batch{Changes: stream[from : from+25], Read: 25, Ranges: rng(int64(from), int64(from+25))}); err != nil {
					t.Fatal(err)
				}
			}
			sameLiveRows(t, store, oracle)
		})
	}
}

// TestBuildProgress: Open tells the applier's progress function where a
// key index build is, file by file, ending with the table's files and
// keys; the engine's logger of it says nothing for a build faster than
// its interval and logs each step past it except the last (Run logs the
// end).
func TestBuildProgress(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	a := refApplier(t, store, CopyOnWrite)
	stream, _ := keyedStream(120, 400, 3) // mostly new keys: a file per batch
	for from := 0; from < len(stream); from += 30 {
		if _, err := a.Apply(ctx, &Batch{Changes: stream[from : from+30], Read: 30, Ranges: rng(int64(from), int64(from+30))}); err != nil {
			t.Fatal(err)
		}
	}
	type step struct{ read, files, keys int }
	var steps []step
	b := NewTableApplier("orders", "p", delta.Open(store), func(l *Layout) (RowFiles, error) { return NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	b.SetBuildProgress(func(read, files, keys int) { steps = append(steps, step{read, files, keys}) })
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	files := b.Snapshot().NumFiles()
	if files < 3 || len(steps) != files+1 || steps[0] != (step{0, files, 0}) || steps[files] != (step{files, files, b.index.Len()}) {
		t.Fatalf("%d files, %d keys: progress %v", files, b.index.Len(), steps)
	}
	for i, s := range steps {
		if s.read != i || s.files != files || (i > 0 && s.keys < steps[i-1].keys) {
			t.Fatalf("step %d: %+v in %v", i, s, steps)
		}
	}

	for _, tc := range []struct {
		every time.Duration
		lines int
	}{{time.Hour, 0}, {0, files - 1}} {
		var log syncBuffer
		e := &Engine{log: slog.New(slog.NewTextHandler(&log, nil))}
		p := e.buildProgress("orders", tc.every)
		for _, s := range steps {
			p(s.read, s.files, s.keys)
		}
		if got := strings.Count(log.String(), "building key index"); got != tc.lines || tc.lines > 0 && !strings.Contains(log.String(), fmt.Sprintf("files_read=%d files=%d", files-1, files)) {
			t.Fatalf("every %s: %d lines, want %d:\n%s", tc.every, got, tc.lines, log.String())
		}
	}
}

// TestOpenFilesFollowTheTable: the data files an engine's table keeps
// open for stored-row reads (one datafile.FileCache, shared by the
// layouts) are closed as they leave the table: after each merge-on-read
// batch that folds files away, after another writer's optimize (a
// catch-up) and after a reopen (a rebuild), every file still open is a
// file of the table. A file kept open after a vacuum deleted it would
// hold its disk space until the engine stopped.
func TestOpenFilesFollowTheTable(t *testing.T) {
	ctx := context.Background()
	store := storage.NewLocal(t.TempDir())
	cache := datafile.NewFileCache(pointFilesOpen)
	newFiles := func(l *Layout) (RowFiles, error) {
		rf, err := NewParquetRowFiles(store, l, MergeOnReadFileOptions(l)...)
		if err != nil {
			return nil, err
		}
		rf.points = cache
		return rf, nil
	}
	a := NewTableApplier("orders", "p", delta.Open(store), newFiles, []string{"id"}, nil)
	if err := a.SetMergeMode(MergeOnRead); err != nil {
		t.Fatal(err)
	}
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(refLayout); err != nil {
		t.Fatal(err)
	}
	closedAsTheyLeft := 0
	check := func(what string, before []string) {
		t.Helper()
		open := cache.Paths()
		for _, p := range open {
			if _, live := a.index.byPath[p]; !live {
				t.Fatalf("%s: %s is kept open but is not a file of the table (open: %v)", what, p, open)
			}
		}
		for _, p := range before {
			if _, live := a.index.byPath[p]; !live {
				closedAsTheyLeft++
			}
		}
	}
	stream, _ := morStream(600, 4)
	for from := 0; from < len(stream); from += 20 {
		before := cache.Paths()
		if _, err := a.Apply(ctx, &Batch{Changes: stream[from : from+20], Read: 20, Ranges: rng(int64(from), int64(from+20))}); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after the batch at %d", from), before)
	}
	if closedAsTheyLeft == 0 {
		t.Fatal("no open file left the table in a batch: the test checked nothing")
	}
	closedAsTheyLeft = 0
	preOptimize := a.Snapshot().Version
	before := cache.Paths()
	if _, err := maintenance.Optimize(ctx, delta.Open(store), maintenance.OptimizeOptions{Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Refresh(ctx); err != nil || r == nil || r.Rebuilt {
		t.Fatalf("refresh after an optimize: %+v, %v", r, err)
	}
	check("after an optimize", before)
	if closedAsTheyLeft == 0 {
		t.Fatalf("the optimize compacted none of the open files %v: the test checked nothing", before)
	}
	// A batch reads the compacted file; a restore to before the optimize
	// takes it out of the table, and a reopen (as a resync does, without
	// a refresh) closes it.
	var deletes []*Change // a tombstone keeps the stored values: read
	for i := range 3 {
		deletes = append(deletes, refChange(int64(i), uint64(10_000+i), "d", "", int64(600+i)))
	}
	if _, err := a.Apply(ctx, &Batch{Changes: deletes, Read: 3, Ranges: rng(600, 603)}); err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Restore(ctx, delta.Open(store), delta.RestoreTarget{Version: preOptimize}, delta.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	closedAsTheyLeft = 0
	before = cache.Paths()
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a restore and a reopen", before)
	if closedAsTheyLeft == 0 {
		t.Fatalf("the restore took none of the open files %v out of the table: the test checked nothing", before)
	}
}

// TestTableProperties: a table the applier creates carries the properties
// it was given (and the checkpoint interval among them is followed); an
// existing table gets them with the next commit, its own properties kept,
// and only once.
func TestTableProperties(t *testing.T) {
	ctx := context.Background()
	props := map[string]string{"delta.checkpointInterval": "3", "delta.deletedFileRetentionDuration": "interval 2 days"}
	has := func(t *testing.T, store storage.Storage, want map[string]string) *delta.Snapshot {
		t.Helper()
		snap, err := delta.Open(store).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if snap.Metadata.Configuration[k] != v {
				t.Fatalf("version %d: %s = %q, want %q (configuration %v)", snap.Version, k, snap.Metadata.Configuration[k], v, snap.Metadata.Configuration)
			}
		}
		return snap
	}
	stream, _ := keyedStream(120, 40, 5)
	batch := func(i int) *Batch {
		return &Batch{Changes: stream[i*20 : i*20+20], Read: 20, Ranges: rng(int64(i*20), int64(i*20+20))}
	}
	t.Run("created", func(t *testing.T) {
		store := storage.NewLocal(t.TempDir())
		a := refApplier(t, store, CopyOnWrite)
		if err := a.SetTableProperties(props); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if _, err := a.Apply(ctx, batch(i)); err != nil {
				t.Fatal(err)
			}
		}
		snap := has(t, store, props)
		if snap.Metadata.Configuration[keyColumnsProperty] == "" || snap.CheckpointVersion() != 3 {
			t.Fatalf("configuration %v, checkpoint at %d: want the key columns kept and a checkpoint at version 3", snap.Metadata.Configuration, snap.CheckpointVersion())
		}
	})
	t.Run("existing", func(t *testing.T) {
		store := storage.NewLocal(t.TempDir())
		a := refApplier(t, store, MergeOnRead)
		for i := range 2 {
			if _, err := a.Apply(ctx, batch(i)); err != nil {
				t.Fatal(err)
			}
		}
		before := has(t, store, map[string]string{"delta.enableDeletionVectors": "true"}).Metadata
		b := refApplier(t, store, MergeOnRead)
		if err := b.SetTableProperties(props); err != nil {
			t.Fatal(err)
		}
		for i := 2; i < 6; i++ {
			if _, err := b.Apply(ctx, batch(i)); err != nil {
				t.Fatal(err)
			}
			snap := has(t, store, props)
			for k, v := range before.Configuration {
				if snap.Metadata.Configuration[k] != v {
					t.Fatalf("version %d: %s = %q, was %q", snap.Version, k, snap.Metadata.Configuration[k], v)
				}
			}
			if snap.Metadata.ID != before.ID || snap.Metadata.SchemaString != before.SchemaString {
				t.Fatalf("version %d: metadata %+v, was %+v", snap.Version, snap.Metadata, before)
			}
			commit, err := store.Read(ctx, fmt.Sprintf("_delta_log/%020d.json", snap.Version))
			if err != nil {
				t.Fatal(err)
			}
			if sets := strings.Contains(string(commit), `"metaData"`); sets != (i == 2) {
				t.Fatalf("batch %d (version %d) sets metadata: %v, want only the first after the properties were given", i, snap.Version, sets)
			}
		}
		if err := b.SetTableProperties(map[string]string{"delta.appendOnly": "true"}); err == nil {
			t.Fatal("delta.appendOnly accepted")
		}
	})
}
