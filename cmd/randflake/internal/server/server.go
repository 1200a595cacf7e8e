// Package server is the HTTP ID service of `randflake serve`: batches of
// IDs for the clients that may issue them (clients.go), within each
// client's share (ratelimit.go), optional inspection for the secret's
// holders, health, readiness and Prometheus metrics.
//
// # Errors
//
// Every error answer has a JSON body {"error": MESSAGE, "kind": KIND}.
// MESSAGE is a short fixed text for people; it never carries the
// underlying error, a file path or an operating-system error (those go to
// Config.Logger). KIND is one of the Kind constants, which are also the
// values of the "kind" label of the randflake_errors_total metric:
//
//	kind                status  when
//	bad_request         400     malformed query string, unknown or repeated
//	                            parameter, count or format out of range
//	                            (also: above a client's burst), not an ID
//	unauthorized        401     GET /v1/ids without a valid issue token or
//	                            client certificate (with IssueTokens);
//	                            GET /v1/ids/{id} without the inspection
//	                            token (WWW-Authenticate: Bearer)
//	not_found           404     unknown path, including non-canonical forms
//	                            of known ones (//healthz, /./healthz, a
//	                            trailing slash); inspection disabled
//	method_not_allowed  405     a method the path does not take (the Allow
//	                            header lists those it does); HEAD on /v1/ids
//	quota               429     the client's share (ClientRate) has not
//	                            count IDs left now (Retry-After: seconds)
//	busy                503     answers in flight hold the memory budget
//	                            (MaxInflightBytes; inflight.go), or the
//	                            client's share of it, past a short wait
//	                            (Retry-After: 1)
//	exhausted           503     this second's sequence numbers are used up
//	                            (Retry-After: 1)
//	clock               503     the clock reads earlier than IDs already
//	                            issued (Retry-After: 1)
//	lease               503     no valid node-ID lease: not yet started,
//	                            renewal failed past its end, or lost
//	unavailable         503     the generator is closed (shutting down)
//	not_ready           503     GET /readyz without a valid lease
//	internal            500     any other failure of the generator
//
// A request head over MaxHeaderBytes never reaches the handler: net/http
// answers it with its own 431, in plain text (HTTP/1.1) or HTML (HTTP/2).
//
// openapi.yaml (served at GET /openapi.yaml, embedded as OpenAPI)
// describes every route, answer and error.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/randflake/randflake"
)

// Error kinds: the "kind" of a JSON error body and the label of
// randflake_errors_total. The package documentation lists when each is
// sent.
const (
	KindBadRequest       = "bad_request"        // 400: the request's query or ID is not acceptable
	KindUnauthorized     = "unauthorized"       // 401: no valid issue token or client certificate, or inspection token
	KindNotFound         = "not_found"          // 404: no such path, or inspection disabled
	KindMethodNotAllowed = "method_not_allowed" // 405: the path does not take the method
	KindQuota            = "quota"              // 429: over the client's share of IDs
	KindBusy             = "busy"               // 503: answers in flight hold the memory budget
	KindExhausted        = "exhausted"          // 503: this second's sequence numbers are used up
	KindClock            = "clock"              // 503: the clock is behind IDs already issued
	KindLease            = "lease"              // 503: no valid node-ID lease
	KindUnavailable      = "unavailable"        // 503: the generator is closed
	KindNotReady         = "not_ready"          // 503: /readyz without a valid lease
	KindInternal         = "internal"           // 500: any other generator failure
)

// Generator is what the service needs of a Randflake generator;
// *randflake.Sharded implements it.
type Generator interface {
	GenerateBatch(dst []int64) (int, error)
	Inspect(id int64) (timestamp, nodeID, sequence int64, err error)
}

// Config configures a Server.
type Config struct {
	// Generator issues the IDs.
	Generator Generator
	// LeaseEnd returns the Unix second at which the current lease ends, or
	// 0 if no lease is held. The service is not ready without a lease.
	LeaseEnd func() int64
	// MaxCount bounds the count parameter (default 10,000).
	MaxCount int
	// MaxBinaryCount bounds the count parameter of binary answers
	// (Accept: application/octet-stream; default DefaultMaxBinaryCount).
	MaxBinaryCount int
	// MaxInflightBytes bounds the bytes held by answers to GET /v1/ids
	// in flight, server-wide (default DefaultMaxInflightBytes; see
	// inflight.go). A request past it waits briefly, then is answered
	// 503, kind busy.
	MaxInflightBytes int64
	// InspectToken enables GET /v1/ids/{id} for requests that carry it as
	// a bearer token. Empty disables inspection (404).
	InspectToken string
	// Registry receives the service's metrics; nil means a new registry.
	Registry *prometheus.Registry
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives the errors behind 5xx answers, with the error
	// itself (at most one line per kind and second; the lines say how
	// many were left out). Nil discards them.
	Logger *slog.Logger
	// AccessLog, if set, receives one line per request: method, path
	// (never the query string), status, body bytes, duration, remote
	// address and the named client; the path and the client are cut at
	// 256 bytes (boundField).
	AccessLog *slog.Logger
	// LeaseNodes, if set, returns the current lease's node range, for
	// the randflake_lease_first_node and _last_node metrics.
	LeaseNodes func() (first, last int64)
	// LeaseRenewals, if set, returns how many renewals of the lease
	// succeeded and failed, for the randflake_lease_renewals_total and
	// randflake_lease_renewal_failures_total metrics.
	LeaseRenewals func() (renewed, failed uint64)
	// IssueTokens, if set, are the clients that may issue IDs with a
	// bearer token; a verified client certificate (mutual TLS) is enough
	// too. Nil lets anyone who reaches the service issue. SetIssueTokens
	// replaces them.
	IssueTokens *IssueTokens
	// ClientRate, if positive, is each client's share: IDs a second, with
	// bursts of up to ClientBurst IDs (ratelimit.go). Zero sets no share.
	ClientRate int64
	// ClientBurst is the most IDs a client may take at once, and the
	// largest count it may ask for, with ClientRate (default ClientRate,
	// one second's share).
	ClientBurst int64
	// SeparateOps moves /metrics to OpsHandler: the main handler answers
	// 404 for it, so that the per-client metrics are not served to every
	// client. /healthz and /readyz stay on both.
	SeparateOps bool
}

// Server serves the ID API. Create it with New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics http.Handler
	issued  prometheus.Counter
	batches prometheus.Histogram
	errs    *prometheus.CounterVec
	ops     opsMetrics
	limited logLimiter
	clients *clients
	tokens  atomic.Pointer[IssueTokens]
	limit   *limiter // nil without ClientRate
	budget  *inflight

	http2Errors *prometheus.CounterVec // by net/http's error type
	connsClosed *prometheus.CounterVec // by reason
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Generator == nil || cfg.LeaseEnd == nil {
		return nil, errors.New("server: Generator and LeaseEnd are required")
	}
	if cfg.MaxCount == 0 {
		cfg.MaxCount = 10000
	}
	if cfg.MaxCount < 1 || cfg.MaxBinaryCount < 0 {
		return nil, errors.New("server: MaxCount and MaxBinaryCount must be positive")
	}
	if cfg.MaxInflightBytes < 0 {
		return nil, errors.New("server: MaxInflightBytes must be positive")
	}
	if cfg.ClientRate < 0 || cfg.ClientBurst < 0 || cfg.ClientBurst > 0 && cfg.ClientRate == 0 {
		return nil, errors.New("server: ClientRate and ClientBurst must be positive, and ClientBurst needs ClientRate")
	}
	if cfg.ClientRate > 0 && cfg.ClientBurst == 0 {
		cfg.ClientBurst = cfg.ClientRate
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.tokens.Store(cfg.IssueTokens)
	s.budget = newInflight(s.maxInflightBytes())
	if cfg.ClientRate > 0 {
		s.limit = newLimiter(cfg.ClientRate, cfg.ClientBurst, cfg.Now)
	}
	s.issued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "randflake_ids_issued_total", Help: "IDs handed out.",
	})
	s.batches = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "randflake_batch_size",
		Help:    "IDs per successful /v1/ids request.",
		Buckets: []float64{1, 10, 100, 1000, 10000, 100000, 1 << 20}, // up to a binary batch of --max-binary-count (1,048,576)
	})
	s.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "randflake_errors_total", Help: "Failed requests by kind.",
	}, []string{"kind"})
	kernel := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "randflake_kernel_info", Help: "The Sparx-64 kernel in use (value 1).",
	}, []string{"kernel"})
	kernel.WithLabelValues(randflake.Kernel()).Set(1)
	left := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "randflake_lease_seconds_left", Help: "Seconds until the node-ID lease ends (0 without a lease).",
	}, func() float64 { return float64(s.leaseLeft()) })
	for _, c := range []prometheus.Collector{s.issued, s.batches, s.errs, kernel, left} {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, err
		}
	}
	if err := s.registerOps(); err != nil {
		return nil, err
	}
	if err := s.registerInflight(); err != nil {
		return nil, err
	}
	var err error
	if s.clients, err = newClients(cfg.Registry); err != nil {
		return nil, err
	}
	s.metrics = promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})
	return s, nil
}

