package debezium

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Registry resolves a Confluent schema id to the schema's text.
type Registry interface {
	SchemaText(ctx context.Context, id int) (string, error)
}

// ErrUnknownSchema is wrapped by a Registry when the id does not exist; any
// other error means the registry could not answer (retry, do not
// quarantine).
var ErrUnknownSchema = errors.New("unknown schema id")

// SchemaRegistryClient is a Registry over the Confluent schema registry HTTP
// API (franz-go's sr client). Schemas never change under an id, so each id
// is fetched once and cached for the client's life.
type SchemaRegistryClient struct {
	cl *sr.Client

	mu    sync.Mutex
	cache map[int]string // guarded by mu
}

// RegistryConfig is how to reach a schema registry.
type RegistryConfig struct {
	URLs []string
	// BasicUser and BasicPassword enable HTTP basic auth when BasicUser is
	// set; BearerToken enables bearer auth.
	BasicUser, BasicPassword string
	BearerToken              string
	// TLS, when set, is used for https URLs (custom CAs, client certs).
	TLS *tls.Config
}

// NewSchemaRegistryClient builds a registry client from cfg.
func NewSchemaRegistryClient(cfg RegistryConfig) (*SchemaRegistryClient, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("new schema registry client: no URLs")
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URLs...), sr.UserAgent("cdcapply")}
	if cfg.BasicUser != "" {
		opts = append(opts, sr.BasicAuth(cfg.BasicUser, cfg.BasicPassword))
	}
	if cfg.BearerToken != "" {
		opts = append(opts, sr.BearerToken(cfg.BearerToken))
	}
	if cfg.TLS != nil {
		// The same request timeout as sr's default client: a hung registry
		// must surface as an error (retried by the engine), not a stall.
		opts = append(opts, sr.HTTPClient(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.TLS}}))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new schema registry client: %w", err)
	}
	return &SchemaRegistryClient{cl: cl, cache: map[int]string{}}, nil
}

// NewSchemaRegistry wraps an already configured sr client.
func NewSchemaRegistry(cl *sr.Client) *SchemaRegistryClient {
	return &SchemaRegistryClient{cl: cl, cache: map[int]string{}}
}

// SchemaText returns the schema text registered under id.
func (r *SchemaRegistryClient) SchemaText(ctx context.Context, id int) (string, error) {
	r.mu.Lock()
	text, ok := r.cache[id]
	r.mu.Unlock()
	if ok {
		return text, nil
	}
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && (re.StatusCode == http.StatusNotFound || re.ErrorCode == 40403) {
			return "", fmt.Errorf("get schema %d: %w: %w", id, ErrUnknownSchema, err)
		}
		return "", fmt.Errorf("get schema %d: %w", id, err)
	}
	if s.Type != sr.TypeAvro {
		return "", fmt.Errorf("get schema %d: %w: type %s is not avro", id, ErrUnknownSchema, s.Type)
	}
	r.mu.Lock()
	r.cache[id] = s.Schema
	r.mu.Unlock()
	return s.Schema, nil
}
