package delta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/google/uuid"
)

// ErrRetentionTooShort is wrapped when Vacuum is asked for a retention
// shorter than the table's delta.deletedFileRetentionDuration without
// Force: files younger than that may still be read by time travel or by a
// writer whose commit has not landed yet.
var ErrRetentionTooShort = errors.New("vacuum retention shorter than the table's")

// VacuumOptions configures Vacuum.
type VacuumOptions struct {
	// Retention overrides the table's delta.deletedFileRetentionDuration
	// (default 7 days) when not nil. A shorter retention than the table's
	// is refused unless Force is set.
	Retention *time.Duration
	// Force allows a retention shorter than the table's.
	Force bool
	// DryRun lists what would be deleted and deletes nothing.
	DryRun bool
	// Progress, when set, is called after every listed file is judged and
	// after every deletion.
	Progress func(VacuumProgress)
	// Logger receives the audit line; slog.Default() when nil.
	Logger *slog.Logger
	// Now replaces time.Now; tests use it.
	Now func() time.Time
}

// VacuumProgress counts a running vacuum's work so far.
type VacuumProgress struct {
	Scanned, Candidates, Deleted int
}

// VacuumResult is what a vacuum did (or, dry, would do).
type VacuumResult struct {
	// Version is the snapshot version whose references were kept.
	Version   int64
	Retention time.Duration
	DryRun    bool
	// Scanned counts the files listed outside the log.
	Scanned int
	// Files are the paths deleted (or to delete), relative to the root.
	Files []string
	// Bytes is their total size.
	Bytes int64
	// Deleted counts the files actually deleted (0 on a dry run).
	Deleted int
	// AuditVersion is the version of the VACUUM END commit that records a
	// vacuum which deleted files, -1 when none was written.
	AuditVersion int64
}

// Vacuum deletes the files under the table root that the latest snapshot
// no longer needs and that are older than the retention:
//
//   - a live file (add) and its deletion vector are always kept;
//   - a removed file is kept while its remove is younger than the retention,
//     so time travel to a version within the retention still finds it;
//   - any other file (a data file of a commit that never landed, a
//     temporary file of a crashed write, a removed file whose tombstone
//     expired) is deleted once its modification time is older than the
//     retention: a younger one may belong to a commit being written now.
//
// The log folder is never touched (log cleanup owns it), nor are other
// hidden paths (a component starting with "_" or "."), except storage's
// temporary files. A vacuum that deleted files writes one VACUUM END
// commit without data actions that records its counts, so the table's
// history shows when old versions stopped being restorable.
func Vacuum(ctx context.Context, t *Table, opts VacuumOptions) (*VacuumResult, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("vacuum table %s: %w", t.Location(), err)
	}
	tableRet, err := tableDuration(snap.Metadata.Configuration, propDeletedFileRetention, defaultDeletedFileRetention)
	if err != nil {
		return nil, fmt.Errorf("vacuum table %s: %w", t.Location(), err)
	}
	ret := tableRet
	if opts.Retention != nil {
		ret = *opts.Retention
	}
	if ret < 0 {
		return nil, fmt.Errorf("vacuum table %s: negative retention %s", t.Location(), ret)
	}
	if ret < tableRet && !opts.Force {
		return nil, fmt.Errorf("vacuum table %s: retention %s is shorter than the table's %s (%s): %w; force it only when no reader or writer needs older files",
			t.Location(), ret, tableRet, propDeletedFileRetention, ErrRetentionTooShort)
	}
	cutoff := now().Add(-ret)
	keep, err := referencedFiles(ctx, snap, true, cutoff.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("vacuum table %s: %w", t.Location(), err)
	}
	infos, err := t.store.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("vacuum table %s: %w", t.Location(), err)
	}
	res := &VacuumResult{Version: snap.Version, Retention: ret, DryRun: opts.DryRun, AuditVersion: -1}
	var prog VacuumProgress
	report := func() {
		if opts.Progress != nil {
			opts.Progress(prog)
		}
	}
	for _, fi := range infos {
		if vacuumSkips(fi.Path) {
			continue
		}
		prog.Scanned++
		if !keep[fi.Path] && fi.ModTime.Before(cutoff) {
			res.Files = append(res.Files, fi.Path)
			res.Bytes += fi.Size
			prog.Candidates++
		}
		report()
	}
	res.Scanned = prog.Scanned
	if opts.DryRun {
		log.Info("vacuum dry run", "table", t.Location(), "version", snap.Version, "retention", ret.String(),
			"scanned", res.Scanned, "files", len(res.Files), "bytes", res.Bytes)
		return res, nil
	}
	for _, p := range res.Files {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("vacuum table %s: stopped after %d of %d files: %w", t.Location(), res.Deleted, len(res.Files), err)
		}
		if err := t.store.Delete(ctx, p); err != nil {
			return res, fmt.Errorf("vacuum table %s: after %d of %d files: %w", t.Location(), res.Deleted, len(res.Files), err)
		}
		res.Deleted++
		prog.Deleted++
		report()
	}
	if res.Deleted > 0 {
		// A commit with only commitInfo conflicts with nothing; it makes
		// the history say from when versions before this one lost files.
		tx := t.Begin(snap)
		c, err := tx.Commit(ctx, "VACUUM END", map[string]any{
			"status": "COMPLETED", "retentionMillis": ret.Milliseconds(), "force": opts.Force,
			"numDeletedFiles": res.Deleted, "numDeletedBytes": res.Bytes, "keptReferencesOfVersion": snap.Version,
		})
		if err != nil {
			return res, fmt.Errorf("vacuum table %s: deleted %d files, then recording it: %w", t.Location(), res.Deleted, err)
		}
		res.AuditVersion = c.Version
	}
	log.Info("vacuum", "table", t.Location(), "version", snap.Version, "auditVersion", res.AuditVersion,
		"retention", ret.String(), "force", opts.Force, "scanned", res.Scanned, "deleted", res.Deleted, "bytes", res.Bytes)
	return res, nil
}

