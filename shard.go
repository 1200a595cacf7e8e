package randflake

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// ShardedConfig configures a Sharded generator.
type ShardedConfig struct {
	// Secret is the 16-byte key shared by every generator of the
	// deployment.
	Secret []byte
	// FirstNode and LastNode bound the node IDs this process may use,
	// inclusive. No other generator may use them during the lease.
	FirstNode, LastNode int64
	// LeaseStart and LeaseEnd bound, in Unix seconds inclusive, the time
	// during which the node IDs are this process's.
	LeaseStart, LeaseEnd int64
	// TimeSource, if set, returns the current Unix time in seconds; it is
	// called once per Generate, GenerateString or GenerateBatch call. If
	// nil, Generate reads the package's coarse clock (the wall clock, at
	// most 10ms old while the process runs), and GenerateBatch and the
	// refills of the per-CPU buffers read the wall clock itself, so that a
	// process resumed after a stop never fills a batch with the second it
	// was stopped in.
	TimeSource func() int64
	// Shards is the number of node cursors GenerateBatch and Local
	// handles reserve through; 0 means one per CPU (runtime.GOMAXPROCS).
	// It only affects contention. Generate keeps one buffer per CPU
	// whatever it is.
	Shards int
}

// Sharded is a lock-free generator for a range of node IDs, for a process
// whose goroutines take IDs concurrently. It issues up to
// (LastNode-FirstNode+1) x 131,072 IDs per second: when a node ID has
// issued every ID of the current second, the generator moves on to
// another node ID of the range.
//
// Generate hands out IDs from a buffer per CPU (per GOMAXPROCS), refilled
// 512 IDs at a time with one reservation and one SIMD encryption, so that
// an ID costs no atomic operation; a Local (NewLocal) does the same for
// one goroutine. GenerateBatch fills a slice with one reservation per node
// ID used and encrypts it in place.
//
// Every ID is issued at most once, whichever goroutines run where (the
// argument is in docs/design.md). IDs carry a second inside the lease and
// no more than one second behind the clock. (Generate's clock is a coarse
// one, at most 10ms old: in the few milliseconds after a process resumes
// from a stop, Generate may still hand out IDs buffered before the stop,
// with the seconds they were reserved in, inside the lease; GenerateBatch
// reads the wall clock and never does.) When the clock steps back, each
// node ID keeps issuing from the newest second it has used while that
// second lasts (see Generator).
//
// A Sharded is safe for concurrent use.
type Sharded struct {
	Inspector  // reads IDs back under the generator's secret
	nodeSet    // the lease's node IDs and the reservation path
	cipher     *Sparx64
	timeSource func() int64
	shards     []*shard // allocated one by one, apart from each other
	slotSet             // Generate's buffers (slots, one per P at creation)
}

// shard is one CPU's cursor into the node set: the node it reserves from.
type shard struct {
	_    [cacheLine]byte
	node atomic.Uint64 // index of the node this shard reserves from
	_    [cacheLine - 8]byte
}

// slot is the Generate buffer of one P. Its buffer is read and written
// only by the goroutine that holds the slot: the one pinned to the P, or
// the holder of mu (see generateLocked).
type slot struct {
	_ [cacheLine]byte
	idBuffer
	cursor *atomic.Uint64 // the node this slot reserves from (a shard's)
	mu     sync.Mutex
	_      [cacheLine]byte
}

// NewSharded returns a sharded generator.
func NewSharded(cfg ShardedConfig) (*Sharded, error) {
	if err := checkLease(cfg.LeaseStart, cfg.LeaseEnd); err != nil {
		return nil, err
	}
	if CheckNodeRange(cfg.FirstNode, cfg.LastNode) != nil {
		return nil, ErrInvalidNode
	}
	if cfg.Shards < 0 {
		return nil, errors.New("randflake: negative shard count")
	}
	c, err := newIDCipher(cfg.Secret)
	if err != nil {
		return nil, err
	}
	lease := Lease{FirstNode: cfg.FirstNode, LastNode: cfg.LastNode, Start: cfg.LeaseStart, End: cfg.LeaseEnd}
	return newSharded(c, lease, cfg.Shards, cfg.TimeSource), nil
}

// newSharded builds a sharded generator on an expanded key and a valid
// lease, with the given number of shards (0: one per CPU).
func newSharded(c *Sparx64, lease Lease, shards int, timeSource func() int64) *Sharded {
	n := shards
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	n = min(n, 1024)
	s := &Sharded{
		Inspector:  Inspector{c},
		cipher:     c,
		timeSource: timeSource,
		shards:     make([]*shard, n),
	}
	s.init(lease)
	for i := range s.shards {
		s.shards[i] = new(shard)
		s.shards[i].node.Store(s.visit(uint64(i)))
	}
	s.spare.Store(uint64(n))
	s.slots = make([]slot, runtime.GOMAXPROCS(0))
	for i := range s.slots {
		s.slots[i].cursor = &s.shards[i%n].node
	}
	return s
}

