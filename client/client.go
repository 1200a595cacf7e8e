// Package client fetches Randflake IDs from a `randflake serve` instance in
// batches, prefetching in the background so that callers usually get an ID
// from a local buffer without a network round trip.
//
// The buffer is bounded, IDs older than Config.MaxAge are never handed out
// (an ID carries the second it was made, which the holder of the secret
// reads back; one kept long would say it was made well before it was
// used), and fetch errors are returned to callers rather than swallowed.
// IDs are not ordered: they are encrypted, so their values say nothing of
// which was made first; keep a time column to sort by.
//
// # Failures and retries
//
// A failed fetch is retried with exponential backoff and jitter, moving to
// the next of Config.URLs each time, and Next gives up with the last error
// once Config.MaxAttempts fetches have failed while it waited. A 429 or 503
// answer's Retry-After is honoured for that URL, up to Config.MaxRetryAfter.
// A request is abandoned once Config.MaxAge has passed since it was sent, as
// its IDs would be discarded on arrival; a service that cannot answer within
// MaxAge makes Next fail with ErrTooSlow instead of waiting forever.
//
// # Wire format
//
// By default the client asks for the service's binary batch format
// (Accept: application/octet-stream): 8 bytes per ID, the int64's
// two's-complement bits in big-endian order, with a Content-Length of 8 ×
// BatchSize. A body shorter or longer than that is an error, never a
// smaller batch. The same request also accepts decimal text, which older
// versions of the service answer; Config.Format chooses JSON or text
// instead.
//
// Redirects are followed only within the same scheme, host and port, at
// most three in a row; any other redirect fails with ErrRedirect before a
// request is sent to the other host.
//
// # TLS and tokens
//
// A service started with --tls-cert-file is reached at an https URL. The
// TLS settings are those of Config.HTTPClient's Transport: RootCAs for a
// service whose certificate is not signed by a CA the system trusts, and
// Certificates for a service that requires client certificates
// (--tls-client-ca-file); set ForceAttemptHTTP2 on an http.Transport with
// a TLSClientConfig to use HTTP/2 (a nil HTTPClient uses HTTP/2 over TLS).
// For binary batches of hundreds of thousands of IDs, HTTP/1.1 over TLS
// carries about twice as many IDs a second as net/http's HTTP/2 does;
// for small batches the two are alike. A service started with
// --issue-tokens-file needs Config.Token or Config.TokenFile, unless the
// client certificate is enough for it. A token is sent only over https,
// or to a loopback address, never in clear text across a network; a token
// the service does not know is a *ServerError with StatusCode 401, which
// Next returns at once.
package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/randflake/randflake/privatefile"
)

// Config configures a Client. Only URL or URLs is required.
type Config struct {
	// URL is the base URL of the ID service, e.g. "http://127.0.0.1:8080".
	URL string
	// URLs lists base URLs of instances of the ID service. Requests go to
	// one URL until it fails, then to the next in turn, after the backoff
	// pause (see InitialBackoff). If URL is set too, it comes first. Every URL must be http or https, with a host and
	// without a query or fragment, and none may be listed twice; New
	// refuses the configuration otherwise.
	URLs []string
	// HTTPClient makes the requests; nil means a client with a 10-second
	// timeout. The client given is not modified: requests go through a
	// copy (sharing its Transport, Jar and Timeout) whose CheckRedirect
	// refuses redirects to other hosts before calling the original
	// CheckRedirect, if any. TLS is configured here: an http.Transport
	// whose TLSClientConfig has the service's CA in RootCAs and, for a
	// service that requires client certificates, the client's in
	// Certificates (see the package documentation and Example_tls).
	HTTPClient *http.Client
	// Token, if set, is sent with every request as "Authorization: Bearer
	// TOKEN": one of the tokens of the service's --issue-tokens-file. It
	// must be a bearer token (letters, digits, '-', '.', '_', '~', '+',
	// '/', then '=' at the end only). Not with TokenFile.
	Token string
	// TokenFile, if set, names a file holding the token instead, with any
	// white space around it (a final newline) ignored. It must be a
	// private file, as randflake serve's own (mode 600, the user's or
	// root's, not a link). New reads it, and it is read again before a
	// request once a second has passed since the last read, so that a
	// replaced token is used within a second; if it cannot be read then,
	// the last token read is sent.
	TokenFile string
	// BatchSize is the number of IDs fetched per request (default 1,000).
	// The service takes up to 10,000 in JSON and text and up to 1,048,576
	// in the binary format (its --max-count and --max-binary-count).
	BatchSize int
	// Format is the wire format asked for; the zero value is FormatBinary.
	Format Format
	// LowWater starts a background fetch when fewer IDs are buffered
	// (default BatchSize/2).
	LowWater int
	// MaxAge is how long a fetched ID may wait in the buffer before it is
	// discarded (default 1 second; the server hands out IDs at most one
	// second behind its clock). It also bounds each request: one that has
	// not been answered in full after MaxAge is abandoned.
	MaxAge time.Duration
	// MaxAttempts is the number of failed fetches after which a waiting
	// Next gives up and returns the last error (default 3, or the number
	// of URLs if that is larger, so that each URL is tried). Each call
	// counts the failures it waited for; calls waiting together share
	// the fetches, and a failed background fetch counts for no call. Answers that
	// cannot succeed on retry (4xx other than 408, 425 and 429) end the
	// wait at once.
	MaxAttempts int
	// InitialBackoff is the pause after the first failed fetch (default
	// 50ms). It doubles with each further failure in a row, up to
	// MaxBackoff, and each pause is drawn at random from its upper half
	// so that clients do not retry in step.
	InitialBackoff time.Duration
	// MaxBackoff caps the pause between failed fetches (default 2s).
	MaxBackoff time.Duration
	// MaxRetryAfter caps how long the client honours a Retry-After header
	// (default 10s), so that a misbehaving server cannot stall it for
	// hours; a longer Retry-After is cut to MaxRetryAfter.
	MaxRetryAfter time.Duration
}

// Format is a wire format of GET /v1/ids.
type Format int

// The wire formats.
const (
	// FormatBinary asks for application/octet-stream, 8 bytes per ID,
	// big-endian, and accepts decimal text (from older services) too.
	FormatBinary Format = iota
	// FormatJSON asks for application/json: {"ids":["…",…]} with
	// decimal strings.
	FormatJSON
	// FormatText asks for text/plain: decimal IDs, one per line.
	FormatText
)

// String returns "binary", "json" or "text".
func (f Format) String() string {
	switch f {
	case FormatBinary:
		return "binary"
	case FormatJSON:
		return "json"
	case FormatText:
		return "text"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// accept is the Accept header of requests in format f.
func (f Format) accept() string {
	switch f {
	case FormatJSON:
		return "application/json"
	case FormatText:
		return "text/plain"
	}
	return mediaTypeBinary + ", text/plain;q=0.5"
}

const mediaTypeBinary = "application/octet-stream"

// Defaults for the zero values of Config's fields.
const (
	defaultBatchSize      = 1000
	defaultMaxAge         = time.Second
	defaultMinAttempts    = 3
	defaultInitialBackoff = 50 * time.Millisecond
	defaultMaxBackoff     = 2 * time.Second
	defaultMaxRetryAfter  = 10 * time.Second
)

// maxRedirects bounds the same-origin redirects followed per request.
const maxRedirects = 3

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("randflake/client: client closed")

// ErrTooSlow means the service did not deliver IDs while they were still
// younger than Config.MaxAge: either it had not answered in full by then,
// or the IDs expired before Next could hand them out. Next returns it
// (wrapped, with the details) once Config.MaxAttempts fetches
// have failed this way. Raise MaxAge above the service's response time, or
// fix the service's latency (or the network's).
var ErrTooSlow = errors.New("randflake/client: ID service too slow for MaxAge")

// maxTokenFile bounds a token file.
const maxTokenFile = 4096

// tokenReread is how long a token read from Config.TokenFile is used
// before the file is read again.
const tokenReread = time.Second

// ErrRedirect means the service answered with a redirect the client does
// not follow: one to another scheme, host or port, or more than three in a
// row. Point the client at the final URL instead.
var ErrRedirect = errors.New("randflake/client: redirect refused")

// ServerError is a non-200 answer from the ID service. Next returns it,
// or an error wrapping it; use errors.As to read its fields.
type ServerError struct {
	// URL is the base URL the request went to, with any password redacted.
	URL string
	// StatusCode is the HTTP status code, e.g. 503.
	StatusCode int
	// Status is the status line, e.g. "503 Service Unavailable".
	Status string
	// Kind is the "kind" field of the service's JSON error body, e.g.
	// "lease" or "exhausted"; empty if the body had none.
	Kind string
	// Message is the "error" field of the JSON body or, for a body that
	// is not such JSON, the start of the body as printable text.
	Message string
	// RetryAfter is the delay asked for by a Retry-After header on a 429
	// or 503 answer, 0 if none. The client waits at most
	// Config.MaxRetryAfter.
	RetryAfter time.Duration
}

// Error describes the answer: URL, status, kind and message.
func (e *ServerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "randflake/client: %s: %s", e.URL, e.Status)
	if e.Kind != "" {
		fmt.Fprintf(&b, ", kind %q", e.Kind)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	return b.String()
}

// permanent reports whether retrying the same request cannot help.
func (e *ServerError) permanent() bool {
	switch e.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return e.StatusCode >= 400 && e.StatusCode < 500
}

// Client hands out IDs from a prefetched buffer. It is safe for concurrent
// use.
type Client struct {
	cfg       Config
	endpoints []endpoint
	http      *http.Client
	token     *tokenSource

	mu           sync.Mutex
	batches      []batch // oldest first
	buffered     int
	cur          *attempt  // the fetch scheduled or in flight, if any
	next         int       // index of the endpoint for the next fetch
	failures     int       // fetches failed in a row
	backoffUntil time.Time // no fetch starts before this
	lastErr      error     // error of the last fetch, nil after a success
	stale        uint64    // batches discarded for age, ever
	closed       bool
	ctx          context.Context
	cancel       context.CancelFunc
}

type endpoint struct {
	base    string    // base URL for messages, password redacted
	url     string    // the request URL
	retryAt time.Time // Retry-After: no fetch from here before this
}

type batch struct {
	ids []int64
	at  time.Time // when the request for them was sent
}

// attempt is one fetch. err and permanent are set before done is closed.
type attempt struct {
	done      chan struct{}
	err       error
	permanent bool
}

// New returns a client; it does not contact the server until the first
// call to Next or Prefetch. It refuses invalid URLs and out-of-range
// settings; zero values take the documented defaults.
func New(cfg Config) (*Client, error) {
	var raw []string
	if cfg.URL != "" {
		raw = append(raw, cfg.URL)
	}
	raw = append(raw, cfg.URLs...)
	if len(raw) == 0 {
		return nil, errors.New("randflake/client: no URL given; set Config.URL or Config.URLs")
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = defaultBatchSize
	}
	if cfg.BatchSize < 1 {
		return nil, errors.New("randflake/client: BatchSize must be positive")
	}
	if cfg.LowWater == 0 {
		cfg.LowWater = cfg.BatchSize / 2
	}
	if cfg.LowWater < 0 || cfg.LowWater > cfg.BatchSize {
		return nil, errors.New("randflake/client: LowWater must be between 0 and BatchSize")
	}
	if err := defaultDuration(&cfg.MaxAge, defaultMaxAge, "MaxAge"); err != nil {
		return nil, err
	}
	if err := defaultDuration(&cfg.InitialBackoff, defaultInitialBackoff, "InitialBackoff"); err != nil {
		return nil, err
	}
	if err := defaultDuration(&cfg.MaxBackoff, max(defaultMaxBackoff, cfg.InitialBackoff), "MaxBackoff"); err != nil {
		return nil, err
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		return nil, errors.New("randflake/client: MaxBackoff must not be less than InitialBackoff")
	}
	if err := defaultDuration(&cfg.MaxRetryAfter, defaultMaxRetryAfter, "MaxRetryAfter"); err != nil {
		return nil, err
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = max(defaultMinAttempts, len(raw))
	}
	if cfg.MaxAttempts < 1 {
		return nil, errors.New("randflake/client: MaxAttempts must be positive")
	}
	if cfg.Format < FormatBinary || cfg.Format > FormatText {
		return nil, fmt.Errorf("randflake/client: unknown %v", cfg.Format)
	}
	if cfg.Token != "" && cfg.TokenFile != "" {
		return nil, errors.New("randflake/client: Token and TokenFile exclude each other")
	}
	ts := &tokenSource{file: cfg.TokenFile, token: cfg.Token}
	if cfg.Token != "" {
		if err := checkToken(cfg.Token); err != nil {
			return nil, fmt.Errorf("randflake/client: Token: %w", err)
		}
	}
	if cfg.TokenFile != "" {
		if err := ts.read(time.Now()); err != nil {
			return nil, err
		}
	}

	query := url.Values{"count": {strconv.Itoa(cfg.BatchSize)}, "format": {"int"}}.Encode()
	seen := map[string]bool{}
	var eps []endpoint
	for i, s := range raw {
		name := "URL"
		if j := i - (len(raw) - len(cfg.URLs)); j >= 0 {
			name = fmt.Sprintf("URLs[%d]", j)
		}
		u, err := parseBase(s)
		if err != nil {
			return nil, fmt.Errorf("randflake/client: %s: %w", name, err)
		}
		key := strings.TrimSuffix(u.String(), "/")
		if seen[key] {
			return nil, fmt.Errorf("randflake/client: %s: %s is listed twice", name, u.Redacted())
		}
		seen[key] = true
		if (cfg.Token != "" || cfg.TokenFile != "") && !strings.EqualFold(u.Scheme, "https") && !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("randflake/client: %s: %s is plain http to a host that is not this machine's loopback: a token is sent only over https", name, u.Redacted())
		}
		req := u.JoinPath("v1", "ids")
		req.RawQuery = query
		eps = append(eps, endpoint{base: u.Redacted(), url: req.String()})
	}

	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	} else {
		hc.Timeout = 10 * time.Second
	}
	hc.CheckRedirect = checkRedirect(hc.CheckRedirect)
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cfg: cfg, endpoints: eps, http: &hc, token: ts, ctx: ctx, cancel: cancel}, nil
}

// isLoopback reports whether host (of a URL) is this machine's loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenSource is the bearer token of the requests: Config.Token, or the
// content of Config.TokenFile, read again after tokenReread.
type tokenSource struct {
	file string

	mu     sync.Mutex
	token  string
	readAt time.Time
}

// get returns the token to send ("" for none).
func (s *tokenSource) get() string {
	if s.file == "" {
		return s.token
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.readAt) >= tokenReread {
		// A file that cannot be read now (being replaced, say) leaves
		// the last token: the service says if it is no longer good.
		s.readLocked(now)
	}
	return s.token
}

// read reads the file, for New.
func (s *tokenSource) read(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readLocked(now)
}

func (s *tokenSource) readLocked(now time.Time) error {
	s.readAt = now
	b, err := privatefile.Read(s.file, maxTokenFile)
	if err != nil {
		return fmt.Errorf("randflake/client: TokenFile: %w", err)
	}
	token := strings.TrimSpace(string(b))
	clear(b)
	if err := checkToken(token); err != nil {
		return fmt.Errorf("randflake/client: TokenFile %s: %w", s.file, err)
	}
	s.token = token
	return nil
}

// checkToken checks that token can be sent as a bearer token (RFC 6750's
// b64token), without saying what it is.
func checkToken(token string) error {
	t := strings.TrimRight(token, "=")
	if t == "" {
		return errors.New("the token is empty")
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
		if !ok {
			return errors.New("the token has characters a bearer token cannot carry (white space, say): use letters, digits, '-', '.', '_', '~', '+' and '/', then '=' only at the end")
		}
	}
	return nil
}

func defaultDuration(d *time.Duration, def time.Duration, name string) error {
	if *d == 0 {
		*d = def
	}
	if *d < 0 {
		return fmt.Errorf("randflake/client: %s must be positive", name)
	}
	return nil
}

// parseBase parses and checks one base URL.
func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", err)
	}
	shown := s
	if _, ok := u.User.Password(); ok {
		shown = u.Redacted()
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("bad URL %q: scheme must be http or https", shown)
	case u.Hostname() == "":
		return nil, fmt.Errorf("bad URL %q: no host", shown)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("bad URL %q: a base URL has no query or fragment", shown)
	}
	return u, nil
}

// checkRedirect returns a CheckRedirect that refuses redirects to another
// origin and long chains, then defers to next.
func checkRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		from := via[0].URL
		if !sameOrigin(from, req.URL) {
			return fmt.Errorf("%w: %s to %s is another scheme, host or port", ErrRedirect, from.Redacted(), req.URL.Redacted())
		}
		if len(via) > maxRedirects {
			return fmt.Errorf("%w: more than %d redirects from %s", ErrRedirect, maxRedirects, from.Redacted())
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// Next returns an ID, waiting for a fetch if the buffer is empty. It
// returns an error instead
//
//   - once Config.MaxAttempts fetches have failed while it waited: the
//     last fetch's error, which wraps ErrTooSlow if the service was too
//     slow for MaxAge and is a *ServerError for a non-200 answer;
//   - at once for an answer that a retry cannot change (a 4xx other than
//     408, 425 and 429, such as 400 for a BatchSize the service refuses);
//   - ErrClosed after Close;
//   - ctx's error, joined with the last fetch error if there was one, if
//     ctx ends first.
//
// ctx bounds the wait only: a fetch in flight is not cancelled with it, as
// other callers may be waiting for the same IDs; each fetch is bounded by
// MaxAge and by Close.
func (c *Client) Next(ctx context.Context) (int64, error) {
	var (
		waited    *attempt // the fetch this call last waited for
		staleMark uint64   // c.stale when it started waiting
		failed    int      // fetches failed while this call waited
	)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, ErrClosed
		}
		c.dropExpired(time.Now())
		if c.buffered > 0 {
			b := &c.batches[0]
			id := b.ids[0]
			b.ids = b.ids[1:]
			if len(b.ids) == 0 {
				c.batches = c.batches[1:]
			}
			c.buffered--
			if c.buffered < c.cfg.LowWater {
				c.startFetch()
			}
			c.mu.Unlock()
			return id, nil
		}
		if waited != nil {
			err := waited.err
			if err == nil && c.stale != staleMark {
				// The batch arrived in time but expired before this
				// call could take from it.
				err = fmt.Errorf("%w: fetched IDs expired before they could be handed out (MaxAge %v)", ErrTooSlow, c.cfg.MaxAge)
			}
			if err != nil {
				failed++
				if waited.permanent || failed >= c.cfg.MaxAttempts {
					c.mu.Unlock()
					return 0, err
				}
			}
		}
		// The buffer is empty, so there is room for a batch.
		waited = c.startFetch()
		staleMark = c.stale
		c.mu.Unlock()
		select {
		case <-waited.done:
		case <-c.ctx.Done():
		case <-ctx.Done():
			return 0, c.contextError(ctx)
		}
	}
}

// contextError is ctx's error, with the last fetch error if any.
func (c *Client) contextError(ctx context.Context) error {
	c.mu.Lock()
	last := c.lastErr
	c.mu.Unlock()
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last fetch error: %w)", ctx.Err(), last)
}

// Fetch makes exactly one request for a batch of Config.BatchSize IDs, to
// the URL the client uses now, and returns the whole batch: no buffer, no
// prefetch, no retry. It is for callers that hand out or store whole
// batches, and for measuring the service request by request (randflake
// load). ctx and MaxAge bound the request; an error is what Next would
// have seen for it (a *ServerError, ErrTooSlow, ErrRedirect, a network
// error).
func (c *Client) Fetch(ctx context.Context) ([]int64, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	ep := c.endpoints[c.next]
	c.mu.Unlock()
	ids, _, err := c.request(ctx, ep, time.Now())
	return ids, err
}

// Prefetch starts a background fetch if none is running and the buffer has
// room for a batch.
func (c *Client) Prefetch() {
	c.mu.Lock()
	if !c.closed {
		c.startFetch()
	}
	c.mu.Unlock()
}

// Buffered returns the number of IDs in the buffer that are younger than
// MaxAge.
func (c *Client) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropExpired(time.Now())
	return c.buffered
}

// Close stops background fetching, cancels a request in flight and empties
// the buffer. Next returns ErrClosed afterwards.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.batches, c.buffered = nil, 0
	c.mu.Unlock()
	c.cancel()
}

func (c *Client) dropExpired(now time.Time) {
	for len(c.batches) > 0 && now.Sub(c.batches[0].at) > c.cfg.MaxAge {
		c.buffered -= len(c.batches[0].ids)
		c.batches = c.batches[1:]
		c.stale++
	}
}

// startFetch starts one background fetch unless one is scheduled or
// running, or the buffer cannot take a batch, and returns the fetch
// scheduled or running (nil if none). The fetch waits first for the
// backoff after earlier failures and for the endpoint's Retry-After.
// c.mu is held.
func (c *Client) startFetch() *attempt {
	if c.cur != nil {
		return c.cur
	}
	if c.buffered+c.cfg.BatchSize > 2*c.cfg.BatchSize {
		return nil
	}
	a := &attempt{done: make(chan struct{})}
	c.cur = a
	e := c.next
	start := c.backoffUntil
	if t := c.endpoints[e].retryAt; t.After(start) {
		start = t
	}
	go c.fetch(a, e, time.Until(start))
	return a
}

