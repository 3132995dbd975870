package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/schema"
)

// TestKeyIndexGrowsPastOneMillion inserts keys one by one past the sizes
// where the arena and the entries go on in a second chunk: every key keeps
// its sequence, deleted flag, file and row (each key looked up: the slot
// table was grown from 16 slots, twenty doublings placed by the slots'
// tags alone), and less than a chunk of entries is spare.
func TestKeyIndexGrowsPastOneMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 1.4M keys")
	}
	const n = 1_400_000
	ix := NewKeyIndex(scaleLayout)
	seqOf := func(i int) []byte { return pgSeq(uint64(i%1000 + 1)) }
	for i := 0; i < n; i++ {
		if err := ix.insert(EncodeKey(scaleValues(int64(i), 1), scaleLayout.Key), seqOf(i), i%7 == 0, fileID(i%3), int64(i%100_000)); err != nil {
			t.Fatal(err)
		}
	}
	if ix.Len() != n {
		t.Fatalf("index holds %d keys, want %d", ix.Len(), n)
	}
	if spare := ix.entries.capacity() - ix.entries.n; spare >= entryChunk {
		t.Errorf("entries capacity %d for %d keys: more than a chunk to spare", ix.entries.capacity(), ix.entries.n)
	}
	for i := 0; i < n; i++ {
		e, ok := ix.lookup(EncodeKey(scaleValues(int64(i), 1), scaleLayout.Key))
		if !ok || !bytes.Equal(e.seq, seqOf(i)) || e.deleted != (i%7 == 0) || e.file != fileID(i%3) || e.row != int64(i%100_000) {
			t.Fatalf("key %d: %+v %v", i, e, ok)
		}
	}
	if _, ok := ix.lookup(EncodeKey(scaleValues(n+5, 1), scaleLayout.Key)); ok {
		t.Fatal("a key never inserted was found")
	}
}

// TestEntryTable: entries appended one by one, after a reservation, and
// after a reservation made once some are in, each read back at its index
// across chunk boundaries; appends never move a full chunk.
func TestEntryTable(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 2.5M entries")
	}
	const n = 2*entryChunk + 12345
	for _, tc := range []struct {
		name          string
		reserveAt, of int
	}{{"appended", -1, 0}, {"reserved", 0, n}, {"reserved-late", 5000, n}, {"reserved-short", 100, entryChunk + 7}} {
		t.Run(tc.name, func(t *testing.T) {
			var tab entryTable
			var second *indexEntry
			for i := range n {
				if i == tc.reserveAt {
					tab.reserve(tc.of)
					if tab.capacity() < tc.of {
						t.Fatalf("reserve(%d) left room for %d", tc.of, tab.capacity())
					}
				}
				tab.append(indexEntry{off: uint64(i), file: fileID(i % 7), row: uint32(i * 3)})
				if i == entryChunk {
					second = tab.at(i)
				}
			}
			if tab.n != n {
				t.Fatalf("%d entries, want %d", tab.n, n)
			}
			for i := range n {
				if e := tab.at(i); e.off != uint64(i) || e.file != fileID(i%7) || e.row != uint32(i*3) {
					t.Fatalf("entry %d: %+v", i, *e)
				}
			}
			if tab.at(entryChunk) != second {
				t.Fatal("an entry of the second chunk moved as the table grew")
			}
		})
	}
}

