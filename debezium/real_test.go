package debezium

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cdcapply/cdcapply/schema"
)

// realRun is one recorded fixture directory: testdata/real/<source>-<converter>/
// holding <topic>.jsonl files and, for Avro runs, schemas.json.
type realRun struct {
	name    string
	dir     string
	records []Record
	schemas mapRegistry // nil for JSON runs
}

type realLine struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Timestamp any     `json:"timestamp"`
	KeyB64    *string `json:"key_b64"`
	ValueB64  *string `json:"value_b64"`
	Headers   []struct {
		Key      string  `json:"key"`
		ValueB64 *string `json:"value_b64"`
	} `json:"headers"`
}

func decodeB64(s *string) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if b == nil && err == nil {
		b = []byte{}
	}
	return b, err
}

// realRunsCache keeps the recorded runs once read: every real-fixture
// test reads them all, and the end-to-end runs alone hold ~12k records.
// Tests only read the records.
var realRunsCache struct {
	sync.Mutex
	runs   []realRun
	loaded bool
}

// loadRealRuns reads every recorded run (once per test binary); none yet
// is not an error.
func loadRealRuns(t testing.TB) []realRun {
	realRunsCache.Lock()
	defer realRunsCache.Unlock()
	if !realRunsCache.loaded {
		realRunsCache.runs = readRealRuns(t)
		realRunsCache.loaded = true
	}
	return realRunsCache.runs
}

func readRealRuns(t testing.TB) []realRun {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "real", "*"))
	var runs []realRun
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		run := realRun{name: filepath.Base(dir), dir: dir}
		if b, err := os.ReadFile(filepath.Join(dir, "schemas.json")); err == nil {
			var m map[string]string
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s/schemas.json: %v", dir, err)
			}
			run.schemas = mapRegistry{}
			for k, v := range m {
				id, err := strconv.Atoi(k)
				if err != nil {
					t.Fatalf("%s/schemas.json: id %q", dir, k)
				}
				run.schemas[id] = v
			}
		}
		// Large runs (scripts/e2e.sh) are kept gzipped.
		files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		gz, _ := filepath.Glob(filepath.Join(dir, "*.jsonl.gz"))
		files = append(files, gz...)
		sort.Strings(files)
		for _, file := range files {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			var in io.Reader = f
			if strings.HasSuffix(file, ".gz") {
				zr, err := gzip.NewReader(f)
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				in = zr
			}
			sc := bufio.NewScanner(in)
			sc.Buffer(make([]byte, 1<<20), 64<<20)
			for sc.Scan() {
				if len(strings.TrimSpace(sc.Text())) == 0 {
					continue
				}
				var l realLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				key, err1 := decodeB64(l.KeyB64)
				val, err2 := decodeB64(l.ValueB64)
				if err1 != nil || err2 != nil {
					t.Fatalf("%s offset %d: base64: %v %v", file, l.Offset, err1, err2)
				}
				r := Record{Topic: l.Topic, Partition: l.Partition, Offset: l.Offset, Key: key, Value: val}
				for _, h := range l.Headers {
					hv, _ := decodeB64(h.ValueB64)
					r.Headers = append(r.Headers, Header{Key: h.Key, Value: hv})
				}
				run.records = append(run.records, r)
			}
			f.Close()
			if err := sc.Err(); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		runs = append(runs, run)
	}
	return runs
}

// realSeeds returns recorded records for fuzz seed corpora.
func realSeeds(t testing.TB, avro bool) []Record {
	var out []Record
	for _, run := range loadRealRuns(t) {
		if (run.schemas != nil) == avro {
			out = append(out, run.records...)
		}
	}
	if len(out) > 200 {
		out = out[:200]
	}
	return out
}

// decoded is one record of a real run with its decode result.
type decoded struct {
	rec Record
	ch  Change
}

// decodeRun decodes every record of a run and fails on any rejection:
// real Debezium output must decode completely.
func decodeRun(t *testing.T, run realRun, d *Decoder) map[string][]decoded {
	t.Helper()
	byTopic := map[string][]decoded{}
	for _, r := range run.records {
		ch, err := d.Decode(context.Background(), &r)
		if err != nil {
			t.Errorf("%s: %v", run.name, err)
			continue
		}
		byTopic[r.Topic] = append(byTopic[r.Topic], decoded{r, ch})
	}
	return byTopic
}

func findRun(runs []realRun, name string) (realRun, bool) {
	for _, r := range runs {
		if r.name == name {
			return r, true
		}
	}
	return realRun{}, false
}

