//go:build !unix

package debezium

// processCPU is unavailable here; benchmarks then report wall time only.
func processCPU() int64 { return -1 }
