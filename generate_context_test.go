package randflake

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// TestGenerateContextWaits takes 4 x 300,000 IDs through GenerateContext on
// ONE node ID, 131,072 IDs a second: the calls must wait for the next
// second about nine times. Every generator must finish with no error and
// no duplicate, and no second may carry more than 131,072 IDs.
func TestGenerateContextWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out about nine seconds of one node ID: not in -short")
	}
	// Its generators are its own; most of its time is spent waiting.
	t.Parallel()
	const workers, perWorker = 4, 300_000
	now := time.Now().Unix()
	newSharded := func(t *testing.T) *Sharded {
		s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 77, LastNode: 77, LeaseStart: now - 10, LeaseEnd: now + 3600})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	newLeased := func(t *testing.T) *Leased {
		ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(30*time.Second))
		defer cancel()
		l, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: StaticSource{FirstNode: 77, LastNode: 77}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		return l
	}
	cases := []struct {
		name string
		// worker returns the GenerateContext of worker w, and the
		// generator's Inspector.
		setup func(t *testing.T) (func(w int) func(context.Context) (int64, error), Inspector)
	}{
		{"Generator", func(t *testing.T) (func(int) func(context.Context) (int64, error), Inspector) {
			g, err := NewGenerator(77, now-10, now+3600, testSecret)
			if err != nil {
				t.Fatal(err)
			}
			return func(int) func(context.Context) (int64, error) { return g.GenerateContext }, g.Inspector
		}},
		{"Sharded", func(t *testing.T) (func(int) func(context.Context) (int64, error), Inspector) {
			s := newSharded(t)
			return func(int) func(context.Context) (int64, error) { return s.GenerateContext }, s.Inspector
		}},
		{"Local", func(t *testing.T) (func(int) func(context.Context) (int64, error), Inspector) {
			s := newSharded(t)
			return func(int) func(context.Context) (int64, error) { return s.NewLocal().GenerateContext }, s.Inspector
		}},
		{"Leased", func(t *testing.T) (func(int) func(context.Context) (int64, error), Inspector) {
			l := newLeased(t)
			return func(int) func(context.Context) (int64, error) { return l.GenerateContext }, l.Inspector
		}},
		{"LeasedLocal", func(t *testing.T) (func(int) func(context.Context) (int64, error), Inspector) {
			l := newLeased(t)
			return func(int) func(context.Context) (int64, error) { return l.NewLocal().GenerateContext }, l.Inspector
		}},
	}
	// The cases run at once, whatever -parallel says: they spend most of
	// their time waiting for the next second.
	var all sync.WaitGroup
	defer all.Wait()
	for _, c := range cases {
		all.Add(1)
		go func() {
			defer all.Done()
			t.Run(c.name, func(t *testing.T) { takeWaiting(t, c.setup, workers, perWorker) })
		}()
	}
}

// takeWaiting has workers goroutines take perWorker IDs each through the
// GenerateContext that setup gives them, all on node 77, and checks the
// IDs (see TestGenerateContextWaits).
func takeWaiting(t *testing.T, setup func(t *testing.T) (func(w int) func(context.Context) (int64, error), Inspector), workers, perWorker int) {
	worker, in := setup(t)
	// 1,200,000 IDs need at least ten seconds of one node ID; the
	// bound leaves room for a loaded machine and the race detector.
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(90*time.Second))
	defer cancel()
	ids := make([][]int64, workers)
	errs := make([]error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := worker(w)
			ids[w] = make([]int64, 0, perWorker)
			for range perWorker {
				id, err := gen(ctx)
				if err != nil {
					errs[w] = err
					return
				}
				ids[w] = append(ids[w], id)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d after %d IDs: %v", w, len(ids[w]), err)
		}
	}
	all := slices.Concat(ids...)
	checkSecondsUsed(t, in, all, 77, workers*perWorker)
	t.Logf("%d IDs on one node ID in %v", len(all), elapsed.Round(time.Millisecond))
}

