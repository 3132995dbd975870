package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/apply"
	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
	"github.com/cdcapply/cdcapply/internal/s3test"
	"github.com/cdcapply/cdcapply/schema"
	"github.com/cdcapply/cdcapply/tombstone"
)

// opsTable writes a real cdcapply table: keys 1..3 created ten days ago,
// key 2 deleted nine days ago, key 3 deleted an hour ago, key 4 created
// now in a second file. Versions 0..3. It is at dir, or in a fresh
// directory when dir is empty.
func opsTable(t *testing.T, dir string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	store, err := storage.ForLocation(dir)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := apply.NewLayout([]delta.StructField{{Name: "id", Type: delta.Long}, {Name: "status", Type: delta.String, Nullable: true}}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	a := apply.NewTableApplier("orders", "p", delta.Open(store), func(l *apply.Layout) (apply.RowFiles, error) { return apply.NewParquetRowFiles(store, l) }, []string{"id"}, nil)
	if err := a.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLayout(layout); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	off := int64(0)
	ch := func(id int64, seq uint64, del bool, status string, ts time.Time) *apply.Change {
		c := &apply.Change{Seq: binary.BigEndian.AppendUint64(nil, seq), Pos: apply.Position{Topic: "orders", Offset: off}, Delete: del,
			SourceTsMicros: ts.UnixMicro(), Values: []schema.Value{schema.Int(id), schema.String(status)}}
		if del {
			c.Values[1] = schema.Unavailable
		}
		c.Key = apply.EncodeKey(c.Values, layout.Key)
		off++
		return c
	}
	tp := checkpoint.TopicPartition{Topic: "orders"}
	for _, batch := range [][]*apply.Change{
		{ch(1, 1, false, "a", now.Add(-240*time.Hour)), ch(2, 1, false, "b", now.Add(-240*time.Hour)), ch(3, 1, false, "c", now.Add(-240*time.Hour))},
		{ch(2, 2, true, "", now.Add(-216*time.Hour))},
		{ch(3, 3, true, "", now.Add(-time.Hour))},
		{ch(4, 4, false, "d", now)},
	} {
		from := batch[0].Pos.Offset
		if _, err := a.Apply(context.Background(), &apply.Batch{Changes: batch, Read: len(batch),
			Ranges: map[checkpoint.TopicPartition]checkpoint.Range{tp: {From: from, Next: batch[len(batch)-1].Pos.Offset + 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cli runs one command line and returns stdout and the error.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	if err != nil && testing.Verbose() {
		t.Logf("%v: %v\nstderr: %s", args, err, errOut.String())
	}
	return out.String(), err
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, got)
		}
	}
}

// TestOpsCommandLine runs every table operation on a table in a directory
// and on one on an S3-compatible server (scripts/s3.sh).
func TestOpsCommandLine(t *testing.T) {
	t.Run("local", func(t *testing.T) { opsCommandLine(t, opsTable(t, "")) })
	t.Run("s3", func(t *testing.T) { opsCommandLine(t, opsTable(t, s3test.Location(t))) })
}

func opsCommandLine(t *testing.T, dir string) {

	out, err := cli(t, "tombstones", "stats", "--table", dir, "--max-lateness", "168h")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "stats", out, "4 rows, 2 tombstones", ": 1 tombstones in 1 files", "purge horizon: none")

	if _, err := cli(t, "tombstones", "purge", "--table", dir, "--max-lateness", "168h", "--older-than", "1h"); !errors.Is(err, tombstone.ErrTooRecent) {
		t.Fatalf("purge within the lateness: %v", err)
	}
	out, err = cli(t, "tombstones", "purge", "--table", dir, "--max-lateness", "168h", "--dry-run", "--key", "id")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "dry purge", out, "would purge 1 tombstones", "key id=2")
	out, err = cli(t, "tombstones", "purge", "--table", dir, "--max-lateness", "168h")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "purge", out, "purged 1 tombstones", "committed version 4")

	out, err = cli(t, "show", dir, "--version", "0", "--where", "id=2")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "show", out, "version 0", "2   b       ")
	out, err = cli(t, "show", "--table", dir, "--live", "--json")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"status":"a"`) {
		t.Fatalf("show --live --json: %v\n%s", err, out)
	}

	out, err = cli(t, "view-ddl", dir, "--dialect", "duckdb", "--view", "orders_current")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "view-ddl", out, "CREATE OR REPLACE VIEW orders_current AS", "delta_scan('", `WHERE NOT "_cdc_deleted";`)

	out, err = cli(t, "optimize", "--table", dir)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "optimize", out, "committed version 5: 2 files")

	out, err = cli(t, "restore", "--table", dir, "--to-version", "1", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "restore dry run", out, "would restore version 1 over version 5", "position cdcapply/p/orders/0 rewound to 4")

	if _, err := cli(t, "vacuum", "--table", dir, "--retention", "0s"); !errors.Is(err, delta.ErrRetentionTooShort) {
		t.Fatalf("vacuum with a short retention: %v", err)
	}
	time.Sleep(10 * time.Millisecond) // the removed files must be strictly older than "now"
	out, err = cli(t, "vacuum", "--table", dir, "--retention", "0s", "--force")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "vacuum", out, "deleted 5 of 6 files")
	if _, err := cli(t, "restore", "--table", dir, "--to-version", "1"); !errors.Is(err, delta.ErrFilesMissing) {
		t.Fatalf("restore after vacuum: %v", err)
	}
	if _, err := cli(t, "restore", "--table", dir); !errors.Is(err, errUsage) {
		t.Fatalf("restore without a target: %v", err)
	}
}

// TestRestoreChecksKafka restores against an in-process Kafka whose log
// of the table's partition no longer starts at the rewound offset.
func TestRestoreChecksKafka(t *testing.T) {
	dir := opsTable(t, "")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Retention took offsets 0..2: version 0 needs offset 3 (kept), the
	// table's start (a restore before version 0 is impossible anyway).
	adm := kadm.NewClient(cl)
	dr, err := adm.DeleteRecords(ctx, kadm.Offsets{"orders": {0: {At: 3}}})
	if err != nil || dr.Error() != nil {
		t.Fatalf("delete records: %v %v", err, dr.Error())
	}
	brokers := strings.Join(c.ListenAddrs(), ",")
	// Version 1 left the partition at offset 4: held.
	if out, err := cli(t, "restore", "--table", dir, "--to-version", "1", "--brokers", brokers, "--dry-run"); err != nil {
		t.Fatalf("restore to a held offset: %v\n%s", err, out)
	}
	dr, err = adm.DeleteRecords(ctx, kadm.Offsets{"orders": {0: {At: 5}}})
	if err != nil || dr.Error() != nil {
		t.Fatalf("delete records: %v %v", err, dr.Error())
	}
	_, err = cli(t, "restore", "--table", dir, "--to-version", "1", "--brokers", brokers)
	if !errors.Is(err, delta.ErrOffsetsGone) || !strings.Contains(err.Error(), "cdcapply/p/orders/0 needs 4 but the source starts at 5 (4..4 are gone)") {
		t.Fatalf("restore over a gap: %v", err)
	}
	out, err := cli(t, "restore", "--table", dir, "--to-version", "1", "--brokers", brokers, "--accept-gap")
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "restore --accept-gap", out, "GAP accepted: cdcapply/p/orders/0 needs offset 4, Kafka starts at 5", "committed version 4")
}

func TestProgress(t *testing.T) {
	var logged bytes.Buffer
	p := newProgress(&logged, auditLogger(&logged))
	p.report("vacuum", "scanned", 1)
	p.report("vacuum", "scanned", 2) // within the interval: dropped
	p.done()
	if got := logged.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"msg":"vacuum","scanned":1`) {
		t.Fatalf("log progress: %q", got)
	}
	var tty bytes.Buffer
	p = &progress{w: &tty, tty: true, interval: 0}
	p.report("vacuum", "scanned", 1)
	p.report("vacuum", "scanned", 2)
	p.done()
	if got := tty.String(); got != "\rvacuum scanned=1   \rvacuum scanned=2   \n" {
		t.Fatalf("terminal progress: %q", got)
	}
}
