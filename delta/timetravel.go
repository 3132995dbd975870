package delta

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// SnapshotAsOf returns the table at the latest version whose commit time is
// at or before ts (time travel by timestamp). A ts before the earliest
// version the log can still reconstruct is ErrVersionNotFound; a ts after
// the latest commit yields the latest version.
func (t *Table) SnapshotAsOf(ctx context.Context, ts time.Time) (*Snapshot, error) {
	l, err := t.listLog(ctx)
	if err != nil {
		return nil, err
	}
	v, err := t.versionAsOf(ctx, l, ts.UnixMilli())
	if err != nil {
		return nil, err
	}
	return t.loadFrom(ctx, l, v)
}

// VersionAsOf returns the version SnapshotAsOf(ts) would load.
func (t *Table) VersionAsOf(ctx context.Context, ts time.Time) (int64, error) {
	l, err := t.listLog(ctx)
	if err != nil {
		return 0, err
	}
	return t.versionAsOf(ctx, l, ts.UnixMilli())
}

func (t *Table) versionAsOf(ctx context.Context, l *logListing, ms int64) (int64, error) {
	if l.empty() {
		return 0, errorf(t, ErrNoTable, "find version as of %s: no commits or checkpoints under %s", msTime(ms), LogDir)
	}
	ict, from, err := t.latestInCommitTimestamps(ctx, l)
	if err != nil {
		return 0, err
	}
	// The oldest version still reconstructable: version 0 while its commit
	// is listed, else the oldest checkpoint.
	earliest := int64(-1)
	if _, ok := l.commits[0]; ok {
		earliest = 0
	} else {
		for v := range l.ckpts {
			if earliest < 0 || v < earliest {
				earliest = v
			}
		}
	}
	if earliest < 0 {
		return 0, errorf(t, ErrVersionNotFound, "find version as of %s: no version can be reconstructed", msTime(ms))
	}
	// Versions with a listed commit from earliest on, in order; their
	// times are monotonic (commitTime makes file times so; in-commit
	// timestamps are so by the protocol), so a binary search applies.
	var versions []int64
	for v := earliest; v <= l.latest; v++ {
		if _, ok := l.commits[v]; ok {
			versions = append(versions, v)
		}
	}
	var searchErr error
	timeOf := func(v int64) int64 {
		if ict && v >= from {
			actions, err := t.readCommit(ctx, v)
			if err != nil {
				searchErr = err
				return 0
			}
			if ci := firstCommitInfo(actions); ci != nil && ci.InCommitTimestamp != nil {
				return *ci.InCommitTimestamp
			}
			searchErr = fmt.Errorf("find version as of %s in table %s: commit %d has no in-commit timestamp", msTime(ms), t.Location(), v)
			return 0
		}
		ts, _ := l.commitTime(v)
		return ts
	}
	// i is the first version whose time is after ms.
	i := sort.Search(len(versions), func(i int) bool {
		if searchErr != nil {
			return true
		}
		return timeOf(versions[i]) > ms
	})
	if searchErr != nil {
		return 0, searchErr
	}
	if i == 0 {
		if len(versions) == 0 || versions[0] != earliest {
			// Only a checkpoint holds the earliest version: its time is the
			// checkpoint file's.
			if c := l.ckpts[earliest]; len(c) > 0 && c[0].modTime.UnixMilli() <= ms {
				return earliest, nil
			}
		}
		first := earliest
		if len(versions) > 0 {
			first = versions[0]
		}
		return 0, errorf(t, ErrVersionNotFound, "find version as of %s: before the earliest available commit (version %d)", msTime(ms), first)
	}
	return versions[i-1], nil
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// latestInCommitTimestamps reports whether the latest version has in-commit
// timestamps and from which version. While they are on, every commit must
// carry one, so a latest commit without one settles it with a single read;
// only otherwise is the latest snapshot loaded for its protocol and
// metadata.
func (t *Table) latestInCommitTimestamps(ctx context.Context, l *logListing) (bool, int64, error) {
	if _, ok := l.commits[l.latest]; ok {
		actions, err := t.readCommit(ctx, l.latest)
		if err != nil {
			return false, 0, err
		}
		if ci := firstCommitInfo(actions); ci == nil || ci.InCommitTimestamp == nil {
			return false, 0, nil
		}
	}
	latest, err := t.loadFrom(ctx, l, -1)
	if err != nil {
		return false, 0, err
	}
	ict, from := inCommitTimestamps(latest.Protocol, latest.Metadata)
	return ict, from, nil
}