func (c *Client) fetch(a *attempt, e int, wait time.Duration) {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
		}
	}
	var (
		ids        []int64
		retryAfter time.Duration
		err        error
	)
	sent := time.Now()
	if c.ctx.Err() == nil {
		ids, retryAfter, err = c.get(c.endpoints[e], sent)
	}
	now := time.Now()
	if err == nil && ids != nil && now.Sub(sent) > c.cfg.MaxAge {
		err = c.tooSlow(e, now.Sub(sent))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = nil
	switch {
	case c.closed:
		a.err = ErrClosed
	case err != nil:
		var se *ServerError
		a.err, a.permanent = err, errors.As(err, &se) && se.permanent()
		c.lastErr = err
		c.failures++
		c.backoffUntil = now.Add(c.backoff(c.failures))
		if retryAfter > 0 {
			c.endpoints[e].retryAt = now.Add(min(retryAfter, c.cfg.MaxRetryAfter))
		}
		c.next = (e + 1) % len(c.endpoints)
	default:
		c.lastErr, c.failures, c.backoffUntil = nil, 0, time.Time{}
		c.batches = append(c.batches, batch{ids: ids, at: sent})
		c.buffered += len(ids)
	}
	close(a.done)
}

// backoff returns the pause after the given number of failures in a row:
// InitialBackoff doubled per further failure, capped at MaxBackoff, drawn
// from the upper half.
func (c *Client) backoff(failures int) time.Duration {
	d := c.cfg.InitialBackoff
	for i := 1; i < failures && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

func (c *Client) tooSlow(e int, took time.Duration) error {
	return fmt.Errorf("%w: %s did not answer in full within MaxAge (%v; took %v)",
		ErrTooSlow, c.endpoints[e].base, c.cfg.MaxAge, took.Round(time.Millisecond))
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 4 << 10

// maxRetryAfterParsed keeps Retry-After arithmetic far from overflow.
const maxRetryAfterParsed = 1 << 20 // seconds, about 12 days

// get makes one request to ep. It returns the IDs, or an error and the
// delay asked for by a Retry-After header.
func (c *Client) get(ep endpoint, sent time.Time) ([]int64, time.Duration, error) {
	return c.request(c.ctx, ep, sent)
}

// request makes one request to ep within parent and MaxAge from sent.
func (c *Client) request(parent context.Context, ep endpoint, sent time.Time) ([]int64, time.Duration, error) {
	ctx, cancel := context.WithDeadline(parent, sent.Add(c.cfg.MaxAge))
	defer cancel()
	fail := func(err error) ([]int64, time.Duration, error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return nil, 0, fmt.Errorf("%w: %s did not answer in full within MaxAge (%v)", ErrTooSlow, ep.base, c.cfg.MaxAge)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the request URL
		}
		if errors.Is(err, ErrRedirect) {
			return nil, 0, err // names both URLs
		}
		return nil, 0, fmt.Errorf("randflake/client: %s: %w", ep.base, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.url, nil)
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Accept", c.cfg.Format.accept())
	if token := c.token.get(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// A body cut short still says something; the status is enough.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		se := serverError(ep.base, resp, body, time.Now())
		return nil, se.RetryAfter, se
	}
	ctype := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ctype); mt == mediaTypeBinary {
		if c.cfg.Format != FormatBinary {
			return fail(fmt.Errorf("binary answer (Content-Type %q) to a request for %v", ctype, c.cfg.Format))
		}
		ids, err := readBinary(resp, c.cfg.BatchSize)
		if err != nil {
			return fail(err)
		}
		return ids, 0, nil
	}
	// An ID is at most 20 characters; allow for a line end or JSON quotes
	// and a comma each, and for the JSON wrapper.
	limit := int64(c.cfg.BatchSize)*24 + 64
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fail(fmt.Errorf("reading response: %w", err))
	}
	if int64(len(body)) > limit {
		return fail(fmt.Errorf("response longer than %d bytes for %d IDs", limit, c.cfg.BatchSize))
	}
	ids, err := parseIDs(ctype, body, c.cfg.BatchSize)
	if err != nil {
		return fail(err)
	}
	return ids, 0, nil
}

