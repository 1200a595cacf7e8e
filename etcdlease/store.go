package etcdlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is a lease.BlockStore on etcd: the storage primitives of the
// lease engine (see the package documentation for its keys). Use it through
// a lease.BlockSource, as New does, and give each BlockSource a Store of
// its own.
type Store struct {
	cli     *clientv3.Client
	prefix  string
	layout  lease.BlockLayout
	horizon time.Duration // Config.Horizon, for the engine
	ttl     int64         // seconds
	promise time.Duration
	skew    time.Duration
	holder  string

	mu  sync.Mutex
	top lease.StoreIdentity // the highest position reported, with its cluster ID
}

// storeClaim is the Store's handle on claimed blocks.
type storeClaim struct {
	lease       clientv3.LeaseID
	value       string // the value of its claim keys
	first, last int64  // node IDs of its blocks
}

// maxSteps bounds how often Update runs fn again after another writer
// changed what it read.
const maxSteps = 8

// NewStore returns the Store that cfg describes. Config.Secret is not used
// (the records are the lease engine's) and may be empty.
func NewStore(cfg Config) (*Store, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Store{cli: c.Client, prefix: c.Prefix, ttl: int64(c.TTL / time.Second), promise: c.Promise, skew: c.MaxClockSkew, holder: c.Holder,
		layout: lease.BlockLayout{FirstNode: c.FirstNode, LastNode: c.LastNode, Size: c.Nodes}, horizon: c.Horizon}, nil
}

// Layout returns the store's division of node IDs into blocks.
func (s *Store) Layout() lease.BlockLayout { return s.layout }

func (s *Store) markerKey() string            { return s.prefix + "marker" }
func (s *Store) recordKey(first int64) string { return fmt.Sprintf("%srecord/%06d", s.prefix, first) }
func (s *Store) claimKey(node int64) string   { return fmt.Sprintf("%sclaim/%06d", s.prefix, node) }

// claimNode returns the node ID a claim key names.
func (s *Store) claimNode(key []byte) (int64, error) {
	name, ok := strings.CutPrefix(string(key), s.prefix+"claim/")
	n, err := strconv.ParseInt(name, 10, 64)
	if !ok || err != nil || len(name) != 6 || n < 0 || n > randflake.MaxNode {
		return 0, fmt.Errorf("%w: the key %q under the claims names no node ID; this package never writes it", ErrCorrupt, key)
	}
	return n, nil
}

// open is New's and NewLeased's work: the Store cfg describes, and the
// lease engine's settings on it.
func (cfg Config) open() (lease.BlockStore, lease.StoreConfig, error) {
	st, err := NewStore(cfg)
	if err != nil {
		return nil, lease.StoreConfig{}, err
	}
	return st, lease.StoreConfig{Name: "etcdlease", Secret: cfg.Secret, Layout: st.layout, Horizon: st.horizon, Logger: cfg.Logger, Shards: cfg.Shards, OnError: cfg.OnError}, nil
}

// margin is how long before the etcd lease can expire the holder stops.
func margin(ttl int64) time.Duration {
	return max(time.Duration(ttl)*time.Second/10, 200*time.Millisecond)
}

// endFor returns the last second a holder may use after a grant or
// keep-alive sent at t0 for ttl seconds: the last whole second that ends a
// margin before the etcd lease can expire.
func endFor(t0 time.Time, ttl int64) int64 {
	return t0.Add(time.Duration(ttl)*time.Second-margin(ttl)).Unix() - 1
}

// opTimeout bounds each request to etcd made for a held claim (a
// renewal, a promise, a release): a third of the TTL, so that one that
// cannot reach etcd returns while the lease still runs, in time to try
// again.
func (s *Store) opTimeout() time.Duration {
	return stretch(time.Duration(s.ttl) * time.Second / 3)
}

// stretchOp is nil in the product. The package's tests set it, before
// any store is made, to stretch opTimeout and stepTimeout by how much
// slower than on idle cores the machine runs them, so that a request is
// not cut short because a loaded test machine, not etcd, was slow.
var stretchOp func(time.Duration) time.Duration

func stretch(d time.Duration) time.Duration {
	if stretchOp != nil {
		return stretchOp(d)
	}
	return d
}

// stepTimeout bounds each request of a step: for a held claim,
// opTimeout; for a claim (or a step on no claim), a whole TTL, since no
// lease runs yet and a busy etcd should not make it fail.
func (s *Store) stepTimeout(c *storeClaim) time.Duration {
	if c != nil {
		return s.opTimeout()
	}
	return stretch(time.Duration(s.ttl) * time.Second)
}

