package testserver

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// ServeConns hands every connection to its handler, and its wait group
// is done once the listener is closed and every handler has returned.
func TestServeConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ServeConns(ln, &wg, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	for i := range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte("ping")
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
			t.Errorf("connection %d: read back %q, %v; want \"ping\"", i, got, err)
		}
		c.Close()
	}
	ln.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait group not done 10 s after the listener and every connection closed")
	}
}
