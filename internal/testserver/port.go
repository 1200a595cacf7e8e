package testserver

import (
	"errors"
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
	// reserved holds, for the life of the process, a UDP socket bound to
	// 127.0.0.1 on each port FreePort handed out: see FreePort.
	reserved []net.PacketConn
)

// FreePort returns a loopback port nobody listens on, for a server a test
// starts (etcd, an API server, a serve process), never the same twice on
// the machine while this process lives. It picks ports outside the
// kernel's ephemeral range (portWindow), so that neither an outgoing
// connection nor another test's port of the kernel's choosing can take it
// between this call and the server's bind, or before a server restarted
// on its ports binds them again. Where that range leaves no room (1024 to
// 65535), it takes ports of the kernel's choosing, which an outgoing
// connection can then take.
//
// The port is reserved across processes: FreePort keeps a UDP socket bound
// to 127.0.0.1 on the port number until the process exits (UDP and TCP
// ports are apart, so the server's TCP bind is not hindered), and skips
// any port whose UDP twin is bound already. Test binaries that run side by
// side (go test ./..., several modules at once) thus never hand out the
// same port, and a reservation ends with its process, however it dies.
//
// A program that is not a test of this repository can still take the
// port: start a server with StartOnFreePorts, which tries new ports when
// the server reports its port taken.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	lo, hi := portWindow()
	for try := 0; hi-lo > 500 && try < 500; try++ {
		p := lo + rand.IntN(hi-lo+1)
		if portsUsed[p] {
			continue
		}
		if reserve(p) {
			return p, nil
		}
	}
	for try := 0; try < 100; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testserver: no free loopback port: %w", err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !portsUsed[p] && reserve(p) {
			return p, nil
		}
	}
	return 0, errors.New("testserver: no free loopback port")
}

// portWindow is where FreePort picks ports: the 10,000 below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), or the ports
// above it where that leaves more; lo > hi-500 when neither is worth
// trying (a range from 1024 to 65535).
func portWindow() (lo, hi int) {
	low, high := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				low, high = l, h
			}
		}
	}
	return windowAround(low, high)
}

// windowAround is portWindow for the ephemeral range low-high.
func windowAround(low, high int) (lo, hi int) {
	lo, hi = max(1024, low-10000), low-1
	if above := min(65535, high+10000); above-high > hi-lo {
		lo, hi = high+1, above
	}
	return lo, hi
}

// reserve reserves port p for this process if no other process has (its
// UDP twin is free) and nothing listens on it by TCP; portMu is held.
func reserve(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false // reserved by another process (or a UDP server's)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return false
	}
	ln.Close()
	portsUsed[p] = true
	reserved = append(reserved, pc)
	return true
}

// ErrPortTaken is wrapped by the error of a server that could not bind
// one of its ports ("address already in use"): a program that does not
// reserve its ports as FreePort does took it first. StartOnFreePorts then
// tries new ports.
var ErrPortTaken = errors.New("a port was taken by another program")

// PortAttempts is how many sets of ports StartOnFreePorts tries.
const PortAttempts = 5

// StartOnFreePorts calls start with n ports from FreePort, and again with
// n new ones, up to PortAttempts times in all, while start's error wraps
// ErrPortTaken (the server could not bind one of them; start has cleaned
// up after it). It returns start's first other error, or, once it gives
// up, one that names what and every set of ports tried.
func StartOnFreePorts(what string, n int, start func(ports []int) error) error {
	var tried []string
	var last error
	for range PortAttempts {
		ports := make([]int, n)
		for i := range ports {
			p, err := FreePort()
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			ports[i] = p
		}
		err := start(ports)
		if !errors.Is(err, ErrPortTaken) {
			return err
		}
		last = err
		tried = append(tried, fmt.Sprint(ports))
	}
	return fmt.Errorf("%s: gave up after %d sets of ports (%s), each taken before the server bound it; the last: %w",
		what, PortAttempts, strings.Join(tried, ", "), last)
}
