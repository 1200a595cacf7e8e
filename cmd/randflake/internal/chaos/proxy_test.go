//go:build chaos

package chaos

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// proxy forwards TCP connections from its loopback address to target. cut
// drops every connection and refuses new ones (a network partition);
// restore heals it on the same address.
type proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	closed bool
}

func newProxy(target string) (*proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &proxy{target: target, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), conns: map[net.Conn]bool{}}
	if err := p.restore(); err != nil {
		return nil, err
	}
	return p, nil
}

// restore listens again (a no-op while listening).
func (p *proxy) restore() error {
	p.mu.Lock()
	if p.ln != nil || p.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	var ln net.Listener
	var err error
	for try := 0; try < 50; try++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		ln.Close()
		return nil
	}
	p.ln = ln
	go p.accept(ln)
	return nil
}

func (p *proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.forward(ln, c)
	}
}

func (p *proxy) forward(ln net.Listener, c net.Conn) {
	d, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln != ln {
		p.mu.Unlock()
		c.Close()
		d.Close()
		return
	}
	p.conns[c], p.conns[d] = true, true
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	go pipe(d, c)
	pipe(c, d)
}

// cut closes the listener and every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// close cuts for good.
func (p *proxy) close() {
	p.cut()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}
