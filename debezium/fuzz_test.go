package debezium

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// mapRegistry is an in-memory Registry for tests and fuzzing.
type mapRegistry map[int]string

func (m mapRegistry) SchemaText(_ context.Context, id int) (string, error) {
	if s, ok := m[id]; ok {
		return s, nil
	}
	return "", fmt.Errorf("get schema %d: %w", id, ErrUnknownSchema)
}

// checkDecode is the fuzz property: no panic (the fuzzer catches that),
// and every failure is a *Rejection naming the record's position.
func checkDecode(t *testing.T, d *Decoder, r *Record) {
	ch, err := d.Decode(context.Background(), r)
	if err == nil {
		if ch.Pos.Offset != r.Offset || ch.Pos.Topic != r.Topic {
			t.Fatalf("change position %+v for record at %d", ch.Pos, r.Offset)
		}
		if ch.Class == ClassChange {
			if !ch.Seq.Valid() {
				t.Fatalf("change without a sequence")
			}
			if back, err := ParseSequenceKey(ch.Seq.Key()); err != nil || back.Compare(ch.Seq) != 0 {
				t.Fatalf("sequence key round trip: %v", err)
			}
		}
		return
	}
	var rej *Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("error %T is not a *Rejection: %v", err, err)
	}
	if rej.Reason == "" || !strings.Contains(err.Error(), "fuzz.topic/5@4242") {
		t.Fatalf("rejection %q lacks reason or position", err)
	}
}

func fuzzRecord(key, value []byte) *Record {
	return &Record{Topic: "fuzz.topic", Partition: 5, Offset: 4242, Key: key, Value: value}
}

func jsonSeeds(f *testing.F) {
	r1, r2 := sampleRow(1), sampleRow(2)
	for _, ws := range []bool{true, false} {
		f.Add(pgKey(ws, 1), pgValue(ws, "", r1.json(), "c", pgSource(1, 2)))
		f.Add(pgKey(ws, 1), pgValue(ws, r1.json(), r2.json(), "u", pgSource(-1, 2)))
		f.Add(pgKey(ws, 1), pgValue(ws, `{"id":1}`, "", "d", pgSource(3, 4)))
		f.Add(pgKey(ws, 1), flatValue(ws, r1, "u", 7, false))
	}
	f.Add([]byte(nil), []byte(`{"status":"END","id":"1","event_count":2,"ts_ms":1}`))
	f.Add([]byte(nil), []byte(`{"ts_ms":1}`))
	f.Add([]byte(`{"id":1}`), []byte(`{"before":null,"after":{"id":1,"tags":["__debezium_unavailable_value"]},"source":{"lsn":1},"op":"u"}`))
	for _, s := range realSeeds(f, false) {
		f.Add(s.Key, s.Value)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	jsonSeeds(f)
	d := newPG(f)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		checkDecode(t, d, fuzzRecord(key, value))
	})
}

func FuzzDecodeFlattened(f *testing.F) {
	jsonSeeds(f)
	d := newPG(f, EnvelopeShape(EnvelopeFlattened))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		checkDecode(t, d, fuzzRecord(key, value))
	})
}

func FuzzDecodeAvro(f *testing.F) {
	r1, r2 := sampleRow(1), sampleRow(2)
	f.Add(avroKey(f, 1), avroValue(f, nil, &r1, "c", 1, 2))
	f.Add(avroKey(f, 2), avroValue(f, &r1, &r2, "u", -1, 3))
	f.Add(avroKey(f, 2), avroValue(f, &r2, nil, "d", 4, 5))
	reg := mapRegistry{avroValueID: avroEnvelopeSchema, avroKeyID: avroKeySchema}
	for _, run := range loadRealRuns(f) {
		for id, text := range run.schemas {
			reg[id] = text
		}
	}
	for _, s := range realSeeds(f, true) {
		f.Add(s.Key, s.Value)
	}
	d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(reg))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		checkDecode(t, d, fuzzRecord(key, value))
	})
}

func FuzzSequenceKey(f *testing.F) {
	f.Add([]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5})
	f.Add(Sequence{Connector: ConnectorFields, N: 2, Parts: [MaxParts]Part{{Kind: PartString, S: "a\x00b"}, IntPart(-3)}}.Key())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSequenceKey(b)
		if err != nil {
			if !errors.Is(err, ErrBadSequenceKey) {
				t.Fatalf("error %v is not ErrBadSequenceKey", err)
			}
			return
		}
		// The encoding is canonical: what decodes re-encodes to itself.
		if !bytes.Equal(s.Key(), b) {
			t.Fatalf("key %x decodes to %s which encodes to %x", b, s, s.Key())
		}
	})
}
