package leasetest

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every byte with itself, on a loopback port: a
// MemBackend's address.
func echoServer(t *testing.T) string {
	t.Helper()
	b, err := NewMemBackend(processLayout)
	if err != nil {
		t.Fatal(err)
	}
	return b.Serve(t)
}

// roundTrip sends a line on c and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo returned " + line)
	}
	return nil
}

func dialEcho(t *testing.T, addr string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c), nil
}

// echoes dials addr afresh and fails t unless a line goes there and back
// within 2 s; when says when (in failures); it returns the connection.
func echoes(t *testing.T, addr, when string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, r, err := dialEcho(t, addr)
	if err != nil {
		t.Fatalf("dial %s: %v", when, err)
	}
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("a round trip %s: %v", when, err)
	}
	return c, r
}

// The proxy forwards; Cut drops the connection and refuses new ones at
// once; Heal forwards again on the same address; Blackhole lets nothing
// through without closing; Heal after it closes the stalled connection.
func TestProxy(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, r := echoes(t, p.Addr(), "through the healthy proxy")

	p.Cut()
	if err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("a connection survived Cut")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("Cut left the connection hanging instead of dropping it")
	}
	if c2, r2, err := dialEcho(t, p.Addr()); err == nil {
		if err := roundTrip(c2, r2, 2*time.Second); err == nil {
			t.Fatal("a new connection was forwarded while cut")
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("a new connection hung while cut, instead of being refused")
		}
	}

	p.Heal()
	c, r = echoes(t, p.Addr(), "after Heal")

	p.Blackhole()
	if err := roundTrip(c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed connection: %v, want a timeout", err)
	}
	c3, r3, err := dialEcho(t, p.Addr())
	if err != nil {
		t.Fatalf("dial while blackholed: %v, want a connection that hangs", err)
	}
	if err := roundTrip(c3, r3, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection while blackholed: %v, want a timeout", err)
	}

	p.Heal()
	if err := roundTrip(c3, r3, 2*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that lived through the blackhole: %v, want it closed by Heal", err)
	}
	echoes(t, p.Addr(), "after the blackhole healed")

	p.Close()
	if c, _, err := dialEcho(t, p.Addr()); err == nil {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the closed proxy still answers")
		}
	}
}

// StartProxy refuses a target that is not host:port.
func TestProxyBadTarget(t *testing.T) {
	if _, err := StartProxy("no-port"); err == nil {
		t.Fatal("StartProxy accepted a target without a port")
	}
}
