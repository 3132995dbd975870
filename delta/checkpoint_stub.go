package delta

// TEMPORARY (owner of commit.go): stand-ins with the agreed signatures until
// the checkpoint helper's checkpoint_write.go and logcleanup.go land; this
// file is deleted then. They fail loudly rather than pretend to work.

import (
	"context"
	"errors"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

var errCheckpointPending = errors.New("log checkpoint writing not built yet")

// CleanupExpiredLogs is a temporary stand-in; see the file comment.
func CleanupExpiredLogs(ctx context.Context, store storage.Storage, snap *Snapshot, now time.Time) error {
	return errCheckpointPending
}
