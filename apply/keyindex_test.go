package apply

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestKeyIndexGrowsPastOneMillion inserts keys one by one past the sizes
// where the arena stops doubling and grows by a quarter and the entries
// go on in a second chunk: every key keeps its sequence, deleted flag,
// file and row, and less than a chunk of entries is spare.
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
	for i := 0; i < n; i += 997 {
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
