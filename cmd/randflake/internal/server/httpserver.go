package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// MaxHeaderBytes is the limit on request heads that Configure gives
// net/http (http.Server.MaxHeaderBytes): 16 KiB. net/http enforces it, and
// answers a head over it with its own 431 (Request Header Fields Too
// Large), which never reaches the handler:
//
//   - HTTP/1.1: a head is refused once net/http has read MaxHeaderBytes
//     plus its 4 KiB read buffer (20 KiB in all) without reaching the end
//     of the head. The answer is plain text and the connection is closed.
//     A head of up to 16 KiB always passes.
//   - HTTP/2: a header list is refused once it passes MaxHeaderBytes plus
//     320 bytes, counted as HPACK counts it (name, value and 32 bytes per
//     field); the answer is a short HTML page. A single field longer than
//     that, or a header block far beyond the limit (more than twice what
//     is left of it in one frame, or a CONTINUATION frame after the limit
//     was reached), ends the connection with an error (GOAWAY) instead.
const MaxHeaderBytes = 16 << 10

// MaxConcurrentStreams is the number of HTTP/2 streams a connection may
// have open at once (SETTINGS_MAX_CONCURRENT_STREAMS), which Configure
// gives net/http: 100, the least RFC 9113 advises and what net/http
// guarantees at least, rather than its default of 250. net/http refuses
// the streams above it, queues at most four times as many whose handlers
// have not started, and ends with GOAWAY ENHANCE_YOUR_CALM a connection
// that resets more streams than that before their handlers start.
const MaxConcurrentStreams = 100

// WriteByteTimeout is how long an HTTP/2 connection may take no bytes at
// all while the server has some to write before it is closed
// (http.HTTP2Config.WriteByteTimeout): a peer that stopped reading its
// socket. A stream held with a zero flow-control window is cut by the
// server's WriteTimeout instead.
const WriteByteTimeout = 10 * time.Second

// Configure makes hs serve s: it sets hs.Handler, hs.MaxHeaderBytes and
// the HTTP/2 limits (hs.HTTP2: MaxConcurrentStreams, WriteByteTimeout,
// the CountError metric), and watches each connection (hs.ConnContext,
// hs.ConnState, keeping functions already set):
//
//   - a connection that has not sent a complete request head within
//     hs.ReadHeaderTimeout of being accepted (TLS handshake included) is
//     closed, over HTTP/2 as over HTTP/1.1: net/http itself gives HTTP/2
//     a fixed 10 s for its preface, then its idle timeout, and never
//     applies ReadHeaderTimeout to it. Later on, hs.IdleTimeout closes an
//     HTTP/2 connection without open streams, as it does an idle
//     HTTP/1.1 one;
//   - a connection whose client cancels (HTTP/2: resets) requests before
//     their answers are complete, or goes on asking while it is refused
//     503 busy, more than maxCancelled times and more often than it is
//     answered with success, is closed: a rapid reset costs the attacker
//     its connection (and a new TLS handshake), not the honest clients
//     their CPU;
//   - once hs.Shutdown is called, a connection none of whose requests has
//     reached the handler yet is closed at once: it has no request in
//     flight, while net/http would wait up to 5 s for a new connection's
//     first request, and a shutdown grace shorter than that would end
//     with an error. A client that had just connected sees its
//     connection closed, as it sees the listener gone.
//
// Serve hs with hs.Serve, or with hs.ServeTLS for HTTPS and HTTP/2.
func (s *Server) Configure(hs *http.Server) {
	hs.Handler = s
	hs.MaxHeaderBytes = MaxHeaderBytes
	if hs.HTTP2 == nil {
		hs.HTTP2 = &http.HTTP2Config{}
	}
	hs.HTTP2.MaxConcurrentStreams = MaxConcurrentStreams
	hs.HTTP2.WriteByteTimeout = WriteByteTimeout
	hs.HTTP2.CountError = func(errType string) { s.http2Errors.WithLabelValues(errType).Inc() }
	s.watchConns(hs)
}

// maxCancelled is the number of cancelled requests a connection is
// allowed before its cancellations may close it (see Configure).
const maxCancelled = 100

// connWatch is what is known of one connection.
type connWatch struct {
	conn      net.Conn
	timer     *time.Timer // closes conn without a first request; nil without a header timeout
	started   atomic.Bool // a first request reached the handler
	closing   atomic.Bool // closed by the watch
	cancelled atomic.Int64
	completed atomic.Int64
}

// connKey is the context key of a request's *connWatch.
type connKey struct{}

