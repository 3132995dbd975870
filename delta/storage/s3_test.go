package storage

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeS3 is a minimal object server for the client's error paths: it
// answers with the statuses a test queues, then stores and serves objects,
// honouring If-None-Match: * only when conditional.
type fakeS3 struct {
	mu          sync.Mutex
	objects     map[string][]byte
	queued      []int
	conditional bool
	requests    int
	gets        map[string]int // GETs and HEADs of objects
	drop        int            // requests to answer by closing the connection
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=k/") {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if f.drop > 0 { // no answer: the connection closes
		f.drop--
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if len(f.queued) > 0 {
		code := f.queued[0]
		f.queued = f.queued[1:]
		w.WriteHeader(code)
		io.WriteString(w, "<Error><Code>Queued</Code><Message>queued status</Message></Error>")
		return
	}
	switch r.Method {
	case http.MethodPut:
		if _, ok := f.objects[r.URL.Path]; ok && f.conditional && r.Header.Get("If-None-Match") == "*" {
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, "<Error><Code>PreconditionFailed</Code></Error>")
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.objects[r.URL.Path] = b
	case http.MethodGet, http.MethodHead:
		b, ok := f.objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "<Error><Code>NoSuchKey</Code></Error>")
			return
		}
		f.gets[r.Method]++
		w.Header().Set("Last-Modified", time.Unix(1_700_000_000, 0).UTC().Format(http.TimeFormat))
		var from, to int
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &from, &to); err == nil {
			w.Header().Set("Content-Length", fmt.Sprint(to-from+1))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(b[from : to+1])
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b)
	case http.MethodDelete:
		delete(f.objects, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	}
}

