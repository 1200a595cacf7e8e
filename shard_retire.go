package randflake

// retiredNode is the state of a retired node: a second after every lease
// (RANDFLAKE_MAX_TIMESTAMP+1) with its sequence space used up, so reserve
// finds the second outside any lease and fails with ErrInvalidLease.
const retiredNode = uint64(RANDFLAKE_MAX_TIMESTAMP+1)<<nodeSeqBits | IDsPerSecond

// retire stops s from reserving sequence numbers on any of its node IDs and
// returns the newest second it reserved on any of them (0 if none). Each
// node's state is swapped atomically for retiredNode, so a reservation
// racing with retire either happened before the swap (and its second is
// counted) or fails. IDs already reserved into shard buffers carry seconds
// no later than the one returned.
func (s *Sharded) retire() int64 {
	var last int64
	for i := range s.nodes {
		old := s.nodes[i].state.Swap(retiredNode)
		if old == retiredNode {
			continue
		}
		last = max(last, int64(old>>nodeSeqBits))
	}
	return last
}
