package leasetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// MemBackend is an in-memory lease store shared by several processes, the
// reference a store's author can copy: what a database server is to its
// clients. Each process opens its own handle, a MemStore, which is the
// lease.BlockStore. The backend keeps, per block of node IDs, the
// record BlockSource wrote and the claim on it (which handle, until
// when), plus the fleet marker, an identity and a position (a counter of
// its writes); its methods play the faults an operator or a failure
// inflicts on a real store.
//
// It is deliberately simple: one mutex, held for a whole Update, so that a
// step reads and applies with no one in between and conflicts cannot
// happen.
type MemBackend struct {
	layout lease.BlockLayout

	mu       sync.Mutex
	marker   []byte
	records  map[int64][]byte  // by the block's first node ID
	claims   map[int64]memHold // by the block's first node ID
	fresh    bool              // created empty, no marker written since
	gen      int               // identity generation: changes on a failover
	position uint64            // writes applied
	addr     string            // where Serve listens, if it was called
}

// memClaim is one claim on consecutive blocks, the handle Update returns.
type memClaim struct {
	owner  *MemStore
	blocks []int64
}

// memHold is a block's claim and when it lapses (zero: when its owner is
// killed, as a lock dies with its process).
type memHold struct {
	claim   *memClaim
	expires time.Time
}

// live reports whether h holds its block at now.
func (h memHold) live(now time.Time) bool {
	if h.claim == nil {
		return false
	}
	if h.expires.IsZero() {
		return !h.claim.owner.killed.Load()
	}
	return now.Before(h.expires)
}

// NewMemBackend returns an empty store for the fleet layout, created by
// its own initialisation (StoreView.Fresh until a marker is written).
func NewMemBackend(layout lease.BlockLayout) (*MemBackend, error) {
	if err := layout.Check(); err != nil {
		return nil, err
	}
	return &MemBackend{layout: layout, records: map[int64][]byte{}, claims: map[int64]memHold{}, fresh: true, gen: 1}, nil
}

// Layout returns the backend's layout.
func (b *MemBackend) Layout() lease.BlockLayout { return b.layout }

// MemOptions configures a MemStore handle.
type MemOptions struct {
	// TTL is how long a claim lasts after it was made or last renewed,
	// by the real clock: 0, or at least 1.5 s (a lease must hold a whole
	// second). 0: claims never lapse while their handle lives (file
	// locks) and Kill frees them, as a process's death frees its locks.
	TTL time.Duration
	// Promise is StoreInfo.Promise, how far ahead holders record the
	// seconds they may use (0: TTL). It must be at least TTL.
	Promise time.Duration
	// Layout is the layout of the process (zero: the backend's); a
	// handle reads and claims the blocks of its own layout, as a process
	// configured for another fleet would.
	Layout lease.BlockLayout
	// Addr, if set, is the backend's address (MemBackend.Serve), or a
	// Proxy's in front of it: before each call the handle makes a round
	// trip to it, and fails with ErrUnreachable if that fails, as a
	// store's client does when the network fails it.
	Addr string
}

// Open returns a new handle on the backend, as a new process opens its
// own connection.
func (b *MemBackend) Open(o MemOptions) (*MemStore, error) {
	if o.Layout == (lease.BlockLayout{}) {
		o.Layout = b.layout
	}
	if err := o.Layout.Check(); err != nil {
		return nil, err
	}
	if o.Promise == 0 {
		o.Promise = o.TTL
	}
	switch {
	case o.TTL < 0 || (o.TTL > 0 && o.TTL < 1500*time.Millisecond):
		return nil, fmt.Errorf("leasetest: a TTL of %v: want 0 (claims that never lapse) or at least 1.5s", o.TTL)
	case o.Promise <= 0:
		return nil, errors.New("leasetest: a store whose claims never lapse needs a positive Promise")
	case o.Promise < o.TTL:
		return nil, fmt.Errorf("leasetest: the promise %v does not cover the TTL %v", o.Promise, o.TTL)
	}
	return &MemStore{b: b, o: o}, nil
}

// MemStore is one process's handle on a MemBackend: a lease.BlockStore.
// Its claims lapse TTL after they were last made or renewed, by the real
// clock; StoreInfo.EndFor(t0) is the last whole second ending a margin
// (a tenth of the TTL) before t0 + TTL.
type MemStore struct {
	b           *MemBackend
	o           MemOptions
	killed      atomic.Bool
	unreachable atomic.Bool
	link        memLink // the network path to the backend, if o.Addr is set
}

// ErrUnreachable is the transient error of a handle made unreachable.
var ErrUnreachable = errors.New("leasetest: the store cannot be reached")

