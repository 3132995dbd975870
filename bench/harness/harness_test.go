package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/bench/workload"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// smokeOptions is a run of seconds: 2k changes over 500 keys, small
// batches so that the table is rewritten across several commits.
func smokeOptions(t *testing.T) Options {
	cfg := workload.Default()
	cfg.Keys, cfg.SnapshotKeys, cfg.Events = 500, 250, 2000
	cfg.Partitions = 2
	return Options{Workload: cfg, Dir: t.TempDir(), MaxRecords: 400, MaxLatency: 100 * time.Millisecond,
		DecodeSample: 500, DecodeTime: 10 * time.Millisecond, Timeout: 2 * time.Minute}
}

// TestSmoke runs the harness end to end (kfake, the real engine in
// process) and checks that it verified the table and accounted for the
// stream; no figure's value is asserted, only that it was derived.
func TestSmoke(t *testing.T) {
	o := smokeOptions(t)
	// A checkpoint every other commit: the few commits of a smoke run
	// then write some, and the report must count them.
	o.TableProperties = map[string]string{"delta.checkpointInterval": "2"}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !rep.OK || len(rep.Verify) != 1 || !rep.Verify[0].OK {
		t.Fatalf("not verified: %+v", rep.Verify)
	}
	c := rep.Counts
	if rep.Throughput.Records != c.TableRecords || rep.Throughput.Changes != c.ChangeRecords {
		t.Errorf("engine read %d records / %d changes, stream has %d / %d", rep.Throughput.Records, rep.Throughput.Changes, c.TableRecords, c.ChangeRecords)
	}
	if rep.Throughput.Commits < 2 || len(rep.CostBySize) == 0 || len(rep.Series) == 0 {
		t.Errorf("commits %d, cost buckets %d, series %d: want several commits and derived tables", rep.Throughput.Commits, len(rep.CostBySize), len(rep.Series))
	}
	oracle, err := workload.OracleFor(o.Workload)
	if err != nil {
		t.Fatal(err)
	}
	// The engine's commits end at rep.Table.Version; every other one is
	// a checkpoint version (version 0 writes none), whose checkpoint was
	// written beside the commits or skipped while the previous one ran.
	if want := int(rep.Table.Version / 2); want == 0 {
		t.Errorf("table at version %d: no checkpoint version, the run exercised too little", rep.Table.Version)
	} else if c := rep.Checkpoints; c == nil || c.Count == 0 || c.Count+c.Skipped != want || c.Failed != 0 {
		t.Errorf("checkpoints %+v, want %d written or skipped for versions 1-%d, at least one written, none failed", c, want, rep.Table.Version)
	}
	for _, c := range rep.Engine.Checkpoints {
		if c.Version%2 != 0 || c.Version > rep.Table.Version {
			t.Errorf("checkpoint of version %d: not a checkpoint version of versions 1-%d", c.Version, rep.Table.Version)
		}
	}
	if rep.Table.LiveRows != oracle.Len() {
		t.Errorf("live rows %d (from the log's stats), oracle rows %d", rep.Table.LiveRows, oracle.Len())
	}
	if rep.Table.RowsWritten < rep.Table.LiveRows || rep.Table.DataBytes < rep.Table.LiveBytes || rep.Table.WriteAmp < 1 {
		t.Errorf("table figures inconsistent: %+v", rep.Table)
	}
	if rep.Decode.BothCores <= 0 || rep.Decode.OneCore <= 0 || rep.Decode.Before == nil || rep.Decode.After == nil ||
		rep.Decode.Before.BothCores <= 0 || rep.Decode.After.BothCores <= 0 || rep.DecodeRatioFaster <= 0 || rep.DecodeRatioFaster > rep.DecodeRatio {
		t.Errorf("decode-only not measured before and after the engine: %+v (ratios %v, %v)", rep.Decode, rep.DecodeRatio, rep.DecodeRatioFaster)
	}
	if rep.Memory.PeakRSS <= 0 {
		t.Errorf("no peak RSS")
	}
	if !slices.ContainsFunc(rep.Engine.Samples, func(s Sample) bool { return s.LiveHeap > 0 }) {
		t.Errorf("the live heap not sampled: %d samples, none with a live heap", len(rep.Engine.Samples))
	}
	if runtime.GOOS == "linux" && (rep.Engine.HostCPU == nil || rep.Engine.HostCPU.CoreSeconds <= 0 ||
		rep.Decode.Before.HostCPU == nil || rep.Decode.After.HostCPU == nil) {
		t.Errorf("the machine's CPU not measured around the engine and decode-only: engine %+v, decode-only %+v / %+v",
			rep.Engine.HostCPU, rep.Decode.Before.HostCPU, rep.Decode.After.HostCPU)
	}
	if rep.CPURatio <= 0 {
		t.Errorf("no per CPU-second ratio")
	}
	// The verifier the harness relies on sees a wrong table: this one
	// against another seed's oracle.
	other := o.Workload
	other.Seed++
	wrong, err := workload.OracleFor(other)
	if err != nil {
		t.Fatal(err)
	}
	if diff, err := workload.Verify(context.Background(), storage.NewLocal(filepath.Join(o.Dir, "orders")), wrong, 3); err != nil || diff.OK() {
		t.Fatalf("table verified against the wrong oracle: %v %v", diff, err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "events/s") {
		t.Errorf("report:\n%s", out.String())
	}
	svg := filepath.Join(o.Dir, "run.svg")
	if err := rep.WriteSVG(svg); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(o.Dir, "run.json")
	if err := rep.WriteJSON(js); err != nil {
		t.Fatal(err)
	}
	var back Report
	data, _ := os.ReadFile(js)
	if err := json.Unmarshal(data, &back); err != nil || !back.OK || back.Throughput == nil {
		t.Fatalf("json report does not read back: %v", err)
	}
}

// TestSmokePrefill writes the snapshot into the table without Kafka
// (-prefill), in merge-on-read: the table still verifies against the whole
// stream's oracle, the engine read exactly the records that were not
// loaded, and the loaded snapshot is what the engine's first commit
// found in the table.
func TestSmokePrefill(t *testing.T) {
	o := smokeOptions(t)
	o.Prefill, o.WriteMode = true, "merge-on-read"
	o.MemoryLimit = 1 << 30         // the pipeline file carries it
	o.Workload.HeartbeatEvery = 100 // some heartbeats fall in the snapshot phase
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !rep.OK || rep.Prefill == nil {
		t.Fatalf("not verified or no prefill: %+v %+v", rep.Verify, rep.Prefill)
	}
	p, c := rep.Prefill, rep.Counts
	if p.Records < o.Workload.SnapshotKeys || p.Rows != o.Workload.SnapshotKeys || p.Commits < 1 || p.Produced == 0 {
		t.Errorf("prefill %+v: want every one of the %d snapshot keys loaded and the phase's heartbeats produced", p, o.Workload.SnapshotKeys)
	}
	if rep.Throughput.Records != c.TableRecords-p.Records {
		t.Errorf("engine read %d records, want the stream's %d less the %d prefilled", rep.Throughput.Records, c.TableRecords, p.Records)
	}
	if first := rep.Engine.Batches[0]; int64(first.RowsBefore) != p.Rows {
		t.Errorf("the engine's first commit found %d rows, the prefill wrote %d", first.RowsBefore, p.Rows)
	}
}

// TestSmokeFreshness produces at a steady rate while the engine runs:
// freshness is then measured from wall-clock source times.
func TestSmokeFreshness(t *testing.T) {
	o := smokeOptions(t)
	o.Rate = 4000
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !rep.OK || !rep.Freshness.WallClock {
		t.Fatalf("not verified or not wall clock: %+v", rep.Freshness)
	}
	// Every change was committed after it was generated.
	f := rep.Freshness
	if f.P50 <= 0 || f.P99 < f.P50 || f.Max < f.P99 {
		t.Errorf("freshness quantiles out of order: %+v", f)
	}
	// Every record was committed after it was sent, which was after its
	// source commit; a record that is not a change (a heartbeat, a Kafka
	// tombstone) may have been sent up to a produce tick before the
	// changes of its batch.
	if f.AppendedP50 <= 0 || f.AppendedP99 < f.AppendedP50 || f.AppendedMax < f.AppendedP99 || f.AppendedMax > f.Max+20 {
		t.Errorf("since-appended quantiles out of order or above freshness: %+v", f)
	}
	// The stream started once the engine had opened the table.
	if e := rep.Engine; e.OpenedAt <= 0 || e.FirstAt < e.OpenedAt {
		t.Errorf("the table opened at %.1f ms, the first record arrived at %.1f ms", e.OpenedAt, e.FirstAt)
	}
}

// TestCorruptTableFails damages the engine's table (a commit removing one
// of its data files) before verification: the harness must report
// failure, with no figures.
func TestCorruptTableFails(t *testing.T) {
	o := smokeOptions(t)
	o.Corrupt = removeOneFile
	rep, err := Run(context.Background(), o)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("run of a corrupted table: err %v, want ErrVerify", err)
	}
	if rep == nil || rep.OK || rep.Throughput != nil || rep.Memory != nil {
		t.Fatalf("a failed run must carry no figures: %+v", rep)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "FAIL") || strings.Contains(out.String(), "events/s") {
		t.Errorf("report of a failed run:\n%s", out.String())
	}
}

