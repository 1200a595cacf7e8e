package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The budget of answers in flight (Config.MaxInflightBytes): every answer
// to GET /v1/ids reserves the bytes of the buffers it holds (its IDs and,
// for JSON and text, their encoding; a binary answer one chunk, sized to
// its count) before it makes them, and gives them back when its handler
// returns, which is when the client has taken the last byte or gone. The
// server then holds at most MaxInflightBytes in answers, whatever its
// clients do: a client that holds streams open with a zero window, or
// reads slowly, holds its reservations and nothing more.
//
// A request that does not fit waits up to inflightWait for bytes to be
// given back, then is answered 503, kind busy, with Retry-After: 1.
//
// Fairness: one client (as the shares of ratelimit.go know clients: a
// token's or certificate's name, else the address) holds at most an
// inflightShares-th of the budget, so that one client holding its answers
// open cannot take the whole budget from the others; and at most
// maxClientWaiters of its requests wait at a time (the others are busy at
// once), so that its waiting requests cannot take every waiting place
// (maxInflightWaiters in all) either. An answer larger than a client's
// share, or than the whole budget (a --max-count far above the default),
// is served when its client, or the whole server, holds nothing else: it
// never waits for ever, and the budget is exceeded by at most that one
// answer.

// DefaultMaxInflightBytes is the default of Config.MaxInflightBytes:
// 32 MiB, 64 binary answers of a full chunk at once, which a link of
// 1 GB/s drains in 32 ms, so honest clients are not held back by it,
// while the server's memory for answers stays near 64 MiB (the budget and
// as much again of garbage-collector headroom) under any client.
const DefaultMaxInflightBytes = 32 << 20

// inflightShares: one client holds at most 1/inflightShares of the budget.
const inflightShares = 8

// inflightWait is how long a request waits for room in the budget.
const inflightWait = 250 * time.Millisecond

// maxInflightWaiters bounds the requests waiting for room at a time, and
// maxClientWaiters those of one client.
const (
	maxInflightWaiters = 256
	maxClientWaiters   = maxInflightWaiters / inflightShares
)

// answerOverhead is what an answer holds beyond its own buffers and is
// counted in its reservation: net/http's buffered response writer (4 KiB).
const answerOverhead = 4 << 10

// inflight is the budget.
type inflight struct {
	max, share int64
	wait       time.Duration

	mu      sync.Mutex
	used    int64
	clients map[string]*inflightClient
	waiters int
	freed   chan struct{} // closed when bytes are given back; nil if nobody waits
}

// inflightClient is what one client holds and how many of its requests
// wait.
type inflightClient struct {
	held    int64
	waiting int
}

func newInflight(limit int64) *inflight {
	return &inflight{max: limit, share: max(1, limit/inflightShares), wait: inflightWait, clients: map[string]*inflightClient{}}
}

// fits reports whether n more bytes for c fit. b.mu is held.
func (b *inflight) fits(c *inflightClient, n int64) bool {
	return (b.used == 0 || b.used+n <= b.max) && (c.held == 0 || c.held+n <= b.share)
}

// client returns key's entry, made if need be. b.mu is held.
func (b *inflight) client(key string) *inflightClient {
	c := b.clients[key]
	if c == nil {
		c = &inflightClient{}
		b.clients[key] = c
	}
	return c
}

// forget drops c's entry if it holds and waits for nothing. b.mu is held.
func (b *inflight) forget(key string, c *inflightClient) {
	if c.held == 0 && c.waiting == 0 {
		delete(b.clients, key)
	}
}

// acquire reserves n bytes for the client key, waiting up to b.wait for
// room (less if ctx ends). It reports whether they were reserved; if so,
// release must give them back.
func (b *inflight) acquire(ctx context.Context, key string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.client(key)
	if b.fits(c, n) {
		b.used += n
		c.held += n
		return true
	}
	if b.waiters >= maxInflightWaiters || c.waiting >= maxClientWaiters {
		b.forget(key, c)
		return false
	}
	b.waiters++
	c.waiting++
	defer func() {
		b.waiters--
		c.waiting--
		b.forget(key, c)
	}()
	t := time.NewTimer(b.wait)
	defer t.Stop()
	for {
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-t.C:
			b.mu.Lock()
			return false
		case <-ctx.Done():
			b.mu.Lock()
			return false
		}
		b.mu.Lock()
		if b.fits(c, n) {
			b.used += n
			c.held += n
			return true
		}
	}
}

// release gives back n bytes that acquire reserved for key.
func (b *inflight) release(key string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if c := b.clients[key]; c != nil {
		c.held -= n
		b.forget(key, c)
	}
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
}

// inUse returns the bytes reserved now.
func (b *inflight) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// maxInflightBytes is the budget's size.
func (s *Server) maxInflightBytes() int64 {
	if s.cfg.MaxInflightBytes == 0 {
		return DefaultMaxInflightBytes
	}
	return s.cfg.MaxInflightBytes
}

// registerInflight registers the budget's metrics.
func (s *Server) registerInflight() error {
	used := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "randflake_inflight_bytes",
		Help: "Bytes held by answers in flight, within randflake_inflight_bytes_limit (--max-inflight-bytes).",
	}, func() float64 { return float64(s.budget.inUse()) })
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "randflake_inflight_bytes_limit",
		Help: "The budget of bytes held by answers in flight (--max-inflight-bytes); requests past it wait briefly, then get 503 busy.",
	})
	limit.Set(float64(s.budget.max))
	s.http2Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "randflake_http2_errors_total",
		Help: "HTTP/2 protocol errors net/http met, by its type (too_many_early_resets: a rapid reset).",
	}, []string{"type"})
	s.connsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "randflake_connections_closed_total",
		Help: "Connections the service closed: no_request (no complete request head within --header-timeout), cancelled (more requests cancelled, reset or refused busy than served, past 100), shutdown (no request reached the handler when the shutdown began).",
	}, []string{"reason"})
	for _, r := range []string{closedNoRequest, closedCancelled, closedShutdown} {
		s.connsClosed.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{used, limit, s.http2Errors, s.connsClosed} {
		if err := s.cfg.Registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// reserve reserves n bytes of the budget for the answer to c's request r.
// If there is no room, it answers 503 busy and returns false; otherwise
// the caller must call the function returned when its buffers are no
// longer held.
func (s *Server) reserve(w *recorder, r *http.Request, c caller, n int64) (func(), bool) {
	key := shareKey(r, c)
	n += answerOverhead
	if !s.budget.acquire(r.Context(), key, n) {
		if cnt, ok := s.limited.allow(KindBusy, time.Now()); ok {
			attrs := []any{"client", c.stats.label, "bytes", n, "remote", r.RemoteAddr}
			if cnt > 0 {
				attrs = append(attrs, "left_out", cnt)
			}
			s.log.Warn("request refused: answers in flight hold the budget (--max-inflight-bytes)", attrs...)
		}
		w.Header().Set("Retry-After", "1")
		s.fail(w, http.StatusServiceUnavailable, KindBusy, "busy: answers in flight hold this server's memory budget; retry in a second")
		return nil, false
	}
	return func() { s.budget.release(key, n) }, true
}

// shareKey is the key of c, the client of r, for its share of IDs and of
// the budget: its name, else its address.
func shareKey(r *http.Request, c caller) string {
	if c.name != "" {
		return "name:" + c.name
	}
	return "addr:" + addressKey(r.RemoteAddr)
}
