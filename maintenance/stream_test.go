package maintenance_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/cdcapply/cdcapply/internal/opstest"
)

// The maintenance tests build real cdcapply tables through the apply
// engine (internal/opstest), as package tombstone's tests do.

// newStream opens a copy-on-write stream on the table at dir that keeps
// a file per batch: optimize is tested on tables with many files and
// vectors on the older ones, which folding would not leave.
func newStream(t testing.TB, dir string) *opstest.Stream { return opstest.NewStream(t, dir, "", true) }

// discard is a logger for benchmarks, whose audit lines would drown the output.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
