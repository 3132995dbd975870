//go:build unix

package storage

import (
	"math"
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f read-only, or returns nil when
// it cannot (an empty file, a file system without mmap): the caller then
// reads with pread.
func mapFile(f *os.File, size int64) []byte {
	if size <= 0 || size > math.MaxInt {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return b
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// dropResident lets the system take b's pages out of the process: they
// stay in the page cache, and touching them again maps them back.
func dropResident(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }
