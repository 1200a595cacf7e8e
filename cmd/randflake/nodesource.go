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
	"github.com/randflake/randflake/lease"
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

// registerFleet registers the flags of serve's node IDs: the generator's,
// claiming statedir.DefaultNodes from the state directory, and those of
// the source (registerSource). The lease commands, which open the
// fleet's source as serve does, take the same.
func (g *generatorFlags) registerFleet(fs *flag.FlagSet) {
	g.register(fs, statedir.DefaultNodes)
	g.lease.registerSource(fs)
}

// open acquires node IDs for a generator under the secret the flags name
// (the state directory's when none is named), within ctx, logging the
// lease's events to log. Every source goes through here: the flags open
// it (leaseFlags.openSource), and one generator is made on it.
func (g *generatorFlags) open(ctx context.Context, e *env, log *slog.Logger) (*leased, error) {
	o, err := g.source(ctx, e, log)
	if err != nil {
		return nil, err
	}
	defer clear(o.secret)
	rs := &renewalCounter{LeaseSource: o.src}
	var gen *randflake.Leased
	newLeased := func() (err error) {
		gen, err = randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: o.secret, Source: rs, TimeSource: o.now, Logger: log})
		return err
	}
	stop := waitNotice(log, o.waiting, o.waitingArgs...)
	if o.network {
		err = untilClaimed(ctx, log, newLeased)
	} else {
		err = newLeased()
	}
	stop()
	if err != nil {
		if o.cleanup != nil {
			o.cleanup()
		}
		return nil, o.explain(err)
	}
	return &leased{Leased: gen, describe: o.describe, cleanup: o.cleanup, renewals: rs}, nil
}

// source checks the flags and opens the source they name, without
// claiming anything yet.
func (g *generatorFlags) source(ctx context.Context, e *env, log *slog.Logger) (*openedSource, error) {
	if err := g.lease.check(); err != nil {
		return nil, err
	}
	secret, _, err := g.secret.explicit(e)
	if err != nil {
		return nil, err
	}
	created := func(dir string) { log.Warn(firstUseNotice, "dir", dir) }
	if g.plain {
		created = nil
	}
	var now func() int64
	if e.now != nil {
		now = func() int64 { return e.now().Unix() }
	}
	o, err := g.lease.openSource(ctx, e, log, secret, created)
	if err != nil {
		clear(secret)
		return nil, err
	}
	if o.now == nil && g.lease.kind != sourceStateDir {
		o.now = now
	}
	return o, nil
}

// openedSource is a source of node IDs, opened: a lease source and what
// the generator on it needs.
type openedSource struct {
	src      randflake.LeaseSource
	secret   []byte // the generator's secret (cleared after use)
	describe string // names the source in logs
	// waiting and waitingArgs are the notice logged while no node IDs
	// have been had yet.
	waiting     string
	waitingArgs []any
	now         func() int64 // the generator's clock; nil: the wall clock
	network     bool         // a server not reachable yet, or slow, is waited for (untilClaimed)
	cleanup     func()       // closes what the source opened
	// explain adds what the operator should know to an error of the
	// source; nil adds nothing.
	wrap func(error) error
}

func (o *openedSource) explain(err error) error {
	if o.wrap == nil {
		return err
	}
	return o.wrap(err)
}

// historyResetter is a source whose store keeps history (see
// lease.BlockSource.ResetHistory).
type historyResetter interface {
	ResetHistory(ctx context.Context) error
}

// The sources of node IDs, as --node-source names them.
const (
	sourceStateDir    = "statedir"
	sourceStatic      = "static"
	sourceStatefulSet = "statefulset"
	sourceEtcd        = "etcd"
	sourcePostgres    = "postgres"
	sourceKubernetes  = "kubernetes"
)

