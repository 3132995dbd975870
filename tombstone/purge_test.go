package tombstone_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/internal/opstest"
	"github.com/cdcapply/cdcapply/tombstone"
)

const week = 7 * 24 * time.Hour

// purgeTable has keys 1..4 created ten days ago, keys 2 and 3 deleted
// nine days ago (purgeable after a week's lateness), key 4 deleted an
// hour ago (too recent) and key 5 created an hour ago.
func purgeTable(t *testing.T) (string, *opstest.Stream) {
	dir := t.TempDir()
	s := newStream(t, dir)
	old, older, recent := opstest.Now.Add(-9*24*time.Hour), opstest.Now.Add(-10*24*time.Hour), opstest.Now.Add(-time.Hour)
	s.Apply(opstest.Change(1, 10, "c", "a", older, 0), opstest.Change(2, 10, "c", "b", older, 0), opstest.Change(3, 10, "c", "c", older, 0), opstest.Change(4, 10, "c", "d", older, 0))
	s.Apply(opstest.Change(2, 20, "d", "", old, 0), opstest.Change(3, 20, "d", "", old, 0))
	s.Apply(opstest.Change(4, 30, "d", "", recent, 0), opstest.Change(5, 30, "c", "e", recent, 0))
	return dir, s
}

func purgeOpts() tombstone.PurgeOptions {
	// No KeyColumns: the keys come from the table's recorded key columns.
	return tombstone.PurgeOptions{MaxLateness: week, Now: func() time.Time { return opstest.Now }}
}

func TestEngineColumnNames(t *testing.T) {
	// tombstone cannot import apply (apply imports tombstone): its copies
	// of the names must stay equal.
	if tombstone.ColDeleted != apply.ColDeleted || tombstone.ColSourceTs != apply.ColSourceTs || tombstone.EnginePrefix != apply.ReservedPrefix {
		t.Fatal("tombstone's engine column names differ from apply's")
	}
}

func TestPurgeRefusesTooRecent(t *testing.T) {
	dir, _ := purgeTable(t)
	o := purgeOpts()
	o.OlderThan = 24 * time.Hour
	_, err := tombstone.Purge(context.Background(), delta.Open(storageAt(dir)), o)
	if !errors.Is(err, tombstone.ErrTooRecent) || !strings.Contains(err.Error(), "older than 24h0m0s is within the table's maximum lateness 168h0m0s") {
		t.Fatalf("err = %v, want ErrTooRecent naming both durations", err)
	}
	o.OlderThan, o.MaxLateness = 0, 0
	if _, err := tombstone.Purge(context.Background(), delta.Open(storageAt(dir)), o); err == nil {
		t.Fatal("a purge without the table's maximum lateness ran")
	}
}

