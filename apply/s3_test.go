package apply

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcapply/cdcapply/delta/storage"
)

// TestEngineRefusesStoreWithoutConditionalPut: an S3-compatible store that
// ignores If-None-Match (older servers answer 200 and replace the object)
// would let two writers replace each other's commits. The engine refuses
// it at the start, naming the table, before it writes anything but the
// probe, which it removes.
func TestEngineRefusesStoreWithoutConditionalPut(t *testing.T) {
	var mu sync.Mutex
	objects := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut: // If-None-Match ignored
			b, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = b
		case http.MethodDelete:
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "<Error><Code>NoSuchKey</Code></Error>")
		}
	}))
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL", srv.URL)
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	c, _ := kfakeOrders(t)
	cfg := testConfig(t, c.ListenAddrs(), "s3://old-server/tables")
	e, err := NewEngine(cfg, Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = e.Run(ctx)
	if !errors.Is(err, storage.ErrNoConditionalPut) || !strings.Contains(err.Error(), "table orders") ||
		!strings.Contains(err.Error(), "s3://old-server/tables/orders") {
		t.Fatalf("Run = %v; want ErrNoConditionalPut naming the table and its location", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(objects) != 0 {
		t.Fatalf("objects left on the store: %v", objects)
	}
}
