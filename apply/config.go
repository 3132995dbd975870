package apply

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/cdcapply/cdcapply/delta"
	"github.com/cdcapply/cdcapply/delta/storage"
)

// ConfigSchema is the JSON Schema of the pipeline registry file, shipped with
// the binary so `cdcapply config validate` needs nothing else.
//
//go:embed config.schema.json
var ConfigSchema []byte

// ReservedPrefix starts the name of every engine column cdcapply adds to a
// table (sequence, deleted flag, commit and apply times). A source column
// with this prefix is a configuration error, never silently shadowed.
const ReservedPrefix = "_cdc_"

// Config is one pipeline registry: the Kafka connection and the tables one
// cdcapply process keeps equal to their sources.
type Config struct {
	Pipeline       PipelineConfig  `json:"pipeline"`
	Kafka          KafkaConfig     `json:"kafka"`
	SchemaRegistry *RegistryConfig `json:"schema_registry,omitempty"`
	Metrics        MetricsConfig   `json:"metrics"`
	Defaults       TableSettings   `json:"defaults"`
	Tables         []TableConfig   `json:"tables"`
}

// PipelineConfig names the pipeline.
type PipelineConfig struct {
	// ID prefixes every txn appId the pipeline writes.
	ID string `json:"id"`
	// MemoryLimit, in bytes, is the Go runtime's soft memory limit while
	// the pipeline runs (debug.SetMemoryLimit): the collector works
	// harder as the process nears it instead of letting the heap grow to
	// twice its live size. 0 leaves the runtime's own (GOMEMLIMIT, or
	// none).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
}

