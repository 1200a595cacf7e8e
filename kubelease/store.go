package kubelease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Labels and annotations of the fleet's Lease objects.
const (
	// LabelFleet is on every Lease object of a fleet; its value is the
	// fleet's name (Config.Name). The store lists the objects by it.
	LabelFleet = "randflake.io/fleet"
	// LabelManagedBy marks the objects as randflake's.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationMarker holds the fleet marker, on the fleet's object.
	AnnotationMarker = "randflake.io/marker"
	// AnnotationPending holds, on the fleet's object, a committed step
	// whose records and releases are not yet written to the blocks'
	// objects (see the package documentation, "Steps").
	AnnotationPending = "randflake.io/pending"
	// AnnotationRecord holds a block's record, on the block's object.
	AnnotationRecord = "randflake.io/record"
	// AnnotationStep holds, on a block's object, the resource version
	// of the fleet object's commit last written to it.
	AnnotationStep = "randflake.io/step"
	// AnnotationCommit holds, on the fleet object, a random value each
	// commit changes, so that every commit is a write (an update that
	// changes nothing keeps the resource version).
	AnnotationCommit = "randflake.io/commit"
)

// Store is a lease.BlockStore on Kubernetes Lease objects: the storage
// primitives of the lease engine (see the package documentation). Use it
// through a lease.BlockSource, as New does, and give each BlockSource
// a Store of its own.
type Store struct {
	c       *Client
	ns      string
	name    string
	layout  lease.BlockLayout
	horizon time.Duration // Config.Horizon, for the engine
	ttl     time.Duration
	skew    time.Duration
	holder  string
	log     *slog.Logger
	now     func() time.Time

	mu  sync.Mutex
	uid string // the fleet object's UID last read: the store's identity
}

// storeClaim is the Store's handle on claimed blocks.
type storeClaim struct {
	identity string  // the holderIdentity of its objects
	blocks   []int64 // first node IDs

	mu sync.Mutex
	// renewed is this store's clock when it last wrote the claim to all
	// its blocks' objects, no later than any renewTime then written: the
	// claim holds until renewed plus the TTL on every clock within the
	// clock bound.
	renewed time.Time
	// known holds its blocks' objects as this store last wrote them, by
	// first node ID: a renewal updates them without reading them first.
	known map[int64]*leaseObject
}

// renewedAt returns when the claim was last written to all its blocks.
func (c *storeClaim) renewedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renewed
}

// wrote notes the claim's objects as this store wrote them: l, block
// f's (nil: not known any more, read it first next time), and, if
// renewed is not zero, the time before the claim was written to all of
// them.
func (c *storeClaim) wrote(f int64, l *leaseObject, renewed time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = map[int64]*leaseObject{}
	}
	if l != nil && l.holder() == c.identity {
		c.known[f] = l
	} else {
		delete(c.known, f)
	}
	if !renewed.IsZero() {
		c.renewed = renewed
	}
}

// renewedAll notes that the claim was written to all its blocks' objects
// since t.
func (c *storeClaim) renewedAll(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.renewed = t
}

// knownObject returns block f's object as this store last wrote it, nil
// if not known.
func (c *storeClaim) knownObject(f int64) *leaseObject {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.known[f]; l != nil {
		cp := *l
		return &cp
	}
	return nil
}

// pending is a committed step not yet written to the blocks' objects.
type pending struct {
	// Holder is the holderIdentity of the claim the step released, if any.
	Holder string `json:"holder,omitempty"`
	// Records are the records to write, by first node ID (decimal).
	Records map[string]string `json:"records,omitempty"`
	// Release lists the blocks whose claim (by Holder) the step frees.
	Release []int64 `json:"release,omitempty"`
}

// maxSteps bounds how often Update runs a step again after another writer
// changed what it read.
const maxSteps = 8

// NewStore returns the Store that cfg describes. Config.Secret is not used
// (the records are the lease engine's) and may be empty.
func NewStore(cfg Config) (*Store, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Store{c: c.Client, ns: c.Namespace, name: c.Name, ttl: c.TTL, skew: c.MaxClockSkew, holder: c.Holder, log: c.Logger, now: time.Now,
		layout: lease.BlockLayout{FirstNode: c.FirstNode, LastNode: c.LastNode, Size: c.Nodes}, horizon: c.Horizon}, nil
}

