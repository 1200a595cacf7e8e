// Package etcdtest provides throwaway etcd servers for tests, in the spirit
// of net/http/httptest.
//
// A [Server] is the real etcd program, started by the test binary itself:
// a single-member cluster whose data lives in a new temporary directory
// (in memory, under /dev/shm, where there is one: etcd 3.4 cannot be told
// to skip its fsyncs), listening for clients and peers on free ports of
// 127.0.0.1 only, with short raft ticks (a heartbeat every 10 ms, elections
// after 100 ms) so that it is ready, and ready again after a restart,
// within a fraction of a second. The server is stopped by its process ID, never by name: SIGTERM,
// then SIGKILL if it has not exited within 10 seconds. It also receives
// SIGKILL if the test binary dies without stopping it.
//
// Besides starting and stopping, a test can do to the server what an
// operator does to a production etcd: [Server.Kill] it (a crash),
// [Server.Ctl] run etcdctl against it (etcdctl del --prefix /, say),
// [Server.Snapshot] save a snapshot with etcdctl snapshot save, and
// [Server.Restore] bring the member back from a snapshot with etcdctl
// snapshot restore into a new data directory: the keyspace, its revision
// and its leases go back to what the snapshot holds.
//
// The binaries are looked up by [Find]: etcd and etcdctl from the
// directory $RANDFLAKE_ETCD_BIN names, else from PATH (Debian packages them
// as etcd-server and etcd-client). Without them, [New] skips the test with a
// message saying how to install them, unless [Required] reports that it
// must not be skipped (the CI environment variable is set), in which case
// the test fails.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/testserver"
)

// BinEnv is the environment variable that, when set, names the directory
// holding etcd and etcdctl; [Find] then looks nowhere else.
const BinEnv = testserver.EtcdBinEnv

// DefaultClusterToken is the initial cluster token of a new server. The
// cluster ID derives from it and from the member's name and peer URL, so a
// member restored from a snapshot under the same token has the same
// cluster ID as before.
const DefaultClusterToken = "randflake-etcdtest"

// ErrNotFound is returned, wrapped in an error saying how to install the
// binaries, by [Find] and [Start] when etcd or etcdctl is not found.
var ErrNotFound = testserver.ErrNoEtcd

const installHint = "install them (Debian: apt-get install etcd-server etcd-client) or set $" + BinEnv + " to their directory"

// memberName is the name of the single member.
const memberName = "randflake-test"

// Find returns the paths of the etcd and etcdctl binaries: those in the
// directory $RANDFLAKE_ETCD_BIN ([BinEnv]) names if it is set, else those
// on PATH. If either is missing, the error wraps [ErrNotFound] and says how
// to install them.
func Find() (etcd, etcdctl string, err error) {
	etcd, etcdctl, err = testserver.FindEtcd()
	if err != nil {
		return "", "", fmt.Errorf("%w; %s", err, installHint)
	}
	return etcd, etcdctl, nil
}

// Required reports whether tests needing etcd must fail rather than be
// skipped when there are no binaries: whether the CI environment variable
// is set to anything but "", "false" or "0".
func Required() bool { return testserver.ServersRequired() }

// Server is a throwaway etcd server for tests. Its methods may be called
// from any goroutine.
type Server struct {
	etcd, etcdctl string
	dir           string // temporary directory: data directories and the log
	log           string // the server's log file
	client, peer  int    // ports on 127.0.0.1

	mu     sync.Mutex                // serializes Start, Stop, Restore and Close
	data   string                    // the current data directory
	token  string                    // the initial cluster token of the current data
	gen    int                       // data directories made so far
	proc   *testserver.ServerProcess // the running etcd, nil when stopped
	closed bool
}

