package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/pglease"
	"github.com/randflake/randflake/statedir"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// generatorFlags are the flags of the subcommands that issue IDs: the
// secret and the source of the node IDs.
type generatorFlags struct {
	secret secretFlags
	lease  leaseFlags
	// plain makes the first use of the state directory a plain line on
	// standard error rather than a log record.
	plain bool
}

// register registers the flags; defaultClaim is the number of node IDs
// claimed from the state directory without --claim.
func (g *generatorFlags) register(fs *flag.FlagSet, defaultClaim int64) {
	g.secret.register(fs)
	g.lease.register(fs, defaultClaim)
}

// open acquires node IDs for a generator under the secret the flags name
// (the state directory's when none is named), within ctx, logging the
// lease's events to log.
func (g *generatorFlags) open(ctx context.Context, e *env, log *slog.Logger) (*leased, error) {
	if err := g.lease.check(); err != nil {
		return nil, err
	}
	secret, _, err := g.secret.explicit(e)
	if err != nil {
		return nil, err
	}
	defer clear(secret)
	var now func() int64
	if e.now != nil {
		now = func() int64 { return e.now().Unix() }
	}
	created := func(dir string) { log.Warn(firstUseNotice, "dir", dir) }
	if g.plain {
		created = nil
	}
	// The one place a source of node IDs is chosen; a new source adds a
	// constant, a case in leaseFlags.resolve and a case here.
	switch g.lease.kind {
	case sourceStatic:
		return g.lease.openStatic(ctx, e, log, secret, now, created)
	case sourceStatefulSet:
		return g.lease.openStatefulSet(ctx, log, secret, now)
	case sourceEtcd:
		return g.lease.openEtcd(ctx, log, secret)
	case sourcePostgres:
		return g.lease.openPostgres(ctx, log, secret)
	case sourceStateDir:
		return g.lease.openStateDir(ctx, e, log, secret, created)
	}
	return nil, fmt.Errorf("no node-ID source %q", g.lease.kind)
}

// The sources of node IDs, as --node-source names them.
const (
	sourceStateDir    = "statedir"
	sourceStatic      = "static"
	sourceStatefulSet = "statefulset"
	sourceEtcd        = "etcd"
	sourcePostgres    = "postgres"
)

// nodeSources lists the values of --node-source, for messages.
const nodeSources = sourceStateDir + ", " + sourceStatic + ", " + sourceStatefulSet + ", " + sourceEtcd + " or " + sourcePostgres

// ordinalEnv is the variable that may hold a StatefulSet pod's ordinal
// (or its name); without it, the host name is used.
const ordinalEnv = "RANDFLAKE_ORDINAL"

// defaultNodesPerPod is --nodes-per-pod's default: 128 pods of 1,024 node
// IDs each use all 131,072.
const defaultNodesPerPod = 1024

// leaseFlags choose where the node IDs come from: the state directory
// (default), a static range, a StatefulSet pod's share of the node IDs
// (serve only), etcd, or PostgreSQL (serve only).
type leaseFlags struct {
	nodes  string
	etcd   string
	prefix string
	claim  int64
	ttl    time.Duration

	// source, nodesPerPod and pg are --node-source, --nodes-per-pod and
	// the --postgres-* flags, only registered by registerSource (serve).
	source      string
	nodesPerPod int64
	pg          postgresFlags

	defaultClaim int64  // from the state directory without --claim
	first, last  int64  // the range --nodes names, set by check
	kind         string // the source in use (a source* constant), set by check
}

// registerSource registers --node-source and --nodes-per-pod.
func (l *leaseFlags) registerSource(fs *flag.FlagSet) {
	fs.StringVar(&l.source, "node-source", "", "where node IDs come from: "+nodeSources+" (default: static with --nodes, etcd with --etcd, else statedir)")
	fs.Int64Var(&l.nodesPerPod, "nodes-per-pod", defaultNodesPerPod, "with --node-source statefulset: node IDs of each pod; the pod with ordinal K gets K*N to K*N+N-1")
	l.pg.register(fs)
	if f := fs.Lookup("claim"); f != nil {
		f.Usage = fmt.Sprintf("node IDs to claim from the state directory, etcd or PostgreSQL (default: %d from the state directory, %d from etcd or PostgreSQL)", l.defaultClaim, pglease.DefaultNodes)
	}
}

func (l *leaseFlags) register(fs *flag.FlagSet, defaultClaim int64) {
	l.defaultClaim = defaultClaim
	fs.StringVar(&l.nodes, "nodes", "", "use the static node-ID range FIRST-LAST (you guarantee that no other process uses it)")
	fs.StringVar(&l.etcd, "etcd", "", "claim node IDs from etcd at these comma-separated endpoints (needs an explicit fleet secret)")
	fs.StringVar(&l.prefix, "etcd-prefix", "", "etcd key prefix of the claims (default "+etcdlease.DefaultPrefix+")")
	fs.Int64Var(&l.claim, "claim", 0, fmt.Sprintf("node IDs to claim from the state directory or etcd (default: %d from the state directory, %d from etcd)", defaultClaim, etcdlease.DefaultNodes))
	fs.DurationVar(&l.ttl, "etcd-ttl", 0, "etcd lease TTL: a crashed process's node IDs are free again after it (default 10s)")
}