// Layout returns the store's division of node IDs into blocks.
func (s *Store) Layout() lease.BlockLayout { return s.layout }

// Info describes the store: claims lapse a TTL after their last renewal,
// by the renewing holder's clock, which is checked against the API
// server's; the holder stops twice the clock allowance and a margin
// before.
func (s *Store) Info() lease.StoreInfo {
	return lease.StoreInfo{
		Name:         fmt.Sprintf("kubernetes leases %s/%s", s.ns, s.name),
		EndFor:       func(t0 time.Time) int64 { return endFor(t0, s.ttl, s.skew) },
		Promise:      s.ttl,
		Durable:      true,
		MaxClockSkew: 2 * known(s.skew),
	}
}

// open is New's and NewLeased's work: the Store cfg describes, and the
// lease engine's settings on it.
func (cfg Config) open() (lease.BlockStore, lease.StoreConfig, error) {
	st, err := NewStore(cfg)
	if err != nil {
		return nil, lease.StoreConfig{}, err
	}
	return st, lease.StoreConfig{Name: "kubelease", Secret: cfg.Secret, Layout: st.layout, Horizon: st.horizon, Logger: cfg.Logger, Shards: cfg.Shards, OnError: cfg.OnError}, nil
}

func (s *Store) leasesPath() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(s.ns) + "/leases"
}
func (s *Store) leasePath(name string) string { return s.leasesPath() + "/" + url.PathEscape(name) }

// BlockName returns the name of the Lease object of the block whose first
// node ID is first, in the fleet name.
func BlockName(name string, first int64) string { return fmt.Sprintf("%s-%06d", name, first) }

func (s *Store) labels() map[string]string {
	return map[string]string{LabelFleet: s.name, LabelManagedBy: "randflake"}
}

// The bounds of the store's requests, all set here: each attempt of a
// step, each renewal and each undo runs under a context bounded by one of
// them, and the store sets no other (the Client's Timeout is a backstop
// for a caller without a deadline). When one passes, the error names what
// was not done in time, and the bound.
//
//   - For a held claim (a renewal, each attempt of a step recording a
//     promise or a release, which renews the claim between attempts
//     when they collide for long): until the claim could lapse on
//     another holder's clock (its last renewal plus the TTL, less twice
//     the clock allowance), the time in which a slow API server's answer
//     still keeps it, and a third of the TTL at least; a TTL, as for a
//     claim, once it may have lapsed already (an attempt begun late,
//     after failures, or the release of a claim not renewed since),
//     which may still find the claim its own.
//   - For a claim (no lease runs yet): a TTL per attempt of the step.
//   - For freeing the claims of a step that did not commit: a third of
//     the TTL (a claim left behind lapses after its TTL).
func (s *Store) timeout(c *storeClaim) (time.Duration, string) {
	if c == nil {
		return s.ttl, "a TTL, the bound of each attempt of a claim"
	}
	lapse := c.renewedAt().Add(s.ttl - 2*known(s.skew))
	if !s.now().Before(lapse) {
		// It may have lapsed already: there is no lapse left to beat,
		// and a slow server is given as long as for a claim.
		return s.ttl, "a TTL, the bound for a claim that may have lapsed already"
	}
	return max(s.ttl/3, lapse.Sub(s.now())), "until the claim could lapse, and a third of the TTL at least"
}

// bound returns ctx bounded for what, for the held claim c (nil: a
// claim), as timeout says.
func (s *Store) bound(ctx context.Context, what string, c *storeClaim) (context.Context, context.CancelFunc) {
	d, why := s.timeout(c)
	return s.boundBy(ctx, what, d, why)
}

// boundBy returns ctx bounded by d, with a cause naming what and why d.
func (s *Store) boundBy(ctx context.Context, what string, d time.Duration, why string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &slowError{what: what, d: d.Round(time.Millisecond), why: why})
}

// slowError is the cause of a context of bound whose deadline passed: it
// names what the API server did not finish in time. It wraps
// context.DeadlineExceeded.
type slowError struct {
	what string
	d    time.Duration
	why  string
}

func (e *slowError) Error() string {
	return fmt.Sprintf("kubelease: %s: not done within %v (%s)", e.what, e.d, e.why)
}

func (e *slowError) Unwrap() error { return context.DeadlineExceeded }

