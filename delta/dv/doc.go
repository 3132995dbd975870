// Package dv reads and writes Delta deletion vectors: sets of row indexes
// of a data file that are soft-deleted.
//
// A deletion vector is a RoaringBitmapArray (a magic number and a portable
// 64-bit roaring bitmap). It is stored inline in the log (storage type "i",
// Z85-encoded), or in a deletion vector file at an offset, named either
// relative to the table by a random prefix and a Z85-encoded UUID ("u") or
// by an absolute path ("p"). A deletion vector file is a version byte
// followed, per vector, by its big-endian size, the bitmap and a big-endian
// CRC-32 of the bitmap.
//
// The package is pure format code plus reads and writes through
// storage.Storage; it starts no goroutines.
package dv
