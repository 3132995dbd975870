// Package workload generates a synthetic PostgreSQL change stream as
// Debezium writes it (JsonConverter with inline schemas) and knows what the
// replicated table must look like at the end of it.
//
// A Generator is seeded and streams: it produces one Kafka record at a
// time, holding only per-key state, a bounded window of records it delays
// (out-of-order and late deliveries) and a bounded ring of recent records it
// can re-deliver (duplicates and replays). Its Oracle is the expected final
// table, kept up to date as records are generated; Verify compares a Delta
// table with it, through this module's own reader or through delta-rs.
//
// The stream keeps the one assumption the apply engine makes about
// delivery (see design-notes/workload.md): a change delivered after a newer
// change of its key never carries a value that the newer change, or one
// delivered before it, folds from an older version. That makes the final
// table independent of where batches are cut, so one oracle serves every
// batching, restart and crash.
package workload
