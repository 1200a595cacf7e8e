package randflake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// testSource is a LeaseSource tests steer: leases end ttl seconds after
// the current second, renewals fail with renewErr while it is set.
type testSource struct {
	mu       sync.Mutex
	first    int64 // node range of the next acquisition
	last     int64
	ttl      int64
	start    int64 // Start of the next acquisition (0: the current second)
	renewErr error
	acquired []Lease
	renewed  int
	released []int64 // lastUsed of each Release
	held     bool
	lostAt   time.Time // when Renew last reported the claim lost
}

func (s *testSource) Acquire(ctx context.Context) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		return Lease{}, errors.New("testSource: already held")
	}
	now := time.Now().Unix()
	l := Lease{FirstNode: s.first, LastNode: s.last, Start: now, End: now + s.ttl}
	if s.start != 0 {
		l.Start = s.start
		l.End = max(l.End, l.Start)
	}
	s.held = true
	s.acquired = append(s.acquired, l)
	return l, nil
}

func (s *testSource) Renew(ctx context.Context, l Lease) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held {
		return Lease{}, errors.New("testSource: renewing a lease not held")
	}
	if s.renewErr != nil {
		if errors.Is(s.renewErr, ErrLeaseLost) {
			s.held = false
			err := s.renewErr
			s.renewErr = nil
			s.lostAt = time.Now()
			return Lease{}, err
		}
		return Lease{}, s.renewErr
	}
	s.renewed++
	l.End = max(l.End, time.Now().Unix()+s.ttl)
	return l, nil
}

func (s *testSource) Release(ctx context.Context, l Lease, lastUsed int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = false
	s.released = append(s.released, lastUsed)
	return nil
}

func (s *testSource) set(f func(s *testSource)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// idSet collects IDs and their fields, failing the test on a duplicate.
type idSet struct {
	mu    sync.Mutex
	seen  map[int64]bool
	maxTS int64
	minTS int64
	nodes map[int64]bool
}

func newIDSet() *idSet { return &idSet{seen: map[int64]bool{}, nodes: map[int64]bool{}} }

func (s *idSet) add(t *testing.T, g *Leased, ids ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.seen[id] {
			ts, node, seq, _ := g.Inspect(id)
			t.Errorf("duplicate ID %d (second %d, node %d, sequence %d)", id, ts, node, seq)
		}
		s.seen[id] = true
		ts, node, _, _ := g.Inspect(id)
		s.maxTS = max(s.maxTS, ts)
		if s.minTS == 0 || ts < s.minTS {
			s.minTS = ts
		}
		s.nodes[node] = true
	}
}

func newTestLeased(t *testing.T, src LeaseSource, onError func(error)) *Leased {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
	defer cancel()
	g, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src, Shards: 2, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return g
}

// A leased generator renews before the end, so generation never stops, and
// Close reports the newest second it used.
func TestLeasedRenewsAndReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("renews 1 s leases for 2.5 s: not in -short")
	}
	t.Parallel()
	src := &testSource{first: 3, last: 4, ttl: 1}
	g := newTestLeased(t, src, nil)
	first := g.Lease()
	ids := newIDSet()
	batch := make([]int64, 64)
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		n, err := g.GenerateBatch(batch)
		if err != nil {
			t.Fatalf("GenerateBatch: %v (lease %v)", err, g.Lease())
		}
		ids.add(t, g, batch[:n]...)
		id, err := g.Generate()
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		ids.add(t, g, id)
		time.Sleep(time.Millisecond)
	}
	if end := g.Lease().End; end <= first.End {
		t.Errorf("lease end stayed at %d", end)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(); err != ErrClosed {
		t.Errorf("Generate after Close: %v, want ErrClosed", err)
	}
	if _, err := g.GenerateBatch(batch); err != ErrClosed {
		t.Errorf("GenerateBatch after Close: %v, want ErrClosed", err)
	}
	src.set(func(s *testSource) {
		if len(s.released) != 1 || s.released[0] != ids.maxTS {
			t.Errorf("released with last seconds %v, want [%d]", s.released, ids.maxTS)
		}
	})
	for n := range ids.nodes {
		if n < 3 || n > 4 {
			t.Errorf("node %d outside the lease", n)
		}
	}
}