// errKilled is the error of every call of a killed handle.
var errKilled = errors.New("leasetest: the handle was killed")

// Backend returns the backend of the handle.
func (s *MemStore) Backend() *MemBackend { return s.b }

// Info describes the handle's claims.
func (s *MemStore) Info() lease.StoreInfo {
	info := lease.StoreInfo{Name: "memory store", Promise: s.o.Promise, Durable: true}
	if ttl := s.o.TTL; ttl > 0 {
		margin := ttl / 10
		info.EndFor = func(t0 time.Time) int64 { return t0.Add(ttl-margin).Unix() - 1 }
	}
	return info
}

// Kill stops the handle as its process's crash would: every later call
// fails and changes nothing; its claims stay until they lapse, or, if
// they never lapse (TTL 0), are freed.
func (s *MemStore) Kill() { s.killed.Store(true) }

// SetUnreachable makes every call of the handle fail with ErrUnreachable
// (a transient error: the claims stay valid until they lapse), or, with
// false, succeed again.
func (s *MemStore) SetUnreachable(on bool) { s.unreachable.Store(on) }

func (s *MemStore) usable(ctx context.Context) error {
	switch {
	case s.killed.Load():
		return errKilled
	case s.unreachable.Load():
		return ErrUnreachable
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.link.reach(s.o.Addr)
}

// identity returns the backend's identity; b.mu is held.
func (b *MemBackend) identity() lease.StoreIdentity {
	return lease.StoreIdentity{ID: fmt.Sprintf("mem-%d", b.gen), Position: b.position}
}

// ours checks that held is a live claim of s; b.mu is held.
func (s *MemStore) ours(held lease.StoreClaim, now time.Time) (*memClaim, error) {
	c, ok := held.(*memClaim)
	if !ok || c.owner != s {
		return nil, fmt.Errorf("leasetest: %T is not a claim of this handle", held)
	}
	for _, f := range c.blocks {
		if h := s.b.claims[f]; h.claim != c || !h.live(now) {
			return nil, fmt.Errorf("%w: the claim on node IDs %d-%d lapsed or was taken over", randflake.ErrLeaseLost, c.blocks[0], f+s.o.Layout.Size-1)
		}
	}
	return c, nil
}

// Update runs one atomic step (see lease.BlockStore): it reads and
// applies under the backend's lock.
func (s *MemStore) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var c *memClaim
	if held != nil {
		var err error
		if c, err = s.ours(held, now); err != nil {
			return nil, err
		}
	}
	id := b.identity()
	v := &lease.StoreView{Identity: id, NextID: id.ID, Marker: clone(b.marker), Fresh: b.fresh}
	var read []int64
	switch {
	case all:
		for i := range s.o.Layout.Count() {
			f, _ := s.o.Layout.Block(i)
			read = append(read, f)
		}
	case c != nil:
		read = c.blocks
	}
	readSet := map[int64]bool{}
	for _, f := range read {
		h := b.claims[f]
		// A held claim's own blocks are Held while they are still its.
		v.Blocks = append(v.Blocks, lease.BlockState{First: f, Last: f + s.o.Layout.Size - 1,
			Record: clone(b.records[f]), Held: h.live(now) && (c == nil || h.claim == c)})
		readSet[f] = true
	}
	ch, err := fn(v)
	if err != nil || ch == nil {
		return held, err
	}
	if err := s.check(ch, c, readSet, now); err != nil {
		return nil, err
	}
	if ch.Marker != nil {
		b.marker, b.fresh = clone(ch.Marker), false
	}
	for f, r := range ch.Records {
		if r == nil {
			delete(b.records, f)
		} else {
			b.records[f] = clone(r)
		}
	}
	if ch.Release {
		for _, f := range c.blocks {
			delete(b.claims, f)
		}
	}
	var result lease.StoreClaim = held
	if len(ch.Claim) > 0 {
		nc := &memClaim{owner: s, blocks: append([]int64(nil), ch.Claim...)}
		for _, f := range nc.blocks {
			b.claims[f] = memHold{claim: nc, expires: s.expiry(now)}
		}
		result = nc
	}
	if ch.Marker != nil || len(ch.Records) > 0 || ch.Release || len(ch.Claim) > 0 {
		b.position++
	}
	return result, nil
}