// snapshot is what one list of the fleet's objects found.
type snapshot struct {
	rev    uint64                 // the list's resource version
	rep    reply                  // the list's timing and Date header
	at     time.Time              // this machine's clock when the answer came
	fleet  *leaseObject           // the fleet object, nil if absent
	blocks map[int64]*leaseObject // block objects by the node ID their name gives
}

// list reads every Lease object of the fleet in one list, which the API
// server answers from one revision of its storage.
func (s *Store) list(ctx context.Context) (*snapshot, error) {
	var ll leaseList
	t0 := s.now()
	rep, err := s.c.do(ctx, http.MethodGet, s.leasesPath(), url.Values{"labelSelector": {LabelFleet + "=" + s.name}}, nil, &ll)
	if err != nil {
		return nil, err
	}
	rep.t0, rep.t1 = t0, s.now() // this store's clock
	rev, err := strconv.ParseUint(ll.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("kubelease: the API server's list of leases has resource version %q, not a number (this store needs the API server to count its writes, as etcd does)", ll.Metadata.ResourceVersion)
	}
	sn := &snapshot{rev: rev, rep: rep, at: rep.t1, blocks: map[int64]*leaseObject{}}
	for i := range ll.Items {
		l := &ll.Items[i]
		if l.Metadata.Name == s.name {
			sn.fleet = l
			continue
		}
		n, ok := s.blockNode(l.Metadata.Name)
		if !ok {
			return nil, fmt.Errorf("%w: the Lease %s/%s carries the label %s=%s but names no block of node IDs; this package never writes it",
				ErrCorrupt, s.ns, l.Metadata.Name, LabelFleet, s.name)
		}
		sn.blocks[n] = l
	}
	return sn, nil
}

// blockNode returns the node ID a block object's name gives.
func (s *Store) blockNode(name string) (int64, bool) {
	num, ok := strings.CutPrefix(name, s.name+"-")
	n, err := strconv.ParseInt(num, 10, 64)
	return n, ok && err == nil && len(num) == 6 && n >= 0 && n <= randflake.MaxNode
}

// blockOf returns the first node ID of the block holding node n.
func (s *Store) blockOf(n int64) int64 {
	return s.layout.FirstNode + (n-s.layout.FirstNode)/s.layout.Size*s.layout.Size
}

// noteUID remembers the fleet object's UID, the store's identity.
func (s *Store) noteUID(uid string) {
	s.mu.Lock()
	s.uid = uid
	s.mu.Unlock()
}

func (s *Store) identity() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uid
}

func (s *Store) held(h lease.StoreClaim) (*storeClaim, error) {
	if h == nil {
		return nil, nil
	}
	c, ok := h.(*storeClaim)
	if !ok || c == nil || len(c.blocks) == 0 {
		return nil, fmt.Errorf("kubelease: %T is not a claim of this store", h)
	}
	return c, nil
}

// lost is the error of a claim that is no longer this store's.
func (s *Store) lost(c *storeClaim, first int64, why string) error {
	return fmt.Errorf("kubelease: %s/%s: the claim on node IDs %d-%d is gone (%s): %w",
		s.ns, BlockName(s.name, first), c.blocks[0], c.blocks[len(c.blocks)-1]+s.layout.Size-1, why, randflake.ErrLeaseLost)
}

// Update runs one atomic step (see lease.BlockStore and the package
// documentation, "Steps"): a list of the fleet's objects, with any
// pending step written out first; fn; the claims, each a create or an
// update conditioned on the block object's resource version; then the
// commit, one update of the fleet object conditioned on its resource
// version, holding the new marker and the records and releases to write;
// and last those writes.
func (s *Store) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	c, err := s.held(held)
	if err != nil {
		return held, err
	}
	if c == nil && !all {
		return held, errors.New("kubelease: internal error: a step on no blocks")
	}
	what := fmt.Sprintf("a step on the leases of %s/%s", s.ns, s.name)
	if c != nil {
		what = fmt.Sprintf("a step on the claim of node IDs %d-%d in %s/%s", c.blocks[0], c.blocks[len(c.blocks)-1]+s.layout.Size-1, s.ns, s.name)
	}
	var took time.Duration // the last attempt's
	for step := 0; step < maxSteps; step++ {
		if step > 0 {
			// Steps that collided on the fleet object try again at
			// random moments, not all at once; a held claim's, spread
			// over as long as an attempt takes, so that on a slow API
			// server they do not meet again. (A claim's are not: the
			// engine counts its lease from before the step.)
			spread := time.Duration(step) * 50 * time.Millisecond
			if c != nil {
				spread = max(spread, took)
			}
			if err := lease.Sleep(ctx, time.Duration(mrand.Int64N(int64(spread)))); err != nil {
				return held, fmt.Errorf("kubelease: %s: %w", what, context.Cause(ctx))
			}
			// A held claim's renewals wait for its steps: one that
			// collides again and again with others' commits renews the
			// claim itself between its attempts, so that the claim
			// does not lapse meanwhile.
			if c != nil && s.now().Sub(c.renewedAt()) > s.ttl/3 {
				if _, err := s.Renew(ctx, c); err != nil {
					return held, err
				}
			}
		}
		// Each attempt has its own deadline: a step that waited for
		// others' commits is not cut short for it.
		sctx, cancel := s.bound(ctx, what, c)
		began := time.Now()
		res, again, err := s.attempt(sctx, c, held, all, fn)
		cancel()
		took = time.Since(began)
		if !again {
			return res, err
		}
	}
	return held, fmt.Errorf("kubelease: the leases of %s/%s changed under %d steps in a row: %w", s.ns, s.name, maxSteps, lease.ErrStoreConflict)
}

