package refbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/hamba/avro/v2"

	"github.com/cdcapply/cdcapply/debezium"
	"github.com/cdcapply/cdcapply/delta"
)

var customers = delta.StructType{Fields: []delta.StructField{
	{Name: "id", Type: delta.Integer},
	{Name: "name", Type: delta.String, Nullable: true},
	{Name: "price", Type: delta.DecimalType{Precision: 10, Scale: 2}, Nullable: true},
	{Name: "created_at", Type: delta.Timestamp, Nullable: true},
	{Name: "updated_at", Type: delta.Timestamp, Nullable: true},
	{Name: "birthday", Type: delta.Date, Nullable: true},
	{Name: "active", Type: delta.Boolean, Nullable: true},
	{Name: "payload", Type: delta.Binary, Nullable: true},
	{Name: "score", Type: delta.Double, Nullable: true},
	{Name: "tags", Type: delta.ArrayType{ElementType: delta.String, ContainsNull: true}, Nullable: true},
}}

// cdcapplyDecode returns a function decoding the named input with the
// debezium package, as the apply engine would (key and value).
func cdcapplyDecode(tb testing.TB, input string) func() error {
	tb.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	opts := []debezium.Option{debezium.SourceConnector(debezium.ConnectorPostgres), debezium.TableSchema("", customers)}
	rec := &debezium.Record{Topic: "dbserver1.public.customers", Key: []byte(`{"id":42}`)}
	switch input {
	case "json-noschema.json", "json-inline.json":
		rec.Value = read(input)
	case "flattened.json":
		rec.Value = read(input)
		opts = append(opts, debezium.EnvelopeShape(debezium.EnvelopeFlattened))
	case "value.avro":
		rec.Value = append([]byte{0, 0, 0, 0, 7}, read(input)...)
		key, err := avro.Marshal(avro.MustParse(`{"type":"record","name":"Key","fields":[{"name":"id","type":"int"}]}`), map[string]any{"id": int32(42)})
		if err != nil {
			tb.Fatal(err)
		}
		rec.Key = binary.BigEndian.AppendUint32([]byte{0}, 8)
		rec.Key = append(rec.Key, key...)
		reg := twoSchemas{7: string(read("envelope.avsc")), 8: `{"type":"record","name":"Key","fields":[{"name":"id","type":"int"}]}`}
		opts = append(opts, debezium.ValueFormat(debezium.FormatAvro), debezium.SchemaRegistry(reg))
	}
	d, err := debezium.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	return func() error {
		_, err := d.Decode(ctx, rec)
		return err
	}
}

type twoSchemas map[int]string

func (m twoSchemas) SchemaText(_ context.Context, id int) (string, error) {
	if s, ok := m[id]; ok {
		return s, nil
	}
	return "", fmt.Errorf("get schema %d: %w", id, debezium.ErrUnknownSchema)
}

func referenceDecode(tb testing.TB, input string) func() error {
	tb.Helper()
	data, err := os.ReadFile("testdata/" + input)
	if err != nil {
		tb.Fatal(err)
	}
	switch input {
	case "json-noschema.json":
		return func() error { var e jsonEnvelope; return gojson.Unmarshal(data, &e) }
	case "json-inline.json":
		return func() error { var e jsonInline; return gojson.Unmarshal(data, &e) }
	case "flattened.json":
		return func() error { var r flatRow; return gojson.Unmarshal(data, &r) }
	default:
		sch := avro.MustParse(string(mustRead(tb, "envelope.avsc")))
		return func() error { var e avroEnvelope; return avro.Unmarshal(sch, data, &e) }
	}
}

func mustRead(tb testing.TB, name string) []byte {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// timeBlock runs fn n times and returns the time per call: process CPU
// time (all threads, so garbage collection counts) when cpuClock is set,
// which leaves out the time the process waited for a core on a loaded
// machine; wall time otherwise.
func timeBlock(fn func() error, n int) float64 {
	startWall, startCPU := time.Now(), cpuNow()
	for range n {
		if err := fn(); err != nil {
			panic(err)
		}
	}
	if cpuClock {
		return float64(cpuNow()-startCPU) / float64(n)
	}
	return float64(time.Since(startWall).Nanoseconds()) / float64(n)
}

var cpuClock = os.Getenv("REFBENCH_CLOCK") != "wall"

func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestRatio interleaves short blocks of cdcapply's decoder and the
// reference decoder on each input (alternating which goes first) and
// reports the median of the per-block throughput ratios: on a shared,
// loaded machine absolute events/s swing with the neighbours, the ratio of
// back-to-back blocks much less.
//
// Blocks are timed by process CPU time unless REFBENCH_CLOCK=wall; CPU
// accounting is coarse on some kernels, so use blocks of a few thousand:
//
//	REFBENCH_ROUNDS=60 REFBENCH_BLOCK=4000 go test -run TestRatio -v -cpu 1
func TestRatio(t *testing.T) {
	rounds := 0
	fmt.Sscan(os.Getenv("REFBENCH_ROUNDS"), &rounds)
	if rounds == 0 {
		t.Skip("set REFBENCH_ROUNDS to measure")
	}
	block := 500
	fmt.Sscan(os.Getenv("REFBENCH_BLOCK"), &block)
	for _, in := range []string{"json-noschema.json", "json-inline.json", "flattened.json", "value.avro"} {
		ours, ref := cdcapplyDecode(t, in), referenceDecode(t, in)
		timeBlock(ours, block) // warm up
		timeBlock(ref, block)
		var ratios, oursEv, refEv []float64
		for i := range rounds {
			var o, r float64
			if i%2 == 0 {
				o, r = timeBlock(ours, block), timeBlock(ref, block)
			} else {
				r, o = timeBlock(ref, block), timeBlock(ours, block)
			}
			ratios = append(ratios, r/o)
			oursEv = append(oursEv, 1e9/o)
			refEv = append(refEv, 1e9/r)
		}
		clock := "cpu"
		if !cpuClock {
			clock = "wall"
		}
		t.Logf("%-20s cdcapply/reference throughput median %.2f (cdcapply median %.0f events/s, reference median %.0f events/s per core, %d blocks of %d, %s time)",
			in, median(ratios), median(oursEv), median(refEv), rounds, block, clock)
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}
