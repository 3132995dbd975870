package apply

import (
	"bytes"
	"testing"
)

// TestKeyIndexGrowsPastOneMillion inserts keys one by one past the sizes
// where the entries and arena stop doubling and grow by a quarter: every
// key keeps its sequence, deleted flag, file and row, and the growth
// leaves no more than a quarter of spare entries.
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
	if spare := cap(ix.entries) - len(ix.entries); spare > len(ix.entries)/4+1 {
		t.Errorf("entries capacity %d for %d keys: grew by more than a quarter past 1M", cap(ix.entries), len(ix.entries))
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
