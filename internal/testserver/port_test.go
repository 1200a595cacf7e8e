package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// portChildEnv carries, to a test binary run again by
// TestFreePortAcrossProcesses, the ports its parent reserved.
const portChildEnv = "RANDFLAKE_LEASETEST_PORTS"

// The ports FreePort hands out are reserved for the process's life across
// processes: another test binary can reserve none of them, while the
// server they are for can bind them.
func TestFreePortAcrossProcesses(t *testing.T) {
	if env, ok := os.LookupEnv(portChildEnv); ok {
		// The child: every port of the parent's is refused here.
		for _, f := range strings.Fields(env) {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			portMu.Lock()
			got := reserve(p)
			portMu.Unlock()
			if got {
				t.Errorf("port %d, reserved by the parent process, reserved again in another", p)
			}
		}
		return
	}
	t.Parallel()
	var ports []string
	seen := map[int]bool{}
	for server := range 20 {
		// The server the port is for binds it by TCP. A program that does
		// not reserve ports can take one between FreePort's check and the
		// bind, which the reservation cannot prevent: the server then
		// tries another, as StartOnFreePorts does, and a reservation that
		// hindered the bind would fail every try.
		for try := 1; ; try++ {
			p, err := FreePort()
			if err != nil {
				t.Fatal(err)
			}
			if seen[p] {
				t.Fatalf("FreePort handed out port %d twice", p)
			}
			seen[p] = true
			ports = append(ports, strconv.Itoa(p))
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err == nil {
				ln.Close()
				break
			}
			held := "no TCP socket /proc/net/tcp lists holds it (one bound, not yet listening or connected)"
			if other := tcpSocketsOn(p); len(other) > 0 {
				held = strings.Join(other, "; ")
			}
			if try == PortAttempts {
				lo, hi := portWindow()
				t.Fatalf("server %d: none of the last %d ports FreePort handed out (window %d-%d) could be bound; the last, %d: %v; %s", server, try, lo, hi, p, err, held)
			}
			t.Logf("server %d: port %d was taken after FreePort checked it (%v): %s; trying another", server, p, err, held)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortAcrossProcesses$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), portChildEnv+"="+strings.Join(ports, " "))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFreePortAcrossProcesses") {
		t.Fatalf("the other process (%v):\n%s", err, out)
	}
}

// FreePort's window lies outside the ephemeral range, on the side with
// more room, and is empty (lo > hi-500) when neither side has any.
func TestPortWindow(t *testing.T) {
	for _, c := range []struct{ low, high, lo, hi int }{
		{32768, 60999, 22768, 32767}, // Linux's default
		{1024, 60999, 61000, 65535},  // nothing below
		{10000, 65535, 1024, 9999},   // nothing above
		{1024, 65535, 65536, 65535},  // no room at all
	} {
		lo, hi := windowAround(c.low, c.high)
		if lo != c.lo || hi != c.hi {
			t.Errorf("ephemeral range %d-%d: window %d-%d, want %d-%d", c.low, c.high, lo, hi, c.lo, c.hi)
		}
	}
}

// tcpSocketsOn describes the TCP sockets on local port p that
// /proc/net/tcp and /proc/net/tcp6 list (any state, any address).
func tcpSocketsOn(p int) []string {
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 8 {
				continue
			}
			_, port, ok := strings.Cut(fs[1], ":")
			if n, err := strconv.ParseUint(port, 16, 16); !ok || err != nil || int(n) != p {
				continue
			}
			out = append(out, fmt.Sprintf("%s local %s remote %s state %s uid %s", filepath.Base(f), fs[1], fs[2], fs[3], fs[7]))
		}
	}
	return out
}

// StartOnFreePorts starts a server again on new ports while it reports a
// port taken, returns any other error at once, and gives up after
// PortAttempts sets, naming them.
func TestStartOnFreePorts(t *testing.T) {
	t.Parallel()
	var sets [][]int
	err := StartOnFreePorts("test server", 2, func(ports []int) error {
		sets = append(sets, ports)
		if len(sets) < 3 {
			return fmt.Errorf("bind: %w", ErrPortTaken)
		}
		return nil
	})
	if err != nil || len(sets) != 3 {
		t.Fatalf("a server that bound at its third set of ports: %v after %d sets", err, len(sets))
	}
	seen := map[int]bool{}
	for _, s := range sets {
		if len(s) != 2 {
			t.Fatalf("sets of ports %v: want 2 ports each", sets)
		}
		for _, p := range s {
			if seen[p] {
				t.Fatalf("sets of ports %v: port %d tried twice", sets, p)
			}
			seen[p] = true
		}
	}

	calls := 0
	err = StartOnFreePorts("test server", 1, func([]int) error { calls++; return fmt.Errorf("bind: %w", ErrPortTaken) })
	if !errors.Is(err, ErrPortTaken) || calls != PortAttempts || !strings.Contains(err.Error(), "test server: gave up after") {
		t.Errorf("a server whose every port was taken: %v after %d tries; want ErrPortTaken, named, after %d", err, calls, PortAttempts)
	}

	other := errors.New("no such program")
	calls = 0
	err = StartOnFreePorts("test server", 1, func([]int) error { calls++; return other })
	if err != other || calls != 1 {
		t.Errorf("a server failing for another reason: %v after %d tries; want its error after one", err, calls)
	}
}

// A server's PortTaken reads only what it wrote since its own start.
func TestServerPortTaken(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	log := filepath.Join(t.TempDir(), "server.log")
	start := func(script string) *ServerProcess {
		t.Helper()
		p, err := StartServer("test server", exec.Command("sh", "-c", script), log)
		if err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
		return p
	}
	taken := start(`echo "listen tcp 127.0.0.1:1234: bind: address already in use" >&2; exit 1`)
	if err := taken.PortTaken(); !errors.Is(err, ErrPortTaken) || !strings.Contains(err.Error(), "127.0.0.1:1234") {
		t.Errorf("a server that could not bind: PortTaken %v; want ErrPortTaken with its line", err)
	}
	ok := start(`echo "serving"; exit 1`)
	if err := ok.PortTaken(); err != nil {
		t.Errorf("a later start that bound: PortTaken %v, from an earlier start's output", err)
	}
	if out := ok.Output(); out != "serving\n" {
		t.Errorf("the later start's output %q, want its own line only", out)
	}
}