// ServeHTTP implements http.Handler. It routes each request once, by its
// exact path: there are no redirects, and a non-canonical path is not
// found.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.serve(w, r, s.route)
}

// serve answers r with route, and counts and logs the answer.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, route func(*recorder, *http.Request)) {
	rec := recorders.Get().(*recorder)
	*rec = recorder{ResponseWriter: w}
	start := time.Now() // for http_request_duration_seconds and the access log
	cw, _ := r.Context().Value(connKey{}).(*connWatch)
	if cw != nil {
		cw.requestStarted()
	}
	route(rec, r)
	if cw != nil {
		s.requestEnded(cw, r.Context().Err() != nil, rec)
	}
	d := time.Since(start)
	s.observe(r.URL.Path, rec.status, d)
	if s.cfg.AccessLog != nil {
		s.logAccess(rec, r.Method, r.URL.Path, r.RemoteAddr, d)
	}
	if rec.abort {
		panic(http.ErrAbortHandler) // a binary answer cut short: see binaryIDs
	}
	*rec = recorder{}
	recorders.Put(rec)
}

// recorders holds *recorder for reuse: one fewer allocation per request.
var recorders = sync.Pool{New: func() any { return new(recorder) }}

func (s *Server) route(w *recorder, r *http.Request) {
	p := r.URL.Path
	switch p {
	case "/v1/ids":
		// Not HEAD: answering it as GET would issue IDs nobody sees.
		if s.method(w, r, "GET") {
			s.ids(w, r)
		}
	case "/healthz", "/readyz":
		s.probe(w, r)
	case "/metrics":
		if s.cfg.SeparateOps {
			s.fail(w, http.StatusNotFound, KindNotFound, "not found")
		} else if s.method(w, r, "GET, HEAD") {
			s.metrics.ServeHTTP(w, r)
		}
	case "/openapi.yaml":
		if s.method(w, r, "GET, HEAD") {
			s.openAPI(w, r)
		}
	default:
		id, ok := strings.CutPrefix(p, "/v1/ids/")
		if !ok || id == "" || strings.Contains(id, "/") {
			s.fail(w, http.StatusNotFound, KindNotFound, "not found")
			return
		}
		if s.method(w, r, "GET, HEAD") {
			s.inspect(w, r, id)
		}
	}
}

// routeOps routes the requests of OpsHandler.
func (s *Server) routeOps(w *recorder, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz":
		s.probe(w, r)
	case "/metrics":
		if s.method(w, r, "GET, HEAD") {
			s.metrics.ServeHTTP(w, r)
		}
	default:
		s.fail(w, http.StatusNotFound, KindNotFound, "not found")
	}
}

