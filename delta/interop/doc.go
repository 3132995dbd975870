// Package interop holds the interoperability tests between cdcapply's Delta
// implementation and delta-rs, the independent reader and writer used by
// the Python `deltalake` package: tables written by the delta package must
// read in deltalake exactly as written, and tables written by deltalake must
// read in the delta package exactly as deltalake reads them.
//
// The package has no code of its own; the tests need the Python virtual
// environment that scripts/python-env.sh builds.
package interop