// check returns a usage error for flags that do not go together or are
// out of range, and parses --nodes.
func (l *leaseFlags) check() error {
	if l.nodes != "" && l.etcd != "" {
		return usagef("--nodes and --etcd exclude each other")
	}
	if l.pg.dsn != "" && (l.nodes != "" || l.etcd != "") {
		return usagef("--postgres-dsn excludes --nodes and --etcd")
	}
	if l.claim < 0 || l.ttl < 0 || l.pg.ttl < 0 {
		return usagef("--claim, --etcd-ttl and --postgres-ttl must not be negative")
	}
	if l.nodes != "" {
		var err error
		if l.first, l.last, err = parseNodeRange(l.nodes); err != nil {
			return err
		}
	}
	return l.resolve()
}

// resolve sets l.kind from --node-source and the flags that imply a
// source (--nodes: static, --etcd: etcd), which must agree with it.
func (l *leaseFlags) resolve() error {
	implied := sourceStateDir
	switch {
	case l.nodes != "":
		implied = sourceStatic
	case l.etcd != "":
		implied = sourceEtcd
	case l.pg.dsn != "":
		implied = sourcePostgres
	}
	switch l.source {
	case "":
		l.kind = implied
		return nil
	case sourceStateDir, sourceStatic, sourceStatefulSet, sourceEtcd, sourcePostgres:
	default:
		return usagef("--node-source %q: want %s", l.source, nodeSources)
	}
	switch {
	case l.source == sourceStatic && l.nodes == "":
		return usagef("--node-source static needs --nodes FIRST-LAST")
	case l.source == sourceEtcd && l.etcd == "":
		return usagef("--node-source etcd needs --etcd ENDPOINTS")
	case l.nodes != "" && l.source != sourceStatic:
		return usagef("--nodes is for --node-source static, not %s", l.source)
	case l.etcd != "" && l.source != sourceEtcd:
		return usagef("--etcd is for --node-source etcd, not %s", l.source)
	case l.source == sourcePostgres && l.pg.dsn == "":
		return usagef("--node-source postgres needs --postgres-dsn DSN ($RANDFLAKE_POSTGRES_DSN)")
	case l.pg.dsn != "" && l.source != sourcePostgres:
		return usagef("--postgres-dsn is for --node-source postgres, not %s", l.source)
	}
	if l.source == sourceStatefulSet && (l.nodesPerPod < 1 || l.nodesPerPod > randflake.MaxNode+1) {
		return usagef("--nodes-per-pod %d: want 1 to %d", l.nodesPerPod, randflake.MaxNode+1)
	}
	l.kind = l.source
	return nil
}

// parseNodeRange parses FIRST-LAST (or a single node ID).
func parseNodeRange(s string) (first, last int64, err error) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		b = a
	}
	first, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	last, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || randflake.CheckNodeRange(first, last) != nil {
		return 0, 0, usagef("--nodes %q: want FIRST-LAST with 0 <= FIRST <= LAST <= %d", s, randflake.MaxNode)
	}
	return first, last, nil
}

// openStatic makes a generator on the range of --nodes, under secret or,
// if that is nil, the state directory's (created is as for openState).
// now, if not nil, is its clock.
func (l *leaseFlags) openStatic(ctx context.Context, e *env, log *slog.Logger, secret []byte, now func() int64, created func(string)) (*leased, error) {
	if secret == nil {
		var err error
		if secret, _, err = stateSecret(e, created); err != nil {
			return nil, err
		}
		defer clear(secret)
	}
	rs := &renewalCounter{LeaseSource: randflake.StaticSource{FirstNode: l.first, LastNode: l.last}}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:     secret,
		Source:     rs,
		TimeSource: now,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	return &leased{Leased: g, describe: "static", renewals: rs}, nil
}

