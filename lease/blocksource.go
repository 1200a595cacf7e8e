package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/randflake/randflake"
)

// BlockSourceConfig configures a BlockSource.
type BlockSourceConfig struct {
	// Secret is the fleet's 16-byte secret, the same as the generators'.
	// Records and the marker are signed under a key derived from it.
	Secret []byte
	// Layout divides the fleet's node IDs into blocks. Every process of
	// a store uses the same layout; the marker records it, and a process
	// configured otherwise is refused (ErrFleetMismatch).
	Layout BlockLayout
	// Blocks is the number of consecutive blocks a claim takes, aligned
	// to it (0: 1).
	Blocks int64
	// Horizon is the fleet's bound on promises: the longest promise any
	// holder of the fleet may record, the same for every member, known
	// without reading the store (rule 13 of docs/leases.md). A store
	// whose Promise is longer is refused. Unknown history is waited out
	// for the longer of it and the marker's horizon, plus the store's
	// MaxClockSkew (0: the store's Promise, which a store module sets to
	// its fleet default instead).
	Horizon time.Duration
	// Now, if set, is the clock of every decision (tests offset it).
	Now func() time.Time
	// Logger receives what an operator should know: history found
	// unknown or gone back (with the reason and the wait), waits for a
	// previous holder's seconds, blocks refused for their clock. Nil logs
	// nothing.
	Logger *slog.Logger
}

// BlockSource is the lease engine: a [randflake.LeaseSource] on any
// BlockStore, which applies the rules of docs/leases.md ("The rules") in one
// place. Each rule below is numbered as there.
//
// A BlockSource holds at most one lease at a time; use one per generator.
// It is safe for concurrent use.
type BlockSource struct {
	store  BlockStore
	info   StoreInfo
	key    []byte
	layout BlockLayout
	blocks int64
	wait   int64 // seconds: how long unknown history is waited out (before the marker's horizon)
	detect int64 // seconds: how long this process issues after its last check of its records (rule 14)
	now    func() time.Time
	log    *slog.Logger

	mu   sync.Mutex
	held *heldClaim
	// horizonSeen is the longest horizon read in a valid marker (seconds):
	// a member with a longer promise joined the fleet, and this process
	// waits it out even after a wipe took the marker (rule 13).
	horizonSeen int64
	// detectSeen is the longest detection bound read in a valid marker
	// (seconds): a holder that checks its records less often may run, and
	// a takeover waits it out (rule 14).
	detectSeen int64
	position   uint64 // the highest store position seen
	identity   string // the store identity seen with it
}

// heldClaim is the lease held.
type heldClaim struct {
	handle   StoreClaim
	lease    randflake.Lease
	promised int64            // the second recorded in the claim's records
	written  map[int64][]byte // the records as this source last wrote them
	// uncertain holds the records of the last step whose outcome is
	// unknown (the store failed after the changes were sent: a lost
	// answer, a timeout), and uncertainPromise their promise: the store
	// may hold them or the written ones, and either is this source's.
	uncertain        map[int64][]byte
	uncertainPromise int64
}

// applied records that a step writing recs (promising p, if not 0) was
// applied.
func (c *heldClaim) applied(recs map[int64][]byte, p int64) {
	for f, raw := range recs {
		if f >= c.lease.FirstNode && f <= c.lease.LastNode {
			c.written[f] = raw
		}
	}
	c.promised = max(c.promised, p)
	c.uncertain, c.uncertainPromise = nil, 0
}

