// Package maintenance holds the table operations that keep a cdcapply
// table healthy and inspectable next to the running stream: compaction
// (Optimize), time-travel reads (Show) and the current-view DDL (ViewDDL).
// Vacuum and restore are Delta operations and live in package delta;
// tombstone purges live in package tombstone.
package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
)

// OptimizeOptions configures Optimize.
type OptimizeOptions struct {
	// TargetSize is the size compacted files aim at; files smaller than
	// it are candidates (default 128 MiB).
	TargetSize int64
	// MinFiles is the fewest small files worth rewriting as one (default 2).
	MinFiles int
	// DeletedRatio rewrites a file on its own when its deletion vector
	// hides at least this share of its rows (default 0.2; negative: never).
	DeletedRatio float64
	// MaxAttempts bounds the attempts when the stream rewrote a file being
	// compacted (default 3). Compaction is never urgent: giving up leaves
	// the table as it was.
	MaxAttempts int
	// DryRun reports the groups without writing anything.
	DryRun bool
	// Logger receives the audit line; slog.Default() when nil.
	Logger *slog.Logger
	// Progress, when set, is called after each group is written, with the
	// groups done and the files compacted so far in this attempt.
	Progress func(groups, files int)
	// BeforeCommit, when set, runs after an attempt's files are written
	// and before its commit; tests land a concurrent commit there.
	BeforeCommit func(ctx context.Context, attempt int) error
}

// OptimizeResult says what a compaction did (or, dry, would do).
type OptimizeResult struct {
	// Version is the committed version, -1 when nothing was committed.
	Version int64
	// Groups are the sets of files rewritten as one, by path.
	Groups                   [][]string
	FilesRemoved, FilesAdded int
	BytesRemoved, BytesAdded int64
	Rows                     int64
	Attempts                 int
}

// Optimize compacts small files (and files whose deletion vectors hide
// many rows) into files near TargetSize, in one commit (operation
// OPTIMIZE) whose removes and adds carry dataChange=false: the rows are
// the same, only their files change, so readers of the change feed and
// the stream's conflict checks see no data change. A concurrent commit
// that only adds files (the stream inserting new keys) never conflicts
// with it; one that rewrote a file being compacted (the stream updating a
// key in it) does, and the compaction starts over on a fresh snapshot, at
// most MaxAttempts times.
func Optimize(ctx context.Context, t *delta.Table, opts OptimizeOptions) (*OptimizeResult, error) {
	if opts.TargetSize <= 0 {
		opts.TargetSize = 128 << 20
	}
	if opts.MinFiles <= 1 {
		opts.MinFiles = 2
	}
	if opts.DeletedRatio == 0 {
		opts.DeletedRatio = 0.2
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var lastErr error
	for attempt := 1; attempt <= opts.MaxAttempts; attempt++ {
		res, err := optimizeOnce(ctx, t, opts, attempt)
		if err == nil {
			log.Info("optimize", "table", t.Location(), "version", res.Version, "dryRun", opts.DryRun, "groups", len(res.Groups),
				"filesRemoved", res.FilesRemoved, "filesAdded", res.FilesAdded, "rows", res.Rows, "attempts", attempt)
			return res, nil
		}
		if !errors.Is(err, delta.ErrConflict) {
			return nil, err
		}
		lastErr = err
		log.Info("optimize conflicted with a concurrent rewrite, retrying", "table", t.Location(), "attempt", attempt, "error", err.Error())
	}
	return nil, fmt.Errorf("optimize %s: gave up after %d attempts: %w", t.Location(), opts.MaxAttempts, lastErr)
}

func optimizeOnce(ctx context.Context, t *delta.Table, opts OptimizeOptions, attempt int) (*OptimizeResult, error) {
	loc := t.Location()
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("optimize %s: %w", loc, err)
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return nil, fmt.Errorf("optimize %s: %w", loc, err)
	}
	if len(layout.PartitionColumns) > 0 {
		return nil, fmt.Errorf("optimize %s: partitioned tables are not supported (partition columns %v)", loc, layout.PartitionColumns)
	}
	res := &OptimizeResult{Version: -1, Attempts: attempt}
	res.Groups = planGroups(snap.Files(), opts)
	if opts.DryRun || len(res.Groups) == 0 {
		for _, g := range res.Groups {
			res.FilesRemoved += len(g)
		}
		return res, nil
	}
	tx := t.Begin(snap)
	var written []string
	cleanup := func() {
		for _, p := range written {
			_ = t.Storage().Delete(context.WithoutCancel(ctx), p)
		}
	}
	for gi, g := range res.Groups {
		recs := make([]arrow.RecordBatch, 0, len(g))
		release := func() {
			for _, r := range recs {
				r.Release()
			}
		}
		for _, p := range g {
			add, _ := snap.File(delta.FileKey{Path: p})
			if add == nil {
				// planGroups names files without deletion vectors by path
				// only; find the one with a vector by scanning.
				add = findFile(snap, p)
			}
			rec, err := datafile.Read(ctx, t.Storage(), layout, add)
			if err != nil {
				release()
				cleanup()
				return nil, fmt.Errorf("optimize %s: %w", loc, err)
			}
			recs = append(recs, rec)
			tx.RemoveFile(add, false)
			res.FilesRemoved++
			res.BytesRemoved += add.Size
		}
		joined, err := concatRecords(recs)
		release()
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("optimize %s: %w", loc, err)
		}
		res.Rows += joined.NumRows()
		if joined.NumRows() == 0 {
			joined.Release()
			continue
		}
		na, err := datafile.Write(ctx, t.Storage(), layout, joined, map[string]*string{})
		joined.Release()
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("optimize %s: %w", loc, err)
		}
		p, _, _ := delta.DecodePath(na.Path)
		written = append(written, p)
		na.DataChange = false
		tx.Add(na)
		res.FilesAdded++
		res.BytesAdded += na.Size
		if opts.Progress != nil {
			opts.Progress(gi+1, res.FilesRemoved)
		}
	}
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(ctx, attempt); err != nil {
			cleanup()
			return nil, fmt.Errorf("optimize %s: %w", loc, err)
		}
	}
	c, err := tx.Commit(ctx, "OPTIMIZE", map[string]any{
		"predicate": "[]", "zOrderBy": "[]", "targetSize": opts.TargetSize,
		"numRemovedFiles": res.FilesRemoved, "numAddedFiles": res.FilesAdded, "numRemovedBytes": res.BytesRemoved,
		"numAddedBytes": res.BytesAdded, "numRows": res.Rows,
	})
	if err != nil {
		if !errors.Is(err, delta.ErrCommitUnknown) {
			cleanup()
		}
		return nil, fmt.Errorf("optimize %s: %w", loc, err)
	}
	res.Version = c.Version
	return res, nil
}

