package harness

import (
	"context"
	"testing"

	"github.com/cdcapply/cdcapply/bench/workload"
)

// BenchmarkDecodeWorkload decodes records of the bench's default stream
// (Debezium JSON with inline schemas, ten columns, a 256-character doc;
// snapshot reads and changes in their proportions) on one goroutine, with
// the decoder the decode-only measurement uses. Reported per record.
//
//	go test ./bench/harness -run XXX -bench DecodeWorkload -cpu 1 -count 6
func BenchmarkDecodeWorkload(b *testing.B) {
	cfg := workload.Default()
	cfg.Keys, cfg.Events = 20_000, 20_000
	sample, _, err := collectStream(cfg, 4_000, "")
	if err != nil {
		b.Fatal(err)
	}
	d, err := newDecoder()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var bytes int64
	for i := range sample {
		bytes += int64(len(sample[i].Value) + len(sample[i].Key))
	}
	b.SetBytes(bytes / int64(len(sample)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := d.Decode(ctx, &sample[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(sample) {
			i = 0
		}
	}
}
