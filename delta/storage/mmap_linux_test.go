//go:build linux

package storage

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFileKiB reads the process's resident file-backed memory.
func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestLocalFileDropResident: the pages of a mapped file that were read
// count in the process's RSS until DropResident, and no longer after;
// the file reads the same afterwards.
func TestLocalFileDropResident(t *testing.T) {
	const size = 64 << 20
	ctx := context.Background()
	l := NewLocal(t.TempDir())
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i / 4096)
	}
	if err := l.Write(ctx, "big.bin", data); err != nil {
		t.Fatal(err)
	}
	f, err := l.Open(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.(Mapped).Mapped()
	before := rssFileKiB(t)
	var sum int
	for i := 0; i < len(m); i += 4096 {
		sum += int(m[i])
	}
	touched := rssFileKiB(t)
	f.(ResidentDropper).DropResident()
	dropped := rssFileKiB(t)
	t.Logf("RssFile: %d KiB before, %d touched, %d dropped (sum %d)", before, touched, dropped, sum)
	if touched-before < size/1024/2 {
		t.Fatalf("reading the 64 MiB mapping added %d KiB of RssFile; the test cannot tell", touched-before)
	}
	if dropped-before > size/1024/8 {
		t.Fatalf("after DropResident RssFile is still %d KiB above where it started", dropped-before)
	}
	buf := make([]byte, 1)
	if _, err := f.ReadAt(buf, 5*4096+7); err != nil || buf[0] != 5 {
		t.Fatalf("read after DropResident: %v %v", buf, err)
	}
}
