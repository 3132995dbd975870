package apply

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// realBrokers returns the brokers of the real Apache Kafka broker that
// scripts/kafka.sh started (CDCAPPLY_KAFKA_BROKERS). Without one the tests
// skip on a developer's machine and fail under CI=true.
func realBrokers(t *testing.T) []string {
	t.Helper()
	b := os.Getenv("CDCAPPLY_KAFKA_BROKERS")
	if b == "" {
		msg := "no real Kafka broker (start one with scripts/kafka.sh start and set CDCAPPLY_KAFKA_BROKERS)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return strings.Split(b, ",")
}

// realTopic creates a fresh topic (the broker keeps data across runs).
func realTopic(t *testing.T, brokers []string, nparts int32) string {
	t.Helper()
	return realTopicWith(t, brokers, nparts, nil)
}

// realTopicWith is realTopic with topic configs.
func realTopicWith(t *testing.T, brokers []string, nparts int32, configs map[string]*string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := fmt.Sprintf("cdcapply-test-%d-%d", time.Now().UnixNano(), rand.IntN(1000))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, nparts, 1, configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	return topic
}

// TestRealKafkaReferenceCase is the reference case, with its bad records,
// against a real Apache Kafka broker in KRaft mode.
func TestRealKafkaReferenceCase(t *testing.T) {
	brokers := realBrokers(t)
	topic := realTopic(t, brokers, 3)
	runReferenceCase(t, brokers, topic, topic+"-group", 3, kgo.Lz4Compression(), "", CopyOnWrite)
}

// TestRealKafkaRebalanceAndBrokerRestart runs two instances in one group
// against a real broker while partitions move between them, restarts the
// broker mid-stream (scripts/kafka.sh restart), and checks the table
// against the oracle.
func TestRealKafkaRebalanceAndBrokerRestart(t *testing.T) {
	brokers := realBrokers(t)
	const nparts = 4
	topic := realTopic(t, brokers, nparts)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	p := &producer{t: t, cl: pcl, topic: topic, nparts: nparts, ends: map[int32]int64{}}
	oracle := ordersOracle{}
	rng := rand.New(rand.NewPCG(3, 5))
	lsn := int64(0)
	produce := func(n int) {
		for i := 0; i < n; i++ {
			id := rng.IntN(60)
			lsn++
			op := []string{"c", "u", "u", "u", "d"}[rng.IntN(5)]
			status := fmt.Sprintf("s%d", lsn)
			p.change(id, lsn, op, status)
			oracle.apply(id, op, status)
		}
	}
	dir := t.TempDir()
	cfg := testConfigFor(t, brokers, dir, topic, topic+"-group")
	// Two writers on one table: B takes half of its partitions (under
	// the default, tables, B would wait idle until A stops).
	cfg.Kafka.Assignment = AssignPartitions
	table := dir + "/orders"

	_, stopA := startEngineWith(t, cfg, KafkaOptions(kgo.ClientID("instance-a")))
	produce(200)
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	_, stopB := startEngineWith(t, cfg, KafkaOptions(kgo.ClientID("instance-b")))
	for i := 0; i < 10; i++ {
		produce(30)
		time.Sleep(50 * time.Millisecond)
	}
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)

	// Restart the broker mid-stream; both instances and the producer ride
	// it out.
	produce(100)
	script, _ := filepath.Abs(filepath.Join("..", "scripts", "kafka.sh"))
	out, err := exec.Command(script, "restart").CombinedOutput()
	if err != nil {
		t.Fatalf("kafka.sh restart: %v\n%s", err, out)
	}
	produce(100)
	waitPositionsFor(t, table, topic, p.ends, 3*time.Minute)
	stopA()
	produce(50)
	waitPositionsFor(t, table, topic, p.ends, 2*time.Minute)
	stopB()

	if got, want := readOrders(t, table), oracle.rows(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("table differs from the oracle:\n got %v\nwant %v", got, want)
	}
}