// checkSecondsUsed checks that ids holds want IDs, all on node, with no
// duplicate and at most IDsPerSecond in any second. (The IDs are
// decrypted in one batch: the cipher is a bijection, so a duplicate
// plaintext is a duplicate ID.)
func checkSecondsUsed(t *testing.T, in Inspector, ids []int64, node int64, want int) {
	t.Helper()
	if len(ids) != want {
		t.Fatalf("%d IDs, want %d", len(ids), want)
	}
	raw := slices.Clone(asUint64s(ids))
	in.cipher.DecryptIDs(raw, raw)
	slices.Sort(raw)
	seconds := 0
	for i, r := range raw {
		ts, n, _ := splitRaw(r)
		if n != node {
			t.Fatalf("ID %d has node %d, want %d", ids[i], n, node)
		}
		if i > 0 && r == raw[i-1] {
			t.Fatalf("duplicate ID: second %s node %d sequence %d twice", formatSecond(ts), n, r&MaxSequence)
		}
		if i == 0 || r>>(NodeBits+SequenceBits) != raw[i-1]>>(NodeBits+SequenceBits) {
			seconds++
		}
	}
	// Sorted plaintexts of one node ID: a second with more than
	// IDsPerSecond IDs would need a duplicate sequence number, which the
	// loop above finds; so count the seconds.
	if min := (want + IDsPerSecond - 1) / IDsPerSecond; seconds < min {
		t.Errorf("IDs of %d seconds, want at least %d", seconds, min)
	}
}

// frozenClock is a TimeSource that tests move by hand.
type frozenClock struct{ sec atomic.Int64 }

func (c *frozenClock) now() int64 { return c.sec.Load() }

// TestGenerateContextCancel: with the second used up and a clock that
// does not move, GenerateContext waits until its context is cancelled,
// then returns promptly an error that is both the exhaustion and the
// context's; the wait took no ID, so the first ID of the next second has
// sequence 0.
func TestGenerateContextCancel(t *testing.T) {
	start := time.Now().Unix()
	type gen struct {
		batch  func([]int64) (int, error)
		genCtx func(context.Context) (int64, error)
		in     Inspector
	}
	cases := []struct {
		name string
		make func(t *testing.T, clock func() int64) gen
	}{
		{"Generator", func(t *testing.T, clock func() int64) gen {
			g, err := NewGenerator(5, start, start+3600, testSecret)
			if err != nil {
				t.Fatal(err)
			}
			g.TimeSource = clock
			return gen{g.GenerateBatch, g.GenerateContext, g.Inspector}
		}},
		{"Sharded", func(t *testing.T, clock func() int64) gen {
			s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 5, LastNode: 5, LeaseStart: start, LeaseEnd: start + 3600, TimeSource: clock})
			if err != nil {
				t.Fatal(err)
			}
			return gen{s.GenerateBatch, s.GenerateContext, s.Inspector}
		}},
		{"Local", func(t *testing.T, clock func() int64) gen {
			s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 5, LastNode: 5, LeaseStart: start, LeaseEnd: start + 3600, TimeSource: clock})
			if err != nil {
				t.Fatal(err)
			}
			return gen{s.GenerateBatch, s.NewLocal().GenerateContext, s.Inspector}
		}},
		{"Leased", func(t *testing.T, clock func() int64) gen {
			src := &testSource{first: 5, last: 5, ttl: 3600}
			ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
			defer cancel()
			l, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src, TimeSource: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			return gen{l.GenerateBatch, l.GenerateContext, l.Inspector}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var clock frozenClock
			clock.sec.Store(start + 1)
			g := c.make(t, clock.now)
			buf := make([]int64, IDsPerSecond)
			if n, err := g.batch(buf); n != IDsPerSecond || err != nil {
				t.Fatalf("GenerateBatch of a whole second: %d IDs, %v", n, err)
			}
			// A context already cancelled: no wait at all.
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := g.genCtx(done); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrResourceExhausted) {
				t.Fatalf("cancelled context, second used up: %v, want context.Canceled and ErrResourceExhausted", err)
			}
			// A context cancelled while GenerateContext waits.
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan error, 1)
			go func() {
				_, err := g.genCtx(ctx)
				res <- err
			}()
			select {
			case err := <-res:
				t.Fatalf("GenerateContext returned %v while the second was used up and the clock stood still", err)
			case <-time.After(100 * time.Millisecond):
			}
			cancel()
			cancelled := time.Now()
			select {
			case err := <-res:
				if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrResourceExhausted) {
					t.Fatalf("cancelled during the wait: %v, want context.Canceled and ErrResourceExhausted", err)
				}
				if msg := err.Error(); !strings.Contains(msg, "node ID 5") || !strings.Contains(msg, "context canceled") {
					t.Errorf("error %q names neither the node ID nor the cancellation", msg)
				}
			case <-time.After(slowdown.Stretch(10 * time.Second)):
				t.Fatalf("GenerateContext did not return within %v of its context's cancellation (10 s stretched: %.1f× slower than on idle cores)", slowdown.Stretch(10*time.Second), slowdown.Factor())
			}
			t.Logf("returned %v after the cancellation", time.Since(cancelled).Round(time.Microsecond))
			// The next second: the waits took nothing from it.
			clock.sec.Add(1)
			ctx, cancel = context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
			defer cancel()
			id, err := g.genCtx(ctx)
			if err != nil {
				t.Fatalf("next second: %v", err)
			}
			if ts, node, seq, _ := g.in.Inspect(id); ts != start+2 || node != 5 || seq != 0 {
				t.Errorf("first ID of the next second: second %d node %d sequence %d, want %d, 5, 0", ts, node, seq, start+2)
			}
		})
	}
}

