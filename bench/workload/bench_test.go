package workload

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkGenerate measures generation alone on the reference workload
// (10 columns, 80% updates, every irregularity at its default rate), so the
// bench harness can tell the generator is not its bottleneck. b.N is the
// number of records.
func BenchmarkGenerate(b *testing.B) {
	for _, width := range []struct {
		name    string
		columns int
	}{{"10cols", 10}, {"30cols", 30}} {
		b.Run(width.name, func(b *testing.B) {
			cfg := Default()
			cfg.Columns = width.columns
			cfg.Keys, cfg.SnapshotKeys, cfg.Events = 1_000_000, 0, int64(b.N)
			g, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var ev Event
			var bytes int64
			n := 0
			for n < b.N && g.Next(&ev) {
				bytes += int64(len(ev.Record.Value))
				n++
			}
			b.StopTimer()
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(bytes)/float64(n), "B/record")
		})
	}
}

// BenchmarkProduceKfake measures generating and producing into an
// in-process kfake broker: what `cdcapply demo` and the harness's default
// mode pay before the engine sees a record.
func BenchmarkProduceKfake(b *testing.B) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	cfg := Default()
	cfg.Keys, cfg.SnapshotKeys, cfg.Events = 1_000_000, 0, int64(b.N)
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := CreateTopics(context.Background(), cl, g, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	st, err := Produce(context.Background(), cl, g, 5000, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(st.PerSecond(), "records/s")
}