// vacuumSkips reports whether a listed path is outside vacuum's reach: the
// log, and hidden files and folders other than storage's temporary files.
func vacuumSkips(p string) bool {
	if p == LogDir || strings.HasPrefix(p, LogDir+"/") {
		return true
	}
	if strings.HasPrefix(path.Base(p), storage.TempPrefix) {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if strings.HasPrefix(c, "_") || strings.HasPrefix(c, ".") {
			return true
		}
	}
	return false
}

// referencedFiles returns the relative paths the snapshot still needs:
// every live file and its deletion vector, and with tombstones every
// removed file (and deletion vector) whose remove is not older than
// cutoffMillis. A remove without a deletion timestamp is kept: its age is
// unknown.
func referencedFiles(ctx context.Context, snap *Snapshot, tombstones bool, cutoffMillis int64) (map[string]bool, error) {
	keep := map[string]bool{}
	add := func(uri string, dv *DeletionVector) error {
		p, abs, err := DecodePath(uri)
		if err != nil {
			return err
		}
		if !abs {
			keep[p] = true
		}
		if dv != nil && dv.StorageType == "u" {
			dp, err := dvRelativePath(dv.PathOrInlineDv)
			if err != nil {
				return err
			}
			keep[dp] = true
		}
		return nil
	}
	var err error
	snap.rangeFiles(func(a *Add) bool {
		err = add(a.Path, a.DeletionVector)
		return err == nil
	})
	if err != nil || !tombstones {
		return keep, err
	}
	rerr := snap.rangeTombstones(ctx, func(r *Remove) bool {
		if r.DeletionTimestamp == nil || *r.DeletionTimestamp >= cutoffMillis {
			err = add(r.Path, r.DeletionVector)
		}
		return err == nil
	})
	if err == nil {
		err = rerr
	}
	return keep, err
}

// dvRelativePath is the file of a relative ("u") deletion vector: the
// random prefix as a folder, then deletion_vector_<uuid>.bin with the UUID
// Z85-decoded from the last 20 characters. Package dv has the same rule
// for reading; it imports this package, so vacuum carries its own copy
// (checked against dv's in the tests).
func dvRelativePath(s string) (string, error) {
	const z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
	if len(s) < 20 {
		return "", fmt.Errorf("derive deletion vector path: %q is shorter than a Z85 UUID", s)
	}
	prefix, enc := s[:len(s)-20], s[len(s)-20:]
	raw := make([]byte, 0, 16)
	for i := 0; i < 20; i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := strings.IndexByte(z85, enc[i+j])
			if d < 0 {
				return "", fmt.Errorf("derive deletion vector path: invalid Z85 character %q", enc[i+j])
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return "", fmt.Errorf("derive deletion vector path: Z85 group %q overflows", enc[i:i+5])
		}
		raw = append(raw, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	id, err := uuid.FromBytes(raw)
	if err != nil {
		return "", fmt.Errorf("derive deletion vector path: %w", err)
	}
	name := "deletion_vector_" + id.String() + ".bin"
	if prefix == "" {
		return name, nil
	}
	return path.Join(prefix, name), nil
}

// Storage returns the storage the table is read and written through, for
// maintenance that rewrites data files (purge, compaction) next to it.
func (t *Table) Storage() storage.Storage { return t.store }
