package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestDumpWritesEveryRecord(t *testing.T) {
	var out bytes.Buffer
	args := []string{"dump", "-events", "50", "-keys", "20", "-snapshot-keys", "5", "-partitions", "2", "-duplicates", "0.2"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 55 { // 5 reads + 50 changes, plus tombstones and duplicates
		t.Fatalf("%d records", len(lines))
	}
	next := map[float64]float64{}
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		p, off := r["partition"].(float64), r["offset"].(float64)
		if off != next[p] {
			t.Fatalf("partition %v: offset %v, want %v", p, off, next[p])
		}
		next[p]++
	}
	if len(next) != 2 {
		t.Fatalf("records in %d partitions, want 2", len(next))
	}
}

func TestRejectsUnknownCommand(t *testing.T) {
	if err := run(context.Background(), []string{"frobnicate"}, &bytes.Buffer{}); err == nil {
		t.Fatal("unknown command accepted")
	}
	if err := run(context.Background(), []string{"verify"}, &bytes.Buffer{}); err == nil {
		t.Fatal("verify without -table accepted")
	}
}

func TestConfigFileThenFlags(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/w.json"
	if err := os.WriteFile(file, []byte(`{"Partitions": 5, "Events": 7, "Keys": 10, "SnapshotKeys": 0, "KafkaTombstones": false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"dump", "-config", file, "-events", "9", "-duplicates", "0", "-replays", "0"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r["partition"].(float64) >= 5 {
			t.Fatalf("partition %v of 5", r["partition"])
		}
	}
	if len(lines) != 9 { // the flag's 9 events, not the file's 7
		t.Fatalf("%d records, want 9", len(lines))
	}
}