// NewBlockSource returns the lease engine on store.
func NewBlockSource(store BlockStore, cfg BlockSourceConfig) (*BlockSource, error) {
	if store == nil {
		return nil, errors.New("randflake: NewBlockSource: nil store")
	}
	if len(cfg.Secret) != 16 {
		return nil, fmt.Errorf("randflake: NewBlockSource: the secret must be 16 bytes, not %d", len(cfg.Secret))
	}
	if err := cfg.Layout.Check(); err != nil {
		return nil, err
	}
	s := &BlockSource{store: store, info: store.Info(), key: recordKey(cfg.Secret), layout: cfg.Layout,
		blocks: cfg.Blocks, now: cfg.Now, log: cfg.Logger}
	if s.blocks == 0 {
		s.blocks = 1
	}
	if s.blocks < 0 || s.blocks > s.layout.Count() {
		return nil, fmt.Errorf("randflake: %d blocks per claim: want 1 to %d", cfg.Blocks, s.layout.Count())
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.info.Promise <= 0 && s.info.Durable {
		return nil, fmt.Errorf("randflake: %s: the store's promise must be positive", s.info.Name)
	}
	if cfg.Horizon < 0 {
		return nil, errors.New("randflake: negative horizon")
	}
	if cfg.Horizon > 0 && s.info.Promise > cfg.Horizon {
		// Rule 13: after a wipe every member waits the horizon only; a
		// longer promise could still be running then.
		return nil, fmt.Errorf("%w: %s: this process would promise %v ahead, beyond the fleet's horizon of %v: after a wipe of the store the other members wait only the horizon, so its node IDs could be used twice; raise the horizon on every member first (or shorten this one's TTL)",
			ErrBeyondHorizon, s.info.Name, s.info.Promise, cfg.Horizon)
	}
	s.wait = ceilSeconds(max(cfg.Horizon, s.info.Promise) + s.info.MaxClockSkew)
	s.detect = detectionBound(s.info)
	return s, nil
}

// detectionBound returns how many seconds past the second of a check of
// its records a holder of store may issue IDs (rule 14): a renewal begun
// in second t, whose check follows it, gives a lease ending at EndFor(t)
// at most, and that second is used to its end. A store whose claims do
// not lapse (file locks) cannot have a running holder's claim put back
// for another to take: 0.
func detectionBound(info StoreInfo) int64 {
	if info.EndFor == nil || !info.Durable {
		return 0
	}
	t := time.Unix(randflake.Epoch+1_000_000, 999_999_999) // the latest instant of a second
	return min(max(info.EndFor(t)-t.Unix()+1, 1), maxDetect)
}

// maxDetect caps every holder's detection bound, in seconds (rule
// 14): whatever its TTL, a holder's lease runs at most this long past its
// last check of its records. It is the one bound every member knows
// without reading the store, so that one member with a longer TTL can
// make no takeover wait longer than this (plus the clock bound), and a
// copy of the store from before that member wrote the marker leaves
// others waiting at most this much short of its bound. A longer TTL still
// keeps a claim through a longer store outage; the holder stops issuing
// this long into it and goes on with the same claim when the store is back.
const maxDetect = 10

// TakeoverWait returns how long after its claim a lease on a store
// described by info starts at the earliest, on a store that is not fresh,
// when neither a record nor the marker asks for longer (rule 14): the
// detection bound, how long a holder issues after its last check of its
// records, plus the clock skew. It is the cost of every takeover, a
// released block's included. Zero for a store whose claims do not lapse.
func TakeoverWait(info StoreInfo) time.Duration {
	d := detectionBound(info)
	if d == 0 {
		return 0
	}
	return time.Duration(d+ceilSeconds(info.MaxClockSkew)) * time.Second
}

// takeoverWait returns how long after its claim a run of blocks starts at
// the earliest (rule 14), given the detection bound of a marker that
// markBounds has raised: the longest any holder issues after its last
// check, plus the clock skew. A consistent older copy of the store written
// back while its holder runs shows the block free with an old promise; the
// holder finds out at its next check and stops within that bound.
func (s *BlockSource) takeoverWait(detect int64) int64 {
	if detect == 0 {
		return 0
	}
	return detect + ceilSeconds(s.info.MaxClockSkew)
}

// markBounds raises m's horizon (rule 13) and detection bound (rule 14)
// to this process's and to the longest it has read, the bound capped at
// maxDetect.
func (s *BlockSource) markBounds(m *fleetMarker) {
	m.horizon = max(m.horizon, ceilSeconds(s.info.Promise), s.horizonSeen)
	m.detect = min(max(m.detect, s.detect, s.detectSeen), maxDetect)
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// formatSecond writes a Unix second in UTC for errors and logs, as
// randflake.Lease's String does.
func formatSecond(s int64) string {
	return time.Unix(s, 0).UTC().Format(time.RFC3339)
}

// Store returns the store.
func (s *BlockSource) Store() BlockStore { return s.store }

// promise returns the second a promise made now records.
func (s *BlockSource) promise(now int64) int64 {
	return min(now+ceilSeconds(s.info.Promise), randflake.MaxTimestamp)
}

// endFor returns the lease end after a claim or renewal begun at t0 that
// recorded promised (rule 3: never past the promise, nor past the claim).
func (s *BlockSource) endFor(t0 time.Time, promised int64) int64 {
	if s.info.EndFor == nil {
		return promised
	}
	end := min(s.info.EndFor(t0), promised)
	if s.detect > 0 {
		// Rule 14: at most the detection bound past this check.
		end = min(end, t0.Unix()+s.detect-1)
	}
	return end
}

func (s *BlockSource) logInfo(msg string, args ...any) {
	if s.log != nil {
		s.log.Info(msg, args...)
	}
}

func (s *BlockSource) logWarn(msg string, args ...any) {
	if s.log != nil {
		s.log.Warn(msg, args...)
	}
}

// assessment is what BlockSource makes of a full view of the store.
type assessment struct {
	marker  fleetMarker // valid, or to be written
	write   bool        // the marker must be written (new, reset, or digest repaired)
	reason  string      // why history is unknown, if it was found so now
	records map[int64]blockRecord
	raw     map[int64][]byte // the records as read
	read    StoreIdentity    // the store's identity and position as read
}

// assess checks a full view (rules 5 to 8): the marker, the identity and
// position of the store, every record and the digest over them. Any
// inconsistency makes the whole store's history unknown up to now + the
// wait, recorded in the marker written with the step.
func (s *BlockSource) assess(v *StoreView, now int64) (*assessment, error) {
	a := &assessment{records: map[int64]blockRecord{}}
	var digest [tagBytes]byte
	present := 0
	for _, b := range v.Blocks {
		if b.Record == nil {
			continue
		}
		present++
		a.rawRecords()[b.First] = b.Record
		xorInto(&digest, digestOf(s.key, b.Record))
		r, err := parseRecord(s.key, b.Record, b.First, b.Last)
		if err != nil {
			if a.reason == "" {
				a.reason = fmt.Sprintf("the record of node IDs %d-%d %v", b.First, b.Last, err)
			}
			continue
		}
		a.records[b.First] = r
	}
	// The longest horizon this process has read counts even when the
	// marker that said it is gone (a wipe): rule 13.
	wait := max(s.wait, s.horizonSeen+ceilSeconds(s.info.MaxClockSkew))
	switch {
	case v.Marker == nil && v.Fresh && present == 0:
		// Rule 6: a store created empty by its own initialisation has no
		// history to lose.
		a.marker = fleetMarker{layout: s.layout, unknown: randflake.Epoch}
		a.write = true
	case v.Marker == nil:
		a.reason = "the store has no fleet marker (never initialised, or wiped)"
	default:
		m, err := parseMarker(s.key, v.Marker)
		if errors.Is(err, errOtherFleet) {
			// Rule 11: another fleet's store is refused, not reset:
			// nothing is claimed or written, so that fleet loses no
			// lease and never waits.
			return nil, fmt.Errorf("%w: %s holds the fleet marker of another fleet's secret (key ID %s; this process's secret has key ID %s): nothing was claimed or written; give this process its own fleet's secret, or another prefix or lease name",
				ErrFleetMismatch, s.info.Name, m.fleet, keyID(s.key))
		}
		if err != nil {
			a.reason = fmt.Sprintf("the fleet marker %v", err)
			break
		}
		if m.layout != s.layout {
			return nil, fmt.Errorf("%w: %s holds blocks of %d node IDs in %d-%d, this process is configured for blocks of %d in %d-%d",
				ErrFleetMismatch, s.info.Name, m.layout.Size, m.layout.FirstNode, m.layout.LastNode, s.layout.Size, s.layout.FirstNode, s.layout.LastNode)
		}
		a.marker = m
		s.horizonSeen = max(s.horizonSeen, m.horizon)
		s.detectSeen = max(s.detectSeen, m.detect)
		wait = max(wait, s.horizonSeen+ceilSeconds(s.info.MaxClockSkew))
		if s.capUnknown(&a.marker, now, wait) {
			a.write = true
		}
		switch {
		case m.id != v.Identity.ID:
			a.reason = fmt.Sprintf("the store's identity changed from %q to %q (restored or failed over)", m.id, v.Identity.ID)
		case s.identity == v.Identity.ID && v.Identity.Position < s.position:
			a.reason = fmt.Sprintf("the store's position went back from %d to %d (restored or rolled back)", s.position, v.Identity.Position)
		case m.digest != digest:
			if a.reason == "" {
				a.reason = "the records do not match the fleet marker (a record was deleted, edited or rolled back)"
			}
		default:
			// The digest matches, so every record read, those that fail
			// their check included, is one the marker's writer saw: a
			// record enters the digest only through a full read like this
			// one, which found it failing (or the digest not matching) and
			// made the history unknown up to the marker's unknown second.
			// Its block counts as unknown up to that second (until ignores
			// the record). Making the history unknown again would make
			// every claim wait, for as long as the record stays, instead
			// of no longer than the marker says (rule 5).
			a.reason = ""
		}
	}
	if a.reason != "" {
		a.marker.layout = s.layout
		a.marker.unknown = max(a.marker.unknown, min(now+wait, randflake.MaxTimestamp))
		a.write = true
	}
	a.marker.id = v.NextID
	s.markBounds(&a.marker)
	a.marker.digest = digest
	a.read = v.Identity
	return a, nil
}

// capUnknown caps the marker's unknown second at now + wait (rule 12).
// A process within the clock bound writes it at most wait seconds past
// its own clock, so at most MaxClockSkew past this one's: one further
// ahead was written by a clock outside the bound, and would otherwise
// stall every process with a true clock until that clock's time. The
// blocks such a writer claimed stay refused by their records (rule 9). It
// reports whether it capped, and logs it.
func (s *BlockSource) capUnknown(m *fleetMarker, now, wait int64) bool {
	limit := min(now+wait, randflake.MaxTimestamp)
	if m.unknown <= limit+ceilSeconds(s.info.MaxClockSkew) {
		return false
	}
	s.logWarn("randflake: the fleet marker's unknown history ends further ahead than a clock within the bound writes it: capped at this clock's bound (its writer's clock was ahead)",
		"store", s.info.Name, "marker_until", formatSecond(m.unknown), "capped_until", formatSecond(limit),
		"writer_ahead_at_least", fmt.Sprintf("%ds", m.unknown-limit))
	m.unknown = limit
	return true
}

// assessed takes in the identity and position of a step whose assessment
// a was applied. Once a step that made the history unknown is in the
// store, its position is the one to compare with from then on, even if it
// is lower than one seen before (a restore): the loss is recorded, and
// keeping the old highest would make every later step find the same loss
// again until the store's position has climbed back past it.
func (s *BlockSource) assessed(a *assessment) {
	if a.reason != "" {
		s.identity, s.position = a.read.ID, a.read.Position
		return
	}
	s.seen(a.read)
}

// seen remembers the store's highest position.
func (s *BlockSource) seen(id StoreIdentity) {
	if id.ID != s.identity {
		s.identity, s.position = id.ID, id.Position
		return
	}
	s.position = max(s.position, id.Position)
}

// until returns the newest second block first may have been used in, as
// far as the assessment knows (rule 1 and 5).
func (a *assessment) until(first int64) int64 {
	u := a.marker.unknown
	if r, ok := a.records[first]; ok {
		u = max(u, r.until)
	}
	return u
}

// claimRun is a run of blocks that can be claimed.
type claimRun struct {
	first int64 // first node ID
	until int64 // newest second used on any of its blocks
}

// choose returns the claimable runs, best first (rule 2): those whose
// seconds have passed, in order, then the rest by how soon they pass. Runs
// held, used up, or whose records are ahead of this clock (rule 9) are
// left out; refused counts the last.
func (s *BlockSource) choose(v *StoreView, a *assessment, now int64) (slots []claimRun, refused int) {
	held := map[int64]bool{}
	for _, b := range v.Blocks {
		if b.Held {
			held[b.First] = true
		}
	}
	skew := ceilSeconds(s.info.MaxClockSkew)
	for i := int64(0); i+s.blocks <= s.layout.Count(); i += s.blocks {
		first, _ := s.layout.Block(i)
		sl := claimRun{first: first}
		ok, behind := true, false
		for j := i; j < i+s.blocks; j++ {
			f, _ := s.layout.Block(j)
			if held[f] {
				ok = false
				break
			}
			sl.until = max(sl.until, a.until(f))
			if r, has := a.records[f]; has && r.at > now+skew {
				behind = true
			}
		}
		switch {
		case !ok || sl.until >= randflake.MaxTimestamp:
		case behind || sl.until > now+2*max(s.wait, a.marker.horizon, s.horizonSeen)+skew:
			refused++
		default:
			slots = append(slots, sl)
		}
	}
	sort.SliceStable(slots, func(i, j int) bool {
		pi, pj := slots[i].until < now, slots[j].until < now
		if pi != pj {
			return pi
		}
		return !pi && slots[i].until < slots[j].until
	})
	return slots, refused
}

// spread returns which of the runs choose returned to claim after a try
// lost its run to another claimant: one drawn at random among those whose
// seconds have passed (all equally good by rule 2), else the first.
// Claimants started together all try the best run first, and one wins;
// were the losers to try the next best together, and so on, one winner a
// round, the last of ten could lose every try with runs still free. (The
// first try takes the best run, so that one process alone always gets the
// lowest free block.)
func spread(slots []claimRun, now int64) int {
	n := 0
	for n < len(slots) && slots[n].until < now {
		n++
	}
	if n <= 1 {
		return 0
	}
	return rand.IntN(n)
}

// Acquire claims a run of blocks and returns a lease on it (rules 1 to 9).
// If the run's previous seconds are still ahead of the clock, Acquire
// holds the claim, keeping it alive, and waits within ctx, recording no
// new promise until the wait is over.
func (s *BlockSource) Acquire(ctx context.Context) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		return randflake.Lease{}, fmt.Errorf("randflake: %s: the source already holds a lease", s.info.Name)
	}
	if !s.info.Durable {
		return s.acquireVolatile(ctx)
	}
	// A claim lost while it waited for its start (its store claim lapsed
	// on a slow machine or store, or the history was found lost) issued
	// nothing: claim again, a few times, as the caller would.
	for try := 1; ; try++ {
		l, waited, err := s.acquireOnce(ctx)
		if err == nil || !waited || !errors.Is(err, randflake.ErrLeaseLost) || try == maxWaitingLosses || ctx.Err() != nil {
			return l, err
		}
		s.logWarn("randflake: the claim was lost while it waited for its start, before any ID: claiming again",
			"store", s.info.Name, "try", try, "err", err)
	}
}

