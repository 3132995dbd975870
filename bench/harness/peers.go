package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/pyenv"
)

// PeerResult is one peer's run on the same stream (bench/peers/CONTRACT.md).
type PeerResult struct {
	Peer         string  `json:"peer"`
	OK           bool    `json:"ok"`
	Failure      string  `json:"failure,omitempty"`
	Events       int64   `json:"events"`
	Seconds      float64 `json:"seconds"`
	Batches      int64   `json:"batches"`
	EventsPerSec float64 `json:"events_per_sec"`
	// Ratio is ours events/s over the peer's (verified runs only).
	Ratio       float64        `json:"ratio,omitempty"`
	WallSeconds float64        `json:"wall_seconds"` // the whole process, start-up included
	Verify      string         `json:"verify,omitempty"`
	Output      map[string]any `json:"output,omitempty"`
}

// peerPython returns the python of the peers' venv: o.PeerPython, or what
// bench/peers/setup.sh prints.
func peerPython(ctx context.Context, root, given string, log io.Writer) (string, error) {
	if given != "" {
		return given, nil
	}
	setup := filepath.Join(root, "bench", "peers", "setup.sh")
	cmd := exec.CommandContext(ctx, setup)
	cmd.Dir = root
	cmd.Stderr = log
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("bench: %s: %w", setup, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// runPeer runs one peer on the stream file and verifies its table against
// the oracle. Failures are reported in the result, not returned: the
// other peers still run.
func runPeer(ctx context.Context, o Options, name, streamFile, dir string, oracle *workload.Oracle, ourEvents int64, log io.Writer) PeerResult {
	pr := PeerResult{Peer: name}
	fail := func(format string, args ...any) PeerResult {
		pr.OK = false
		pr.Failure = fmt.Sprintf(format, args...)
		return pr
	}
	root := o.RepoRoot
	if root == "" {
		var err error
		if root, err = pyenv.RepoRoot(); err != nil {
			return fail("%v (give -repo)", err)
		}
	}
	script := filepath.Join(root, "bench", "peers", name+"_merge.py")
	if _, err := os.Stat(script); err != nil {
		return fail("no peer script: %v", err)
	}
	py, err := peerPython(ctx, root, o.PeerPython, log)
	if err != nil {
		return fail("%v", err)
	}
	table := filepath.Join(dir, "peer_"+name)
	if err := os.RemoveAll(table); err != nil {
		return fail("%v", err)
	}
	batch := o.PeerBatch
	if batch <= 0 {
		batch = o.MaxRecords
	}
	if batch <= 0 {
		batch = 50_000 // the engine's default flush.max_records
	}
	cmd := exec.CommandContext(ctx, py, script, "--input", streamFile, "--table", table, "--batch-size", fmt.Sprint(batch))
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = log
	start := time.Now()
	err = cmd.Run()
	pr.WallSeconds = time.Since(start).Seconds()
	if err != nil {
		return fail("%s: %v", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if err := json.Unmarshal([]byte(last), &pr.Output); err != nil {
		return fail("%s: last stdout line is not JSON: %q", script, last)
	}
	var figures struct {
		Events  int64   `json:"events"`
		Seconds float64 `json:"seconds"`
		Batches int64   `json:"batches"`
	}
	_ = json.Unmarshal([]byte(last), &figures)
	pr.Events, pr.Seconds, pr.Batches = figures.Events, figures.Seconds, figures.Batches
	if pr.Seconds > 0 {
		pr.EventsPerSec = float64(pr.Events) / pr.Seconds
	}
	if pr.Events != ourEvents {
		return fail("the peer read %d events, the stream has %d", pr.Events, ourEvents)
	}
	diff, err := workload.Verify(ctx, storage.NewLocal(table), oracle, 5)
	if err != nil {
		return fail("verify: %v", err)
	}
	pr.Verify = diff.String()
	if !diff.OK() {
		return fail("table differs from the oracle: %s", diff)
	}
	pr.OK = true
	return pr
}