// Start creates a new single-member cluster in a new temporary directory
// and starts a server on it, returning once it serves requests. The caller
// must call [Server.Close]. Without binaries the error wraps [ErrNotFound].
func Start() (*Server, error) {
	etcd, etcdctl, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := makeDir()
	if err != nil {
		return nil, err
	}
	s := &Server{etcd: etcd, etcdctl: etcdctl, dir: dir, log: filepath.Join(dir, "etcd.log"), token: DefaultClusterToken}
	// A port another program took first fails etcd's bind: start it again
	// on new ports, in a new data directory (the member's peer URL is in
	// its data).
	err = testserver.StartOnFreePorts("etcdtest: starting etcd", 2, func(ports []int) error {
		s.client, s.peer = ports[0], ports[1]
		s.data = s.newDataDir()
		return s.Start()
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// makeDir makes the server's temporary directory: under /dev/shm when it
// can, so that etcd's fsyncs cost nothing (etcd 3.4 has no switch to skip
// them, and a test's data need not survive a power cut, only the death of
// the server), else under the default temporary directory.
func makeDir() (string, error) {
	if dir, err := os.MkdirTemp("/dev/shm", "etcdtest-"); err == nil {
		return dir, nil
	}
	return os.MkdirTemp("", "etcdtest-")
}

// New starts a server for t alone, closed when t and its subtests end.
// Without binaries it skips t, or fails it when [Required]; it fails t if
// the server does not start.
func New(t testing.TB) *Server {
	t.Helper()
	return testserver.ServerFor(t, "etcdtest: starting etcd", Start, ErrNotFound)
}

// newDataDir names a data directory not used yet.
func (s *Server) newDataDir() string {
	s.gen++
	return filepath.Join(s.dir, fmt.Sprintf("data-%d", s.gen))
}

func (s *Server) peerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peer))
}

// URL returns the client URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.Endpoint() }

// Endpoint returns the client address, 127.0.0.1:PORT, for
// clientv3.Config.Endpoints. It stays the same across [Server.Stop],
// [Server.Start] and [Server.Restore].
func (s *Server) Endpoint() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.client)) }

// Dir returns the server's temporary directory, which holds its data
// directories and its log; [Server.Close] removes it.
func (s *Server) Dir() string { return s.dir }

// DataDir returns the data directory the server runs on (a new one after
// each [Server.Restore]).
func (s *Server) DataDir() string { return testserver.Locked(&s.mu, func() string { return s.data }) }

// ClusterToken returns the initial cluster token the current data
// directory was created with.
func (s *Server) ClusterToken() string {
	return testserver.Locked(&s.mu, func() string { return s.token })
}

// Running reports whether the server process runs.
func (s *Server) Running() bool {
	return testserver.Locked(&s.mu, func() bool { return s.proc != nil })
}

// PID returns the server's process ID, 0 when it is stopped.
func (s *Server) PID() int { return testserver.Locked(&s.mu, func() int { return s.proc.PID() }) }

// Start starts a stopped server again, on the same ports and data, and
// returns once it serves requests. It is an error to start a running or
// closed server.
func (s *Server) Start() error { return testserver.Locked(&s.mu, s.startLocked) }

