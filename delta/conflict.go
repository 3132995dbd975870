package delta

import (
	"errors"
	"fmt"
)

// ErrConflict is matched (errors.Is) by every *ConflictError, whatever its
// kind: the commit lost to a concurrent one it cannot be reordered after.
var ErrConflict = errors.New("concurrent commit conflict")

// The kinds of conflict, one per rule of the protocol's optimistic
// concurrency. A *ConflictError matches exactly one of them with errors.Is.
var (
	// ErrProtocolChanged: a concurrent commit changed the protocol (or
	// created the table this transaction meant to create).
	ErrProtocolChanged = errors.New("protocol changed concurrently")
	// ErrMetadataChanged: a concurrent commit changed the table metadata
	// (schema, partitioning, properties).
	ErrMetadataChanged = errors.New("metadata changed concurrently")
	// ErrConcurrentTransaction: a concurrent commit wrote a txn for an
	// application this transaction read or writes. For cdcapply this is
	// fencing: another instance advanced the same Kafka partition.
	ErrConcurrentTransaction = errors.New("concurrent transaction for the same application")
	// ErrConcurrentDomainMetadata: a concurrent commit changed a metadata
	// domain this transaction also changes.
	ErrConcurrentDomainMetadata = errors.New("domain metadata changed concurrently")
	// ErrConcurrentDeleteDelete: a concurrent commit removed a file this
	// transaction removes.
	ErrConcurrentDeleteDelete = errors.New("file removed concurrently by both")
	// ErrConcurrentDeleteRead: a concurrent commit removed a file this
	// transaction read.
	ErrConcurrentDeleteRead = errors.New("file read was removed concurrently")
	// ErrConcurrentAppend: a concurrent commit added data files that this
	// transaction's reads would have seen.
	ErrConcurrentAppend = errors.New("files added concurrently match what was read")
)

// ConflictError is the typed error of a commit that lost a race it cannot
// retry past. Nothing of the losing commit was written.
type ConflictError struct {
	// Kind is one of the Err* conflict kinds above.
	Kind error
	// Table names the table location.
	Table string
	// ReadVersion is the version the transaction read; WinningVersion the
	// concurrent commit that conflicts.
	ReadVersion, WinningVersion int64
	// Detail says what conflicted (an application id, a file path, ...).
	Detail string
}

// Error says which table, which rule, which winning version and what, and
// that nothing was committed.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("commit to table %s (read version %d): %v at version %d: %s (not committed)",
		e.Table, e.ReadVersion, e.Kind, e.WinningVersion, e.Detail)
}

// Unwrap returns Kind, so errors.Is(err, ErrConcurrentAppend) and the like work.
func (e *ConflictError) Unwrap() error { return e.Kind }

// Is makes every ConflictError match ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// checkConflict applies the conflict rules to one winning commit: the
// commit of version won landed between the transaction's read version and
// its attempt. The rules go from the broadest to the narrowest, so the
// reported kind is the most fundamental one.
func (tx *Transaction) checkConflict(won int64, winner []Action) error {
	conflict := func(kind error, format string, args ...any) error {
		return &ConflictError{Kind: kind, Table: tx.table.Location(), ReadVersion: tx.readVersion(),
			WinningVersion: won, Detail: fmt.Sprintf(format, args...)}
	}
	if tx.read == nil {
		// Whatever the winner holds, the table this transaction meant to
		// create exists now.
		return conflict(ErrProtocolChanged, "the table was created concurrently")
	}
	for i := range winner {
		if winner[i].Protocol != nil {
			return conflict(ErrProtocolChanged, "protocol is now %d/%d", winner[i].Protocol.MinReaderVersion, winner[i].Protocol.MinWriterVersion)
		}
	}
	for i := range winner {
		if winner[i].Metadata != nil {
			return conflict(ErrMetadataChanged, "table %s got new metadata", winner[i].Metadata.ID)
		}
	}
	for i := range winner {
		if t := winner[i].Txn; t != nil && tx.readTxns[t.AppID] {
			return conflict(ErrConcurrentTransaction, "application %q committed its version %d", t.AppID, t.Version)
		}
	}
	for i := range winner {
		if d := winner[i].DomainMetadata; d != nil {
			if _, ours := tx.domains[d.Domain]; ours {
				return conflict(ErrConcurrentDomainMetadata, "domain %q", d.Domain)
			}
		}
	}
	for i := range winner {
		if r := winner[i].Remove; r != nil {
			if _, ours := tx.removes[keyOf(r.Key())]; ours {
				return conflict(ErrConcurrentDeleteDelete, "file %s", r.Path)
			}
		}
	}
	for i := range winner {
		if r := winner[i].Remove; r != nil && tx.readFiles[keyOf(r.Key())] {
			return conflict(ErrConcurrentDeleteRead, "file %s", r.Path)
		}
	}
	if tx.readAll || len(tx.readPreds) > 0 {
		for i := range winner {
			a := winner[i].Add
			// Files added without a data change (compaction, DV rewrite)
			// carry rows that were already there.
			if a == nil || !a.DataChange {
				continue
			}
			if tx.readAll {
				return conflict(ErrConcurrentAppend, "file %s added while the whole table was read", a.Path)
			}
			for _, match := range tx.readPreds {
				if match(a) {
					return conflict(ErrConcurrentAppend, "file %s added matches a read predicate", a.Path)
				}
			}
		}
	}
	return nil
}