// Info describes the store: claims end with their etcd lease, a TTL after
// the last grant or keep-alive, less a margin.
func (s *Store) Info() lease.StoreInfo {
	return lease.StoreInfo{
		Name:         "etcd " + s.prefix,
		EndFor:       func(t0 time.Time) int64 { return endFor(t0, s.ttl) },
		Promise:      s.promise,
		Durable:      true,
		MaxClockSkew: s.skew,
	}
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.Error(err) == rpctypes.ErrLeaseNotFound
}

// identityOf returns the store identity a response header reports.
func identityOf(h *etcdserverpb.ResponseHeader) lease.StoreIdentity {
	if h == nil {
		return lease.StoreIdentity{}
	}
	return lease.StoreIdentity{ID: strconv.FormatUint(h.ClusterId, 16), Position: uint64(max(h.Revision, 0))}
}

// note remembers the highest position seen.
func (s *Store) note(id lease.StoreIdentity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id.ID != s.top.ID || id.Position > s.top.Position {
		s.top = id
	}
}

// behind reports whether id is of the cluster last seen and lower than
// the highest position seen on it.
func (s *Store) behind(id lease.StoreIdentity) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return id.ID == s.top.ID && id.Position < s.top.Position
}

func (s *Store) held(h lease.StoreClaim) (*storeClaim, error) {
	c, ok := h.(*storeClaim)
	if !ok || c == nil {
		return nil, fmt.Errorf("etcdlease: %T is not a claim of this store", h)
	}
	return c, nil
}

// readState is what one consistent read found, besides the view.
type readState struct {
	view      *lease.StoreView
	markerRev int64           // the marker's mod revision, 0 if absent
	recordRev map[int64]int64 // each block's record's mod revision, 0 if absent
	lost      string          // why the held claim is no longer this store's
}

// read reads, in one transaction (one revision of etcd), the marker and
// the records and claims of every block (all) or of c's blocks.
func (s *Store) read(ctx context.Context, c *storeClaim, all bool) (*readState, error) {
	lo, hi := s.layout.FirstNode, s.layout.LastNode
	if !all {
		if c == nil {
			return nil, errors.New("etcdlease: internal error: a step on no blocks")
		}
		lo, hi = c.first, c.last
	}
	ops := []clientv3.Op{
		clientv3.OpGet(s.markerKey()),
		clientv3.OpGet(s.recordKey(lo), clientv3.WithRange(s.recordKey(hi+1))),
		// The claims with their values, which name their holders (for
		// status reports): a key and a line per held block.
		clientv3.OpGet(s.claimKey(lo), clientv3.WithRange(s.claimKey(hi+1))),
	}
	if c != nil {
		ops = append(ops, clientv3.OpGet(s.claimKey(c.first), clientv3.WithRange(s.claimKey(c.last+1))))
	}
	octx, cancel := context.WithTimeout(ctx, s.stepTimeout(c))
	resp, err := s.cli.Txn(octx).Then(ops...).Commit()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdlease: reading %s: %w", s.prefix, err)
	}
	rs := &readState{recordRev: map[int64]int64{}, view: &lease.StoreView{Identity: identityOf(resp.Header)}}
	rs.view.NextID = rs.view.Identity.ID
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		rs.view.Marker = kvs[0].Value
		rs.markerRev = kvs[0].ModRevision
	}
	records := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		records[string(kv.Key)] = kv
	}
	held := map[int64]bool{}     // first node ID of each block with a claim key
	holder := map[int64]string{} // and its holder, as its value names it
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		n, err := s.claimNode(kv.Key)
		if err != nil {
			return nil, err
		}
		if n >= lo && n <= hi {
			held[s.blockOf(n)] = true
			// "HOLDER lease ID token TOKEN": the holder, not the token.
			h, _, _ := strings.Cut(string(kv.Value), " lease ")
			holder[s.blockOf(n)] = h
		}
	}
	for f := s.blockOf(lo); f <= hi; f += s.layout.Size {
		b := lease.BlockState{First: f, Last: f + s.layout.Size - 1, Held: held[f], Holder: holder[f]}
		if kv, ok := records[s.recordKey(f)]; ok {
			b.Record = kv.Value
			if b.Record == nil {
				b.Record = []byte{} // an empty value is a record, not none
			}
			rs.recordRev[f] = kv.ModRevision
		}
		rs.view.Blocks = append(rs.view.Blocks, b)
	}
	if c != nil {
		mine := map[string]bool{}
		for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
			if string(kv.Value) == c.value {
				mine[string(kv.Key)] = true
			}
		}
		for f := c.first; f <= c.last; f += s.layout.Size {
			if !mine[s.claimKey(f)] {
				rs.lost = fmt.Sprintf("the claim on node IDs %d-%d is gone (its etcd lease %x expired, or its key was deleted)", c.first, c.last, int64(c.lease))
				break
			}
		}
	}
	s.note(rs.view.Identity)
	return rs, nil
}

