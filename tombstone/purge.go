package tombstone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
)

// ErrTooRecent is wrapped when a purge is asked to take tombstones younger
// than the table's maximum lateness: a late change for such a key may
// still arrive, and without its tombstone it would resurrect the key.
var ErrTooRecent = errors.New("purge cut-off is within the maximum lateness")

// PurgeOptions configures Purge.
type PurgeOptions struct {
	// MaxLateness is the table's configured maximum lateness (apply's
	// max_lateness). Required: it is what makes a purge safe.
	MaxLateness time.Duration
	// OlderThan purges tombstones whose source commit time is older than
	// now minus OlderThan; zero means MaxLateness. A shorter value than
	// MaxLateness is refused with ErrTooRecent.
	OlderThan time.Duration
	// DryRun reports what would be purged and changes nothing.
	DryRun bool
	// MaxFiles and MaxRows bound one run (0: no bound). A run that stops
	// at a bound says so in PurgeResult.More.
	MaxFiles int
	MaxRows  int64
	// KeyColumns name the key columns for the reported keys; without them
	// the table's recorded key columns (cdcapply.keyColumns), else every
	// source column, are shown.
	KeyColumns []string
	// MaxKeys bounds how many keys the result lists (default 1000); the
	// count of rows is always complete.
	MaxKeys int
	// MaxAttempts bounds the attempts when a concurrent commit (the
	// stream) rewrote a file the purge rewrites (default 5).
	MaxAttempts int
	// Now replaces time.Now; tests use it.
	Now func() time.Time
	// Logger receives the audit line; slog.Default() when nil.
	Logger *slog.Logger
	// Progress, when set, is called after each data file is judged, with
	// the files read so far and the tombstones found so far in this attempt.
	Progress func(filesRead int, rows int64)
	// BeforeCommit, when set, runs after an attempt's files are written
	// and before its commit. Tests use it to land a concurrent commit at
	// exactly that point.
	BeforeCommit func(ctx context.Context, attempt int) error
}

// PurgeResult says what a purge did (or, dry, would do).
type PurgeResult struct {
	// Version is the committed version, -1 when nothing was committed.
	Version int64
	DryRun  bool
	// CutoffMicros is the source-time cut-off of this run; Horizon the
	// table's horizon after it.
	CutoffMicros int64
	Horizon      Horizon
	// Files are the data files holding purged tombstones; Rows the
	// tombstones purged; Keys the purged keys (at most MaxKeys).
	Files []string
	Rows  int64
	Keys  []string
	// More is true when a bound stopped the run before every eligible
	// tombstone was taken.
	More bool
	// Attempts counts commit attempts (more than one after conflicts).
	Attempts int
}

