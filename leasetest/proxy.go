package leasetest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/testserver"
)

// Proxy forwards TCP connections from a loopback address of its own to a
// target, and plays network faults between a client and its server: Cut
// (every connection dropped, new ones refused), Blackhole (nothing gets
// through, nothing is refused) and Heal. Its address stays the same
// throughout, so clients reconnect to it after a fault as to the server.
//
// A Proxy is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	mode   proxyMode
	conns  map[*proxyConn]bool
	closed bool
}

type proxyMode int

const (
	forwarding proxyMode = iota
	cut
	blackholed
)

// proxyConn is a client connection and, if it is forwarded, the
// connection to the target.
type proxyConn struct {
	client, server net.Conn // server is nil for a connection accepted while blackholed
	discard        atomic.Bool
}

func (c *proxyConn) close() {
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// NewProxy starts a proxy to target (host:port) on a loopback port the
// kernel chooses; it is closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatalf("leasetest: proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartProxy starts a proxy to target (host:port) on a loopback port the
// kernel chooses. Close stops it.
func StartProxy(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]bool{}}
	testserver.ServeConns(ln, &p.wg, p.serve)
	return p, nil
}

// Addr returns the proxy's address (host:port), to give clients in place
// of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut drops every connection and refuses new ones (each is closed as soon
// as it is accepted), as a partition that resets connections would, until
// Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = cut
	for c := range p.conns {
		c.close()
	}
	clear(p.conns)
}

// Blackhole lets nothing through in either direction, on the connections
// open and on new ones, without closing or refusing any, as a partition
// that drops packets would: clients wait for their own timeouts. Heal
// closes the connections that lived through it (their streams lost data).
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = blackholed
	for c := range p.conns {
		c.discard.Store(true)
	}
}

// Heal ends a Cut or a Blackhole: new connections are forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = forwarding
	for c := range p.conns {
		if c.discard.Load() {
			c.close()
			delete(p.conns, c)
		}
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	first := !p.closed
	if first {
		p.closed = true
		p.ln.Close()
		for c := range p.conns {
			c.close()
		}
		clear(p.conns)
	}
	p.mu.Unlock()
	if first {
		p.wg.Wait()
	}
}

// serve forwards one client connection until either side closes it or a
// fault drops it.
func (p *Proxy) serve(client net.Conn) {
	p.mu.Lock()
	mode, closed := p.mode, p.closed
	p.mu.Unlock()
	c := &proxyConn{client: client}
	switch {
	case closed || mode == cut:
		client.Close()
		return
	case mode == forwarding:
		server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			client.Close()
			return
		}
		c.server = server
	}
	// Register the connection, unless a fault or Close came meanwhile.
	p.mu.Lock()
	switch {
	case p.closed || p.mode == cut:
		p.mu.Unlock()
		c.close()
		return
	case p.mode == blackholed:
		c.discard.Store(true)
	}
	p.conns[c] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	if c.server == nil {
		pump(c, client, nil) // blackholed from the start: read and drop
		return
	}
	done := make(chan struct{})
	go func() {
		pump(c, c.server, client)
		c.close()
		close(done)
	}()
	pump(c, client, c.server)
	c.close()
	<-done
}

// pump copies src to dst until either fails, dropping what it reads while
// the connection is blackholed (dst nil: always).
func pump(c *proxyConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !c.discard.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