// blockOf returns the first node ID of the block holding node n.
func (s *Store) blockOf(n int64) int64 {
	return s.layout.FirstNode + (n-s.layout.FirstNode)/s.layout.Size*s.layout.Size
}

// Update runs one atomic step (see lease.BlockStore): a consistent read
// of the marker and the blocks, fn, and one transaction that applies fn's
// changes only if the marker and the records written are as read, the
// blocks to claim have no claim key, and the held claim's keys are still
// this store's. A claim is attached to a new etcd lease, granted for the
// TTL; a release deletes the claim keys and then revokes the etcd lease.
func (s *Store) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (_ lease.StoreClaim, err error) {
	var c *storeClaim
	if held != nil {
		if c, err = s.held(held); err != nil {
			return nil, err
		}
	}
	var fresh *storeClaim // a claim being made, its etcd lease granted
	defer func() {
		if fresh != nil && err != nil {
			s.revoke(fresh.lease)
		}
	}()
	for step := 0; step < maxSteps; step++ {
		rs, err := s.read(ctx, c, all)
		if err != nil {
			return held, err
		}
		if rs.lost != "" {
			return held, fmt.Errorf("etcdlease: %s: %w", rs.lost, randflake.ErrLeaseLost)
		}
		ch, err := fn(rs.view)
		if err != nil {
			return held, err
		}
		if ch == nil {
			ch = &lease.StoreChanges{}
		}
		first, last, err := s.checkChanges(rs, c, ch)
		if err != nil {
			return held, err
		}
		if len(ch.Claim) > 0 && fresh == nil {
			if fresh, err = s.grant(ctx); err != nil {
				return held, err
			}
		}
		if len(ch.Claim) > 0 {
			fresh.first, fresh.last = first, last
		}
		done, err := s.apply(ctx, rs, c, fresh, ch)
		if err != nil || !done {
			if err != nil {
				return held, err
			}
			continue
		}
		if ch.Release {
			s.revoke(c.lease)
		}
		if len(ch.Claim) > 0 {
			return fresh, nil
		}
		if fresh != nil {
			s.revoke(fresh.lease)
			fresh = nil
		}
		return held, nil
	}
	return held, fmt.Errorf("etcdlease: %s changed under %d steps in a row: %w", s.prefix, maxSteps, lease.ErrStoreConflict)
}

// checkChanges checks what fn returned against what was read, and returns
// the node IDs of the blocks to claim.
func (s *Store) checkChanges(rs *readState, c *storeClaim, ch *lease.StoreChanges) (first, last int64, err error) {
	read := map[int64]bool{}
	for _, b := range rs.view.Blocks {
		read[b.First] = true
	}
	for f, rec := range ch.Records {
		if !read[f] {
			return 0, 0, fmt.Errorf("etcdlease: internal error: a record for node IDs from %d, a block not read", f)
		}
		if len(rec) == 0 {
			return 0, 0, fmt.Errorf("etcdlease: internal error: an empty record for node IDs from %d", f)
		}
	}
	if ch.Release && c == nil {
		return 0, 0, errors.New("etcdlease: internal error: a release without a claim")
	}
	if len(ch.Claim) == 0 {
		return 0, 0, nil
	}
	if c != nil {
		return 0, 0, errors.New("etcdlease: internal error: a claim while holding one")
	}
	first = ch.Claim[0]
	for i, f := range ch.Claim {
		if !read[f] || f != first+int64(i)*s.layout.Size {
			return 0, 0, fmt.Errorf("etcdlease: internal error: blocks %v to claim are not consecutive blocks read", ch.Claim)
		}
	}
	return first, first + int64(len(ch.Claim))*s.layout.Size - 1, nil
}

// grant grants the etcd lease of a new claim.
func (s *Store) grant(ctx context.Context) (*storeClaim, error) {
	octx, cancel := context.WithTimeout(ctx, s.stepTimeout(nil))
	defer cancel()
	g, err := s.cli.Grant(octx, s.ttl)
	if err != nil {
		return nil, fmt.Errorf("etcdlease: granting an etcd lease: %w", err)
	}
	if g.TTL < s.ttl {
		s.revoke(g.ID)
		return nil, fmt.Errorf("etcdlease: etcd granted a lease of %ds, not the %ds asked for", g.TTL, s.ttl)
	}
	token := make([]byte, 8)
	rand.Read(token)
	return &storeClaim{lease: g.ID, value: fmt.Sprintf("%s lease %x token %s", s.holder, int64(g.ID), hex.EncodeToString(token))}, nil
}