// probe answers GET or HEAD /healthz (alive) and /readyz (a lease is
// held), on the main and the operations listener alike.
func (s *Server) probe(w *recorder, r *http.Request) {
	if !s.method(w, r, "GET, HEAD") {
		return
	}
	if r.URL.Path == "/readyz" {
		s.ready(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// method reports whether r's method is among allow (a comma-separated
// list, as in the Allow header); if not, it answers 405.
func (s *Server) method(w *recorder, r *http.Request, allow string) bool {
	for m := range strings.SplitSeq(allow, ", ") {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", allow)
	s.fail(w, http.StatusMethodNotAllowed, KindMethodNotAllowed, "method not allowed; allowed: "+allow)
	return false
}

func (s *Server) leaseLeft() int64 {
	end := s.cfg.LeaseEnd()
	if end == 0 {
		return 0
	}
	return max(0, end-s.cfg.Now().Unix())
}

func (s *Server) ready(w *recorder, _ *http.Request) {
	left := s.leaseLeft()
	if left <= 0 {
		s.fail(w, http.StatusServiceUnavailable, KindNotReady, "no valid node-ID lease")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "lease_seconds_left": left})
}

// idsQuery is the parsed query of GET /v1/ids.
type idsQuery struct {
	count  int
	format string // "string" or "int"
}

// parseIDsQuery parses the raw query of GET /v1/ids strictly: pairs
// separated by '&', each a known key with '=' and a value, valid
// %-escapes, no key twice. It returns a message for the client on error.
func parseIDsQuery(raw string, maxCount int) (idsQuery, string) {
	q := idsQuery{count: 1, format: "string"}
	if raw == "" {
		return q, ""
	}
	if strings.Contains(raw, ";") {
		return q, "malformed query: parameters are separated by '&'"
	}
	var seenCount, seenFormat bool
	for part := range strings.SplitSeq(raw, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return q, "malformed query: every parameter needs '=' and a value"
		}
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return q, "malformed query: bad %-escape"
		}
		switch key {
		case "count":
			if seenCount {
				return q, "count given more than once"
			}
			seenCount = true
			n, ok := parseCount(val)
			switch {
			case !ok:
				return q, "count must be a whole number"
			case n < 1:
				return q, "count must be at least 1"
			case n > maxCount:
				return q, "count must be at most " + strconv.Itoa(maxCount)
			}
			q.count = n
		case "format":
			if seenFormat {
				return q, "format given more than once"
			}
			seenFormat = true
			if val != "string" && val != "int" {
				return q, `format must be "string" or "int"`
			}
			q.format = val
		default:
			return q, "unknown query parameter; /v1/ids takes count and format"
		}
	}
	return q, ""
}

// parseCount parses decimal digits only (no sign, no space); values too
// large for an int come back as the largest int.
func parseCount(s string) (int, bool) {
	if s == "" || len(s) > 64 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return int(^uint(0) >> 1), true // out of range: too large
	}
	return n, true
}

// admitQuery parses the query of GET /v1/ids, with counts up to
// maxCount, and admits the client c for its count (see admit); a bad query
// is answered 400. ok false: an answer was sent.
func (s *Server) admitQuery(w *recorder, r *http.Request, c caller, maxCount int) (q idsQuery, charged *bucket, ok bool) {
	q, msg := parseIDsQuery(r.URL.RawQuery, maxCount)
	if msg != "" {
		s.fail(w, http.StatusBadRequest, KindBadRequest, msg)
		return q, nil, false
	}
	charged, ok = s.admit(w, r, c, q.count)
	return q, charged, ok
}

