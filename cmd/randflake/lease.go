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
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/statedir"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseFlags choose where the node IDs come from: the state directory
// (default), a static range, or etcd.
type leaseFlags struct {
	nodes  string
	etcd   string
	prefix string
	claim  int64
	ttl    time.Duration
}

func (l *leaseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.nodes, "nodes", "", "use the static node-ID range FIRST-LAST (you guarantee that no other process uses it)")
	fs.StringVar(&l.etcd, "etcd", "", "claim node IDs from etcd at these comma-separated endpoints (needs an explicit fleet secret)")
	fs.StringVar(&l.prefix, "etcd-prefix", "", "etcd key prefix of the claims (default "+etcdlease.DefaultPrefix+")")
	fs.Int64Var(&l.claim, "claim", 0, "node IDs to claim from the state directory or etcd (default: 1024 from the state directory, 16 from etcd)")
	fs.DurationVar(&l.ttl, "etcd-ttl", 0, "etcd lease TTL: a crashed process's node IDs are free again after it (default 10s)")
}

// leased is a generator bound to its node-ID source.
type leased struct {
	*randflake.Leased
	describe string
	cleanup  func()
	once     sync.Once
	err      error
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

// wait sleeps until the next second, when new sequence numbers exist, or
// until ctx is done.
func (g *leased) wait(ctx context.Context) error {
	now := time.Now()
	t := time.NewTimer(now.Truncate(time.Second).Add(time.Second).Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// openGenerator acquires node IDs for a generator under the secret the
// flags name (the state directory's when none is named), within ctx,
// logging the lease's events to log.
func openGenerator(ctx context.Context, e *env, log *slog.Logger, sf *secretFlags, lf *leaseFlags, defaultClaim int64) (*leased, error) {
	secret, err := sf.explicit(e)
	if err != nil {
		return nil, err
	}
	defer clear(secret)
	return lf.open(ctx, log, secret, defaultClaim)
}

// open acquires node IDs within ctx. secret may be nil: the state
// directory's secret is used then, except with etcd, where every machine
// must share one. While it waits, it says so on log after a second and
// then every few seconds.
func (l *leaseFlags) open(ctx context.Context, log *slog.Logger, secret []byte, defaultClaim int64) (*leased, error) {
	if l.nodes != "" && l.etcd != "" {
		return nil, usagef("--nodes and --etcd exclude each other")
	}
	if l.claim < 0 || l.ttl < 0 {
		return nil, usagef("--claim and --etcd-ttl must not be negative")
	}
	switch {
	case l.nodes != "":
		first, last, err := parseNodeRange(l.nodes)
		if err != nil {
			return nil, err
		}
		if secret == nil {
			if secret, err = stateSecret(); err != nil {
				return nil, err
			}
			defer clear(secret)
		}
		g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
			Secret: secret,
			Source: randflake.StaticSource{FirstNode: first, LastNode: last},
			Logger: log,
		})
		if err != nil {
			return nil, err
		}
		return &leased{Leased: g, describe: "static"}, nil
	case l.etcd != "":
		if secret == nil {
			return nil, errors.New("--etcd needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET")
		}
		endpoints := strings.Split(l.etcd, ",")
		defer waitNotice(log, "still waiting for node IDs from etcd", "endpoints", l.etcd)()
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zapToSlog(log.With("component", "etcd client")),
		})
		if err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		g, err := etcdlease.NewLeased(ctx, secret, etcdlease.Config{
			Client: cli, Prefix: l.prefix, Nodes: l.claim, TTL: l.ttl, Logger: log,
		})
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("etcd at %s: %w", l.etcd, err)
		}
		return &leased{Leased: g, describe: "etcd", cleanup: func() { cli.Close() }}, nil
	}
	d, err := statedir.Open("")
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
		claim = defaultClaim
	}
	src, err := d.Source(statedir.Options{Nodes: claim, ExternalSecret: external, Logger: log})
	if err != nil {
		return nil, err
	}
	defer waitNotice(log, "still waiting for node IDs from the state directory", "dir", d.Path())()
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{Secret: secret, Source: src, Logger: log})
	if err != nil {
		return nil, err
	}
	return &leased{Leased: g, describe: "state directory " + d.Path()}, nil
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

// stateSecret returns the state directory's secret, creating the directory
// and the secret on first use.
func stateSecret() ([]byte, error) {
	d, err := statedir.Open("")
	if err != nil {
		return nil, err
	}
	return d.Secret(), nil
}

// parseNodeRange parses FIRST-LAST (or a single node ID).
func parseNodeRange(s string) (first, last int64, err error) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		b = a
	}
	first, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	last, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last > randflake.MaxNode || first > last {
		return 0, 0, usagef("--nodes %q: want FIRST-LAST with 0 <= FIRST <= LAST <= %d", s, randflake.MaxNode)
	}
	return first, last, nil
}
