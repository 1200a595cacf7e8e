package uniqueid

import (
	"sync"
	"sync/atomic"
)

// sequence hands out the (counter, thread index) pairs of one layout for the
// whole process. Each number is taken with a single atomic add, so no two
// callers, on any goroutine, ever receive the same one, and each number
// maps to a distinct pair: the counter is the number modulo the counter's
// period and the thread index the quotient. The pair therefore repeats only
// after period * 2^32 (about 2^48) tokens, whatever the clock does.
type sequence struct {
	once sync.Once
	n    atomic.Uint64
}

// init sets the starting number once per process; later calls are no-ops.
func (s *sequence) init(start func() uint64) {
	s.once.Do(func() { s.n.Store(start()) })
}

// next16 returns the next pair for a counter of period 65536, which the
// classic mod_unique_id uses: the counter is the low 16 bits of the number
// and the thread index the next 32.
func (s *sequence) next16() (counter uint16, thread uint32) {
	v := s.n.Add(1) - 1
	return uint16(v), uint32(v >> 16)
}

// counterPeriod65535 is the counter period of httpd 2.4, which derives the
// counter from a 32-bit count modulo 65535, so that 65535 never occurs.
const counterPeriod65535 = 1<<16 - 1

// next65535 returns the next pair for a counter of period 65535, as httpd
// 2.4 emits it.
func (s *sequence) next65535() (counter uint16, thread uint32) {
	v := s.n.Add(1) - 1
	return uint16(v % counterPeriod65535), uint32(v / counterPeriod65535)
}
