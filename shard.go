package randflake

import (
	"errors"
	"runtime"
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
	// Shards is the number of shards; 0 means one per CPU
	// (runtime.GOMAXPROCS). It only affects contention.
	Shards int
}

// Sharded is a lock-free generator for a range of node IDs, with one shard
// per CPU. Each shard reserves sequence numbers from its own node ID with
// one atomic operation and encrypts them in batches on the SIMD kernel;
// Generate hands them out from a per-shard buffer. When a node ID's
// sequence space for the current second is used up, the shard moves to
// another node ID of the range, so a process issues up to
// (LastNode-FirstNode+1) x 131,072 IDs per second.
//
// Uniqueness never depends on which goroutine lands on which shard: every
// node ID's (second, sequence) space is reserved atomically, and every
// buffered ID is handed out at most once. Handed-out IDs carry a second no
// more than one second behind the clock and inside the lease. (The
// clock of Generate is the coarse clock: in the few milliseconds after a
// process is resumed from a stop, before the coarse clock's goroutine has
// run, Generate may still hand out IDs buffered before the stop, carrying
// seconds inside the lease as recorded; GenerateBatch reads the wall clock
// and never does.) When the clock steps back, each node ID keeps issuing
// from the newest second it has used while that second lasts (see
// Generator).
//
// A Sharded is safe for concurrent use.
type Sharded struct {
	Inspector  // reads IDs back under the generator's secret
	nodeSet    // the lease's node IDs and the reservation path
	cipher     *Sparx64
	timeSource func() int64
	shards     []*shard // allocated one by one, apart from each other
}

// ringSize is the number of IDs a shard encrypts per batch for Generate.
const ringSize = 512

// shard is one CPU's share of a Sharded generator. Generate takes tickets
// from ticket; ticket t is slot t%ringSize of lap t/ringSize, and lap L
// lives in buffer L%2. While one buffer is being handed out, the other is
// refilled, so callers rarely wait for encryption.
type shard struct {
	ticket atomic.Uint64
	_      [cacheLine - 8]byte

	node atomic.Uint64 // index of the node this shard reserves from
	buf  [2]lapBuffer
	_    [cacheLine]byte
}

// lapBuffer holds one lap of encrypted IDs. stamp is lap+1 while the
// buffer holds that lap's IDs, 0 when it holds none and stampWriting while
// a filler rewrites it. Readers check stamp before and after reading an ID
// (a sequence lock), so an ID is only handed out for the lap it was
// encrypted for.
type lapBuffer struct {
	stamp   atomic.Uint64
	filling atomic.Bool   // held by the one goroutine refilling the buffer
	claimed atomic.Uint64 // highest lap+1 a filler has taken on
	sec     atomic.Int64  // second of the IDs
	count   atomic.Uint64 // number of valid IDs
	ids     [ringSize]uint64
}

const stampWriting = ^uint64(0)

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

// idNow is the clock of the per-ID calls (Generate on Sharded and Local):
// the TimeSource, or else the coarse clock; with ErrInvalidLease outside
// the lease (see inLease).
func (s *Sharded) idNow() (int64, error) {
	now, ok := coarseFast()
	if s.timeSource != nil {
		now = s.timeSource()
	} else if !ok {
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

// Generate returns a new encrypted ID. It serves IDs from the calling CPU's
// shard buffer, so the clock and the cipher are paid once per batch.
func (s *Sharded) Generate() (int64, error) {
	sh := s.shards[s.pick()]
	now, err := s.idNow()
	if err != nil {
		return 0, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		t := sh.ticket.Add(1) - 1
		lap, i := t/ringSize, t%ringSize
		b := &sh.buf[lap&1]
		if i == ringSize/2 {
			// Half way through this lap: prepare the next one.
			s.fill(sh, lap+1)
		}
		st := b.stamp.Load()
		if st != lap+1 && st < lap+1 {
			// Not filled yet (or a fill failed): fill it now unless
			// another goroutine is at it.
			s.fill(sh, lap)
			st = b.stamp.Load()
		}
		if st != lap+1 {
			break // being filled by another goroutine, or lapped
		}
		sec := b.sec.Load()
		ok := i < b.count.Load()
		var id uint64
		if ok {
			id = atomic.LoadUint64(&b.ids[i])
		}
		if b.stamp.Load() != lap+1 || !ok {
			continue
		}
		if sec >= now-1 {
			return int64(id), nil
		}
		// The buffered IDs are too old: jump to a lap two ahead, which
		// reuses this buffer and is filled afresh.
		skipTo(&sh.ticket, (lap+2)*ringSize)
	}
	return s.generateDirect(sh, now)
}

// skipTo moves a ticket counter forward to at least t.
func skipTo(ticket *atomic.Uint64, t uint64) {
	for {
		cur := ticket.Load()
		if cur >= t || ticket.CompareAndSwap(cur, t) {
			return
		}
	}
}

// generateDirect issues one ID without the buffer.
func (s *Sharded) generateDirect(sh *shard, now int64) (int64, error) {
	raw, err := s.reserveOne(&sh.node, now, s.timeSource == nil)
	if err != nil {
		return 0, err
	}
	return int64(s.cipher.EncryptID(raw)), nil
}

// fill encrypts lap's IDs into its buffer, unless the buffer is being
// filled or lap has been taken on already.
func (s *Sharded) fill(sh *shard, lap uint64) {
	b := &sh.buf[lap&1]
	if !b.filling.CompareAndSwap(false, true) {
		return
	}
	defer b.filling.Store(false)
	if b.claimed.Load() >= lap+1 {
		return
	}
	b.claimed.Store(lap + 1)
	// Swap, not Store: a read-modify-write orders the ID writes below after
	// it on every architecture, so a reader that sees the old stamp after
	// reading an ID has not read a new one.
	b.stamp.Swap(stampWriting)
	now, err := s.inLease(s.now())
	var count uint64
	var sec int64
	if err == nil {
		count, sec = s.encryptLap(sh, now, b)
	}
	b.sec.Store(sec)
	b.count.Store(count)
	if count == 0 {
		b.stamp.Store(0)
		return
	}
	b.stamp.Store(lap + 1)
}

// encryptLap reserves up to ringSize sequence numbers at second now and
// writes their encrypted IDs into b.
func (s *Sharded) encryptLap(sh *shard, now int64, b *lapBuffer) (count uint64, sec int64) {
	// Under the race detector the IDs are written with atomic stores, as
	// readers of the previous lap may still be reading them; otherwise
	// they are written in place and the stamp protocol guards the readers.
	var scratch *[ringSize]uint64
	if raceEnabled {
		scratch = new([ringSize]uint64)
	} else {
		scratch = &b.ids
	}
	n, sec, _ := s.reserveRun(&sh.node, now, scratch[:], true)
	if n == 0 {
		return 0, 0
	}
	s.cipher.EncryptIDs(scratch[:n], scratch[:n])
	if raceEnabled {
		for j := 0; j < n; j++ {
			atomic.StoreUint64(&b.ids[j], scratch[j])
		}
	}
	return uint64(n), sec
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