// check refuses changes that break the step's rules: records of blocks
// not read, a release without a claim, a claim of blocks that are not
// consecutive blocks of the layout or are held by someone else.
func (s *MemStore) check(ch *lease.StoreChanges, c *memClaim, read map[int64]bool, now time.Time) error {
	for f := range ch.Records {
		if !read[f] {
			return fmt.Errorf("leasetest: a record written for node IDs from %d, a block the step did not read", f)
		}
	}
	if ch.Release && c == nil {
		return errors.New("leasetest: a release without a held claim")
	}
	l := s.o.Layout
	for i, f := range ch.Claim {
		if f < l.FirstNode || f > l.LastNode || (f-l.FirstNode)%l.Size != 0 || (i > 0 && f != ch.Claim[i-1]+l.Size) {
			return fmt.Errorf("leasetest: claim of %v: not consecutive blocks of the layout", ch.Claim)
		}
		if h := s.b.claims[f]; h.live(now) && !(ch.Release && h.claim == c) {
			return fmt.Errorf("%w (node IDs from %d)", lease.ErrBlockHeld, f)
		}
	}
	return nil
}

// expiry returns when a claim made or renewed at now lapses.
func (s *MemStore) expiry(now time.Time) time.Time {
	if s.o.TTL == 0 {
		return time.Time{}
	}
	return now.Add(s.o.TTL)
}

// Renew keeps the claim alive for another TTL. A claim that lapsed or was
// taken over is ErrLeaseLost; the identity is reported with the loss too,
// so that a holder can tell a store that went back from a claim that
// merely lapsed.
func (s *MemStore) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	if err := s.usable(ctx); err != nil {
		return lease.StoreIdentity{}, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	now := time.Now()
	c, err := s.ours(held, now)
	if err != nil {
		return s.b.identity(), err
	}
	for _, f := range c.blocks {
		s.b.claims[f] = memHold{claim: c, expires: s.expiry(now)}
	}
	return s.b.identity(), nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// Faults, as an operator or a failure inflicts them.

// Wipe deletes every claim, record and the marker: the store then shows
// no sign of initialisation (StoreView.Fresh is false).
func (b *MemBackend) Wipe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.marker, b.fresh = nil, false
	clear(b.records)
	clear(b.claims)
	b.position++
}

// WipeKeepMarker deletes every claim and record but keeps the marker.
func (b *MemBackend) WipeKeepMarker() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.records)
	clear(b.claims)
	b.position++
}

// Record returns a copy of the raw record of the block whose first node ID
// is first, nil if it has none.
func (b *MemBackend) Record(first int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return clone(b.records[first])
}

// SetRecord replaces the raw record of the block whose first node ID is
// first (nil: deletes it), leaving its claim alone.
func (b *MemBackend) SetRecord(first int64, raw []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if raw == nil {
		delete(b.records, first)
	} else {
		b.records[first] = clone(raw)
	}
	b.position++
}

// Marker returns a copy of the raw fleet marker, nil if there is none.
func (b *MemBackend) Marker() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return clone(b.marker)
}

// SetMarker replaces the raw fleet marker (nil: deletes it).
func (b *MemBackend) SetMarker(raw []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.marker = clone(raw)
	if raw != nil {
		b.fresh = false
	}
	b.position++
}

// MemSnapshot is a copy of a whole MemBackend.
type MemSnapshot struct {
	marker   []byte
	records  map[int64][]byte
	claims   map[int64]memHold
	fresh    bool
	position uint64
}

// Save returns a copy of everything the backend keeps.
func (b *MemBackend) Save() *MemSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	sn := &MemSnapshot{marker: clone(b.marker), records: map[int64][]byte{}, claims: maps.Clone(b.claims), fresh: b.fresh, position: b.position}
	for f, r := range b.records {
		sn.records[f] = clone(r)
	}
	return sn
}

// Restore puts a copy back under the same identity, as a backup restored
// in place: claims (with the times they lapse at), records, marker and
// position as they were, except that a live claim that never lapses (a
// lock) stays its holder's. The position goes back, which a running holder
// that saw a higher one notices; nothing else tells.
func (b *MemBackend) Restore(sn *MemSnapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.marker, b.fresh, b.position = clone(sn.marker), sn.fresh, sn.position
	live := b.claims
	b.claims = maps.Clone(sn.claims)
	// A claim that never lapses is a lock its process holds (a file
	// lock): a copy of the files cannot take it from a live process.
	for f, h := range live {
		if h.expires.IsZero() && h.live(time.Time{}) {
			b.claims[f] = h
		}
	}
	b.records = map[int64][]byte{}
	for f, r := range sn.records {
		b.records[f] = clone(r)
	}
}

// Failover changes the backend's identity, as a failover to a replica or
// a restore onto a new timeline does; its contents stay.
func (b *MemBackend) Failover() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
}

// RewindPosition moves the position back by n writes (to 0 at most), as a
// store that lost its last writes would.
func (b *MemBackend) RewindPosition(n uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.position -= min(n, b.position)
}

// Identity returns the backend's identity and position.
func (b *MemBackend) Identity() lease.StoreIdentity {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.identity()
}
