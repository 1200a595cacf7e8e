//go:build chaos

package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process started by a test, its output in a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{} // closed when the process has been reaped
	err     error         // cmd.Wait's result, once done is closed
}

// spawns carries start requests to the one goroutine that starts every
// child. It is locked to its OS thread for the life of the test binary:
// the kernel sends a child its parent-death signal when the thread that
// forked it ends, not the process, and Go may end a thread under a
// goroutine that exits while locked to it.
var spawns = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for r := range spawns {
			r.done <- r.cmd.Start()
		}
	}()
}

// spawn starts cmd from the spawning thread.
func spawn(cmd *exec.Cmd) error {
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawns <- r
	return <-r.done
}

// startProc starts bin with args and env, appending its output to logPath.
// A goroutine reaps it.
func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		lf.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

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
	return p.cmd.Process.Signal(sig)
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGCONT and SIGTERM, waits up to timeout for the process to
// exit, then kills it. It reports whether the process exited by itself.
func (p *proc) term(timeout time.Duration) bool {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		p.kill()
		return false
	}
}

// exit describes how the process ended: "exit 0", "exit 1", "SIGKILL".
func (p *proc) exit() string {
	if !p.exited() {
		return "running"
	}
	if p.err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return p.err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch ws.Signal() {
		case syscall.SIGKILL:
			return "SIGKILL"
		case syscall.SIGTERM:
			return "SIGTERM"
		}
		return "signal " + ws.Signal().String()
	}
	return "exit " + strconv.Itoa(ee.ExitCode())
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
