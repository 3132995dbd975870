package harness

import (
	"math"
	"time"
)

// hist is a latency histogram with logarithmic buckets (1% wide) over
// microseconds: fixed memory whatever the number of samples, so recording
// every change's freshness does not grow the measured process. Quantiles
// are exact to the bucket's width (±0.5%).
type hist struct {
	counts []int64 // bucket i holds values in [base^i, base^(i+1)) µs; bucket 0 also holds < 1µs
	n      int64
	max    int64
	sum    float64
}

const histBase = 1.01

func newHist() *hist {
	// 2^40 µs (~12.7 days) is more than any run.
	return &hist{counts: make([]int64, int(math.Log(1<<40)/math.Log(histBase))+2)}
}

func (h *hist) bucket(us int64) int {
	if us < 1 {
		return 0
	}
	i := int(math.Log(float64(us)) / math.Log(histBase))
	return min(i, len(h.counts)-1)
}

// add records one value in microseconds (negative values count as 0: a
// source clock slightly ahead of the committer's).
func (h *hist) add(us int64) {
	us = max(us, 0)
	h.counts[h.bucket(us)]++
	h.n++
	h.max = max(h.max, us)
	h.sum += float64(us)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
	h.sum += o.sum
}

// quantile returns the value at quantile q (0..1) as the middle of its
// bucket, capped by the largest value seen.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo := math.Pow(histBase, float64(i))
			if i == 0 {
				lo = 0
			}
			mid := (lo + math.Pow(histBase, float64(i+1))) / 2
			return time.Duration(min(mid, float64(h.max))) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/float64(h.n)) * time.Microsecond
}
