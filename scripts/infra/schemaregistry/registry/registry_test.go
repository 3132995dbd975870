package registry

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const recordA = `{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}`
const recordB = `{"type":"record","name":"B","fields":[{"name":"y","type":"string"}]}`

// TestConfluentClient drives the registry with franz-go's sr client, the
// client cdcapply itself uses, so the wire shapes are checked by a real
// Confluent API consumer rather than by this package's own expectations.
func TestConfluentClient(t *testing.T) {
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "state.json")
	reg, err := Open(state)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	a, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Schema: recordA})
	if err != nil {
		t.Fatal(err)
	}
	// Same content, other subject and other whitespace: same global id.
	a2, err := cl.CreateSchema(ctx, "u-value", sr.Schema{Schema: "{ \"type\": \"record\", \"name\": \"A\", \"fields\": [{\"name\": \"x\", \"type\": \"int\"}]}"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Schema: recordB})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != a2.ID || a.ID == b.ID || a.Version != 1 || b.Version != 2 {
		t.Fatalf("ids/versions: a=%d/%d a2=%d b=%d/%d", a.ID, a.Version, a2.ID, b.ID, b.Version)
	}
	got, err := cl.SchemaByID(ctx, b.ID)
	if err != nil || got.Schema != recordB {
		t.Fatalf("SchemaByID(%d) = %q, %v", b.ID, got.Schema, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "t-value", -1)
	if err != nil || latest.ID != b.ID || latest.Version != 2 {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	found, err := cl.LookupSchema(ctx, "t-value", sr.Schema{Schema: recordA})
	if err != nil || found.ID != a.ID || found.Version != 1 {
		t.Fatalf("lookup = %+v, %v", found, err)
	}
	if _, err := cl.SchemaByID(ctx, 99); err == nil {
		t.Fatal("SchemaByID(99) succeeded on an unknown id")
	}
	if _, err := cl.CreateSchema(ctx, "bad-value", sr.Schema{Schema: `{"type":"record"}`}); err == nil {
		t.Fatal("an invalid Avro schema was accepted")
	}

	// A restarted registry keeps every id.
	reg2, err := Open(state)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(reg2.Handler())
	defer srv2.Close()
	cl2, err := sr.NewClient(sr.URLs(srv2.URL))
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl2.SchemaByID(ctx, a.ID)
	if err != nil || again.Schema != recordA {
		t.Fatalf("after restart SchemaByID(%d) = %q, %v", a.ID, again.Schema, err)
	}
	c, err := cl2.CreateSchema(ctx, "t-value", sr.Schema{Schema: recordA})
	if err != nil || c.ID != a.ID {
		t.Fatalf("re-register after restart: %+v, %v", c, err)
	}
}
