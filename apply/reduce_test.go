package apply

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/cdcapply/cdcapply/schema"
)

func seqBytes(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func chg(key string, seq uint64, off int64, del bool, vals ...schema.Value) *Change {
	return &Change{Key: key, Seq: seqBytes(seq), Pos: Position{"t", 0, off}, Delete: del, Values: vals}
}

var (
	una = schema.Unavailable
	str = schema.String
)

// TestReferenceCase is the worked example of the design brief applied to
// the reducer and resolver alone: the table ends (1,30,shipped,live),
// (2,25,new,deleted), (3,15,new,live) through a late batch and a replay.
func TestReferenceCase(t *testing.T) {
	table := map[string]*StoredRow{
		"1": {Seq: seqBytes(10), Values: []schema.Value{schema.Int(1), str("new")}},
		"2": {Seq: seqBytes(10), Values: []schema.Value{schema.Int(2), str("new")}},
	}
	first := []*Change{
		chg("1", 30, 0, false, schema.Int(1), str("shipped")),
		chg("1", 20, 1, false, schema.Int(1), str("paid")),
		chg("2", 25, 2, true, schema.Int(2), una),
		chg("3", 15, 3, false, schema.Int(3), str("new")),
	}
	late := []*Change{
		chg("1", 22, 4, false, schema.Int(1), str("paid-late")),
		chg("2", 12, 5, false, schema.Int(2), str("resurrected")),
	}
	kinds := map[RowKind]int{}
	for _, batch := range [][]*Change{first, late, first} {
		for _, r := range Reduce(batch) {
			kind, vals, _ := r.Resolve(table[r.Winner.Key])
			kinds[kind]++
			if kind != RowStale {
				table[r.Winner.Key] = &StoredRow{Seq: r.Winner.Seq, Deleted: r.Winner.Delete, Values: vals}
			}
		}
	}
	want := map[string]string{"1": "30 shipped false", "2": "25 new true", "3": "15 new false"}
	for k, w := range want {
		row := table[k]
		got := fmt.Sprintf("%d %s %v", binary.BigEndian.Uint64(row.Seq), row.Values[1].S, row.Deleted)
		if got != w {
			t.Errorf("key %s = %q, want %q", k, got, w)
		}
	}
	if kinds[RowStale] != 5 || kinds[RowUpdate] != 1 || kinds[RowDelete] != 1 || kinds[RowInsert] != 1 {
		t.Errorf("row kinds %v, want 5 stale (2 late + 3 replayed keys), 1 update, 1 delete, 1 insert", kinds)
	}
}

// TestUnavailableFoldsFromNewestOlderVersion covers rule 5: the placeholder
// takes the value of the newest older version, whether in the batch or the
// table, and a re-delivered old change in the batch loses to the table.
func TestUnavailableFoldsFromNewestOlderVersion(t *testing.T) {
	stored := &StoredRow{Seq: seqBytes(10), Values: []schema.Value{schema.Int(1), str("toast@10")}}
	cases := []struct {
		name  string
		batch []*Change
		want  string
	}{
		{"from table", []*Change{chg("1", 30, 0, false, schema.Int(1), una)}, "toast@10"},
		{"from batch, newer than table", []*Change{
			chg("1", 30, 0, false, schema.Int(1), una),
			chg("1", 20, 1, false, schema.Int(1), str("toast@20")),
		}, "toast@20"},
		{"replayed old change loses to table", []*Change{
			chg("1", 30, 0, false, schema.Int(1), una),
			chg("1", 5, 1, false, schema.Int(1), str("toast@5")),
		}, "toast@10"},
		{"skips an older unavailable", []*Change{
			chg("1", 30, 0, false, schema.Int(1), una),
			chg("1", 25, 1, false, schema.Int(1), una),
			chg("1", 20, 2, false, schema.Int(1), str("toast@20")),
		}, "toast@20"},
		{"delete keeps last values", []*Change{chg("1", 40, 0, true, schema.Int(1), una)}, "toast@10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := Reduce(tc.batch)
			if len(rs) != 1 {
				t.Fatalf("%d keys", len(rs))
			}
			_, vals, unresolved := rs[0].Resolve(stored)
			if vals[1].S != tc.want || vals[1].IsUnavailable() || unresolved != 0 {
				t.Errorf("got %v (unresolved %d), want %q", vals[1], unresolved, tc.want)
			}
		})
	}
	// Nothing older anywhere: NULL, counted, never the placeholder.
	rs := Reduce([]*Change{chg("9", 1, 0, false, schema.Int(9), una)})
	kind, vals, unresolved := rs[0].Resolve(nil)
	if kind != RowInsert || !vals[1].IsNull() || unresolved != 1 {
		t.Errorf("unknown key with unavailable column: %v %v %d", kind, vals, unresolved)
	}
}

