package randflake

import (
	"sync/atomic"
	"unsafe"
)

// nodeSet is the node IDs of a lease with their issuing state, and the one
// path by which every generator reserves IDs: reserve a run from a node,
// write its raw IDs, move on to the next node with room. Generator is a
// nodeSet of one node ID; Sharded adds per-CPU buffers in front of one.
type nodeSet struct {
	leaseStart int64
	leaseEnd   atomic.Int64
	firstNode  int64
	lastNode   int64

	nodes  []node        // one word per node ID: firstNode + index
	stride uint64        // visiting order of nodes: index k*stride mod len
	spare  atomic.Uint64 // visit counter of the search for a node with room
	full   atomic.Int64  // a second in which every node was found used up
}

// init sets r up for a valid lease.
func (r *nodeSet) init(lease Lease) {
	r.leaseStart = lease.Start
	r.leaseEnd.Store(lease.End)
	r.firstNode, r.lastNode = lease.FirstNode, lease.LastNode
	r.nodes = make([]node, lease.Nodes())
	r.stride = nodeStride(uint64(len(r.nodes)))
}

// reserveRun fills dst with raw IDs reserved at second now, starting at
// the node *cursor names and moving the cursor on as nodes fill up. With
// oneSecond, all its IDs carry one second and the run stops where a node
// answers with another (after a clock step back a node may keep to a later
// second). It returns how many it wrote, the second of the first, and the
// error that stopped it before len(dst) (nil if oneSecond stopped it).
func (r *nodeSet) reserveRun(cursor *atomic.Uint64, now int64, dst []uint64, oneSecond bool) (n int, sec int64, err error) {
	for n < len(dst) {
		sc, nodeID, seq, got, e := r.reserve(cursor, now, len(dst)-n)
		if e != nil {
			if e == ErrResourceExhausted {
				// The node answers so only when now is its newest
				// second (see node.reserve).
				e = &exhaustedError{firstNode: r.firstNode, lastNode: r.lastNode, sec: now}
			}
			return n, sec, e
		}
		if n == 0 {
			sec = sc
		} else if oneSecond && sc != sec {
			break
		}
		first, run := rawID(sc, nodeID, seq), dst[n:n+got]
		for j := range run {
			run[j] = first + uint64(j)
		}
		n += got
	}
	return n, sec, nil
}

// reserveOne reserves one raw ID at second now. When now is a coarse
// reading, a node may be ahead of it without the clock having stepped
// back: a batch that read the wall clock moved it on. Its second used up,
// that would look like a step back (ErrConsistencyViolation); the wall
// clock decides then.
func (r *nodeSet) reserveOne(cursor *atomic.Uint64, now int64, coarse bool) (uint64, error) {
	var raw [1]uint64
	_, _, err := r.reserveRun(cursor, now, raw[:], true)
	if err == ErrConsistencyViolation && coarse {
		if wall := wallNow(); wall > now {
			_, _, err = r.reserveRun(cursor, wall, raw[:], true)
		}
	}
	return raw[0], err
}

// reserve takes up to k sequence numbers at second now from the node
// *cursor names, moving the cursor to another node of the set when that
// one is used up.
func (r *nodeSet) reserve(cursor *atomic.Uint64, now int64, k int) (sec, nodeID, seq int64, got int, err error) {
	leaseEnd := r.leaseEnd.Load()
	idx := cursor.Load()
	sec, seq, got, err = r.nodes[idx].reserve(now, k, r.leaseStart, leaseEnd)
	if err == nil || err == ErrInvalidLease {
		return sec, r.firstNode + int64(idx), seq, got, err
	}
	if r.full.Load() == now {
		return 0, 0, 0, 0, err
	}
	// Look for a node with room, starting where the last search stopped,
	// so that each node is tried about once per second.
	total := uint64(len(r.nodes))
	for range total {
		j := r.visit(r.spare.Add(1) - 1)
		sec, seq, got, err2 := r.nodes[j].reserve(now, k, r.leaseStart, leaseEnd)
		if err2 == nil {
			cursor.Store(j)
			return sec, r.firstNode + int64(j), seq, got, nil
		}
		if err2 == ErrInvalidLease {
			return 0, 0, 0, 0, err2
		}
	}
	r.full.Store(now)
	return 0, 0, 0, 0, err
}

// visit returns the index of the k-th node in visiting order. Nodes are
// visited stride apart, so that shards working on consecutively visited
// nodes do not share a cache line; stride is coprime with the number of
// nodes, so every node is visited once per len(nodes) visits.
func (r *nodeSet) visit(k uint64) uint64 {
	return k % uint64(len(r.nodes)) * r.stride % uint64(len(r.nodes))
}

// nodeStride returns a stride of at least a cache line's worth of node
// words that is coprime with total (1 for small ranges).
func nodeStride(total uint64) uint64 {
	const words = cacheLine / 8
	if total <= words {
		return 1
	}
	for st := uint64(words + 1); ; st++ {
		if gcd(st, total) == 1 {
			return st
		}
	}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// updateLease extends the lease: leaseStart must be the set's, and
// leaseEnd later than the current end and no later than MaxTimestamp. It
// reports whether the end moved.
func (r *nodeSet) updateLease(leaseStart, leaseEnd int64) bool {
	if leaseStart != r.leaseStart || leaseEnd < leaseStart || leaseEnd > MaxTimestamp {
		return false
	}
	for {
		cur := r.leaseEnd.Load()
		if leaseEnd <= cur {
			return false
		}
		if r.leaseEnd.CompareAndSwap(cur, leaseEnd) {
			return true
		}
	}
}

// lease returns the node range and the current lease.
func (r *nodeSet) lease() Lease {
	return Lease{FirstNode: r.firstNode, LastNode: r.lastNode, Start: r.leaseStart, End: r.leaseEnd.Load()}
}

// retire stops every node of the set from reserving and returns the newest
// second reserved on any of them (0 if none). A reservation racing with
// retire either happened before it (and its second is counted) or fails.
func (r *nodeSet) retire() int64 {
	var last int64
	for i := range r.nodes {
		last = max(last, r.nodes[i].retire())
	}
	return last
}

// asUint64s views IDs held as int64s as uint64s, the same bits.
func asUint64s(ids []int64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(ids))), len(ids))
}
