package leasetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
)

// Generator is what a Collector drives: a *randflake.Leased, or anything
// that issues IDs under a lease.
type Generator interface {
	GenerateBatch(dst []int64) (int, error)
	Lease() randflake.Lease
}

// Issued is an ID and when it was handed out: the wall time its batch
// was asked for, so never after the ID existed, however late its
// goroutine ran afterwards.
type Issued struct {
	ID int64
	At time.Time
}

// Collector runs a generator under load in a goroutine of its own,
// recording every ID it issues, when, and every lease it reports, until
// Stop.
type Collector struct {
	name  string
	g     Generator
	stopc chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	ids    []Issued
	errs   []error           // the errors seen, each distinct from the one before it
	leases []randflake.Lease // the claims seen, each with the latest End seen
	lastOK time.Time
}

// Collect starts a collector named name (the name duplicates are reported
// under) on g: batches of 16 IDs, about 8,000 IDs a second.
func Collect(name string, g Generator) *Collector {
	c := &Collector{name: name, g: g, stopc: make(chan struct{}), done: make(chan struct{})}
	c.noteLease()
	go c.run()
	return c
}

func (c *Collector) run() {
	defer close(c.done)
	batch := make([]int64, 16)
	pause := time.NewTicker(2 * time.Millisecond)
	defer pause.Stop()
	for {
		select {
		case <-c.stopc:
			return
		case <-pause.C:
		}
		now := time.Now()
		n, err := c.g.GenerateBatch(batch)
		c.noteLease()
		c.mu.Lock()
		for _, id := range batch[:n] {
			c.ids = append(c.ids, Issued{ID: id, At: now})
		}
		if n > 0 {
			c.lastOK = now
		}
		if err != nil && !errors.Is(err, randflake.ErrResourceExhausted) &&
			(len(c.errs) == 0 || c.errs[len(c.errs)-1].Error() != err.Error()) {
			c.errs = append(c.errs, err)
		}
		c.mu.Unlock()
	}
}

// noteLease records the generator's lease: a new claim, or a later end
// of the last one.
func (c *Collector) noteLease() {
	l := c.g.Lease()
	if l == (randflake.Lease{}) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.leases {
		if c.leases[i].SameClaim(l) {
			c.leases[i].End = max(c.leases[i].End, l.End)
			return
		}
	}
	c.leases = append(c.leases, l)
}

// Name returns the collector's name.
func (c *Collector) Name() string { return c.name }

// Count returns how many IDs were issued so far and when the last batch
// was.
func (c *Collector) Count() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids), c.lastOK
}

// Since returns the IDs issued after the first n.
func (c *Collector) Since(n int) []Issued {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Issued(nil), c.ids[min(n, len(c.ids)):]...)
}

