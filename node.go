package randflake

import "sync/atomic"

// node is the issuing state of one node ID: the newest second it has issued
// in and the next free sequence number of that second, packed into one word
// so that a reservation is a single compare-and-swap.
//
// The packing is (second << nodeSeqBits) | next, where next runs from 0 to
// IDsPerSecond (all used). A zero word means nothing issued yet.
type node struct {
	state atomic.Uint64
}

const nodeSeqBits = SequenceBits + 1

// reserve takes up to k (k >= 1) consecutive sequence numbers for the
// second now (Unix seconds), or for the newest second already used if the
// clock is behind it. It returns the second, the first sequence number and
// how many were taken (at least 1), or an error:
//   - ErrInvalidLease if now is before leaseStart or the second would be
//     after leaseEnd;
//   - ErrResourceExhausted if the current second is used up;
//   - ErrConsistencyViolation if the clock is behind the newest second
//     used and that second is used up.
func (n *node) reserve(now int64, k int, leaseStart, leaseEnd int64) (sec, seq int64, got int, err error) {
	if now < leaseStart || now > MaxTimestamp {
		return 0, 0, 0, ErrInvalidLease
	}
	for {
		old := n.state.Load()
		last := int64(old >> nodeSeqBits)
		next := int64(old & (1<<nodeSeqBits - 1))
		if now > last {
			sec, next = now, 0
		} else {
			sec = last
		}
		if sec > leaseEnd {
			return 0, 0, 0, ErrInvalidLease
		}
		free := IDsPerSecond - next
		if free == 0 {
			if now < last {
				return 0, 0, 0, ErrConsistencyViolation
			}
			return 0, 0, 0, ErrResourceExhausted
		}
		got = min(k, int(free))
		if n.state.CompareAndSwap(old, uint64(sec)<<nodeSeqBits|uint64(next+int64(got))) {
			return sec, next, got, nil
		}
	}
}

// retiredNode is the state of a retired node: a second after every lease
// (MaxTimestamp+1) with its sequence space used up, so reserve finds the
// second outside any lease and fails with ErrInvalidLease.
const retiredNode = uint64(MaxTimestamp+1)<<nodeSeqBits | IDsPerSecond

// retire stops n from reserving sequence numbers and returns the newest
// second it reserved in (0 if none, or if it was retired already). The
// state is swapped atomically for retiredNode, so a reservation racing
// with retire either happened before the swap (and its second is
// returned) or fails.
func (n *node) retire() int64 {
	old := n.state.Swap(retiredNode)
	if old == retiredNode {
		return 0
	}
	return int64(old >> nodeSeqBits)
}