func TestTieBreakByPosition(t *testing.T) {
	a := chg("k", 7, 1, false, schema.Int(1), str("first"))
	b := chg("k", 7, 2, false, schema.Int(1), str("second"))
	for _, batch := range [][]*Change{{a, b}, {b, a}} {
		if w := Reduce(batch)[0].Winner; w != b {
			t.Fatalf("equal sequences: the later offset must win whatever the arrival order, got %v", w.Values[1])
		}
	}
}

// TestReduceMatchesSequentialTruth is the property test of the reducer: a
// random source history, delivered in random batches (shuffled within a
// batch, with duplicates and replays of earlier batches, deletes of unknown
// keys, revivals and unavailable columns), ends equal to the source state
// computed change by change in sequence order.
//
// Kafka keeps one key's changes in order within a partition and Debezium
// only re-sends what it already sent, so a key's first deliveries arrive in
// sequence order across batches; within a batch anything goes.
func TestReduceMatchesSequentialTruth(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7919))
		nKeys := 1 + rng.IntN(12)
		var seq uint64
		type ev = *Change
		hist := make([][]ev, nKeys)
		var offset int64
		for k := range hist {
			key := fmt.Sprint(k)
			n := 1 + rng.IntN(8)
			live := false
			for i := 0; i < n; i++ {
				seq += 1 + uint64(rng.IntN(3))
				offset++
				del := rng.IntN(4) == 0
				status := str(fmt.Sprintf("s%d", seq))
				toast := str(fmt.Sprintf("t%d", seq))
				if live && rng.IntN(2) == 0 {
					toast = una // unchanged TOASTed column
				}
				if del {
					status, toast = una, una
				}
				hist[k] = append(hist[k], chg(key, seq, offset, del, schema.Int(int64(k)), status, toast))
				live = !del
			}
		}
		// Truth: apply each key's history in order.
		truth := map[string]*StoredRow{}
		for _, h := range hist {
			for _, c := range h {
				prev := truth[c.Key]
				vals := make([]schema.Value, len(c.Values))
				for i, v := range c.Values {
					switch {
					case !v.IsUnavailable():
						vals[i] = v
					case prev != nil:
						vals[i] = prev.Values[i]
					default:
						vals[i] = schema.Null
					}
				}
				truth[c.Key] = &StoredRow{Seq: c.Seq, Deleted: c.Delete, Values: vals}
			}
		}
		// Delivery: interleave histories keeping per-key order, cut into batches.
		var stream []ev
		idx := make([]int, nKeys)
		for remaining := int(offset); remaining > 0; remaining-- {
			for {
				k := rng.IntN(nKeys)
				if idx[k] < len(hist[k]) {
					stream = append(stream, hist[k][idx[k]])
					idx[k]++
					break
				}
			}
		}
		table := map[string]*StoredRow{}
		var delivered []ev
		for len(stream) > 0 {
			n := 1 + rng.IntN(6)
			if n > len(stream) {
				n = len(stream)
			}
			batch := append([]ev(nil), stream[:n]...)
			stream = stream[n:]
			for i := rng.IntN(3); i > 0 && len(delivered) > 0; i-- { // replays
				batch = append(batch, delivered[rng.IntN(len(delivered))])
			}
			if rng.IntN(3) == 0 { // duplicate inside the batch
				batch = append(batch, batch[rng.IntN(len(batch))])
			}
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			delivered = append(delivered, batch...)
			for _, r := range Reduce(batch) {
				kind, vals, _ := r.Resolve(table[r.Winner.Key])
				if kind != RowStale {
					table[r.Winner.Key] = &StoredRow{Seq: r.Winner.Seq, Deleted: r.Winner.Delete, Values: vals}
				}
			}
		}
		if len(table) != len(truth) {
			t.Fatalf("seed %d: %d keys in table, %d in truth", seed, len(table), len(truth))
		}
		for k, want := range truth {
			got := table[k]
			if got == nil || string(got.Seq) != string(want.Seq) || got.Deleted != want.Deleted {
				t.Fatalf("seed %d key %s: got %+v want %+v", seed, k, got, want)
			}
			for i := range want.Values {
				if !got.Values[i].Equal(want.Values[i]) {
					t.Fatalf("seed %d key %s col %d: got %v want %v", seed, k, i, got.Values[i], want.Values[i])
				}
			}
		}
	}
}