// Purge removes the tombstones (rows with _cdc_deleted = true) whose
// _cdc_source_ts is older than the cut-off, copy-on-write: each file
// holding such rows is rewritten without them (removes and adds with
// dataChange=true), in one commit (operation DELETE) that also moves the
// purge horizon forward. A row without a source time is never purged.
//
// The stream may commit while a purge runs. Every file the purge rewrites
// is removed by its commit, so a stream commit that rewrote the same file
// (a revived key, an update of a neighbour) makes the purge's commit
// conflict; the purge then starts over from a fresh snapshot, where the
// revived key is no longer a tombstone. The purge never conflicts the
// other way round unless it landed first, and then the stream re-reads.
func Purge(ctx context.Context, t *delta.Table, opts PurgeOptions) (*PurgeResult, error) {
	if opts.MaxLateness <= 0 {
		return nil, fmt.Errorf("purge tombstones of %s: the table's maximum lateness is required", t.Location())
	}
	olderThan := opts.OlderThan
	if olderThan == 0 {
		olderThan = opts.MaxLateness
	}
	if olderThan < opts.MaxLateness {
		return nil, fmt.Errorf("purge tombstones of %s: older than %s is within the table's maximum lateness %s: %w",
			t.Location(), olderThan, opts.MaxLateness, ErrTooRecent)
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1000
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var lastErr error
	for attempt := 1; attempt <= opts.MaxAttempts; attempt++ {
		res, err := purgeOnce(ctx, t, opts, now(), olderThan, attempt)
		if err == nil {
			if res.Version >= 0 {
				log.Info("tombstone purge", "table", t.Location(), "version", res.Version, "files", len(res.Files),
					"rows", res.Rows, "horizonSourceTsMicros", res.Horizon.SourceTsMicros, "more", res.More, "attempts", attempt)
			} else {
				log.Info("tombstone purge", "table", t.Location(), "dryRun", res.DryRun, "files", len(res.Files), "rows", res.Rows,
					"cutoffSourceTsMicros", res.CutoffMicros, "more", res.More)
			}
			return res, nil
		}
		if !errors.Is(err, delta.ErrConflict) {
			return nil, err
		}
		lastErr = err
		log.Info("tombstone purge conflicted, retrying on a fresh snapshot", "table", t.Location(), "attempt", attempt, "error", err.Error())
	}
	return nil, fmt.Errorf("purge tombstones of %s: gave up after %d attempts: %w", t.Location(), opts.MaxAttempts, lastErr)
}

// purgeOnce is one attempt on the latest snapshot.
func purgeOnce(ctx context.Context, t *delta.Table, opts PurgeOptions, now time.Time, olderThan time.Duration, attempt int) (*PurgeResult, error) {
	loc := t.Location()
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
	}
	layout, err := checkLayout(snap)
	if err != nil {
		return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
	}
	cutoff := now.Add(-olderThan).UnixMicro()
	res := &PurgeResult{Version: -1, DryRun: opts.DryRun, CutoffMicros: cutoff, Attempts: attempt}
	old, had, err := ReadHorizon(snap)
	if err != nil {
		return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
	}
	keyCols := opts.KeyColumns
	if len(keyCols) == 0 {
		keyCols = keyColumnsOf(snap)
	}
	tx := t.Begin(snap)
	var written []string
	read := 0
	cleanup := func() {
		// Files of an attempt that did not commit are never referenced:
		// delete them now rather than leave them to vacuum.
		for _, p := range written {
			_ = t.Storage().Delete(context.WithoutCancel(ctx), p)
		}
	}
	for _, add := range snap.Files() {
		if opts.MaxFiles > 0 && len(res.Files) >= opts.MaxFiles {
			res.More = true
			break
		}
		if opts.MaxRows > 0 && res.Rows >= opts.MaxRows {
			res.More = true
			break
		}
		if !mayHoldOldTombstones(add, cutoff) {
			continue
		}
		rec, err := datafile.Read(ctx, t.Storage(), layout, add)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
		}
		purge, more := purgeableRows(rec, cutoff, opts.MaxRows-res.Rows, opts.MaxRows > 0)
		res.More = res.More || more
		read++
		if opts.Progress != nil {
			opts.Progress(read, res.Rows+int64(len(purge)))
		}
		if len(purge) == 0 {
			rec.Release()
			continue
		}
		res.Files = append(res.Files, add.Path)
		res.Rows += int64(len(purge))
		for _, r := range purge {
			if len(res.Keys) < opts.MaxKeys {
				res.Keys = append(res.Keys, renderKey(rec, keyCols, r))
			}
		}
		if opts.DryRun {
			rec.Release()
			continue
		}
		kept, err := dropRows(rec, purge)
		rec.Release()
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("purge tombstones of %s: rewrite %s: %w", loc, add.Path, err)
		}
		tx.RemoveFile(add, true)
		if kept.NumRows() > 0 {
			na, err := datafile.Write(ctx, t.Storage(), layout, kept, add.PartitionValues)
			kept.Release()
			if err != nil {
				cleanup()
				return nil, fmt.Errorf("purge tombstones of %s: rewrite %s: %w", loc, add.Path, err)
			}
			p, _, _ := delta.DecodePath(na.Path)
			written = append(written, p)
			tx.Add(na)
		} else {
			kept.Release()
		}
	}
	res.Horizon = old
	if opts.DryRun || res.Rows == 0 {
		return res, nil
	}
	h := Horizon{SourceTsMicros: max(old.SourceTsMicros, cutoff), PurgedAtMillis: now.UnixMilli(), PurgedRows: old.PurgedRows + res.Rows}
	if !had {
		h.SourceTsMicros = cutoff
	}
	dm, err := h.domain()
	if err != nil {
		cleanup()
		return nil, err
	}
	p, changed, err := withDomainMetadata(snap.Protocol)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
	}
	if changed {
		tx.SetProtocol(p)
	}
	tx.SetDomain(dm)
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(ctx, attempt); err != nil {
			cleanup()
			return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
		}
	}
	predicate := fmt.Sprintf("%s = true AND %s < TIMESTAMP '%s'", ColDeleted, ColSourceTs,
		time.UnixMicro(cutoff).UTC().Format("2006-01-02 15:04:05.000000"))
	c, err := tx.Commit(ctx, "DELETE", map[string]any{
		"predicate": predicate, "numDeletedRows": res.Rows, "numRemovedFiles": len(res.Files), "numAddedFiles": len(written),
		"horizonSourceTsMicros": h.SourceTsMicros, "maxLatenessMillis": opts.MaxLateness.Milliseconds(), "olderThanMillis": olderThan.Milliseconds(),
		"more": res.More,
	})
	if err != nil {
		if !errors.Is(err, delta.ErrCommitUnknown) {
			cleanup()
		}
		return nil, fmt.Errorf("purge tombstones of %s: %w", loc, err)
	}
	res.Version, res.Horizon = c.Version, h
	return res, nil
}

// checkLayout refuses tables purge cannot rewrite and returns the data
// file layout.
func checkLayout(snap *delta.Snapshot) (datafile.Layout, error) {
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return layout, err
	}
	if len(layout.PartitionColumns) > 0 {
		return layout, fmt.Errorf("partitioned tables are not cdcapply tables (partition columns %v)", layout.PartitionColumns)
	}
	if f, _, ok := snap.Schema.Field(ColDeleted); !ok || f.Type.String() != delta.Boolean.String() {
		return layout, fmt.Errorf("the table has no boolean %s column: not a cdcapply table", ColDeleted)
	}
	if f, _, ok := snap.Schema.Field(ColSourceTs); !ok || f.Type.String() != delta.Timestamp.String() {
		return layout, fmt.Errorf("the table has no timestamp %s column: not a cdcapply table", ColSourceTs)
	}
	return layout, nil
}

