package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	bin "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// The service's memory and connections under clients that attack them,
// against the real binary over TLS on loopback: HTTP/2 streams held with
// a zero flow-control window, slow readers, connections idle after the
// HTTP/2 preface, rapid resets. The HTTP/2 frames are written by hand
// (h2Conn), as an attacker would, not by a well-behaved client library.

const (
	attackerToken = "attacker-token-0123456789abcdef"
	honestToken   = "honest-token-0123456789abcdef"
)

// memoryServe starts serve over TLS with an attacker and an honest
// client's tokens, and args. It returns the process, the operations URL
// and the TLS setup.
func memoryServe(t *testing.T, args ...string) (*serveProcess, string, *tlsSetup) {
	t.Helper()
	return memoryServeIn(t, t.TempDir(), args...)
}

// memoryServeIn is memoryServe with the tokens file in dir, as dir/tokens.
func memoryServeIn(t *testing.T, dir string, args ...string) (*serveProcess, string, *tlsSetup) {
	t.Helper()
	s := newTLSSetup(t)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("attacker "+attackerToken+"\nhonest "+honestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, ops := startServeTLS(t, nil, append([]string{"--nodes", "0-1023", "--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile,
		"--issue-tokens-file", tokens}, args...)...)
	return p, ops, s
}

// rss returns the resident set of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// metric returns the value of the series of the operations listener's
// /metrics whose line starts with series ("name" or `name{labels}`), 0 if
// absent.
func metric(t *testing.T, ops, series string) float64 {
	t.Helper()
	resp, err := http.Get(ops + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", ops, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// honestLoad is an honest client's requests (JSON, count=10, over HTTP/2
// with its own token) one after the other until stop is closed; it
// returns each request's duration and the failures. Its transport is
// net/http's alone (the contract's checks would time themselves).
func honestLoad(t *testing.T, s *tlsSetup, url string, stop <-chan struct{}) (durations []time.Duration, failures []string) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool()}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for {
		select {
		case <-stop:
			return durations, failures
		default:
		}
		req, _ := http.NewRequest("GET", url+"/v1/ids?count=10", nil)
		req.Header.Set("Authorization", "Bearer "+honestToken)
		start := time.Now()
		resp, err := hc.Do(req)
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d: %.200s", resp.StatusCode, bytes.TrimSpace(body))
			}
		}
		durations = append(durations, time.Since(start))
		if err != nil {
			failures = append(failures, err.Error())
		}
	}
}

// p99 returns the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// h2Conn is a hand-driven HTTP/2 client connection: it writes the frames
// it is told to, answers SETTINGS and PING as a client must, and counts
// what the server sends.
type h2Conn struct {
	conn    *tls.Conn
	wmu     sync.Mutex
	w       *bufio.Writer
	next    uint32        // the next stream ID
	done    chan struct{} // closed when the server closed the connection
	settled chan struct{} // closed once the server's SETTINGS are acknowledged
	goaway  atomic.Bool
	headers atomic.Int64 // HEADERS frames received: answers begun
	resets  atomic.Int64 // RST_STREAM frames received
}

// HTTP/2 frame types and flags (RFC 9113).
const (
	frameHeaders  = 0x1
	frameRST      = 0x3
	frameSettings = 0x4
	framePing     = 0x6
	frameGoAway   = 0x7
	flagAck       = 0x1
	flagEndStream = 0x1
	flagEndHeads  = 0x4
)

// dialH2 opens an HTTP/2 connection to addr trusting s's CA and sends the
// preface and its SETTINGS: pushes off and, with zeroWindow, an initial
// stream window of 0, so that no answer's body can be sent.
func dialH2(t *testing.T, s *tlsSetup, addr string, zeroWindow bool) (*h2Conn, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: s.ca.Pool(), NextProtos: []string{"h2"}, ServerName: "localhost"})
	if err != nil {
		return nil, err
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		conn.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	c := &h2Conn{conn: conn, w: bufio.NewWriter(conn), next: 1, done: make(chan struct{}), settled: make(chan struct{})}
	settings := []byte{0, 2, 0, 0, 0, 0} // ENABLE_PUSH 0
	if zeroWindow {
		settings = append(settings, 0, 4, 0, 0, 0, 0) // INITIAL_WINDOW_SIZE 0
	}
	c.wmu.Lock()
	c.w.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	c.frame(frameSettings, 0, 0, settings)
	err = c.w.Flush()
	c.wmu.Unlock()
	if err != nil {
		conn.Close()
		return nil, err
	}
	go c.read()
	t.Cleanup(func() { conn.Close() })
	return c, nil
}

