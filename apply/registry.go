package apply

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcapply/cdcapply/checkpoint"
	"github.com/cdcapply/cdcapply/debezium"
)

// Retry back-off, for a table whose schema could not be fetched (a
// registry outage) and for a partition a broker refuses to serve: the
// first retry waits retryBackoffMin, each further failure without a commit
// doubles the wait up to retryBackoffMax.
const (
	retryBackoffMin = 200 * time.Millisecond
	retryBackoffMax = 30 * time.Second
)

func retryBackoff(failures int) time.Duration {
	d := retryBackoffMin
	for i := 1; i < failures && d < retryBackoffMax; i++ {
		d *= 2
	}
	return min(d, retryBackoffMax)
}

// needsRegistry reports whether any table reads Avro.
func needsRegistry(cfg *Config) bool {
	for _, t := range cfg.Tables {
		if isAvro(t.Format) {
			return true
		}
	}
	return false
}

func isAvro(format string) bool { return format == "avro" || format == "flat-avro" }

// newRegistry builds the engine's one schema registry client from the
// configuration: secrets from the environment or files, TLS from files.
// The client caches every schema it fetched by id for the engine's life
// (ids are immutable), so the registry is asked once per id.
func newRegistry(c *RegistryConfig) (*debezium.SchemaRegistryClient, error) {
	if c == nil {
		return nil, errors.New("schema_registry: not configured (avro tables need it)")
	}
	rc := debezium.RegistryConfig{URLs: []string{c.URL}}
	if c.Username != "" {
		pw, err := secret("schema_registry.password", c.PasswordEnv, c.PasswordFile)
		if err != nil {
			return nil, err
		}
		rc.BasicUser, rc.BasicPassword = c.Username, pw
	}
	if c.BearerTokenEnv != "" || c.BearerTokenFile != "" {
		tok, err := secret("schema_registry.bearer_token", c.BearerTokenEnv, c.BearerTokenFile)
		if err != nil {
			return nil, err
		}
		rc.BearerToken = tok
	}
	if c.TLS != nil && (c.TLS.Enabled || strings.HasPrefix(c.URL, "https://")) {
		tc, err := tlsClientConfig("schema_registry.tls", c.TLS)
		if err != nil {
			return nil, err
		}
		rc.TLS = tc
	}
	cl, err := debezium.NewSchemaRegistryClient(rc)
	if err != nil {
		return nil, fmt.Errorf("schema_registry %s: %w", c.URL, err)
	}
	return cl, nil
}

// secret reads a secret from the named environment variable or file (one
// trailing newline trimmed). field names it in errors; the value never
// appears in one.
func secret(field, env, file string) (string, error) {
	switch {
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return "", fmt.Errorf("%s_env: environment variable %s is not set", field, env)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_file: %w", field, err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			return "", fmt.Errorf("%s_file: %s is empty", field, file)
		}
		return v, nil
	}
	return "", fmt.Errorf("%s: neither %s_env nor %s_file is set", field, field, field)
}

// tlsClientConfig builds a client TLS configuration: extra CAs, a client
// certificate, or (for tests only) no verification.
func tlsClientConfig(field string, c *TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", field, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", field, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file/key_file: %w", field, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// holdTable is the engine's answer to a record it could not decode through
// no fault of its own (the schema registry is down, times out or answers
// 5xx): the record is neither quarantined nor skipped. The table's pending
// batch is dropped (nothing of it is committed), its partitions are paused
// and every record routed to it is ignored until the back-off ends; then
// releaseTable seeks it back to the positions in the table and resumes, so
// the same records are read and decoded again. Other tables go on.
func (e *Engine) holdTable(ctx context.Context, t *tableRun, r *kgo.Record, err error) {
	// The batch in flight was read before this record: let it land. If it
	// fails, the resync re-seeks, and the hold below re-seeks the same.
	e.settle(ctx, t)
	t.holdFailures++
	e.metrics.registryFailed(t.cfg.Name)
	wait := retryBackoff(t.holdFailures)
	e.log.Warn("schema registry unavailable: table held, nothing quarantined; retrying from the table's positions",
		"table", t.cfg.Name, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"retry_in", wait, "consecutive_failures", t.holdFailures, "err", err)
	e.rewind(t)
	t.holdUntil = e.clock().Add(wait)
	if e.client != nil {
		t.holdPaused = e.assignedOf(t)
		e.client.PauseFetchPartitions(t.holdPaused)
	}
}

// releaseTable ends a hold: seek to the table's positions (records fetched
// before the pause took effect were ignored) and resume what the hold
// paused and what was assigned meanwhile.
func (e *Engine) releaseTable(t *tableRun) {
	t.holdUntil = time.Time{}
	e.rewind(t)
	if e.client == nil {
		return
	}
	resume := e.assignedOf(t)
	for topic, parts := range t.holdPaused {
		resume[topic] = append(resume[topic], parts...)
	}
	t.holdPaused = nil
	if t.halted == nil {
		e.client.ResumeFetchPartitions(resume)
	}
}

// check says which registry credentials are ambiguous or incomplete: one
// source per secret, a password only with a username, basic or bearer.
func (c *RegistryConfig) check() []FieldError {
	if c == nil {
		return nil
	}
	var errs []FieldError
	if c.PasswordEnv != "" && c.PasswordFile != "" {
		errs = append(errs, FieldError{"schema_registry.password_file", "set one of password_env and password_file"})
	}
	if c.BearerTokenEnv != "" && c.BearerTokenFile != "" {
		errs = append(errs, FieldError{"schema_registry.bearer_token_file", "set one of bearer_token_env and bearer_token_file"})
	}
	hasPassword := c.PasswordEnv != "" || c.PasswordFile != ""
	switch {
	case c.Username != "" && !hasPassword:
		errs = append(errs, FieldError{"schema_registry.username", "basic auth needs password_env or password_file"})
	case c.Username == "" && hasPassword:
		errs = append(errs, FieldError{"schema_registry.username", "a password is set but no username"})
	}
	if c.Username != "" && (c.BearerTokenEnv != "" || c.BearerTokenFile != "") {
		errs = append(errs, FieldError{"schema_registry", "choose basic auth (username) or a bearer token, not both"})
	}
	return errs
}

// rewind drops a table's pending batch and seeks its assigned partitions
// to the positions the applier holds. Unlike resync it does not reload the
// table (nothing was committed, and a commit by another writer is caught
// by the Refresh before the next flush), so a long outage does not rebuild
// the key index at every retry.
//
// Every re-seek goes through here (resync too): the rest of the current
// poll's records for the table were fetched before the seek and are
// ignored (tableRun.resynced), never batched above the positions.
func (e *Engine) rewind(t *tableRun) {
	t.buf.reset()
	t.resynced = true
	if e.client == nil {
		return
	}
	pos := t.applier.Positions()
	seek := map[string]map[int32]kgo.EpochOffset{}
	for topic, parts := range e.assignedOf(t) {
		for _, p := range parts {
			next, _ := pos.Next(checkpoint.TopicPartition{Topic: topic, Partition: p})
			if seek[topic] == nil {
				seek[topic] = map[int32]kgo.EpochOffset{}
			}
			seek[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: next}
		}
	}
	e.client.SetOffsets(seek)
}