func (s *Server) startLocked() error {
	if err := testserver.StartRefused(s.closed, s.proc != nil, "etcdtest: Start of a closed server", "etcdtest: Start of a running server"); err != nil {
		return err
	}
	cmd := exec.Command(s.etcd, s.member(s.data, s.token).Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	name := "etcdtest: etcd on " + s.data
	proc, err := testserver.StartServer(name, cmd, s.log)
	if err != nil {
		return err
	}
	if err := testserver.WaitReady(proc, name, "healthy", readyTimeout, 20*time.Millisecond, s.ready); err != nil {
		return err
	}
	s.proc = proc
	return nil
}

// member describes the server's member on data, under token.
func (s *Server) member(data, token string) testserver.EtcdMember {
	return testserver.EtcdMember{Name: memberName, DataDir: data, ClientURL: s.URL(), PeerURL: s.peerURL(), Token: token}
}

// readyTimeout is how long a start may take on idle cores, stretched by
// the measured slowdown: etcd is ready within a fraction of a second.
const readyTimeout = 30 * time.Second

// ready reports whether the server is healthy, and is this server: its
// member list holds this server's peer URL, which no other server has
// (FreePort reserves it). Another etcd answering on the client port is
// testserver.ErrPortTaken: ours cannot have bound it.
func (s *Server) ready(ctx context.Context) error {
	members, err := testserver.EtcdHealthy(ctx, s.URL())
	if err != nil {
		return err
	}
	for _, m := range members {
		for _, u := range m.PeerURLs {
			if u == s.peerURL() {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: the etcd on %s is not this server: its members %+v lack peer URL %s", testserver.ErrPortTaken, s.URL(), members, s.peerURL())
}

// Stop stops the server by its process ID, with SIGTERM (etcd then shuts
// down cleanly), killing it if it has not exited within 10 seconds, and
// returns once it has exited. The data stay, for [Server.Start]. Stopping
// a stopped server does nothing.
func (s *Server) Stop() error {
	return testserver.Locked(&s.mu, func() error { return s.stopLocked(syscall.SIGTERM) })
}

// Kill kills the server with SIGKILL, as a crash or an out-of-memory kill
// would, and returns once it has exited. What it had acknowledged is on
// its disk; [Server.Start] recovers it.
func (s *Server) Kill() error {
	return testserver.Locked(&s.mu, func() error { return s.stopLocked(syscall.SIGKILL) })
}

func (s *Server) stopLocked(sig syscall.Signal) error {
	proc := s.proc
	s.proc = nil
	return proc.Stop(sig, 10*time.Second)
}

// Restart stops the server and starts it again on the same data.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		return err
	}
	return s.startLocked()
}

// Close stops the server, as [Server.Stop] does, and removes its temporary
// directory. Closing a closed server does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.stopLocked(syscall.SIGTERM)
		s.closed = true
		os.RemoveAll(s.dir)
	}
}

// Ctl runs etcdctl (API version 3) against the server with args, within
// ctx, and returns its standard output; the error includes its standard
// error. For example Ctl(ctx, "del", "--prefix", "/") deletes every key.
func (s *Server) Ctl(ctx context.Context, args ...string) ([]byte, error) {
	return testserver.Etcdctl(ctx, s.etcdctl, append([]string{"--endpoints=" + s.URL(), "--dial-timeout=2s", "--command-timeout=10s"}, args...)...)
}

// Snapshot saves a snapshot of the running server's keyspace to path, with
// etcdctl snapshot save.
func (s *Server) Snapshot(ctx context.Context, path string) error {
	_, err := s.Ctl(ctx, "snapshot", "save", path)
	return err
}

// RestoreOptions are the options of [Server.Restore].
type RestoreOptions struct {
	// ClusterToken is the initial cluster token of the restored member.
	// Empty keeps the server's: the restored member then has the same
	// member and cluster IDs as before, and clients cannot tell it from
	// the server they knew but by its revision, which goes back to the
	// snapshot's. Another token gives it a new cluster ID.
	ClusterToken string
}

// Restore brings the server back from the snapshot at path, as an operator
// does after a disaster: it stops the server (if it runs), restores the
// snapshot with etcdctl snapshot restore into a new data directory, and
// starts the server on it, on the same ports. The old data directory is
// left as it was. The keyspace, its revision and its leases are the
// snapshot's; etcd gives every restored lease a full TTL from the start.
func (s *Server) Restore(ctx context.Context, path string, opts RestoreOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcdtest: Restore of a closed server")
	}
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		return err
	}
	token := opts.ClusterToken
	if token == "" {
		token = s.token
	}
	data := s.newDataDir()
	if _, err := s.Ctl(ctx, s.member(data, token).RestoreArgs(path)...); err != nil {
		return err
	}
	s.data, s.token = data, token
	return s.startLocked()
}

// LogTail returns the last 4 KB of the server's log (warnings and worse,
// and a line per start), for failure messages.
func (s *Server) LogTail() string { return testserver.LogTail(s.log) }
