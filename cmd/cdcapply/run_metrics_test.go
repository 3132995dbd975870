package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRunServesMetrics: `cdcapply run` with metrics.address serves
// /healthz at once, /readyz once its partition is positioned, and
// /metrics with the engine's series after a record is applied.
func TestRunServesMetrics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the server
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pipeline.yaml")
	yaml := fmt.Sprintf("pipeline: {id: shop}\nkafka: {brokers: [%s], group: g}\nmetrics: {address: %q}\ndefaults: {flush: {max_latency: 50ms}}\ntables:\n  - {name: orders, topic: orders, location: %s/orders}\n",
		c.ListenAddrs()[0], addr, dir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRun(ctx, []string{"-c", cfg, "-log-level", "error"}, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	// A Debezium PostgreSQL insert as JsonConverter writes it with schemas.
	row := `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"status"}],"optional":true,"name":"pg.public.orders.Value","field":"%s"}`
	src := `{"type":"struct","fields":[{"type":"string","optional":false,"field":"connector"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}`
	schema := `{"type":"struct","fields":[` + fmt.Sprintf(row, "before") + `,` + fmt.Sprintf(row, "after") + `,` + src +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"pg.public.orders.Envelope"}`
	payload := `{"before":null,"after":{"id":1,"status":"new"},"source":{"connector":"postgresql","ts_ms":1700000000000,"sequence":"[null,\"10\"]","table":"orders","lsn":10},"op":"c","ts_ms":1700000000001}`
	key := `{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"pg.public.orders.Key"},"payload":{"id":1}}`
	value := `{"schema":` + schema + `,"payload":` + payload + `}`
	if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/healthz": "ok",
		"/readyz":  "ready",
		"/metrics": `cdcapply_records_total{outcome="applied",reason="",table="orders"} 1`,
	}
	for path, body := range want {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, got := httpGet("http://" + addr + path)
			if code == http.StatusOK && strings.Contains(got, body) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %d, want 200 with %q; got:\n%.3000s", path, code, body, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunInstanceIDFlag: -instance-id makes the process a static member
// under that id, over the file's kafka.instance_id (one pipeline file for
// every process of a group); an id Kafka would refuse stops run at once.
func TestRunInstanceIDFlag(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pipeline.yaml")
	yaml := fmt.Sprintf("pipeline: {id: shop}\nkafka: {brokers: [%s], group: g, instance_id: from-file}\ntables:\n  - {name: orders, topic: orders, location: %s/orders}\n",
		c.ListenAddrs()[0], dir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	err = runRun(ctx, []string{"-c", cfg, "-instance-id", "pod 0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `-instance-id: "pod 0" is not a valid group.instance.id`) {
		t.Fatalf("run -instance-id 'pod 0' = %v", err)
	}

	done := make(chan error, 1)
	go func() {
		done <- runRun(ctx, []string{"-c", cfg, "-log-level", "error", "-instance-id", "replica-7"}, io.Discard, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var ids []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids = ids[:0]
		groups, err := adm.DescribeGroups(ctx, "g")
		if err == nil {
			for _, m := range groups["g"].Members {
				if m.InstanceID != nil {
					ids = append(ids, *m.InstanceID)
				}
			}
		}
		if len(ids) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if fmt.Sprint(ids) != "[replica-7]" {
		t.Errorf("the group's static members are %v, want [replica-7]", ids)
	}
}