// maxWaitingLosses is how many claims in a row Acquire makes when each is
// lost while it waits for its start.
const maxWaitingLosses = 4

// maxLostClaims bounds the claims in a row one acquisition makes when
// each loses its run to another claimant (ErrBlockHeld, ErrStoreConflict):
// a process that claimed the same run, or changed the store, between this
// claim's read and its write. Claimants that start together lose to each
// other; the pauses between tries spread them apart. Past the bound, the
// caller is told that every block is claimed (ErrNoFreeNodes).
const maxLostClaims = 32

// lostToClaimant reports whether a claim failed because another claimant
// took its run or changed the store first (see maxLostClaims).
func lostToClaimant(err error) bool {
	return errors.Is(err, ErrBlockHeld) || errors.Is(err, ErrStoreConflict)
}

// lostClaimPause returns the random pause after a claim that took step
// and lost its run: up to twice the step, at most a second.
func lostClaimPause(step time.Duration) time.Duration {
	d := min(2*step, time.Second)
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// acquireOnce makes one claim and waits for its start; waited reports
// that the claim was made and the error came while it waited.
func (s *BlockSource) acquireOnce(ctx context.Context) (_ randflake.Lease, waited bool, _ error) {
	var (
		c       *heldClaim
		refused int
		err     error
	)
	for try := 1; ; try++ {
		began := time.Now()
		c, refused, err = s.claim(ctx, try > 1)
		if err == nil || !lostToClaimant(err) || try == maxLostClaims {
			break
		}
		// Another claimant took the run first. Claimants that start
		// together would meet again at once; each waits a random part
		// of what its step took before it reads the store again, and
		// so sees the runs the others have taken by then.
		if err := Sleep(ctx, lostClaimPause(time.Since(began))); err != nil {
			return randflake.Lease{}, false, fmt.Errorf("randflake: %s: claiming node IDs: %w", s.info.Name, context.Cause(ctx))
		}
	}
	if lostToClaimant(err) {
		// Every try lost its block to another claimant: as busy as a
		// store with no free block, for the caller.
		return randflake.Lease{}, false, fmt.Errorf("%w (%d node IDs each, in %d-%d, %s: other processes took every block this one tried): %w",
			ErrNoFreeNodes, s.blocks*s.layout.Size, s.layout.FirstNode, s.layout.LastNode, s.info.Name, err)
	}
	if err != nil {
		return randflake.Lease{}, false, err
	}
	if c == nil {
		if refused > 0 {
			return randflake.Lease{}, false, fmt.Errorf("%w: %s: %d free runs of node IDs were used at times ahead of this clock; it may have stepped back", ErrClockBehind, s.info.Name, refused)
		}
		return randflake.Lease{}, false, fmt.Errorf("%w (%d node IDs each, in %d-%d, %s)", ErrNoFreeNodes, s.blocks*s.layout.Size, s.layout.FirstNode, s.layout.LastNode, s.info.Name)
	}
	if err := s.waitAndPromise(ctx, c); err != nil {
		s.abandon(c)
		return randflake.Lease{}, true, err
	}
	s.held = c
	return c.lease, false, nil
}

// claim runs the claiming step: assess the store, choose a run, claim it,
// and, if its seconds have passed, record the promise in the same step.
// It returns a nil claim if no run can be had. lost says an earlier try
// lost its run to another claimant (see spread).
func (s *BlockSource) claim(ctx context.Context, lost bool) (*heldClaim, int, error) {
	t0 := s.now()
	now := t0.Unix()
	if !inLifetime(now) {
		return nil, 0, fmt.Errorf("randflake: the clock reads %s, outside the lifetime of Randflake IDs", formatSecond(now))
	}
	var c *heldClaim
	var refused int
	var reason string
	var unknown, promised int64
	var records map[int64][]byte
	var assessed *assessment
	handle, err := s.store.Update(ctx, nil, true, func(v *StoreView) (*StoreChanges, error) {
		c, refused, reason, promised, records, assessed = nil, 0, "", 0, nil, nil
		// The clock again, once the store has been read: a step that
		// waited for the store (a lock, a busy server) may read a
		// record another process wrote in a second that began after t0,
		// which is not a clock behind (rule 9). t0 stays the start of
		// the claim for EndFor.
		now := max(now, s.now().Unix())
		a, err := s.assess(v, now)
		if err != nil {
			return nil, err
		}
		assessed = a
		reason, unknown = a.reason, a.marker.unknown
		var slots []claimRun
		slots, refused = s.choose(v, a, now)
		ch := &StoreChanges{Records: map[int64][]byte{}}
		if len(slots) > 0 {
			sl := slots[0]
			if lost {
				sl = slots[spread(slots, now)]
			}
			c = &heldClaim{written: map[int64][]byte{}, lease: randflake.Lease{
				FirstNode: sl.first, LastNode: sl.first + s.blocks*s.layout.Size - 1, Start: sl.until + 1,
			}}
			for f := sl.first; f <= c.lease.LastNode; f += s.layout.Size {
				ch.Claim = append(ch.Claim, f)
			}
			if w := s.takeoverWait(a.marker.detect); w > 0 && !(v.Marker == nil && v.Fresh) {
				// Rule 14: a holder may still be issuing on these
				// blocks, its claim put back to an older copy (one in
				// which they were free, with or without a record); it
				// stops within the detection bound. Only the store's
				// first step, on a store created empty, has no holder.
				c.lease.Start = min(max(c.lease.Start, now+w+1), randflake.MaxTimestamp)
			}
			if c.lease.Start <= now {
				promised = s.promiseInto(ch, a, c.lease, now)
			}
		}
		if a.write || len(ch.Records) > 0 {
			ch.Marker = formatMarker(s.key, a.marker)
		}
		records = ch.Records
		return ch, nil
	})
	if err != nil {
		return nil, 0, err
	}
	s.assessed(assessed)
	if reason != "" {
		s.logWarn("randflake: the history of the node IDs is unknown: none is used before the longest promise has passed",
			"store", s.info.Name, "reason", reason, "until", formatSecond(unknown), "wait", fmt.Sprintf("%ds", max(unknown-now+1, 0)))
	}
	if c == nil {
		return nil, refused, nil
	}
	c.handle = handle
	c.applied(records, promised)
	if c.promised > 0 {
		c.lease.End = s.endFor(t0, c.promised)
	}
	return c, refused, nil
}

// promiseInto adds to ch the records of the blocks of l promising up to
// now + Promise, updates the digest in a's marker for them, and returns
// the promise. Nothing is recorded as written before the store has
// applied the step (heldClaim.applied).
func (s *BlockSource) promiseInto(ch *StoreChanges, a *assessment, l randflake.Lease, now int64) int64 {
	p := s.promise(now)
	for f := l.FirstNode; f <= l.LastNode; f += s.layout.Size {
		rec := blockRecord{first: f, last: f + s.layout.Size - 1, until: max(p, a.until(f)), at: now}
		if r, ok := a.records[f]; ok {
			rec.at = max(rec.at, r.at)
		}
		s.replaceDigest(a, ch, f, formatRecord(s.key, rec))
	}
	return p
}

// replaceDigest puts raw as block f's record into ch and the digest.
func (s *BlockSource) replaceDigest(a *assessment, ch *StoreChanges, f int64, raw []byte) {
	if old, ok := a.rawRecords()[f]; ok {
		xorInto(&a.marker.digest, digestOf(s.key, old))
	}
	xorInto(&a.marker.digest, digestOf(s.key, raw))
	ch.Records[f] = raw
}

// waitAndPromise waits, holding c, until its start has come, then records
// its promise (rule 4: waiting records nothing, so a process restarted
// during a wait does not push the start further out).
func (s *BlockSource) waitAndPromise(ctx context.Context, c *heldClaim) error {
	if c.promised > 0 {
		return nil
	}
	if s.log != nil {
		s.logInfo("randflake: waiting for the previous holder's last second to pass",
			"store", s.info.Name, "nodes", fmt.Sprintf("%d-%d", c.lease.FirstNode, c.lease.LastNode), "start", formatSecond(c.lease.Start))
	}
	for {
		now := s.now()
		if now.Unix() >= c.lease.Start {
			break
		}
		d := time.Unix(c.lease.Start, 0).Sub(now)
		if s.info.EndFor != nil {
			// Keep the claim alive meanwhile.
			d = min(d, s.renewEvery())
		}
		if err := Sleep(ctx, max(d, 5*time.Millisecond)); err != nil {
			return fmt.Errorf("randflake: %s: waiting for node IDs %d-%d to be free at %s: %w",
				s.info.Name, c.lease.FirstNode, c.lease.LastNode, formatSecond(c.lease.Start), err)
		}
		if s.info.EndFor != nil && s.now().Unix() < c.lease.Start {
			id, err := s.store.Renew(ctx, c.handle)
			if errors.Is(err, randflake.ErrLeaseLost) {
				return s.renewLost(ctx, id, err)
			}
			if err == nil {
				if err := s.checkPosition(ctx, id); err != nil {
					return err
				}
			}
		}
	}
	t0 := s.now()
	if s.info.EndFor != nil {
		id, err := s.store.Renew(ctx, c.handle)
		if errors.Is(err, randflake.ErrLeaseLost) {
			return s.renewLost(ctx, id, err)
		}
		if err != nil {
			return err
		}
		if err := s.checkPosition(ctx, id); err != nil {
			return err
		}
	}
	if err := s.writePromise(ctx, c, t0.Unix()); err != nil {
		return err
	}
	c.lease.End = s.endFor(t0, c.promised)
	if c.lease.End < c.lease.Start {
		return fmt.Errorf("randflake: %s: internal error: lease %v ends before it starts", s.info.Name, c.lease)
	}
	return nil
}

// renewEvery is how often a waiting claim is kept alive.
func (s *BlockSource) renewEvery() time.Duration {
	d := s.info.Promise / 3
	if s.info.EndFor != nil {
		t := time.Unix(0, 0)
		d = min(d, time.Duration(s.info.EndFor(t)-t.Unix())*time.Second/3)
	}
	return max(d, 100*time.Millisecond)
}

// Sleep waits d, or until ctx ends, and then returns ctx.Err(): the
// pause between tries that the engine makes, and a store's retry loop
// (a conflict backed off) may make too.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// rawRecords returns the raw records the assessment was made from.
func (a *assessment) rawRecords() map[int64][]byte {
	if a.raw == nil {
		a.raw = map[int64][]byte{}
	}
	return a.raw
}

// writePromise records c's promise from now on in a step of its own,
// checking that c's records are still as this source wrote them (rule 8).
func (s *BlockSource) writePromise(ctx context.Context, c *heldClaim, now int64) error {
	return s.updateHeld(ctx, c, func(ch *StoreChanges, a *assessment) int64 {
		return s.promiseInto(ch, a, c.lease, now)
	})
}

// updateHeld runs a step on c's blocks: fill adds the changes. The step
// first checks the marker and that c's records are as c wrote them; if
// not, the store's history went back or was edited under a running
// holder: the marker is reset (history unknown) and the claim is lost.
func (s *BlockSource) updateHeld(ctx context.Context, c *heldClaim, fill func(*StoreChanges, *assessment) int64) error {
	var lost string
	var err error
	var sent *StoreChanges // the changes of the last call of the step
	var promised int64     // and their promise
	var adopted bool       // the store held the uncertain records
	for attempt := 0; attempt < 8; attempt++ {
		sent, promised, adopted = nil, 0, false
		_, err = s.store.Update(ctx, c.handle, false, func(v *StoreView) (*StoreChanges, error) {
			sent, promised = nil, 0
			var a *assessment
			var m fleetMarker
			lost, adopted, a, m = s.checkView(c, v)
			if lost != "" {
				return nil, errHistoryLost
			}
			ch := &StoreChanges{Records: map[int64][]byte{}}
			a.marker = m
			a.marker.id = v.NextID
			// Rules 13 and 14: this holder's promise and detection bound
			// enter the marker with its records (every claim but a fresh
			// store's first writes its promise here, after its wait).
			s.markBounds(&a.marker)
			s.capUnknown(&a.marker, s.now().Unix(), max(s.wait, s.horizonSeen+ceilSeconds(s.info.MaxClockSkew)))
			promised = fill(ch, a)
			ch.Marker = formatMarker(s.key, a.marker)
			sent = ch
			return ch, nil
		})
		if !errors.Is(err, ErrStoreConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, errHistoryLost):
		return s.historyLost(ctx, c, lost)
	case err == nil:
		if adopted {
			c.applied(c.uncertain, c.uncertainPromise)
		}
		if sent != nil {
			c.applied(sent.Records, promised)
		}
	case sent != nil && !errors.Is(err, randflake.ErrLeaseLost):
		// The store may or may not have applied the changes: the next
		// step accepts either record, and the promise is not counted on.
		if adopted {
			c.applied(c.uncertain, c.uncertainPromise)
		}
		c.uncertain, c.uncertainPromise = sent.Records, promised
	}
	return err
}

var errHistoryLost = errors.New("history lost")

// checkView checks what a step on c's blocks read (rule 8): the marker,
// the store's identity and position, that c's blocks are still held by
// it and hold the records c wrote. It returns why the claim is lost ("" if
// it is not), whether the store holds the records of c's uncertain step,
// the records read and the marker.
func (s *BlockSource) checkView(c *heldClaim, v *StoreView) (lost string, adopted bool, a *assessment, m fleetMarker) {
	a = &assessment{records: map[int64]blockRecord{}}
	m, err := parseMarker(s.key, v.Marker)
	switch {
	case v.Marker == nil:
		lost = "the fleet marker is gone"
	case err != nil:
		lost = fmt.Sprintf("the fleet marker %v", err)
	case m.id != v.Identity.ID:
		lost = fmt.Sprintf("the store's identity changed from %q to %q", m.id, v.Identity.ID)
	case s.identity == v.Identity.ID && v.Identity.Position < s.position:
		lost = fmt.Sprintf("the store's position went back from %d to %d", s.position, v.Identity.Position)
	}
	for _, b := range v.Blocks {
		if !b.Held {
			lost = fmt.Sprintf("the claim on node IDs %d-%d is gone", b.First, b.Last)
		}
		if b.Record != nil {
			a.rawRecords()[b.First] = b.Record
		}
		if w, ok := c.written[b.First]; ok && string(w) != string(b.Record) {
			if u, ok := c.uncertain[b.First]; ok && string(u) == string(b.Record) {
				adopted = true // the uncertain step was applied
			} else {
				lost = fmt.Sprintf("the record of node IDs %d-%d is not the one this process wrote (deleted, edited or rolled back)", b.First, b.Last)
			}
		}
		if r, err := parseRecord(s.key, b.Record, b.First, b.Last); err == nil {
			a.records[b.First] = r
		}
	}
	if lost == "" {
		s.horizonSeen = max(s.horizonSeen, m.horizon)
		s.detectSeen = max(s.detectSeen, m.detect)
	}
	s.seen(v.Identity)
	return lost, adopted, a, m
}

// errChecked ends checkHeld's step without a change.
var errChecked = errors.New("checked")

// checkHeld checks, in a step that writes nothing, that c's blocks still
// hold the records c wrote under a valid marker (rule 14): a renewal
// extends the lease only after this check, so that a holder whose claim
// was put back to an older copy stops within the detection bound.
func (s *BlockSource) checkHeld(ctx context.Context, c *heldClaim) error {
	var lost string
	var adopted bool
	_, err := s.store.Update(ctx, c.handle, false, func(v *StoreView) (*StoreChanges, error) {
		lost, adopted, _, _ = s.checkView(c, v)
		if lost != "" {
			return nil, errHistoryLost
		}
		return nil, errChecked
	})
	switch {
	case errors.Is(err, errChecked):
		if adopted {
			c.applied(c.uncertain, c.uncertainPromise)
		}
		return nil
	case errors.Is(err, errHistoryLost):
		return s.historyLost(ctx, c, lost)
	case err == nil:
		return fmt.Errorf("randflake: %s: internal error: the check of node IDs %d-%d was applied as a change", s.info.Name, c.lease.FirstNode, c.lease.LastNode)
	}
	return err
}

// historyLost handles a store found to have gone back, or been edited,
// under a running holder (rule 8): the whole store's history is marked
// unknown, so that newcomers wait out the longest promise, and the claim
// is dropped, so that this holder stops and claims again.
func (s *BlockSource) historyLost(ctx context.Context, c *heldClaim, why string) error {
	s.logWarn("randflake: the lease store's history went back or was changed under a running holder: claims are dropped and the history marked unknown",
		"store", s.info.Name, "reason", why, "nodes", fmt.Sprintf("%d-%d", c.lease.FirstNode, c.lease.LastNode))
	if err := s.resetHistory(ctx, why); err != nil {
		s.logWarn("randflake: marking the history unknown failed", "store", s.info.Name, "err", err)
	}
	if c == s.held {
		s.held = nil
	}
	// Drop the claim at once (rule 8), so that a store whose claims do not
	// lapse (file locks) does not keep the blocks held for as long as
	// this process lives; claimants wait out the unknown history anyway.
	s.abandon(c)
	return fmt.Errorf("%w: %s: %w: %s", randflake.ErrLeaseLost, s.info.Name, ErrHistoryRolledBack, why)
}

// renewLost returns the error of a renewal the store reports lost (err).
// A claim is also lost when the store went back to a copy in which it had
// lapsed: if the store reported its identity with the loss, it is checked
// first, so that such a loss is known as the rollback it is and the
// history marked unknown (rule 8), not taken for a claim that lapsed.
func (s *BlockSource) renewLost(ctx context.Context, id StoreIdentity, err error) error {
	if id != (StoreIdentity{}) {
		if rerr := s.checkPosition(ctx, id); rerr != nil {
			return rerr
		}
	}
	return err
}

// checkPosition checks the identity and position a renewal saw.
func (s *BlockSource) checkPosition(ctx context.Context, id StoreIdentity) error {
	why := ""
	switch {
	case s.identity != "" && id.ID != s.identity:
		why = fmt.Sprintf("the store's identity changed from %q to %q", s.identity, id.ID)
	case id.ID == s.identity && id.Position < s.position:
		why = fmt.Sprintf("the store's position went back from %d to %d", s.position, id.Position)
	}
	s.seen(id)
	if why == "" {
		return nil
	}
	if s.held != nil {
		return s.historyLost(ctx, s.held, why)
	}
	if err := s.resetHistory(ctx, why); err != nil {
		s.logWarn("randflake: marking the history unknown failed", "store", s.info.Name, "err", err)
	}
	return fmt.Errorf("%w: %s: %w: %s", randflake.ErrLeaseLost, s.info.Name, ErrHistoryRolledBack, why)
}

// ResetHistory marks the history of every block of the store unknown up
// to now + the longest promise, so that the next claims wait it out. It
// is the operator's tool after a restore that nothing can detect (a copy
// of the whole store restored under the same identity while no holder
// ran). Holders keep their claims; only new claims wait.
func (s *BlockSource) ResetHistory(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.info.Durable {
		return fmt.Errorf("randflake: %s records nothing: there is no history to reset", s.info.Name)
	}
	return s.resetHistory(ctx, "reset by the operator")
}

func (s *BlockSource) resetHistory(ctx context.Context, why string) error {
	var err error
	var unknown int64
	var read StoreIdentity
	for attempt := 0; attempt < 8; attempt++ {
		now := s.now().Unix()
		_, err = s.store.Update(ctx, nil, true, func(v *StoreView) (*StoreChanges, error) {
			a, err := s.assess(v, now)
			if err != nil {
				return nil, err
			}
			wait := max(s.wait, max(a.marker.horizon, s.horizonSeen)+ceilSeconds(s.info.MaxClockSkew))
			a.marker.unknown = max(a.marker.unknown, min(now+wait, randflake.MaxTimestamp))
			unknown, read = a.marker.unknown, a.read
			return &StoreChanges{Marker: formatMarker(s.key, a.marker)}, nil
		})
		if !errors.Is(err, ErrStoreConflict) {
			break
		}
	}
	if err == nil {
		// The loss is recorded: compare with this step's position from
		// now on (see assessed).
		s.identity, s.position = read.ID, read.Position
		s.logWarn("randflake: the history of every node-ID block is marked unknown: no block is claimed before the longest promise has passed",
			"store", s.info.Name, "reason", why, "until", formatSecond(unknown))
	}
	return err
}

// claimOf returns the claim of l, or an error.
func (s *BlockSource) claimOf(l randflake.Lease) (*heldClaim, error) {
	c := s.held
	if c == nil || !c.lease.SameClaim(l) {
		return nil, fmt.Errorf("randflake: %s: lease on %v is not held by this source", s.info.Name, l)
	}
	return c, nil
}

// Renew keeps the claim alive and moves the lease end forward, recording a
// new promise first when the end would pass the last one (rule 3). A
// store that went back in time is [randflake.ErrLeaseLost] (rule 8).
func (s *BlockSource) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.claimOf(l)
	if err != nil {
		return randflake.Lease{}, err
	}
	if !s.info.Durable {
		return c.lease, nil
	}
	t0 := s.now()
	if s.info.EndFor != nil {
		id, err := s.store.Renew(ctx, c.handle)
		if errors.Is(err, randflake.ErrLeaseLost) {
			err = s.renewLost(ctx, id, err)
			s.held = nil
			return randflake.Lease{}, err
		}
		if err != nil {
			return randflake.Lease{}, err
		}
		if err := s.checkPosition(ctx, id); err != nil {
			return randflake.Lease{}, err
		}
	}
	end := s.endFor(t0, s.promise(t0.Unix()))
	if end <= c.lease.End {
		return c.lease, nil
	}
	if end > c.promised {
		err = s.writePromise(ctx, c, t0.Unix())
	} else {
		// Rule 14: the lease runs on only after a check of its records.
		err = s.checkHeld(ctx, c)
	}
	if err != nil {
		if errors.Is(err, randflake.ErrLeaseLost) {
			s.held = nil
		}
		return randflake.Lease{}, err
	}
	c.lease.End = s.endFor(t0, c.promised)
	return c.lease, nil
}