// ids serves GET /v1/ids?count=N[&format=string|int], in JSON, text or
// (binary.go) the binary format.
func (s *Server) ids(w *recorder, r *http.Request) {
	c, ok := s.identify(w, r)
	if !ok {
		return
	}
	if wantsBinary(r) {
		s.binaryIDs(w, r, c) // binary.go
		return
	}
	q, charged, ok := s.admitQuery(w, r, c, s.cfg.MaxCount)
	if !ok {
		return
	}
	// The buffers, reserved in the budget first (inflight.go): up to
	// smallBatch IDs, both are reused (no allocation), and reserved as
	// large as they are.
	size := int64(scratchBytes)
	if q.count > smallBatch {
		size = textBytes(q.count)
	}
	release, ok := s.reserve(w, r, c, size)
	if !ok {
		s.refund(charged, q.count)
		return
	}
	defer release()
	if r.Context().Err() != nil {
		// The client went away (an HTTP/2 stream reset) while the
		// request waited: no IDs for nobody.
		s.refund(charged, q.count)
		w.kind = kindGone
		return
	}
	var ids []int64
	var buf []byte
	if q.count <= smallBatch {
		sc := scratches.Get().(*scratch)
		defer scratches.Put(sc)
		ids, buf = sc.ids[:q.count], sc.buf[:0]
	} else {
		ids, buf = make([]int64, q.count), make([]byte, 0, 16+q.count*23)
	}
	n, err := s.cfg.Generator.GenerateBatch(ids)
	if err != nil {
		// A partial batch is not handed out: the caller asked for count.
		s.refund(charged, q.count)
		s.generateFailed(w, q.count, err)
		return
	}
	ids = ids[:n]
	s.issued.Add(float64(n))
	c.stats.issued.Add(float64(n))
	s.batches.Observe(float64(n))
	// The header values are shared slices (see headerBinary): no
	// canonicalization and no allocation per request.
	h := w.Header()
	h["Cache-Control"] = headerNoStore
	if wantsText(r) {
		h["Content-Type"] = headerText
		for _, id := range ids {
			buf = appendID(buf, id, q.format)
			buf = append(buf, '\n')
		}
		w.Write(buf)
		return
	}
	h["Content-Type"] = headerJSON
	buf = append(buf, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = appendID(buf, id, q.format)
		buf = append(buf, '"')
	}
	buf = append(buf, "]}\n"...)
	w.Write(buf)
}

// smallBatch is the largest count whose buffers come from scratches.
const smallBatch = 128

// scratch holds the buffers of one small answer; buf has room for the
// longest (JSON: at most 23 bytes an ID, and the wrapper).
type scratch struct {
	ids [smallBatch]int64
	buf []byte
}

// textBytes is the size of the buffers of a JSON or text answer of count
// IDs: the IDs, and room for their longest encoding.
func textBytes(count int) int64 { return int64(count)*8 + 16 + int64(count)*23 }

// scratchBytes is the size of a scratch's buffers.
const scratchBytes = smallBatch*8 + 16 + smallBatch*23

// kindGone is the access log's kind of a request whose client went away
// before its answer was made (no IDs were issued); it is not an error
// kind and is not counted in randflake_errors_total.
const kindGone = "client_gone"

// scratches holds *scratch for reuse: no allocation for small answers.
var scratches = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 16+smallBatch*23)} }}

// generateFailed answers a failed GenerateBatch with a generic message
// and logs the error.
func (s *Server) generateFailed(w *recorder, count int, err error) {
	status, kind, msg, level := classify(err)
	if kind == KindExhausted || kind == KindClock {
		w.Header().Set("Retry-After", "1")
	}
	if n, ok := s.limited.allow(kind, time.Now()); ok {
		attrs := []any{"kind", kind, "count", count, "err", err}
		if kind == KindExhausted {
			attrs = append(attrs, "remedy", exhaustedRemedy)
		}
		if n > 0 {
			attrs = append(attrs, "left_out", n)
		}
		s.log.Log(context.Background(), level, "issuing IDs failed", attrs...)
	}
	s.fail(w, status, kind, msg)
}

// exhaustedRemedy is what the log of an exhausted second advises: the
// error names the node range, the second and the ceiling.
const exhaustedRemedy = "a wider node range (serve --claim, or --nodes FIRST-LAST) raises the ceiling; clients retry in the next second (Retry-After: 1), as binary batches wait for it"

// classify returns the answer to a failed GenerateBatch: status, kind,
// message for the client and the level of its log line.
func classify(err error) (status int, kind, msg string, level slog.Level) {
	switch {
	case errors.Is(err, randflake.ErrClosed):
		return http.StatusServiceUnavailable, KindUnavailable, "unavailable: shutting down", slog.LevelWarn
	case errors.Is(err, randflake.ErrResourceExhausted):
		return http.StatusServiceUnavailable, KindExhausted, "unavailable: this second's IDs are used up on this server's node range; retry in a second", slog.LevelWarn
	case errors.Is(err, randflake.ErrInvalidLease):
		return http.StatusServiceUnavailable, KindLease, "unavailable: no valid node-ID lease", slog.LevelError
	case errors.Is(err, randflake.ErrConsistencyViolation):
		return http.StatusServiceUnavailable, KindClock, "unavailable: the clock is behind IDs already issued; retry in a second", slog.LevelWarn
	}
	return http.StatusInternalServerError, KindInternal, "internal error", slog.LevelError
}

