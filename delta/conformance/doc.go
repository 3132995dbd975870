// Package conformance holds the row-level conformance tests of cdcapply's
// Delta reader. Every golden table of ../shared/delta-conformance (tables
// written by Spark and delta-rs) is opened with package delta, its data
// files are read with package datafile, and the rows are compared with the
// table's expected rows; invalid tables must be refused. The kernel-data
// tables, which ship no expected rows, are compared with what the Python
// deltalake reader (or pyarrow) returns. The package has no non-test code.
package conformance
