package datafile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestMinMaxFastPath: the bounds of a top-level column (read straight
// from its values) equal those of the general path (two calls per value,
// which nested columns take), for columns with and without nulls, sliced
// at an offset, all null but one, and empty of valid values.
func TestMinMaxFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := memory.DefaultAllocator
	for _, nullPct := range []int{0, 30, 99, 100} {
		builders := []array.Builder{
			array.NewInt32Builder(mem), array.NewInt64Builder(mem),
			array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}),
			array.NewStringBuilder(mem),
		}
		for range 5000 {
			null := rng.IntN(100) < nullPct
			for _, b := range builders {
				if null {
					b.AppendNull()
					continue
				}
				switch b := b.(type) {
				case *array.Int32Builder:
					b.Append(rng.Int32() - 1<<30)
				case *array.Int64Builder:
					b.Append(rng.Int64() - 1<<62)
				case *array.TimestampBuilder:
					b.Append(arrow.Timestamp(rng.Int64N(4e15)))
				case *array.StringBuilder:
					b.Append(fmt.Sprintf("%x", rng.Uint64()))
				}
			}
		}
		for _, b := range builders {
			whole := b.NewArray()
			for _, arr := range []arrow.Array{whole, array.NewSlice(whole, 7, 4321)} {
				noParent := make([]bool, arr.Len())
				lo, hi, ok := minMax(arr, nil)
				wlo, whi, wok := minMax(arr, noParent)
				if ok != wok || !bytes.Equal(lo, wlo) || !bytes.Equal(hi, whi) {
					t.Errorf("%s, %d%% nulls, offset %d: bounds %s %s %v, general path %s %s %v", arr.DataType(), nullPct, arr.Data().Offset(), lo, hi, ok, wlo, whi, wok)
				}
				if nullPct < 100 && !ok {
					t.Errorf("%s, %d%% nulls: no bounds", arr.DataType(), nullPct)
				}
			}
			whole.Release()
			b.Release()
		}
	}
}
