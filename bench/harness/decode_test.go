package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/debezium"
)

// TestServeDecode runs the decode-only process's side in this process: a
// job in, then one measurement per request, over the sample it generated
// itself, until its input ends.
func TestServeDecode(t *testing.T) {
	cfg := workload.Default()
	cfg.Keys, cfg.SnapshotKeys, cfg.Events = 300, 300, 300
	job, err := json.Marshal(DecodeJob{Workload: cfg, Sample: 100, MinTime: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	in := string(job) + "\nmeasure\nmeasure\n"
	if err := ServeDecode(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two measurements, got %q", out.String())
	}
	for _, l := range lines {
		var f DecodeFigures
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		if !f.OwnProcess || f.Sample != 100 || f.OneCore <= 0 || f.BothCores <= 0 || f.Error != "" {
			t.Fatalf("figures %+v", f)
		}
	}
}

// TestDecodeFiguresMean: the baseline is the mean of the measurements
// before and after the engine, and the faster one is kept apart.
func TestDecodeFiguresMean(t *testing.T) {
	m := meanOf(DecodeFigures{OneCore: 100, BothCores: 300, PerCPUSecond: 150, ReadsBothCores: 200, ChangesBothCores: 600, OwnProcess: true, Sample: 7},
		DecodeFigures{OneCore: 200, BothCores: 500, PerCPUSecond: 250, ReadsBothCores: 400, ChangesBothCores: 800, OwnProcess: true, Sample: 7})
	if m.OneCore != 150 || m.BothCores != 400 || m.PerCPUSecond != 200 || !m.OwnProcess || m.Sample != 7 || m.FasterBothCores() != 500 {
		t.Fatalf("mean %+v, faster %v", m, m.FasterBothCores())
	}
	if m.ReadsBothCores != 300 || m.ChangesBothCores != 700 {
		t.Fatalf("mean of the phases' rates: reads %v, changes %v; want 300 and 700", m.ReadsBothCores, m.ChangesBothCores)
	}
	if single := (DecodeFigures{BothCores: 300}); single.FasterBothCores() != 300 {
		t.Fatalf("single measurement: faster %v", single.FasterBothCores())
	}
}

// TestDecodeSampleReads: the sample tells the snapshot's reads from the
// other records as the decoder classifies them, and the measurement
// gives a rate for each part.
func TestDecodeSampleReads(t *testing.T) {
	cfg := workload.Default()
	cfg.Keys, cfg.SnapshotKeys, cfg.Events = 300, 300, 600
	sample, reads, err := collectStream(cfg, 400, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(reads) != len(sample) {
		t.Fatalf("%d flags for %d records", len(reads), len(sample))
	}
	d, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	nReads := 0
	for i := range sample {
		ch, err := d.Decode(context.Background(), &sample[i])
		if err != nil {
			t.Fatal(err)
		}
		isRead := ch.Class == debezium.ClassChange && ch.Op == debezium.OpRead
		if isRead != reads[i] {
			t.Fatalf("record %d (offset %d): flagged read %v, decoded op %q class %v", i, sample[i].Offset, reads[i], ch.Op, ch.Class)
		}
		if isRead {
			nReads++
		}
	}
	if nReads == 0 || nReads == len(sample) {
		t.Fatalf("%d reads of %d sampled records: want both kinds", nReads, len(sample))
	}
	f, err := measureDecode(context.Background(), splitSample(sample, reads), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if f.ReadsBothCores <= 0 || f.ChangesBothCores <= 0 || f.BothCores <= 0 {
		t.Fatalf("rates: all %v, reads %v, others %v; want each measured", f.BothCores, f.ReadsBothCores, f.ChangesBothCores)
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
	if jerr := json.Unmarshal(out.Bytes(), &f); jerr != nil || !strings.Contains(f.Error, "read the job") {
		t.Fatalf("bad job's result %q (%v)", out.String(), jerr)
	}

	ctx := context.Background()
	job := DecodeJob{Workload: workload.Default(), Sample: 10, MinTime: time.Millisecond}
	for _, c := range []struct {
		command []string
		want    string
	}{
		{[]string{"sh", "-c", `read job; read m; echo '{"error":"decoder exploded"}'; exit 1`}, "decoder exploded"},
		{[]string{"sh", "-c", "read job; read m; exit 3"}, "gave no result"},
		{[]string{"sh", "-c", "read job; read m; echo 'not json'"}, "gave no result"},
	} {
		d, err := startDecodeOnly(ctx, c.command, job)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.measure(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error with %q", c.command, err, c.want)
		}
		d.close()
	}

	// A run that fails early ends the process even while it is still
	// busy (generating its sample), instead of waiting for it.
	d, err := startDecodeOnly(ctx, []string{"sh", "-c", "read job; exec sleep 600"}, job)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { d.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("close waited for a busy decode-only process")
	}
}
