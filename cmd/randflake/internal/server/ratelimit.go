package server

import (
	"math"
	"sync"
	"time"
)

// The fair shares of Config.ClientRate and Config.ClientBurst: a token
// bucket per client, counted in IDs. A client's bucket holds up to burst
// IDs and fills at rate IDs a second; a request for count IDs takes count
// from it, or is refused whole (429, kind quota, Retry-After: the seconds
// until count would be there, rounded up) and takes nothing. A count above
// the burst could never be served, and is a 400 instead. So a client that
// asks for huge batches as fast as it can gets no more than its rate, and
// every other client keeps its own.
//
// Memory stays bounded: a bucket that has filled up again is the same as
// a new one and is dropped (sweep), and once maxBuckets clients have
// buckets that are not full, each further client shares one overflow
// bucket with the others in its situation until room is made.

// maxBuckets bounds the number of buckets kept.
const maxBuckets = 1 << 16

// sweepEvery is how often full buckets are dropped, at most.
const sweepEvery = 10 * time.Second

// limiter holds the buckets.
type limiter struct {
	rate  float64 // IDs a second
	burst float64 // IDs
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	overflow  bucket // for clients beyond maxBuckets
	lastSweep time.Time
}

// bucket is one client's share: tokens IDs as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(rate, burst int64, now func() time.Time) *limiter {
	l := &limiter{rate: float64(rate), burst: float64(burst), now: now, buckets: map[string]*bucket{}}
	l.lastSweep = now()
	l.overflow = bucket{tokens: l.burst, at: l.lastSweep}
	return l
}

// fill brings b up to now.
func (l *limiter) fill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(l.burst, b.tokens+l.rate*d.Seconds())
		b.at = now
	}
}

// take charges n IDs to key's bucket. It returns the bucket charged, to
// refund if the IDs are not issued, or, if there are not n IDs in it, nil
// and how long until there would be.
func (l *limiter) take(key string, n int) (*bucket, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		// A full map is swept at most once a second, so that clients
		// that keep coming new cannot make every request a sweep.
		since := now.Sub(l.lastSweep)
		if since >= sweepEvery || len(l.buckets) >= maxBuckets && since >= time.Second {
			l.sweep(now)
		}
		if len(l.buckets) < maxBuckets {
			b = &bucket{tokens: l.burst, at: now}
			l.buckets[key] = b
		} else {
			b = &l.overflow
		}
	}
	l.fill(b, now)
	need := float64(n)
	if b.tokens < need {
		return nil, time.Duration(math.Ceil((need - b.tokens) / l.rate * float64(time.Second)))
	}
	b.tokens -= need
	return b, 0
}

// refund gives n IDs back to b, which take returned.
func (l *limiter) refund(b *bucket, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.tokens = min(l.burst, b.tokens+float64(n))
}

// sweep drops the buckets that are full again: a new bucket would be the
// same. l.mu is held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for key, b := range l.buckets {
		if b.tokens+l.rate*now.Sub(b.at).Seconds() >= l.burst {
			delete(l.buckets, key)
		}
	}
}

// size returns the number of buckets kept (for tests).
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// retryAfter is the Retry-After value for a wait: whole seconds, rounded
// up, at least 1.
func retryAfter(wait time.Duration) int64 {
	s := int64(math.Ceil(wait.Seconds()))
	return max(1, s)
}
