package randflake

import "sync/atomic"

// bufferIDs is the number of IDs a buffer of Generate holds (a P's slot
// of Sharded, or a Local): one fill reserves and encrypts that many.
const bufferIDs = 512

// idBuffer is encrypted IDs of one second waiting to be handed out one at
// a time, by Sharded.Generate (a P's slot) and Local.Generate. Its owner
// makes sure one goroutine at a time uses it.
type idBuffer struct {
	pos, n int   // ids[pos:n] are still to be handed out
	sec    int64 // their second
	ids    [bufferIDs]uint64
}

// next hands out the next ID if there is one no more than one second
// behind now.
func (b *idBuffer) next(now int64) (uint64, bool) {
	if b.pos < b.n && b.sec >= now-1 {
		id := b.ids[b.pos]
		b.pos++
		return id, true
	}
	return 0, false
}

// fill reserves a run of IDs at second now through cursor, encrypts it
// into b and hands out its first ID. IDs left in b are dropped (gaps,
// never duplicates).
func (s *Sharded) fill(b *idBuffer, cursor *atomic.Uint64, now int64) (int64, error) {
	n, sec, err := s.reserveRun(cursor, now, b.ids[:], true)
	b.pos, b.n, b.sec = 0, n, sec
	if n == 0 {
		return 0, err
	}
	s.cipher.EncryptIDs(b.ids[:n], b.ids[:n])
	b.pos = 1
	return int64(b.ids[0]), nil
}