// openStatefulSet makes a generator on the node IDs of a StatefulSet
// pod: ordinal K (from $RANDFLAKE_ORDINAL, else the host name NAME-K)
// gets K*nodesPerPod to K*nodesPerPod+nodesPerPod-1. The pods share the
// secret, so it may not be nil. now, if not nil, is the generator's clock.
// randflake.StatefulSetSource reads $RANDFLAKE_ORDINAL from the process's
// environment, not through env.
func (l *leaseFlags) openStatefulSet(ctx context.Context, log *slog.Logger, secret []byte, now func() int64) (*leased, error) {
	if secret == nil {
		return nil, errors.New("--node-source statefulset needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
	}
	src, err := randflake.StatefulSetSource(ordinalEnv, l.nodesPerPod)
	if err != nil {
		return nil, fmt.Errorf("--node-source statefulset: %w (the ordinal comes from $%s, else from a host name ending in -ORDINAL; at %d node IDs per pod, ordinals 0 to %d fit)",
			err, ordinalEnv, l.nodesPerPod, (randflake.MaxNode+1)/l.nodesPerPod-1)
	}
	rs := &renewalCounter{LeaseSource: src}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret: secret, Source: rs, TimeSource: now, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return &leased{Leased: g, describe: "statefulset", renewals: rs}, nil
}

// openEtcd claims node IDs from etcd, within ctx, saying on log while it
// waits. Every machine must share the secret, so it may not be nil.
func (l *leaseFlags) openEtcd(ctx context.Context, log *slog.Logger, secret []byte) (*leased, error) {
	if secret == nil {
		return nil, errors.New("--etcd needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
	}
	defer waitNotice(log, "still waiting for node IDs from etcd", "endpoints", l.etcd)()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(l.etcd, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zapToSlog(log.With("component", "etcd client")),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	// As etcdlease.NewLeased, with the renewals counted.
	src, err := etcdlease.New(etcdlease.Config{
		Client: cli, Prefix: l.prefix, Nodes: l.claim, TTL: l.ttl, Logger: log,
	})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %s: %w", l.etcd, err)
	}
	rs := &renewalCounter{LeaseSource: src}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: secret, Source: rs, Logger: log})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %s: %w", l.etcd, err)
	}
	return &leased{Leased: g, describe: "etcd", cleanup: func() { cli.Close() }, renewals: rs}, nil
}

// openStateDir claims node IDs (--claim, or else l.defaultClaim) from the
// state directory, within ctx, saying on log while it waits. secret may be
// nil: the directory's own secret is used then. created is as for
// openState.
func (l *leaseFlags) openStateDir(ctx context.Context, e *env, log *slog.Logger, secret []byte, created func(string)) (*leased, error) {
	d, err := openState(e, created)
	if err != nil {
		return nil, err
	}
	external := secret != nil
	if secret == nil {
		secret = d.Secret()
		defer clear(secret)
	}
	claim := l.claim
	if claim == 0 {
		claim = l.defaultClaim
	}
	src, err := d.Source(statedir.Options{Nodes: claim, ExternalSecret: external, Logger: log})
	if err != nil {
		return nil, err
	}
	defer waitNotice(log, "still waiting for node IDs from the state directory", "dir", d.Path())()
	rs := &renewalCounter{LeaseSource: src}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: secret, Source: rs, Logger: log})
	if err != nil {
		return nil, err
	}
	return &leased{Leased: g, describe: "state directory " + d.Path(), renewals: rs}, nil
}

// leased is a generator bound to its node-ID source.
type leased struct {
	*randflake.Leased
	describe string
	cleanup  func()
	renewals *renewalCounter
	once     sync.Once
	err      error
}

// Renewals returns how many renewals of the lease succeeded and failed.
func (g *leased) Renewals() (renewed, failed uint64) {
	if g.renewals == nil {
		return 0, 0
	}
	return g.renewals.renewed.Load(), g.renewals.failed.Load()
}

// Nodes returns the current lease's node range.
func (g *leased) Nodes() (first, last int64) {
	l := g.Lease()
	return l.FirstNode, l.LastNode
}

// renewalCounter is a lease source that counts the outcomes of Renew,
// for the service's metrics.
type renewalCounter struct {
	randflake.LeaseSource
	renewed, failed atomic.Uint64
}

// Renew renews through the source and counts the outcome.
func (c *renewalCounter) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	next, err := c.LeaseSource.Renew(ctx, l)
	switch {
	case err != nil && ctx.Err() != nil:
		// Closing: not a failure of the source.
	case err != nil:
		c.failed.Add(1)
	default:
		c.renewed.Add(1)
	}
	return next, err
}

// LeaseEnd returns the Unix second at which the current lease ends.
func (g *leased) LeaseEnd() int64 { return g.Lease().End }

// Describe names the node IDs in use, for logs.
func (g *leased) Describe() string { return g.describe + " " + g.Lease().String() }

// Close releases the node IDs; it may be called more than once.
func (g *leased) Close() error {
	g.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.err = g.Leased.Close(ctx)
		if g.cleanup != nil {
			g.cleanup()
		}
	})
	return g.err
}

// Timing of waitNotice.
var (
	waitNoticeFirst = time.Second
	waitNoticeEvery = 5 * time.Second
)

// waitNotice logs msg with args after waitNoticeFirst and then every
// waitNoticeEvery, until the returned function is called.
func waitNotice(log *slog.Logger, msg string, args ...any) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTimer(waitNoticeFirst)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			log.Warn(msg, slices.Concat(args, []any{"waited", time.Since(start).Round(time.Second).String()})...)
			t.Reset(waitNoticeEvery)
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
