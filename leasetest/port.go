package leasetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// FreePort returns a loopback port nobody listens on, for a server a test
// starts (etcd, an API server, a serve process), never the same twice in
// one test binary. It picks ports below the kernel's ephemeral range, so
// that neither an outgoing connection nor another test's port of the
// kernel's choosing can take it between this call and the server's bind,
// or before a server restarted on its ports binds them again.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	lo, hi := max(1024, low-10000), low-1
	for try := 0; hi-lo > 500 && try < 500; try++ {
		p := lo + rand.IntN(hi-lo+1)
		if portsUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		portsUsed[p] = true
		return p, nil
	}
	for try := 0; try < 100; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !portsUsed[p] {
			portsUsed[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("leasetest: no free loopback port")
}