// When renewal fails, IDs are issued until the lease's end and none after;
// the error names the cause; a later renewal resumes issuing.
func TestLeasedStopsAtLeaseEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 1 s lease: not in -short")
	}
	t.Parallel()
	src := &testSource{first: 9, last: 9, ttl: 1}
	var reported atomic.Int64
	g := newTestLeased(t, src, func(error) { reported.Add(1) })
	down := errors.New("coordination service down")
	src.set(func(s *testSource) { s.renewErr = down })
	ids := newIDSet()
	// The lease ends by the wall clock within two seconds; the bound only
	// ends a generator that never stops.
	slow := slowdown.Start()
	var lastOK time.Time // when the last successful call began
	var err error
	for start := time.Now(); time.Since(start) < slow.Stretch(5*time.Second); {
		var id int64
		called := time.Now()
		id, err = g.Generate()
		if errors.Is(err, ErrResourceExhausted) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			break
		}
		lastOK = called
		ids.add(t, g, id)
	}
	if err == nil {
		t.Fatalf("still issuing %v after renewals began to fail (lease %v; %s)", slow.Stretch(5*time.Second), g.Lease(), slow)
	}
	end := g.Lease().End
	if !errors.Is(err, ErrInvalidLease) || !errors.Is(err, down) {
		t.Fatalf("error %v, want one wrapping ErrInvalidLease and the cause", err)
	}
	var le *LeaseError
	if !errors.As(err, &le) || le.Lease.End != end {
		t.Errorf("error %#v, want a *LeaseError on the last lease", err)
	}
	if ids.maxTS > end {
		t.Errorf("issued an ID at second %d after the lease end %d", ids.maxTS, end)
	}
	// lastOK is read before the call, so a test descheduled after it
	// costs nothing; the coarse clock may lag the wall clock by a tick,
	// more when its goroutine waits for a CPU.
	if limit := time.Unix(end+1, 0).Add(slow.Stretch(200 * time.Millisecond)); lastOK.After(limit) {
		t.Errorf("issued an ID in a call begun at %v, after the lease ended at %v (%s)", lastOK, time.Unix(end+1, 0), slow)
	}
	if reported.Load() == 0 {
		t.Error("OnError not called")
	}
	// Renewals are retried every 250ms once the lease has ended: the next
	// one succeeds, and issuing resumes.
	var renewedBefore int
	src.set(func(s *testSource) { s.renewErr, renewedBefore = nil, s.renewed })
	resumed := slowdown.Start()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		id, err := g.Generate()
		if err == nil {
			ids.add(t, g, id)
			break
		}
		if limit := resumed.Stretch(3 * time.Second); time.Since(start) > limit {
			t.Fatalf("no ID %v after renewals succeed again: %v (%s)", limit, err, resumed)
		}
	}
	src.set(func(s *testSource) {
		if s.renewed == renewedBefore {
			t.Error("issuing resumed with no renewal since the lease ended")
		}
	})
}

// A lost lease stops generation at once; the generator acquires another
// one and starts after its Start.
func TestLeasedReacquiresLostLease(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease starting 2 s on: not in -short")
	}
	t.Parallel()
	src := &testSource{first: 100, last: 101, ttl: 2}
	g := newTestLeased(t, src, nil)
	ids := newIDSet()
	batch := make([]int64, 100)
	n, err := g.GenerateBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	ids.add(t, g, batch[:n]...)
	nextStart := time.Now().Unix() + 2
	src.set(func(s *testSource) {
		s.first, s.last, s.start = 200, 200, nextStart
		s.renewErr = fmt.Errorf("claim deleted: %w", ErrLeaseLost)
	})
	// Generation stops at the renewal that reports the loss, not at the
	// lease's end: no call begun after the source reported it issues,
	// beyond the moment the renewal takes to act on it (100 ms on idle
	// cores). The times are read before each call, so a test descheduled
	// after it costs nothing.
	var lastOK time.Time // when the last call that issued began
	var end int64
	stopping := slowdown.Start()
	for {
		end = g.Lease().End
		called := time.Now()
		if _, err := g.Generate(); err != nil {
			if !errors.Is(err, ErrInvalidLease) {
				t.Fatalf("error %v, want ErrInvalidLease", err)
			}
			break
		}
		lastOK = called
		time.Sleep(5 * time.Millisecond)
	}
	var lostAt time.Time
	src.set(func(s *testSource) { lostAt = s.lostAt })
	switch slack := stopping.Stretch(250 * time.Millisecond); {
	case lostAt.IsZero():
		// The renewal came too late to see the loss before the lease's
		// end, which stopped generation by itself.
		t.Logf("the lease ended (second %d) before a renewal reported its loss (%s)", end, stopping)
	case lastOK.After(lostAt.Add(slack)):
		t.Errorf("a call begun at %v issued an ID on the lost lease, %v after the source reported the loss (%s)",
			lastOK.Format(time.StampMilli), lastOK.Sub(lostAt), stopping)
	}
	// The new lease starts two seconds on; the bound only ends a
	// generator that never resumes.
	slow := slowdown.Start()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		n, err := g.GenerateBatch(batch)
		ids.add(t, g, batch[:n]...)
		if err == nil {
			break
		}
		if limit := slow.Stretch(5 * time.Second); time.Since(start) > limit {
			t.Fatalf("no ID %v after the lease was lost: %v (%s)", limit, err, slow)
		}
	}
	if l := g.Lease(); l.FirstNode != 200 || l.Start != nextStart {
		t.Errorf("lease %+v, want the new one", l)
	}
	if !ids.nodes[200] {
		t.Error("no ID from the new lease")
	}
	for id := range ids.seen {
		if ts, node, _, _ := g.Inspect(id); node == 200 && ts < nextStart {
			t.Errorf("ID at second %d before the new lease's start %d", ts, nextStart)
		}
	}
}

