package randflake

// Local is a generator handle for one goroutine: it hands out IDs from a
// private buffer that it refills from its generator with one reservation
// and one SIMD encryption per 512 IDs. With no atomic operation and no
// shard lookup per ID it is the fastest way to take IDs one at a time, for
// a worker goroutine that generates many. Sharded.NewLocal and
// Leased.NewLocal return one.
//
// A Local must not be used by more than one goroutine at a time. IDs still
// in its buffer when it is dropped are never handed out (they leave gaps,
// never duplicates). Its IDs obey the rules of Sharded.Generate: inside the
// lease, and never more than one second behind the clock. A Local of a
// Leased generator also follows the Leased's lease: it stops at once when
// the lease is lost or the generator closed (its buffered IDs are dropped),
// and moves to the new lease when one is acquired.
type Local struct {
	s      *Sharded // the generator the buffer was filled from (nil before a Leased's first call)
	leased *Leased  // the Leased generator, or nil for a Sharded's Local
	idBuffer
}

// NewLocal returns a Local handle on s.
func (s *Sharded) NewLocal() *Local { return &Local{s: s} }

// NewLocal returns a Local handle on l: the fastest way for one goroutine
// to take IDs one at a time. It checks the lease at every ID, as Generate
// does, and returns the same errors.
func (l *Leased) NewLocal() *Local { return &Local{leased: l} }

// Generate returns a new encrypted ID.
func (l *Local) Generate() (int64, error) {
	if l.leased != nil {
		return l.generateLeased()
	}
	return l.generate()
}

// generate hands out an ID of l.s.
func (l *Local) generate() (int64, error) {
	now, ok := l.s.fastNow()
	if !ok {
		var err error
		if now, err = l.s.idNowSlow(); err != nil {
			return 0, err
		}
	}
	if id, ok := l.next(now); ok {
		return int64(id), nil
	}
	return l.refill()
}

// generateLeased hands out an ID of the Leased's current generator. When
// that is not the one the buffer was filled from (the lease was lost, and
// maybe replaced), the buffer is dropped.
func (l *Local) generateLeased() (int64, error) {
	ld := l.leased
	if ld.closed.Load() {
		return 0, ErrClosed
	}
	g := ld.gen.Load()
	if g != l.s {
		l.s, l.pos, l.n = g, 0, 0
	}
	if g == nil {
		return 0, ld.explain(ErrInvalidLease)
	}
	return ld.explainID(l.generate())
}

// GenerateString returns a new encrypted ID in its string form.
func (l *Local) GenerateString() (string, error) { return stringOf(l.Generate()) }

// refill fills the buffer anew, reading the clock afresh, and returns its
// first ID.
func (l *Local) refill() (int64, error) {
	s := l.s
	now, err := s.inLease(s.now())
	if err != nil {
		return 0, err
	}
	return s.fill(&l.idBuffer, &s.shards[s.pick()].node, now)
}
