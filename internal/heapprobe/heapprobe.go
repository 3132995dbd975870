// Package heapprobe measures the Go heap for the benchmarks: what is live,
// and the most a piece of work holds at once.
package heapprobe

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// PeakDuring runs f with the collector at GOGC=5, so that the heap in use
// stays close to the live heap, and returns the most heap in use above
// what was live before f, sampled every 100 µs: about the most f held at
// once.
func PeakDuring(f func()) int64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	base := Live()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, int64(sample[0].Value.Uint64()))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(done)
	<-stopped
	return max(peak-base, 0)
}

// Live is the heap still reachable after two full collections: the
// second drops what sync.Pools kept through the first (encoders' reused
// buffers), which nothing else holds.
func Live() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