// NewLeased waits for a lease that starts in the future, and gives up (and
// releases it) when its context ends first.
func TestLeasedWaitsForStart(t *testing.T) {
	t.Parallel()
	start := time.Now().Unix() + 1
	src := &testSource{first: 1, last: 1, ttl: 5, start: start}
	g := newTestLeased(t, src, nil)
	if now := time.Now().Unix(); now < start {
		t.Fatalf("NewLeased returned at %d, before the lease start %d", now, start)
	}
	id, err := g.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if ts, _, _, _ := g.Inspect(id); ts < start {
		t.Errorf("ID at second %d, before the lease start %d", ts, start)
	}

	src2 := &testSource{first: 1, last: 1, ttl: 5, start: time.Now().Unix() + 30}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src2}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NewLeased: %v, want the context's deadline", err)
	}
	src2.set(func(s *testSource) {
		if s.held || len(s.released) != 1 {
			t.Errorf("lease not released after a failed start: %v", s.released)
		}
	})
}

// Close while goroutines generate: the second it reports is at least that
// of every ID handed out, before or after it.
func TestLeasedCloseRace(t *testing.T) {
	t.Parallel()
	src := &testSource{first: 0, last: 3, ttl: 60}
	g := newTestLeased(t, src, nil)
	ids := newIDSet()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]int64, 1+w*50)
			var mine []int64
			for {
				var err error
				if w%2 == 0 {
					var id int64
					if id, err = g.Generate(); err == nil {
						mine = append(mine, id)
					}
				} else {
					var n int
					n, err = g.GenerateBatch(batch)
					mine = append(mine, batch[:n]...)
				}
				if err == ErrClosed {
					break
				}
				if err != nil && !errors.Is(err, ErrInvalidLease) && !errors.Is(err, ErrResourceExhausted) {
					t.Errorf("generate: %v", err)
					break
				}
			}
			ids.add(t, g, mine...)
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	src.set(func(s *testSource) {
		if len(s.released) != 1 || s.released[0] < ids.maxTS {
			t.Errorf("released with %v, want the newest second %d or later", s.released, ids.maxTS)
		}
	})
	if len(ids.seen) == 0 {
		t.Error("no IDs")
	}
}

func TestLeasedConfigErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := NewLeased(ctx, LeasedConfig{Secret: testSecret}); err == nil {
		t.Error("nil source accepted")
	}
	if _, err := NewLeased(ctx, LeasedConfig{Secret: []byte("short"), Source: StaticSource{}}); err != ErrInvalidSecret {
		t.Errorf("short secret: %v", err)
	}
	if _, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: StaticSource{FirstNode: 5, LastNode: 4}}); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("bad range: %v", err)
	}
	bad := &testSource{first: 0, last: 0, ttl: 1, start: Epoch - 5}
	if _, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: bad}); !errors.Is(err, ErrInvalidLease) {
		t.Errorf("lease before the epoch: %v", err)
	}
	if len(bad.released) != 1 {
		t.Error("unusable lease not released")
	}
}

