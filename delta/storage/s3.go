package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// S3Config says where a table on S3 (or an S3-compatible store) lives and
// how to reach it.
type S3Config struct {
	// Bucket and Prefix locate the table: s3://Bucket/Prefix. Prefix has
	// no leading or trailing slash; empty is the bucket's root.
	Bucket, Prefix string
	// Endpoint is the service's base URL (scheme and host, e.g.
	// http://127.0.0.1:19090); empty is AWS's regional endpoint.
	Endpoint string
	// Region signs the requests (us-east-1 when empty).
	Region string
	// PathStyle addresses objects as Endpoint/Bucket/key instead of
	// Bucket.host/key. S3-compatible servers usually want it; AWS wants
	// virtual-hosted names for buckets made since 2020.
	PathStyle bool
	// The credentials; SessionToken only for temporary ones.
	AccessKeyID, SecretAccessKey, SessionToken string
	// Client sends the requests (when nil, one shared client that keeps
	// up to 32 idle connections a host, as a table's reads, data files
	// and commits overlap, and ends a request after five minutes).
	Client *http.Client
	// ListPage is the most keys a list page asks for (S3's 1000 when zero).
	ListPage int
	// PartSize is the size of a streamed write's parts (WriteFrom): a
	// file up to it is one PUT, a larger one a multipart upload of parts
	// this size (8 MiB when zero; S3 takes 5 MiB to 5 GiB).
	PartSize int
	// Attempts bounds the tries of a request that failed in a way worth
	// retrying (a 5xx, a throttle, a broken connection); 5 when zero.
	Attempts int
}

// S3 is Storage on S3 or an S3-compatible object store. WriteIfAbsent is a
// conditional PUT (If-None-Match: *), which S3 has done atomically since
// 2024: the one put-if-absent Delta's optimistic commits need, with no
// lock service beside it. A store that ignores the condition would let two
// writers replace each other's commits; CheckConditionalPut finds one.
type S3 struct {
	cfg   S3Config
	base  *url.URL
	creds credentials
	now   func() time.Time
}

var s3Client = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	// A request that hangs (a half-open connection) ends and is retried:
	// the engine's commits and cached file reads run without a deadline.
	// Five minutes is far above a part's or a window's transfer.
	return &http.Client{Transport: tr, Timeout: 5 * time.Minute}
}()

// NewS3 returns the storage cfg names; it makes no request.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("open s3 storage: no bucket")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 5
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = 8 << 20
	}
	if cfg.Client == nil {
		cfg.Client = s3Client
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, fmt.Errorf("open s3://%s/%s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", cfg.Bucket, cfg.Prefix)
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "https://s3." + cfg.Region + ".amazonaws.com"
	}
	base, err := url.Parse(endpoint)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("open s3://%s/%s: endpoint %q: want http(s)://host[:port]", cfg.Bucket, cfg.Prefix, endpoint)
	}
	if !cfg.PathStyle {
		base.Host = cfg.Bucket + "." + base.Host
	}
	base.Path = strings.TrimRight(base.Path, "/")
	return &S3{cfg: cfg, base: base, now: time.Now,
		creds: credentials{cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken}}, nil
}

