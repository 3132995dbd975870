package storage

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing the file's bytes
// [off, off+n) to the device now, without waiting for it
// (sync_file_range with SYNC_FILE_RANGE_WRITE): the fsync that ends a
// streamed write then waits for what the last megabyte or so left, not
// for the whole file. It is advice only; fsync remains what makes the
// file durable, so an error is ignored.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
