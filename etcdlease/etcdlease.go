// Package etcdlease hands out Randflake node IDs to the processes of a
// fleet through etcd, a coordination service the fleet already runs, so no
// two processes use a node ID at the same time and none reuses a second
// another may have used on it.
//
// Each process claims a range of Config.Nodes node IDs under a key prefix:
//
//	PREFIX claim/NNNNNN   holder of node ID NNNNNN, attached to the holder's
//	                      etcd lease (TTL, kept alive by renewals)
//	PREFIX used/NNNNNN    newest second any holder may have put in an ID on
//	                      it (no lease: it outlives its holders)
//
// A claim is a compare-and-swap transaction: it succeeds only if none of
// the range's claim keys exists, and reads the range's used keys in the same
// transaction. The lease starts strictly after the newest of them. Before
// the holder issues an ID on a second, it has recorded a promise in the used
// keys covering that second (a compare-and-swap on its own claim), so
// whoever claims the node IDs next starts after every second the holder may
// have used, even if the holder crashed and never wrote again, and even if
// the next holder's clock is behind.
//
// The generator's lease end follows the etcd lease. Each renewal sends one
// keep-alive; if it succeeds, the etcd lease cannot expire, and nobody else
// can claim the node IDs, before t0 + TTL, where t0 is the time the
// keep-alive was sent. The lease end is set to the last whole second ending
// before t0 + TTL - margin (margin: a tenth of the TTL, at least 200ms), so
// when keep-alives fail (etcd down, a network partition) the process stops
// issuing IDs before another process could claim its node IDs. Renewals
// run a third of the way through the remaining validity, and a failed one
// is retried until the lease's end.
//
// A clean release records the newest second actually used and deletes the
// claim in one transaction, then revokes the etcd lease: the node IDs are
// free at once, and the next holder starts right after that second. After
// a crash the claim disappears when the etcd lease expires, one TTL after
// the last keep-alive, and the next holder starts after the crashed
// holder's promise. Claims never outlive their etcd lease, so node IDs are
// reused, not leaked. Promises are written ahead (Config.Promise, three
// TTLs by default) rather than on every renewal, to spare etcd writes; a
// claimant prefers node IDs whose recorded second has passed, and waits
// (keeping its claim alive) only when all free ones were used by a holder
// that crashed less than Promise ago.
//
// # Assumptions
//
//   - etcd is linearizable (the default) and its leases expire no earlier
//     than TTL after the keep-alive that was sent at t0, measured by a clock
//     that runs at the same rate as the holder's (etcd only ever extends
//     leases, for example on leader change).
//   - The time bound (stopping before another claim is possible) assumes
//     the holder's wall clock does not step back while it runs. If it does,
//     the holder may issue IDs after its etcd lease expired in real time,
//     but only on seconds it promised; they still cannot collide, because
//     the next holder starts after the promise. Uniqueness rests on the
//     recorded promises, not on clocks agreeing across machines.
//   - Every process of the fleet uses the same prefix, secret and node
//     range, and nothing else writes under the prefix. etcd's history is
//     compacted (as in any production etcd): each promise is a write.
package etcdlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/randflake/randflake"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults and limits of Config.
const (
	DefaultPrefix = "/randflake/"    // key prefix of the claims
	DefaultNodes  = 16               // node IDs per process: 2 million IDs per second
	DefaultTTL    = 10 * time.Second // etcd lease time to live
	// MaxNodes is the largest claim: a claim's transaction has one
	// operation per node ID, and etcd allows 128 by default.
	MaxNodes = 64
)

// Errors of etcd leases.
var (
	// ErrNoFreeNodes: every range of node IDs is claimed.
	ErrNoFreeNodes = errors.New("etcdlease: every node-ID range is claimed")
	// ErrClockBehind: the free node IDs were used up to a second too far
	// ahead of this machine's clock to wait for.
	ErrClockBehind = errors.New("etcdlease: the node IDs' recorded second is too far ahead of this machine's clock")
	// ErrCorrupt: a used key holds a value this package never writes.
	ErrCorrupt = errors.New("etcdlease: corrupt used second")
)

