package pyenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a T that records instead of stopping the test.
type recorder struct{ fatal, skip string }

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.fatal = fmt.Sprintf(f, args...) }
func (r *recorder) Skipf(f string, args ...any)  { r.skip = fmt.Sprintf(f, args...) }

func TestFindRoot(t *testing.T) {
	_, root, _ := Find()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("root %q has no go.mod: %v", root, err)
	}
}

// TestPythonMissing: a Python that is not there fails the test under CI
// and skips it elsewhere, naming the path.
func TestPythonMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-python")
	t.Setenv("CDCAPPLY_PYTHON", missing)
	if _, _, err := Find(); !errors.Is(err, ErrNoPython) {
		t.Fatalf("Find with %s: %v", missing, err)
	}
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		var r recorder
		Python(&r)
		got, other := r.skip, r.fatal
		if ci == "true" {
			got, other = r.fatal, r.skip
		}
		if got == "" || other != "" || !filepath.IsAbs(missing) || !strings.Contains(got, missing) {
			t.Fatalf("CI=%q: fatal %q, skip %q", ci, r.fatal, r.skip)
		}
	}
}

// TestPythonWithoutDeltalake: a Python that runs but does not import
// deltalake is no Python for the tests.
func TestPythonWithoutDeltalake(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'No module named deltalake' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CDCAPPLY_PYTHON", fake)
	t.Setenv("CI", "true")
	var r recorder
	Python(&r)
	if !strings.Contains(r.fatal, "does not import deltalake") || !strings.Contains(r.fatal, "No module named deltalake") {
		t.Fatalf("fatal %q", r.fatal)
	}
}