func appendID(b []byte, id int64, format string) []byte {
	if format == "int" {
		return strconv.AppendInt(b, id, 10)
	}
	return randflake.AppendString(b, id)
}

// wantsText reports whether the client prefers text/plain over JSON.
func wantsText(r *http.Request) bool {
	accept := acceptHeader(r)
	switch accept { // the common cases, without parsing
	case "", "*/*", "application/json":
		return false
	case "text/plain":
		return true
	}
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/plain":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// inspect serves GET /v1/ids/{id} for holders of the inspection token.
func (s *Server) inspect(w *recorder, r *http.Request, raw string) {
	if s.cfg.InspectToken == "" {
		s.fail(w, http.StatusNotFound, KindNotFound, "inspection is disabled")
		return
	}
	token, ok := bearerToken(r.Header["Authorization"]) // the rule of issuing (clients.go)
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.InspectToken)) != 1 {
		w.Header().Set("WWW-Authenticate", wwwAuthenticate)
		s.fail(w, http.StatusUnauthorized, KindUnauthorized, "a valid bearer token is required")
		return
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		s.fail(w, http.StatusBadRequest, KindBadRequest, "unknown query parameter; /v1/ids/{id} takes none")
		return
	}
	id, err := randflake.DecodeString(raw)
	if err != nil {
		if v, perr := strconv.ParseInt(raw, 10, 64); perr == nil {
			id, err = v, nil
		}
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, KindBadRequest, "not a Randflake ID")
		return
	}
	ts, node, seq, err := s.cfg.Generator.Inspect(id)
	if err != nil {
		s.fail(w, http.StatusBadRequest, KindBadRequest, "not a Randflake ID")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":        randflake.EncodeString(id),
		"int":       strconv.FormatInt(id, 10),
		"timestamp": ts,
		"time":      time.Unix(ts, 0).UTC().Format(time.RFC3339),
		"node":      node,
		"sequence":  seq,
	})
}

// fail answers with a JSON error of kind and counts it. msg must be a
// fixed text: never an error's, a path or the client's input.
func (s *Server) fail(w http.ResponseWriter, status int, kind, msg string) {
	s.errs.WithLabelValues(kind).Inc()
	if rec, ok := w.(*recorder); ok {
		rec.kind = kind
	}
	writeJSON(w, status, map[string]string{"error": msg, "kind": kind})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // never rendered as HTML: no \u0026 for '&'
	enc.Encode(v)
}

// maxLoggedPath bounds the path in access-log lines, and every other
// field a client chooses (the client's name, from a certificate's common
// name of any length): boundField.
const maxLoggedPath = 256

// boundField returns v cut to maxLoggedPath bytes (at a character's
// start), with "…" when it was cut.
func boundField(v string) string {
	if len(v) <= maxLoggedPath {
		return v
	}
	i := maxLoggedPath
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + "…"
}

func (s *Server) logAccess(rec *recorder, method, path, remote string, d time.Duration) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []any{"method", method, "path", boundField(path), "status", status, "bytes", rec.bytes,
		"duration", d, "remote", remote}
	if rec.client != "" {
		attrs = append(attrs, "client", boundField(rec.client))
	}
	if rec.kind != "" {
		attrs = append(attrs, "kind", rec.kind)
	}
	s.cfg.AccessLog.Info("request", attrs...)
}

// recorder records the status, body size and error kind of a response.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	kind   string
	client string // the named client of a request to issue
	abort  bool   // the answer is incomplete: abort the connection
}

// WriteHeader records the first status and sends it on.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write counts the body bytes written.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// logLimiter lets at most one log line per key and second through and
// counts the others.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

// allow reports whether a line for key may be logged now and, if so, how
// many were left out since the last one.
func (l *logLimiter) allow(key string, now time.Time) (leftOut int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.left = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := l.last[key]; seen && now.Sub(t) < time.Second {
		l.left[key]++
		return 0, false
	}
	leftOut = l.left[key]
	l.last[key], l.left[key] = now, 0
	return leftOut, true
}
