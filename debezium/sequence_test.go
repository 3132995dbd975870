package debezium

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// seqOf decodes a minimal change whose source block is src and returns its
// sequence (or the rejection).
func seqOf(t *testing.T, d *Decoder, src string) (Sequence, error) {
	t.Helper()
	v := fmt.Sprintf(`{"before":null,"after":{"id":1},"source":%s,"op":"u","ts_ms":1}`, src)
	ch, err := d.Decode(context.Background(), rec("t", 1, []byte(`{"id":1}`), []byte(v)))
	return ch.Seq, err
}

func connectorDecoder(t *testing.T, opts ...Option) *Decoder {
	t.Helper()
	d, err := New(append([]Option{TableSchema("", customersDelta)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkOrder asserts that the sources, decoded, are strictly increasing by
// Compare and by Key bytes, and that keys decode back.
func checkOrder(t *testing.T, d *Decoder, sources []string) {
	t.Helper()
	var prev Sequence
	for i, src := range sources {
		s, err := seqOf(t, d, src)
		if err != nil {
			t.Fatalf("source %d %s: %v", i, src, err)
		}
		back, err := ParseSequenceKey(s.Key())
		if err != nil || back.Compare(s) != 0 {
			t.Fatalf("key round trip of %s: %s %v", s, back, err)
		}
		if i > 0 {
			if c := prev.Compare(s); c >= 0 {
				t.Errorf("%s !< %s (Compare %d)", prev, s, c)
			}
			if c := bytes.Compare(prev.Key(), s.Key()); c >= 0 {
				t.Errorf("key(%s) !< key(%s)", prev, s)
			}
		}
		prev = s
	}
}

func TestPostgresSequenceOrder(t *testing.T) {
	d := connectorDecoder(t, SourceConnector(ConnectorPostgres))
	checkOrder(t, d, []string{
		// Snapshot reads: no commit seen yet, lastCommitLsn null sorts lowest
		// even when the lsn is high.
		`{"sequence":"[null,\"900\"]","lsn":900}`,
		`{"sequence":"[null,\"901\"]","lsn":901}`,
		// Interleaved transactions: B's event has a lower lsn than A's
		// but B committed later, so it orders after.
		`{"sequence":"[\"1000\",\"1100\"]","lsn":1100}`,
		`{"sequence":"[\"1000\",\"1200\"]","lsn":1200}`,
		`{"sequence":"[\"1300\",\"1050\"]","lsn":1050}`,
		// LSN text beyond 32 bits and in X/X form.
		`{"sequence":"[\"1/0\",\"1/10\"]","lsn":4294967312}`,
		`{"sequence":"[\"18446744073709551615\",\"18446744073709551615\"]"}`,
	})
	// Without source.sequence the lsn alone orders, as (null, lsn).
	checkOrder(t, d, []string{`{"lsn":5}`, `{"lsn":6}`, `{"lsn":1000000000000}`})
	for _, src := range []string{`{"lsn":null}`, `{}`, `{"sequence":null}`, `{"sequence":"[\"5\",null]"}`} {
		if _, err := seqOf(t, d, src); !isReason(err, ReasonNullSequence) {
			t.Errorf("%s: %v, want null_sequence", src, err)
		}
	}
	for _, src := range []string{`{"sequence":"[\"5\"]"}`, `{"sequence":"nope"}`, `{"lsn":-1}`, `{"sequence":"[\"-5\",\"6\"]"}`} {
		if _, err := seqOf(t, d, src); !isReason(err, ReasonBadSequence) {
			t.Errorf("%s: %v, want bad_sequence", src, err)
		}
	}
}

func isReason(err error, r Reason) bool {
	var rej *Rejection
	return errors.As(err, &rej) && rej.Reason == r
}

func TestMySQLSequenceOrder(t *testing.T) {
	d := connectorDecoder(t, SourceConnector(ConnectorMySQL))
	checkOrder(t, d, []string{
		`{"file":"mysql-bin.000009","pos":900,"row":0}`,
		`{"file":"mysql-bin.000009","pos":900,"row":1}`,
		`{"file":"mysql-bin.000009","pos":154000,"row":0}`,
		// Rollover: the next file restarts positions low but orders after.
		`{"file":"mysql-bin.000010","pos":4,"row":0}`,
		// Past six digits the name as text would sort 1000000 < 999999.
		`{"file":"mysql-bin.999999","pos":4}`,
		`{"file":"mysql-bin.1000000","pos":4}`,
	})
	for _, src := range []string{`{"pos":4}`, `{"file":null,"pos":4}`, `{"file":"mysql-bin.000001"}`} {
		if _, err := seqOf(t, d, src); !isReason(err, ReasonNullSequence) {
			t.Errorf("%s: %v, want null_sequence", src, err)
		}
	}
	if _, err := seqOf(t, d, `{"file":"mysql-bin","pos":4}`); !isReason(err, ReasonBadSequence) {
		t.Errorf("file without index: %v", err)
	}
}

func TestSQLServerSequenceOrder(t *testing.T) {
	d := connectorDecoder(t, SourceConnector(ConnectorSQLServer))
	checkOrder(t, d, []string{
		// Snapshot: change_lsn and event_serial_no null.
		`{"commit_lsn":"0000002b:00000c70:0003","change_lsn":null,"event_serial_no":null}`,
		`{"commit_lsn":"0000002b:00000c70:0003","change_lsn":"0000002b:00000c68:0002","event_serial_no":1}`,
		`{"commit_lsn":"0000002b:00000c70:0003","change_lsn":"0000002b:00000c68:0002","event_serial_no":2}`,
		`{"commit_lsn":"0000002b:00000c70:0003","change_lsn":"0000002b:00000c6a:0001","event_serial_no":1}`,
		// Hex compares as numbers: 0000000a > 00000009 and "c" > "9".
		`{"commit_lsn":"0000002b:00000c70:000a","change_lsn":"0000002b:00000c70:0009","event_serial_no":1}`,
		`{"commit_lsn":"0000002c:00000000:0001","change_lsn":"0000002c:00000000:0001","event_serial_no":1}`,
	})
	if _, err := seqOf(t, d, `{"change_lsn":"0000002b:00000c70:0003"}`); !isReason(err, ReasonNullSequence) {
		t.Errorf("no commit_lsn: %v", err)
	}
	if _, err := seqOf(t, d, `{"commit_lsn":"2b:c70"}`); !isReason(err, ReasonBadSequence) {
		t.Errorf("bad lsn: %v", err)
	}
}

func TestMongoDBSequenceOrder(t *testing.T) {
	d := connectorDecoder(t, SourceConnector(ConnectorMongoDB))
	checkOrder(t, d, []string{
		`{"ts_ms":1700000000000,"ord":1}`,
		`{"ts_ms":1700000000000,"ord":2}`,
		`{"ts_ms":1700000000000,"ord":10}`,
		`{"ts_sec":1700000001,"ord":1}`,
		`{"ts_ms":1700000002000,"ord":1,"txnNumber":5,"lsid":"abc"}`,
	})
	if _, err := seqOf(t, d, `{"ts_ms":1}`); !isReason(err, ReasonNullSequence) {
		t.Errorf("no ord: %v", err)
	}
}

func TestOracleSequenceOrder(t *testing.T) {
	d := connectorDecoder(t, SourceConnector(ConnectorOracle))
	checkOrder(t, d, []string{
		// Snapshot: no commit_scn.
		`{"scn":"2000","commit_scn":null}`,
		`{"scn":"1900","commit_scn":"2100","ssn":0}`,
		`{"scn":"1900","commit_scn":"2100","ssn":1}`,
		`{"scn":"2050","commit_scn":"2100","ssn":0}`,
		// SCNs are strings; numeric order, not text order ("10000" < "9999" as text).
		`{"scn":"9999","commit_scn":"9999"}`,
		`{"scn":"10000","commit_scn":"10000"}`,
		`{"scn":"18446744073709551615","commit_scn":"18446744073709551615"}`,
	})
	if _, err := seqOf(t, d, `{"commit_scn":"5"}`); !isReason(err, ReasonNullSequence) {
		t.Errorf("no scn: %v", err)
	}
	if _, err := seqOf(t, d, `{"scn":"12x"}`); !isReason(err, ReasonBadSequence) {
		t.Errorf("bad scn: %v", err)
	}
}

func TestFieldSequenceOrder(t *testing.T) {
	f1, _ := ParseSequenceField("source.ts_ms:int")
	f2, _ := ParseSequenceField("source.gtid:string")
	f3, _ := ParseSequenceField("after.id:int")
	d := connectorDecoder(t, SequenceFields(f1, f2, f3))
	checkOrder(t, d, []string{
		`{"ts_ms":-5,"gtid":"a"}`,
		`{"ts_ms":1,"gtid":""}`,
		`{"ts_ms":1,"gtid":"a"}`,
		`{"ts_ms":1,"gtid":"a\u0000"}`,
		`{"ts_ms":1,"gtid":"ab"}`,
		`{"ts_ms":2,"gtid":"a"}`,
	})
	if _, err := seqOf(t, d, `{"ts_ms":1}`); !isReason(err, ReasonNullSequence) {
		t.Errorf("missing gtid: %v", err)
	}
	lsn, _ := ParseSequenceField("source.lsn:lsn")
	d = connectorDecoder(t, SequenceFields(lsn))
	checkOrder(t, d, []string{`{"lsn":"0/FF"}`, `{"lsn":256}`, `{"lsn":"1/0"}`})
	for _, bad := range []string{"x", "a:", ":int", "a:float"} {
		if _, err := ParseSequenceField(bad); err == nil {
			t.Errorf("ParseSequenceField(%q) accepted", bad)
		}
	}
}

// TestKeyOrderMatchesCompare checks, on random tuples of every part kind,
// that byte order of Key equals Compare, and that keys decode back.
func TestKeyOrderMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\x00", "\x00\x00", "\xff"}
	gen := func() Sequence {
		s := Sequence{Connector: Connector(1 + rng.IntN(2))}
		n := rng.IntN(MaxParts + 1)
		for range n {
			var p Part
			switch rng.IntN(4) {
			case 0:
				p.Kind = PartNull
			case 1:
				p = Part{Kind: PartUint, U: []uint64{0, 1, 255, 256, 1 << 63, ^uint64(0)}[rng.IntN(6)]}
			case 2:
				p = IntPart([]int64{-1 << 63, -256, -1, 0, 1, 1<<63 - 1}[rng.IntN(6)])
			case 3:
				p = Part{Kind: PartString, S: strs[rng.IntN(len(strs))]}
			}
			s.add(p)
		}
		return s
	}
	seqs := make([]Sequence, 3000)
	for i := range seqs {
		seqs[i] = gen()
	}
	for i := 1; i < len(seqs); i++ {
		a, b := seqs[i-1], seqs[i]
		if c, k := a.Compare(b), bytes.Compare(a.Key(), b.Key()); c != k {
			t.Fatalf("Compare(%s, %s) = %d but key order %d", a, b, c, k)
		}
		back, err := ParseSequenceKey(a.Key())
		if err != nil || back != a {
			t.Fatalf("round trip %s -> %s %v", a, back, err)
		}
	}
	// Sorting by Compare and by Key gives the same order.
	byCmp := slices.Clone(seqs)
	slices.SortStableFunc(byCmp, Sequence.Compare)
	byKey := slices.Clone(seqs)
	slices.SortStableFunc(byKey, func(a, b Sequence) int { return bytes.Compare(a.Key(), b.Key()) })
	for i := range byCmp {
		if byCmp[i].Compare(byKey[i]) != 0 {
			t.Fatalf("sort orders differ at %d: %s vs %s", i, byCmp[i], byKey[i])
		}
	}
	for _, bad := range [][]byte{nil, {0}, {1, 1, 0}, {1, 3, 'a'}, {1, 9}, {1, 3, 'a', 0, 7}} {
		if _, err := ParseSequenceKey(bad); !errors.Is(err, ErrBadSequenceKey) {
			t.Errorf("ParseSequenceKey(%v) = %v", bad, err)
		}
	}
}

func TestLSNText(t *testing.T) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		v, err := ParseLSN(s)
		if err != nil || FormatLSN(v) != s {
			t.Errorf("%s -> %d -> %s (%v)", s, v, FormatLSN(v), err)
		}
	}
	if v, _ := ParseLSN("16/B374D848"); v != 0x16B374D848 {
		t.Errorf("lsn value %x", v)
	}
	if _, err := ParseLSN("1/2/3"); err == nil || !strings.Contains(err.Error(), "parse lsn") {
		t.Errorf("bad lsn: %v", err)
	}
}