// TestGenerateContextTimeSource: a wait on a TimeSource ends when the
// TimeSource reaches the next second.
func TestGenerateContextTimeSource(t *testing.T) {
	start := time.Now().Unix()
	var clock frozenClock
	clock.sec.Store(start)
	g, err := NewGenerator(3, start, start+3600, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	g.TimeSource = clock.now
	if n, err := g.GenerateBatch(make([]int64, IDsPerSecond)); n != IDsPerSecond || err != nil {
		t.Fatalf("GenerateBatch: %d, %v", n, err)
	}
	time.AfterFunc(50*time.Millisecond, func() { clock.sec.Add(1) })
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
	defer cancel()
	id, err := g.GenerateContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ts, _, seq, _ := g.Inspect(id); ts != start+1 || seq != 0 {
		t.Errorf("second %d sequence %d, want %d and 0", ts, seq, start+1)
	}
}

// TestGenerateContextOtherErrors: errors other than a used-up second are
// returned at once, as Generate returns them.
func TestGenerateContextOtherErrors(t *testing.T) {
	now := time.Now().Unix()
	g, err := NewGenerator(3, now+1000, now+2000, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.GenerateContext(context.Background()); !errors.Is(err, ErrInvalidLease) {
		t.Errorf("lease not started: %v, want ErrInvalidLease", err)
	}
	// The clock stepped back behind a used-up second.
	var clock frozenClock
	clock.sec.Store(now)
	g, err = NewGenerator(3, now-10, now+10, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	g.TimeSource = clock.now
	if n, err := g.GenerateBatch(make([]int64, IDsPerSecond)); n != IDsPerSecond || err != nil {
		t.Fatalf("GenerateBatch: %d, %v", n, err)
	}
	clock.sec.Store(now - 1)
	if _, err := g.GenerateContext(context.Background()); !errors.Is(err, ErrConsistencyViolation) {
		t.Errorf("clock behind a used-up second: %v, want ErrConsistencyViolation", err)
	}
}

// TestGenerateContextClosed: closing a Leased generator ends a wait, with
// ErrClosed.
func TestGenerateContextClosed(t *testing.T) {
	start := time.Now().Unix()
	var clock frozenClock
	clock.sec.Store(start)
	src := &testSource{first: 6, last: 6, ttl: 3600}
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
	defer cancel()
	l, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src, TimeSource: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.GenerateBatch(make([]int64, IDsPerSecond)); n != IDsPerSecond || err != nil {
		t.Fatalf("GenerateBatch: %d, %v", n, err)
	}
	res := make(chan error, 2)
	loc := l.NewLocal()
	go func() {
		_, err := l.GenerateContext(context.Background())
		res <- err
	}()
	go func() {
		_, err := loc.GenerateContext(context.Background())
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-res:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("GenerateContext waiting when the generator closed: %v, want ErrClosed", err)
			}
		case <-time.After(slowdown.Stretch(10 * time.Second)):
			t.Fatalf("GenerateContext still waiting %v after Close (10 s stretched: %.1f× slower than on idle cores)", slowdown.Stretch(10*time.Second), slowdown.Factor())
		}
	}
}

// TestExhaustedError: the error of a used-up second names the node range,
// the second and the ceiling, points to GenerateContext, and is
// ErrResourceExhausted for errors.Is.
func TestExhaustedError(t *testing.T) {
	start := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: 1, LeaseStart: start, LeaseEnd: start + 10,
		TimeSource: func() int64 { return start + 1 }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.GenerateBatch(make([]int64, 2*IDsPerSecond+1))
	if n != 2*IDsPerSecond || !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("GenerateBatch past two node IDs' second: %d, %v", n, err)
	}
	want := "randflake: resource exhausted: node IDs 0-1 issued all 262144 IDs of second " + formatSecond(start+1) +
		" (131072 per node ID per second); use a wider node range, or GenerateContext to wait for the next second"
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
	if _, err := s.Generate(); !errors.Is(err, ErrResourceExhausted) || err.Error() != want {
		t.Errorf("Generate: %v", err)
	}
	if strings.Contains(ErrResourceExhausted.Error(), "multiple randflake instances") {
		t.Errorf("the sentinel still gives the reference's advice: %q", ErrResourceExhausted)
	}
}
