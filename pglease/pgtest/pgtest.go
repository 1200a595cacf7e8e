// Package pgtest provides throwaway PostgreSQL servers for tests, in the
// spirit of net/http/httptest.
//
// A [Server] is a real PostgreSQL server that the test binary starts
// itself: initdb into a new temporary directory, postgres listening on a
// free port on 127.0.0.1 only, with its unix socket in that directory and
// durability turned off (fsync, synchronous_commit, full_page_writes) for
// speed. The server is stopped by its PID, never by name, and the
// directory is removed by [Server.Close]. When the test binary runs as
// root, initdb and postgres run as the postgres user (initdb refuses to
// run as root). The server also receives SIGQUIT if the test binary dies
// without stopping it.
//
// The server binaries are looked up by [Find]. Without them, [Main],
// [Shared] and [New] skip the tests with a message saying how to install
// them, unless [Required] reports that they must not be skipped (the CI
// environment variable is set), in which case the tests fail.
//
// A package whose tests share one server uses [Main] as its TestMain and
// [Shared] in its tests; a test that needs a server of its own (one it
// stops and restarts, say) uses [New]. [Server.Replica] (or [NewReplica])
// makes a streaming replica of a server, and [Server.Promote] promotes it,
// for tests of a failover: the promoted replica starts a new timeline.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/internal/testserver"
)

// sinceStart measures the process's slowdown from its start (the package's
// first use); its Stretch is the one place the server's start stretch their
// bounds from.
var sinceStart = slowdown.Start()

// BinEnv is the environment variable that, when set, names the directory
// holding initdb and postgres; [Find] then looks nowhere else.
const BinEnv = "RANDFLAKE_PGLEASE_BIN"

// User and Database are the role and database that [Server.DSN] connects
// to. The role is the cluster's superuser, and any local connection is
// trusted, without a password.
const (
	User     = "randflake"
	Database = "postgres"
)

// ErrNotFound is returned, wrapped in an error saying how to install the
// binaries, by [Find] and [Start] when initdb and postgres are not found.
var ErrNotFound = errors.New("no PostgreSQL server binaries (initdb, postgres)")

const installHint = "install them (Debian: apt-get install postgresql) or set $" + BinEnv + " to their directory"

