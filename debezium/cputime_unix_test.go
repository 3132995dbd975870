//go:build unix

package debezium

import "syscall"

// processCPU returns the CPU time the process has used (all threads, so
// garbage collection counts), in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
