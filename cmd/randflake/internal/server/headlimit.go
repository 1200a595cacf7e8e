package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MaxHeaderBytes is the largest request head the service accepts: the
// request line and the header fields with their line ends, up to and
// including the empty line that ends them. A larger head is answered with
// 431 and a JSON error of kind headers_too_large, and the connection is
// closed. It holds only for servers set up with Serve or Configure.
const MaxHeaderBytes = 16 << 10

// httpMaxHeaderBytes is the http.Server's own limit. net/http reads up to
// 4 KiB beyond it and then answers in plain text; it is set higher so that
// MaxHeaderBytes always applies first.
const httpMaxHeaderBytes = MaxHeaderBytes + 8<<10

// Serve serves s on ln with hs (see Configure). It returns what hs.Serve
// returns.
func (s *Server) Serve(hs *http.Server, ln net.Listener) error {
	s.Configure(hs)
	return hs.Serve(s.Listener(ln))
}

// Configure makes hs serve s: it sets hs.Handler, raises hs.MaxHeaderBytes
// above MaxHeaderBytes and lets the handler see the connections of
// Listener. Serve hs on a listener from s.Listener.
func (s *Server) Configure(hs *http.Server) {
	hs.Handler = s
	hs.MaxHeaderBytes = httpMaxHeaderBytes
	prev := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, c)
	}
}

// Listener returns ln with MaxHeaderBytes enforced on its connections.
// Each connection follows the HTTP/1.1 framing as net/http reads it: it
// hands request heads on a complete line at a time and counts their bytes,
// skips bodies of known length, and fails the read that would take a head
// past the limit, after which net/http closes the connection without an
// answer of its own; on closing, the connection sends the JSON 431.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &headListener{Listener: ln, s: s}
}

type connKey struct{}

type headListener struct {
	net.Listener
	s *Server
}

// Accept wraps the next connection in a headConn.
func (l *headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c, s: l.s, cl: -1}, nil
}

// Read states of a headConn.
const (
	inHead    = iota // reading a request head
	inBody           // reading a body of known length
	unchecked        // framing unknown (chunked, a bad or folded length): no more heads are checked
)

// headConn follows the HTTP/1.1 framing of a connection. net/http never
// reads a connection from two goroutines at once, so the read state needs
// no lock.
type headConn struct {
	net.Conn
	s *Server

	// buf holds bytes read and not yet handed on: buf[off:ready] may be,
	// buf[ready:] is the start of a head line waiting for its end.
	buf        []byte
	off, ready int

	state   int
	body    int64 // body bytes left in inBody
	headLen int   // bytes of the current head's complete lines
	lines   int   // complete lines of the current head
	cl      int64 // Content-Length of the current head, -1 if none
	badCL   bool  // a Content-Length that is not one plain number
	chunked bool  // a Transfer-Encoding

	tooLarge  atomic.Bool // a head exceeded MaxHeaderBytes
	unsure    atomic.Bool // state is unchecked
	closeOnce sync.Once
}

// errHeadTooLarge fails reads once a head exceeded MaxHeaderBytes. It is a
// timeout so that net/http closes the connection quietly.
type errHeadTooLarge struct{}

// Error describes the limit.
func (errHeadTooLarge) Error() string {
	return "request head larger than " + strconv.Itoa(MaxHeaderBytes) + " bytes"
}

// Timeout reports true: net/http then closes without an answer.
func (errHeadTooLarge) Timeout() bool { return true }

// Temporary reports false.
func (errHeadTooLarge) Temporary() bool { return false }

