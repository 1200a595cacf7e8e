package randflake

import "sync/atomic"

// Generator issues IDs for one node ID. It is safe for concurrent use.
//
// Each (second, node, sequence) triple is issued at most once: the sequence
// starts again at 0 in every new second, and when the clock steps back the
// generator keeps issuing from the newest second it has seen while that
// second has sequence numbers left, then returns ErrConsistencyViolation
// until the clock catches up. IDs are only issued for seconds inside the
// lease.
type Generator struct {
	Inspector  // reads IDs back under the generator's secret
	node       node
	leaseStart int64
	leaseEnd   atomic.Int64
	nodeID     int64
	cipher     *Sparx64

	// TimeSource, if set, returns the current Unix time in seconds and is
	// called once per Generate or GenerateBatch call. If nil, the package's
	// coarse clock is used: the wall clock, refreshed at least every 10ms.
	TimeSource func() int64
}

// NewGenerator returns a generator for nodeID holding a lease on it from
// leaseStart to leaseEnd inclusive (Unix seconds). secret must be 16 bytes.
func NewGenerator(nodeID int64, leaseStart int64, leaseEnd int64, secret []byte) (*Generator, error) {
	if err := checkLease(leaseStart, leaseEnd); err != nil {
		return nil, err
	}
	if CheckNodeRange(nodeID, nodeID) != nil {
		return nil, ErrInvalidNode
	}
	c, err := newIDCipher(secret)
	if err != nil {
		return nil, err
	}
	g := &Generator{Inspector: Inspector{c}, leaseStart: leaseStart, nodeID: nodeID, cipher: c}
	g.leaseEnd.Store(leaseEnd)
	return g, nil
}

func checkLease(leaseStart, leaseEnd int64) error {
	if leaseEnd < leaseStart || leaseStart < Epoch {
		return ErrInvalidLease
	}
	if leaseEnd > MaxTimestamp {
		return ErrLifetimeOver
	}
	return nil
}

// UpdateLease extends the lease. It reports whether the lease end moved:
// leaseStart must equal the generator's, and leaseEnd must be later than
// the current end and no later than MaxTimestamp.
func (g *Generator) UpdateLease(leaseStart, leaseEnd int64) bool {
	return updateLease(g.leaseStart, &g.leaseEnd, leaseStart, leaseEnd)
}

func updateLease(start int64, end *atomic.Int64, leaseStart, leaseEnd int64) bool {
	if leaseStart != start || leaseEnd < leaseStart || leaseEnd > MaxTimestamp {
		return false
	}
	for {
		cur := end.Load()
		if leaseEnd <= cur {
			return false
		}
		if end.CompareAndSwap(cur, leaseEnd) {
			return true
		}
	}
}

// Lease returns the generator's node ID (as a one-node range) and current
// lease.
func (g *Generator) Lease() Lease {
	return Lease{FirstNode: g.nodeID, LastNode: g.nodeID, Start: g.leaseStart, End: g.leaseEnd.Load()}
}

// now returns the generator's clock: the TimeSource, or else the coarse
// clock, moved to the wall clock's second when it still reads a second
// before the lease's start (it lags by up to clockTick at a boundary).
func (g *Generator) now() int64 {
	if g.TimeSource != nil {
		return g.TimeSource()
	}
	now := coarseNow()
	if now < g.leaseStart {
		now = wallAtLeast(now)
	}
	return now
}

// Generate returns a new encrypted ID.
func (g *Generator) Generate() (int64, error) {
	sec, seq, _, err := g.node.reserve(g.now(), 1, g.leaseStart, g.leaseEnd.Load())
	if err != nil {
		return 0, err
	}
	return int64(g.cipher.EncryptID(rawID(sec, g.nodeID, seq))), nil
}

// GenerateString returns a new encrypted ID in its string form (see
// EncodeString).
func (g *Generator) GenerateString() (string, error) {
	id, err := g.Generate()
	if err != nil {
		return "", err
	}
	return EncodeString(id), nil
}

// GenerateBatch fills dst with new IDs, reserving the sequence numbers with
// one atomic operation and encrypting them with the SIMD kernel. It returns
// the number of IDs written; if that is less than len(dst), the error says
// why (the current second's sequence space ran out, or the lease).
func (g *Generator) GenerateBatch(dst []int64) (int, error) {
	now := g.now()
	done := 0
	var err error
	for done < len(dst) {
		var sec, seq int64
		var n int
		sec, seq, n, err = g.node.reserve(now, len(dst)-done, g.leaseStart, g.leaseEnd.Load())
		if err != nil {
			break
		}
		fillRaw(dst[done:done+n], rawID(sec, g.nodeID, seq))
		done += n
	}
	encryptInt64s(g.cipher, dst[:done])
	return done, err
}