// Config configures a Source.
type Config struct {
	// Client is the etcd client. The Source does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix of the claims (DefaultPrefix if empty).
	Prefix string
	// Nodes is the number of node IDs a process claims, 1 to MaxNodes
	// (0: DefaultNodes). Each issues up to 131,072 IDs per second. Use the
	// same power of two across the fleet: ranges are aligned to it.
	Nodes int64
	// FirstNode and LastNode bound the node IDs the fleet uses. Zero for
	// both means all of them, 0 to 131071.
	FirstNode, LastNode int64
	// TTL is the etcd lease's time to live, in whole seconds, at least 3s
	// (0: DefaultTTL). A crashed process's node IDs are free again one TTL
	// after its last keep-alive.
	TTL time.Duration
	// Promise is how far ahead of the clock a holder records the seconds
	// it may use (0: three TTLs; at least one TTL). Longer means fewer etcd
	// writes; shorter means a claimant waits less for node IDs whose holder
	// crashed, when no other node IDs are free.
	Promise time.Duration
	// Holder describes this process in its claims (default: host name and
	// process ID).
	Holder string

	// Shards, OnError and Logger are passed to randflake.LeasedConfig by
	// NewLeased: Logger receives the lease's events, and the source's own
	// waits for a previous holder's promise (nil: no logs).
	Shards  int
	OnError func(error)
	Logger  *slog.Logger
}

// Source is a randflake.LeaseSource on etcd. It holds at most one lease at
// a time; use one Source per generator. It is safe for concurrent use.
type Source struct {
	cli     *clientv3.Client
	prefix  string
	nodes   int64
	first   int64
	last    int64
	ttl     int64 // seconds
	promise int64 // seconds
	holder  string
	log     *slog.Logger // nil: no logs

	mu    sync.Mutex
	claim *claim
}

// claim is a held lease.
type claim struct {
	lease    randflake.Lease
	id       clientv3.LeaseID
	value    string // the value of its claim keys
	ttl      int64  // granted TTL, seconds
	promised int64  // the second recorded in its used keys
}

// New returns a lease source on etcd.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("etcdlease: Config.Client is nil")
	}
	s := &Source{cli: cfg.Client, prefix: cfg.Prefix, nodes: cfg.Nodes, first: cfg.FirstNode, last: cfg.LastNode, holder: cfg.Holder, log: cfg.Logger}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.nodes == 0 {
		s.nodes = DefaultNodes
	}
	if s.first == 0 && s.last == 0 {
		s.last = randflake.MaxNode
	}
	if err := randflake.CheckNodeRange(s.first, s.last); err != nil {
		return nil, fmt.Errorf("etcdlease: %w", err)
	}
	if s.nodes < 1 || s.nodes > MaxNodes || s.nodes > s.last-s.first+1 {
		return nil, fmt.Errorf("etcdlease: %d node IDs per process: want 1 to %d, within the range %d-%d", s.nodes, MaxNodes, s.first, s.last)
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	s.ttl = int64((ttl + time.Second - 1) / time.Second)
	if s.ttl < 3 {
		return nil, fmt.Errorf("etcdlease: TTL %v: want at least 3s", cfg.TTL)
	}
	p := cfg.Promise
	if p == 0 {
		p = 3 * time.Duration(s.ttl) * time.Second
	}
	s.promise = max(int64((p+time.Second-1)/time.Second), s.ttl)
	if s.holder == "" {
		h, _ := os.Hostname()
		s.holder = fmt.Sprintf("%s pid %d", h, os.Getpid())
	}
	return s, nil
}

// NewLeased returns a generator on node IDs claimed from etcd.
func NewLeased(ctx context.Context, secret []byte, cfg Config) (*randflake.Leased, error) {
	src, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:  secret,
		Source:  src,
		Shards:  cfg.Shards,
		OnError: cfg.OnError,
		Logger:  cfg.Logger,
	})
}

func (s *Source) claimKey(n int64) string { return fmt.Sprintf("%sclaim/%06d", s.prefix, n) }
func (s *Source) usedKey(n int64) string  { return fmt.Sprintf("%sused/%06d", s.prefix, n) }

// margin is how long before the etcd lease can expire the generator stops.
func margin(ttl int64) time.Duration {
	return max(time.Duration(ttl)*time.Second/10, 200*time.Millisecond)
}

