package randflake_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/leasetest"
)

// The lease engine on the in-memory reference store, through the
// conformance suite, and the rules the suite cannot reach.

// suiteLayout is 8 blocks of 16 node IDs.
var suiteLayout = randflake.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16}

// The suite on claims that lapse 2 s after their last renewal, like etcd
// leases or PostgreSQL rows with an expiry; a store that goes back moves
// its position back, which only a running holder sees. Handles opened
// through an address reach the store through the network (see gate), so
// that the suite can cut one off with its proxy.
func TestLeaseSuiteMemStore(t *testing.T) {
	t.Parallel()
	echo := echoServer(t)
	leasetest.Run(t, leasetest.Harness{Layout: suiteLayout, Parallel: true, New: func(t *testing.T) *leasetest.Store {
		b, err := leasetest.NewMemBackend(suiteLayout)
		if err != nil {
			t.Fatal(err)
		}
		o := leasetest.MemOptions{TTL: 2 * time.Second}
		s := b.Hooks(o)
		s.Addr = echo
		s.Open = func(t *testing.T, p leasetest.Process) (randflake.BlockStore, error) {
			o := o
			o.Layout = p.Layout
			h, err := b.Open(o)
			if err != nil || p.Addr == "" {
				return h, err
			}
			g := &gate{MemStore: h, addr: p.Addr}
			t.Cleanup(g.close)
			return g, nil
		}
		return s
	}})
}

// The suite on claims that never lapse while their process lives, like
// file locks; a store that goes back changes its identity (a failover).
func TestLeaseSuiteMemStoreLocks(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, leasetest.Harness{Layout: suiteLayout, Blocks: 2, Parallel: true, New: func(t *testing.T) *leasetest.Store {
		b, err := leasetest.NewMemBackend(suiteLayout)
		if err != nil {
			t.Fatal(err)
		}
		s := b.Hooks(leasetest.MemOptions{Promise: 2 * time.Second})
		s.Rollback = func(*testing.T) func(*testing.T) {
			sn := b.Save()
			return func(*testing.T) {
				b.Restore(sn)
				b.Failover()
			}
		}
		return s
	}})
}

// gate is a handle that reaches its store through the network: before
// each call it sends a byte to an echo server and reads it back; when that
// fails (the suite cut the proxy in between), the call fails as a store
// out of reach does, with a transient error.
type gate struct {
	*leasetest.MemStore
	addr string
	mu   sync.Mutex
	conn net.Conn
}

func (g *gate) reach() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	for try := 0; try < 2; try++ {
		if g.conn == nil {
			if g.conn, err = net.DialTimeout("tcp", g.addr, 500*time.Millisecond); err != nil {
				g.conn = nil
				break
			}
		}
		g.conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
		var b [1]byte
		if _, err = g.conn.Write([]byte{1}); err == nil {
			if _, err = io.ReadFull(g.conn, b[:]); err == nil {
				return nil
			}
		}
		g.conn.Close()
		g.conn = nil
	}
	return fmt.Errorf("%w: %v", leasetest.ErrUnreachable, err)
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		g.conn.Close()
	}
}

func (g *gate) Update(ctx context.Context, held randflake.StoreClaim, all bool, fn func(*randflake.StoreView) (*randflake.StoreChanges, error)) (randflake.StoreClaim, error) {
	if err := g.reach(); err != nil {
		return nil, err
	}
	return g.MemStore.Update(ctx, held, all, fn)
}

func (g *gate) Renew(ctx context.Context, held randflake.StoreClaim) (randflake.StoreIdentity, error) {
	if err := g.reach(); err != nil {
		return randflake.StoreIdentity{}, err
	}
	return g.MemStore.Renew(ctx, held)
}

// echoServer answers every byte with itself, on a loopback port, until
// the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
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
	return ln.Addr().String()
}