// KafkaConfig is the consumer's connection and group.
type KafkaConfig struct {
	Brokers  []string `json:"brokers"`
	Group    string   `json:"group"`
	ClientID string   `json:"client_id,omitempty"`
	// InstanceID makes the process a static member of the group (Kafka's
	// group.instance.id, KIP-345): restarted after a crash, it takes its
	// partitions back at once instead of waiting for the dead member's
	// session to time out. Empty: a dynamic member.
	InstanceID string `json:"instance_id,omitempty"`
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating (Kafka's session.timeout.ms); 0 keeps the client's
	// DefaultSessionTimeout.
	SessionTimeout Duration `json:"session_timeout,omitempty"`
	OnOffsetGap    string   `json:"on_offset_gap,omitempty"`
	// Assignment is how the group divides partitions among its processes:
	// AssignTables (each table's partitions to one process, the default)
	// or AssignPartitions (Kafka's cooperative-sticky).
	Assignment string `json:"assignment,omitempty"`
	// FetchMaxBytes bounds one fetch response (Kafka's fetch.max.bytes,
	// in bytes as the broker stores them, compressed) and
	// FetchMaxPartitionBytes one partition's part of it; 0 takes
	// DefaultFetchMaxBytes and DefaultFetchMaxPartitionBytes.
	FetchMaxBytes          int32       `json:"fetch_max_bytes,omitempty"`
	FetchMaxPartitionBytes int32       `json:"fetch_max_partition_bytes,omitempty"`
	TLS                    *TLSConfig  `json:"tls,omitempty"`
	SASL                   *SASLConfig `json:"sasl,omitempty"`
}

// The fetch defaults. A fetch is decompressed whole before it is
// polled, and the client keeps one buffered per broker while the engine
// routes the one before: the engine's memory for fetched records follows
// the fetch bound times the topics' compression ratio (5 to 19 for the
// bench's Debezium JSON batches with their inline schemas). The Kafka
// client's own default of 50 MiB a fetch put up to 50 partitions'
// megabyte each into one response: a 64-partition topic ran the 1M-key
// bench at 2.1 GiB peak RSS, 0.63 GiB with 4 MiB, and faster
// (bench/README.md, session 34). Four megabytes is what four
// partitions' default share made a fetch before.
const (
	DefaultFetchMaxBytes          = 4 << 20
	DefaultFetchMaxPartitionBytes = 1 << 20
)

// DefaultSessionTimeout is the Kafka client's own, kept when
// kafka.session_timeout is unset. A dynamic member restarted after a
// crash waits this long before it reads again: the group waits for the
// dead member's session to lapse before it assigns its partitions
// (measured: 45.1 s a restart, cmd/cdcapply's SIGKILL test).
const DefaultSessionTimeout = 45 * time.Second

// The session timeouts a broker accepts with its defaults
// (group.min.session.timeout.ms, group.max.session.timeout.ms); the
// client heartbeats every 3 s.
const (
	minSessionTimeout = 6 * time.Second
	maxSessionTimeout = 30 * time.Minute
)

// fetchLimits returns the fetch bounds the Kafka client is given: the
// configured ones, else the defaults (a Config built in code, not
// through ParseConfig, leaves them 0).
func (k KafkaConfig) fetchLimits() (maxBytes, maxPartitionBytes int32) {
	return cmp.Or(k.FetchMaxBytes, DefaultFetchMaxBytes), cmp.Or(k.FetchMaxPartitionBytes, DefaultFetchMaxPartitionBytes)
}

// TLSConfig configures TLS to brokers or the registry.
type TLSConfig struct {
	Enabled            bool   `json:"enabled"`
	CAFile             string `json:"ca_file,omitempty"`
	CertFile           string `json:"cert_file,omitempty"`
	KeyFile            string `json:"key_file,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
}

// SASLConfig names the SASL mechanism and where its password lives.
type SASLConfig struct {
	Mechanism    string `json:"mechanism"`
	Username     string `json:"username"`
	PasswordEnv  string `json:"password_env,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
}

// RegistryConfig is the schema registry connection for Avro topics.
type RegistryConfig struct {
	URL             string     `json:"url"`
	Username        string     `json:"username,omitempty"`
	PasswordEnv     string     `json:"password_env,omitempty"`
	PasswordFile    string     `json:"password_file,omitempty"`
	BearerTokenEnv  string     `json:"bearer_token_env,omitempty"`
	BearerTokenFile string     `json:"bearer_token_file,omitempty"`
	TLS             *TLSConfig `json:"tls,omitempty"`
}

// MetricsConfig is the HTTP server for metrics and health.
type MetricsConfig struct {
	Address string `json:"address,omitempty"`
	PProf   bool   `json:"pprof,omitempty"`
}

// FlushPolicy says when a table's batch is flushed: whichever limit comes
// first. While the table's previous batch is still committing, a batch
// that is due keeps reading, up to BacklogFactor times MaxRecords and
// MaxBytes, and is flushed when that commit lands.
type FlushPolicy struct {
	MaxRecords    int      `json:"max_records,omitempty"`
	MaxBytes      int64    `json:"max_bytes,omitempty"`
	MaxLatency    Duration `json:"max_latency,omitempty"`
	BacklogFactor int      `json:"backlog_factor,omitempty"`
}

// SequenceField is one element of a configured sequence tuple.
type SequenceField struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// TableSettings are the settings a table may inherit from Defaults.
type TableSettings struct {
	Format         string          `json:"format,omitempty"`
	Connector      string          `json:"connector,omitempty"`
	SequenceFields []SequenceField `json:"sequence_fields,omitempty"`
	Flush          FlushPolicy     `json:"flush"`
	SchemaPolicy   string          `json:"schema_policy,omitempty"`
	MaxLateness    Duration        `json:"max_lateness,omitempty"`
	TruncatePolicy string          `json:"truncate_policy,omitempty"`
	// KafkaTombstones says what a Kafka tombstone (a null-valued record)
	// does: "skip" (a delete's change event carries it) or "delete" (it
	// deletes its key's row: a compacted topic, whose compaction removes
	// a delete's change event once its tombstone follows, or a stream
	// whose deletes are tombstones alone).
	KafkaTombstones string `json:"kafka_tombstones,omitempty"`
	WriteMode       string `json:"write_mode,omitempty"`
	// TableProperties are Delta table properties set on the table: when
	// the engine creates it, and on an existing table by the engine's next
	// commit when they differ (delta.CheckTableProperty says which).
	// A table's own entries override the defaults' key by key.
	TableProperties map[string]string `json:"table_properties,omitempty"`
}

// TableConfig is one replicated table.
type TableConfig struct {
	TableSettings
	Name               string   `json:"name"`
	Topic              string   `json:"topic,omitempty"`
	TopicPattern       string   `json:"topic_pattern,omitempty"`
	Location           string   `json:"location"`
	KeyColumns         []string `json:"key_columns,omitempty"`
	PartitionColumns   []string `json:"partition_columns,omitempty"`
	QuarantineLocation string   `json:"quarantine_location,omitempty"`
	// Columns types the values of a json-noschema table (records without
	// an inline schema carry no types); merged with the table's own
	// schema once it exists.
	Columns []ColumnConfig `json:"columns,omitempty"`
}

// ColumnConfig is one declared source column: its name and its Delta
// primitive type ("long", "string", "decimal(12,2)", "timestamp", ...).
type ColumnConfig struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// DeclaredSchema returns the table's declared columns as a Delta schema
// (every column nullable, as Debezium images are).
func (t TableConfig) DeclaredSchema() (delta.StructType, error) {
	var st delta.StructType
	for _, c := range t.Columns {
		typ, err := delta.ParsePrimitiveType(c.Type)
		if err != nil {
			return delta.StructType{}, fmt.Errorf("table %s: column %s: %w", t.Name, c.Name, err)
		}
		st.Fields = append(st.Fields, delta.StructField{Name: c.Name, Type: typ, Nullable: true})
	}
	return st, nil
}

// Duration is a time.Duration written as Go's duration text ("1s", "168h").
type Duration time.Duration

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("decode duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// The built-in defaults, applied under Defaults and each table's own settings.
var builtinDefaults = TableSettings{
	Format:          "json",
	Connector:       "postgresql",
	Flush:           FlushPolicy{MaxRecords: 50_000, MaxBytes: 64 << 20, MaxLatency: Duration(500 * time.Millisecond), BacklogFactor: 2},
	SchemaPolicy:    "additive",
	MaxLateness:     Duration(7 * 24 * time.Hour),
	TruncatePolicy:  "tombstone",
	KafkaTombstones: "skip",
	WriteMode:       "copy-on-write",
}

// FieldError is one problem in a configuration file, at a field path such
// as "tables[1].flush.max_records".
type FieldError struct {
	Path    string
	Message string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// ConfigError lists every problem found in one configuration file.
type ConfigError struct {
	File   string
	Errors []FieldError
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid configuration %s: %d problem(s)", e.File, len(e.Errors))
	for _, fe := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// LoadConfig reads, validates and completes a pipeline registry file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig validates YAML against ConfigSchema and the rules a schema
// cannot say (unique names, reserved column prefix, secrets kept out of the
// file), then fills in defaults. name is used in errors only.
func ParseConfig(name string, data []byte) (*Config, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: name, Errors: []FieldError{{Message: "parse YAML: " + err.Error()}}}
	}
	doc, err := jsonCompatible(doc)
	if err != nil {
		return nil, &ConfigError{File: name, Errors: []FieldError{{Message: err.Error()}}}
	}
	var errs []FieldError
	errs = append(errs, secretsInFile(doc, "")...)
	if verr := compiledSchema().Validate(doc); verr != nil {
		var ve *jsonschema.ValidationError
		if errors.As(verr, &ve) {
			errs = append(errs, flattenValidation(ve)...)
		} else {
			errs = append(errs, FieldError{Message: verr.Error()})
		}
	}
	if len(errs) > 0 {
		return nil, &ConfigError{File: name, Errors: dedupe(prune(errs))}
	}
	raw, _ := json.Marshal(doc)
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, &ConfigError{File: name, Errors: []FieldError{{Message: "decode: " + err.Error()}}}
	}
	cfg.complete()
	if errs := cfg.check(); len(errs) > 0 {
		return nil, &ConfigError{File: name, Errors: errs}
	}
	return &cfg, nil
}

// complete applies built-in defaults, then Defaults, under every table.
func (c *Config) complete() {
	if c.Kafka.OnOffsetGap == "" {
		c.Kafka.OnOffsetGap = "fail"
	}
	if c.Kafka.Assignment == "" {
		c.Kafka.Assignment = AssignTables
	}
	c.Kafka.FetchMaxBytes, c.Kafka.FetchMaxPartitionBytes = c.Kafka.fetchLimits()
	base := merge(builtinDefaults, c.Defaults)
	c.Defaults = base
	for i := range c.Tables {
		t := &c.Tables[i]
		t.TableSettings = merge(base, t.TableSettings)
		if t.QuarantineLocation == "" {
			t.QuarantineLocation = strings.TrimRight(t.Location, "/") + "_quarantine"
		}
	}
}

// merge returns base with every field that over sets replaced.
func merge(base, over TableSettings) TableSettings {
	out := base
	if over.Format != "" {
		out.Format = over.Format
	}
	if over.Connector != "" {
		out.Connector = over.Connector
	}
	if len(over.SequenceFields) > 0 {
		out.SequenceFields = over.SequenceFields
	}
	if over.Flush.MaxRecords > 0 {
		out.Flush.MaxRecords = over.Flush.MaxRecords
	}
	if over.Flush.MaxBytes > 0 {
		out.Flush.MaxBytes = over.Flush.MaxBytes
	}
	if over.Flush.MaxLatency > 0 {
		out.Flush.MaxLatency = over.Flush.MaxLatency
	}
	if over.Flush.BacklogFactor > 0 {
		out.Flush.BacklogFactor = over.Flush.BacklogFactor
	}
	if over.SchemaPolicy != "" {
		out.SchemaPolicy = over.SchemaPolicy
	}
	if over.MaxLateness > 0 {
		out.MaxLateness = over.MaxLateness
	}
	if over.TruncatePolicy != "" {
		out.TruncatePolicy = over.TruncatePolicy
	}
	if over.KafkaTombstones != "" {
		out.KafkaTombstones = over.KafkaTombstones
	}
	if over.WriteMode != "" {
		out.WriteMode = over.WriteMode
	}
	if len(over.TableProperties) > 0 {
		props := make(map[string]string, len(out.TableProperties)+len(over.TableProperties))
		for k, v := range out.TableProperties {
			props[k] = v
		}
		for k, v := range over.TableProperties {
			props[k] = v
		}
		out.TableProperties = props
	}
	return out
}

// instanceIDPattern is the schema's pattern of kafka.instance_id (a
// test keeps the two equal), for an id given outside the file.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// CheckInstanceID says why id is not a valid kafka.instance_id (Kafka's
// group.instance.id rules: 1 to 249 of letters, digits, '.', '_' and '-',
// and neither "." nor ".."), or nil.
func CheckInstanceID(id string) error {
	if !instanceIDPattern.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%q is not a valid group.instance.id (1 to 249 of A-Z, a-z, 0-9, '.', '_' and '-', not \".\" or \"..\")", id)
	}
	return nil
}

