package debezium

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcapply/cdcapply/schema"
	"github.com/linkedin/goavro/v2"
)

// The decode benchmarks measure one core decoding the 10-column row of
// fixture_test.go (an update with before and after images) in each value
// form, reporting events/s. Run with -cpu 1:
//
//	go test ./debezium -run '^$' -bench 'Decode' -cpu 1 -benchtime 2s

func benchDecode(b *testing.B, d *Decoder, r *Record) {
	ctx := context.Background()
	if _, err := d.Decode(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(r.Value) + len(r.Key)))
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := d.Decode(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, cpu0)
}

// reportRates reports events/s by wall time and, where the platform tells
// process CPU time, cpu-events/s: events per second of CPU actually used,
// which on a shared machine is the per-core figure (wall time includes
// waiting for a core).
func reportRates(b *testing.B, cpu0 int64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if cpu1 := processCPU(); cpu0 >= 0 && cpu1 > cpu0 {
		b.ReportMetric(float64(b.N)/(float64(cpu1-cpu0)/1e9), "cpu-events/s")
	}
}

func benchRows() (row, row) { return sampleRow(41), sampleRow(42) }

func BenchmarkDecodeJSONInlineSchema(b *testing.B) {
	r1, r2 := benchRows()
	benchDecode(b, newPG(b), rec("dbserver1.public.customers", 1, pgKey(true, 42), pgValue(true, r1.json(), r2.json(), "u", pgSource(100, 120))))
}

func BenchmarkDecodeJSONNoSchema(b *testing.B) {
	r1, r2 := benchRows()
	benchDecode(b, newPG(b), rec("dbserver1.public.customers", 1, pgKey(false, 42), pgValue(false, r1.json(), r2.json(), "u", pgSource(100, 120))))
}

func BenchmarkDecodeFlattened(b *testing.B) {
	_, r2 := benchRows()
	benchDecode(b, newPG(b, EnvelopeShape(EnvelopeFlattened)), rec("dbserver1.public.customers", 1, pgKey(false, 42), flatValue(false, r2, "u", 120, false)))
}

func BenchmarkDecodeFlattenedInlineSchema(b *testing.B) {
	_, r2 := benchRows()
	benchDecode(b, newPG(b, EnvelopeShape(EnvelopeFlattened)), rec("dbserver1.public.customers", 1, pgKey(true, 42), flatValue(true, r2, "u", 120, false)))
}

func avroBenchDecoder(b *testing.B) *Decoder {
	d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro),
		SchemaRegistry(mapRegistry{avroValueID: avroEnvelopeSchema, avroKeyID: avroKeySchema}))
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func BenchmarkDecodeAvro(b *testing.B) {
	r1, r2 := benchRows()
	benchDecode(b, avroBenchDecoder(b), rec("dbserver1.public.customers", 1, avroKey(b, 42), avroValue(b, &r1, &r2, "u", 100, 120)))
}

// BenchmarkDecodeAvroGoavro decodes the same value with goavro, the named
// Avro dependency, into its native maps only: no key, no sequence, no
// conversion to column values, so it is a lower bound on goavro's cost.
func BenchmarkDecodeAvroGoavro(b *testing.B) {
	r1, r2 := benchRows()
	v := avroValue(b, &r1, &r2, "u", 100, 120)
	codec, err := goavro.NewCodec(avroEnvelopeSchema)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(v)))
	cpu0 := processCPU()
	for b.Loop() {
		if _, _, err := codec.NativeFromBinary(v[5:]); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, cpu0)
}