// ParseS3Location splits s3://bucket/prefix.
func ParseS3Location(loc string) (bucket, prefix string, ok bool) {
	rest, ok := strings.CutPrefix(loc, "s3://")
	if !ok {
		return "", "", false
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	return bucket, strings.Trim(prefix, "/"), bucket != ""
}

// S3ConfigFromEnv is the configuration of the table at loc (s3://bucket/
// prefix) from the environment AWS's tools and delta-rs read:
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (an S3-compatible server; its
// objects are then addressed path-style unless
// AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true), AWS_REGION or AWS_DEFAULT_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func S3ConfigFromEnv(loc string) (S3Config, error) {
	bucket, prefix, ok := ParseS3Location(loc)
	if !ok {
		return S3Config{}, fmt.Errorf("open %s: not s3://bucket/prefix", loc)
	}
	cfg := S3Config{Bucket: bucket, Prefix: prefix,
		Endpoint:        firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:          firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"),
		AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
	}
	cfg.PathStyle = cfg.Endpoint != "" && !strings.EqualFold(os.Getenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"), "true")
	return cfg, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// CheckLocation reports what is wrong with a table location's form
// (s3://bucket/prefix, file:///path or a path) without reaching the store.
func CheckLocation(loc string) error {
	if strings.HasPrefix(loc, "s3://") {
		if _, _, ok := ParseS3Location(loc); !ok {
			return fmt.Errorf("location %q: want s3://bucket/prefix", loc)
		}
		return nil
	}
	if i := strings.Index(loc, "://"); i > 0 && !strings.ContainsAny(loc[:i], "/\\") && !strings.HasPrefix(loc, "file://") {
		return fmt.Errorf("location %q: scheme %q is not supported (s3:// or a local directory)", loc, loc[:i])
	}
	return nil
}

// ForLocation returns the storage of a table location: s3://bucket/prefix
// (configured from the environment, S3ConfigFromEnv) or a local directory
// (a path, or file:///path).
func ForLocation(loc string) (Storage, error) {
	if strings.HasPrefix(loc, "s3://") {
		cfg, err := S3ConfigFromEnv(loc)
		if err != nil {
			return nil, err
		}
		return NewS3(cfg)
	}
	if err := CheckLocation(loc); err != nil {
		return nil, fmt.Errorf("open %s: %w", loc, err)
	}
	return NewLocal(strings.TrimPrefix(loc, "file://")), nil
}

// Location implements Storage: s3://bucket/prefix.
func (s *S3) Location() string {
	if s.cfg.Prefix == "" {
		return "s3://" + s.cfg.Bucket
	}
	return "s3://" + s.cfg.Bucket + "/" + s.cfg.Prefix
}

// key is the object key of a table-relative path.
func (s *S3) key(p string) (string, error) {
	clean := strings.Trim(p, "/")
	for _, seg := range strings.Split(clean, "/") {
		if seg == ".." || seg == "." {
			return "", fmt.Errorf("resolve path %q: outside %s", p, s.Location())
		}
	}
	if s.cfg.Prefix == "" {
		return clean, nil
	}
	if clean == "" {
		return s.cfg.Prefix, nil
	}
	return s.cfg.Prefix + "/" + clean, nil
}

// objectURL addresses key (empty: the bucket itself) with query q.
func (s *S3) objectURL(key string, q url.Values) *url.URL {
	u := *s.base
	p := u.Path
	if s.cfg.PathStyle {
		p += "/" + s.cfg.Bucket
	}
	if key != "" || !s.cfg.PathStyle {
		p += "/" + key
	}
	u.Path = p
	u.RawPath = s3Escape(p, false)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return &u
}

// s3Error is an S3 error response.
type s3Error struct {
	Op, Location string
	Status       int
	Code         string `xml:"Code"`
	Message      string `xml:"Message"`
}

func (e *s3Error) Error() string {
	msg := e.Code
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Op, e.Location, e.Status, msg)
}

// retryable reports whether a request answered with status may succeed
// when sent again: throttles, 5xx, and S3's 409 for a conditional write
// racing another. A request that got no answer (a broken or timed-out
// connection) is always sent again, unless its context ended.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500
}

// request is one S3 call.
type request struct {
	op      string // for errors: "read", "write", ...
	method  string
	key     string
	query   url.Values
	header  http.Header
	body    []byte
	okCodes []int
}

// do sends r, retrying what retryable allows with backoff, and returns the
// response of the first status in r.okCodes (its body unread; the caller
// closes it) or an error naming the object.
func (s *S3) do(ctx context.Context, r request) (*http.Response, error) {
	loc := "s3://" + s.cfg.Bucket + "/" + r.key
	sum := emptySHA256
	if len(r.body) > 0 {
		h := sha256.Sum256(r.body)
		sum = hex.EncodeToString(h[:])
	}
	var lastErr error
	for attempt := 0; attempt < s.cfg.Attempts; attempt++ {
		if attempt > 0 {
			wait := time.Duration(50<<attempt) * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%s %s: %w (after %v)", r.op, loc, ctx.Err(), lastErr)
			case <-time.After(wait):
			}
		}
		req, err := http.NewRequestWithContext(ctx, r.method, s.objectURL(r.key, r.query).String(), bytes.NewReader(r.body))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.op, loc, err)
		}
		req.ContentLength = int64(len(r.body))
		if len(r.body) == 0 {
			req.Body = http.NoBody
		}
		for k, vs := range r.header {
			req.Header[k] = vs
		}
		signV4(req, s.creds, s.cfg.Region, sum, s.now())
		resp, err := s.cfg.Client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s %s: %w", r.op, loc, ctx.Err())
			}
			lastErr = fmt.Errorf("%s %s: %w", r.op, loc, err)
			continue
		}
		for _, c := range r.okCodes {
			if resp.StatusCode == c {
				return resp, nil
			}
		}
		e := &s3Error{Op: r.op, Location: loc, Status: resp.StatusCode}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		_ = xml.Unmarshal(body, e)
		lastErr = e
		if retryable(resp.StatusCode) {
			continue
		}
		return nil, e
	}
	return nil, lastErr
}