// Release records the newest second used (at least l.Start-1, at most the
// promise) and frees the blocks in one step. If the store cannot be
// reached, the claim lapses and the promise stands.
func (s *BlockSource) Release(ctx context.Context, l randflake.Lease, lastUsed int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.claimOf(l)
	if err != nil {
		return err
	}
	s.held = nil
	if !s.info.Durable {
		_, err := s.store.Update(ctx, c.handle, false, func(*StoreView) (*StoreChanges, error) {
			return &StoreChanges{Release: true}, nil
		})
		return err
	}
	if lastUsed > c.lease.End {
		s.abandon(c)
		return fmt.Errorf("randflake: %s: release of %v reports second %s, after the lease's end; the promise stands", s.info.Name, c.lease, formatSecond(lastUsed))
	}
	until := max(min(lastUsed, c.promised), c.lease.Start-1, randflake.Epoch)
	now := s.now().Unix()
	err = s.updateHeld(ctx, c, func(ch *StoreChanges, a *assessment) int64 {
		for f := c.lease.FirstNode; f <= c.lease.LastNode; f += s.layout.Size {
			rec := blockRecord{first: f, last: f + s.layout.Size - 1, until: until, at: now}
			if r, ok := a.records[f]; ok {
				rec.at = max(rec.at, r.at)
			}
			s.replaceDigest(a, ch, f, formatRecord(s.key, rec))
		}
		ch.Release = true
		return 0
	})
	if err != nil {
		s.abandon(c)
	}
	return err
}

