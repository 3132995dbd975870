package tombstone_test

import (
	"testing"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/opstest"
)

// The operations tests build real cdcapply tables through the apply
// engine (internal/opstest), so the files have the real layout, then run
// the operations on them and read the result back with our reader and
// with delta-rs.

// newStream opens a copy-on-write stream on the table at dir.
func newStream(t *testing.T, dir string) *opstest.Stream { return opstest.NewStream(t, dir, "", false) }

func storageAt(dir string) *storage.Local { return storage.NewLocal(dir) }
