package pglease

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/pglease/pgtest"
)

// The tests run against real PostgreSQL servers that pgtest starts. One
// server is shared by the tests (each works on a table of its own); a test
// that restarts the server starts its own.

// helperEnv makes the test binary a helper process (TestHelperProcess).
const helperEnv = "RANDFLAKE_PGLEASE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run())
	}
	pgtest.Main(m)
}

// server returns the shared server, or skips the test without one.
func server(t *testing.T) *pgtest.Server {
	t.Helper()
	return pgtest.Shared(t)
}

// ownServer starts a server for t alone.
func ownServer(t *testing.T) *pgtest.Server {
	t.Helper()
	return pgtest.New(t)
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