// WaitCount waits up to timeout, stretched by the measured slowdown (see
// package internal/slowdown), for the generator to have issued n IDs in
// all, and fails t if it has not.
func (c *Collector) WaitCount(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	m, began := slowdown.Start(), time.Now()
	for {
		got, _ := c.Count()
		if got >= n {
			return
		}
		if limit := m.Stretch(timeout); time.Since(began) > limit {
			t.Fatalf("%s issued %d IDs in %v, want %d (errors: %v; %s)", c.name, got, limit.Round(time.Millisecond), n, c.Errors(), m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitIssuedAfter waits up to timeout after since, stretched by the
// measured slowdown, for the generator to issue an ID after since (a
// batch asked for after it), fails t if it has not, and returns how long
// after since the newest batch was: for a generator that must resume
// after an outage began or ended at since.
func (c *Collector) WaitIssuedAfter(t testing.TB, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	m := slowdown.Start()
	for ; ; time.Sleep(20 * time.Millisecond) {
		if _, last := c.Count(); last.After(since) {
			return last.Sub(since)
		}
		if limit := m.Stretch(timeout); time.Since(since) > limit {
			t.Fatalf("%s issued nothing within %v after %s (errors: %v; %s)", c.name, limit.Round(time.Millisecond), since.Format("15:04:05.000"), c.Errors(), m)
		}
	}
}

// Errors returns the generator's errors so far, each distinct from the
// one before it (ErrResourceExhausted, a second's sequence space used up,
// is not an error here).
func (c *Collector) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Leases returns the claims the generator reported, each with the latest
// end seen.
func (c *Collector) Leases() []randflake.Lease {
	c.noteLease()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]randflake.Lease(nil), c.leases...)
}

// Stop stops the load and returns every ID issued. The generator is left
// as it is (not closed): a test that kills its holder stops the
// collector first, so that nothing is issued after the kill.
func (c *Collector) Stop() []Issued {
	select {
	case <-c.stopc:
	default:
		close(c.stopc)
	}
	<-c.done
	c.noteLease()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Issued(nil), c.ids...)
}

// Checker gathers the IDs of many generators and proves them unique: it
// reports, through t, every ID issued twice (with both issuers) and every
// ID outside its issuer's leases, read back by decrypting it.
type Checker struct {
	t      testing.TB
	in     randflake.Inspector
	seen   map[int64]string
	total  int
	dups   int
	faults int
}

// NewChecker returns a checker for IDs made under secret.
func NewChecker(t testing.TB, secret []byte) *Checker {
	t.Helper()
	in, err := randflake.NewInspector(secret)
	if err != nil {
		t.Fatalf("leasetest: checker: %v", err)
	}
	return &Checker{t: t, in: in, seen: map[int64]string{}}
}

// Span sums up the IDs of one issuer.
type Span struct {
	// IDs is how many IDs were added.
	IDs int
	// First and Last are the oldest and newest seconds among them (0 if
	// none).
	First, Last int64
	// LastAt is when the last of them was handed out (zero if the IDs
	// carry no time).
	LastAt time.Time
	// Nodes maps each node ID used to the newest second used on it.
	Nodes map[int64]int64
}

// reportLimit caps the duplicates and stray IDs reported one by one.
const reportLimit = 5

// Add checks the IDs of issuer who: each must be new, and, if leases are
// given, inside one of them (its node ID in the lease's range, its second
// in Start..End). Failures are reported through t, the first few one by
// one and the rest counted.
func (c *Checker) Add(who string, ids []Issued, leases ...randflake.Lease) Span {
	c.t.Helper()
	sp := Span{Nodes: map[int64]int64{}}
	dups, strays := 0, 0
	for _, is := range ids {
		c.total++
		ts, node := c.Split(is.ID)
		if other, dup := c.seen[is.ID]; dup {
			dups++
			if dups <= reportLimit {
				c.t.Errorf("duplicate ID %d (second %d, node %d): issued by %s and by %s", is.ID, ts, node, other, who)
			}
		} else {
			c.seen[is.ID] = who
		}
		if len(leases) > 0 && !inLeases(ts, node, leases) {
			strays++
			if strays <= reportLimit {
				c.t.Errorf("%s issued ID %d (second %d, node %d) outside its leases %v", who, is.ID, ts, node, leases)
			}
		}
		sp.IDs++
		if sp.First == 0 || ts < sp.First {
			sp.First = ts
		}
		sp.Last = max(sp.Last, ts)
		sp.Nodes[node] = max(sp.Nodes[node], ts)
		if is.At.After(sp.LastAt) {
			sp.LastAt = is.At
		}
	}
	if dups > reportLimit || strays > reportLimit {
		c.t.Errorf("%s: %d duplicate IDs and %d IDs outside its leases in all", who, dups, strays)
	}
	c.dups += dups
	c.faults += strays
	return sp
}

// AddCollector stops col and adds its IDs, checked against the leases it
// reported.
func (c *Checker) AddCollector(col *Collector) Span {
	c.t.Helper()
	ids := col.Stop()
	return c.Add(col.Name(), ids, col.Leases()...)
}

func inLeases(ts, node int64, leases []randflake.Lease) bool {
	for _, l := range leases {
		if node >= l.FirstNode && node <= l.LastNode && ts >= l.Start && ts <= l.End {
			return true
		}
	}
	return false
}

// Split returns the second and node ID an ID carries.
func (c *Checker) Split(id int64) (second, node int64) {
	second, node, _, _ = c.in.Inspect(id)
	return second, node
}

// Total returns how many IDs were added in all.
func (c *Checker) Total() int { return c.total }

// Duplicates returns how many of them repeated an earlier one.
func (c *Checker) Duplicates() int { return c.dups }

// String sums the checker up for a test log.
func (c *Checker) String() string {
	return fmt.Sprintf("%d IDs, %d duplicates, %d outside their leases", c.total, c.dups, c.faults)
}
