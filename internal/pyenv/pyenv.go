// Package pyenv finds the Python with the deltalake package (delta-rs),
// the Delta reader we did not write, that the tests and the bench's
// verification read our tables back with: $CDCAPPLY_PYTHON, else the
// repository's .venv (scripts/python-env.sh makes it).
package pyenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// ErrNoPython reports that no Python with deltalake was found.
var ErrNoPython = errors.New("no python with deltalake (set CDCAPPLY_PYTHON or run scripts/python-env.sh)")

// RepoRoot is the folder holding go.mod at or above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Find returns the Python's path and the repository root; the error wraps
// ErrNoPython when there is no Python to run.
func Find() (python, root string, err error) {
	root, err = RepoRoot()
	if err != nil {
		return "", "", fmt.Errorf("find python: %w: %w", err, ErrNoPython)
	}
	python = os.Getenv("CDCAPPLY_PYTHON")
	if python == "" {
		python = filepath.Join(root, ".venv", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		return "", root, fmt.Errorf("find python: %s: %w", python, ErrNoPython)
	}
	return python, root, nil
}

// T is the part of testing.TB that Python uses (this package is linked
// into the bench, so it does not import testing).
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Python is Find for a test, which also checks (once a process) that the
// Python imports deltalake: without a usable one it fails the test under
// CI=true, so that a CI run cannot go green by not testing interop, and
// skips it elsewhere.
func Python(t T) string {
	t.Helper()
	py, _, err := Find()
	if err == nil {
		err = imports(py)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v", err)
		} else {
			t.Skipf("%v", err)
		}
		return ""
	}
	return py
}

// checked maps a python's path to the outcome of importing deltalake.
var checked sync.Map

type outcome struct{ err error }

// imports says whether py imports deltalake (nil: it does), running it
// once per path.
func imports(py string) error {
	if o, ok := checked.Load(py); ok {
		return o.(outcome).err
	}
	var err error
	if out, runErr := exec.Command(py, "-c", "import deltalake").CombinedOutput(); runErr != nil {
		err = fmt.Errorf("find python: %s does not import deltalake: %v: %s: %w", py, runErr, out, ErrNoPython)
	}
	checked.Store(py, outcome{err})
	return err
}
