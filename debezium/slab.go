package debezium

import (
	"sync"

	"github.com/cdcapply/cdcapply/schema"
)

// Row images are the decoder's main output and its main allocation: one
// slice of values per image. Cutting them from shared slabs turns hundreds
// of small allocations into one large one. A slab stays alive while any
// image cut from it does, which bounds the waste to one slab per decoding
// goroutine.
const slabValues = 512 // 24 KiB: stays a small-object allocation

type valueSlab struct{ free []schema.Value }

var valueSlabs = sync.Pool{New: func() any { return new(valueSlab) }}

// newValues returns n zero values, capacity n, so appends never write into
// a neighbour's part of the slab.
func newValues(n int) []schema.Value {
	if n == 0 {
		return nil
	}
	if n > slabValues/8 {
		return make([]schema.Value, n)
	}
	s := valueSlabs.Get().(*valueSlab)
	if len(s.free) < n {
		s.free = make([]schema.Value, slabValues)
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	valueSlabs.Put(s)
	return out
}