// TestReduceShards: a batch large enough to be reduced on several
// goroutines (shards by key hash, merged by key) reduces exactly as on
// one: same keys in the same order, same winners, fills and changes.
func TestReduceShards(t *testing.T) {
	for _, procs := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			rng := rand.New(rand.NewPCG(uint64(procs), 11))
			batch := make([]*Change, 0, 5*reduceShardMin)
			for i := range cap(batch) {
				k := rng.IntN(3000)
				status, toast := str(fmt.Sprintf("s%d", i)), str(fmt.Sprintf("t%d", i))
				if rng.IntN(3) == 0 {
					toast = una
				}
				del := rng.IntN(10) == 0
				if del {
					status, toast = una, una
				}
				batch = append(batch, chg(fmt.Sprint(k), uint64(1+rng.IntN(100_000)), int64(i), del, schema.Int(int64(k)), status, toast))
				if rng.IntN(20) == 0 { // a replay
					batch = append(batch, batch[rng.IntN(len(batch))])
				}
			}
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			want := reduceShard(batch)
			got := Reduce(batch)
			if len(got) != len(want) {
				t.Fatalf("%d keys, want %d", len(got), len(want))
			}
			// The same batch with its unavailable columns noted as
			// Project notes them (some changes only: a change from
			// elsewhere is scanned) reduces to the same outcome.
			noted := make([]*Change, len(batch))
			copies := map[*Change]*Change{}
			for i, c := range batch {
				if copies[c] == nil {
					cp := *c
					if rng.IntN(4) != 0 {
						cp.unavail = noteUnavailable(cp.Values)
					}
					copies[c] = &cp
				}
				noted[i] = copies[c]
			}
			for i, r := range Reduce(noted) {
				if r.Winner.Key != want[i].Winner.Key || !bytes.Equal(r.Winner.Seq, want[i].Winner.Seq) || r.Winner.Pos != want[i].Winner.Pos ||
					r.unavail != want[i].unavail || len(r.Changes) != len(want[i].Changes) || !reflect.DeepEqual(r.Fills, want[i].Fills) {
					t.Fatalf("key %s noted by Project: winner %v %v, unavailable %b, fills %v; unnoted: %v %v, %b, %v", r.Winner.Key,
						r.Winner.Seq, r.Winner.Pos, r.unavail, r.Fills, want[i].Winner.Seq, want[i].Winner.Pos, want[i].unavail, want[i].Fills)
				}
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("key %d: %s won by %v, want %s won by %v", i, got[i].Winner.Key, got[i].Winner.Seq, want[i].Winner.Key, want[i].Winner.Seq)
				}
				// The columns noted while reducing are the winner's
				// unavailable ones (as a scan of its values finds).
				scan := (&Reduced{Winner: got[i].Winner}).unavailableColumns()
				if noted := got[i].unavailableColumns(); got[i].unavail == 0 || !slices.Equal(noted, scan) {
					t.Fatalf("key %s: unavailable columns noted %v (%b), the winner's are %v", got[i].Winner.Key, noted, got[i].unavail, scan)
				}
			}
		})
	}
}

