// Package conformance holds the row-level conformance test of cdcapply's
// Delta reader: every golden table of ../shared/delta-conformance (tables
// written by Spark and delta-rs) is opened with package delta, its data
// files are read with package datafile, and the rows are compared with the
// table's expected rows. The package has no non-test code.
package conformance