// endFor returns the last second a holder may use after a keep-alive sent
// at t0 granted ttl seconds: the last whole second that ends margin before
// the etcd lease can expire.
func endFor(t0 time.Time, ttl int64) int64 {
	return t0.Add(time.Duration(ttl)*time.Second-margin(ttl)).Unix() - 1
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.Error(err) == rpctypes.ErrLeaseNotFound
}

// Acquire claims Config.Nodes node IDs: the first free range whose
// recorded second has passed, or else the free range whose recorded second
// is the oldest. The lease starts after the recorded second; if that is
// beyond what the etcd lease covers yet, Acquire keeps the claim alive and
// waits, within ctx.
func (s *Source) Acquire(ctx context.Context) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim != nil {
		return randflake.Lease{}, errors.New("etcdlease: the source already holds a lease")
	}
	t0 := time.Now()
	grant, err := s.cli.Grant(ctx, s.ttl)
	if err != nil {
		return randflake.Lease{}, fmt.Errorf("etcdlease: granting a lease: %w", err)
	}
	c := &claim{id: grant.ID, ttl: grant.TTL}
	token := make([]byte, 8)
	rand.Read(token)
	c.value = fmt.Sprintf("%s lease %x token %s", s.holder, int64(grant.ID), hex.EncodeToString(token))
	lease, err := s.acquire(ctx, c, t0)
	if err != nil {
		s.revoke(c.id)
		return randflake.Lease{}, err
	}
	c.lease = lease
	s.claim = c
	return lease, nil
}

func (s *Source) acquire(ctx context.Context, c *claim, t0 time.Time) (randflake.Lease, error) {
	for attempt := 0; attempt < 5; attempt++ {
		slots, err := s.freeSlots(ctx)
		if err != nil {
			return randflake.Lease{}, err
		}
		for _, first := range slots {
			last := first + s.nodes - 1
			ops := make([]clientv3.Op, 0, s.nodes+1)
			for n := first; n <= last; n++ {
				ops = append(ops, clientv3.OpPut(s.claimKey(n), c.value, clientv3.WithLease(c.id)))
			}
			ops = append(ops, clientv3.OpGet(s.usedKey(first), clientv3.WithRange(s.usedKey(last+1))))
			resp, err := s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(s.claimKey(first)), "=", 0).WithRange(s.claimKey(last + 1))).
				Then(ops...).
				Commit()
			if err != nil {
				return randflake.Lease{}, fmt.Errorf("etcdlease: claiming node IDs %d-%d: %w", first, last, err)
			}
			if !resp.Succeeded {
				continue // claimed by another process meanwhile
			}
			used := int64(randflake.Epoch)
			for _, kv := range resp.Responses[len(ops)-1].GetResponseRange().Kvs {
				v, err := parseUsed(kv.Key, kv.Value)
				if err != nil {
					return randflake.Lease{}, err
				}
				used = max(used, v)
			}
			if used >= randflake.MaxTimestamp {
				s.dropClaim(ctx, c, first, last)
				continue // used up for good
			}
			l := randflake.Lease{FirstNode: first, LastNode: last, Start: used + 1}
			l.End = endFor(t0, c.ttl)
			if l.End < l.Start {
				if s.log != nil {
					s.log.Info("etcdlease: waiting for the previous holder's promise to pass",
						"nodes", fmt.Sprintf("%d-%d", first, last), "start", time.Unix(l.Start, 0).UTC().Format(time.RFC3339))
				}
				if l.End, err = s.waitFor(ctx, c, l.Start); err != nil {
					return randflake.Lease{}, err
				}
			}
			c.lease = l
			if err := s.recordPromise(ctx, c, l.End); err != nil {
				return randflake.Lease{}, err
			}
			return l, nil
		}
	}
	return randflake.Lease{}, fmt.Errorf("%w (%d node IDs each, in %d-%d under %q)", ErrNoFreeNodes, s.nodes, s.first, s.last, s.prefix)
}

