//go:build chaos

package chaos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/randflake/randflake/leasetest"
)

// proc is one OS process started by a test (an etcd member, a serve
// process), its output in a log file. leasetest.StartServer starts it and
// follows it; it is signalled by its process ID.
type proc struct {
	name    string
	sp      *leasetest.ServerProcess
	logPath string
	started time.Time
	done    <-chan struct{} // closed when the process has been reaped
}

// startProc starts bin with args and env, appending its output to logPath.
func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	sp, err := leasetest.StartServer(name, cmd, logPath)
	if err != nil {
		return nil, err
	}
	return &proc{name: name, sp: sp, logPath: logPath, started: time.Now(), done: sp.Exited()}, nil
}

func (p *proc) pid() int { return p.sp.PID() }

// exited reports whether the process has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has been reaped.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	return syscall.Kill(p.pid(), sig)
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill() {
	p.sp.Stop(syscall.SIGKILL, time.Minute)
}

// term sends SIGCONT and SIGTERM, waits up to timeout for the process to
// exit, then kills it. It reports whether the process exited by itself.
func (p *proc) term(timeout time.Duration) bool {
	p.signal(syscall.SIGCONT)
	if p.exited() {
		return true
	}
	return p.sp.Stop(syscall.SIGTERM, timeout) == nil
}

// exit describes how the process ended: "exit 0", "exit 1", "SIGKILL".
func (p *proc) exit() string {
	st := p.sp.State()
	if st == nil {
		return "running"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch ws.Signal() {
		case syscall.SIGKILL:
			return "SIGKILL"
		case syscall.SIGTERM:
			return "SIGTERM"
		}
		return "signal " + ws.Signal().String()
	}
	return "exit " + strconv.Itoa(st.ExitCode())
}

// logText returns the process's log.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// lastLine returns the last non-empty line of the process's log.
func (p *proc) lastLine() string {
	b := bytes.TrimSpace([]byte(p.logText()))
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a loopback port nobody listens on, never the same twice.
// It picks ports below the kernel's ephemeral range, so that no outgoing
// connection can take a port the test means to listen on again later (an
// etcd member restarted on its ports, a proxy restored).
func freePort() (int, error) {
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
	return 0, fmt.Errorf("no free loopback port")
}
