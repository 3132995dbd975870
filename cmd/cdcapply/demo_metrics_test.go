package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDemoServesMetrics runs `cdcapply demo -metrics-address` (what
// scripts/ops-plot.sh scrapes): while it lingers after the check, /metrics
// reports every record and a freshness of seconds, not months (source
// times come from the wall clock), and /readyz is 200.
func TestDemoServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"demo", "-dir", dir, "-events", "2000", "-keys", "300", "-rate", "0",
			"-metrics-address", addr, "-linger", "3s"}, &out, &errOut)
	}()
	var metrics string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the demo ended before lingering (err %v):\n%s\n%s", err, out.String(), errOut.String())
		case <-time.After(100 * time.Millisecond):
		}
		if !strings.Contains(out.String(), "the engine idles") {
			continue
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		ready, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		ready.Body.Close()
		if ready.StatusCode != http.StatusOK {
			t.Errorf("/readyz: %s", ready.Status)
		}
		break
	}
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if metrics == "" {
		t.Fatalf("never scraped:\n%s", out.String())
	}
	var records, fresh float64 = 0, -1
	sc := bufio.NewScanner(strings.NewReader(metrics))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(f[0], `cdcapply_records_total{`):
			records += v
		case f[0] == `cdcapply_table_freshness_seconds{table="orders"}`:
			fresh = v
		}
	}
	// "N records (...) applied" in the demo's own summary.
	var total float64
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "records" && strings.Contains(line, "applied in") {
			total, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	if total == 0 || records != total {
		t.Errorf("cdcapply_records_total sums to %v, the demo applied %v records", records, total)
	}
	if fresh < 0 || fresh > 120 {
		t.Errorf("freshness %v s, want a few seconds (wall-clock source times)", fresh)
	}
	if !strings.Contains(metrics, "go_goroutines") || !strings.Contains(metrics, "cdcapply_kafka_connects_total") {
		t.Error("/metrics lacks the Go or kprom collectors `run` serves")
	}
}

// lockedBuffer is a buffer the demo goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
