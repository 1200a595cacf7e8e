package leasetest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// A MemBackend has no network of its own. Serve gives it an address, so
// that handles opened with MemOptions.Addr reach it over TCP (a round trip
// before each call, the call itself made in memory) and a Proxy in front
// of it can cut one handle off, as the suite's CutOff subtest does.

// Serve listens on a loopback port the kernel chooses, answering every
// byte with itself, until t ends, and returns the address.
func (b *MemBackend) Serve(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("leasetest: MemBackend.Serve: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	b.mu.Lock()
	b.addr = ln.Addr().String()
	b.mu.Unlock()
	return ln.Addr().String()
}

// memLink is a handle's connection to its backend's address.
type memLink struct {
	mu   sync.Mutex
	conn net.Conn
}

// memRoundTrip bounds a dial or a round trip to the backend, before the
// measured slowdown stretches it. A cut (Proxy.Cut) never answers, so a
// longer bound only delays seeing a cut, which the lease's end bounds
// anyway; a shorter one failed claims through the proxy when other test
// processes loaded the machine (this process's own slowdown stayed low).
const memRoundTrip = 2 * time.Second

// reach makes a round trip to addr (nothing if addr is empty), dialling
// again once if the connection broke.
func (l *memLink) reach(addr string) error {
	if addr == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for try := 0; try < 2; try++ {
		if l.conn == nil {
			if l.conn, err = net.DialTimeout("tcp", addr, sinceStart.Stretch(memRoundTrip)); err != nil {
				l.conn = nil
				break
			}
		}
		l.conn.SetDeadline(time.Now().Add(sinceStart.Stretch(memRoundTrip)))
		var b [1]byte
		if _, err = l.conn.Write([]byte{1}); err == nil {
			if _, err = io.ReadFull(l.conn, b[:]); err == nil {
				return nil
			}
		}
		l.conn.Close()
		l.conn = nil
	}
	return fmt.Errorf("%w: %v", ErrUnreachable, err)
}

// Close closes the handle's connection to the backend's address, if it
// has one (a later call dials again). It releases nothing.
func (s *MemStore) Close() {
	s.link.mu.Lock()
	defer s.link.mu.Unlock()
	if s.link.conn != nil {
		s.link.conn.Close()
		s.link.conn = nil
	}
}