// statusOf is the HTTP status of an S3 error response, or 0.
func statusOf(err error) int {
	var e *s3Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Read implements Storage.
func (s *S3) Read(ctx context.Context, p string) ([]byte, error) {
	key, err := s.key(p)
	if err != nil {
		return nil, err
	}
	resp, err := s.do(ctx, request{op: "read", method: http.MethodGet, key: key, okCodes: []int{200}})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %w", err, ErrNotExist)
		}
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return b, nil
}

// WriteIfAbsent implements Storage with a conditional PUT. A store's 412
// is ErrExist. A retried PUT whose first try did land answers 412 too:
// the committer then finds its own commit already in the log, which it
// treats as another writer's (a re-seek from the table), never as a loss.
func (s *S3) WriteIfAbsent(ctx context.Context, p string, data []byte) error {
	key, err := s.key(p)
	if err != nil {
		return err
	}
	resp, err := s.do(ctx, request{op: "write if absent", method: http.MethodPut, key: key, body: data,
		header: http.Header{"If-None-Match": {"*"}}, okCodes: []int{200}})
	if err != nil {
		if statusOf(err) == http.StatusPreconditionFailed {
			return fmt.Errorf("%w: %w", err, ErrExist)
		}
		return err
	}
	drain(resp)
	return nil
}

