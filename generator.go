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
	Inspector               // reads IDs back under the generator's secret
	nodeSet                 // one node ID and its lease
	cursor    atomic.Uint64 // always 0: the one node
	cipher    *Sparx64

	// TimeSource, if set, returns the current Unix time in seconds and is
	// called once per Generate or GenerateBatch call. If nil, Generate
	// reads the package's coarse clock (the wall clock, refreshed at least
	// every 10ms while the process runs) and GenerateBatch the wall clock
	// itself.
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
	g := &Generator{Inspector: Inspector{c}, cipher: c}
	g.init(Lease{FirstNode: nodeID, LastNode: nodeID, Start: leaseStart, End: leaseEnd})
	return g, nil
}

// UpdateLease extends the lease. It reports whether the lease end moved:
// leaseStart must equal the generator's, and leaseEnd must be later than
// the current end and no later than MaxTimestamp.
func (g *Generator) UpdateLease(leaseStart, leaseEnd int64) bool {
	return g.updateLease(leaseStart, leaseEnd)
}

// Lease returns the generator's node ID (as a one-node range) and current
// lease.
func (g *Generator) Lease() Lease {
	return g.lease()
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
		now = max(now, wallNow())
	}
	return now
}

// Generate returns a new encrypted ID. Once the node ID has issued all
// 131,072 IDs of the current second, it returns an error wrapping
// ErrResourceExhausted until the next second; GenerateContext waits
// instead.
func (g *Generator) Generate() (int64, error) {
	raw, err := g.reserveOne(&g.cursor, g.now(), g.TimeSource == nil)
	if err != nil {
		return 0, err
	}
	return int64(g.cipher.EncryptID(raw)), nil
}

// GenerateString returns a new encrypted ID in its string form (see
// EncodeString).
func (g *Generator) GenerateString() (string, error) { return stringOf(g.Generate()) }

// GenerateBatch fills dst with new IDs, reserving the sequence numbers with
// one atomic operation and encrypting them with the SIMD kernel. It returns
// the number of IDs written; if that is less than len(dst), the error says
// why (the current second's sequence space ran out, or the lease).
func (g *Generator) GenerateBatch(dst []int64) (int, error) {
	u := asUint64s(dst)
	now := wallNow()
	if g.TimeSource != nil {
		now = g.TimeSource()
	}
	n, _, err := g.reserveRun(&g.cursor, now, u, false)
	g.cipher.EncryptIDs(u[:n], u[:n])
	return n, err
}
