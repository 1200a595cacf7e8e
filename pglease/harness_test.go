package pglease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
)

// The tests run against real PostgreSQL servers that they start
// themselves: initdb into a temporary directory, postgres on a free
// loopback port with its unix socket in that directory, stopped by PID. As
// root, both run as the postgres user. One server is shared by the tests
// (each works on a table of its own); a test that restarts the server
// starts its own.

// helperEnv makes the test binary a helper process (TestHelperProcess).
const helperEnv = "RANDFLAKE_PGLEASE_HELPER"

var (
	pgBin     string    // directory of initdb and postgres; "" if none
	shared    *pgServer // the shared server, nil without binaries
	noPGError string    // why there is no server
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run())
	}
	pgBin = findPGBin()
	if pgBin == "" {
		noPGError = "no PostgreSQL server binaries (initdb, postgres) in $RANDFLAKE_PGLEASE_BIN, on PATH or under /usr/lib/postgresql/*/bin; install them (Debian: apt-get install postgresql)"
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			fmt.Fprintln(os.Stderr, "pglease tests: CI is set and "+noPGError)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "pglease tests: "+noPGError+": the database tests are skipped")
		os.Exit(m.Run())
	}
	s, err := newPGServer()
	if err == nil {
		err = s.start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pglease tests: starting PostgreSQL:", err)
		if s != nil {
			s.remove()
		}
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	s.stop()
	s.remove()
	os.Exit(code)
}

// findPGBin returns the directory holding initdb and postgres: the one
// $RANDFLAKE_PGLEASE_BIN names if set, else the one on PATH, else the
// newest /usr/lib/postgresql/VERSION/bin.
func findPGBin() string {
	if d := os.Getenv("RANDFLAKE_PGLEASE_BIN"); d != "" {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 != nil || e2 != nil {
			return ""
		}
		return d
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 == nil && e2 == nil {
			return d
		}
	}
	return ""
}

// pgServer is a PostgreSQL server of the tests.
type pgServer struct {
	dir  string // data directory's parent, also the socket directory
	port int
	cred *syscall.Credential // the postgres user's, when running as root
	log  string              // the server's log file

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

// server returns the shared server, or skips the test without one.
func server(t *testing.T) *pgServer {
	t.Helper()
	if shared == nil {
		t.Skip(noPGError)
	}
	return shared
}

// ownServer starts a server for t alone.
func ownServer(t *testing.T) *pgServer {
	t.Helper()
	server(t) // skip without binaries
	s, err := newPGServer()
	if err == nil {
		err = s.start()
	}
	if err != nil {
		if s != nil {
			s.remove()
		}
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		s.stop()
		s.remove()
	})
	return s
}