// Read hands on body bytes and complete head lines, and fails once a head
// would exceed MaxHeaderBytes.
func (c *headConn) Read(p []byte) (int, error) {
	for {
		if c.off < c.ready {
			n := copy(p, c.buf[c.off:c.ready])
			c.off += n
			if c.off == len(c.buf) {
				if cap(c.buf) > 8<<10 {
					c.buf = nil // a large head has gone through: free its room
				}
				c.buf, c.off, c.ready = c.buf[:0], 0, 0
			}
			return n, nil
		}
		if c.tooLarge.Load() {
			return 0, errHeadTooLarge{}
		}
		if len(c.buf) == 0 && c.state != inHead {
			// A body or unchecked bytes, nothing held: read straight
			// into p, a body no further than its end.
			q := p
			if c.state == inBody {
				q = p[:min(int64(len(p)), c.body)]
			}
			n, err := c.Conn.Read(q)
			if c.state == inBody {
				if c.body -= int64(n); c.body == 0 {
					c.state = inHead
				}
			}
			return n, err
		}
		if c.off > 0 {
			k := copy(c.buf, c.buf[c.off:])
			c.buf, c.ready, c.off = c.buf[:k], c.ready-c.off, 0
		}
		if cap(c.buf)-len(c.buf) < 2048 {
			c.buf = append(make([]byte, 0, max(2*cap(c.buf), 4096)), c.buf...)
		}
		n, err := c.Conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		c.advance()
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

// advance moves ready over the bytes that may be handed on: body bytes
// and complete head lines, as long as the head stays within
// MaxHeaderBytes.
func (c *headConn) advance() {
	for c.ready < len(c.buf) {
		rest := c.buf[c.ready:]
		switch c.state {
		case unchecked:
			c.ready = len(c.buf)
		case inBody:
			k := min(int64(len(rest)), c.body)
			c.ready += int(k)
			if c.body -= k; c.body == 0 {
				c.state = inHead
			}
		case inHead:
			nl := bytes.IndexByte(rest, '\n')
			if nl < 0 {
				if c.headLen+len(rest) > MaxHeaderBytes {
					c.refuse()
				}
				return
			}
			if c.headLen+nl+1 > MaxHeaderBytes {
				c.refuse()
				return
			}
			c.headLen += nl + 1
			c.ready += nl + 1
			c.endLine(rest[:nl+1])
		}
	}
}

// refuse drops everything from the head that is too large on.
func (c *headConn) refuse() {
	c.tooLarge.Store(true)
	c.s.errs.WithLabelValues(KindHeadersTooLarge).Inc()
	c.buf = c.buf[:c.ready]
}

// endLine handles a complete line of a head.
func (c *headConn) endLine(line []byte) {
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	c.lines++
	switch {
	case len(line) == 0:
		c.endHead()
	case c.lines == 1:
		// the request line
	case line[0] == ' ' || line[0] == '\t':
		c.badCL = true // a folded line might continue a Content-Length
	default:
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case asciiEqualFold(name, "transfer-encoding"):
			c.chunked = true
		case asciiEqualFold(name, "content-length"):
			n, ok := plainNumber(bytes.Trim(value, " \t"))
			if !ok || (c.cl >= 0 && c.cl != n) {
				c.badCL = true
			}
			c.cl = n
		}
	}
}

// endHead moves on to what follows a complete head.
func (c *headConn) endHead() {
	switch {
	case c.chunked || c.badCL:
		c.state = unchecked
		c.unsure.Store(true)
	case c.cl > 0:
		c.state, c.body = inBody, c.cl
	default:
		c.state = inHead
	}
	c.headLen, c.lines, c.cl, c.badCL, c.chunked = 0, 0, -1, false, false
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// plainNumber parses 1 to 18 decimal digits.
func plainNumber(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// CloseWrite closes the writing side of the connection, if it has one
// (net/http uses it to let the client read a final answer).
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close sends the 431 if a head was too large, then closes.
func (c *headConn) Close() error {
	c.closeOnce.Do(func() {
		if c.tooLarge.Load() {
			c.s.refuseHead(c)
		}
	})
	return c.Conn.Close()
}

// refuseHead answers a connection whose request head was too large, after
// net/http is done with it, and lets the client read the answer: it
// closes the writing side and reads what the client still sends, for a
// short while, so that closing does not reset the connection under the
// answer.
func (s *Server) refuseHead(c *headConn) {
	start := time.Now()
	body, _ := json.Marshal(map[string]string{
		"error": "request head too large: at most " + strconv.Itoa(MaxHeaderBytes) + " bytes",
		"kind":  KindHeadersTooLarge,
	})
	body = append(body, '\n')
	resp := "HTTP/1.1 431 Request Header Fields Too Large\r\n" +
		"Content-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
	c.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err := io.WriteString(c.Conn, resp)
	s.observe("", http.StatusRequestHeaderFieldsTooLarge, time.Since(start)) // route "other": the path was never read
	if s.cfg.AccessLog != nil {
		rec := &recorder{status: http.StatusRequestHeaderFieldsTooLarge, kind: KindHeadersTooLarge}
		if err == nil {
			rec.bytes = int64(len(body))
		}
		s.logAccess(rec, "-", "-", c.RemoteAddr().String(), time.Since(start))
	}
	if err == nil {
		c.CloseWrite()
		c.Conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(c.Conn, 1<<20))
	}
}