// watchConns sets the connection hooks of hs (see Configure).
func (s *Server) watchConns(hs *http.Server) {
	var conns sync.Map // net.Conn → *connWatch
	var shutdown atomic.Bool
	timeout := hs.ReadHeaderTimeout
	if timeout <= 0 {
		timeout = hs.ReadTimeout
	}
	prevContext, prevState := hs.ConnContext, hs.ConnState
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevContext != nil {
			ctx = prevContext(ctx, c)
		}
		cw := &connWatch{conn: c}
		if timeout > 0 {
			cw.timer = time.AfterFunc(timeout, func() {
				if !cw.started.Load() {
					s.closeConn(cw, closedNoRequest)
				}
			})
		}
		conns.Store(c, cw)
		if shutdown.Load() { // accepted as the shutdown began
			s.closeConn(cw, closedShutdown)
		}
		return context.WithValue(ctx, connKey{}, cw)
	}
	// Stored before the flag is read above, and the flag set before the
	// map is read here: every connection is seen by one or the other.
	hs.RegisterOnShutdown(func() {
		shutdown.Store(true)
		conns.Range(func(_, v any) bool {
			if cw := v.(*connWatch); !cw.started.Load() {
				s.closeConn(cw, closedShutdown)
			}
			return true
		})
	})
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			if v, ok := conns.LoadAndDelete(c); ok {
				if t := v.(*connWatch).timer; t != nil {
					t.Stop()
				}
			}
		}
		if prevState != nil {
			prevState(c, st)
		}
	}
}

// Reasons for closing a connection, the "reason" label of
// randflake_connections_closed_total.
const (
	closedNoRequest = "no_request" // no complete request head within the header timeout
	closedCancelled = "cancelled"  // too many requests cancelled (HTTP/2 resets) or refused busy
	closedShutdown  = "shutdown"   // no request reached the handler when the shutdown began
)

// closeConn closes cw's connection once, and counts and logs why.
func (s *Server) closeConn(cw *connWatch, reason string) {
	if !cw.closing.CompareAndSwap(false, true) {
		return
	}
	s.connsClosed.WithLabelValues(reason).Inc() // counted before the client can see it
	cw.conn.Close()
	if reason == closedShutdown {
		return // expected: not worth a warning
	}
	if n, ok := s.limited.allow("close: "+reason, time.Now()); ok {
		attrs := []any{"reason", reason, "remote", cw.conn.RemoteAddr().String()}
		if reason == closedCancelled {
			attrs = append(attrs, "cancelled", cw.cancelled.Load(), "completed", cw.completed.Load())
		}
		if n > 0 {
			attrs = append(attrs, "left_out", n)
		}
		s.log.Warn("connection closed", attrs...)
	}
}

// requestStarted notes that a request of cw's connection reached the
// handler: the connection is no longer at risk of its first-request
// timer.
func (cw *connWatch) requestStarted() {
	if cw.started.CompareAndSwap(false, true) && cw.timer != nil {
		cw.timer.Stop()
	}
}

// requestEnded notes how a request of cw's connection ended, and closes
// a connection with too many requests unserved: cancelled (the context
// ended before the handler returned: a reset stream, a client gone, a
// stream timed out) or refused busy count against it, answers with a
// status below 400 for it, others (client errors) neither.
func (s *Server) requestEnded(cw *connWatch, cancelled bool, rec *recorder) {
	switch {
	case cancelled || rec.kind == KindBusy:
		if n := cw.cancelled.Add(1); n > maxCancelled && n > cw.completed.Load() {
			s.closeConn(cw, closedCancelled)
		}
	case rec.status < 400:
		cw.completed.Add(1)
	}
}

// Serve serves s on ln with hs (see Configure), in plain text. It returns
// what hs.Serve returns.
func (s *Server) Serve(hs *http.Server, ln net.Listener) error {
	s.Configure(hs)
	return hs.Serve(ln)
}

// OpsHandler returns the handler of a separate operations listener
// (randflake serve --ops-listen): GET and HEAD /healthz, /readyz and
// /metrics, as the main handler answers them, and 404 for every other
// path. It issues no IDs and needs no credentials. With Config.SeparateOps
// the main handler no longer serves /metrics.
func (s *Server) OpsHandler() http.Handler {
	return opsHandler{s}
}

// opsHandler is the handler OpsHandler returns.
type opsHandler struct{ s *Server }

// ServeHTTP routes the operations paths only.
func (h opsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.s.serve(w, r, h.s.routeOps)
}

// ConfigureOps makes hs serve the operations listener: the handler of
// OpsHandler, with the head limit of Configure.
func (s *Server) ConfigureOps(hs *http.Server) {
	hs.Handler = s.OpsHandler()
	hs.MaxHeaderBytes = MaxHeaderBytes
}