// TestReduceNotesUnavailableColumns: Reduce notes which columns a winner
// left unavailable; a column past the last it can note makes the list
// come from a scan, with the same answer, and Resolve still folds it.
func TestReduceNotesUnavailableColumns(t *testing.T) {
	for _, width := range []int{3, maxNotedColumn + 1, 70} {
		vals := make([]schema.Value, width)
		for i := range vals {
			vals[i] = schema.Int(int64(i))
		}
		vals[1], vals[width-1] = una, una
		old := append([]schema.Value(nil), vals...)
		old[width-1] = str("prev")
		rs := Reduce([]*Change{chg("k", 2, 2, false, vals...), chg("k", 1, 1, false, old...)})
		if len(rs) != 1 {
			t.Fatalf("width %d: %d keys", width, len(rs))
		}
		r := rs[0]
		if noted := r.unavail != 0; noted != (width-1 <= maxNotedColumn) {
			t.Errorf("width %d: noted %v (%b)", width, noted, r.unavail)
		}
		if got := r.unavailableColumns(); !slices.Equal(got, []int{1, width - 1}) {
			t.Errorf("width %d: unavailable columns %v, want [1 %d]", width, got, width-1)
		}
		_, values, unresolved := r.Resolve(nil)
		if !values[width-1].Equal(str("prev")) || !values[1].IsNull() || unresolved != 1 {
			t.Errorf("width %d: resolved %v and %v (%d unresolved), want prev and NULL (1)", width, values[width-1], values[1], unresolved)
		}
	}
}

// TestReduceKeyOrder: Reduce's keys come out in strictly increasing byte
// order, each with every change of its key oldest first, for keys that
// share long prefixes, hold zero bytes, are prefixes of one another or
// are empty, and for integer keys encoded as the engine encodes them.
func TestReduceKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	alphabet := []byte{0, 1, 'a', 'b', 0xff}
	var batch []*Change
	for i := range 3 * reduceShardMin {
		var key string
		if i%2 == 0 {
			b := make([]byte, rng.IntN(20))
			for j := range b {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			}
			if rng.IntN(4) == 0 { // a long shared prefix
				b = append([]byte("customer-000000-"), b...)
			}
			key = string(b)
		} else {
			key = EncodeKey([]schema.Value{schema.Int(rng.Int64N(1<<20) - 1<<19)}, []int{0})
		}
		batch = append(batch, chg(key, uint64(rng.IntN(1000)), int64(i), false, schema.Int(int64(i))))
	}
	count := map[string]int{}
	for _, c := range batch {
		count[c.Key]++
	}
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			out := Reduce(batch)
			if len(out) != len(count) {
				t.Fatalf("%d keys, want %d", len(out), len(count))
			}
			for i, r := range out {
				if i > 0 && out[i-1].Winner.Key >= r.Winner.Key {
					t.Fatalf("key %d %q after %q", i, r.Winner.Key, out[i-1].Winner.Key)
				}
				if len(r.Changes) != count[r.Winner.Key] {
					t.Fatalf("key %q: %d changes, want %d", r.Winner.Key, len(r.Changes), count[r.Winner.Key])
				}
				for j, c := range r.Changes {
					if c.Key != r.Winner.Key || j > 0 && !c.newer(r.Changes[j-1]) {
						t.Fatalf("key %q: change %d (%q) out of place", r.Winner.Key, j, c.Key)
					}
				}
				if r.Winner != r.Changes[len(r.Changes)-1] {
					t.Fatalf("key %q: the winner is not the newest change", r.Winner.Key)
				}
			}
		})
	}
}