// inlineRowTypes compiles the value schemas inlined in a JSON run, keyed by
// table name, to type the same tables' schema-less records.
func inlineRowTypes(t *testing.T, run realRun) map[string]*schema.Type {
	t.Helper()
	out := map[string]*schema.Type{}
	for _, r := range run.records {
		if r.Value == nil || !strings.Contains(r.Topic, ".cdc.") {
			continue
		}
		var v struct {
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		env, err := schema.ParseConnect(v.Schema, nil)
		if err != nil {
			t.Fatal(err)
		}
		table := r.Topic[strings.LastIndexByte(r.Topic, '.')+1:]
		out[table] = env.Fields[env.Field("after")].Type
	}
	return out
}

func realDecoders(t *testing.T, runs []realRun) map[string]*Decoder {
	t.Helper()
	out := map[string]*Decoder{}
	json, ok := findRun(runs, "postgres-json")
	if !ok {
		return out
	}
	d, err := New(SourceConnector(ConnectorPostgres))
	if err != nil {
		t.Fatal(err)
	}
	out["postgres-json"] = d
	if _, ok := findRun(runs, "postgres-flat"); ok {
		d, err := New(SourceConnector(ConnectorPostgres), EnvelopeShape(EnvelopeFlattened))
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-flat"] = d
	}
	if run, ok := findRun(runs, "postgres-avro"); ok {
		d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(run.schemas))
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-avro"] = d
	}
	if _, ok := findRun(runs, "postgres-jsonmodes"); ok {
		// binary.handling.mode=hex sends bytea as hex text in string
		// columns; decimal.handling.mode=string sends numerics as text.
		d, err := New(SourceConnector(ConnectorPostgres), BinaryHandling(schema.BinaryHex),
			BinaryColumns("c_bytea", "blob"), DecimalHandling(schema.DecimalString))
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-jsonmodes"] = d
	}
	if _, ok := findRun(runs, "mariadb-json"); ok {
		d, err := New(SourceConnector(ConnectorMySQL))
		if err != nil {
			t.Fatal(err)
		}
		out["mariadb-json"] = d
	}
	if run, ok := findRun(runs, "mariadb-avro"); ok {
		d, err := New(SourceConnector(ConnectorMySQL), ValueFormat(FormatAvro), SchemaRegistry(run.schemas))
		if err != nil {
			t.Fatal(err)
		}
		out["mariadb-avro"] = d
	}
	// The end-to-end runs (scripts/e2e.sh): default connector settings.
	if _, ok := findRun(runs, "postgres-e2e-json"); ok {
		d, err := New(SourceConnector(ConnectorPostgres))
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-e2e-json"] = d
	}
	if run, ok := findRun(runs, "postgres-e2e-avro"); ok {
		d, err := New(SourceConnector(ConnectorPostgres), ValueFormat(FormatAvro), SchemaRegistry(run.schemas))
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-e2e-avro"] = d
	}
	if _, ok := findRun(runs, "postgres-jsonnoschema"); ok {
		opts := []Option{SourceConnector(ConnectorPostgres)}
		for table, rt := range inlineRowTypes(t, json) {
			opts = append(opts, RowType("postgres_jsonnoschema.cdc."+table, rt))
		}
		d, err := New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		out["postgres-jsonnoschema"] = d
	}
	return out
}

func requireRealRuns(t *testing.T) []realRun {
	runs := loadRealRuns(t)
	if _, ok := findRun(runs, "postgres-json"); !ok {
		if os.Getenv("CI") == "true" {
			t.Fatal("no recorded Debezium fixtures in testdata/real (scripts/record-fixtures.sh)")
		}
		t.Skip("no recorded Debezium fixtures in testdata/real")
	}
	return runs
}