// Write implements Storage: a PUT replaces the object whole.
func (s *S3) Write(ctx context.Context, p string, data []byte) error {
	key, err := s.key(p)
	if err != nil {
		return err
	}
	resp, err := s.do(ctx, request{op: "write", method: http.MethodPut, key: key, body: data, okCodes: []int{200}})
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// Delete implements Storage; S3 answers a missing key as deleted.
func (s *S3) Delete(ctx context.Context, p string) error {
	key, err := s.key(p)
	if err != nil {
		return err
	}
	resp, err := s.do(ctx, request{op: "delete", method: http.MethodDelete, key: key, okCodes: []int{200, 204, 404}})
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

type listResult struct {
	Contents []struct {
		Key          string    `xml:"Key"`
		LastModified time.Time `xml:"LastModified"`
		Size         int64     `xml:"Size"`
	} `xml:"Contents"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
}

// List implements Storage with ListObjectsV2 pages under dir's prefix.
func (s *S3) List(ctx context.Context, dir string) ([]FileInfo, error) {
	key, err := s.key(dir)
	if err != nil {
		return nil, err
	}
	prefix := key
	if prefix != "" {
		prefix += "/"
	}
	root := s.cfg.Prefix
	if root != "" {
		root += "/"
	}
	var out []FileInfo
	token := ""
	for {
		q := url.Values{"list-type": {"2"}, "prefix": {prefix}}
		if s.cfg.ListPage > 0 {
			q.Set("max-keys", strconv.Itoa(s.cfg.ListPage))
		}
		if token != "" {
			q.Set("continuation-token", token)
		}
		resp, err := s.do(ctx, request{op: "list", method: http.MethodGet, query: q, okCodes: []int{200}})
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", s.Location(), dir, err)
		}
		var page listResult
		err = xml.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: decode the answer: %w", s.Location(), dir, err)
		}
		for _, c := range page.Contents {
			rel, ok := strings.CutPrefix(c.Key, root)
			if !ok || rel == "" || strings.HasSuffix(rel, "/") {
				continue // a "folder" marker some tools leave
			}
			// Seconds, as a HEAD's Last-Modified has them (Stat): a
			// commit's time must not depend on how it was found.
			out = append(out, FileInfo{Path: rel, Size: c.Size, ModTime: c.LastModified.Truncate(time.Second)})
		}
		if !page.IsTruncated {
			break
		}
		if page.NextContinuationToken == "" || page.NextContinuationToken == token {
			return nil, fmt.Errorf("list %s/%s: a truncated page without a new continuation token", s.Location(), dir)
		}
		token = page.NextContinuationToken
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Stat implements Stater with a HEAD.
func (s *S3) Stat(ctx context.Context, p string) (FileInfo, error) {
	key, err := s.key(p)
	if err != nil {
		return FileInfo{}, err
	}
	return s.head(ctx, "stat", p, key)
}

func (s *S3) head(ctx context.Context, op, p, key string) (FileInfo, error) {
	resp, err := s.do(ctx, request{op: op, method: http.MethodHead, key: key, okCodes: []int{200}})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return FileInfo{}, fmt.Errorf("%w: %w", err, ErrNotExist)
		}
		return FileInfo{}, err
	}
	drain(resp)
	if resp.ContentLength < 0 {
		return FileInfo{}, fmt.Errorf("%s s3://%s/%s: the answer has no length", op, s.cfg.Bucket, key)
	}
	mod, err := http.ParseTime(resp.Header.Get("Last-Modified"))
	if err != nil {
		return FileInfo{}, fmt.Errorf("%s s3://%s/%s: Last-Modified: %w", op, s.cfg.Bucket, key, err)
	}
	return FileInfo{Path: strings.Trim(p, "/"), Size: resp.ContentLength, ModTime: mod}, nil
}

// Open implements RangeReader: the size from a HEAD, then a ranged GET for
// each ReadAt.
func (s *S3) Open(ctx context.Context, p string) (File, error) {
	key, err := s.key(p)
	if err != nil {
		return nil, err
	}
	fi, err := s.head(ctx, "open", p, key)
	if err != nil {
		return nil, err
	}
	return &s3File{s: s, ctx: ctx, key: key, size: fi.Size}, nil
}

// s3ReadAhead is the least an s3File fetches at a time: a Parquet reader
// reads a file's footer, then its column chunks page by page, and a
// request for each of those costs a round trip (about 40 a file in the
// tests' merge-on-read tables). A window of this size near the end holds
// a small file whole.
const s3ReadAhead = 1 << 20

// s3File reads parts of one object through a window of read-ahead. It
// keeps the context it was opened with, as a File's ReadAt takes none.
type s3File struct {
	s    *S3
	ctx  context.Context
	key  string
	size int64

	mu     sync.Mutex // guards the window; never held across a request
	winOff int64
	win    []byte
}

func (f *s3File) Size() int64 { return f.size }

// Close drops the window.
func (f *s3File) Close() error { f.DropResident(); return nil }

// DropResident implements ResidentDropper: a cached file's window is let
// go between reads, so an open file holds no memory while idle.
func (f *s3File) DropResident() {
	f.mu.Lock()
	f.win = nil
	f.mu.Unlock()
}

// ReadAt implements io.ReaderAt: from the window when it holds the range,
// else with one ranged GET of at least s3ReadAhead bytes, which becomes
// the window (a read larger than that goes straight into p).
func (f *s3File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read s3://%s/%s at %d: negative offset", f.s.cfg.Bucket, f.key, off)
	}
	if off >= f.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), f.size-off)
	if n == 0 {
		return 0, nil
	}
	f.mu.Lock()
	if off >= f.winOff && off+n <= f.winOff+int64(len(f.win)) {
		copy(p[:n], f.win[off-f.winOff:])
		f.mu.Unlock()
		return f.done(n, len(p))
	}
	f.mu.Unlock()
	if n >= s3ReadAhead {
		if err := f.fetch(p[:n], off); err != nil {
			return 0, err
		}
		return f.done(n, len(p))
	}
	end := min(f.size, off+s3ReadAhead)
	start := max(0, end-s3ReadAhead) // near the end: the tail, footer and all
	win := make([]byte, end-start)
	if err := f.fetch(win, start); err != nil {
		return 0, err
	}
	copy(p[:n], win[off-start:])
	f.mu.Lock()
	f.win, f.winOff = win, start
	f.mu.Unlock()
	return f.done(n, len(p))
}

func (f *s3File) done(n int64, want int) (int, error) {
	if int(n) < want {
		return int(n), io.EOF
	}
	return int(n), nil
}

// fetch fills p with the object's bytes from off, with one ranged GET.
func (f *s3File) fetch(p []byte, off int64) error {
	rng := "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+int64(len(p))-1, 10)
	resp, err := f.s.do(f.ctx, request{op: "read", method: http.MethodGet, key: f.key,
		header: http.Header{"Range": {rng}}, okCodes: []int{206, 200}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 { // a server that ignores Range sends it all
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return fmt.Errorf("read s3://%s/%s at %d: %w", f.s.cfg.Bucket, f.key, off, err)
		}
	}
	if _, err := io.ReadFull(resp.Body, p); err != nil {
		return fmt.Errorf("read s3://%s/%s at %d: %w", f.s.cfg.Bucket, f.key, off, err)
	}
	return nil
}

// ErrNoConditionalPut is returned by CheckConditionalPut for a store that
// let a second put-if-absent replace an object.
var ErrNoConditionalPut = errors.New("the store does not refuse a put-if-absent of an existing object (If-None-Match: *); two writers could replace each other's commits")

// CheckConditionalPut writes a probe object under the log twice with
// If-None-Match: * and deletes it: the second write must fail with 412.
// Older S3-compatible servers ignore the header and answer 200, and on
// them Delta's commits are not safe; a writer refuses such a store before
// its first commit.
func (s *S3) CheckConditionalPut(ctx context.Context) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	probe := "_delta_log/" + TempPrefix + "probe-" + hex.EncodeToString(rnd[:])
	defer func() { _ = s.Delete(context.WithoutCancel(ctx), probe) }()
	if err := s.WriteIfAbsent(ctx, probe, []byte("1")); err != nil {
		return fmt.Errorf("check conditional put on %s: %w", s.Location(), err)
	}
	err := s.WriteIfAbsent(ctx, probe, []byte("2"))
	switch {
	case errors.Is(err, ErrExist):
		return nil
	case err == nil:
		return fmt.Errorf("check conditional put on %s: %w", s.Location(), ErrNoConditionalPut)
	default:
		return fmt.Errorf("check conditional put on %s: %w", s.Location(), err)
	}
}

// CreateBucket makes the bucket (for set-up scripts and tests; a bucket
// that exists and is the caller's is not an error).
func (s *S3) CreateBucket(ctx context.Context) error {
	var body []byte
	if s.cfg.Region != "us-east-1" {
		body = []byte("<CreateBucketConfiguration><LocationConstraint>" + s.cfg.Region +
			"</LocationConstraint></CreateBucketConfiguration>")
	}
	u := *s
	u.cfg.Prefix = ""
	resp, err := u.do(ctx, request{op: "create bucket", method: http.MethodPut, body: body, okCodes: []int{200}})
	if err != nil {
		var e *s3Error
		if errors.As(err, &e) && (e.Code == "BucketAlreadyOwnedByYou") {
			return nil
		}
		return err
	}
	drain(resp)
	return nil
}

// WriteFrom implements StreamWriter: a file up to PartSize is one PUT, a
// larger one a multipart upload whose parts are sent as fill produces
// them, so the writer holds one part, not the file (a checkpoint holds
// every live file of the table). With ifAbsent the upload's completion is
// conditional (If-None-Match: *): the object appears whole or not at all,
// and an existing one is left as it was (ErrExist). A failed fill, or a
// completion refused, aborts the upload.
func (s *S3) WriteFrom(ctx context.Context, p string, ifAbsent bool, fill func(io.Writer) error) (int64, error) {
	key, err := s.key(p)
	if err != nil {
		return 0, err
	}
	w := &s3Upload{s: s, ctx: ctx, key: key, buf: getPart(s.cfg.PartSize)}
	defer func() { putPart(w.buf) }()
	err = fill(w)
	if err == nil {
		err = w.err
	}
	if err == nil {
		err = w.finish(ifAbsent)
	}
	if err != nil {
		w.abort()
		return w.n, err
	}
	return w.n, nil
}

// partBuffers keep the parts' buffers from one streamed write to the next.
var partBuffers sync.Pool

func getPart(size int) []byte {
	if b, ok := partBuffers.Get().([]byte); ok && cap(b) == size {
		return b[:0]
	}
	return make([]byte, 0, size)
}

func putPart(b []byte) { partBuffers.Put(b[:0]) }

// s3Upload gathers a streamed write's bytes into parts.
type s3Upload struct {
	s        *S3
	ctx      context.Context
	key      string
	buf      []byte
	n        int64
	err      error
	uploadID string   // set once the first full part is sent
	etags    []string // of the parts sent, in order
}

func (w *s3Upload) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(w.buf) == cap(w.buf) {
			if w.err = w.sendPart(); w.err != nil {
				w.n += int64(written)
				return written, w.err
			}
		}
	}
	w.n += int64(written)
	return written, nil
}

func (w *s3Upload) loc() string { return "s3://" + w.s.cfg.Bucket + "/" + w.key }

// sendPart sends the gathered bytes as the next part, starting the upload
// with the first.
func (w *s3Upload) sendPart() error {
	if w.uploadID == "" {
		resp, err := w.s.do(w.ctx, request{op: "start upload", method: http.MethodPost, key: w.key,
			query: url.Values{"uploads": {""}}, okCodes: []int{200}})
		if err != nil {
			return err
		}
		var started struct {
			UploadID string `xml:"UploadId"`
		}
		err = xml.NewDecoder(resp.Body).Decode(&started)
		resp.Body.Close()
		if err != nil || started.UploadID == "" {
			return fmt.Errorf("start upload %s: no upload id in the answer (%v)", w.loc(), err)
		}
		w.uploadID = started.UploadID
	}
	part := strconv.Itoa(len(w.etags) + 1)
	resp, err := w.s.do(w.ctx, request{op: "upload part " + part, method: http.MethodPut, key: w.key, body: w.buf,
		query: url.Values{"partNumber": {part}, "uploadId": {w.uploadID}}, okCodes: []int{200}})
	if err != nil {
		return err
	}
	drain(resp)
	etag := resp.Header.Get("ETag")
	if etag == "" {
		return fmt.Errorf("upload part %s of %s: no ETag in the answer", part, w.loc())
	}
	w.etags = append(w.etags, etag)
	w.buf = w.buf[:0]
	return nil
}

// finish writes what fill produced: one PUT when it fits a part, else the
// last part and the upload's completion.
func (w *s3Upload) finish(ifAbsent bool) error {
	var header http.Header
	if ifAbsent {
		header = http.Header{"If-None-Match": {"*"}}
	}
	if w.uploadID == "" {
		op := "write"
		if ifAbsent {
			op = "write if absent"
		}
		resp, err := w.s.do(w.ctx, request{op: op, method: http.MethodPut, key: w.key, body: w.buf, header: header, okCodes: []int{200}})
		if err != nil {
			if ifAbsent && statusOf(err) == http.StatusPreconditionFailed {
				return fmt.Errorf("%w: %w", err, ErrExist)
			}
			return err
		}
		drain(resp)
		return nil
	}
	if len(w.buf) > 0 {
		if err := w.sendPart(); err != nil {
			return err
		}
	}
	var body bytes.Buffer
	body.WriteString("<CompleteMultipartUpload>")
	for i, etag := range w.etags {
		fmt.Fprintf(&body, "<Part><PartNumber>%d</PartNumber><ETag>", i+1)
		_ = xml.EscapeText(&body, []byte(etag))
		body.WriteString("</ETag></Part>")
	}
	body.WriteString("</CompleteMultipartUpload>")
	resp, err := w.s.do(w.ctx, request{op: "complete upload", method: http.MethodPost, key: w.key, body: body.Bytes(),
		query: url.Values{"uploadId": {w.uploadID}}, header: header, okCodes: []int{200}})
	if err != nil {
		if ifAbsent && statusOf(err) == http.StatusPreconditionFailed {
			return fmt.Errorf("%w: %w", err, ErrExist)
		}
		return err
	}
	// S3 may answer a completion 200 and put the error in the body.
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("complete upload %s: %w", w.loc(), err)
	}
	if bytes.Contains(answer, []byte("<Error>")) {
		e := &s3Error{Op: "complete upload", Location: w.loc(), Status: resp.StatusCode}
		_ = xml.Unmarshal(answer, e)
		if ifAbsent && e.Code == "PreconditionFailed" {
			return fmt.Errorf("%w: %w", e, ErrExist)
		}
		return e
	}
	w.uploadID = "" // completed: nothing to abort
	return nil
}

// abort drops an unfinished upload's parts (best effort: S3's lifecycle
// rules can expire what is left).
func (w *s3Upload) abort() {
	if w.uploadID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 30*time.Second)
	defer cancel()
	if resp, err := w.s.do(ctx, request{op: "abort upload", method: http.MethodDelete, key: w.key,
		query: url.Values{"uploadId": {w.uploadID}}, okCodes: []int{204, 200, 404}}); err == nil {
		drain(resp)
	}
	w.uploadID = ""
}
