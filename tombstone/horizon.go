// Package tombstone purges soft-deleted rows (tombstones) from cdcapply
// tables in a controlled way and keeps the purge horizon that stops a late
// change from resurrecting a purged key.
//
// A tombstone keeps a deleted key's last sequence so that a late change
// with an older sequence is recognised as stale. Purging it loses that
// memory, so a purge only takes tombstones whose source commit time is
// older than the table's maximum lateness, and records the cut-off (the
// purge horizon) in the table itself, in the same commit, as the
// domainMetadata domain "cdcapply.tombstones". From then on a change
// older than the horizon for a key the table does not hold may be the
// late echo of a purged key: the apply path quarantines it
// (late_beyond_purge_horizon) instead of inserting it.
//
// The horizon lives in the table rather than in a side file because it
// must move atomically with the purge (a crash between the two would
// either lose the guard or claim a purge that did not happen), must be
// seen by every instance applying to the table, and must travel with the
// table through restore and copies.
package tombstone

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/cdcapply/cdcapply/delta"
)

// The engine columns a purge reads. They are apply's layout columns; this
// package does not import apply because apply imports it (for HorizonOf).
const (
	// ColDeleted is the soft-delete flag.
	ColDeleted = "_cdc_deleted"
	// ColSourceTs is the source commit time of the change that wrote a row.
	ColSourceTs = "_cdc_source_ts"
	// EnginePrefix starts every engine column's name.
	EnginePrefix = "_cdc_"
)

// Domain is the domainMetadata domain holding the purge horizon.
const Domain = "cdcapply.tombstones"

// Horizon is the purge horizon of a table: tombstones whose source commit
// time is before SourceTsMicros may have been purged.
type Horizon struct {
	// SourceTsMicros is the cut-off in microseconds since the epoch; it
	// only moves forward.
	SourceTsMicros int64 `json:"horizonSourceTsMicros"`
	// PurgedAtMillis is when the latest purge committed.
	PurgedAtMillis int64 `json:"purgedAt"`
	// PurgedRows counts the tombstones purged by all purges so far.
	PurgedRows int64 `json:"purgedRows"`
}

// Late reports whether a change with this source commit time is older than
// the horizon. For a key the table does not hold, such a change may belong
// to a purged key and must not be inserted. An unknown time (0 or less) is
// late: without it the change cannot be shown to be newer.
func (h Horizon) Late(sourceTsMicros int64) bool {
	return sourceTsMicros <= 0 || sourceTsMicros < h.SourceTsMicros
}

// HorizonOf returns the table's purge horizon; false when no purge ever
// committed. A horizon that cannot be parsed makes every change late (the
// returned horizon is at the end of time): quarantining too much is
// recoverable, resurrecting a deleted key is not. ReadHorizon returns the
// parse error instead.
func HorizonOf(snap *delta.Snapshot) (Horizon, bool) {
	h, ok, err := ReadHorizon(snap)
	if err != nil {
		return Horizon{SourceTsMicros: math.MaxInt64}, true
	}
	return h, ok
}

// ReadHorizon is HorizonOf with the error of a malformed domain.
func ReadHorizon(snap *delta.Snapshot) (Horizon, bool, error) {
	if snap == nil {
		return Horizon{}, false, nil
	}
	d, ok := snap.Domain(Domain)
	if !ok {
		return Horizon{}, false, nil
	}
	var h Horizon
	if err := json.Unmarshal([]byte(d.Configuration), &h); err != nil {
		return Horizon{}, false, fmt.Errorf("read purge horizon of version %d: %w", snap.Version, err)
	}
	return h, true, nil
}

func (h Horizon) domain() (delta.DomainMetadata, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return delta.DomainMetadata{}, fmt.Errorf("encode purge horizon: %w", err)
	}
	return delta.DomainMetadata{Domain: Domain, Configuration: string(b)}, nil
}

// withDomainMetadata returns p with the domainMetadata writer feature the
// horizon's action needs, and whether it had to change. A legacy writer
// version becomes 7 with the features it implied listed; versions 3 to 6
// imply features this writer does not list safely, so they are refused.
func withDomainMetadata(p delta.Protocol) (delta.Protocol, bool, error) {
	if p.MinWriterVersion == 7 {
		for _, f := range p.WriterFeatures {
			if f == delta.FeatureDomainMetadata {
				return p, false, nil
			}
		}
		out := p
		out.WriterFeatures = append(append([]string{}, p.WriterFeatures...), delta.FeatureDomainMetadata)
		return out, true, nil
	}
	out := delta.Protocol{MinReaderVersion: p.MinReaderVersion, MinWriterVersion: 7, ReaderFeatures: p.ReaderFeatures}
	switch p.MinWriterVersion {
	case 1:
		out.WriterFeatures = []string{delta.FeatureDomainMetadata}
	case 2:
		out.WriterFeatures = []string{delta.FeatureAppendOnly, delta.FeatureInvariants, delta.FeatureDomainMetadata}
	default:
		return p, false, fmt.Errorf("record purge horizon: writer version %d cannot be upgraded to table features here: %w", p.MinWriterVersion, delta.ErrUnsupportedFeature)
	}
	return out, true, nil
}