// freeSlots returns the first node IDs of the unclaimed ranges: those
// whose recorded second has passed first, in order, then the others by
// their recorded second.
func (s *Source) freeSlots(ctx context.Context) ([]int64, error) {
	claims, err := s.cli.Get(ctx, s.claimKey(s.first), clientv3.WithRange(s.claimKey(s.last+1)), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdlease: reading claims: %w", err)
	}
	taken := map[string]bool{}
	for _, kv := range claims.Kvs {
		taken[string(kv.Key)] = true
	}
	usedResp, err := s.cli.Get(ctx, s.usedKey(s.first), clientv3.WithRange(s.usedKey(s.last+1)))
	if err != nil {
		return nil, fmt.Errorf("etcdlease: reading used seconds: %w", err)
	}
	used := map[string]int64{}
	for _, kv := range usedResp.Kvs {
		v, err := parseUsed(kv.Key, kv.Value)
		if err != nil {
			return nil, err
		}
		used[string(kv.Key)] = v
	}
	type slot struct{ first, until int64 }
	var slots []slot
outer:
	for first := s.first; first+s.nodes-1 <= s.last; first += s.nodes {
		sl := slot{first: first}
		for n := first; n < first+s.nodes; n++ {
			if taken[s.claimKey(n)] {
				continue outer
			}
			sl.until = max(sl.until, used[s.usedKey(n)])
		}
		if sl.until < randflake.MaxTimestamp {
			slots = append(slots, sl)
		}
	}
	now := time.Now().Unix()
	sort.SliceStable(slots, func(i, j int) bool {
		ri, rj := slots[i].until < now, slots[j].until < now
		if ri != rj {
			return ri
		}
		return !ri && slots[i].until < slots[j].until
	})
	firsts := make([]int64, len(slots))
	for i, sl := range slots {
		firsts[i] = sl.first
	}
	return firsts, nil
}

// parseUsed reads the value of a used key: a second in the lifetime of
// Randflake IDs. Anything else was not written by this package; it is
// refused rather than guessed at.
func parseUsed(key, value []byte) (int64, error) {
	v, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil || v < randflake.Epoch || v > randflake.MaxTimestamp {
		return 0, fmt.Errorf("%w: %s holds %.30q, not a second from %d to %d; remove it only if no process can have used its node ID in the last promise horizon",
			ErrCorrupt, key, value, int64(randflake.Epoch), int64(randflake.MaxTimestamp))
	}
	return v, nil
}

// dropClaim deletes c's claim keys on first..last after a claim that
// cannot be used.
func (s *Source) dropClaim(ctx context.Context, c *claim, first, last int64) {
	s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(s.claimKey(first)), "=", c.value)).
		Then(clientv3.OpDelete(s.claimKey(first), clientv3.WithRange(s.claimKey(last+1)))).
		Commit()
}

// waitFor keeps c's etcd lease alive until it covers second start, and
// returns the lease end then.
func (s *Source) waitFor(ctx context.Context, c *claim, start int64) (int64, error) {
	for {
		if start-time.Now().Unix() > s.promise+c.ttl {
			return 0, fmt.Errorf("%w: node IDs used up to %s", ErrClockBehind, time.Unix(start-1, 0).UTC().Format(time.RFC3339))
		}
		// Sleep until a keep-alive would cover start, or a third of the
		// TTL, whichever comes first.
		d := time.Until(time.Unix(start+1, 0).Add(margin(c.ttl) - time.Duration(c.ttl)*time.Second))
		d = min(max(d, 10*time.Millisecond), time.Duration(c.ttl)*time.Second/3)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
		t0 := time.Now()
		ka, err := s.keepAlive(ctx, c)
		if err != nil {
			if errors.Is(err, randflake.ErrLeaseLost) || ctx.Err() != nil {
				return 0, err
			}
			continue
		}
		if end := endFor(t0, ka.TTL); end >= start {
			return end, nil
		}
	}
}

// keepAlive sends one keep-alive for c's etcd lease, within a third of the
// TTL.
func (s *Source) keepAlive(ctx context.Context, c *claim) (*clientv3.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(c.ttl)*time.Second/3)
	defer cancel()
	ka, err := s.cli.KeepAliveOnce(ctx, c.id)
	if isLeaseNotFound(err) {
		return nil, fmt.Errorf("etcdlease: etcd lease %x expired: %w", int64(c.id), randflake.ErrLeaseLost)
	}
	if err != nil {
		return nil, fmt.Errorf("etcdlease: keep-alive: %w", err)
	}
	return ka, nil
}