// apply writes ch in one transaction conditioned on what was read. It
// reports whether the transaction was applied; when it was not because
// the held claim is gone or a block to claim is held, the error says so.
func (s *Store) apply(ctx context.Context, rs *readState, c, fresh *storeClaim, ch *lease.StoreChanges) (bool, error) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.markerKey()), "=", rs.markerRev)}
	var ops, orElse []clientv3.Op
	if ch.Marker != nil {
		ops = append(ops, clientv3.OpPut(s.markerKey(), string(ch.Marker)))
	}
	for f, rec := range ch.Records {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.recordKey(f)), "=", rs.recordRev[f]))
		ops = append(ops, clientv3.OpPut(s.recordKey(f), string(rec)))
	}
	if c != nil {
		for f := c.first; f <= c.last; f += s.layout.Size {
			cmps = append(cmps, clientv3.Compare(clientv3.Value(s.claimKey(f)), "=", c.value))
			if ch.Release {
				ops = append(ops, clientv3.OpDelete(s.claimKey(f)))
			}
		}
		orElse = append(orElse, clientv3.OpGet(s.claimKey(c.first), clientv3.WithRange(s.claimKey(c.last+1))))
	}
	if len(ch.Claim) > 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.claimKey(fresh.first)), "=", 0).WithRange(s.claimKey(fresh.last+1)))
		for _, f := range ch.Claim {
			ops = append(ops, clientv3.OpPut(s.claimKey(f), fresh.value, clientv3.WithLease(fresh.lease)))
		}
		orElse = append(orElse, clientv3.OpGet(s.claimKey(fresh.first), clientv3.WithRange(s.claimKey(fresh.last+1)), clientv3.WithCountOnly()))
	}
	if len(ops) == 0 {
		return true, nil
	}
	octx, cancel := context.WithTimeout(ctx, s.stepTimeout(c))
	resp, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	cancel()
	if err != nil {
		return false, fmt.Errorf("etcdlease: writing to %s: %w", s.prefix, err)
	}
	s.note(identityOf(resp.Header))
	if resp.Succeeded {
		return true, nil
	}
	i := 0
	if c != nil {
		mine := 0
		for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
			if string(kv.Value) == c.value {
				mine++
			}
		}
		if int64(mine) != (c.last-c.first+1)/s.layout.Size {
			return false, fmt.Errorf("etcdlease: the claim on node IDs %d-%d is gone (its etcd lease %x expired, or its key was deleted): %w",
				c.first, c.last, int64(c.lease), randflake.ErrLeaseLost)
		}
		i++
	}
	if len(ch.Claim) > 0 && resp.Responses[i].GetResponseRange().Count > 0 {
		return false, fmt.Errorf("etcdlease: node IDs %d-%d: %w", fresh.first, fresh.last, lease.ErrBlockHeld)
	}
	return false, nil
}

// revoke revokes an etcd lease, best effort: unrevoked, it expires.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout())
	defer cancel()
	s.cli.Revoke(ctx, id)
}

// Renew sends one keep-alive for the claim's etcd lease, within a third of
// the TTL, and reports the cluster ID and revision of its answer. An etcd
// lease that is gone is ErrLeaseLost, reported with the identity a read
// then finds (if etcd answers it). A revision lower than one seen
// before is checked with a linearizable read first (a keep-alive answered
// by a member that lags behind reports an older revision), and reported
// only if the read confirms it.
func (s *Store) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	c, err := s.held(held)
	if err != nil {
		return lease.StoreIdentity{}, err
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	ka, err := s.cli.KeepAliveOnce(octx, c.lease)
	if isLeaseNotFound(err) {
		// The identity goes with the loss, when etcd answers, so that
		// the holder can tell an etcd that went back (a restore from
		// before the lease was granted) from a lease that lapsed.
		var id lease.StoreIdentity
		if resp, err := s.cli.Get(octx, s.markerKey(), clientv3.WithCountOnly()); err == nil {
			id = identityOf(resp.Header)
		}
		return id, fmt.Errorf("etcdlease: the etcd lease %x of node IDs %d-%d expired: %w", int64(c.lease), c.first, c.last, randflake.ErrLeaseLost)
	}
	if err != nil {
		return lease.StoreIdentity{}, fmt.Errorf("etcdlease: keep-alive of node IDs %d-%d: %w", c.first, c.last, err)
	}
	if ka.TTL < s.ttl {
		return lease.StoreIdentity{}, fmt.Errorf("etcdlease: etcd renewed the lease for %ds, not %ds", ka.TTL, s.ttl)
	}
	id := identityOf(ka.ResponseHeader)
	if s.behind(id) {
		resp, err := s.cli.Get(octx, s.markerKey(), clientv3.WithCountOnly())
		if err != nil {
			return lease.StoreIdentity{}, fmt.Errorf("etcdlease: confirming the revision of %s: %w", s.prefix, err)
		}
		id = identityOf(resp.Header)
	}
	s.note(id)
	return id, nil
}