// TestKeyArena: records of mixed lengths (one as long as a chunk allows)
// appended past three chunks read back whole at their offsets; none spans
// two chunks, each skipped tail is reported, the extent is the records
// plus the skipped tails, a record of a full chunk never moves as the
// arena grows, and a record longer than a chunk is refused. A KeyIndex
// whose sequences change length compacts its arena across chunks and
// still finds every key.
func TestKeyArena(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 50 MiB of records")
	}
	var a keyArena
	type rec struct {
		off      uint64
		key, seq []byte
	}
	var recs []rec
	total, skippedAll := 0, 0
	var firstOfSecond uint64
	longKey := bytes.Repeat([]byte("k"), arenaChunk-16)
	for i := 0; a.size() < 3*arenaChunk+12345; i++ {
		key := []byte(fmt.Sprintf("key-%d-%s", i, strings.Repeat("x", i%700)))
		if i == 20_000 {
			key = longKey
		}
		seq := bytes.Repeat([]byte{byte(i)}, 1+i%40)
		off, skipped, err := arenaAppend(&a, key, seq)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if skipped != 0 && off&(arenaChunk-1) != 0 {
			t.Fatalf("record %d skipped %d bytes but does not start a chunk (offset %d)", i, skipped, off)
		}
		if firstOfSecond == 0 && off>>arenaChunkShift == 1 {
			firstOfSecond = off
		}
		skippedAll += skipped
		total += recordLen(len(key), len(seq))
		recs = append(recs, rec{off, key, seq})
	}
	if len(a.chunks) < 4 {
		t.Fatalf("%d chunks, want at least 4", len(a.chunks))
	}
	if got := a.size(); got != total+skippedAll {
		t.Fatalf("extent %d, want %d of records and %d skipped", got, total, skippedAll)
	}
	kept := &a.chunks[1][0]
	for i, r := range recs {
		if !a.holds(r.off) {
			t.Fatalf("record %d at %d: not held", i, r.off)
		}
		b := a.at(r.off)
		kl, n := binary.Uvarint(b)
		if int(kl) != len(r.key) || !bytes.Equal(b[n:n+int(kl)], r.key) {
			t.Fatalf("record %d at %d: wrong key", i, r.off)
		}
		b = b[n+int(kl):]
		sl, n := binary.Uvarint(b)
		if !bytes.Equal(b[n:n+int(sl)], r.seq) {
			t.Fatalf("record %d at %d: wrong sequence", i, r.off)
		}
	}
	if a.holds(uint64(a.size())) || a.holds(uint64(len(a.chunks))<<arenaChunkShift) {
		t.Fatal("holds reports an offset past the last record")
	}
	if &a.chunks[1][0] != kept || firstOfSecond != 1<<arenaChunkShift {
		t.Fatal("the second chunk moved or did not start at its offset")
	}
	if _, _, err := arenaAppend(&a, append(longKey, make([]byte, 64)...), nil); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("a record longer than a chunk: %v", err)
	}

	// Compaction: 300k keys whose sequences change length (each change
	// moves the record) until more than half the arena is garbage.
	ix := NewKeyIndex(scaleLayout)
	const keys = 300_000
	keyOf := func(i int) string { return EncodeKey(scaleValues(int64(i), 1), scaleLayout.Key) }
	for i := range keys {
		if err := ix.insert(keyOf(i), pgSeq(uint64(i+1)), false, 0, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	compacted := false
	for round := 1; round <= 6; round++ {
		before := ix.arena.size()
		for i := range keys {
			at, ok := ix.find(keyOf(i))
			if !ok {
				t.Fatalf("round %d: key %d lost", round, i)
			}
			seq := bytes.Repeat([]byte{byte(round)}, 10+round*3)
			if err := ix.set(at, seq, round%2 == 0, fileID(round), int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if ix.arena.size() < before {
			compacted = true
		}
		for i := 0; i < keys; i += 7 {
			e, ok := ix.lookup(keyOf(i))
			if !ok || !bytes.Equal(e.seq, bytes.Repeat([]byte{byte(round)}, 10+round*3)) || e.deleted != (round%2 == 0) || e.file != fileID(round) || e.row != int64(i) {
				t.Fatalf("round %d, key %d: %+v %v", round, i, e, ok)
			}
		}
	}
	if !compacted {
		t.Fatal("the arena was never compacted")
	}
	if ix.garbage > ix.arena.size()/2 {
		t.Fatalf("%d bytes of garbage in an arena of %d", ix.garbage, ix.arena.size())
	}
}

// TestLookupAllMatchesFind: the grouped lookups of a batch give each key
// what find and state give it, for held and absent keys, keys of several
// lengths (a record whose key differs only in length), tombstones, and a
// small index at its full load, where a key's first slot is often
// another's (the fallback to find); batch lengths not a multiple of the
// group and large enough to be split over goroutines.
func TestLookupAllMatchesFind(t *testing.T) {
	ix := NewKeyIndex(scaleLayout)
	key := func(i int) string {
		// Keys of 1 to 24 bytes; i and its prefixes are distinct keys.
		s := []byte(fmt.Sprintf("k%d", i))
		return string(s[:1+i%len(s)]) + strings.Repeat("x", i%17)
	}
	held := map[string]bool{}
	for i := 0; len(held) < 6000; i++ {
		k := key(i)
		if held[k] {
			continue
		}
		held[k] = true
		if err := ix.upsert(k, pgSeq(uint64(i+1)), i%5 == 0, fileID(i%4), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if load := float64(ix.Len()) / float64(len(ix.slots)); load < 0.3 {
		t.Fatalf("index load %.2f: too low to exercise collisions", load)
	}
	for _, n := range []int{1, 7, 8, 9, 1001, 2*lookupMin + 13} {
		reduced := make([]Reduced, n)
		for i := range reduced {
			reduced[i].Winner = &Change{Key: key((i*7919 + n) % 12000)}
		}
		got := ix.lookupAll(reduced)
		found := 0
		for i := range reduced {
			at, ok := ix.find(reduced[i].Winner.Key)
			want := lookedUp{at: at, ok: ok}
			if ok {
				want.e = ix.state(at)
				found++
			}
			if !reflect.DeepEqual(got[i], want) {
				t.Fatalf("batch of %d, key %q: lookupAll %+v, find %+v", n, reduced[i].Winner.Key, got[i], want)
			}
		}
		if n > 100 && (found == 0 || found == n) {
			t.Fatalf("batch of %d: %d held: want both held and absent keys", n, found)
		}
	}
}

// TestKeyIndexCountsTombstones: after every batch of a stream of creates,
// updates, deletes and revivals (both merge modes, with folding), the
// index's tombstone count and each commit's Keys and Tombstones equal what
// the table holds, and an index built afresh from the table counts the
// same.
func TestKeyIndexCountsTombstones(t *testing.T) {
	for _, mode := range []MergeMode{CopyOnWrite, MergeOnRead} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			store := storage.NewLocal(t.TempDir())
			a := refApplier(t, store, mode)
			stream, _ := crashStream(300, 7)
			sawTombstones := false
			for from := 0; from < len(stream); from += 25 {
				to := min(from+25, len(stream))
				res, err := a.Apply(ctx, &Batch{Changes: stream[from:to], Read: to - from, Ranges: rng(int64(from), int64(to))})
				if err != nil {
					t.Fatal(err)
				}
				rows, _ := tableState(t, store)
				tombs := 0
				for _, r := range rows {
					if strings.HasSuffix(r, " true") {
						tombs++
					}
				}
				sawTombstones = sawTombstones || tombs > 0
				if res.Keys != len(rows) || res.Tombstones != tombs || a.index.Tombstones() != tombs {
					t.Fatalf("after offset %d: commit says %d keys, %d tombstones; index %d; the table holds %d rows, %d tombstones", to, res.Keys, res.Tombstones, a.index.Tombstones(), len(rows), tombs)
				}
				b := refApplier(t, store, mode)
				if b.index.Tombstones() != tombs || b.index.Len() != len(rows) {
					t.Fatalf("after offset %d: a rebuilt index counts %d keys, %d tombstones; the table holds %d, %d", to, b.index.Len(), b.index.Tombstones(), len(rows), tombs)
				}
			}
			if !sawTombstones {
				t.Fatal("the stream left no tombstone at any point: the test checked nothing")
			}
		})
	}
}

// blockFiles is genRowFiles's table with faults: file empty has no live
// rows, file dupAt ends with file 0's first key, reading file failAt
// fails, reading file slow takes 50 ms, active counts the reads under
// way, and onRead sees each file as it is read.
type blockFiles struct {
	genRowFiles
	empty, dupAt, failAt, slow int
	active                     *atomic.Int32
	onRead                     func(f int)
}

var errFileOnFire = errors.New("file on fire")

func (g blockFiles) ReadRows(ctx context.Context, add *delta.Add) ([]Row, error) {
	f, _ := strconv.Atoi(add.Path)
	if g.active != nil {
		g.active.Add(1)
		defer g.active.Add(-1)
	}
	if f == g.slow {
		time.Sleep(50 * time.Millisecond)
	}
	if g.onRead != nil {
		g.onRead(f)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch f {
	case g.failAt:
		return nil, errFileOnFire
	case g.empty:
		return nil, nil
	}
	rows, err := g.genRowFiles.ReadRows(ctx, add)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Deleted = i%5 == 0
	}
	if f == g.dupAt {
		rows[len(rows)-1].Values = []schema.Value{schema.Int(0), schema.String("dup")}
	}
	return rows, nil
}

// TestBuildKeyIndexInBlocks: the build reads files on one goroutine in
// blocks (lowered here to 7 rows, so files of 30 rows span five blocks)
// while it inserts on another. Every key ends with its sequence, deleted
// flag, file and row; a file without rows still counts in the progress;
// a key held twice across files is named with the second file; a file
// that fails to read or a cancelled context fails the build with its
// error, and the reading goroutine does not outlive the build.
func TestBuildKeyIndexInBlocks(t *testing.T) {
	defer func(n int) { blockRows = n }(blockRows)
	blockRows = 7
	ctx := context.Background()
	const files, perFile = 9, 30
	snap := genSnapshot(t, files)
	base := runtime.NumGoroutine()
	drained := func(what string) {
		t.Helper()
		for i := 0; runtime.NumGoroutine() > base; i++ {
			if i == 200 {
				t.Fatalf("%s: %d goroutines, %d before the build", what, runtime.NumGoroutine(), base)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	type step struct{ read, files, keys int }
	var steps []step
	rf := blockFiles{genRowFiles: genRowFiles{perFile: perFile}, empty: 4, dupAt: -1, failAt: -1, slow: -1}
	ix, err := buildKeyIndex(ctx, refLayout, snap, rf, func(read, n, keys int) { steps = append(steps, step{read, n, keys}) })
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != (files-1)*perFile {
		t.Fatalf("index holds %d keys, want %d", ix.Len(), (files-1)*perFile)
	}
	want := []step{{0, files, 0}}
	for f := range files {
		keys := want[f].keys + perFile
		if f == 4 {
			keys = want[f].keys
		}
		want = append(want, step{f + 1, files, keys})
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("progress %v, want %v", steps, want)
	}
	for f := range files {
		if f == 4 {
			continue
		}
		for i := range perFile {
			id := int64(f*perFile + i)
			e, ok := ix.lookup(EncodeKey([]schema.Value{schema.Int(id), schema.String("status")}, refLayout.Key))
			if !ok || !bytes.Equal(e.seq, pgSeq(uint64(id)+1)) || e.deleted != (i%5 == 0) || e.file != fileID(f) || e.row != int64(i) {
				t.Fatalf("file %d row %d: %+v %v", f, i, e, ok)
			}
		}
	}
	drained("a build")

	// The build fails at file 6's last row, when the reader is likely
	// reading file 7, slowly: the build returns only once it stopped.
	rf.dupAt, rf.slow, rf.active = 6, 7, new(atomic.Int32)
	if _, err := buildKeyIndex(ctx, refLayout, snap, rf, nil); err == nil || !strings.Contains(err.Error(), "id=0") || !strings.Contains(err.Error(), "more than one row (file 6)") {
		t.Fatalf("a key in files 0 and 6: %v", err)
	}
	if n := rf.active.Load(); n != 0 {
		t.Fatalf("a failed build returned with %d file reads under way", n)
	}
	rf.slow = -1
	drained("a duplicate key")

	rf.dupAt, rf.failAt = -1, 5
	if _, err := buildKeyIndex(ctx, refLayout, snap, rf, nil); !errors.Is(err, errFileOnFire) {
		t.Fatalf("file 5 failing: %v", err)
	}
	drained("a file failing")

	cctx, cancel := context.WithCancel(ctx)
	rf.failAt, rf.onRead = -1, func(f int) {
		if f == 3 {
			cancel()
		}
	}
	if _, err := buildKeyIndex(cctx, refLayout, snap, rf, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while reading file 3: %v", err)
	}
	drained("a cancelled build")
}