// TestRealFixturesDecodeInOrder decodes every recorded record of every run
// and checks what holds on any real stream: no rejections, every change
// sequenced, sequences never decreasing along a partition (Debezium writes
// in commit order), and each class where it belongs.
func TestRealFixturesDecodeInOrder(t *testing.T) {
	runs := requireRealRuns(t)
	for name, d := range realDecoders(t, runs) {
		run, _ := findRun(runs, name)
		counts := map[Class]int{}
		for topic, recs := range decodeRun(t, run, d) {
			var prev Sequence
			for _, x := range recs {
				counts[x.ch.Class]++
				switch {
				case strings.HasPrefix(topic, "__debezium-heartbeat"):
					if x.ch.Class != ClassHeartbeat {
						t.Errorf("%s %s: class %s on the heartbeat topic", name, x.ch.Pos, x.ch.Class)
					}
					continue
				case !strings.Contains(topic, "."):
					// The MySQL connector's schema change topic is the bare
					// topic prefix.
					if x.ch.Class != ClassSchemaChange {
						t.Errorf("%s %s: class %s on the schema change topic", name, x.ch.Pos, x.ch.Class)
					}
					continue
				case strings.HasSuffix(topic, ".transaction"):
					if x.ch.Class != ClassTransaction || (x.ch.Tx.Status != "BEGIN" && x.ch.Tx.Status != "END") || x.ch.Tx.ID == "" {
						t.Errorf("%s %s: transaction marker %+v", name, x.ch.Pos, x.ch)
					}
					continue
				}
				if x.rec.Value == nil {
					if x.ch.Class != ClassKafkaTombstone {
						t.Errorf("%s %s: null value decoded as %s", name, x.ch.Pos, x.ch.Class)
					}
					continue
				}
				if x.ch.Class != ClassChange || !x.ch.Seq.Valid() {
					t.Errorf("%s %s: %+v", name, x.ch.Pos, x.ch)
					continue
				}
				if prev.Valid() && x.ch.Seq.Compare(prev) < 0 {
					t.Errorf("%s %s: sequence %s after %s", name, x.ch.Pos, x.ch.Seq, prev)
				}
				prev = x.ch.Seq
			}
		}
		want := []Class{ClassChange, ClassKafkaTombstone, ClassHeartbeat}
		if strings.HasPrefix(name, "postgres") {
			want = append(want, ClassTransaction) // provide.transaction.metadata=true
		} else {
			want = append(want, ClassSchemaChange) // the MySQL schema change topic
		}
		for _, c := range want {
			if counts[c] == 0 {
				t.Errorf("%s: no %s records", name, c)
			}
		}
	}
}

// changesOf returns the row changes of a table's topic in a run, in order.
func changesOf(byTopic map[string][]decoded, prefix, table string) []Change {
	var out []Change
	for _, x := range byTopic[prefix+".cdc."+table] {
		if x.ch.Class == ClassChange {
			out = append(out, x.ch)
		}
	}
	return out
}

// TestRealFixturesAgreeAcrossForms checks that the three recorded forms of
// the same workload (JSON with inline schema, schema-less JSON typed by the
// table's row type, flattened) decode to the same changes value by value.
func TestRealFixturesAgreeAcrossForms(t *testing.T) {
	runs := requireRealRuns(t)
	decs := realDecoders(t, runs)
	jsonRun, _ := findRun(runs, "postgres-json")
	base := decodeRun(t, jsonRun, decs["postgres-json"])
	for _, other := range []struct{ run, prefix string }{{"postgres-jsonnoschema", "postgres_jsonnoschema"}, {"postgres-flat", "postgres_flat"}, {"postgres-avro", "postgres_avro"}} {
		run, ok := findRun(runs, other.run)
		if !ok {
			continue
		}
		got := decodeRun(t, run, decs[other.run])
		compareForms(t, other.run, changesOf2(base, "postgres_json.cdc"), changesOf2(got, other.prefix+".cdc"),
			[]string{"all_types", "order_lines", "documents", "scratch", "accounts", "places"}, other.run == "postgres-flat")
	}
}

// TestRealMariaDBFormsAgree checks that the Avro recording of the MariaDB
// workload decodes to the same changes as the JSON one, value by value.
func TestRealMariaDBFormsAgree(t *testing.T) {
	runs := requireRealRuns(t)
	jsonRun, ok1 := findRun(runs, "mariadb-json")
	avroRun, ok2 := findRun(runs, "mariadb-avro")
	if !ok1 || !ok2 {
		t.Skip("no MariaDB recordings")
	}
	decs := realDecoders(t, runs)
	base := decodeRun(t, jsonRun, decs["mariadb-json"])
	got := decodeRun(t, avroRun, decs["mariadb-avro"])
	compareForms(t, "mariadb-avro", changesOf2(base, "mariadb_json.cdcfix"), changesOf2(got, "mariadb_avro.cdcfix"),
		[]string{"all_types", "order_lines", "scratch"}, false)
}

// changesOf2 returns a function listing a table's row changes under a
// topic prefix.
func changesOf2(byTopic map[string][]decoded, prefix string) func(table string) []Change {
	return func(table string) []Change {
		var out []Change
		for _, x := range byTopic[prefix+"."+table] {
			if x.ch.Class == ClassChange {
				out = append(out, x.ch)
			}
		}
		return out
	}
}

