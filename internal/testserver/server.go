package testserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ServersRequired reports whether tests needing a server program (etcd,
// PostgreSQL) must fail rather than be skipped when it is not installed:
// whether the CI environment variable is set to anything but "", "false"
// or "0".
func ServersRequired() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// ServerFor starts a server for t alone with start, and closes it when t
// and its subtests end. An error wrapping missing (the server's programs
// are not installed) skips t, or fails it when ServersRequired; any other
// error fails t, after what ("etcdtest: starting etcd"). Under -short
// (testing.Short) it skips t without starting anything: a test that needs
// a server program is not in the quick loop.
func ServerFor[S interface{ Close() }](t testing.TB, what string, start func() (S, error), missing error) S {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: needs a server program: not in -short", what)
	}
	s, err := start()
	if errors.Is(err, missing) && !ServersRequired() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(s.Close)
	return s
}

// ServerProcess is a server program a test runs for a store (etcd,
// postgres), started by StartServer and stopped by its process ID, never
// by name. Its methods may be called from any goroutine.
type ServerProcess struct {
	name    string // in errors
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been reaped
	log     string        // the log file
	logFrom int64         // where this start's output begins in it
}

// StartServer starts cmd, with its standard output and error appended to
// the file logFile (made if need be, readable by the test's user only),
// and follows it until it exits. Name names the server in errors and in
// the line written to the log before it starts ("etcdtest: etcd"). A
// server that
// must not outlive the test binary asks for a parent-death signal in
// cmd.SysProcAttr (Pdeathsig, on Linux): the kernel sends it when the
// thread that forked the child ends, not the process, and the Go runtime
// may end threads, so StartServer forks every server from one goroutine
// locked to its OS thread for the life of the test binary. The signal
// then comes only when the test binary dies without stopping the server.
func StartServer(name string, cmd *exec.Cmd, logFile string) (*ServerProcess, error) {
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer lf.Close() // the server has its own copy
	fmt.Fprintf(lf, "--- %s: starting at %s\n", name, time.Now().UTC().Format(time.RFC3339Nano))
	from, err := lf.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", name, cmd.Path, err)
	}
	p := &ServerProcess{name: name, cmd: cmd, exited: make(chan struct{}), log: logFile, logFrom: from}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// LogTail returns the last 4 KB of the log file that StartServer appends
// a server's output to, for failure messages; "" if there is none.
func LogTail(logFile string) string {
	b, _ := os.ReadFile(logFile)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// Output returns what the server has written to its log since this start
// (the last 64 KB of it).
func (p *ServerProcess) Output() string {
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	from := p.logFrom
	if fi, err := f.Stat(); err == nil && fi.Size()-from > 64<<10 {
		from = fi.Size() - 64<<10
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, from, 64<<10))
	return string(b)
}

// PortTaken returns an error wrapping ErrPortTaken if the server's output
// since this start says that an address it was to listen on is in use
// ("address already in use", as Go programs and PostgreSQL put it), else
// nil. A harness calls it once the server has exited, to start it again on
// new ports (see StartOnFreePorts).
func (p *ServerProcess) PortTaken() error {
	for _, line := range strings.Split(p.Output(), "\n") {
		if strings.Contains(strings.ToLower(line), "address already in use") {
			return fmt.Errorf("%s (pid %d): %w: %s", p.name, p.PID(), ErrPortTaken, strings.TrimSpace(line))
		}
	}
	return nil
}

// spawns carries start requests to the one goroutine that forks servers.
var (
	spawns     = make(chan spawnRequest)
	spawnsOnce sync.Once
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnsOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawns {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawns <- r
	return <-r.done
}

// PID returns the server's process ID; 0 for a nil *ServerProcess (a
// server stopped by its owner, who keeps the field nil meanwhile).
func (p *ServerProcess) PID() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed once the server has exited and been reaped.
func (p *ServerProcess) Exited() <-chan struct{} { return p.exited }

// State returns how the server exited, nil while it runs: for failure
// messages.
func (p *ServerProcess) State() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Stop sends sig to the server by its process ID, waits up to grace for
// it to exit, and kills it (SIGKILL) if it has not; it returns once the
// server has exited. The error says that sending sig failed, or that the
// server had to be killed. Stopping a server that has exited, or a nil
// ServerProcess (a server never started), does nothing.
func (p *ServerProcess) Stop(sig os.Signal, grace time.Duration) error {
	if p == nil {
		return nil
	}
	var err error
	if e := p.cmd.Process.Signal(sig); e != nil && !errors.Is(e, os.ErrProcessDone) {
		err = fmt.Errorf("%s (pid %d): sending %v: %w", p.name, p.PID(), sig, e)
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.exited
		err = fmt.Errorf("%s (pid %d) did not exit within %v of %v and was killed", p.name, p.PID(), grace, sig)
	}
	return err
}
