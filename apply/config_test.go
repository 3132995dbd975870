package apply

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const goodConfig = `
pipeline: {id: shop}
kafka:
  brokers: [127.0.0.1:9092]
  group: cdcapply-shop
  sasl: {mechanism: scram-sha-512, username: app, password_env: KAFKA_PASSWORD}
defaults:
  flush: {max_records: 1000}
tables:
  - name: orders
    topic: pg.public.orders
    location: /data/orders
    key_columns: [id]
  - name: items
    topic_pattern: 'pg\.shard[0-9]+\.items'
    location: /data/items
    connector: mysql
    flush: {max_latency: 250ms, backlog_factor: 3}
    max_lateness: 48h
`

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig("good.yaml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	o, it := cfg.Tables[0], cfg.Tables[1]
	if o.Flush.MaxRecords != 1000 || it.Flush.MaxRecords != 1000 {
		t.Errorf("defaults.flush.max_records not inherited: %d %d", o.Flush.MaxRecords, it.Flush.MaxRecords)
	}
	if time.Duration(o.Flush.MaxLatency) != 500*time.Millisecond || time.Duration(it.Flush.MaxLatency) != 250*time.Millisecond {
		t.Errorf("max_latency: %v %v", time.Duration(o.Flush.MaxLatency), time.Duration(it.Flush.MaxLatency))
	}
	if o.Flush.BacklogFactor != 2 || it.Flush.BacklogFactor != 3 {
		t.Errorf("backlog_factor: %d %d, want the default 2 and 3", o.Flush.BacklogFactor, it.Flush.BacklogFactor)
	}
	if o.Connector != "postgresql" || it.Connector != "mysql" {
		t.Errorf("connector: %q %q", o.Connector, it.Connector)
	}
	if time.Duration(it.MaxLateness) != 48*time.Hour || time.Duration(o.MaxLateness) != 7*24*time.Hour {
		t.Errorf("max_lateness: %v %v", time.Duration(o.MaxLateness), time.Duration(it.MaxLateness))
	}
	if o.QuarantineLocation != "/data/orders_quarantine" {
		t.Errorf("quarantine location %q", o.QuarantineLocation)
	}
	if cfg.Kafka.FetchMaxBytes != DefaultFetchMaxBytes || cfg.Kafka.FetchMaxPartitionBytes != DefaultFetchMaxPartitionBytes {
		t.Errorf("fetch bounds %d and %d, want the defaults", cfg.Kafka.FetchMaxBytes, cfg.Kafka.FetchMaxPartitionBytes)
	}
	if cfg.Kafka.InstanceID != "" || cfg.Kafka.SessionTimeout != 0 {
		t.Errorf("instance_id %q and session_timeout %v set without being configured", cfg.Kafka.InstanceID, time.Duration(cfg.Kafka.SessionTimeout))
	}
	static, err := ParseConfig("static.yaml", []byte(strings.Replace(goodConfig, "group: cdcapply-shop", "group: cdcapply-shop\n  instance_id: shop-0\n  session_timeout: 2m", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if static.Kafka.InstanceID != "shop-0" || time.Duration(static.Kafka.SessionTimeout) != 2*time.Minute {
		t.Errorf("instance_id %q, session_timeout %v; want shop-0 and 2m", static.Kafka.InstanceID, time.Duration(static.Kafka.SessionTimeout))
	}
	if cfg.Kafka.OnOffsetGap != "fail" || o.SchemaPolicy != "additive" || o.WriteMode != "copy-on-write" {
		t.Errorf("built-in defaults not applied: %+v", cfg)
	}
}

// TestTablePropertiesMerge: a table's table_properties override the
// defaults' key by key, and the other keys are inherited.
func TestTablePropertiesMerge(t *testing.T) {
	cfg, err := ParseConfig("props.yaml", []byte(`
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
defaults: {table_properties: {delta.deletedFileRetentionDuration: "interval 1 day", delta.checkpointInterval: "50"}}
tables:
  - {name: a, topic: x, location: /a}
  - {name: b, topic: y, location: /b, table_properties: {delta.checkpointInterval: "100"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Tables[0].TableProperties, cfg.Tables[1].TableProperties
	if a["delta.checkpointInterval"] != "50" || b["delta.checkpointInterval"] != "100" ||
		a["delta.deletedFileRetentionDuration"] != "interval 1 day" || b["delta.deletedFileRetentionDuration"] != "interval 1 day" || len(a) != 2 || len(b) != 2 {
		t.Fatalf("table properties %v and %v", a, b)
	}
}

func TestParseConfigErrorsByPath(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // "path: substring"
	}{
		{"missing group", `
pipeline: {id: p}
kafka: {brokers: [h:1]}
tables: [{name: t, topic: x, location: /t}]`, []string{"kafka: ", "group"}},
		{"bad flush", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /t, flush: {max_records: 0}}]`, []string{"tables[0].flush.max_records: "}},
		{"bad backlog factor", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /t, flush: {backlog_factor: 0}}]`, []string{"tables[0].flush.backlog_factor: "}},
		{"unknown field", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /t, colour: red}]`, []string{"tables[0].colour: unknown field"}},
		{"inline secret", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g, sasl: {mechanism: plain, username: u, password: hunter2}}
tables: [{name: t, topic: x, location: /t}]`, []string{"kafka.sasl.password: secrets are not read"}},
		{"reserved key column", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /t, key_columns: [_cdc_seq]}]`, []string{"tables[0].key_columns[0]: ", "reserved prefix"}},
		{"memory limit too small", `
pipeline: {id: p, memory_limit: 1000}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a}]`, []string{"pipeline.memory_limit"}},
		{"fetch bounds out of range", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g, fetch_max_bytes: 4, fetch_max_partition_bytes: 4294967296}
tables: [{name: t, topic: x, location: /a}]`, []string{"kafka.fetch_max_bytes", "kafka.fetch_max_partition_bytes"}},
		{"instance id with a space", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g, instance_id: "pod 0"}
tables: [{name: t, topic: x, location: /a}]`, []string{"kafka.instance_id: 'pod 0' does not match"}},
		{"session timeout too short", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g, session_timeout: 2s}
tables: [{name: t, topic: x, location: /a}]`, []string{"kafka.session_timeout: 2s is outside 6s to 30m0s"}},
		{"instance id dots, session timeout too long", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g, instance_id: "..", session_timeout: 31m}
tables: [{name: t, topic: x, location: /a}]`, []string{`kafka.instance_id: ".." is not a valid`, "kafka.session_timeout: 31m0s is outside"}},
		{"kafka tombstones: unknown value", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: u, topic: y, location: /b, kafka_tombstones: drop}]`, []string{"tables[0].kafka_tombstones: value must be one of 'skip', 'delete'"}},
		{"kafka tombstones: delete with key columns", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
defaults: {kafka_tombstones: delete}
tables: [{name: t, topic: x, location: /a, key_columns: [id]}]`, []string{"tables[0].kafka_tombstones: delete takes a tombstone's key from the Kafka record key"}},
		{"duplicate names", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a}, {name: t, topic: y, location: /b}]`, []string{"tables[1].name: duplicate"}},
		{"topic and pattern", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, topic_pattern: y, location: /a}]`, []string{"tables[0]"}},
		{"locations of unsupported schemes", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: "gs://b/t"}, {name: u, topic: y, location: "s3://", quarantine_location: "abfss://c/q"}]`,
			[]string{`tables[0].location: location "gs://b/t": scheme "gs" is not supported`, `tables[0].quarantine_location: location "gs://b/t_quarantine"`,
				`tables[1].location: location "s3://": want s3://bucket/prefix`, `tables[1].quarantine_location: location "abfss://c/q"`}},
		{"avro without registry", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a, format: avro}]`, []string{"tables[0].format: avro needs schema_registry"}},
		{"columns on a format with its own schema", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a, columns: [{name: id, type: long}]}]`, []string{"tables[0].columns: columns type schema-less records; format json carries its own schema"}},
		{"bad declared columns", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a, format: json-noschema, columns: [{name: id, type: long}, {name: id, type: varchar}, {name: _cdc_x, type: string}]}]`,
			[]string{"tables[0].columns[1].name: column \"id\" is declared twice", "tables[0].columns[1].type: unknown type \"varchar\"", "tables[0].columns[2].name: ", "reserved prefix"}},
		{"table property not settable", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: /a, table_properties: {delta.appendOnly: "true"}}]`, []string{"tables[0].table_properties"}},
		{"bad table property value", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
defaults: {table_properties: {delta.deletedFileRetentionDuration: "a day"}}
tables: [{name: t, topic: x, location: /a, table_properties: {delta.checkpointInterval: "0"}}]`,
			[]string{"tables[0].table_properties.delta.deletedFileRetentionDuration: ", "tables[0].table_properties.delta.checkpointInterval: ", "not a positive number of commits"}},
		{"bad duration", `
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
defaults: {max_lateness: 7days}
tables: [{name: t, topic: x, location: /a}]`, []string{"defaults.max_lateness: "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.name, []byte(tc.yaml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("want *ConfigError, got %v", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

// TestExampleConfigIsValid keeps the documented example file valid.
func TestExampleConfigIsValid(t *testing.T) {
	cfg, err := LoadConfig("testdata/pipeline.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tables) != 3 || cfg.Tables[2].Format != "avro" || cfg.SchemaRegistry == nil || cfg.Tables[1].Flush.MaxRecords != 50000 || time.Duration(cfg.Tables[1].Flush.MaxLatency) != 250*time.Millisecond {
		t.Fatalf("example parsed as %+v", cfg.Tables)
	}
}

// TestInstanceIDPattern: CheckInstanceID, for an id given outside the
// file (cdcapply run -instance-id), uses the schema's pattern.
func TestInstanceIDPattern(t *testing.T) {
	var schema struct {
		Properties struct {
			Kafka struct {
				Properties struct {
					InstanceID struct {
						Pattern string `json:"pattern"`
					} `json:"instance_id"`
				} `json:"properties"`
			} `json:"kafka"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(ConfigSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if got, want := instanceIDPattern.String(), schema.Properties.Kafka.Properties.InstanceID.Pattern; got != want {
		t.Errorf("instanceIDPattern %q, the schema's %q", got, want)
	}
	for id, ok := range map[string]bool{"shop-0": true, "cdc.replica_1": true, "pod 0": false, "": false, ".": false, "..": false, "a/b": false, strings.Repeat("x", 249): true, strings.Repeat("x", 250): false} {
		if err := CheckInstanceID(id); (err == nil) != ok {
			t.Errorf("CheckInstanceID(%q) = %v", id, err)
		}
	}
}

// TestS3Location: an s3:// table location is accepted, and its quarantine
// defaults beside it in the same bucket.
func TestS3Location(t *testing.T) {
	cfg, err := ParseConfig("p.yaml", []byte(`
pipeline: {id: p}
kafka: {brokers: [h:1], group: g}
tables: [{name: t, topic: x, location: "s3://lake/cdc/orders/"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Tables[0].QuarantineLocation; q != "s3://lake/cdc/orders_quarantine" {
		t.Errorf("quarantine location %q", q)
	}
}