// attempt runs one attempt of a step (see Update). again reports that
// the step must run again on a new list: the store was changed under it,
// or a pending step was written out first.
func (s *Store) attempt(ctx context.Context, c *storeClaim, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (_ lease.StoreClaim, again bool, _ error) {
	sn, err := s.list(ctx)
	if err != nil {
		return held, false, err
	}
	if sn.fleet == nil {
		if err := s.createFleet(ctx); err != nil {
			return held, false, err
		}
		return held, true, nil
	}
	if p, rev := s.pendingOf(sn.fleet); p != nil {
		if err := s.rollForward(ctx, sn.fleet, p, rev, nil); err != nil {
			return held, false, err
		}
		return held, true, nil
	}
	s.noteUID(sn.fleet.Metadata.UID)
	if c != nil {
		for _, f := range c.blocks {
			if b := sn.blocks[f]; b == nil || b.holder() != c.identity {
				return held, false, s.lost(c, f, "its Lease object was taken over after it expired, or deleted")
			}
		}
	}
	view := s.view(sn, c, all)
	ch, err := fn(view)
	if err != nil {
		return held, false, err
	}
	if ch == nil {
		ch = &lease.StoreChanges{}
	}
	if err := s.check(view, c, ch); err != nil {
		return held, false, err
	}
	if len(ch.Claim) == 0 && len(ch.Records) == 0 && ch.Marker == nil && !ch.Release {
		return held, false, nil
	}
	// A step that claims or records checks this machine's clock
	// against the server's first: records carry this clock's
	// readings, and claims lapse by the claimants'.
	if len(ch.Claim) > 0 || len(ch.Records) > 0 || ch.Marker != nil {
		if err := checkSkew(sn.rep, s.skew); err != nil {
			return held, false, fmt.Errorf("%w (leases of %s/%s)", err, s.ns, s.name)
		}
	}
	// The blocks' objects as they are known to be, for the writes
	// after the commit: as listed, or as claimed.
	known := map[int64]*leaseObject{}
	if c != nil {
		for _, f := range c.blocks {
			known[f] = sn.blocks[f]
		}
	}
	var fresh *storeClaim
	var undo []*leaseObject
	var claimedAt time.Time // before any renewTime of the claims
	if len(ch.Claim) > 0 {
		fresh = &storeClaim{identity: s.newIdentity(), blocks: append([]int64(nil), ch.Claim...)}
		claimedAt = s.now()
		for _, f := range ch.Claim {
			l, err := s.claim(ctx, f, sn.blocks[f], fresh.identity)
			if err != nil {
				s.undo(undo)
				return held, false, err
			}
			undo = append(undo, l)
			known[f] = l
		}
	}
	p := &pending{Records: map[string]string{}}
	for f, rec := range ch.Records {
		p.Records[strconv.FormatInt(f, 10)] = string(rec)
	}
	if ch.Release {
		p.Holder, p.Release = c.identity, c.blocks
	}
	committed, err := s.commit(ctx, sn.fleet, ch.Marker, p)
	if errors.Is(err, errConflict) {
		s.undo(undo)
		return held, true, nil
	}
	if err != nil {
		s.undo(undo)
		return held, false, err
	}
	if len(p.Records) > 0 || len(p.Release) > 0 {
		// The step is committed: whoever lists the fleet next writes
		// it out if this fails.
		if err := s.rollForward(ctx, committed, p, rvOf(committed), known); err != nil && s.log != nil {
			s.log.Warn("kubelease: writing a committed step to the blocks' Lease objects failed; the next step writes it", "namespace", s.ns, "fleet", s.name, "err", err)
		}
	}
	// The claim's objects as written, for the next renewal.
	if fresh != nil {
		for _, f := range fresh.blocks {
			fresh.wrote(f, known[f], claimedAt)
		}
		return fresh, false, nil
	}
	if c != nil {
		for _, f := range c.blocks {
			c.wrote(f, known[f], time.Time{})
		}
	}
	return held, false, nil
}

// errConflict is an update refused because the object changed since it
// was read (HTTP 409).
var errConflict = errors.New("kubelease: the object changed since it was read")

// view builds the engine's view of a snapshot: every block of the layout
// (all) or the held claim's.
func (s *Store) view(sn *snapshot, c *storeClaim, all bool) *lease.StoreView {
	v := &lease.StoreView{Identity: lease.StoreIdentity{ID: sn.fleet.Metadata.UID, Position: sn.rev}, Clock: sn.rep.date}
	v.NextID = v.Identity.ID
	if m, ok := sn.fleet.Metadata.Annotations[AnnotationMarker]; ok {
		v.Marker = []byte(m)
	}
	heldBy := map[int64]bool{}
	for n, l := range sn.blocks {
		if n < s.layout.FirstNode || n > s.layout.LastNode || l.holder() == "" {
			continue
		}
		if c != nil && l.holder() == c.identity {
			heldBy[s.blockOf(n)] = true
			continue
		}
		if exp, ok := l.expiry(); !ok || sn.at.Before(exp) {
			heldBy[s.blockOf(n)] = true
		}
	}
	add := func(f int64) {
		b := lease.BlockState{First: f, Last: f + s.layout.Size - 1, Held: heldBy[f]}
		if l := sn.blocks[f]; l != nil {
			if b.Held {
				// "HOLDER claim TOKEN": the holder, not the claim's token.
				b.Holder, _, _ = strings.Cut(l.holder(), " claim ")
			}
			if r, ok := l.Metadata.Annotations[AnnotationRecord]; ok {
				b.Record = []byte(r)
			}
		}
		v.Blocks = append(v.Blocks, b)
	}
	if all {
		for i := int64(0); i < s.layout.Count(); i++ {
			f, _ := s.layout.Block(i)
			add(f)
		}
	} else {
		for _, f := range c.blocks {
			add(f)
		}
	}
	return v
}

// check refuses changes the step cannot make.
func (s *Store) check(v *lease.StoreView, c *storeClaim, ch *lease.StoreChanges) error {
	read := map[int64]bool{}
	for _, b := range v.Blocks {
		read[b.First] = true
	}
	for f, rec := range ch.Records {
		if !read[f] {
			return fmt.Errorf("kubelease: internal error: a record for node IDs from %d, a block not read", f)
		}
		if len(rec) == 0 {
			return fmt.Errorf("kubelease: internal error: an empty record for node IDs from %d", f)
		}
	}
	if ch.Release && c == nil {
		return errors.New("kubelease: internal error: a release without a claim")
	}
	if len(ch.Claim) > 0 && c != nil {
		return errors.New("kubelease: internal error: a claim while holding one")
	}
	for i, f := range ch.Claim {
		if !read[f] || f != ch.Claim[0]+int64(i)*s.layout.Size {
			return fmt.Errorf("kubelease: internal error: blocks %v to claim are not consecutive blocks read", ch.Claim)
		}
	}
	return nil
}

// newIdentity returns the holderIdentity of a new claim: the holder
// (pod name and UID) and a random token of the claim.
func (s *Store) newIdentity() string {
	b := make([]byte, 8)
	rand.Read(b)
	return s.holder + " claim " + hex.EncodeToString(b)
}

// createFleet creates the fleet object, without a marker: a fleet never
// seen, or one whose objects were deleted.
func (s *Store) createFleet(ctx context.Context) error {
	l := &leaseObject{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Metadata: objectMeta{Name: s.name, Labels: s.labels()}}
	_, err := s.c.do(ctx, http.MethodPost, s.leasesPath(), nil, l, nil)
	if isCode(err, http.StatusConflict) {
		return nil // created meanwhile
	}
	return err
}

// claim claims block f, whose object was read as cur (nil: none): a
// create, or an update conditioned on the resource version read. It
// returns the object as written.
func (s *Store) claim(ctx context.Context, f int64, cur *leaseObject, identity string) (*leaseObject, error) {
	now := microTime(s.now())
	var l leaseObject
	if cur != nil {
		l = *cur
	} else {
		l = leaseObject{Metadata: objectMeta{Name: BlockName(s.name, f)}}
	}
	l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
	l.Metadata.Labels = mergeLabels(l.Metadata.Labels, s.labels())
	if l.holder() != "" && l.holder() != identity {
		l.Spec.LeaseTransitions = i32p(transitions(&l) + 1)
	}
	l.Spec.HolderIdentity = strp(identity)
	l.Spec.LeaseDurationSeconds = i32p(int32(s.ttl / time.Second))
	l.Spec.AcquireTime, l.Spec.RenewTime = now, now
	var out leaseObject
	var err error
	if cur == nil {
		_, err = s.c.do(ctx, http.MethodPost, s.leasesPath(), nil, &l, &out)
	} else {
		_, err = s.c.do(ctx, http.MethodPut, s.leasePath(l.Metadata.Name), nil, &l, &out)
	}
	if isCode(err, http.StatusConflict) {
		return nil, fmt.Errorf("kubelease: %s/%s changed since it was read: node IDs %d-%d: %w", s.ns, l.Metadata.Name, f, f+s.layout.Size-1, lease.ErrBlockHeld)
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func transitions(l *leaseObject) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

func mergeLabels(have, want map[string]string) map[string]string {
	if have == nil {
		have = map[string]string{}
	}
	for k, v := range want {
		have[k] = v
	}
	return have
}

// undo frees the claims of a step that did not commit, best effort: a
// claim left behind lapses after its TTL.
func (s *Store) undo(claimed []*leaseObject) {
	ctx, cancel := s.boundBy(context.Background(), "freeing the claims of a step that did not commit", s.ttl/3, "a third of the TTL")
	defer cancel()
	for _, l := range claimed {
		free(l)
		s.c.do(ctx, http.MethodPut, s.leasePath(l.Metadata.Name), nil, l, nil)
	}
}

// free clears the claim of l.
func free(l *leaseObject) {
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = nil, nil, nil, nil
}

// commit writes the step to the fleet object, read as fleet: the marker
// (nil: unchanged) and the pending writes, conditioned on the resource
// version read. errConflict: another step committed first.
func (s *Store) commit(ctx context.Context, fleet *leaseObject, marker []byte, p *pending) (*leaseObject, error) {
	l := *fleet
	l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
	l.Metadata.Annotations = copyMap(fleet.Metadata.Annotations)
	if marker != nil {
		l.Metadata.Annotations[AnnotationMarker] = string(marker)
	}
	nonce := make([]byte, 8)
	rand.Read(nonce)
	l.Metadata.Annotations[AnnotationCommit] = hex.EncodeToString(nonce)
	if len(p.Records) > 0 || len(p.Release) > 0 {
		raw, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		l.Metadata.Annotations[AnnotationPending] = string(raw)
	}
	var out leaseObject
	_, err := s.c.do(ctx, http.MethodPut, s.leasePath(s.name), nil, &l, &out)
	if isCode(err, http.StatusConflict) || isCode(err, http.StatusNotFound) {
		return nil, errConflict
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+2)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func rvOf(l *leaseObject) uint64 {
	n, _ := strconv.ParseUint(l.Metadata.ResourceVersion, 10, 64)
	return n
}

// pendingOf returns the pending step on the fleet object, with the
// object's resource version (the step's commit), or nil. A pending step
// that cannot be read is dropped when it is written out (see
// rollForward): it names nothing to write.
func (s *Store) pendingOf(fleet *leaseObject) (*pending, uint64) {
	raw, ok := fleet.Metadata.Annotations[AnnotationPending]
	if !ok {
		return nil, 0
	}
	p := &pending{}
	if json.Unmarshal([]byte(raw), p) != nil {
		p = &pending{} // unreadable: an edit; the marker's digest tells
	}
	return p, rvOf(fleet)
}

// rollForward writes a committed step, p, committed at the fleet
// object's resource version rev, to the blocks' objects, then removes it
// from the fleet object. Each block's object records the commit it last
// took (AnnotationStep), so that the writes are done once, and never
// after a later commit's. known, if not nil, holds the blocks' objects as
// last seen, tried before reading them; the objects written replace them.
func (s *Store) rollForward(ctx context.Context, fleet *leaseObject, p *pending, rev uint64, known map[int64]*leaseObject) error {
	firsts := map[int64]bool{}
	for k := range p.Records {
		f, err := strconv.ParseInt(k, 10, 64)
		if err == nil {
			firsts[f] = true
		}
	}
	release := map[int64]bool{}
	for _, f := range p.Release {
		firsts[f], release[f] = true, true
	}
	order := make([]int64, 0, len(firsts))
	for f := range firsts {
		order = append(order, f)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	for _, f := range order {
		rec, hasRec := p.Records[strconv.FormatInt(f, 10)]
		w, err := s.writeBlock(ctx, f, rev, rec, hasRec, release[f], p.Holder, known[f])
		if err != nil {
			return err
		}
		if known != nil && w != nil {
			known[f] = w
		}
	}
	// Remove the step from the fleet object, unless a later write did.
	cur := fleet
	for try := 0; try < maxSteps; try++ {
		if _, ok := cur.Metadata.Annotations[AnnotationPending]; !ok || rvOf(cur) != rev {
			return nil
		}
		l := *cur
		l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
		l.Metadata.Annotations = copyMap(cur.Metadata.Annotations)
		delete(l.Metadata.Annotations, AnnotationPending)
		_, err := s.c.do(ctx, http.MethodPut, s.leasePath(s.name), nil, &l, nil)
		if err == nil || isCode(err, http.StatusNotFound) {
			return nil
		}
		if !isCode(err, http.StatusConflict) {
			return err
		}
		var next leaseObject
		if _, err := s.c.do(ctx, http.MethodGet, s.leasePath(s.name), nil, nil, &next); err != nil {
			if isCode(err, http.StatusNotFound) {
				return nil
			}
			return err
		}
		cur = &next
	}
	return fmt.Errorf("kubelease: the fleet object %s/%s changed under %d writes in a row: %w", s.ns, s.name, maxSteps, lease.ErrStoreConflict)
}

// writeBlock writes one block's part of the commit rev: its record (if
// hasRec) and, if release, frees its claim by holder. known, if not
// nil, is the object as last seen, tried before reading it. It returns
// the object as it wrote it, nil if it wrote none.
func (s *Store) writeBlock(ctx context.Context, f int64, rev uint64, rec string, hasRec, release bool, holder string, known *leaseObject) (*leaseObject, error) {
	name := BlockName(s.name, f)
	for try := 0; try < maxSteps; try++ {
		var cur leaseObject
		var err error
		if try == 0 && known != nil {
			cur = *known
		} else {
			_, err = s.c.do(ctx, http.MethodGet, s.leasePath(name), nil, nil, &cur)
		}
		missing := isCode(err, http.StatusNotFound)
		if err != nil && !missing {
			return nil, err
		}
		if missing && !hasRec {
			return nil, nil // nothing to free
		}
		if missing {
			cur = leaseObject{Metadata: objectMeta{Name: name}}
		}
		if done, _ := strconv.ParseUint(cur.Metadata.Annotations[AnnotationStep], 10, 64); done >= rev {
			return nil, nil // written already, or a later commit was
		}
		l := cur
		l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
		l.Metadata.Labels = mergeLabels(cur.Metadata.Labels, s.labels())
		l.Metadata.Annotations = copyMap(cur.Metadata.Annotations)
		l.Metadata.Annotations[AnnotationStep] = strconv.FormatUint(rev, 10)
		if hasRec {
			l.Metadata.Annotations[AnnotationRecord] = rec
		}
		if release && l.holder() == holder {
			free(&l)
		}
		var out leaseObject
		if missing {
			_, err = s.c.do(ctx, http.MethodPost, s.leasesPath(), nil, &l, &out)
		} else {
			_, err = s.c.do(ctx, http.MethodPut, s.leasePath(name), nil, &l, &out)
		}
		if err == nil {
			return &out, nil
		}
		if !isCode(err, http.StatusConflict) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("kubelease: %s/%s changed under %d writes in a row: %w", s.ns, name, maxSteps, lease.ErrStoreConflict)
}

// Renew renews the claim: for each of its blocks' objects, an update of
// renewTime conditioned on the resource version this store last wrote,
// or, if the object changed since, on the one a read then finds; all
// within the bound of a held claim (see timeout). It checks this
// machine's clock against the API server's Date header, and reports the
// resource version of the last update as the store's position. A claim whose object is gone or names
// another holder is ErrLeaseLost, reported with the identity and position
// a list then finds (if the server answers it), so that a claim lost to a
// restored etcd is known as the rollback it is.
func (s *Store) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	c, err := s.held(held)
	if err != nil {
		return lease.StoreIdentity{}, err
	}
	if c == nil {
		return lease.StoreIdentity{}, errors.New("kubelease: renewal without a claim")
	}
	ctx, cancel := s.bound(ctx, fmt.Sprintf("renewing node IDs %d-%d in %s/%s", c.blocks[0], c.blocks[len(c.blocks)-1]+s.layout.Size-1, s.ns, s.name), c)
	defer cancel()
	began := s.now() // no later than any renewTime written
	var pos uint64
	var last reply
	for _, f := range c.blocks {
		name := BlockName(s.name, f)
		done := false
		// The object as this store last wrote it, if known: one update
		// conditioned on its resource version, which succeeds only if
		// nothing changed it since, so the claim is still this one's.
		cur := c.knownObject(f)
		for try := 0; try < maxSteps && !done; try++ {
			if cur == nil {
				cur = &leaseObject{}
				_, err := s.c.do(ctx, http.MethodGet, s.leasePath(name), nil, nil, cur)
				if isCode(err, http.StatusNotFound) {
					return s.lostIdentity(ctx), s.lost(c, f, "its Lease object was deleted")
				}
				if err != nil {
					return lease.StoreIdentity{}, fmt.Errorf("kubelease: renewing node IDs %d-%d: %w", f, f+s.layout.Size-1, err)
				}
				if cur.holder() != c.identity {
					return s.lostIdentity(ctx), s.lost(c, f, fmt.Sprintf("its Lease object names the holder %q", cur.holder()))
				}
			}
			cur.APIVersion, cur.Kind = "coordination.k8s.io/v1", "Lease"
			cur.Spec.RenewTime = microTime(s.now())
			cur.Spec.LeaseDurationSeconds = i32p(int32(s.ttl / time.Second))
			var out leaseObject
			t0 := s.now()
			rep, err := s.c.do(ctx, http.MethodPut, s.leasePath(name), nil, cur, &out)
			rep.t0, rep.t1 = t0, s.now()
			if isCode(err, http.StatusConflict) {
				// Changed since: a committed step's record was written, or
				// another process took the claim over. Read it.
				c.wrote(f, nil, time.Time{})
				cur = nil
				continue
			}
			if isCode(err, http.StatusNotFound) {
				return s.lostIdentity(ctx), s.lost(c, f, "its Lease object was deleted")
			}
			if err != nil {
				return lease.StoreIdentity{}, fmt.Errorf("kubelease: renewing node IDs %d-%d: %w", f, f+s.layout.Size-1, err)
			}
			c.wrote(f, &out, time.Time{})
			pos, last, done = rvOf(&out), rep, true
		}
		if !done {
			return lease.StoreIdentity{}, fmt.Errorf("kubelease: renewing node IDs %d-%d: %s/%s changed under %d updates in a row", f, f+s.layout.Size-1, s.ns, name, maxSteps)
		}
	}
	c.renewedAll(began)
	if err := checkSkew(last, s.skew); err != nil {
		return lease.StoreIdentity{}, fmt.Errorf("%w (renewing node IDs %d-%d in %s)", err, c.blocks[0], c.blocks[len(c.blocks)-1]+s.layout.Size-1, s.ns)
	}
	return lease.StoreIdentity{ID: s.identity(), Position: pos}, nil
}

// lostIdentity returns the identity and position a list finds, or none if
// the server does not answer: the fleet object's UID ("" if it is gone)
// and the list's resource version.
func (s *Store) lostIdentity(ctx context.Context) lease.StoreIdentity {
	sn, err := s.list(ctx)
	if err != nil {
		return lease.StoreIdentity{}
	}
	id := lease.StoreIdentity{Position: sn.rev}
	if sn.fleet != nil {
		id.ID = sn.fleet.Metadata.UID
	}
	return id
}