// fromGoavro converts goavro's native form of a value of n into a column
// value with the same rules the decoder applies, so the two decoders'
// outputs can be compared.
func fromGoavro(n *schema.AvroNode, v any) (schema.Value, error) {
	if n.Kind == schema.AvroUnion {
		if v == nil {
			return schema.Null, nil
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			return schema.Value{}, fmt.Errorf("union value %T", v)
		}
		b, _ := n.Unwrap()
		for _, inner := range m {
			return fromGoavro(b, inner)
		}
	}
	t := n.Col
	switch x := v.(type) {
	case int32:
		return t.FromInt(int64(x))
	case int64:
		return t.FromInt(x)
	case float64:
		return t.FromFloat(x)
	case bool:
		return t.FromBool(x)
	case string:
		return t.FromString(x)
	case []byte:
		return t.FromBytes(x)
	case *big.Rat:
		u := new(big.Rat).Mul(x, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil)))
		return t.FromBytes(twosComplement(u.Num()))
	case []any:
		elems := make([]schema.Value, len(x))
		for i, e := range x {
			ev, err := fromGoavro(n.Items, e)
			if err != nil {
				return schema.Value{}, err
			}
			elems[i] = ev
		}
		return t.FinishList(elems), nil
	case map[string]any:
		fields := make([]schema.Value, len(n.Fields))
		for i, f := range n.Fields {
			fv, err := fromGoavro(f.Node, x[f.Name])
			if err != nil {
				return schema.Value{}, err
			}
			fields[i] = fv
		}
		return t.FinishStruct(fields)
	}
	return schema.Value{}, fmt.Errorf("goavro value %T", v)
}

func twosComplement(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	l := (n.BitLen() + 8) / 8
	b := new(big.Int).Add(n, new(big.Int).Lsh(big.NewInt(1), uint(8*l))).Bytes()
	for len(b) < l {
		b = append([]byte{0xff}, b...)
	}
	return b
}

// TestAvroMatchesGoavro decodes the same records with this package's
// schema-compiled decoder and with goavro and requires identical images,
// which is what lets the decoder replace goavro on the hot path.
func TestAvroMatchesGoavro(t *testing.T) {
	codec, err := goavro.NewCodec(avroEnvelopeSchema)
	if err != nil {
		t.Fatal(err)
	}
	root, err := schema.ParseAvro(avroEnvelopeSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := avroDecoder(t)
	for i := range int32(20) {
		r1, r2 := sampleRow(i), sampleRow(i+100)
		r2.name, r2.tags = "", nil
		v := avroValue(t, &r1, &r2, "u", int64(i), int64(i)+1)
		ch, err := d.Decode(context.Background(), rec("t", int64(i), avroKey(t, i), v))
		if err != nil {
			t.Fatal(err)
		}
		native, _, err := codec.NativeFromBinary(v[5:])
		if err != nil {
			t.Fatal(err)
		}
		m := native.(map[string]any)
		for _, img := range []struct {
			name string
			row  Row
		}{{"before", ch.Before}, {"after", ch.After}} {
			want, err := fromGoavro(root.Fields[root.Field(img.name)].Node, m[img.name])
			if err != nil {
				t.Fatal(err)
			}
			if got := schema.Struct(img.row.Values...); !got.Equal(want) {
				t.Fatalf("%s image:\n ours   %#v\n goavro %#v", img.name, got, want)
			}
		}
	}
}

// TestWriteRefBenchInputs writes the benchmark records for the reference
// decoders in internal/refbench (a separate module, so that its
// dependencies stay out of cdcapply's go.mod). Run with
// CDCAPPLY_WRITE_REFBENCH=1 after changing the fixtures.
func TestWriteRefBenchInputs(t *testing.T) {
	if os.Getenv("CDCAPPLY_WRITE_REFBENCH") == "" {
		t.Skip("set CDCAPPLY_WRITE_REFBENCH=1 to rewrite internal/refbench/testdata")
	}
	r1, r2 := benchRows()
	files := map[string][]byte{
		"json-noschema.json": pgValue(false, r1.json(), r2.json(), "u", pgSource(100, 120)),
		"json-inline.json":   pgValue(true, r1.json(), r2.json(), "u", pgSource(100, 120)),
		"flattened.json":     flatValue(false, r2, "u", 120, false),
		"envelope.avsc":      []byte(avroEnvelopeSchema),
		"value.avro":         avroValue(t, &r1, &r2, "u", 100, 120)[5:],
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join("internal", "refbench", "testdata", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
