package tombstone_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/tombstone"
)

// guardedApply is the apply path's horizon check as it must be wired:
// before a batch is applied, a change whose key the table does not hold
// and whose source time is before the horizon is quarantined. present
// reads the table's keys (the apply engine asks its key index).
func guardedApply(t *testing.T, s *opstest.Stream, dir string, changes ...*apply.Change) (quarantined []string) {
	t.Helper()
	g := tombstone.NewGuard(s.A.Snapshot())
	present := map[int64]bool{}
	for _, r := range opstest.Rows(t, dir) {
		var id int64
		var rest string
		if _, err := fmt.Sscan(r, &id, &rest); err == nil {
			present[id] = true
		}
	}
	var keep []*apply.Change
	for _, c := range changes {
		if !present[c.Values[0].I] && g.Refuse(c.SourceTsMicros) {
			quarantined = append(quarantined, tombstone.ReasonLateBeyondHorizon)
			continue
		}
		keep = append(keep, c)
	}
	if len(keep) > 0 {
		s.Apply(keep...)
	}
	return quarantined
}

// TestResurrectionAfterPurge: key 2 deleted nine days ago, its tombstone
// purged after the week's lateness, then a late update for key 2 with an
// older sequence arrives. With the horizon the key stays absent and the
// change is quarantined; without it (the same stream, no guard) the key
// is resurrected, which is what proves the check can fail.
func TestResurrectionAfterPurge(t *testing.T) {
	ctx := context.Background()
	for _, guarded := range []bool{true, false} {
		dir, s := purgeTable(t)
		if _, err := tombstone.Purge(ctx, delta.Open(storageAt(dir)), purgeOpts()); err != nil {
			t.Fatal(err)
		}
		s.Reopen()
		// The late update: sequence 15 (before the delete's 20), source
		// time nine and a half days ago, arriving now.
		late := opstest.Change(2, 15, "u", "zombie", opstest.Now.Add(-228*time.Hour), 0)
		// A genuinely new key with a recent time is not affected.
		fresh := opstest.Change(6, 50, "c", "new", opstest.Now, 0)
		var q []string
		if guarded {
			q = guardedApply(t, s, dir, late, fresh)
		} else {
			s.Apply(late, fresh)
		}
		got := opstest.Rows(t, dir)
		want := []string{"1 a false", "4 d true", "5 e false", "6 new false"}
		switch {
		case guarded && (!opstest.Same(got, want) || len(q) != 1 || q[0] != "late_beyond_purge_horizon"):
			t.Fatalf("with the horizon: table %v quarantined %v, want %v and one late_beyond_purge_horizon", got, q, want)
		case !guarded && opstest.Same(got, want):
			t.Fatal("without the horizon the late change did not resurrect key 2: the guarded case proves nothing")
		case !guarded && !contains(got, "2 zombie false"):
			t.Fatalf("without the horizon: %v, want key 2 resurrected as zombie", got)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
