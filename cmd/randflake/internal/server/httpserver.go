package server

import (
	"net"
	"net/http"
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

// Configure makes hs serve s: it sets hs.Handler and hs.MaxHeaderBytes.
// Serve hs with hs.Serve, or with hs.ServeTLS for HTTPS and HTTP/2.
func (s *Server) Configure(hs *http.Server) {
	hs.Handler = s
	hs.MaxHeaderBytes = MaxHeaderBytes
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