// now is the clock of batches and buffer refills: the TimeSource, or else
// the wall clock read directly (wallNow).
func (s *Sharded) now() int64 {
	if s.timeSource == nil {
		return wallNow()
	}
	return s.timeSource()
}

// The clock of the per-ID calls (Generate on Sharded and Local) is the
// TimeSource, or else the coarse clock, with ErrInvalidLease outside the
// lease (see inLease). Its fast path, fastNow, is inlined into them;
// idNowSlow is the rest.

// fastNow is the coarse clock's second if it is fresh, inside the lease
// and the generator's clock (no TimeSource).
func (s *Sharded) fastNow() (int64, bool) {
	now, ok := coarseFast()
	return now, ok && s.timeSource == nil && now >= s.leaseStart && now <= s.leaseEnd.Load()
}

// idNowSlow is the per-ID clock with a TimeSource, a stale coarse clock or a reading
// outside the lease.
func (s *Sharded) idNowSlow() (int64, error) {
	var now int64
	if s.timeSource != nil {
		now = s.timeSource()
	} else {
		now = coarseNow()
	}
	if now < s.leaseStart || now > s.leaseEnd.Load() {
		return s.inLease(now)
	}
	return now, nil
}

// inLease returns now, or the wall clock's second when now, a coarse
// reading, is still before the lease's start and the wall clock is not (at
// a second boundary the coarse clock lags by up to clockTick), and
// ErrInvalidLease if that second is outside the lease.
func (s *Sharded) inLease(now int64) (int64, error) {
	if now < s.leaseStart && s.timeSource == nil {
		now = max(now, wallNow())
	}
	if now < s.leaseStart || now > s.leaseEnd.Load() {
		return now, ErrInvalidLease
	}
	return now, nil
}

// Generate returns a new encrypted ID. It serves IDs from the calling
// CPU's buffer, so that reading the clock and encrypting are paid once per
// 512 IDs. Once every node ID of the range has issued all IDs of the
// current second, it returns an error wrapping ErrResourceExhausted until
// the next second; GenerateContext waits instead.
func (s *Sharded) Generate() (int64, error) {
	// The clock is read before the slot is held: a TimeSource may block,
	// and a pinned goroutine must not.
	now, ok := s.fastNow()
	if !ok {
		var err error
		if now, err = s.idNowSlow(); err != nil {
			return 0, err
		}
	}
	if !lockedSlots {
		// Pinned to its P, the goroutine cannot be preempted or moved
		// until it unpins: no other goroutine runs on the P meanwhile, so
		// none can touch the P's slot.
		if p := runtimeProcPin(); p < len(s.slots) {
			sl := &s.slots[p]
			if id, ok := sl.next(now); ok {
				runtimeProcUnpin()
				return int64(id), nil
			}
			id, err := s.refill(sl, now)
			runtimeProcUnpin()
			return id, err
		}
		runtimeProcUnpin()
	}
	return s.generateLocked(now)
}

// generateLocked is Generate on a slot held with its mutex: every slot in
// purego and race builds, and the extra slot of a P made after NewSharded
// otherwise.
func (s *Sharded) generateLocked(now int64) (int64, error) {
	sl := s.lockSlot()
	defer sl.mu.Unlock()
	if id, ok := sl.next(now); ok {
		return int64(id), nil
	}
	return s.refill(sl, now)
}

// refill empties sl, fills it anew and hands out its first ID; the caller
// holds sl. With the wall clock, the fill reads it afresh (a coarse
// reading may be stale after a stop); with a TimeSource it uses now, the
// caller's reading, so as not to call the TimeSource while holding the
// slot.
func (s *Sharded) refill(sl *slot, now int64) (int64, error) {
	sl.pos, sl.n = 0, 0
	if s.timeSource == nil {
		var err error
		if now, err = s.inLease(wallNow()); err != nil {
			return 0, err
		}
	}
	return s.fill(&sl.idBuffer, sl.cursor, now)
}

// GenerateString returns a new encrypted ID in its string form.
func (s *Sharded) GenerateString() (string, error) { return stringOf(s.Generate()) }

// GenerateBatch fills dst with new IDs: sequence numbers are reserved a run
// at a time with one atomic operation per node ID used, and the run is
// encrypted on the SIMD kernel. It returns the number of IDs written; if
// that is less than len(dst), the error says why.
func (s *Sharded) GenerateBatch(dst []int64) (int, error) {
	sh := s.shards[s.pick()]
	now, err := s.inLease(s.now())
	if err != nil {
		return 0, err
	}
	u := asUint64s(dst)
	n, _, err := s.reserveRun(&sh.node, now, u, false)
	s.cipher.EncryptIDs(u[:n], u[:n])
	return n, err
}

// UpdateLease extends the lease, with the rules of Generator.UpdateLease.
func (s *Sharded) UpdateLease(leaseStart, leaseEnd int64) bool {
	return s.updateLease(leaseStart, leaseEnd)
}

// Lease returns the node range and the current lease.
func (s *Sharded) Lease() Lease {
	return s.lease()
}