// removeOneFile commits a remove of the table's first live data file, as a
// buggy writer would: rows go missing.
func removeOneFile(dir string) error {
	ctx := context.Background()
	snap, err := delta.Open(storage.NewLocal(dir)).Snapshot(ctx)
	if err != nil {
		return err
	}
	files := snap.Files()
	if len(files) == 0 {
		return errors.New("no data file to remove")
	}
	line, err := json.Marshal(map[string]any{"remove": map[string]any{
		"path": files[0].Path, "deletionTimestamp": time.Now().UnixMilli(), "dataChange": true}})
	if err != nil {
		return err
	}
	name := filepath.Join(dir, "_delta_log", fmt.Sprintf("%020d.json", snap.Version+1))
	return os.WriteFile(name, append(line, '\n'), 0o644)
}

func TestHistQuantiles(t *testing.T) {
	h := newHist()
	for i := int64(1); i <= 100_000; i++ {
		h.add(i)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 50_000}, {0.99, 99_000}, {1, 100_000}} {
		got := float64(h.quantile(c.q).Microseconds())
		if got < c.want*0.99 || got > c.want*1.01 {
			t.Errorf("quantile %v = %v µs, want %v ±1%%", c.q, got, c.want)
		}
	}
	if newHist().quantile(0.5) != 0 {
		t.Error("empty histogram")
	}
}