// readBinary reads a binary answer of want IDs: exactly 8 × want bytes,
// as Content-Length must say if it is given.
func readBinary(resp *http.Response, want int) ([]int64, error) {
	size := 8 * int64(want)
	if resp.ContentLength >= 0 && resp.ContentLength != size {
		return nil, fmt.Errorf("binary answer of %d bytes (Content-Length) for %d IDs, want %d", resp.ContentLength, want, size)
	}
	ids := make([]int64, want)
	buf := make([]byte, min(size, 64<<10))
	for done := 0; done < want; {
		chunk := buf[:8*min(len(buf)/8, want-done)]
		n, err := io.ReadFull(resp.Body, chunk)
		if err != nil {
			got := 8*int64(done) + int64(n)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("short response: %d of %d bytes for %d IDs", got, size, want)
			}
			return nil, fmt.Errorf("reading response after %d of %d bytes: %w", got, size, err)
		}
		for i := 0; i < len(chunk); i += 8 {
			ids[done] = int64(binary.BigEndian.Uint64(chunk[i:]))
			done++
		}
	}
	if n, _ := io.ReadFull(resp.Body, buf[:1]); n > 0 {
		return nil, fmt.Errorf("binary answer longer than %d bytes for %d IDs", size, want)
	}
	return ids, nil
}

// serverError describes a non-200 answer with the given (truncated) body.
func serverError(base string, resp *http.Response, body []byte, now time.Time) *ServerError {
	se := &ServerError{URL: base, StatusCode: resp.StatusCode, Status: resp.Status}
	if se.Status == "" {
		se.Status = strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	}
	var j struct {
		Error string `json:"error"`
		Kind  string `json:"kind"`
	}
	if json.Unmarshal(body, &j) == nil && (j.Error != "" || j.Kind != "") {
		se.Kind, se.Message = printable(j.Kind, 64), printable(j.Error, 512)
	} else {
		se.Message = printable(string(body), 256)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		se.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	return se
}

// printable returns s trimmed, with control and invalid characters
// replaced, cut to at most n runes.
func printable(s string, n int) string {
	s = strings.TrimSpace(s)
	var b strings.Builder
	for i, r := range []rune(s) {
		if i == n {
			b.WriteString("...")
			break
		}
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseRetryAfter reads a Retry-After value, delta-seconds or HTTP-date,
// as a delay from now; 0 if absent, invalid or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return time.Duration(min(n, maxRetryAfterParsed)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return max(0, min(d, maxRetryAfterParsed*time.Second))
	}
	return 0
}

// parseIDs reads a successful answer: decimal IDs one per line (text/plain
// or no Content-Type), or, if the service answered in JSON, {"ids":[...]}
// with decimal strings or numbers. Other types are refused.
func parseIDs(contentType string, body []byte, want int) ([]int64, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	var raw [][]byte
	if mt != "" && mt != "application/json" && mt != "text/plain" {
		return nil, fmt.Errorf("unexpected Content-Type %q", printable(contentType, 80))
	}
	if mt == "application/json" {
		var j struct {
			IDs []json.RawMessage `json:"ids"`
		}
		if err := json.Unmarshal(body, &j); err != nil {
			return nil, fmt.Errorf("bad JSON response: %w", err)
		}
		for _, r := range j.IDs {
			if len(r) > 0 && r[0] == '"' {
				var s string
				if json.Unmarshal(r, &s) != nil {
					return nil, fmt.Errorf("bad ID in response: %.40s", r)
				}
				r = []byte(s)
			}
			raw = append(raw, r)
		}
	} else {
		body = bytes.TrimSuffix(body, []byte("\n"))
		if len(body) > 0 {
			raw = bytes.Split(body, []byte("\n"))
		}
	}
	if len(raw) > want {
		return nil, fmt.Errorf("server sent %d IDs, more than the %d asked for", len(raw), want)
	}
	if len(raw) == 0 {
		return nil, errors.New("server sent no IDs")
	}
	ids := make([]int64, len(raw))
	for i, r := range raw {
		r = bytes.TrimSuffix(r, []byte("\r"))
		id, err := strconv.ParseInt(string(r), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad ID in response: %q", printable(string(r), 40))
		}
		ids[i] = id
	}
	return ids, nil
}