// Find returns the directory holding the initdb and postgres binaries:
// the one $RANDFLAKE_PGLEASE_BIN ([BinEnv]) names if it is set, else the
// one of initdb on PATH, else the newest /usr/lib/postgresql/VERSION/bin.
// If there is none, the error wraps [ErrNotFound] and says how to install
// them.
func Find() (binDir string, err error) {
	if d := os.Getenv(BinEnv); d != "" {
		if hasBinaries(d) {
			return d, nil
		}
		return "", fmt.Errorf("%w in $%s=%s; %s", ErrNotFound, BinEnv, d, installHint)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); hasBinaries(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w on PATH or under /usr/lib/postgresql/*/bin; %s", ErrNotFound, installHint)
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// Required reports whether tests needing a server must fail rather than
// be skipped when there are no server binaries: whether the CI
// environment variable is set to anything but "", "false" or "0".
func Required() bool { return testserver.ServersRequired() }

// Server is a throwaway PostgreSQL server for tests. Its methods may be
// called from any goroutine.
type Server struct {
	bin  string              // directory of initdb and postgres
	dir  string              // temporary directory: data/, the socket, the log
	port int                 // TCP port on 127.0.0.1
	cred *syscall.Credential // the postgres user's, when running as root
	log  string              // the server's log file

	mu     sync.Mutex                // serializes Start, Stop and Close
	proc   *testserver.ServerProcess // the running postgres, nil when stopped
	closed bool
}

// Start creates a database cluster in a new temporary directory and
// starts a server on it, returning once the server accepts connections.
// The caller must call [Server.Close]. Without server binaries the error
// wraps [ErrNotFound].
func Start() (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	return started(initServer(bin))
}

// started starts s, made by initServer or newServerDir with err, unless
// err is set; on any error it removes s's directory, if made.
func started(s *Server, err error) (*Server, error) {
	if err == nil {
		// A port another program took first fails postgres's bind:
		// start it again on a new one.
		err = testserver.StartOnFreePorts("pgtest: starting postgres", 1, func(ports []int) error {
			s.port = ports[0]
			return s.Start()
		})
	}
	if err != nil {
		if s != nil {
			os.RemoveAll(s.dir)
		}
		return nil, err
	}
	return s, nil
}

// initServer runs initdb into a new temporary directory.
// On error the directory, if made, is s.dir.
func initServer(bin string) (*Server, error) {
	s, err := newServerDir(bin)
	if err != nil {
		return s, err
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(s.dir, "data"), "-U", User,
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := s.run(cmd); err != nil {
		return s, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return s, nil
}

// newServerDir makes a new temporary directory for a server, which the
// postgres user owns when running as root. The port is picked when it
// first starts (see started). On error the directory, if made, is s.dir.
func newServerDir(bin string) (*Server, error) {
	base := os.TempDir()
	if os.Geteuid() == 0 && !othersCanEnter(base) {
		base = "/tmp" // the postgres user must reach the directory
	}
	dir, err := os.MkdirTemp(base, "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, log: filepath.Join(dir, "postgres.log")}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return s, fmt.Errorf("running as root, and initdb refuses root: %w (the Debian package creates the postgres user)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return s, err
		}
	}
	return s, nil
}

// run runs one of the server's tools (as the postgres user when running
// as root) and returns its output.
func (s *Server) run(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	err := cmd.Run()
	return out.Bytes(), err
}

// Replica makes a streaming replica of the running server s and starts
// it: a base backup of s (pg_basebackup, which also writes the settings
// that make the copy follow s) into a new temporary directory, served on
// a port of its own. It returns once the replica accepts connections; it
// is read-only, in recovery, replaying what s writes, until
// [Server.Promote]. The caller must call [Server.Close] on it. Stopping
// the replica and starting it again keeps it a replica (of s, if s runs).
func (s *Server) Replica() (*Server, error) {
	tool, err := s.tool("pg_basebackup")
	if err != nil {
		return nil, err
	}
	r, err := newServerDir(s.bin)
	if err == nil {
		cmd := exec.Command(tool, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", User,
			"-D", filepath.Join(r.dir, "data"), "--write-recovery-conf", "--wal-method=stream",
			"--checkpoint=fast", "--no-sync")
		if out, e := r.run(cmd); e != nil {
			err = fmt.Errorf("pg_basebackup: %v\n%s", e, out)
		}
	}
	return started(r, err)
}

// Unfollow makes a stopped replica forget its primary: the connection
// settings pg_basebackup wrote for it are removed, so that, started again,
// it replays only the WAL it already has, as a replica cut off from its
// primary would, and [Server.Promote] then starts a new timeline from
// that older point. It is an error on a running server.
func (s *Server) Unfollow() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("pgtest: Unfollow of a running server")
	}
	conf := filepath.Join(s.dir, "data", "postgresql.auto.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgtest: unfollow: %w", err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "primary_conninfo") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(conf, []byte(strings.Join(kept, "")), 0o600); err != nil {
		return fmt.Errorf("pgtest: unfollow: %w", err)
	}
	return nil
}

// tool returns the path of another of the server's programs: the one
// beside postgres, or beside the file postgres links to (a directory of
// links such as /usr/local/bin), else the one on PATH.
func (s *Server) tool(name string) (string, error) {
	dirs := []string{s.bin}
	if real, err := filepath.EvalSymlinks(filepath.Join(s.bin, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && !fi.IsDir() {
			return filepath.Join(d, name), nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pgtest: no %s beside postgres in %s, nor on PATH", name, strings.Join(dirs, " or "))
}

// Promote ends a replica's recovery (pg_promote): it stops following its
// primary and starts a new timeline of its own, accepting writes. It
// returns once the replica accepts writes, within 30 seconds.
func (s *Server) Promote() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.connect(ctx)
	if err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	defer c.Close(context.Background())
	var ok bool
	if err := c.QueryRow(ctx, "SELECT pg_promote(true, 30)").Scan(&ok); err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("pgtest: promote: not promoted within 30s\n%s", s.LogTail())
	}
	return nil
}

// NewReplica makes a replica of s for t (see [Server.Replica]), closed
// when t and its subtests end. It fails t if the replica does not start.
func NewReplica(t testing.TB, s *Server) *Server {
	t.Helper()
	r, err := s.Replica()
	if err != nil {
		t.Fatalf("pgtest: replica: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// othersCanEnter reports whether every directory from / to dir lets
// other users through.
func othersCanEnter(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// Start starts a stopped server again, on the same port and data, and
// returns once it accepts connections. It is an error to start a running
// or closed server.
func (s *Server) Start() error { return testserver.Locked(&s.mu, s.startLocked) }

func (s *Server) startLocked() error {
	if err := testserver.StartRefused(s.closed, s.proc != nil, "pgtest: Start of a closed server", "pgtest: Start of a running server"); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-h", "127.0.0.1", "-k", s.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	proc, err := testserver.StartServer("pgtest: postgres", cmd, s.log)
	if err != nil {
		return err
	}
	s.proc = proc
	meter := slowdown.Start()
	began := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(time.Second))
		var dataDir string
		c, err := pgx.Connect(ctx, s.DSN())
		if err == nil {
			err = c.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir)
			c.Close(context.Background())
		}
		cancel()
		if err == nil {
			if !sameDir(dataDir, filepath.Join(s.dir, "data")) {
				// Another server answers on the port: ours cannot
				// have bound it.
				s.stopLocked()
				return fmt.Errorf("pgtest: %w: the server on %s serves %s, not this server's %s",
					testserver.ErrPortTaken, s.Addr(), dataDir, filepath.Join(s.dir, "data"))
			}
			return nil
		}
		select {
		case <-proc.Exited():
			s.proc = nil
			if e := proc.PortTaken(); e != nil {
				return fmt.Errorf("pgtest: postgres could not listen on %s (a restart keeps its port): %w", s.Addr(), e)
			}
			return fmt.Errorf("postgres exited: %v\n%s", proc.State(), s.LogTail())
		default:
		}
		if limit := meter.Stretch(readyTimeout); time.Since(began) > limit {
			s.stopLocked()
			return fmt.Errorf("postgres on %s not accepting connections after %v (%s): %v\n%s",
				s.Addr(), limit.Round(time.Millisecond), meter, err, s.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyTimeout is how long a start may take on idle cores, stretched by
// the measured slowdown: postgres accepts connections within a second.
const readyTimeout = 30 * time.Second

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// Stop stops the server by its PID with a fast shutdown (SIGINT: open
// transactions are rolled back, clients disconnected), killing it if it
// has not exited within 10 seconds, and returns once it has exited. The
// data stay, for [Server.Start]. Stopping a stopped server does nothing.
func (s *Server) Stop() error { return testserver.Locked(&s.mu, s.stopLocked) }

func (s *Server) stopLocked() error {
	proc := s.proc
	s.proc = nil
	return proc.Stop(syscall.SIGINT, 10*time.Second)
}

// Restart stops the server and starts it again.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Close stops the server, as [Server.Stop] does, and removes its
// temporary directory. Closing a closed server does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.stopLocked()
	os.RemoveAll(s.dir)
}

// Addr returns the server's TCP address, 127.0.0.1:PORT. It stays the
// same across [Server.Stop] and [Server.Start].
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN returns a key=value connection string for the server: role [User],
// database [Database], sslmode=disable and a connect_timeout of 2 seconds.
func (s *Server) DSN() string { return s.DSNAt(s.Addr()) }

// DSNAt returns [Server.DSN] with host and port taken from addr
// (HOST:PORT) instead: for reaching the server through a proxy.
func (s *Server) DSNAt(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "5432"
	}
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable connect_timeout=2", host, port, User, Database)
}

// Dir returns the server's temporary directory, which holds the data
// directory, the unix socket and the log; [Server.Close] removes it.
func (s *Server) Dir() string { return s.dir }

// LogTail returns the last 4 KB of the server's log, for failure
// messages. Only warnings and worse are logged.
func (s *Server) LogTail() string { return testserver.LogTail(s.log) }

var (
	shared    *Server // started by Main
	sharedErr error   // why Main has no server
	inMain    bool
)

// Main is a TestMain for a package whose tests share one server: it
// starts a server, runs the tests, closes the server and exits with the
// tests' status. Tests get the server from [Shared].
//
// Under -short (testing.Short) Main starts no server, and Shared and New
// skip the tests. Without server binaries Main prints why to standard error and runs the
// tests without a server, so that [Shared] and [New] skip them, or, when
// [Required], exits with status 1 without running them. If the binaries
// are there but the server does not start, Main exits with status 1.
func Main(m *testing.M) {
	inMain = true
	if !flag.Parsed() {
		flag.Parse() // for testing.Short
	}
	if testing.Short() {
		sharedErr = errors.New("pgtest: the tests needing PostgreSQL are not in -short")
		os.Exit(m.Run())
	}
	s, err := Start()
	switch {
	case errors.Is(err, ErrNotFound) && !Required():
		fmt.Fprintf(os.Stderr, "pgtest: %v: the tests needing PostgreSQL are skipped\n", err)
		sharedErr = err
		os.Exit(m.Run())
	case errors.Is(err, ErrNotFound):
		fmt.Fprintf(os.Stderr, "pgtest: CI is set and %v\n", err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "pgtest: starting PostgreSQL: %v\n", err)
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

// Shared returns the server that [Main] started, or skips t if there are
// no server binaries. It fails t if the package's TestMain is not Main.
// The tests share the server, so each should work in objects of its own
// (tables, schemas or databases) and leave the server running.
func Shared(t testing.TB) *Server {
	t.Helper()
	switch {
	case shared != nil:
		return shared
	case !inMain:
		t.Fatal("pgtest.Shared needs pgtest.Main as the package's TestMain")
	default:
		t.Skip(sharedErr)
	}
	return nil
}

// New starts a server for t alone, closed when t and its subtests end.
// Without server binaries it skips t, or fails it when [Required]; it
// fails t if the server does not start.
func New(t testing.TB) *Server {
	t.Helper()
	return testserver.ServerFor(t, "pgtest: starting PostgreSQL", Start, ErrNotFound)
}