// check applies the rules the JSON Schema cannot express.
func (c *Config) check() []FieldError {
	var errs []FieldError
	errs = append(errs, c.SchemaRegistry.check()...)
	if id := c.Kafka.InstanceID; id != "" {
		if err := CheckInstanceID(id); err != nil {
			errs = append(errs, FieldError{"kafka.instance_id", err.Error()})
		}
	}
	if st := time.Duration(c.Kafka.SessionTimeout); st != 0 && (st < minSessionTimeout || st > maxSessionTimeout) {
		errs = append(errs, FieldError{"kafka.session_timeout", fmt.Sprintf("%v is outside %v to %v, the bounds a broker accepts by default (group.min.session.timeout.ms, group.max.session.timeout.ms)", st, minSessionTimeout, maxSessionTimeout)})
	}
	names := map[string]int{}
	locations := map[string]int{}
	for i, t := range c.Tables {
		p := fmt.Sprintf("tables[%d]", i)
		if j, ok := names[t.Name]; ok {
			errs = append(errs, FieldError{p + ".name", fmt.Sprintf("duplicate table name %q (also tables[%d])", t.Name, j)})
		}
		names[t.Name] = i
		if j, ok := locations[t.Location]; ok {
			errs = append(errs, FieldError{p + ".location", fmt.Sprintf("location %q is also used by tables[%d]", t.Location, j)})
		}
		locations[t.Location] = i
		if t.TopicPattern != "" {
			if _, err := regexp.Compile(t.TopicPattern); err != nil {
				errs = append(errs, FieldError{p + ".topic_pattern", "invalid regular expression: " + err.Error()})
			}
		}
		if t.KafkaTombstones == "delete" && len(t.KeyColumns) > 0 {
			errs = append(errs, FieldError{p + ".kafka_tombstones", "delete takes a tombstone's key from the Kafka record key, and key_columns takes keys from the row image, which a tombstone lacks: drop one of them"})
		}
		for k, col := range t.KeyColumns {
			if strings.HasPrefix(col, ReservedPrefix) {
				errs = append(errs, FieldError{fmt.Sprintf("%s.key_columns[%d]", p, k), fmt.Sprintf("column %q uses the reserved prefix %q of cdcapply's engine columns", col, ReservedPrefix)})
			}
		}
		for k, col := range t.PartitionColumns {
			if strings.HasPrefix(col, ReservedPrefix) {
				errs = append(errs, FieldError{fmt.Sprintf("%s.partition_columns[%d]", p, k), fmt.Sprintf("column %q uses the reserved prefix %q of cdcapply's engine columns", col, ReservedPrefix)})
			}
		}
		if t.Connector == "fields" && len(t.SequenceFields) == 0 {
			errs = append(errs, FieldError{p + ".sequence_fields", `required when connector is "fields"`})
		}
		if len(t.Columns) > 0 && t.Format != "json-noschema" {
			errs = append(errs, FieldError{p + ".columns", fmt.Sprintf("columns type schema-less records; format %s carries its own schema", t.Format)})
		}
		seen := map[string]bool{}
		for k, col := range t.Columns {
			cp := fmt.Sprintf("%s.columns[%d]", p, k)
			if strings.HasPrefix(col.Name, ReservedPrefix) {
				errs = append(errs, FieldError{cp + ".name", fmt.Sprintf("column %q uses the reserved prefix %q of cdcapply's engine columns", col.Name, ReservedPrefix)})
			}
			if seen[col.Name] {
				errs = append(errs, FieldError{cp + ".name", fmt.Sprintf("column %q is declared twice", col.Name)})
			}
			seen[col.Name] = true
			if _, err := delta.ParsePrimitiveType(col.Type); err != nil {
				errs = append(errs, FieldError{cp + ".type", err.Error()})
			}
		}
		if (t.Format == "avro" || t.Format == "flat-avro") && c.SchemaRegistry == nil {
			errs = append(errs, FieldError{p + ".format", "avro needs schema_registry"})
		}
		for _, k := range sortedMapKeys(t.TableProperties) {
			if err := delta.CheckTableProperty(k, t.TableProperties[k]); err != nil {
				errs = append(errs, FieldError{p + ".table_properties." + k, err.Error()})
			}
		}
		for _, l := range []struct{ field, loc string }{{".location", t.Location}, {".quarantine_location", t.QuarantineLocation}} {
			if err := storage.CheckLocation(l.loc); err != nil {
				errs = append(errs, FieldError{p + l.field, err.Error()})
			}
		}
	}
	return errs
}

