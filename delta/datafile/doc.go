// Package datafile reads and writes Delta data files: Parquet files whose
// rows are held in memory as Arrow records.
//
// Write turns one Arrow record of a table's data columns into a Parquet
// file with the protocol's type mapping and returns its add action with
// per-file statistics. Read turns one add action back into a record in the
// table's logical schema: partition columns filled from the log, columns
// missing from older files as nulls, narrower file types widened, column
// mapping resolved by physical name or field id, and deleted rows (the
// file's deletion vector) removed.
//
// The package does file I/O through storage.Storage and starts no
// goroutines.
package datafile
