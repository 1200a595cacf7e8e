package randflake

// localSize is the number of IDs a Local encrypts per refill.
const localSize = 512

// Local is a generator handle for one goroutine: it hands out IDs from a
// private buffer that it refills from its Sharded generator with one
// reservation and one SIMD pass per localSize IDs. With no atomic operation
// and no shard lookup per ID it is the fastest way to take IDs one at a
// time, for a worker goroutine that generates many.
//
// A Local must not be used by more than one goroutine at a time. IDs still
// in its buffer when it is dropped are never handed out (they leave gaps,
// never duplicates). Its IDs obey the rules of Sharded.Generate: inside the
// lease, and never more than one second behind the clock.
type Local struct {
	s   *Sharded
	pos int
	n   int
	sec int64 // the second of the buffered IDs
	ids [localSize]uint64
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
	if l.pos < l.n && l.sec >= now-1 {
		id := l.ids[l.pos]
		l.pos++
		return int64(id), nil
	}
	return l.refill()
}

// refill reserves and encrypts a new buffer, reading the clock afresh, and
// returns its first ID.
func (l *Local) refill() (int64, error) {
	s := l.s
	now, err := s.inLease(s.now())
	if err != nil {
		return 0, err
	}
	n, sec, err := s.reserveRun(&s.shards[s.pick()].node, now, l.ids[:], true)
	l.pos, l.n, l.sec = 0, n, sec
	if n == 0 {
		return 0, err
	}
	s.cipher.EncryptIDs(l.ids[:n], l.ids[:n])
	l.pos = 1
	return int64(l.ids[0]), nil
}
