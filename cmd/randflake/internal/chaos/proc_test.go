//go:build chaos

package chaos

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/randflake/randflake/internal/testserver"
)

// proc is one OS process started by a test (an etcd member, a serve
// process), its output in a log file. testserver.StartServer starts it and
// follows it; it is signalled by its process ID.
type proc struct {
	name    string
	sp      *testserver.ServerProcess
	logPath string
	started time.Time
	done    <-chan struct{} // closed when the process has been reaped
}

// startProc starts bin with args and env, appending its output to logPath.
func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	sp, err := testserver.StartServer(name, cmd, logPath)
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
