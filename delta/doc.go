// Package delta is cdcapply's implementation of the Delta Lake transaction
// log, written to the public protocol (PROTOCOL.md in delta-io/delta): the
// actions and their JSON, log replay to a snapshot (JSON commits and
// checkpoints), optimistic commits with put-if-absent and the protocol's
// conflict rules, and log checkpoints. Data files live in delta/datafile,
// deletion vectors in delta/dv and the file system in delta/storage.
//
// # Reading
//
// Open returns a Table on a storage.Storage; Snapshot, SnapshotAt and
// SnapshotAsOf replay the log to the latest version, a version or a time.
// The listing of _delta_log decides the log segment: the newest complete
// checkpoint at or below the target (classic, every part of a multi-part
// one, or a V2 one), then each JSON commit after it in order. A damaged
// checkpoint is passed over for an older one or the commits; a hole in the
// commits is an error ("versions not contiguous"), as is a version cleaned
// up or not yet written (ErrVersionNotFound), a location without a log
// (ErrNoTable), and a protocol this package cannot read
// (ErrUnsupportedFeature). Update brings a snapshot forward by reading only
// the newer commits.
//
// # Writing
//
// Table.Begin starts a Transaction on a snapshot (or nil, to create the
// table). It records what it reads (ReadTxn, ReadFiles, ReadFile) and
// collects actions; Commit writes version N with put-if-absent. If another
// writer took N, the winner is checked against what was read and written:
// a conflict is a *ConflictError whose kind (ErrConcurrentTransaction,
// ErrConcurrentAppend, ...) errors.Is can test; otherwise the commit is
// retried at N+1. Only an error wrapping ErrCommitUnknown leaves open
// whether the commit landed. The snapshot after a commit is derived from
// the one read, in time proportional to the commit, not the table: file
// maps are layered (a shared base plus a small overlay).
//
// The package starts no goroutines.
package delta
