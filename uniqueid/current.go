package uniqueid

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// The process-wide state of the Current layout: one random root, drawn from
// crypto/rand on first use, and one sequence, as an httpd child process has.
var (
	currentSeq  sequence
	currentRoot = sync.OnceValues(func() ([RootLen]byte, error) {
		var r [RootLen]byte
		if _, err := rand.Read(r[:]); err != nil {
			return r, fmt.Errorf("uniqueid: drawing the random root: %w", err)
		}
		return r, nil
	})
)

// currentStart starts the counter at a random value, as httpd does, and the
// thread index at zero. The 80-bit random root already separates this
// process from every other, including its own predecessors. Like httpd 2.4,
// the counter counts modulo 65535 (see sequence.next65535).
func currentStart() uint64 {
	return uint64(mrand.Uint32N(counterPeriod65535))
}

// CurrentGenerator makes tokens of the Current layout, as Apache httpd 2.4
// emits them: timestamp, 10-byte random root, counter and thread index.
//
// Its methods are safe for concurrent use by any number of goroutines. The
// zero value is not usable; create generators with NewCurrent.
type CurrentGenerator struct {
	root [RootLen]byte
	now  func() int64 // seconds since the epoch; nil means the system clock

	// The record is three 48-bit chunks and a 16-bit tail: timestamp and
	// root bytes 0-1; root bytes 2-7, which never change and are encoded
	// once; root bytes 8-9, counter and the high half of the thread index;
	// the low half of the thread index.
	rootHi, rootLo uint64
	mid            [8]byte
}

func newCurrentGenerator(root [RootLen]byte) *CurrentGenerator {
	g := &CurrentGenerator{root: root}
	g.rootHi = uint64(binary.BigEndian.Uint16(root[0:2]))
	put48(g.mid[:], be48(root[2:8]), &currentEncode)
	g.rootLo = uint64(binary.BigEndian.Uint16(root[8:10]))
	return g
}

// NewCurrent returns a generator of Current tokens. Every CurrentGenerator
// of a process shares one root, drawn from crypto/rand when the first one
// is made, and one sequence of counters and thread indices, so the process
// behaves as a single httpd child and its tokens never repeat. The error is
// non-nil only if the system's random source fails.
func NewCurrent() (*CurrentGenerator, error) {
	root, err := currentRoot()
	if err != nil {
		return nil, err
	}
	currentSeq.init(currentStart)
	return newCurrentGenerator(root), nil
}

// Root returns the process's random root, written into every token.
func (g *CurrentGenerator) Root() [RootLen]byte { return g.root }

func (g *CurrentGenerator) unix() int64 {
	if g.now != nil {
		return g.now()
	}
	return unixNow()
}

// Append appends a new 27-character token, stamped with the current second,
// to dst and returns the extended slice. It allocates only if dst lacks the
// capacity.
func (g *CurrentGenerator) Append(dst []byte) []byte {
	return g.appendAt(dst, g.unix())
}

// AppendAt is like Append but stamps the token with the second of t, for
// callers that already know when the request arrived. The timestamp field
// holds the low 32 bits of t's Unix time, as in httpd. Uniqueness does not
// depend on t.
func (g *CurrentGenerator) AppendAt(dst []byte, t time.Time) []byte {
	return g.appendAt(dst, t.Unix())
}

func (g *CurrentGenerator) appendAt(dst []byte, sec int64) []byte {
	counter, thread := currentSeq.next65535()
	dst, out := extend(dst, CurrentLen)
	put48(out[0:8], uint64(uint32(sec))<<16|g.rootHi, &currentEncode)
	copy(out[8:16], g.mid[:])
	put48(out[16:24], g.rootLo<<32|uint64(counter)<<16|uint64(thread>>16), &currentEncode)
	putTail(out[24:27], uint16(thread), &currentEncode)
	return dst
}

// GenerateString returns a new token. The error is always nil; the
// signature lets a CurrentGenerator serve as a Source for Middleware.
func (g *CurrentGenerator) GenerateString() (string, error) {
	var buf [CurrentLen]byte
	return string(g.Append(buf[:0])), nil
}

// Generate returns a new token in decoded form.
func (g *CurrentGenerator) Generate() Token {
	counter, thread := currentSeq.next65535()
	return Token{
		Layout:      Current,
		Time:        time.Unix(int64(uint32(g.unix())), 0).UTC(),
		Root:        g.root,
		Counter:     counter,
		ThreadIndex: thread,
	}
}
