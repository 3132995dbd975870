package apply

import (
	"bytes"
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
