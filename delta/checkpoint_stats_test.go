package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcapply/cdcapply/delta/storage"
)

func TestStatsValueFormats(t *testing.T) {
	dec := []struct {
		unscaled int64
		scale    int32
		want     string
	}{
		{12345, 2, "123.45"}, {-12345, 2, "-123.45"}, {5, 3, "0.005"}, {-5, 3, "-0.005"},
		{0, 2, "0.00"}, {7, 0, "7"}, {7, -2, "700"},
	}
	for _, c := range dec {
		if got := statsDecimal(big.NewInt(c.unscaled), c.scale); got != json.Number(c.want) {
			t.Errorf("decimal %d scale %d: %s, want %s", c.unscaled, c.scale, got, c.want)
		}
	}
	be := map[string]int64{"\x00": 0, "\x7f": 127, "\xff": -1, "\x80": -128, "\x01\x00": 256, "\xfe\xd4": -300}
	for in, want := range be {
		if got := statsBigEndian([]byte(in)); got.Int64() != want {
			t.Errorf("big-endian %x: %v, want %d", in, got, want)
		}
	}
	if got := statsDate(19723); got != "2024-01-01" {
		t.Errorf("date: %s", got)
	}
	if got := statsDate(-1); got != "1969-12-31" {
		t.Errorf("date before epoch: %s", got)
	}
	ts := time.Date(2024, 1, 2, 3, 4, 5, 678_901_000, time.UTC)
	if got := statsTimestamp(ts.UnixMicro(), time.Microsecond, true); got != "2024-01-02T03:04:05.678Z" {
		t.Errorf("timestamp: %s", got)
	}
	if got := statsTimestamp(ts.UnixMilli(), time.Millisecond, false); got != "2024-01-02T03:04:05.678" {
		t.Errorf("timestamp_ntz: %s", got)
	}
	if got := statsTimestamp(ts.UnixNano(), time.Nanosecond, true); got != "2024-01-02T03:04:05.678Z" {
		t.Errorf("timestamp nanos: %s", got)
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, ok := statsFloat(f); ok {
			t.Errorf("%v kept in JSON stats", f)
		}
	}
	if v, ok := statsFloat(1.5); !ok || v != 1.5 {
		t.Errorf("1.5: %v %v", v, ok)
	}
}

// TestStatsParsedMatchesJSON rebuilds the JSON stats of a checkpoint that
// has both forms (kernel-data/parsed-stats: long, string and timestamp
// columns) from stats_parsed alone and compares them with the JSON form
// the writer stored.
func TestStatsParsedMatchesJSON(t *testing.T) {
	dir := ckptTable(t, "kernel-data/parsed-stats")
	data, err := os.ReadFile(filepath.Join(dir, LogDir, "00000000000000000003.checkpoint.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	d := &ckptDecoder{root: f.Root(), nrows: int(f.NumRows()), buf: make([]parquet.Value, 64),
		intern: map[string]string{}, internPtrs: map[string]*string{}}
	add := d.root.Column("add")
	idx, n := d.present(add, nil)
	stored := make([]string, n)
	rebuilt := make([]string, n)
	d.str(add.Column("stats"), idx, func(i int32, s string) { stored[i] = s })
	d.statsParsed(add.Column("stats_parsed"), idx, func(i int32, s string) { rebuilt[i] = s })
	if d.err != nil {
		t.Fatal(d.err)
	}
	if n == 0 {
		t.Fatal("no adds")
	}
	// The table schema decides the timestamp format, as in readCheckpoint.
	acts, err := readCheckpoint(context.Background(), storage.NewLocal(dir), 3,
		[]string{LogDir + "/00000000000000000003.checkpoint.parquet"})
	if err != nil {
		t.Fatal(err)
	}
	var md *Metadata
	for _, a := range acts {
		if a.Metadata != nil {
			md = a.Metadata
		}
	}
	adds := make([]*Add, n)
	for i := range adds {
		adds[i] = &Add{Path: fmt.Sprint(i), Stats: rebuilt[i]}
	}
	if err := statsFixTimestamps(adds, md); err != nil {
		t.Fatal(err)
	}
	for i := range stored {
		if !strings.Contains(stored[i], "ts_col") || !ckptSameJSON(t, adds[i].Stats, stored[i]) {
			t.Errorf("add %d:\nrebuilt %s\nstored  %s", i, adds[i].Stats, stored[i])
		}
	}
}

func TestStatsFixTimestamps(t *testing.T) {
	md := &Metadata{SchemaString: `{"type":"struct","fields":[` +
		`{"name":"ts","type":"timestamp","nullable":true,"metadata":{"delta.columnMapping.physicalName":"col-1"}},` +
		`{"name":"ntz","type":"timestamp_ntz","nullable":true,"metadata":{}},` +
		`{"name":"s","type":{"type":"struct","fields":[{"name":"inner","type":"timestamp","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},` +
		`{"name":"name","type":"string","nullable":true,"metadata":{}}]}`}
	a := &Add{Stats: `{"numRecords":2,"minValues":{"col-1":"2024-01-01T00:00:00.000","ntz":"2024-01-01T00:00:00.000Z",` +
		`"s":{"inner":"2024-01-02T00:00:00.000"},"name":"2024-01-01T00:00:00.000"},"maxValues":{"col-1":"2024-01-03T00:00:00.000Z"},"nullCount":{"col-1":0}}`}
	if err := statsFixTimestamps([]*Add{a}, md); err != nil {
		t.Fatal(err)
	}
	want := `{"numRecords":2,"minValues":{"col-1":"2024-01-01T00:00:00.000Z","ntz":"2024-01-01T00:00:00.000",` +
		`"s":{"inner":"2024-01-02T00:00:00.000Z"},"name":"2024-01-01T00:00:00.000"},"maxValues":{"col-1":"2024-01-03T00:00:00.000Z"},"nullCount":{"col-1":0}}`
	if !ckptSameJSON(t, a.Stats, want) {
		t.Fatalf("got %s\nwant %s", a.Stats, want)
	}
}
