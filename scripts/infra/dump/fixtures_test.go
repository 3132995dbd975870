package main

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/linkedin/goavro/v2"
)

// TestRecordedAvroIsConfluentWireFormat checks the committed Avro fixtures
// as a consumer would: every non-null key and value starts with magic byte
// 0 and a schema id that schemas.json (what the registry answered) holds, and
// the rest decodes with that schema to the last byte.
func TestRecordedAvroIsConfluentWireFormat(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "debezium", "testdata", "real", "postgres-avro")
	raw, err := os.ReadFile(filepath.Join(dir, "schemas.json"))
	if err != nil {
		t.Skipf("no recorded Avro fixtures: %v", err)
	}
	var schemas map[string]string
	if err := json.Unmarshal(raw, &schemas); err != nil {
		t.Fatal(err)
	}
	codecs := map[uint32]*goavro.Codec{}
	for id, s := range schemas {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			t.Fatalf("schema id %q: %v", id, err)
		}
		c, err := goavro.NewCodec(s)
		if err != nil {
			t.Fatalf("schema %s: %v", id, err)
		}
		codecs[uint32(n)] = c
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no topic files in %s: %v", dir, err)
	}
	decoded := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, p := range []*string{l.KeyB64, l.ValueB64} {
				if p == nil {
					continue
				}
				b, err := base64.StdEncoding.DecodeString(*p)
				if err != nil {
					t.Fatalf("%s@%d: %v", l.Topic, l.Offset, err)
				}
				if len(b) < 5 || b[0] != 0 {
					t.Fatalf("%s@%d: not Confluent wire format: % x", l.Topic, l.Offset, b[:min(len(b), 8)])
				}
				id := binary.BigEndian.Uint32(b[1:5])
				c := codecs[id]
				if c == nil {
					t.Fatalf("%s@%d: schema id %d not in schemas.json", l.Topic, l.Offset, id)
				}
				if _, rest, err := c.NativeFromBinary(b[5:]); err != nil || len(rest) != 0 {
					t.Fatalf("%s@%d: decode with schema %d: %v (%d bytes left)", l.Topic, l.Offset, id, err, len(rest))
				}
				decoded++
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if decoded == 0 {
		t.Fatal("no Avro payloads found")
	}
	t.Logf("decoded %d Avro keys and values", decoded)
}
