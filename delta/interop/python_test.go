package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/internal/pyenv"
)

// python returns the interpreter with deltalake installed: without one
// the test is skipped on a developer's machine but fails under CI=true.
func python(t *testing.T) string { return pyenv.Python(t) }

// runPython runs a script from testdata and decodes its stdout (one JSON
// object) into out, keeping numbers as json.Number so that 64-bit integers
// and doubles survive exactly.
func runPython(t *testing.T, script string, out any, args ...string) {
	t.Helper()
	py := python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", script)}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run %s %v: %v\nstderr:\n%s", script, args, err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("decode output of %s: %v\nstdout:\n%s", script, err, stdout.String())
	}
}

// pyTable is what read_table.py reports of a table at one version.
type pyTable struct {
	Version          int64             `json:"version"`
	Files            []string          `json:"files"`
	PartitionColumns []string          `json:"partitionColumns"`
	Txn              map[string]*int64 `json:"txn"`
	// Rows hold read_table.py's lossless JSON forms (see canonJSON).
	Rows []map[string]any `json:"rows"`
	// History is the table at every version from 0, when asked for.
	History []pyTable `json:"history"`
}

// readWithDeltalake reads the table at dir with delta-rs, at its latest
// version and, with allVersions, at every version by time travel, and
// asks it for the txn version of each appID.
func readWithDeltalake(t *testing.T, dir string, allVersions bool, appIDs ...string) pyTable {
	t.Helper()
	args := []string{dir}
	if allVersions {
		args = append(args, "--all-versions")
	}
	var out pyTable
	runPython(t, "read_table.py", &out, append(args, appIDs...)...)
	if allVersions && int64(len(out.History)) != out.Version+1 {
		t.Fatalf("deltalake reported %d historic versions of a table at version %d", len(out.History), out.Version)
	}
	return out
}
