package apply

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cdcapply/cdcapply/schema"
)

// BenchmarkReduce reduces one batch of the reference workload's shape:
// 50k changes of 10 columns over a 1M-key space (a few keys repeat, some
// with the TOAST placeholder in the last column), as Project hands them
// to the applier. Reported per change.
func BenchmarkReduce(b *testing.B) {
	for _, keys := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("changes=50k/keys=%d", keys), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			batch := make([]*Change, 50_000)
			for i := range batch {
				id := int64(r.IntN(keys))
				vals := make([]schema.Value, 10)
				vals[0] = schema.Int(id)
				for j := 1; j < 9; j++ {
					vals[j] = schema.Int(r.Int64())
				}
				vals[9] = schema.String("doc")
				if r.IntN(10) < 7 {
					vals[9] = schema.Unavailable
				}
				seq := binary.BigEndian.AppendUint64([]byte{1, 1}, uint64(i+1))
				batch[i] = &Change{Key: EncodeKey(vals, []int{0}), Seq: seq, Values: vals,
					Pos: Position{Topic: "t", Partition: int32(id % 4), Offset: int64(i)}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if out := Reduce(batch); len(out) == 0 {
					b.Fatal("empty reduction")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/change")
		})
	}
}
