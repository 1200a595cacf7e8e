// Package server is the HTTP ID service of `randflake serve`: batches of
// IDs, optional inspection for the secret's holders, health, readiness and
// Prometheus metrics.
package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/randflake/randflake"
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
	// InspectToken enables GET /v1/ids/{id} for requests that carry it as
	// a bearer token. Empty disables inspection (404).
	InspectToken string
	// Registry receives the service's metrics; nil means a new registry.
	Registry *prometheus.Registry
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Server serves the ID API. Create it with New.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	issued  prometheus.Counter
	batches prometheus.Histogram
	errs    *prometheus.CounterVec
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Generator == nil || cfg.LeaseEnd == nil {
		return nil, errors.New("server: Generator and LeaseEnd are required")
	}
	if cfg.MaxCount == 0 {
		cfg.MaxCount = 10000
	}
	if cfg.MaxCount < 1 {
		return nil, errors.New("server: MaxCount must be positive")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.issued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "randflake_ids_issued_total", Help: "IDs handed out.",
	})
	s.batches = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "randflake_batch_size",
		Help:    "IDs per successful /v1/ids request.",
		Buckets: []float64{1, 10, 100, 1000, 10000, 100000},
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
	s.mux.HandleFunc("GET /v1/ids", s.ids)
	s.mux.HandleFunc("GET /v1/ids/{id}", s.inspect)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	return s, nil
}

// ServeHTTP implements http.Handler. Unknown paths get a JSON 404 and
// known paths with other methods a JSON 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r) // sets the path values
		return
	}
	// The mux answers unknown paths with 404 and wrong methods with 405
	// (and an Allow header); give both a JSON body.
	rec := &statusProbe{header: http.Header{}}
	h.ServeHTTP(rec, r)
	for k, v := range rec.header {
		if k != "Content-Type" && k != "X-Content-Type-Options" {
			w.Header()[k] = v
		}
	}
	kind := "not_found"
	if rec.status == http.StatusMethodNotAllowed {
		kind = "method_not_allowed"
	}
	s.fail(w, rec.status, kind, http.StatusText(rec.status))
}

// statusProbe records the status the mux's fallback handler would send.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

func (s *Server) leaseLeft() int64 {
	end := s.cfg.LeaseEnd()
	if end == 0 {
		return 0
	}
	return max(0, end-s.cfg.Now().Unix())
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.leaseLeft() <= 0 {
		s.fail(w, http.StatusServiceUnavailable, "not_ready", "no valid node-ID lease")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "lease_seconds_left": s.leaseLeft()})
}

// ids serves GET /v1/ids?count=N[&format=string|int].
func (s *Server) ids(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	count := 1
	if v, ok := q["count"]; ok {
		if len(v) != 1 {
			s.fail(w, http.StatusBadRequest, "bad_count", "count given more than once")
			return
		}
		n, err := strconv.Atoi(v[0])
		switch {
		case err != nil:
			s.fail(w, http.StatusBadRequest, "bad_count", "count must be a whole number")
			return
		case n < 1:
			s.fail(w, http.StatusBadRequest, "bad_count", "count must be at least 1")
			return
		case n > s.cfg.MaxCount:
			s.fail(w, http.StatusBadRequest, "bad_count", "count must be at most "+strconv.Itoa(s.cfg.MaxCount))
			return
		}
		count = n
	}
	format := q.Get("format")
	if format != "" && format != "string" && format != "int" {
		s.fail(w, http.StatusBadRequest, "bad_format", `format must be "string" or "int"`)
		return
	}
	ids := make([]int64, count)
	n, err := s.cfg.Generator.GenerateBatch(ids)
	if err != nil {
		// A partial batch is not handed out: the caller asked for count.
		status, kind := http.StatusServiceUnavailable, "generate"
		switch {
		case errors.Is(err, randflake.ErrResourceExhausted):
			kind = "exhausted"
			w.Header().Set("Retry-After", "1")
		case errors.Is(err, randflake.ErrInvalidLease):
			kind = "lease"
		case errors.Is(err, randflake.ErrConsistencyViolation):
			kind = "clock"
			w.Header().Set("Retry-After", "1")
		default:
			status = http.StatusInternalServerError
		}
		s.fail(w, status, kind, err.Error())
		return
	}
	ids = ids[:n]
	s.issued.Add(float64(n))
	s.batches.Observe(float64(n))
	w.Header().Set("Cache-Control", "no-store")
	if wantsText(r) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		buf := make([]byte, 0, n*21)
		for _, id := range ids {
			buf = appendID(buf, id, format)
			buf = append(buf, '\n')
		}
		w.Write(buf)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	buf := make([]byte, 0, 16+n*23)
	buf = append(buf, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = appendID(buf, id, format)
		buf = append(buf, '"')
	}
	buf = append(buf, "]}\n"...)
	w.Write(buf)
}

func appendID(b []byte, id int64, format string) []byte {
	if format == "int" {
		return strconv.AppendInt(b, id, 10)
	}
	return randflake.AppendString(b, id)
}

// wantsText reports whether the client prefers text/plain over JSON.
func wantsText(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
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
func (s *Server) inspect(w http.ResponseWriter, r *http.Request) {
	if s.cfg.InspectToken == "" {
		s.fail(w, http.StatusNotFound, "not_found", "inspection is disabled")
		return
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.InspectToken)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="randflake"`)
		s.fail(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
		return
	}
	raw := r.PathValue("id")
	id, err := randflake.DecodeString(raw)
	if err != nil {
		if v, perr := strconv.ParseInt(raw, 10, 64); perr == nil {
			id, err = v, nil
		}
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, "bad_id", "not a Randflake ID")
		return
	}
	ts, node, seq, err := s.cfg.Generator.Inspect(id)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "bad_id", err.Error())
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

func (s *Server) fail(w http.ResponseWriter, status int, kind, msg string) {
	s.errs.WithLabelValues(kind).Inc()
	writeJSON(w, status, map[string]string{"error": msg, "kind": kind})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
