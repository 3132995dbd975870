package delta

import (
	"sort"
)

// LogDir is the name of the transaction log folder under a table root.
const LogDir = "_delta_log"

// Snapshot is the state of a table at one version: what log replay yields.
// A Snapshot is immutable once built and safe to share between goroutines.
type Snapshot struct {
	// Version is the table version this snapshot reflects.
	Version int64
	// Timestamp is the commit time of Version in Unix milliseconds (the
	// in-commit timestamp when the table has one, else the commit file's
	// modification time).
	Timestamp int64
	Protocol  Protocol
	Metadata  Metadata
	// Schema is Metadata's parsed schema.
	Schema StructType

	// files are the live add actions keyed by (path, deletion vector id).
	files map[FileKey]*Add
	// tombstones are the remove actions still kept (for checkpoints and vacuum).
	tombstones map[FileKey]*Remove
	// txns holds the latest txn action per appId.
	txns map[string]Txn
	// domains holds the live (not removed) domain metadata per domain.
	domains map[string]DomainMetadata
	// checkpointVersion is the version of the checkpoint replay started
	// from, or -1 when it replayed JSON commits only.
	checkpointVersion int64
}

// Files returns the live add actions sorted by path. The slice is new; the
// actions are shared and must not be modified.
func (s *Snapshot) Files() []*Add {
	out := make([]*Add, 0, len(s.files))
	for _, a := range s.files {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].DeletionVector.UniqueID() < out[j].DeletionVector.UniqueID()
	})
	return out
}

// NumFiles returns the number of live data files.
func (s *Snapshot) NumFiles() int { return len(s.files) }

// File returns the live add action for a key.
func (s *Snapshot) File(k FileKey) (*Add, bool) {
	a, ok := s.files[k]
	return a, ok
}

// Tombstones returns the remove actions kept in the snapshot, sorted by path.
func (s *Snapshot) Tombstones() []*Remove {
	out := make([]*Remove, 0, len(s.tombstones))
	for _, r := range s.tombstones {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Txn returns the latest txn action of appID.
func (s *Snapshot) Txn(appID string) (Txn, bool) {
	t, ok := s.txns[appID]
	return t, ok
}

// Txns returns a copy of the latest txn action per appId.
func (s *Snapshot) Txns() map[string]Txn {
	out := make(map[string]Txn, len(s.txns))
	for k, v := range s.txns {
		out[k] = v
	}
	return out
}

// Domain returns the live domain metadata of a domain.
func (s *Snapshot) Domain(name string) (DomainMetadata, bool) {
	d, ok := s.domains[name]
	return d, ok
}

// Domains returns a copy of the live domain metadata.
func (s *Snapshot) Domains() map[string]DomainMetadata {
	out := make(map[string]DomainMetadata, len(s.domains))
	for k, v := range s.domains {
		out[k] = v
	}
	return out
}

// CheckpointVersion is the version of the checkpoint the snapshot was
// replayed from, or -1.
func (s *Snapshot) CheckpointVersion() int64 { return s.checkpointVersion }
