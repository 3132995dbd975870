package apply

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/cdcapply/cdcapply/delta/datafile"
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
				batch[i].unavail = noteUnavailable(vals) // as Project notes them
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

// BenchmarkRowsToArrow measures turning a batch's resolved rows into the
// Arrow record the Parquet writer encodes (20k rows of the scale layout:
// ten columns, three of them text).
//
//	go test ./apply -run XXX -bench RowsToArrow -count 6
func BenchmarkRowsToArrow(b *testing.B) {
	const n = 20_000
	rows := make([]Row, n)
	seq := pgSeq(3)
	for i := range rows {
		rows[i] = Row{Values: scaleValues(int64(i), 3), Seq: seq, SourceTsMicros: 1_700_000_000_000_000, AppliedMicros: 1_700_000_000_000_001}
	}
	benchRowsToArrow(b, rows)
}

// benchRowsToArrow times rowsToArrow over rows of the scale layout,
// reported per row.
func benchRowsToArrow(b *testing.B, rows []Row) {
	sch, err := datafile.ArrowSchema(scaleLayout.Schema())
	if err != nil {
		b.Fatal(err)
	}
	var scratch arrowScratch // reused from record to record, as WriteRows does
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec, err := rowsToArrow(sch, len(scaleLayout.Source), rows, &scratch)
		if err != nil {
			b.Fatal(err)
		}
		if rec.NumRows() != int64(len(rows)) {
			b.Fatalf("%d rows, want %d", rec.NumRows(), len(rows))
		}
		rec.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(rows)), "ns/row")
}

// BenchmarkRowsToArrowScattered is BenchmarkRowsToArrow laid out as the
// engine hands rows over: each row's text lives in its own 4 KiB record
// (the decoded JSON it points into), its values in slabs in arrival order,
// and the rows come in key order, unrelated to arrival. 50k rows, 200 MiB
// of records: far more than the caches hold, as in a real batch.
//
//	go test ./apply -run XXX -bench RowsToArrowScattered -count 6
func BenchmarkRowsToArrowScattered(b *testing.B) {
	const n, record = 50_000, 4 << 10
	records := make([]byte, n*record)
	slab := make([]schema.Value, 0, n*10)
	rows := make([]Row, n)
	seq := pgSeq(3)
	for i := range rows {
		rec := records[i*record : (i+1)*record : (i+1)*record]
		at := 0
		vals := scaleValues(int64(i), 3)
		for j, v := range vals {
			if v.Kind == schema.KindString {
				at += 97 // JSON between the values
				copy(rec[at:], v.S)
				vals[j] = schema.String(unsafe.String(&rec[at], len(v.S)))
				at += len(v.S)
			}
		}
		slab = append(slab, vals...)
		rows[i] = Row{Values: slab[len(slab)-10:], Seq: seq, SourceTsMicros: 1_700_000_000_000_000, AppliedMicros: 1_700_000_000_000_001}
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(n, func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	benchRowsToArrow(b, rows)
}
