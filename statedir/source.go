package statedir

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Options configures a Source.
type Options struct {
	// Nodes is the number of node IDs a process claims, rounded up to a
	// multiple of BlockSize (0: DefaultNodes): that many consecutive
	// blocks, aligned to their number from FirstNode. Each node ID issues
	// up to 131,072 IDs per second. Processes of one directory may claim
	// different numbers.
	Nodes int64
	// FirstNode and LastNode bound the node IDs this directory hands out,
	// aligned to blocks (FirstNode and LastNode+1 multiples of BlockSize).
	// Zero for both means all of them, 0 to 131071. Machines sharing a
	// secret get disjoint ranges. Every process of a directory uses the
	// same range: the state records it, and a process configured with
	// another is refused (ErrFleetMismatch).
	FirstNode, LastNode int64
	// Horizon is how far ahead of the clock a claim is recorded, rounded up
	// to whole seconds (0: DefaultHorizon). After a crash, the crashed
	// process's node IDs can be reused that long after its last renewal.
	// When the history is unknown, a process waits out the longer of
	// MaxHorizon and the longest Horizon recorded in the state.
	Horizon time.Duration
	// MaxHorizon is the directory's bound on Horizon: the longest Horizon
	// any process of the directory uses, the same for all of them (0:
	// DefaultHorizon). A process whose Horizon is longer is refused,
	// naming both: after the state is lost every process waits out
	// MaxHorizon only (rule 13 of docs/leases.md).
	MaxHorizon time.Duration
	// ExternalSecret says that the generator's secret does not come from
	// this directory (a fleet secret from a file or the environment). IDs
	// under it may then have been issued before this directory existed
	// (a container restarted on an empty directory), so a directory whose
	// history is complete only for its own secret (a brand-new one
	// included) counts as unknown history, waited out once.
	ExternalSecret bool
	// Logger receives what the source does that an operator should know:
	// history found unknown (and the wait it costs), waits for a previous
	// holder's promise, a corrupt state file, blocks refused for their
	// clock. Nil logs nothing (a library does not write to the process's
	// log unless asked). It is also the Leased generator's logger in
	// NewLeased.
	Logger *slog.Logger

	// Shards and OnError are passed to randflake.LeasedConfig by NewLeased.
	Shards  int
	OnError func(error)

	// now, if set, is the engine's clock (tests offset it).
	now func() time.Time
}

// checked is Options with defaults applied and values checked.
type checked struct {
	nodes, first, last int64
	horizon            int64         // seconds
	maxHorizon         time.Duration // whole seconds
	log                *slog.Logger
}

func (o Options) check() (checked, error) {
	c := checked{nodes: o.Nodes, first: o.FirstNode, last: o.LastNode, log: o.Logger}
	if c.log == nil {
		c.log = slog.New(discardHandler{})
	}
	if c.first == 0 && c.last == 0 {
		c.last = randflake.MaxNode
	}
	if err := randflake.CheckNodeRange(c.first, c.last); err != nil {
		return c, fmt.Errorf("statedir: %w", err)
	}
	if c.first%BlockSize != 0 || (c.last+1)%BlockSize != 0 {
		return c, fmt.Errorf("statedir: node range %d-%d: first and last+1 must be multiples of %d", c.first, c.last, BlockSize)
	}
	if c.nodes == 0 {
		c.nodes = DefaultNodes
	}
	if c.nodes < 0 {
		return c, fmt.Errorf("statedir: negative node count %d", c.nodes)
	}
	c.nodes = (c.nodes + BlockSize - 1) / BlockSize * BlockSize
	if c.nodes > c.last-c.first+1 {
		return c, fmt.Errorf("statedir: %d node IDs per process exceed the range %d-%d", c.nodes, c.first, c.last)
	}
	h := o.Horizon
	if h == 0 {
		h = DefaultHorizon
	}
	if h < 0 {
		return c, fmt.Errorf("statedir: negative horizon %v", h)
	}
	c.horizon = int64((h + time.Second - 1) / time.Second)
	c.maxHorizon = o.MaxHorizon
	if c.maxHorizon == 0 {
		c.maxHorizon = DefaultHorizon
	}
	if c.maxHorizon < 0 {
		return c, fmt.Errorf("statedir: negative MaxHorizon %v", c.maxHorizon)
	}
	c.maxHorizon = (c.maxHorizon + time.Second - 1) / time.Second * time.Second
	return c, nil
}

// Source is a randflake.LeaseSource on a state directory: the lease
// engine (lease.BlockSource, whose methods it has: Acquire, Renew,
// Release, ResetHistory) on the directory's Store. It holds at most one
// lease at a time; use one Source per generator. It is safe for concurrent
// use.
type Source struct {
	*lease.BlockSource
	store       *Store
	nodes       int64 // multiple of BlockSize
	first, last int64 // block-aligned node range
	horizon     int64 // seconds
	log         *slog.Logger
}

// Source returns a lease source claiming node IDs from d. Records are
// signed under a key derived from the directory's own secret, whatever
// secret the generator uses: every process of the directory reads every
// other's, so processes on different secrets share one directory without
// invalidating each other's records.
func (d *Dir) Source(opts Options) (*Source, error) {
	if !flockSupported {
		return nil, ErrUnsupported
	}
	c, err := opts.check()
	if err != nil {
		return nil, err
	}
	st := d.store(opts, c)
	bs, err := lease.NewBlockSource(st, lease.BlockSourceConfig{
		Secret:  d.secret,
		Layout:  st.layout,
		Blocks:  c.nodes / BlockSize,
		Horizon: c.maxHorizon,
		Now:     opts.now,
		Logger:  c.log,
	})
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	return &Source{BlockSource: bs, store: st, nodes: c.nodes, first: c.first, last: c.last, horizon: c.horizon, log: c.log}, nil
}

// Store returns the source's store.
func (s *Source) Store() *Store { return s.store }

// discardHandler is the handler of a nil Options.Logger: it drops every
// record. (slog.DiscardHandler needs Go 1.24; the module supports 1.23.)
type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (h discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h discardHandler) WithGroup(string) slog.Handler           { return h }
