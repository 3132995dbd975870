package apply

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkPredecode: one poll of 10,000 Debezium JSON records (inline
// schema) decoded on every core, as Run does before routing, and the
// results cleared as Run does after. B/op counts the decoded values and
// whatever predecode allocates itself.
func BenchmarkPredecode(b *testing.B) {
	cfg := testConfigFor(b, []string{"127.0.0.1:1"}, b.TempDir(), "orders", "bench")
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, 10_000)
	for i := range recs {
		k, v := dbzOrders(i%1000, int64(i+1), "u", "shipped")
		recs[i] = &kgo.Record{Topic: "orders", Key: k, Value: v, Offset: int64(i)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		pre := e.predecode(ctx, recs)
		if len(pre) != len(recs) || pre[len(pre)-1].err != nil || pre[len(pre)-1].dec == nil {
			b.Fatalf("predecode: %d results for %d records", len(pre), len(recs))
		}
		clear(pre) // as Run does once the poll is routed
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkRoute: one poll of 10,000 Debezium JSON updates (decoded
// ahead, as Run's predecode does; not timed) routed into the table's
// buffer: positions, the layout, the projection onto the table's
// columns and the buffered change. B/op is what routing allocates.
func BenchmarkRoute(b *testing.B) {
	ctx := context.Background()
	e, t, recs := routeBench(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		t.buf.reset()
		pre := e.predecode(ctx, recs)
		b.StartTimer()
		routePoll(b, e, t, recs, pre)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkPredecodeRoute: one poll of 10,000 Debezium JSON updates
// handled as Run handles a poll: decoded on every core, then routed into
// the table's buffer one by one on the loop.
func BenchmarkPredecodeRoute(b *testing.B) {
	ctx := context.Background()
	e, t, recs := routeBench(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		t.buf.reset()
		b.StartTimer()
		routePoll(b, e, t, recs, e.predecode(ctx, recs))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// routePoll routes a predecoded poll into t's buffer as Run does,
// clears the predecoded array as Run does, and checks every record was
// buffered.
func routePoll(b *testing.B, e *Engine, t *tableRun, recs []*kgo.Record, pre []predecoded) {
	for i, r := range recs {
		e.routeTo(context.Background(), t, r, &pre[i])
	}
	clear(pre)
	if len(t.buf.changes) != len(recs) {
		b.Fatalf("%d changes buffered from %d records", len(t.buf.changes), len(recs))
	}
}

// routeBench is the engine, its opened table and the poll of 10,000
// Debezium JSON updates that BenchmarkRoute and BenchmarkPredecodeRoute
// route.
func routeBench(b *testing.B) (*Engine, *tableRun, []*kgo.Record) {
	e, t, _ := directEngine(b)
	recs := make([]*kgo.Record, 10_000)
	for i := range recs {
		k, v := dbzOrders(i%1000, int64(i+1), "u", "shipped")
		recs[i] = &kgo.Record{Topic: "orders", Key: k, Value: v, Offset: int64(i)}
	}
	return e, t, recs
}
