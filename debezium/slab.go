package debezium

import (
	"sync"

	"github.com/cdcapply/cdcapply/schema"
)

// Row images are the decoder's main output and its main allocation: one
// slice of values per image, key and array. Cutting them from a slab turns
// many small allocations into one larger one. A Decode call takes one slab
// from the pool for all its cuts and returns it after; a slab stays alive
// while any image cut from it does, which bounds the waste to one slab per
// decoding goroutine.
const slabValues = 512 // 24 KiB: stays a small-object allocation

type valueSlab struct{ free []schema.Value }

var valueSlabs = sync.Pool{New: func() any { return new(valueSlab) }}

func getSlab() *valueSlab { return valueSlabs.Get().(*valueSlab) }

func putSlab(s *valueSlab) { valueSlabs.Put(s) }

// values returns n zero values, capacity n, so appends never write into a
// neighbour's part of the slab. A nil slab allocates.
func (s *valueSlab) values(n int) []schema.Value {
	if n == 0 {
		return nil
	}
	if s == nil || n > slabValues/8 {
		return make([]schema.Value, n)
	}
	if len(s.free) < n {
		s.free = make([]schema.Value, slabValues)
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}