func findFile(snap *delta.Snapshot, p string) *delta.Add {
	for _, a := range snap.Files() {
		if a.Path == p {
			return a
		}
	}
	return nil
}

// planGroups bins the candidate files, oldest first so compaction follows
// the order rows arrived in, into groups up to the target size. Small
// files are grouped whether or not deletion vectors hide rows of them
// (the rewrite drops those rows either way); a group of one small file is
// left alone (rewriting it gains nothing) unless its deletion vector hides
// at least DeletedRatio of its rows, and so is a large file below that
// ratio. Merge-on-read tables thus keep both bounded: the stream's
// one-file-per-batch output is compacted as small files, and a large file
// is rewritten once its vector hides enough of it.
func planGroups(files []*delta.Add, opts OptimizeOptions) [][]string {
	var small, alone []*delta.Add
	heavy := func(a *delta.Add) bool { return opts.DeletedRatio > 0 && deletedShare(a) >= opts.DeletedRatio }
	for _, a := range files {
		switch {
		case a.Size < opts.TargetSize:
			small = append(small, a)
		case heavy(a):
			alone = append(alone, a)
		}
	}
	sort.SliceStable(small, func(i, j int) bool {
		if small[i].ModificationTime != small[j].ModificationTime {
			return small[i].ModificationTime < small[j].ModificationTime
		}
		return small[i].Path < small[j].Path
	})
	var groups [][]string
	var cur []*delta.Add
	var size int64
	flush := func() {
		if len(cur) >= opts.MinFiles {
			g := make([]string, len(cur))
			for i, a := range cur {
				g[i] = a.Path
			}
			groups = append(groups, g)
		} else {
			for _, a := range cur {
				if heavy(a) {
					alone = append(alone, a)
				}
			}
		}
		cur, size = nil, 0
	}
	for _, a := range small {
		if len(cur) > 0 && size+a.Size > opts.TargetSize {
			flush()
		}
		cur = append(cur, a)
		size += a.Size
	}
	flush()
	for _, a := range alone {
		groups = append(groups, []string{a.Path})
	}
	return groups
}

// deletedShare is the share of a file's rows its deletion vector hides,
// from the file's statistics; 0 without a vector or statistics.
func deletedShare(a *delta.Add) float64 {
	if a.DeletionVector == nil || a.Stats == "" {
		return 0
	}
	var st struct {
		NumRecords int64 `json:"numRecords"`
	}
	if err := json.Unmarshal([]byte(a.Stats), &st); err != nil || st.NumRecords == 0 {
		return 0
	}
	return float64(a.DeletionVector.Cardinality) / float64(st.NumRecords)
}

// concatRecords joins records of one schema into one, column by column.
func concatRecords(recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	sch := recs[0].Schema()
	cols := make([]arrow.Array, sch.NumFields())
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	for c := range cols {
		parts := make([]arrow.Array, len(recs))
		for i, r := range recs {
			parts[i] = r.Column(c)
		}
		joined, err := array.Concatenate(parts, memory.DefaultAllocator)
		if err != nil {
			for _, done := range cols[:c] {
				done.Release()
			}
			return nil, fmt.Errorf("join column %s: %w", sch.Field(c).Name, err)
		}
		cols[c] = joined
	}
	out := array.NewRecordBatch(sch, cols, rows)
	for _, c := range cols {
		c.Release()
	}
	return out, nil
}