func TestPurgeDryRunAndBounds(t *testing.T) {
	ctx := context.Background()
	dir, _ := purgeTable(t)
	tbl := delta.Open(storageAt(dir))
	before, _ := tbl.Snapshot(ctx)
	o := purgeOpts()
	o.DryRun = true
	var lastRows int64
	calls := 0
	o.Progress = func(files int, rows int64) { calls, lastRows = files, rows }
	res, err := tombstone.Purge(ctx, tbl, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 2 || strings.Join(res.Keys, " ") != "id=2 id=3" || len(res.Files) != 1 || res.Version != -1 || res.More {
		t.Fatalf("dry run: %+v", res)
	}
	if calls != 1 || lastRows != 2 {
		t.Fatalf("progress: %d files, %d rows; want 1 file (the only one), 2 rows", calls, lastRows)
	}
	o.Progress = nil
	if after, _ := tbl.Snapshot(ctx); after.Version != before.Version {
		t.Fatal("dry run committed")
	}
	o.DryRun, o.MaxRows = false, 1
	res, err = tombstone.Purge(ctx, tbl, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || !res.More || res.Version != before.Version+1 {
		t.Fatalf("bounded purge: %+v", res)
	}
	want := []string{"1 a false", "3 c true", "4 d true", "5 e false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("after a purge of one row: %v, want %v", got, want)
	}
	snap, _ := tbl.Snapshot(ctx)
	h, ok := tombstone.HorizonOf(snap)
	cutoff := opstest.Now.Add(-week).UnixMicro()
	if !ok || h.SourceTsMicros != cutoff || h.PurgedRows != 1 {
		t.Fatalf("horizon %+v %v, want cut-off %d and 1 row", h, ok, cutoff)
	}
	if !h.Late(cutoff-1) || h.Late(cutoff) || !h.Late(0) {
		t.Fatal("Late disagrees with the cut-off")
	}
	acts, _ := tbl.ReadCommit(ctx, res.Version)
	ci := acts[0].CommitInfo
	if ci.Operation != "DELETE" || !strings.HasPrefix(ci.OperationParameters["predicate"].(string), "_cdc_deleted = true AND _cdc_source_ts < TIMESTAMP '2026-06-08 12:00:00") ||
		ci.OperationParameters["numDeletedRows"] != float64(1) {
		t.Fatalf("commitInfo %+v", ci)
	}
	if !containsFeature(snap.Protocol, delta.FeatureDomainMetadata) {
		t.Fatalf("protocol %+v lacks domainMetadata", snap.Protocol)
	}
}

func containsFeature(p delta.Protocol, f string) bool {
	for _, g := range p.WriterFeatures {
		if g == f {
			return true
		}
	}
	return false
}

// TestPurgeRacingRevive revives key 2 while its tombstone is being purged:
// the stream's commit lands between the purge's read and its commit. The
// purge must conflict, retry on the new snapshot and purge only key 3; the
// revived key and every other row must equal the oracle.
func TestPurgeRacingRevive(t *testing.T) {
	ctx := context.Background()
	dir, s := purgeTable(t)
	tbl := delta.Open(storageAt(dir))
	o := purgeOpts()
	o.BeforeCommit = func(ctx context.Context, attempt int) error {
		if attempt == 1 {
			s.Apply(opstest.Change(2, 40, "u", "revived", opstest.Now, 0))
		}
		return nil
	}
	res, err := tombstone.Purge(ctx, tbl, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.Rows != 1 || strings.Join(res.Keys, " ") != "id=3" {
		t.Fatalf("purge: attempts %d rows %d keys %v, want 2, 1, [id=3]", res.Attempts, res.Rows, res.Keys)
	}
	// The oracle: key 2 revived by the stream, key 3's old tombstone
	// purged, key 4's recent tombstone kept.
	want := []string{"1 a false", "2 revived false", "4 d true", "5 e false"}
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("table %v, want %v", got, want)
	}
	if got := opstest.DeltaRSRows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("delta-rs reads %v, want %v", got, want)
	}
	// The stream goes on after re-reading the table: no update is lost.
	s.Reopen()
	s.Apply(opstest.Change(1, 50, "u", "after", opstest.Now, 0))
	want[0] = "1 after false"
	if got := opstest.Rows(t, dir); !opstest.Same(got, want) {
		t.Fatalf("after the stream resumed: %v, want %v", got, want)
	}
	// The conflicted attempt's rewritten file was deleted: every data
	// file on disk belongs to some version.
	referenced := map[string]bool{}
	latest, _ := tbl.Snapshot(ctx)
	for v := int64(0); v <= latest.Version; v++ {
		snap, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range snap.Files() {
			referenced[a.Path] = true
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
	for _, f := range files {
		if !referenced[filepath.Base(f)] {
			t.Errorf("orphan %s left by the conflicted attempt", filepath.Base(f))
		}
	}
}

func TestReadStats(t *testing.T) {
	dir, _ := purgeTable(t)
	st, err := tombstone.ReadStats(context.Background(), delta.Open(storageAt(dir)), week, opstest.Now)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 5 || st.Tombstones != 3 || st.Eligible != 2 || st.EligibleFiles != 1 || st.HasHorizon ||
		st.OldestMicros != opstest.Now.Add(-9*24*time.Hour).UnixMicro() {
		t.Fatalf("stats %+v", st)
	}
}
