package tombstone

import "github.com/cdcapply/cdcapply/delta"

// ReasonLateBeyondHorizon is the quarantine reason of a change refused by
// the purge horizon.
const ReasonLateBeyondHorizon = "late_beyond_purge_horizon"

// Guard decides, for one snapshot, whether a change may insert a key the
// table does not hold. The apply path builds one per batch from the
// snapshot it plans against and asks it for every reduced key whose
// stored row is missing (keys the table holds, tombstones included, are
// judged by the sequence guard as always).
type Guard struct {
	horizon Horizon
	active  bool
}

// NewGuard returns the guard of a snapshot (nil: a table not created yet,
// which has no horizon).
func NewGuard(snap *delta.Snapshot) Guard {
	h, ok := HorizonOf(snap)
	return Guard{horizon: h, active: ok}
}

// Horizon returns the guard's horizon and whether the table has one.
func (g Guard) Horizon() (Horizon, bool) { return g.horizon, g.active }

// Refuse reports whether a change for an absent key, with this source
// commit time, must be quarantined (with ReasonLateBeyondHorizon) instead
// of inserted: the key may have been deleted and its tombstone purged, so
// inserting it could resurrect a deleted row. Without a horizon every
// change may insert.
func (g Guard) Refuse(sourceTsMicros int64) bool {
	return g.active && g.horizon.Late(sourceTsMicros)
}