func newFakeS3(t *testing.T, conditional bool) (*fakeS3, *S3) {
	f := &fakeS3{objects: map[string][]byte{}, conditional: conditional, gets: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	st, err := NewS3(S3Config{Bucket: "b", Prefix: "t", Endpoint: srv.URL, PathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return f, st
}

// TestS3Retries: throttles and 5xx are sent again, and succeed when the
// store recovers; a 409 of a conditional write racing another is retried
// and ends as the loser's ErrExist; a 403 is not retried and names the
// object; retries stop at Attempts.
func TestS3Retries(t *testing.T) {
	ctx := context.Background()
	f, st := newFakeS3(t, true)
	st.cfg.Attempts = 4
	f.queued = []int{503, 500, 429}
	if err := st.Write(ctx, "a.json", []byte("x")); err != nil {
		t.Fatalf("write through three retryable failures: %v", err)
	}
	if f.requests != 4 {
		t.Fatalf("%d requests, want 4", f.requests)
	}
	f.queued = []int{409}
	if err := st.WriteIfAbsent(ctx, "a.json", []byte("y")); !errors.Is(err, ErrExist) {
		t.Fatalf("a conditional write after a 409: %v, want ErrExist", err)
	}
	f.requests, f.drop = 0, 2
	if err := st.Write(ctx, "d.json", []byte("x")); err != nil || f.requests != 3 {
		t.Fatalf("a write after two dropped connections: %v after %d requests, want success on the third", err, f.requests)
	}
	f.requests = 0
	f.queued = []int{403}
	err := st.Write(ctx, "b.json", []byte("x"))
	if err == nil || f.requests != 1 || !strings.Contains(err.Error(), "s3://b/t/b.json") || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a 403: %v after %d requests; want one request and an error naming the object", err, f.requests)
	}
	f.requests = 0
	f.queued = []int{503, 503, 503, 503, 503}
	if err := st.Write(ctx, "c.json", []byte("x")); err == nil || f.requests != 4 {
		t.Fatalf("five 503s: %v after %d requests; want an error after 4", err, f.requests)
	}
}

// TestCheckConditionalPut: a store that honours If-None-Match passes; one
// that lets a second put-if-absent replace the object is refused, and the
// probe is deleted either way.
func TestCheckConditionalPut(t *testing.T) {
	ctx := context.Background()
	f, st := newFakeS3(t, true)
	if err := st.CheckConditionalPut(ctx); err != nil {
		t.Fatalf("a conditional store: %v", err)
	}
	if len(f.objects) != 0 {
		t.Fatalf("the probe was left: %v", f.objects)
	}
	f, st = newFakeS3(t, false)
	err := st.CheckConditionalPut(ctx)
	if !errors.Is(err, ErrNoConditionalPut) || !strings.Contains(err.Error(), "s3://b/t") {
		t.Fatalf("a store ignoring If-None-Match: %v", err)
	}
	if len(f.objects) != 0 {
		t.Fatalf("the probe was left: %v", f.objects)
	}
}

func TestForLocation(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_REGION", "eu-west-1")
	st, err := ForLocation("s3://bkt/path/to/table/")
	if err != nil {
		t.Fatal(err)
	}
	s3 := st.(*S3)
	if s3.Location() != "s3://bkt/path/to/table" {
		t.Errorf("location %s", s3.Location())
	}
	key, _ := s3.key("_delta_log/0.json")
	if u := s3.objectURL(key, nil).String(); u != "https://bkt.s3.eu-west-1.amazonaws.com/path/to/table/_delta_log/0.json" {
		t.Errorf("AWS url %s", u)
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
	st, _ = ForLocation("s3://bkt/t")
	key, _ = st.(*S3).key("x y")
	if u := st.(*S3).objectURL(key, nil).String(); u != "http://127.0.0.1:9000/bkt/t/x%20y" {
		t.Errorf("path-style url %s", u)
	}
	if _, ok := mustLocal(t, "file:///tmp/x").(*Local); !ok {
		t.Error("file:// is not local")
	}
	if _, ok := mustLocal(t, "rel/dir").(*Local); !ok {
		t.Error("a path is not local")
	}
	if _, err := ForLocation("gs://b/t"); err == nil || !strings.Contains(err.Error(), `"gs"`) {
		t.Errorf("gs://: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := ForLocation("s3://bkt/t"); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("no secret: %v", err)
	}
}

func mustLocal(t *testing.T, loc string) Storage {
	st, err := ForLocation(loc)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestS3AbortsFailedUpload: a streamed write whose fill fails after its
// first parts were sent aborts the multipart upload, so no parts are left
// on the server (S3 bills them until they are aborted).
func TestS3AbortsFailedUpload(t *testing.T) {
	ep := os.Getenv("CDCAPPLY_S3_ENDPOINT")
	if ep == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CDCAPPLY_S3_ENDPOINT is not set (scripts/s3.sh start)")
		}
		t.Skip("CDCAPPLY_S3_ENDPOINT is not set (scripts/s3.sh start)")
	}
	ctx := context.Background()
	st, err := NewS3(S3Config{Bucket: fmt.Sprintf("cdcapply-abort-%d", time.Now().UnixNano()), Prefix: "t", Endpoint: ep,
		PathStyle: true, AccessKeyID: "k", SecretAccessKey: "s", PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(ctx); err != nil {
		t.Fatal(err)
	}
	uploads := func() int {
		t.Helper()
		resp, err := st.do(ctx, request{op: "list uploads", method: http.MethodGet, query: url.Values{"uploads": {""}}, okCodes: []int{200}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res struct {
			Uploads []struct {
				Key string `xml:"Key"`
			} `xml:"Upload"`
		}
		if err := xml.NewDecoder(resp.Body).Decode(&res); err != nil {
			t.Fatal(err)
		}
		return len(res.Uploads)
	}
	boom := errors.New("boom")
	_, err = st.WriteFrom(ctx, "x.parquet", true, func(w io.Writer) error {
		if _, err := w.Write(make([]byte, 11<<20)); err != nil {
			return err
		}
		if n := uploads(); n != 1 {
			t.Errorf("%d uploads under way after two parts, want 1: the write did not stream", n)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFrom = %v, want the fill's error", err)
	}
	if n := uploads(); n != 0 {
		t.Fatalf("%d multipart uploads left after the fill failed", n)
	}
}

// TestS3ReadAhead: a Parquet reader's pattern (the footer's length, the
// footer, then a column chunk in 64 KiB pages) on a 3 MiB object costs a
// handful of GETs, not one per read, and returns the object's bytes; a
// file let go between reads (DropResident) fetches again.
func TestS3ReadAhead(t *testing.T) {
	ctx := context.Background()
	f, st := newFakeS3(t, true)
	data := make([]byte, 3<<20+777)
	for i := range data {
		data[i] = byte(i * 7 % 253)
	}
	if err := st.Write(ctx, "d.parquet", data); err != nil {
		t.Fatal(err)
	}
	file, err := st.Open(ctx, "d.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	read := func(off, n int) {
		t.Helper()
		buf := make([]byte, n)
		got, err := file.ReadAt(buf, int64(off))
		if got != min(n, len(data)-off) || (err != nil && err != io.EOF) || !bytes.Equal(buf[:got], data[off:off+got]) {
			t.Fatalf("ReadAt(%d at %d) = %d, %v; wrong bytes or count", n, off, got, err)
		}
	}
	read(len(data)-8, 8)
	read(len(data)-5000, 4992)
	for off := 0; off < len(data); off += 64 << 10 {
		read(off, 64<<10)
	}
	if n := f.gets[http.MethodGet]; n > 5 {
		t.Errorf("%d GETs for %d reads of a 3 MiB object, want at most 5", n, 2+len(data)/(64<<10)+1)
	}
	before := f.gets[http.MethodGet]
	read(0, 10)
	if f.gets[http.MethodGet] != before+1 { // the window had moved on to the tail
		t.Errorf("a read outside the window fetched %d times", f.gets[http.MethodGet]-before)
	}
	read(10, 10)
	file.(ResidentDropper).DropResident()
	read(20, 10)
	if got := f.gets[http.MethodGet] - before; got != 2 {
		t.Errorf("reads at 0, 10 and 20 with the window dropped before the last: %d GETs, want 2", got)
	}
	read(0, 2<<20) // larger than the window: straight into the buffer
}
