package randflake

// Local is a generator handle for one goroutine: it hands out IDs from a
// private buffer that it refills from its Sharded generator with one
// reservation and one SIMD pass per bufferIDs IDs. With no atomic operation
// and no shard lookup per ID it is the fastest way to take IDs one at a
// time, for a worker goroutine that generates many.
//
// A Local must not be used by more than one goroutine at a time. IDs still
// in its buffer when it is dropped are never handed out (they leave gaps,
// never duplicates). Its IDs obey the rules of Sharded.Generate: inside the
// lease, and never more than one second behind the clock.
type Local struct {
	s *Sharded
	idBuffer
}

// NewLocal returns a Local handle on s.
func (s *Sharded) NewLocal() *Local { return &Local{s: s} }

// Generate returns a new encrypted ID.
func (l *Local) Generate() (int64, error) {
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
