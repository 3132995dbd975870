package refbench

import (
	"math/big"
	"os"
	"testing"

	gojson "github.com/goccy/go-json"
	"github.com/hamba/avro/v2"
)

type jsonRow struct {
	ID        int32     `json:"id"`
	Name      *string   `json:"name"`
	Price     []byte    `json:"price"`
	CreatedAt *int64    `json:"created_at"`
	UpdatedAt *string   `json:"updated_at"`
	Birthday  *int32    `json:"birthday"`
	Active    *bool     `json:"active"`
	Payload   []byte    `json:"payload"`
	Score     *float64  `json:"score"`
	Tags      []*string `json:"tags"`
}

type jsonSource struct {
	Version   string  `json:"version"`
	Connector string  `json:"connector"`
	Name      string  `json:"name"`
	TsMs      int64   `json:"ts_ms"`
	Snapshot  *string `json:"snapshot"`
	DB        string  `json:"db"`
	Sequence  *string `json:"sequence"`
	Schema    string  `json:"schema"`
	Table     string  `json:"table"`
	TxID      *int64  `json:"txId"`
	Lsn       *int64  `json:"lsn"`
	Xmin      *int64  `json:"xmin"`
}

type jsonEnvelope struct {
	Before      *jsonRow   `json:"before"`
	After       *jsonRow   `json:"after"`
	Source      jsonSource `json:"source"`
	Op          string     `json:"op"`
	TsMs        *int64     `json:"ts_ms"`
	Transaction *struct {
		ID string `json:"id"`
	} `json:"transaction"`
}

type jsonInline struct {
	Schema  gojson.RawMessage `json:"schema"`
	Payload jsonEnvelope      `json:"payload"`
}

type flatRow struct {
	jsonRow
	Op         string `json:"__op"`
	Lsn        int64  `json:"__lsn"`
	SourceTsMs int64  `json:"__source_ts_ms"`
	Deleted    string `json:"__deleted"`
}

type avroRow struct {
	ID        int32     `avro:"id"`
	Name      *string   `avro:"name"`
	Price     *big.Rat  `avro:"price"`
	CreatedAt *int64    `avro:"created_at"`
	UpdatedAt *string   `avro:"updated_at"`
	Birthday  *int32    `avro:"birthday"`
	Active    *bool     `avro:"active"`
	Payload   []byte    `avro:"payload"`
	Score     *float64  `avro:"score"`
	Tags      []*string `avro:"tags"`
}

type avroSource struct {
	Version   string  `avro:"version"`
	Connector string  `avro:"connector"`
	Name      string  `avro:"name"`
	TsMs      int64   `avro:"ts_ms"`
	Snapshot  *string `avro:"snapshot"`
	DB        string  `avro:"db"`
	Sequence  *string `avro:"sequence"`
	Schema    string  `avro:"schema"`
	Table     string  `avro:"table"`
	TxID      *int64  `avro:"txId"`
	Lsn       *int64  `avro:"lsn"`
	Xmin      *int64  `avro:"xmin"`
}

type avroTx struct {
	ID                  string `avro:"id"`
	TotalOrder          int64  `avro:"total_order"`
	DataCollectionOrder int64  `avro:"data_collection_order"`
}

type avroEnvelope struct {
	Before      *avroRow   `avro:"before"`
	After       *avroRow   `avro:"after"`
	Source      avroSource `avro:"source"`
	Op          string     `avro:"op"`
	TsMs        *int64     `avro:"ts_ms"`
	Transaction *avroTx    `avro:"transaction"`
}

func read(b *testing.B, name string) []byte {
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func run(b *testing.B, data []byte, decode func() error) {
	if err := decode(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := decode(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkGoccyJSONNoSchema(b *testing.B) {
	data := read(b, "json-noschema.json")
	run(b, data, func() error {
		var e jsonEnvelope
		if err := gojson.Unmarshal(data, &e); err != nil {
			return err
		}
		if e.After == nil || e.Op != "u" {
			b.Fatal("decoded nothing")
		}
		return nil
	})
}

func BenchmarkGoccyJSONInlineSchema(b *testing.B) {
	data := read(b, "json-inline.json")
	run(b, data, func() error {
		var e jsonInline
		if err := gojson.Unmarshal(data, &e); err != nil {
			return err
		}
		if e.Payload.After == nil {
			b.Fatal("decoded nothing")
		}
		return nil
	})
}

func BenchmarkGoccyFlattened(b *testing.B) {
	data := read(b, "flattened.json")
	run(b, data, func() error {
		var r flatRow
		if err := gojson.Unmarshal(data, &r); err != nil {
			return err
		}
		if r.Op != "u" {
			b.Fatal("decoded nothing")
		}
		return nil
	})
}

func BenchmarkHambaAvro(b *testing.B) {
	data := read(b, "value.avro")
	sch, err := avro.Parse(string(read(b, "envelope.avsc")))
	if err != nil {
		b.Fatal(err)
	}
	run(b, data, func() error {
		var e avroEnvelope
		if err := avro.Unmarshal(sch, data, &e); err != nil {
			return err
		}
		if e.After == nil || e.Op != "u" {
			b.Fatal("decoded nothing")
		}
		return nil
	})
}