// frame writes one frame to c.w; c.wmu is held.
func (c *h2Conn) frame(typ, flags byte, stream uint32, payload []byte) {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	bin.BigEndian.PutUint32(h[5:], stream)
	c.w.Write(h[:])
	c.w.Write(payload)
}

// read reads the server's frames until the connection ends.
func (c *h2Conn) read() {
	defer close(c.done)
	r := bufio.NewReader(c.conn)
	var h [9]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		switch h[3] {
		case frameSettings:
			if h[4]&flagAck == 0 {
				c.send(frameSettings, flagAck, 0, nil)
				select {
				case <-c.settled:
				default:
					close(c.settled)
				}
			}
		case framePing:
			if h[4]&flagAck == 0 {
				c.send(framePing, flagAck, 0, payload)
			}
		case frameGoAway:
			c.goaway.Store(true)
		case frameHeaders:
			c.headers.Add(1)
		case frameRST:
			c.resets.Add(1)
		}
	}
}

// send writes one frame and flushes it.
func (c *h2Conn) send(typ, flags byte, stream uint32, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.frame(typ, flags, stream, payload)
	return c.w.Flush()
}

// hpackLiteral appends a header field as an HPACK literal without
// indexing and without Huffman coding.
func hpackLiteral(b []byte, name, value string) []byte {
	b = append(b, 0)
	for _, s := range []string{name, value} {
		n := len(s)
		if n < 127 {
			b = append(b, byte(n))
		} else {
			b = append(b, 127)
			for n -= 127; n >= 128; n >>= 7 {
				b = append(b, byte(n%128+128))
			}
			b = append(b, byte(n))
		}
		b = append(b, s...)
	}
	return b
}

// get opens a stream for GET path with the extra header pairs; endHeaders
// false leaves the header block unfinished. It returns the stream's ID.
func (c *h2Conn) get(path string, endHeaders bool, extra ...string) (uint32, error) {
	b := hpackLiteral(nil, ":method", "GET")
	b = hpackLiteral(b, ":scheme", "https")
	b = hpackLiteral(b, ":authority", "randflake-1")
	b = hpackLiteral(b, ":path", path)
	for i := 0; i+1 < len(extra); i += 2 {
		b = hpackLiteral(b, extra[i], extra[i+1])
	}
	flags := byte(flagEndStream)
	if endHeaders {
		flags |= flagEndHeads
	}
	c.wmu.Lock()
	id := c.next
	c.next += 2
	c.wmu.Unlock()
	return id, c.send(frameHeaders, flags, id, b)
}

// reset cancels stream id (RST_STREAM CANCEL).
func (c *h2Conn) reset(id uint32) error {
	return c.send(frameRST, 0, id, []byte{0, 0, 0, 8})
}

