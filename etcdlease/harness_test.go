package etcdlease

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// etcdServer is a single-member etcd running in the test process on
// loopback ports chosen by the kernel, with its logs silenced, short raft
// ticks and no fsync. It can be stopped and started again on the same
// ports and data.
type etcdServer struct {
	t      *testing.T
	dir    string
	client url.URL
	peer   url.URL
	e      *embed.Etcd
}

// freePort returns a loopback port the kernel chose, free when it returns.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	s := &etcdServer{t: t, dir: t.TempDir()}
	s.client = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	s.peer = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *etcdServer) start() {
	s.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "randflake-test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.Name + "=" + s.peer.String()
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	var e *embed.Etcd
	var err error
	// The ports were free a moment ago; a restart may find them briefly
	// in use.
	for try := 0; ; try++ {
		e, err = embed.StartEtcd(cfg)
		if err == nil || try == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("starting etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		s.t.Fatal("etcd not ready after 30s")
	}
	s.e = e
}

func (s *etcdServer) stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

func (s *etcdServer) endpoint() string { return s.client.Host }

// newClient returns a silenced etcd client of endpoint that reconnects
// quickly after the server comes back.
func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.5, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
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
	errs   []error // distinct error kinds seen, for diagnostics
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

// idCheck collects IDs of many generators and fails on a duplicate.
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

// add records IDs of who, checks them against l's node range, and returns
// their oldest and newest seconds.
func (c *idCheck) add(who string, ids []issued, l randflake.Lease) (minTS, maxTS int64) {
	c.t.Helper()
	for _, is := range ids {
		if other, dup := c.seen[is.id]; dup {
			c.t.Fatalf("ID %d issued by %s and by %s", is.id, other, who)
		}
		c.seen[is.id] = who
		ts, node := c.fields(is.id)
		if l != (randflake.Lease{}) && (node < l.FirstNode || node > l.LastNode) {
			c.t.Fatalf("%s issued node %d outside %v", who, node, l)
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
