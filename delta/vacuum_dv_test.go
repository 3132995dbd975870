package delta_test

import (
	"testing"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/dv"
	"github.com/google/uuid"
)

// TestVacuumDVPath checks that vacuum protects the file package dv reads.
func TestVacuumDVPath(t *testing.T) {
	for i, prefix := range []string{"", "ab", "x7"} {
		id := uuid.New()
		d := &delta.DeletionVector{StorageType: dv.StorageRelative, PathOrInlineDv: prefix + dv.EncodeZ85(id[:]), SizeInBytes: 1}
		want, err := dv.RelativePath(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := delta.DVRelativePath(d.PathOrInlineDv)
		if err != nil || got != want {
			t.Errorf("case %d: vacuum keeps %q (%v), dv reads %q", i, got, err, want)
		}
	}
	if _, err := delta.DVRelativePath("short"); err == nil {
		t.Error("a too short descriptor was accepted")
	}
}