// retire makes every node refuse reservations and reports the newest
// second reserved.
func TestShardedRetire(t *testing.T) {
	clk := newFakeClock(testStart + 10)
	s := newTestSharded(t, 0, 3, clk, 2)
	if got := s.retire(); got != 0 {
		t.Errorf("retire of an unused generator: %d", got)
	}
	s = newTestSharded(t, 0, 3, clk, 2)
	if _, err := s.GenerateBatch(make([]int64, 1000)); err != nil {
		t.Fatal(err)
	}
	clk.Add(3)
	if _, err := s.Generate(); err != nil {
		t.Fatal(err)
	}
	if got := s.retire(); got != testStart+13 {
		t.Errorf("retire: %d, want %d", got, testStart+13)
	}
	if got := s.retire(); got != 0 {
		t.Errorf("second retire: %d, want 0", got)
	}
	limit := s.maxBuffered()
	for i := 0; i <= limit; i++ {
		if _, err := s.Generate(); err != nil {
			if err != ErrInvalidLease {
				t.Fatalf("Generate after retire: %v", err)
			}
			break
		}
		if i == limit {
			t.Fatal("still issuing after retire beyond the buffers")
		}
	}
	if n, err := s.GenerateBatch(make([]int64, 10)); n != 0 || err != ErrInvalidLease {
		t.Errorf("GenerateBatch after retire: %d, %v", n, err)
	}
}

func TestStaticSource(t *testing.T) {
	ctx := context.Background()
	before := time.Now().Unix()
	l, err := StaticSource{FirstNode: 10, LastNode: 19, MaxClockSkew: 1500 * time.Millisecond}.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.FirstNode != 10 || l.LastNode != 19 || l.Nodes() != 10 || l.End != MaxTimestamp {
		t.Errorf("lease %+v", l)
	}
	if l.Start < before+3 || l.Start > time.Now().Unix()+3 {
		t.Errorf("start %d, want the second after now plus 2s of skew", l.Start)
	}
	if r, err := (StaticSource{}).Renew(ctx, l); err != nil || r != l {
		t.Errorf("Renew: %+v, %v", r, err)
	}
	if _, err := (StaticSource{FirstNode: 0, LastNode: MaxNode + 1}).Acquire(ctx); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("range past MaxNode: %v", err)
	}
	if _, err := (StaticSource{MaxClockSkew: -1}).Acquire(ctx); err == nil {
		t.Error("negative skew accepted")
	}
	if s := l.String(); s == "" {
		t.Error("empty String")
	}
}

func TestStatefulSetSource(t *testing.T) {
	for _, c := range []struct {
		val         string
		per         int64
		first, last int64
		ok          bool
	}{
		{"0", 16, 0, 15, true},
		{"3", 16, 48, 63, true},
		{"web-3", 100, 300, 399, true},
		{"my-app-db-12", 1024, 12288, 13311, true},
		{"a-b-c-2", 16, 32, 47, true},
		{"web-0", 16, 0, 15, true},
		{"my-app-db-12\n", 1024, 0, 0, false},
		{"01", 16, 0, 0, false},
		{"web-01", 16, 0, 0, false},
		{"web--1", 16, 0, 0, false},
		{"+1", 16, 0, 0, false},
		{" 3", 16, 0, 0, false},
		{"web-+1", 16, 0, 0, false},
		{"00", 16, 0, 0, false},
		{"127", 1024, 130048, 131071, true},
		{"128", 1024, 0, 0, false},
		{"web", 16, 0, 0, false},
		{"web-", 16, 0, 0, false},
		{"web-x1", 16, 0, 0, false},
		{"-1", 16, 0, 0, false},
		{"99999999999999999999", 1, 0, 0, false},
		{"1", 0, 0, 0, false},
		{"1", MaxNode + 2, 0, 0, false},
	} {
		t.Setenv("RANDFLAKE_TEST_ORDINAL", c.val)
		s, err := StatefulSetSource("RANDFLAKE_TEST_ORDINAL", c.per)
		if (err == nil) != c.ok || (c.ok && (s.FirstNode != c.first || s.LastNode != c.last)) {
			t.Errorf("%q x %d: %+v, %v", c.val, c.per, s, err)
		}
	}
}