// nodeSources lists the values of --node-source, for messages.
const nodeSources = sourceStateDir + ", " + sourceStatic + ", " + sourceStatefulSet + ", " + sourceEtcd + ", " + sourcePostgres + " or " + sourceKubernetes

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
	// horizon is --etcd-horizon: the fleet's bound on promises.
	horizon time.Duration
	// etcdSec are the flags of a secured etcd (etcdtls.go).
	etcdSec etcdSecurity

	// source, nodesPerPod and pg are --node-source, --nodes-per-pod and
	// the --postgres-* flags, only registered by registerSource (serve).
	source      string
	nodesPerPod int64
	pg          postgresFlags
	// kube are the --kube-* flags and --kubeconfig (kubernetes.go).
	kube kubeFlags

	defaultClaim int64  // from the state directory without --claim
	first, last  int64  // the range --nodes names, set by check
	kind         string // the source in use (a source* constant), set by check
}

// registerSource registers --node-source and --nodes-per-pod.
func (l *leaseFlags) registerSource(fs *flag.FlagSet) {
	fs.StringVar(&l.source, "node-source", "", "where node IDs come from: "+nodeSources+" (default: static with --nodes, etcd with --etcd, else statedir)")
	fs.Int64Var(&l.nodesPerPod, "nodes-per-pod", defaultNodesPerPod, "with --node-source statefulset: node IDs of each pod; the pod with ordinal K gets K*N to K*N+N-1")
	l.pg.register(fs)
	l.kube.register(fs)
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
	fs.DurationVar(&l.horizon, "etcd-horizon", 0, fmt.Sprintf("with --etcd: the fleet's bound on promises, the same on every member, at least 3 x --etcd-ttl; a wipe of the prefix is waited out for it (default %v)", etcdlease.DefaultHorizon))
	l.etcdSec.register(fs)
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
	if l.claim < 0 || l.ttl < 0 || l.pg.ttl < 0 || l.horizon < 0 || l.pg.horizon < 0 {
		return usagef("--claim, --etcd-ttl, --etcd-horizon, --postgres-ttl and --postgres-horizon must not be negative")
	}
	if err := l.etcdSec.check(l.etcd); err != nil {
		return err
	}
	if err := l.pg.check(); err != nil {
		return err
	}
	if err := l.kube.check(); err != nil {
		return err
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
		if l.kube.set() {
			return usagef("--kubeconfig and the --kube-* flags are for --node-source kubernetes")
		}
		l.kind = implied
		return nil
	case sourceStateDir, sourceStatic, sourceStatefulSet, sourceEtcd, sourcePostgres, sourceKubernetes:
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
	case l.kube.set() && l.source != sourceKubernetes:
		return usagef("--kubeconfig and the --kube-* flags are for --node-source kubernetes, not %s", l.source)
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

// openSource opens the source the flags name (l.kind, set by check) under
// secret, which may be nil for the state directory and a static range
// (the state directory's secret is used then; created is as for
// openState). The one place a source of node IDs is chosen: a new source
// adds a constant, a case in resolve and a case here.
func (l *leaseFlags) openSource(ctx context.Context, e *env, log *slog.Logger, secret []byte, created func(string)) (*openedSource, error) {
	switch l.kind {
	case sourceStatic:
		if secret == nil {
			var err error
			if secret, _, err = stateSecret(e, created); err != nil {
				return nil, err
			}
		}
		src, err := staticSource(l.first, l.last, secret)
		if err != nil {
			return nil, err
		}
		return &openedSource{src: src, secret: secret, describe: "static",
			waiting: "still waiting for the static node IDs", waitingArgs: []any{"nodes", l.nodes}}, nil
	case sourceStatefulSet:
		if secret == nil {
			return nil, usagef("--node-source statefulset needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
		}
		// randflake.StatefulSetSource reads $RANDFLAKE_ORDINAL from the
		// process's environment, not through e.
		pod, err := randflake.StatefulSetSource(ordinalEnv, l.nodesPerPod)
		if err != nil {
			return nil, fmt.Errorf("--node-source statefulset: %w (the ordinal comes from $%s, else from a host name ending in -ORDINAL; at %d node IDs per pod, ordinals 0 to %d fit)",
				err, ordinalEnv, l.nodesPerPod, (randflake.MaxNode+1)/l.nodesPerPod-1)
		}
		src, err := staticSource(pod.FirstNode, pod.LastNode, secret)
		if err != nil {
			return nil, err
		}
		return &openedSource{src: src, secret: secret, describe: "statefulset", waiting: "still waiting for the StatefulSet's node IDs"}, nil
	case sourceEtcd:
		if secret == nil {
			return nil, usagef("--etcd needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
		}
		return l.openEtcd(ctx, log, secret)
	case sourcePostgres:
		if secret == nil {
			return nil, usagef("--node-source postgres needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
		}
		return l.openPostgres(ctx, e, log, secret)
	case sourceKubernetes:
		if secret == nil {
			return nil, usagef("--node-source kubernetes needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
		}
		return l.openKubernetes(ctx, log, secret)
	case sourceStateDir:
		return l.openStateDir(e, log, secret, created)
	}
	return nil, fmt.Errorf("no node-ID source %q", l.kind)
}

// staticSource is the lease engine on the static store of first..last
// (rule 10 of docs/leases.md: the deployment guarantees one holder at a
// time).
func staticSource(first, last int64, secret []byte) (randflake.LeaseSource, error) {
	st, err := lease.NewStaticStore(first, last, 0)
	if err != nil {
		return nil, err
	}
	return lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: secret, Layout: lease.StaticLayout(first, last)})
}

// openEtcd opens the etcd source: a client of --etcd, with the TLS and
// authentication of the --etcd-* flags (etcdtls.go). Without them the
// client connects in the background, so a claim waits for an unreachable
// etcd; with them it waits here, within ctx, and a refused certificate or
// password ends it.
func (l *leaseFlags) openEtcd(ctx context.Context, log *slog.Logger, secret []byte) (*openedSource, error) {
	cfg := clientv3.Config{
		Endpoints:   strings.Split(l.etcd, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zapToSlog(log.With("component", "etcd client")),
	}
	if err := l.etcdSec.configure(&cfg); err != nil {
		return nil, err
	}
	cli, err := l.connectEtcd(ctx, log, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("etcd at %s: %w", l.etcd, err)
	}
	src, err := etcdlease.New(etcdlease.Config{
		Client: cli, Secret: secret, Prefix: l.prefix, Nodes: l.claim, TTL: l.ttl, Horizon: l.horizon, Logger: log,
	})
	if err != nil {
		cli.Close()
		if errors.Is(err, lease.ErrBeyondHorizon) {
			return nil, usagef("%v: give every member of the fleet the same --etcd-horizon ($RANDFLAKE_ETCD_HORIZON), at least 3 x --etcd-ttl", err)
		}
		return nil, fmt.Errorf("etcd at %s: %w", l.etcd, err)
	}
	return &openedSource{src: src, secret: secret, describe: "etcd", network: true, cleanup: func() { cli.Close() },
		waiting: etcdWaiting, waitingArgs: []any{"endpoints", l.etcd},
		wrap: func(err error) error { return fmt.Errorf("etcd at %s: %w%s", l.etcd, err, l.etcdHint(err)) }}, nil
}

// openStateDir opens the state directory's source, claiming --claim (or
// else l.defaultClaim) node IDs. secret may be nil: the directory's own is
// used then. created is as for openState.
func (l *leaseFlags) openStateDir(e *env, log *slog.Logger, secret []byte, created func(string)) (*openedSource, error) {
	d, err := openState(e, created)
	if err != nil {
		return nil, err
	}
	external := secret != nil
	if secret == nil {
		secret = d.Secret()
	}
	claim := l.claim
	if claim == 0 {
		claim = l.defaultClaim
	}
	src, err := d.Source(statedir.Options{Nodes: claim, ExternalSecret: external, Logger: log})
	if err != nil {
		clear(secret)
		return nil, err
	}
	return &openedSource{src: src, secret: secret, describe: "state directory " + d.Path(),
		waiting: "still waiting for node IDs from the state directory", waitingArgs: []any{"dir", d.Path()}}, nil
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
