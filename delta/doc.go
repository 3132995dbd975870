// Package delta is cdcapply's implementation of the Delta Lake transaction
// log, written to the public protocol (PROTOCOL.md in delta-io/delta): the
// actions and their JSON, log replay to a snapshot (JSON commits and
// checkpoints), optimistic commits with put-if-absent and the protocol's
// conflict rules, and log checkpoints. Data files live in delta/datafile,
// deletion vectors in delta/dv and the file system in delta/storage.
//
// The package starts no goroutines.
package delta