// abandon frees c's blocks without recording anything, best effort: the
// recorded promise stands.
func (s *BlockSource) abandon(c *heldClaim) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.store.Update(ctx, c.handle, false, func(*StoreView) (*StoreChanges, error) {
		return &StoreChanges{Release: true}, nil
	})
}

// acquireVolatile hands out the one range of a store that records nothing
// (rule 10): the deployment guarantees one holder at a time, and the
// clock alone tells which seconds a predecessor may have used, so the
// lease starts after now + MaxClockSkew.
func (s *BlockSource) acquireVolatile(ctx context.Context) (randflake.Lease, error) {
	var first int64 = -1
	handle, err := s.store.Update(ctx, nil, true, func(v *StoreView) (*StoreChanges, error) {
		if len(v.Blocks) == 0 {
			return nil, fmt.Errorf("randflake: %s holds no node IDs", s.info.Name)
		}
		first = v.Blocks[0].First
		return &StoreChanges{Claim: []int64{first}}, nil
	})
	if err != nil {
		return randflake.Lease{}, err
	}
	l, err := volatileLease(first, first+s.blocks*s.layout.Size-1, s.now().Unix(), s.info.MaxClockSkew)
	if err != nil {
		return randflake.Lease{}, err
	}
	s.held = &heldClaim{handle: handle, lease: l}
	return l, nil
}