// ifClaimed is the condition that every claim key of c is c's.
func (s *Source) ifClaimed(c *claim) []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, 0, c.lease.Nodes())
	for n := c.lease.FirstNode; n <= c.lease.LastNode; n++ {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(s.claimKey(n)), "=", c.value))
	}
	return cmps
}

// recordPromise records, in c's used keys, that no ID will carry a second after
// max(end, now + Promise), if c still holds its claim.
func (s *Source) recordPromise(ctx context.Context, c *claim, end int64) error {
	p := min(max(end, time.Now().Unix()+s.promise), randflake.MaxTimestamp)
	ops := make([]clientv3.Op, 0, c.lease.Nodes())
	v := strconv.FormatInt(p, 10)
	for n := c.lease.FirstNode; n <= c.lease.LastNode; n++ {
		ops = append(ops, clientv3.OpPut(s.usedKey(n), v))
	}
	resp, err := s.cli.Txn(ctx).If(s.ifClaimed(c)...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("etcdlease: recording used seconds: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdlease: claim on node IDs %d-%d is gone: %w", c.lease.FirstNode, c.lease.LastNode, randflake.ErrLeaseLost)
	}
	c.promised = p
	return nil
}

// held returns the claim of l, or an error.
func (s *Source) held(l randflake.Lease) (*claim, error) {
	c := s.claim
	if c == nil || !c.lease.SameClaim(l) {
		return nil, fmt.Errorf("etcdlease: lease on %v is not held by this source", l)
	}
	return c, nil
}

// Renew sends a keep-alive and moves the lease end to margin before the
// etcd lease can expire, recording a new promise first when the end would
// pass the last one. An expired etcd lease or a claim taken away is
// ErrLeaseLost; other errors (etcd unreachable) are transient.
func (s *Source) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return randflake.Lease{}, err
	}
	t0 := time.Now()
	ka, err := s.keepAlive(ctx, c)
	if err != nil {
		if errors.Is(err, randflake.ErrLeaseLost) {
			s.claim = nil
		}
		return randflake.Lease{}, err
	}
	end := endFor(t0, ka.TTL)
	if end <= c.lease.End {
		return c.lease, nil
	}
	if end > c.promised {
		pctx, cancel := context.WithTimeout(ctx, time.Duration(c.ttl)*time.Second/3)
		err := s.recordPromise(pctx, c, end)
		cancel()
		if errors.Is(err, randflake.ErrLeaseLost) {
			s.revoke(c.id)
			s.claim = nil
		}
		if err != nil {
			return randflake.Lease{}, err
		}
	}
	c.lease.End = end
	return c.lease, nil
}

// Release records the newest second used (at least l.Start-1) and deletes
// the claim in one transaction, then revokes the etcd lease. If etcd cannot
// be reached, the claim expires with the etcd lease and the last promise
// stands.
func (s *Source) Release(ctx context.Context, l randflake.Lease, lastUsed int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return err
	}
	s.claim = nil
	v := strconv.FormatInt(min(max(lastUsed, c.lease.Start-1, randflake.Epoch), c.promised), 10)
	ops := make([]clientv3.Op, 0, c.lease.Nodes()+1)
	for n := c.lease.FirstNode; n <= c.lease.LastNode; n++ {
		ops = append(ops, clientv3.OpPut(s.usedKey(n), v))
	}
	ops = append(ops, clientv3.OpDelete(s.claimKey(c.lease.FirstNode), clientv3.WithRange(s.claimKey(c.lease.LastNode+1))))
	_, err = s.cli.Txn(ctx).If(s.ifClaimed(c)...).Then(ops...).Commit()
	if err != nil {
		err = fmt.Errorf("etcdlease: releasing node IDs %d-%d: %w", c.lease.FirstNode, c.lease.LastNode, err)
	}
	if _, rerr := s.cli.Revoke(ctx, c.id); rerr != nil && err == nil && !isLeaseNotFound(rerr) {
		err = fmt.Errorf("etcdlease: revoking lease %x: %w", int64(c.id), rerr)
	}
	return err
}

// revoke revokes an etcd lease, best effort: unrevoked, it expires.
func (s *Source) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.ttl)*time.Second/3)
	defer cancel()
	s.cli.Revoke(ctx, id)
}
