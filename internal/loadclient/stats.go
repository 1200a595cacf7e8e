package loadclient

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// histogram counts request latencies in fixed memory: below 128 ns
// one bucket per nanosecond, above 64 buckets per power of two, so that a
// bucket's middle is within 1/128 (under 1%) of every latency in it.
// Safe for concurrent use.
type histogram struct {
	counts [histogramBuckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

// histogramBuckets covers latencies up to 2^41 ns (36 minutes).
const histogramBuckets = 128 + (41-7)*64

// bucket returns the bucket of d.
func bucket(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 128 {
		return int(v)
	}
	b := bits.Len64(v) // 8 or more
	i := 128 + (b-8)*64 + int(v>>(b-7))&63
	return min(i, histogramBuckets-1)
}

// bucketValue returns the middle of bucket i.
func bucketValue(i int) time.Duration {
	if i < 128 {
		return time.Duration(i)
	}
	b := (i-128)/64 + 8
	lo := uint64(64+(i-128)%64) << (b - 7)
	return time.Duration(lo + uint64(1)<<(b-8))
}

// add counts d.
func (h *histogram) add(d time.Duration) {
	h.counts[bucket(d)].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// percentile returns the latency below which p percent of the requests
// completed: the middle of its bucket, or the maximum for p = 100.
func (h *histogram) percentile(p float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	if p >= 100 {
		return time.Duration(h.max.Load())
	}
	rank := uint64(p / 100 * float64(n-1))
	var seen uint64
	for i := range h.counts {
		if seen += h.counts[i].Load(); seen > rank {
			return min(bucketValue(i), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// dupWindow finds duplicate IDs among the last window to 2*window IDs
// received, in fixed memory: two open-addressing tables, the current one
// and the one filled before it. When the current one holds window IDs it
// becomes the previous one. So two equal IDs are always found when fewer
// than window IDs were received between them; further apart they may
// not be. Safe for concurrent use.
type dupWindow struct {
	mu         sync.Mutex
	cur, prev  []uint64 // slots: ID+1 scrambled, 0 empty
	n          int      // IDs in cur
	window     int
	zeroInCur  bool // ID x with scramble(x) = 0 is kept apart
	zeroInPrev bool
}

// DupWindow is the duplicate window of a verified run, in IDs: a
// duplicate within one answer, or between two IDs fewer than DupWindow IDs
// apart, is always caught; two equal IDs further apart may not be. It
// takes two tables of 2^21 slots (16 MiB each), each at most half full.
const DupWindow = 1 << 20

func newDupWindow(window int) *dupWindow {
	slots := 1 << bits.Len(uint(2*window-1))
	return &dupWindow{cur: make([]uint64, slots), prev: make([]uint64, slots), window: window}
}

// scramble spreads IDs over the table (IDs from the service are already
// random-looking; this keeps a sequence of any kind spread too).
func scramble(id int64) uint64 { return uint64(id) * 0x9e3779b97f4a7c15 }

// contains reports whether table t holds key k (not 0).
func contains(t []uint64, k uint64) bool {
	mask := uint64(len(t) - 1)
	for i := k >> 32 & mask; ; i = (i + 1) & mask {
		switch t[i] {
		case k:
			return true
		case 0:
			return false
		}
	}
}

// insert adds key k (not 0) to table t, which has room.
func insert(t []uint64, k uint64) {
	mask := uint64(len(t) - 1)
	i := k >> 32 & mask
	for t[i] != 0 {
		i = (i + 1) & mask
	}
	t[i] = k
}

// add adds ids and returns the first that is a duplicate of one in the
// window (ids included), if any.
func (w *dupWindow) add(ids []int64) (dup int64, found bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		k := scramble(id)
		if k == 0 {
			if w.zeroInCur || w.zeroInPrev {
				return id, true
			}
			w.zeroInCur = true
		} else {
			if contains(w.cur, k) || contains(w.prev, k) {
				return id, true
			}
			insert(w.cur, k)
		}
		if w.n++; w.n == w.window {
			w.cur, w.prev = w.prev, w.cur
			clear(w.cur)
			w.zeroInPrev, w.zeroInCur = w.zeroInCur, false
			w.n = 0
		}
	}
	return 0, false
}