// secretKeys are field names that must never carry a secret inline.
var secretKeys = map[string]bool{"password": true, "token": true, "bearer_token": true, "secret": true, "api_key": true}

func secretsInFile(v any, path string) []FieldError {
	var errs []FieldError
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedMapKeys(v) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if secretKeys[k] {
				errs = append(errs, FieldError{p, "secrets are not read from the configuration file: use " + k + "_env or " + k + "_file"})
				continue
			}
			errs = append(errs, secretsInFile(v[k], p)...)
		}
	case []any:
		for i, e := range v {
			errs = append(errs, secretsInFile(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return errs
}

// compiledSchema compiles ConfigSchema once; the schema is embedded, so a
// failure is a build defect and panics.
var compiledSchema = sync.OnceValue(func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ConfigSchema))
	if err != nil {
		panic("apply: embedded config schema is not JSON: " + err.Error())
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("pipeline.json", doc); err != nil {
		panic("apply: add config schema: " + err.Error())
	}
	s, err := c.Compile("pipeline.json")
	if err != nil {
		panic("apply: compile config schema: " + err.Error())
	}
	return s
})

// flattenValidation turns the validator's error tree into one error per leaf,
// each at a readable field path.
func flattenValidation(ve *jsonschema.ValidationError) []FieldError {
	if len(ve.Causes) == 0 {
		return []FieldError{{Path: fieldPath(ve.InstanceLocation), Message: leafMessage(ve)}}
	}
	var out []FieldError
	for _, c := range ve.Causes {
		out = append(out, flattenValidation(c)...)
	}
	return out
}

