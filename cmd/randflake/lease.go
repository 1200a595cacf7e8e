package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake"
)

// leaseFlags choose where the node IDs come from.
type leaseFlags struct {
	nodes string
	etcd  string
	state string
}

func (l *leaseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.nodes, "nodes", "", "use the static node-ID range FIRST-LAST (you guarantee no other process uses it)")
	fs.StringVar(&l.etcd, "etcd", "", "claim node IDs from etcd at these comma-separated endpoints")
	fs.StringVar(&l.state, "state-dir", "", "state directory for the embedded default ($RANDFLAKE_STATE_DIR, else a per-user directory)")
}

// leased is a sharded generator bound to its node-ID source.
type leased struct {
	*randflake.Sharded
	describe string
	release  func() error
	once     sync.Once
	err      error
}

// LeaseEnd returns the Unix second at which the lease ends.
func (g *leased) LeaseEnd() int64 {
	_, _, _, end := g.Lease()
	return end
}

// Describe names the node IDs in use, for logs.
func (g *leased) Describe() string { return g.describe }

// Close releases the node IDs; it may be called more than once.
func (g *leased) Close() error {
	g.once.Do(func() {
		if g.release != nil {
			g.err = g.release()
		}
	})
	return g.err
}

// wait sleeps until the next second, when new sequence numbers exist.
func (g *leased) wait() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now))
}

func (l *leaseFlags) open(e *env, secret []byte) (*leased, error) {
	if l.nodes != "" && l.etcd != "" {
		return nil, usagef("--nodes and --etcd exclude each other")
	}
	switch {
	case l.nodes != "":
		first, last, err := parseNodeRange(l.nodes)
		if err != nil {
			return nil, err
		}
		return openStatic(secret, first, last)
	case l.etcd != "":
		return openEtcd(e, secret, l.etcd)
	}
	return openState(e, secret, l.state)
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

// openStatic uses a fixed node range. It starts issuing at the next second,
// so that a process restarted within a second never reuses the second its
// predecessor issued in (assuming the clock does not step back).
func openStatic(secret []byte, first, last int64) (*leased, error) {
	start := time.Now().Unix() + 1
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret: secret, FirstNode: first, LastNode: last,
		LeaseStart: start, LeaseEnd: randflake.MaxTimestamp,
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Until(time.Unix(start, 0)))
	return &leased{Sharded: s, describe: fmt.Sprintf("static %d-%d", first, last)}, nil
}
