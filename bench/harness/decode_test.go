package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
)

// TestServeDecode runs the decode-only process's side in this process: a
// job in, figures out, measured over the sample it generated itself.
func TestServeDecode(t *testing.T) {
	cfg := workload.Default()
	cfg.Keys, cfg.SnapshotKeys, cfg.Events = 300, 300, 300
	job, err := json.Marshal(DecodeJob{Workload: cfg, Sample: 100, MinTime: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ServeDecode(context.Background(), bytes.NewReader(append(job, '\n')), &out); err != nil {
		t.Fatal(err)
	}
	var f DecodeFigures
	if err := json.Unmarshal(lastLine(out.Bytes()), &f); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if !f.OwnProcess || f.Sample != 100 || f.OneCore <= 0 || f.BothCores <= 0 || f.Error != "" {
		t.Fatalf("figures %+v", f)
	}
}

// TestDecodeOnlyFailures: a decode-only process that cannot read its job,
// reports an error, or dies without a result fails the run with a message
// saying so, never with zero figures taken as a measurement.
func TestDecodeOnlyFailures(t *testing.T) {
	var out bytes.Buffer
	err := ServeDecode(context.Background(), strings.NewReader("not json\n"), &out)
	if err == nil || !strings.Contains(err.Error(), "read the job") {
		t.Fatalf("bad job: %v", err)
	}
	var f DecodeFigures
	if jerr := json.Unmarshal(lastLine(out.Bytes()), &f); jerr != nil || !strings.Contains(f.Error, "read the job") {
		t.Fatalf("bad job's result %q (%v)", out.String(), jerr)
	}

	ctx := context.Background()
	job := DecodeJob{Workload: workload.Default(), Sample: 10, MinTime: time.Millisecond}
	for _, c := range []struct {
		command []string
		want    string
	}{
		{[]string{"sh", "-c", `cat >/dev/null; echo '{"error":"decoder exploded"}'; exit 1`}, "decoder exploded"},
		{[]string{"sh", "-c", "cat >/dev/null; exit 3"}, "gave no result"},
		{[]string{"sh", "-c", `cat >/dev/null; echo '{"both_cores_records_per_sec":5}'; exit 2`}, "exit status 2"},
	} {
		if _, err := decodeOnly(ctx, c.command, job); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error with %q", c.command, err, c.want)
		}
	}
}