// closed reports whether the server closed c.
func (c *h2Conn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// binaryPath is the request of the attacks: the largest chunk of binary
// IDs an answer holds.
const binaryPath = "/v1/ids?count=65536"

var attackHeaders = []string{"accept", "application/octet-stream", "authorization", "Bearer " + attackerToken}

// memoryBound is the resident set the server must stay under during the
// attacks, and returnFactor how far above its idle level it may stay
// after them (the figures).
const (
	memoryBound  = 200 << 20
	returnFactor = 2
)

// watchRSS samples pid's resident set until stop is closed and returns
// the largest sample.
func watchRSS(t *testing.T, pid int, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		for {
			peak = max(peak, rss(t, pid))
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return out
}

// underAttack runs attack (which returns once the attack holds what it
// takes) while an honest client issues, and checks the properties of the
// issue: the server's resident set stays under memoryBound, the honest
// client's p99 under 100 ms (stretched by the measured slowdown) without
// failures, and the resident set returns to within returnFactor of its
// idle level once release has ended the attack.
func underAttack(t *testing.T, p *serveProcess, s *tlsSetup, what string, attack, release func()) {
	pid := p.cmd.Process.Pid
	meter := slowdown.Start()
	warm := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(warm) })
	honestLoad(t, s, p.url, warm)
	idle := rss(t, pid)

	stopRSS := make(chan struct{})
	peakc := watchRSS(t, pid, stopRSS)
	attack()
	stopHonest := make(chan struct{})
	var durations []time.Duration
	var failures []string
	honestDone := make(chan struct{})
	go func() {
		durations, failures = honestLoad(t, s, p.url, stopHonest)
		close(honestDone)
	}()
	time.Sleep(3 * time.Second) // the honest client's requests during the attack
	close(stopHonest)
	<-honestDone
	close(stopRSS)
	peak := <-peakc
	release()

	// Back to idle: the honest client goes on (its garbage lets the
	// collector run) until the resident set is back, for a minute at most
	// stretched by the slowdown.
	var after int64
	deadline := time.Now().Add(meter.Stretch(time.Minute))
	for {
		stop := make(chan struct{})
		time.AfterFunc(500*time.Millisecond, func() { close(stop) })
		honestLoad(t, s, p.url, stop)
		if after = rss(t, pid); after <= returnFactor*idle || time.Now().After(deadline) {
			break
		}
	}
	limit := meter.Stretch(100 * time.Millisecond)
	t.Logf("%s: RSS idle %.1f MB, peak %.1f MB, after %.1f MB; honest client: %d requests, p99 %v (limit %v, %s), %d failures",
		what, mb(idle), mb(peak), mb(after), len(durations), p99(durations), limit, meter, len(failures))
	if peak >= memoryBound {
		t.Errorf("%s: the server's RSS reached %.1f MB, want under %.0f MB", what, mb(peak), mb(memoryBound))
	}
	if len(durations) == 0 || len(failures) > 0 {
		t.Errorf("%s: the honest client made %d requests, %d failed (first: %v)", what, len(durations), len(failures), append(failures, "")[0])
	}
	if p := p99(durations); p > limit {
		t.Errorf("%s: the honest client's p99 was %v, want at most %v (100 ms stretched by the measured slowdown, %s)", what, p, limit, meter)
	}
	if after > returnFactor*idle {
		t.Errorf("%s: the server's RSS stayed at %.1f MB after the attack, more than %d× its idle %.1f MB", what, mb(after), returnFactor, mb(idle))
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// 2,000 HTTP/2 streams of binary count=65536 held with a zero window (20
// connections of 100, the most a connection may have): the answers in
// flight stay within the budget (the rest are 503 busy), the server's RSS
// under 200 MB, an honest client's p99 under 100 ms.
func TestServeMemoryHeldHTTP2Streams(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 HTTP/2 streams: not in -short")
	}
	p, ops, s := memoryServe(t)
	addr := strings.TrimPrefix(p.url, "https://")
	var conns []*h2Conn
	const connections, streams = 20, 100
	attack := func() {
		for range connections {
			c, err := dialH2(t, s, addr, true)
			if err != nil {
				t.Fatalf("dialing the attacker's connection: %v", err)
			}
			for range streams {
				if _, err := c.get(binaryPath, true, attackHeaders...); err != nil {
					t.Fatalf("opening a stream: %v", err)
				}
			}
			conns = append(conns, c)
		}
		// Every stream answered: held (200, its body blocked) or busy.
		deadline := time.Now().Add(slowdown.Stretch(30 * time.Second))
		for {
			var n int64
			for _, c := range conns {
				n += c.headers.Load()
			}
			if n == connections*streams {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d streams answered after %v", n, connections*streams, slowdown.Stretch(30*time.Second))
			}
			time.Sleep(20 * time.Millisecond)
		}
		used, limit := metric(t, ops, "randflake_inflight_bytes"), metric(t, ops, "randflake_inflight_bytes_limit")
		busy := metric(t, ops, `randflake_errors_total{kind="busy"}`)
		t.Logf("held: %.0f bytes in flight of %.0f, %.0f answered busy", used, limit, busy)
		if limit == 0 || used > limit {
			t.Errorf("%.0f bytes in flight, over the budget of %.0f", used, limit)
		}
		if busy == 0 {
			t.Errorf("no request answered 503 busy while 2,000 streams held answers")
		}
	}
	release := func() {
		for _, c := range conns {
			c.conn.Close()
		}
	}
	underAttack(t, p, s, "2,000 held HTTP/2 streams", attack, release)
}

// 1,000 slow readers: HTTP/1.1 connections over TLS that ask for binary
// count=65536 and read nothing.
func TestServeMemorySlowReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections: not in -short")
	}
	p, _, s := memoryServe(t)
	addr := strings.TrimPrefix(p.url, "https://")
	var conns []net.Conn
	attack := func() {
		for range 1000 {
			d := net.Dialer{Control: nil}
			raw, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dialing a slow reader: %v", err)
			}
			raw.(*net.TCPConn).SetReadBuffer(4096)
			c := tls.Client(raw, &tls.Config{RootCAs: s.ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: randflake-1\r\nAccept: application/octet-stream\r\nAuthorization: Bearer %s\r\n\r\n", binaryPath, attackerToken); err != nil {
				t.Fatalf("a slow reader's request: %v", err)
			}
			conns = append(conns, c)
		}
	}
	release := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	underAttack(t, p, s, "1,000 slow readers", attack, release)
}

