// Command dump copies Kafka topics, from the first offset to the end offset
// seen at start, into one JSON Lines file per topic, so that what a real
// Debezium connector wrote can be kept as test fixtures byte for byte.
//
// Each line is {"topic","partition","offset","timestamp","key_b64",
// "value_b64","headers":[{"key","value_b64"}]}; a null key or value is JSON
// null. Timestamps are Kafka record timestamps in Unix milliseconds.
//
// With -registry, every key and value that starts with the Confluent wire
// format (magic byte 0 and a 4-byte big-endian schema id) has its id looked
// up with GET /schemas/ids/{id}, and schemas.json maps each id (as a decimal
// string) to its schema string. An id the registry cannot resolve is an error: it means the bytes
// were not in the Confluent format after all.
package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type header struct {
	Key      string  `json:"key"`
	ValueB64 *string `json:"value_b64"`
}

type line struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Timestamp int64    `json:"timestamp"`
	KeyB64    *string  `json:"key_b64"`
	ValueB64  *string  `json:"value_b64"`
	Headers   []header `json:"headers"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dump:", err)
		os.Exit(1)
	}
}

func run() error {
	brokers := flag.String("brokers", "127.0.0.1:19092", "comma-separated bootstrap brokers")
	out := flag.String("out", "", "output directory (created)")
	include := flag.String("topics", ".*", "regular expression of topics to dump")
	exclude := flag.String("exclude", "^(_|__)", "regular expression of topics to skip")
	registry := flag.String("registry", "", "Confluent-compatible schema registry URL; resolves wire-format schema ids into schemas.json")
	timeout := flag.Duration("timeout", 60*time.Second, "give up when the end offsets are not reached in this time")
	flag.Parse()
	if *out == "" {
		return errors.New("parse flags: -out is required")
	}
	inc, err := regexp.Compile(*include)
	if err != nil {
		return fmt.Errorf("compile -topics: %w", err)
	}
	exc, err := regexp.Compile(*exclude)
	if err != nil {
		return fmt.Errorf("compile -exclude: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	var names []string
	for _, t := range topics.Sorted() {
		if inc.MatchString(t.Topic) && !exc.MatchString(t.Topic) {
			names = append(names, t.Topic)
		}
	}
	if len(names) == 0 {
		return errors.New("list topics: none match")
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	// remaining counts the partitions still short of their end offset.
	want := map[string]map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
			remaining++
		}
	})
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	byTopic := map[string][]line{}
	ids := map[int32]bool{}
	if remaining > 0 {
		cons, err := kgo.NewClient(
			kgo.SeedBrokers(strings.Split(*brokers, ",")...),
			kgo.ConsumeTopics(names...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		if err != nil {
			return fmt.Errorf("create consumer: %w", err)
		}
		defer cons.Close()
		for remaining > 0 {
			fs := cons.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("poll: %d partitions not at their end offset: %w", remaining, err)
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err) })
			if ferr != nil {
				return ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				end, ok := want[r.Topic][r.Partition]
				if !ok || r.Offset >= end {
					return
				}
				byTopic[r.Topic] = append(byTopic[r.Topic], toLine(r))
				for _, b := range [][]byte{r.Key, r.Value} {
					if id, ok := wireID(b); ok {
						ids[id] = true
					}
				}
				if r.Offset == end-1 {
					remaining--
				}
			})
		}
	}
	for _, t := range names {
		if err := writeTopic(filepath.Join(*out, t+".jsonl"), byTopic[t]); err != nil {
			return err
		}
	}
	if *registry != "" && len(ids) > 0 {
		if err := writeSchemas(ctx, *registry, ids, filepath.Join(*out, "schemas.json")); err != nil {
			return err
		}
	}
	total := 0
	for _, ls := range byTopic {
		total += len(ls)
	}
	fmt.Printf("dumped %d records from %d topics into %s (%d schema ids)\n", total, len(names), *out, len(ids))
	return nil
}

func b64(b []byte) *string {
	if b == nil {
		return nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s
}

func toLine(r *kgo.Record) line {
	l := line{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Timestamp: r.Timestamp.UnixMilli(),
		KeyB64:    b64(r.Key),
		ValueB64:  b64(r.Value),
		Headers:   []header{},
	}
	for _, h := range r.Headers {
		l.Headers = append(l.Headers, header{Key: h.Key, ValueB64: b64(h.Value)})
	}
	return l
}

// wireID reports the schema id of a Confluent wire-format payload.
func wireID(b []byte) (int32, bool) {
	if len(b) < 5 || b[0] != 0 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(b[1:5])), true
}

func writeTopic(path string, lines []line) error {
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].Partition != lines[j].Partition {
			return lines[i].Partition < lines[j].Partition
		}
		return lines[i].Offset < lines[j].Offset
	})
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	enc := json.NewEncoder(f)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func writeSchemas(ctx context.Context, registry string, ids map[int32]bool, path string) error {
	out := map[string]string{}
	for id := range ids {
		url := strings.TrimRight(registry, "/") + "/schemas/ids/" + strconv.Itoa(int(id))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("build request %s: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("get schema %d: %w", id, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("read schema %d: %w", id, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("get schema %d: status %d: %s", id, resp.StatusCode, body)
		}
		var s struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal(body, &s); err != nil || s.Schema == "" {
			return fmt.Errorf("decode schema %d: %q: %v", id, body, err)
		}
		out[strconv.Itoa(int(id))] = s.Schema
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode schemas: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
