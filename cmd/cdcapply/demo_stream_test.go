package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamDemo runs `cdcapply demo` small: it must apply the generated
// stream through the in-process broker and report the oracle check as OK.
func TestStreamDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"demo", "-dir", dir, "-events", "3000", "-keys", "500", "-rate", "0"}, &out, &errOut)
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "RESULT: OK: the table equals the oracle") {
		t.Fatalf("demo output lacks the oracle check:\n%s", out.String())
	}
}