func leafMessage(ve *jsonschema.ValidationError) string {
	msg := ve.Error()
	// The library prefixes the message with the location; keep the reason.
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.HasPrefix(msg, "at '") {
		msg = msg[i+2:]
	}
	msg = strings.TrimSpace(msg)
	if msg == "false schema" { // unevaluatedProperties: a field the schema does not know
		return "unknown field"
	}
	return msg
}

func fieldPath(loc []string) string {
	var b strings.Builder
	for _, s := range loc {
		if isIndex(s) {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// prune drops follow-on noise of the validator: a field reported "unknown"
// only because its own value failed (JSON Schema drops the annotations of a
// failed subschema), and the oneOf complaints next to an inline secret.
func prune(errs []FieldError) []FieldError {
	var out []FieldError
	for _, e := range errs {
		noise := false
		for _, o := range errs {
			if o == e {
				continue
			}
			deeper := strings.HasPrefix(o.Path, e.Path+".") || strings.HasPrefix(o.Path, e.Path+"[")
			if e.Message == "unknown field" && deeper {
				noise = true
			}
			if strings.HasPrefix(o.Message, "secrets are not read") && deeper {
				noise = true
			}
		}
		if !noise {
			out = append(out, e)
		}
	}
	return out
}

func dedupe(errs []FieldError) []FieldError {
	seen := map[FieldError]bool{}
	out := errs[:0]
	for _, e := range errs {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// jsonCompatible converts YAML's decoded values to what encoding/json would
// produce (string keys, float64/int numbers), so the schema sees JSON.
func jsonCompatible(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %v is not a string", k)
			}
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range v {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	case int:
		return json.Number(fmt.Sprint(v)), nil
	case int64:
		return json.Number(fmt.Sprint(v)), nil
	case uint64:
		return json.Number(fmt.Sprint(v)), nil
	case float64:
		return json.Number(fmt.Sprint(v)), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	default:
		return v, nil
	}
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