// SourceColumns returns the table's source columns (every column not
// named with the engine prefix), in schema order.
func SourceColumns(st delta.StructType) []string {
	var out []string
	for _, f := range st.Fields {
		if !strings.HasPrefix(f.Name, EnginePrefix) {
			out = append(out, f.Name)
		}
	}
	return out
}

// mayHoldOldTombstones skips files by their statistics: when the smallest
// source time is at or after the cut-off (or no row is deleted), no row
// can be purged. Missing or unreadable statistics mean "read the file".
func mayHoldOldTombstones(add *delta.Add, cutoffMicros int64) bool {
	if add.Stats == "" {
		return true
	}
	var st struct {
		MinValues map[string]any `json:"minValues"`
		MaxValues map[string]any `json:"maxValues"`
	}
	if err := json.Unmarshal([]byte(add.Stats), &st); err != nil {
		return true
	}
	if v, ok := st.MaxValues[ColDeleted].(bool); ok && !v {
		return false
	}
	if s, ok := st.MinValues[ColSourceTs].(string); ok {
		// Stats keep milliseconds, truncated: the true minimum is at or
		// after this one.
		if ts, err := time.Parse(time.RFC3339Nano, s); err == nil && ts.UnixMicro() >= cutoffMicros {
			return false
		}
	}
	return true
}

// purgeableRows returns the rows of rec that are tombstones older than the
// cut-off, at most budget of them when bounded, and whether more were left.
func purgeableRows(rec arrow.RecordBatch, cutoffMicros, budget int64, bounded bool) ([]int, bool) {
	del := column(rec, ColDeleted).(*array.Boolean)
	ts := column(rec, ColSourceTs).(*array.Timestamp)
	var out []int
	for r := 0; r < int(rec.NumRows()); r++ {
		if del.IsNull(r) || !del.Value(r) || ts.IsNull(r) || int64(ts.Value(r)) >= cutoffMicros {
			continue
		}
		if bounded && int64(len(out)) >= budget {
			return out, true
		}
		out = append(out, r)
	}
	return out, false
}

func column(rec arrow.RecordBatch, name string) arrow.Array {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return nil
	}
	return rec.Column(idx[0])
}

// renderKey shows a row's key as col=value pairs.
func renderKey(rec arrow.RecordBatch, cols []string, r int) string {
	parts := make([]string, 0, len(cols))
	for _, c := range cols {
		a := column(rec, c)
		if a == nil {
			continue
		}
		v := "NULL"
		if !a.IsNull(r) {
			v = a.ValueStr(r)
		}
		parts = append(parts, c+"="+v)
	}
	return strings.Join(parts, ",")
}

// dropRows returns rec without the rows at the sorted indexes drop, the
// kept rows in their order, as slices of the original columns joined.
func dropRows(rec arrow.RecordBatch, drop []int) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	type run struct{ from, to int }
	var runs []run
	start := 0
	for _, d := range drop {
		if d > start {
			runs = append(runs, run{start, d})
		}
		start = d + 1
	}
	if start < n {
		runs = append(runs, run{start, n})
	}
	kept := 0
	for _, r := range runs {
		kept += r.to - r.from
	}
	cols := make([]arrow.Array, rec.NumCols())
	for c := range cols {
		col := rec.Column(c)
		if len(runs) == 0 {
			cols[c] = array.MakeArrayOfNull(memory.DefaultAllocator, col.DataType(), 0)
			continue
		}
		parts := make([]arrow.Array, len(runs))
		for i, r := range runs {
			parts[i] = array.NewSlice(col, int64(r.from), int64(r.to))
		}
		joined, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			for _, done := range cols[:c] {
				done.Release()
			}
			return nil, fmt.Errorf("drop rows of column %s: %w", rec.Schema().Field(c).Name, err)
		}
		cols[c] = joined
	}
	out := array.NewRecordBatch(rec.Schema(), cols, int64(kept))
	for _, c := range cols {
		c.Release()
	}
	return out, nil
}

// keyColumnsProperty is the table property where the apply engine records
// a table's key columns (a JSON array of names).
const keyColumnsProperty = "cdcapply.keyColumns"

// keyColumnsOf returns the table's recorded key columns, or every source
// column when none are recorded (or the record is unreadable: the keys
// are only reported, never used to decide what is purged).
func keyColumnsOf(snap *delta.Snapshot) []string {
	var keys []string
	if v, ok := snap.Metadata.Configuration[keyColumnsProperty]; ok && json.Unmarshal([]byte(v), &keys) == nil && len(keys) > 0 {
		return keys
	}
	return SourceColumns(snap.Schema)
}
