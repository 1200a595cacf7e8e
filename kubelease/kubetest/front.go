package kubetest

import (
	"io"
	"net"
	"sync"

	"github.com/randflake/randflake/internal/testserver"
)

// front is the API server's address as the tests see it: a loopback
// listener the test process holds for the cluster's life, which forwards
// each connection to the API server's port of the moment. The address thus
// stays the same across restarts, and nothing can take it meanwhile, while
// the API server itself may start again on a new port when its old one was
// taken. The bytes are passed as they are: TLS is between the client and
// the API server.
type front struct {
	ln net.Listener

	mu     sync.Mutex
	to     string // the API server's address, "" while it is stopped
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func newFront() (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, conns: map[net.Conn]bool{}}
	testserver.ServeConns(ln, &f.wg, f.forward)
	return f, nil
}

func (f *front) addr() string { return f.ln.Addr().String() }

// point forwards new connections to addr ("": none, they are closed at
// once, as a stopped server's would be refused) and closes the
// connections to the previous address.
func (f *front) point(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.to == addr {
		return
	}
	f.to = addr
	for c := range f.conns {
		c.Close()
	}
	clear(f.conns)
}

// forward passes c's bytes to the API server and back until either side
// closes.
func (f *front) forward(c net.Conn) {
	f.mu.Lock()
	to := f.to
	f.mu.Unlock()
	if to == "" {
		c.Close()
		return
	}
	b, err := net.Dial("tcp", to)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	if f.closed || f.to != to {
		f.mu.Unlock()
		c.Close()
		b.Close()
		return
	}
	f.conns[c], f.conns[b] = true, true
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(b, c); done <- struct{}{} }()
	go func() { io.Copy(c, b); done <- struct{}{} }()
	<-done
	c.Close()
	b.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, b)
	f.mu.Unlock()
}

// close closes the address and every connection, and returns once none
// is forwarded.
func (f *front) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.ln.Close()
	f.point("")
	f.wg.Wait()
}
