package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary be the bench's engine and decode-only
// processes: `bench -engine` and `bench -decode-only` re-execute
// os.Executable(), which under `go test` is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == "bench" && (os.Args[2] == "-engine" || os.Args[2] == "-decode-only") {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("bench engine: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestBenchSmoke runs `cdcapply bench` small with the engine and
// decode-only in their own processes (the default): the table verifies,
// the report, JSON and plot are written. Timings are not checked.
func TestBenchSmoke(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.svg")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"bench", "-dir", filepath.Join(dir, "run"), "-keys", "500", "-events", "2000",
		"-max-records", "500", "-max-latency", "100ms", "-decode-sample", "500", "-decode-time", "10ms", "-timeout", "2m",
		"-json", js, "-svg", svg}, &out, &errOut)
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "verify (cdcapply reader): OK") || strings.Contains(out.String(), "FAIL") {
		t.Fatalf("bench output:\n%s", out.String())
	}
	var rep struct {
		OK     bool
		Memory struct {
			Isolated bool  `json:"isolated"`
			PeakRSS  int64 `json:"peak_rss"`
		} `json:"memory"`
		Engine struct {
			PID int `json:"pid"`
		} `json:"engine"`
		Decode struct {
			OwnProcess bool    `json:"own_process"`
			BothCores  float64 `json:"both_cores_records_per_sec"`
			Sample     int     `json:"sample_records"`
			Before     *struct {
				OwnProcess bool `json:"own_process"`
			} `json:"before"`
			After *struct {
				OwnProcess bool `json:"own_process"`
			} `json:"after"`
		} `json:"decode"`
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || !rep.Memory.Isolated || rep.Engine.PID == os.Getpid() || rep.Memory.PeakRSS <= 0 {
		t.Fatalf("report: ok %v, isolated %v, engine pid %d (ours %d), peak RSS %d", rep.OK, rep.Memory.Isolated, rep.Engine.PID, os.Getpid(), rep.Memory.PeakRSS)
	}
	if !rep.Decode.OwnProcess || rep.Decode.BothCores <= 0 || rep.Decode.Sample != 500 ||
		rep.Decode.Before == nil || rep.Decode.After == nil || !rep.Decode.Before.OwnProcess || !rep.Decode.After.OwnProcess {
		t.Fatalf("decode-only: own process %v, both cores %.0f records/s, sample %d, before %v, after %v", rep.Decode.OwnProcess, rep.Decode.BothCores, rep.Decode.Sample, rep.Decode.Before, rep.Decode.After)
	}
	if !strings.Contains(out.String(), "before and") || !strings.Contains(out.String(), "own process") {
		t.Fatalf("report does not say how decode-only was measured:\n%s", out.String())
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("plot: %v", err)
	}
}
