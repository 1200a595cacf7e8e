package loadclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"
)

// ContentType is the Content-Type of answers in format f: json (also
// ""), text or binary.
func ContentType(f string) string {
	switch f {
	case "binary":
		return "application/octet-stream"
	case "text":
		return "text/plain"
	}
	return "application/json"
}

// fetcher makes the requests of one worker: one request value and one
// copy buffer for all of them, bodies read into a counting sink or, with
// Verify, decoded.
type fetcher struct {
	hc    *http.Client
	req   *http.Request
	cfg   Config
	ctype string
	buf   []byte
	sink  countingSink
	ids   *idSink // with Verify: decodes the IDs instead of counting bytes
}

// Buffer sizes: at most maxBuffer per connection, maxBuffers in all.
const (
	maxBuffer  = 256 << 10
	minBuffer  = 4 << 10
	maxBuffers = 32 << 20
)

func newFetcher(ctx context.Context, hc *http.Client, reqURL string, cfg Config, dups *dupWindow) *fetcher {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, reqURL, nil)
	if err != nil {
		panic(err) // reqURL was made from a parsed URL
	}
	ctype := ContentType(cfg.Format)
	req.Header.Set("Accept", ctype)
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	size := min(maxBuffer, max(minBuffer, maxBuffers/cfg.Concurrency))
	f := &fetcher{hc: hc, req: req, cfg: cfg, ctype: ctype, buf: make([]byte, size)}
	if dups != nil {
		f.ids = &idSink{ctx: ctx, format: cfg.Format, dups: dups, part: make([]byte, 0, maxIDText)}
	}
	switch cfg.Format {
	case "json":
		f.sink.scan = '"'
	case "text":
		f.sink.scan = '\n'
	}
	return f
}

// fetch makes one request and returns the IDs and bytes it received.
func (f *fetcher) fetch() (int, int64, error) {
	resp, err := f.hc.Do(f.req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, answerError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != f.ctype {
		return 0, 0, fmt.Errorf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), f.ctype)
	}
	if f.ids != nil {
		return f.verify(resp)
	}
	f.sink.n, f.sink.seen = 0, 0
	n, err := io.CopyBuffer(&f.sink, resp.Body, f.buf)
	if err != nil {
		return 0, n, fmt.Errorf("reading the answer after %d bytes: %w", n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return 0, n, fmt.Errorf("answer of %d bytes, Content-Length %d", n, resp.ContentLength)
	}
	var ids int64
	switch f.cfg.Format {
	case "binary":
		if n%8 != 0 {
			return 0, n, fmt.Errorf("binary answer of %d bytes, not a multiple of 8", n)
		}
		ids = n / 8
	case "json":
		ids = (f.sink.seen - 2) / 2 // {"ids":["…","…"]}
	default:
		ids = f.sink.seen // one per line
	}
	if ids != int64(f.cfg.Batch) {
		return 0, n, fmt.Errorf("asked for %d IDs, got %d (%d bytes)", f.cfg.Batch, ids, n)
	}
	return int(ids), n, nil
}

// verify decodes the answer's IDs as they arrive and checks them for
// duplicates.
func (f *fetcher) verify(resp *http.Response) (int, int64, error) {
	f.ids.reset()
	n, err := io.CopyBuffer(f.ids, resp.Body, f.buf)
	if err == nil {
		err = f.ids.finish()
	}
	if err != nil {
		return 0, n, fmt.Errorf("reading the answer after %d bytes: %w", f.ids.bytes, err)
	}
	if f.ids.n != int64(f.cfg.Batch) {
		return 0, n, fmt.Errorf("asked for %d IDs, got %d (%d bytes)", f.cfg.Batch, f.ids.n, n)
	}
	return int(f.ids.n), 0, nil // bytes are counted unverified only
}

// errExhausted is a 503 answer of kind exhausted.
var errExhausted = errors.New("503: this second's IDs are used up")

// retryError is a 429 answer (over the client's share) or, if busy, a 503
// of kind busy (the service's answers in flight hold its memory budget):
// retry after wait.
type retryError struct {
	wait time.Duration
	busy bool
}

// Error says how long to wait.
func (e *retryError) Error() string {
	if e.busy {
		return fmt.Sprintf("503: busy; retry after %v", e.wait)
	}
	return fmt.Sprintf("429: over the client's share; retry after %v", e.wait)
}

// maxRetryAfter bounds the wait a 429 or a busy 503 asks for, as package
// client bounds it.
const maxRetryAfter = 10 * time.Second

// answerError is the error of an answer other than 200: errExhausted, a
// retryError, or one that quotes the status and the start of the body.
func answerError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	unavailable := resp.StatusCode == http.StatusServiceUnavailable
	switch {
	case unavailable && bytes.Contains(body, []byte(`"kind":"exhausted"`)):
		return errExhausted
	case unavailable && bytes.Contains(body, []byte(`"kind":"busy"`)):
		return &retryError{wait: retryAfter(resp), busy: true}
	case resp.StatusCode == http.StatusTooManyRequests:
		return &retryError{wait: retryAfter(resp)}
	}
	return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
}

// retryAfter is the wait an answer's Retry-After asks for: whole
// seconds, at least one, at most maxRetryAfter.
func retryAfter(resp *http.Response) time.Duration {
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return time.Duration(min(max(secs, 1), int(maxRetryAfter/time.Second))) * time.Second
}

// countingSink counts the bytes written to it and, if scan is set, the
// occurrences of scan among them.
type countingSink struct {
	scan byte
	n    int64
	seen int64
}

// Write counts p.
func (s *countingSink) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	if s.scan != 0 {
		s.seen += int64(bytes.Count(p, []byte{s.scan}))
	}
	return len(p), nil
}
