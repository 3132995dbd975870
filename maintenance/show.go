package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/datafile"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/tombstone"
)

// ShowOptions chooses what Show reads.
type ShowOptions struct {
	// Version is the version to read; negative means the latest, unless
	// ByTimestamp picks the latest version committed at or before Timestamp.
	Version     int64
	Timestamp   time.Time
	ByTimestamp bool
	// Where keeps rows whose column equals the value as printed (all
	// conditions must hold).
	Where map[string]string
	// Limit bounds the rows returned (0: all).
	Limit int
	// Live hides tombstones and the engine columns, as the current view does.
	Live bool
}

// Rows are rows of one version rendered as text.
type Rows struct {
	Version int64
	Columns []string
	// Values holds one slice per row; a nil entry is SQL NULL.
	Values [][]*string
	// Truncated is true when Limit stopped the read.
	Truncated bool
}

// Show reads a table's rows as of a version (time travel) for inspection.
// It reads the whole version's files: it is a debugging aid, not a query
// engine.
func Show(ctx context.Context, t *delta.Table, opts ShowOptions) (*Rows, error) {
	var snap *delta.Snapshot
	var err error
	switch {
	case opts.ByTimestamp:
		snap, err = t.SnapshotAsOf(ctx, opts.Timestamp)
	case opts.Version >= 0:
		snap, err = t.SnapshotAt(ctx, opts.Version)
	default:
		snap, err = t.Snapshot(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("show %s: %w", t.Location(), err)
	}
	layout, err := datafile.LayoutOf(&snap.Metadata)
	if err != nil {
		return nil, fmt.Errorf("show %s: %w", t.Location(), err)
	}
	out := &Rows{Version: snap.Version}
	var cols []int
	for i, f := range snap.Schema.Fields {
		if opts.Live && strings.HasPrefix(f.Name, tombstone.EnginePrefix) {
			continue
		}
		out.Columns = append(out.Columns, f.Name)
		cols = append(cols, i)
	}
	delIdx := -1
	where := map[int]string{}
	for i, f := range snap.Schema.Fields {
		if f.Name == tombstone.ColDeleted {
			delIdx = i
		}
		if v, ok := opts.Where[f.Name]; ok {
			where[i] = v
		}
	}
	for c := range opts.Where {
		if _, _, ok := snap.Schema.Field(c); !ok {
			return nil, fmt.Errorf("show %s: where: no column %q", t.Location(), c)
		}
	}
	if opts.Live && delIdx < 0 {
		return nil, fmt.Errorf("show %s: live rows need the %s column: not a cdcapply table", t.Location(), tombstone.ColDeleted)
	}
	for _, add := range snap.Files() {
		rec, err := datafile.Read(ctx, t.Storage(), layout, add)
		if errors.Is(err, storage.ErrNotExist) {
			// Say which files vacuum took, not just the first one hit.
			if missing, merr := delta.MissingFiles(ctx, t, snap); merr == nil && len(missing) > 0 {
				err = &delta.MissingFilesError{Table: t.Location(), Version: snap.Version, Files: missing}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("show %s version %d: %w", t.Location(), snap.Version, err)
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			if opts.Live {
				if d := rec.Column(delIdx); d.IsNull(r) || d.ValueStr(r) == "true" {
					continue
				}
			}
			match := true
			for c, v := range where {
				if col := rec.Column(c); col.IsNull(r) || col.ValueStr(r) != v {
					match = false
					break
				}
			}
			if !match {
				continue
			}
			if opts.Limit > 0 && len(out.Values) == opts.Limit {
				out.Truncated = true
				rec.Release()
				return out, nil
			}
			row := make([]*string, len(cols))
			for i, c := range cols {
				if col := rec.Column(c); !col.IsNull(r) {
					s := col.ValueStr(r)
					row[i] = &s
				}
			}
			out.Values = append(out.Values, row)
		}
		rec.Release()
	}
	return out, nil
}

// WriteTable prints the rows as an aligned text table, NULL for nulls.
func (r *Rows) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(r.Columns, "\t"))
	for _, row := range r.Values {
		cells := make([]string, len(row))
		for i, v := range row {
			if v == nil {
				cells[i] = "NULL"
			} else {
				cells[i] = *v
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write rows: %w", err)
	}
	return nil
}

// WriteJSON prints one JSON object per row, column names as keys and
// values as printed (null for nulls).
func (r *Rows) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, row := range r.Values {
		obj := make(map[string]*string, len(row))
		for i, v := range row {
			obj[r.Columns[i]] = v
		}
		if err := enc.Encode(obj); err != nil {
			return fmt.Errorf("write rows: %w", err)
		}
	}
	return nil
}
