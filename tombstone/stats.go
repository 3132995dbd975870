package tombstone

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
)

// Stats describes a table's tombstones at its latest version.
type Stats struct {
	Version int64
	// Files and Rows count the live data files and all their rows.
	Files int
	Rows  int64
	// Tombstones counts rows with _cdc_deleted = true; Eligible those a
	// purge with the given maximum lateness would take now, in
	// EligibleFiles files.
	Tombstones, Eligible int64
	EligibleFiles        int
	// OldestMicros is the oldest tombstone's source time (0 when none).
	OldestMicros int64
	// CutoffMicros is the cut-off Eligible was counted against.
	CutoffMicros int64
	// Horizon is the table's purge horizon, when HasHorizon.
	Horizon    Horizon
	HasHorizon bool
}

// ReadStats reads every live data file of the table's latest version and
// counts its tombstones, and those older than now minus maxLateness.
func ReadStats(ctx context.Context, t *delta.Table, maxLateness time.Duration, now time.Time) (*Stats, error) {
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read tombstone stats of %s: %w", t.Location(), err)
	}
	layout, err := checkLayout(snap)
	if err != nil {
		return nil, fmt.Errorf("read tombstone stats of %s: %w", t.Location(), err)
	}
	st := &Stats{Version: snap.Version, CutoffMicros: now.Add(-maxLateness).UnixMicro()}
	st.Horizon, st.HasHorizon, err = ReadHorizon(snap)
	if err != nil {
		return nil, fmt.Errorf("read tombstone stats of %s: %w", t.Location(), err)
	}
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, t.Storage(), layout, add)
		if err != nil {
			return nil, fmt.Errorf("read tombstone stats of %s: %w", t.Location(), err)
		}
		st.Files++
		st.Rows += rec.NumRows()
		del := column(rec, ColDeleted).(*array.Boolean)
		ts := column(rec, ColSourceTs).(*array.Timestamp)
		eligible := false
		for r := 0; r < int(rec.NumRows()); r++ {
			if del.IsNull(r) || !del.Value(r) {
				continue
			}
			st.Tombstones++
			if ts.IsNull(r) {
				continue
			}
			v := int64(ts.Value(r))
			if st.OldestMicros == 0 || v < st.OldestMicros {
				st.OldestMicros = v
			}
			if v < st.CutoffMicros {
				st.Eligible++
				eligible = true
			}
		}
		if eligible {
			st.EligibleFiles++
		}
		rec.Release()
	}
	return st, nil
}