// TestSmokeRealKafka runs the smoke through a real broker (scripts/kafka.sh
// start, CDCAPPLY_KAFKA_BROKERS): fresh topics per run, replication factor
// from the broker. Skips without one, fails under CI=true.
func TestSmokeRealKafka(t *testing.T) {
	b := os.Getenv("CDCAPPLY_KAFKA_BROKERS")
	if b == "" {
		msg := "no real Kafka broker (start one with scripts/kafka.sh start and set CDCAPPLY_KAFKA_BROKERS)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	o := smokeOptions(t)
	o.Brokers = strings.Split(b, ",")
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !rep.OK || rep.Throughput.Records != rep.Counts.TableRecords {
		t.Fatalf("not verified or not the whole stream: %+v %+v", rep.Verify, rep.Throughput)
	}
}

// TestPeersVerifiedAndRatio runs two stand-in peers through the peers
// contract (sh scripts in a scratch repository, run by /bin/sh as the
// "python"): one copies our verified table and reports its figures, the
// other reports figures but leaves a table missing rows. The first gets a ratio, the second FAIL and none.
func TestPeersVerifiedAndRatio(t *testing.T) {
	root := t.TempDir()
	peers := filepath.Join(root, "bench", "peers")
	if err := os.MkdirAll(peers, 0o755); err != nil {
		t.Fatal(err)
	}
	// args: --input FILE --table DIR --batch-size N
	copyPeer := `set -e
input=$2; table=$4
cp -r "$(dirname "$input")/orders" "$table"
echo "progress to stdout is allowed"
echo "{\"peer\":\"copy\",\"events\":$(wc -l < "$input"),\"seconds\":2.5,\"batches\":3}"
`
	if err := os.WriteFile(filepath.Join(peers, "copy_merge.py"), []byte(copyPeer), 0o644); err != nil {
		t.Fatal(err)
	}
	o := smokeOptions(t)
	o.Peers, o.PeerPython, o.RepoRoot = []string{"copy", "broken"}, "/bin/sh", root
	// The broken peer copies a damaged copy of our table (one data file
	// removed by a commit), made before verification; ours stays intact.
	o.Corrupt = func(table string) error {
		side := filepath.Join(filepath.Dir(table), "damaged")
		if err := os.CopyFS(side, os.DirFS(table)); err != nil {
			return err
		}
		return removeOneFile(side)
	}
	if err := os.WriteFile(filepath.Join(peers, "broken_merge.py"), []byte(`set -e
input=$2; table=$4
cp -r "$(dirname "$input")/damaged" "$table"
echo "{\"peer\":\"broken\",\"events\":$(wc -l < "$input"),\"seconds\":1,\"batches\":1}"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Peers) != 2 {
		t.Fatalf("peers: %+v", rep.Peers)
	}
	good, bad := rep.Peers[0], rep.Peers[1]
	if !good.OK || good.Events != rep.Throughput.Records || good.Batches != 3 || good.Ratio <= 0 {
		t.Errorf("copying peer: %+v", good)
	}
	if want := rep.Throughput.EventsPerSec / (float64(good.Events) / 2.5); good.Ratio != want {
		t.Errorf("ratio %v, want ours/peer %v", good.Ratio, want)
	}
	if bad.OK || bad.Ratio != 0 || !strings.Contains(bad.Failure, "differs from the oracle") {
		t.Errorf("peer with a damaged table: %+v", bad)
	}
}

// TestSmokeMergeOnRead runs the smoke with the table in merge-on-read
// (-merge-mode): changed rows hidden by deletion vectors, which the
// verifier's reader applies; live rows exclude the hidden ones.
func TestSmokeMergeOnRead(t *testing.T) {
	o := smokeOptions(t)
	o.WriteMode = "merge-on-read"
	// The profiling outputs of the engine side: a CPU profile (gzip) and
	// an execution trace (its header names the Go version).
	o.CPUProfile, o.Trace = filepath.Join(t.TempDir(), "cpu.prof"), filepath.Join(t.TempDir(), "engine.trace")
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	oracle, err := workload.OracleFor(o.Workload)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Table.LiveRows != oracle.Len() {
		t.Fatalf("verified %v, live rows %d, oracle rows %d", rep.OK, rep.Table.LiveRows, oracle.Len())
	}
	data, err := os.ReadFile(filepath.Join(o.Dir, "pipeline.yaml"))
	if err != nil || !strings.Contains(string(data), "write_mode: merge-on-read") {
		t.Fatalf("pipeline file lacks the write mode: %s %v", data, err)
	}
	for path, magic := range map[string]string{o.CPUProfile: "\x1f\x8b", o.Trace: "go 1."} {
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 64 || !strings.HasPrefix(string(b), magic) {
			t.Errorf("%s: %d bytes starting %q (%v), want a profile starting %q", path, len(b), b[:min(len(b), 8)], err, magic)
		}
	}
}

// TestSmokeKfakeBrokers: on an in-process cluster of several brokers
// (kfake draws each partition's leader among them) the engine's run is
// verified like any other; the report names the brokers.
func TestSmokeKfakeBrokers(t *testing.T) {
	o := smokeOptions(t)
	o.KfakeBrokers, o.Workload.Partitions = 3, 6
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !rep.OK || rep.Throughput.Records != rep.Counts.TableRecords {
		t.Fatalf("verified %v, engine read %d of %d records", rep.OK, rep.Throughput.Records, rep.Counts.TableRecords)
	}
	if !strings.Contains(rep.Broker, "3 brokers") || rep.Options.KfakeBrokers != 3 {
		t.Errorf("report names broker %q and %d kfake brokers, want 3", rep.Broker, rep.Options.KfakeBrokers)
	}
}

// TestByPhase: commits that only inserted and commits that changed rows
// are summed apart, each over the time since the commit before it (the
// first over the time since the first record), and set beside the
// decode-only rate of their own records.
func TestByPhase(t *testing.T) {
	e := &EngineResult{FirstAt: 100, Batches: []BatchStat{
		{At: 600, Records: 1000, Inserted: 1000},           // 0.5 s
		{At: 1100, Records: 2000, Inserted: 2000},          // 0.5 s
		{At: 3100, Records: 3000, Updated: 10, Deleted: 1}, // 2 s
		{At: 4100, Records: 1000, Inserted: 5, Revived: 1}, // 1 s
	}}
	got := byPhase(e, DecodeFigures{BothCores: 5000, ReadsBothCores: 4000, ChangesBothCores: 8000})
	want := []PhaseFigures{
		{Phase: phaseInserts, Commits: 2, Records: 3000, Seconds: 1, EventsPerSec: 3000, OverDecode: 0.75},
		{Phase: phaseChanges, Commits: 2, Records: 4000, Seconds: 3, EventsPerSec: 4000.0 / 3, OverDecode: 1.0 / 6},
	}
	if !slices.Equal(got, want) {
		t.Errorf("byPhase:\n got %+v\nwant %+v", got, want)
	}
	if got := byPhase(&EngineResult{FirstAt: -1}, DecodeFigures{}); len(got) != 0 {
		t.Errorf("no commits: %+v, want none", got)
	}
}

// TestCheckpointFigures: only the batches that wrote a checkpoint count,
// and the first and last tenth show a checkpoint that grew over the run.
func TestCheckpointFigures(t *testing.T) {
	if c := checkpointFigures(nil, []BatchStat{{CommitMs: 5}, {CommitMs: 7}}); c != nil {
		t.Fatalf("no checkpoint written, figures %+v, want none", c)
	}
	var cs []CheckpointStat
	var bs []BatchStat
	for i := 1; i <= 210; i++ {
		b := BatchStat{Version: int64(i), CommitMs: 4}
		if i%10 == 0 {
			if i == 110 {
				// Reached while the previous one ran.
				b.CheckpointSkipped = true
			} else {
				// 20 checkpoints growing from 100 to 2,100 ms, one failed.
				c := CheckpointStat{Version: int64(i), Ms: float64(i * 10)}
				if i == 50 {
					c.Err = "refused"
				}
				cs = append(cs, c)
			}
		}
		bs = append(bs, b)
	}
	c := checkpointFigures(cs, bs)
	if c == nil {
		t.Fatal("20 checkpoints written, no figures")
	}
	want := CheckpointFigures{Count: 20, Skipped: 1, Failed: 1, P50Ms: 1200, MaxMs: 2100, FirstMs: 200, LastMs: 2100}
	if *c != want {
		t.Fatalf("figures %+v, want %+v", *c, want)
	}
}