// Connections that never complete a request are closed within
// --header-timeout (+ 2 s, stretched by the measured slowdown): 1,000
// idle after the HTTP/2 preface, and one that sends HEADERS without
// END_HEADERS.
func TestServeHTTP2IdleConnectionsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections: not in -short")
	}
	const headerTimeout = 3 * time.Second
	p, ops, s := memoryServe(t, "--header-timeout", headerTimeout.String())
	addr := strings.TrimPrefix(p.url, "https://")
	meter := slowdown.Start()
	start := time.Now() // before the first dial: each timer starts later
	var conns []*h2Conn
	for range 1000 {
		c, err := dialH2(t, s, addr, false)
		if err != nil {
			t.Fatalf("dialing: %v", err)
		}
		conns = append(conns, c)
	}
	partial, err := dialH2(t, s, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing may come between HEADERS and its CONTINUATION: not even
	// the acknowledgement of the server's SETTINGS.
	select {
	case <-partial.settled:
	case <-partial.done:
		t.Fatal("the server closed a connection before its SETTINGS")
	}
	if _, err := partial.get("/v1/ids", false, "authorization", "Bearer "+honestToken); err != nil {
		t.Fatal(err)
	}
	conns = append(conns, partial)
	dialed := time.Since(start)
	limit := dialed + meter.Stretch(headerTimeout+2*time.Second)
	open := 0
	for _, c := range conns {
		select {
		case <-c.done:
		case <-time.After(time.Until(start.Add(limit))):
			open++
		}
	}
	t.Logf("1,001 connections dialed in %v; the last closed %v after the first dial; %d open at the bound, %v (%s)", dialed, time.Since(start), open, limit, meter)
	if open > 0 {
		t.Errorf("%d of %d connections without a complete request still open %v after the first dial (dialing took %v; --header-timeout %v + 2 s, stretched: %s)",
			open, len(conns), limit, dialed, headerTimeout, meter)
	}
	if n := metric(t, ops, `randflake_connections_closed_total{reason="no_request"}`); n < float64(len(conns)) {
		t.Errorf("randflake_connections_closed_total{reason=\"no_request\"} is %.0f, want %d; logs:\n%s", n, len(conns), p.logs.String())
	}
	// A connection that completes a request is not closed by it.
	c, err := dialH2(t, s, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.get("/v1/ids", true, "authorization", "Bearer "+honestToken); err != nil {
		t.Fatal(err)
	}
	time.Sleep(headerTimeout + time.Second)
	if c.closed() {
		t.Errorf("a connection closed within --header-timeout though it completed a request")
	}
}

// A rapid reset (HEADERS for a binary answer, then RST_STREAM, again and
// again on one connection) ends with the connection closed by the server
// (once it has read at most 20,000 such streams), while an honest client
// is served; the closings are the service's, counted by reason.
func TestServeHTTP2RapidReset(t *testing.T) {
	if testing.Short() {
		t.Skip("an HTTP/2 attack: not in -short")
	}
	// 32 node IDs, 4.2 million IDs a second: IDs made for streams that
	// were reset and never sent would use up the second (the honest
	// client then gets 503 exhausted) were each to cost a whole chunk.
	p, ops, s := memoryServe(t, "--nodes", "0-31")
	addr := strings.TrimPrefix(p.url, "https://")
	const most = 20000
	var sent atomic.Int64
	var closedConns atomic.Int64
	stop := make(chan struct{})
	attacking := make(chan struct{})
	attack := func() {
		go func() {
			defer close(attacking)
			for {
				c, err := dialH2(t, s, addr, false)
				if err != nil {
					return
				}
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id, err := c.get(binaryPath, true, attackHeaders...)
					if err == nil {
						err = c.reset(id)
					}
					if err != nil || c.closed() {
						break
					}
					if sent.Add(1); n+1 < most {
						continue
					}
					// The client may write faster than the server reads:
					// the server must close it once it has read them.
					wait := slowdown.Stretch(30 * time.Second)
					select {
					case <-c.done:
					case <-time.After(wait):
						t.Errorf("a connection that reset %d streams was still open %v later", most, wait)
						return
					}
					break
				}
				closedConns.Add(1)
			}
		}()
		time.Sleep(time.Second)
	}
	release := func() {
		close(stop)
		<-attacking
	}
	underAttack(t, p, s, "rapid reset", attack, release)
	cancelled := metric(t, ops, `randflake_connections_closed_total{reason="cancelled"}`)
	early := metric(t, ops, `randflake_http2_errors_total{type="too_many_early_resets"}`)
	t.Logf("rapid reset: %d streams sent and reset, %d connections closed (%.0f by cancellations, %.0f by net/http's early resets)", sent.Load(), closedConns.Load(), cancelled, early)
	if closedConns.Load() == 0 || cancelled+early == 0 {
		t.Errorf("%d connections closed after %d streams reset, %.0f by the service's count of cancellations, %.0f by net/http's early resets; want at least one",
			closedConns.Load(), sent.Load(), cancelled, early)
	}
}