// newPGServer runs initdb into a new temporary directory.
func newPGServer() (*pgServer, error) {
	base := os.TempDir()
	if os.Geteuid() == 0 && !othersCanEnter(base) {
		base = "/tmp" // the postgres user must reach the directory
	}
	dir, err := os.MkdirTemp(base, "pglease-test-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{dir: dir, log: filepath.Join(dir, "postgres.log")}
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
	cmd := exec.Command(filepath.Join(pgBin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "randflake",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if err := cmd.Run(); err != nil {
		return s, fmt.Errorf("initdb: %v\n%s", err, out.Bytes())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, err
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return s, nil
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

// spawns carries start requests to the one goroutine that starts the
// servers. It is locked to its OS thread for the life of the test binary:
// the kernel sends the parent-death signal (which stops a server left by a
// test binary that died) when the forking thread ends, not the process.
var spawns = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked
		for r := range spawns {
			r.done <- r.cmd.Start()
		}
	}()
}

// start starts postgres and waits until it accepts connections.
func (s *pgServer) start() error {
	lf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	cmd := exec.Command(filepath.Join(pgBin, "postgres"), "-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-h", "127.0.0.1", "-k", s.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawns <- r
	if err := <-r.done; err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.dsn())
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("postgres exited: %v\n%s", cmd.ProcessState, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("postgres not accepting connections after 30s: %v\n%s", err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops postgres by its PID (fast shutdown: SIGINT), killing it if it
// has not exited within 10s.
func (s *pgServer) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func (s *pgServer) remove() { os.RemoveAll(s.dir) }

func (s *pgServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (s *pgServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *pgServer) dsn() string { return dsnFor(s.addr()) }

func dsnFor(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("host=%s port=%s user=randflake dbname=postgres sslmode=disable connect_timeout=2", host, port)
}

// newPool returns a pool on dsn, closed at the end of the test.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newTable migrates a table of the test's own on pool and returns its name.
func newTable(t testing.TB, pool *pgxpool.Pool, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := MigrateTable(ctx, pool, "", name); err != nil {
		t.Fatal(err)
	}
	return name
}

// proxy forwards TCP connections to target; cut drops every connection
// and refuses new ones (a network partition), restore heals it.
type proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln {
				p.mu.Unlock()
				c.Close()
				d.Close()
				return
			}
			p.conns[c], p.conns[d] = true, true
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(d, c)
			go pipe(c, d)
		}
	}()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// issued is an ID with the wall time it was handed out.
type issued struct {
	id int64
	at time.Time
}

// collector runs a generator in a goroutine, recording every ID issued
// and when, until stopped.
type collector struct {
	g      *randflake.Leased
	mu     sync.Mutex
	ids    []issued
	errs   []error // distinct errors seen, for diagnostics
	stopc  chan struct{}
	done   chan struct{}
	lastOK time.Time
}

func collect(g *randflake.Leased) *collector {
	c := &collector{g: g, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		batch := make([]int64, 32)
		for {
			select {
			case <-c.stopc:
				return
			default:
			}
			n, err := g.GenerateBatch(batch)
			now := time.Now()
			c.mu.Lock()
			for _, id := range batch[:n] {
				c.ids = append(c.ids, issued{id, now})
			}
			if n > 0 {
				c.lastOK = now
			}
			if err != nil && (len(c.errs) == 0 || c.errs[len(c.errs)-1].Error() != err.Error()) {
				c.errs = append(c.errs, err)
			}
			c.mu.Unlock()
			if err != nil && !errors.Is(err, randflake.ErrResourceExhausted) {
				time.Sleep(5 * time.Millisecond)
			} else {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return c
}

func (c *collector) stop() []issued {
	close(c.stopc)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids
}

// count returns how many IDs were issued so far and the time of the last.
func (c *collector) count() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids), c.lastOK
}

// idCheck collects IDs of many generators and fails on an ID issued twice.
type idCheck struct {
	t      *testing.T
	cipher *randflake.Sparx64
	seen   map[int64]string
}

func newIDCheck(t *testing.T) *idCheck {
	c, err := randflake.NewSparx64(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return &idCheck{t: t, cipher: c, seen: map[int64]string{}}
}

// add records IDs of who, checks them against l's node range (unless l is
// zero), and returns their oldest and newest seconds.
func (c *idCheck) add(who string, ids []issued, l randflake.Lease) (minTS, maxTS int64) {
	c.t.Helper()
	for _, is := range ids {
		if other, dup := c.seen[is.id]; dup {
			c.t.Fatalf("ID %d issued by %s and by %s", is.id, other, who)
		}
		c.seen[is.id] = who
		ts, node := c.fields(is.id)
		if l != (randflake.Lease{}) && (node < l.FirstNode || node > l.LastNode || ts < l.Start || ts > l.End) {
			c.t.Fatalf("%s issued an ID on node %d at second %d, outside its lease %v", who, node, ts, l)
		}
		if minTS == 0 || ts < minTS {
			minTS = ts
		}
		maxTS = max(maxTS, ts)
	}
	return minTS, maxTS
}

func (c *idCheck) fields(id int64) (ts, node int64) {
	raw := c.cipher.DecryptID(uint64(id))
	return int64(raw>>34) + randflake.Epoch, int64(raw>>17) & randflake.MaxNode
}

var testSecret = []byte("fleet-secret-16b")

func newLeased(t *testing.T, cfg Config) *randflake.Leased {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := NewLeased(ctx, testSecret, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		g.Close(ctx)
	})
	return g
}

// restore heals a cut proxy on its old address.
func (p *proxy) restore(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for try := 0; try < 50; try++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}