// compareForms requires the same ops, keys, sequences and images, table by
// table and change by change, from two recordings of one workload.
func compareForms(t *testing.T, name string, base, other func(string) []Change, tables []string, flat bool) {
	t.Helper()
	for _, table := range tables {
		want := base(table)
		if flat {
			// ExtractNewRecordState drops truncate events.
			want = slices.DeleteFunc(slices.Clone(want), func(c Change) bool { return c.Op == OpTruncate })
		}
		have := other(table)
		if len(have) != len(want) || len(want) == 0 {
			t.Errorf("%s %s: %d changes, want %d", name, table, len(have), len(want))
			continue
		}
		for i := range want {
			w, h := want[i], have[i]
			if w.Op != h.Op || !sameKey(w.Key, h.Key) {
				t.Errorf("%s %s #%d: op %s key %v, want op %s key %v", name, table, i, h.Op, h.Key, w.Op, w.Key)
				continue
			}
			switch {
			case w.Op == OpRead:
			case flat:
				// The recording's add.fields=op,lsn,source.ts_ms carries
				// no source.sequence: only the lsn can agree.
				if h.Seq.Parts[0].Kind != PartNull || h.Seq.Parts[1] != w.Seq.Parts[1] {
					t.Errorf("%s %s #%d: seq %s, want lsn of %s", name, table, i, h.Seq, w.Seq)
				}
			case w.Seq.Compare(h.Seq) != 0:
				// Streamed changes sit at the same log position in every recording.
				t.Errorf("%s %s #%d: seq %s, want %s", name, table, i, h.Seq, w.Seq)
			}
			wImg, hImg := w.After, h.After
			if w.Op == OpDelete {
				wImg, hImg = w.Before, h.Before
			}
			sameRow(t, fmt.Sprintf("%s %s #%d", name, table, i), hImg, wImg)
		}
	}
}

func sameKey(a, b Key) bool {
	if len(a.Values) != len(b.Values) {
		return false
	}
	for i := range a.Values {
		if a.Names[i] != b.Names[i] || !a.Values[i].Equal(b.Values[i]) {
			return false
		}
	}
	return true
}

func sameRow(t *testing.T, what string, got, want Row) {
	t.Helper()
	if got.Present() != want.Present() {
		t.Errorf("%s: image present %v, want %v", what, got.Present(), want.Present())
		return
	}
	for _, c := range want.Columns() {
		wv, _ := want.Get(c.Name)
		gv, ok := got.Get(c.Name)
		if !ok || !gv.Equal(wv) {
			t.Errorf("%s: column %s = %#v, want %#v", what, c.Name, gv, wv)
		}
	}
}

// TestRealOldKeyHeaders: every create that recorded Debezium runs sent
// for a primary-key change names its old key in OldKeyHeader, and
// HeaderKey reads it, typed by the create's row, as the key of an earlier
// delete in the same topic: the delete whose newkey header is the
// create's key. In every run, JSON and Avro alike, the header is the JSON
// object Kafka Connect's default header converter writes.
func TestRealOldKeyHeaders(t *testing.T) {
	runs := requireRealRuns(t)
	decoders := realDecoders(t, runs)
	checked := 0
	for name, d := range decoders {
		run, _ := findRun(runs, name)
		for topic, recs := range decodeRun(t, run, d) {
			deletedKeys := map[string]bool{}
			for _, x := range recs {
				if x.ch.Class != ClassChange {
					continue
				}
				if x.ch.Op == OpDelete {
					deletedKeys[fmt.Sprint(x.ch.Key.Names, x.ch.Key.Values)] = true
					continue
				}
				for _, h := range x.rec.Headers {
					if h.Key != OldKeyHeader {
						continue
					}
					if x.ch.Op != OpCreate {
						t.Errorf("%s %s %s: old key header on op %s", name, topic, x.ch.Pos, x.ch.Op)
					}
					k, err := HeaderKey(h.Value, x.ch.After.Type)
					if err != nil {
						t.Fatalf("%s %s %s: header %q: %v", name, topic, x.ch.Pos, h.Value, err)
					}
					if len(k.Names) != len(x.ch.Key.Names) || !deletedKeys[fmt.Sprint(k.Names, k.Values)] {
						t.Errorf("%s %s %s: old key %v %v from %q is no earlier delete's key (new key %v %v)", name, topic, x.ch.Pos, k.Names, k.Values, h.Value, x.ch.Key.Names, x.ch.Key.Values)
					}
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no create with an old key header in the recorded runs: the test checked nothing")
	}
	t.Logf("%d old key headers across %d runs", checked, len(decoders))
}
