package randflake

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef")

// fakeClock is a TimeSource tests move by hand.
type fakeClock struct{ sec atomic.Int64 }

func newFakeClock(sec int64) *fakeClock {
	c := &fakeClock{}
	c.sec.Store(sec)
	return c
}

func (c *fakeClock) Now() int64  { return c.sec.Load() }
func (c *fakeClock) Set(s int64) { c.sec.Store(s) }
func (c *fakeClock) Add(d int64) { c.sec.Add(d) }

const testStart = 1750000000

func newTestGenerator(t testing.TB, node int64, clk *fakeClock) *Generator {
	t.Helper()
	g, err := NewGenerator(node, testStart, testStart+1_000_000, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	g.TimeSource = clk.Now
	return g
}

// checkUnique fails the test on a duplicate ID.
func checkUnique(t testing.TB, ids []int64) {
	t.Helper()
	s := slices.Clone(ids)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("duplicate ID %d (%s) among %d", s[i], EncodeString(s[i]), len(ids))
		}
	}
}

func TestReferenceVectorsGenerator(t *testing.T) { forEachKernel(t, testReferenceVectorsGenerator) }

func testReferenceVectorsGenerator(t *testing.T) {
	for i, v := range referenceVectors(t) {
		secret := mustHex(t, v.Secret)
		g, err := NewGenerator(v.NodeID, v.LeaseStart, v.LeaseEnd, secret)
		if err != nil {
			t.Fatalf("vector %d: %v", i, err)
		}
		raw := parseInt64(t, v.RawID)
		enc := parseInt64(t, v.EncryptedID)
		if got := int64(rawID(v.Timestamp, v.NodeID, v.Sequence)); got != raw {
			t.Errorf("vector %d: raw %d, want %d", i, got, raw)
		}
		if got := int64(g.cipher.EncryptID(uint64(raw))); got != enc {
			t.Errorf("vector %d: encrypted %d, want %d", i, got, enc)
		}
		if got := EncodeString(enc); got != v.EncodedID {
			t.Errorf("vector %d: EncodeString %q, want %q", i, got, v.EncodedID)
		}
		if got, err := DecodeString(v.EncodedID); err != nil || got != enc {
			t.Errorf("vector %d: DecodeString = %d, %v", i, got, err)
		}
		for _, inspect := range []func() (int64, int64, int64, error){
			func() (int64, int64, int64, error) { return g.Inspect(enc) },
			func() (int64, int64, int64, error) { return g.InspectString(v.EncodedID) },
		} {
			ts, node, seq, err := inspect()
			if err != nil || ts != v.Timestamp || node != v.NodeID || seq != v.Sequence {
				t.Errorf("vector %d: Inspect = %d %d %d %v", i, ts, node, seq, err)
			}
		}
		// A generator at the vector's second issues sequence 0 first,
		// then 1: for vectors at sequence 0 or 1 the ID is the vector's.
		g.TimeSource = func() int64 { return v.Timestamp }
		for seq := int64(0); seq <= 1; seq++ {
			id, err := g.Generate()
			if err != nil {
				t.Fatalf("vector %d: Generate: %v", i, err)
			}
			want := int64(g.cipher.EncryptID(rawID(v.Timestamp, v.NodeID, seq)))
			if id != want {
				t.Errorf("vector %d: Generate #%d = %d, want %d", i, seq, id, want)
			}
			if seq == v.Sequence && id != enc {
				t.Errorf("vector %d: Generate = %d, want the vector's %d", i, id, enc)
			}
		}
	}
}

func TestNewGeneratorRejectsBadInput(t *testing.T) {
	cases := []struct {
		node, start, end int64
		secret           []byte
		want             error
	}{
		{-1, testStart, testStart + 1, testSecret, ErrInvalidNode},
		{MaxNode + 1, testStart, testStart + 1, testSecret, ErrInvalidNode},
		{0, testStart, testStart - 1, testSecret, ErrInvalidLease},
		{0, Epoch - 1, testStart, testSecret, ErrInvalidLease},
		{0, testStart, MaxTimestamp + 1, testSecret, ErrRandflakeDead},
		{0, testStart, testStart + 1, nil, ErrInvalidSecret},
		{0, testStart, testStart + 1, make([]byte, 15), ErrInvalidSecret},
		{0, testStart, testStart + 1, make([]byte, 17), ErrInvalidSecret},
	}
	for i, c := range cases {
		g, err := NewGenerator(c.node, c.start, c.end, c.secret)
		if !errors.Is(err, c.want) || g != nil {
			t.Errorf("case %d: got %v, %v; want %v", i, g, err, c.want)
		}
		s, err := NewSharded(ShardedConfig{Secret: c.secret, FirstNode: c.node, LastNode: c.node, LeaseStart: c.start, LeaseEnd: c.end})
		if !errors.Is(err, c.want) || s != nil {
			t.Errorf("sharded case %d: got %v; want %v", i, err, c.want)
		}
	}
	if _, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 5, LastNode: 4, LeaseStart: testStart, LeaseEnd: testStart + 1}); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("reversed node range: %v", err)
	}
	if _, err := NewSharded(ShardedConfig{Secret: testSecret, LeaseStart: testStart, LeaseEnd: testStart + 1, Shards: -1}); err == nil {
		t.Error("negative shard count accepted")
	}
}

// The reference's flaw: a burst that exhausts a second after slower
// earlier seconds re-issued sequence numbers. Here every second starts at
// sequence 0 and ends with ErrResourceExhausted, without a duplicate.
func TestBurstAfterSlowSeconds(t *testing.T) { forEachKernel(t, testBurstAfterSlowSeconds) }

func testBurstAfterSlowSeconds(t *testing.T) {
	clk := newFakeClock(testStart + 10)
	g := newTestGenerator(t, 7, clk)
	var ids []int64
	gen := func(n int) {
		for range n {
			id, err := g.Generate()
			if err != nil {
				t.Fatalf("Generate at %d after %d IDs: %v", clk.Now(), len(ids), err)
			}
			ids = append(ids, id)
		}
	}
	gen(1000)
	clk.Add(1)
	gen(5000)
	clk.Add(1)
	gen(IDsPerSecond) // the whole second
	if _, err := g.Generate(); !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("after 131072 IDs in one second: %v, want ErrResourceExhausted", err)
	}
	buf := make([]int64, 10)
	if n, err := g.GenerateBatch(buf); n != 0 || !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("GenerateBatch when exhausted: %d, %v", n, err)
	}
	clk.Add(1)
	gen(3)
	checkUnique(t, ids)
	// Every sequence number of the full second was issued exactly once.
	seen := make(map[int64]bool)
	for _, id := range ids {
		ts, node, seq, _ := g.Inspect(id)
		if node != 7 {
			t.Fatalf("node %d", node)
		}
		if ts == testStart+12 {
			seen[seq] = true
		}
	}
	if len(seen) != IDsPerSecond {
		t.Fatalf("%d distinct sequences in the full second", len(seen))
	}
}

func TestClockStepsBack(t *testing.T) { forEachKernel(t, testClockStepsBack) }

func testClockStepsBack(t *testing.T) {
	for _, step := range []int64{0, 1, 120} { // same second (ms), one second, minutes
		clk := newFakeClock(testStart + 1000)
		g := newTestGenerator(t, 1, clk)
		var ids []int64
		for range 100 {
			id, err := g.Generate()
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		clk.Add(-step)
		// Issuing continues in the newest second seen while it lasts.
		for range IDsPerSecond - 100 {
			id, err := g.Generate()
			if err != nil {
				t.Fatalf("step %d: after %d IDs: %v", step, len(ids), err)
			}
			if ts, _, _, _ := g.Inspect(id); ts != testStart+1000 {
				t.Fatalf("step %d: timestamp %d, want the newest second %d", step, ts, testStart+1000)
			}
			ids = append(ids, id)
		}
		_, err := g.Generate()
		want := ErrConsistencyViolation
		if step == 0 {
			want = ErrResourceExhausted
		}
		if !errors.Is(err, want) {
			t.Fatalf("step %d: %v, want %v", step, err, want)
		}
		clk.Set(testStart + 1001)
		id, err := g.Generate()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		checkUnique(t, ids)
	}
}

func TestLeaseBounds(t *testing.T) { forEachKernel(t, testLeaseBounds) }

func testLeaseBounds(t *testing.T) {
	clk := newFakeClock(testStart - 1)
	g, err := NewGenerator(3, testStart, testStart+10, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	g.TimeSource = clk.Now
	if _, err := g.Generate(); !errors.Is(err, ErrInvalidLease) {
		t.Fatalf("before lease: %v", err)
	}
	clk.Set(testStart + 10)
	id, err := g.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if ts, _, _, _ := g.Inspect(id); ts != testStart+10 {
		t.Fatalf("timestamp %d", ts)
	}
	clk.Set(testStart + 11)
	if _, err := g.Generate(); !errors.Is(err, ErrInvalidLease) {
		t.Fatalf("after lease: %v", err)
	}
	if _, err := g.GenerateBatch(make([]int64, 3)); !errors.Is(err, ErrInvalidLease) {
		t.Fatalf("batch after lease: %v", err)
	}
	// Renewal: only forward, same start, within the lifetime.
	if g.UpdateLease(testStart+1, testStart+20) || g.UpdateLease(testStart, testStart+5) ||
		g.UpdateLease(testStart, MaxTimestamp+1) || g.UpdateLease(testStart, testStart+10) {
		t.Fatal("UpdateLease accepted a bad lease")
	}
	if !g.UpdateLease(testStart, testStart+20) {
		t.Fatal("UpdateLease refused a renewal")
	}
	if info := g.GetLeaseInfo(); info != (LeaseInfo{NodeID: 3, LeaseStart: testStart, LeaseEnd: testStart + 20}) {
		t.Fatalf("GetLeaseInfo = %+v", info)
	}
	if _, err := g.Generate(); err != nil {
		t.Fatalf("after renewal: %v", err)
	}
	// Clock back inside the lease while the newest second is past: fine.
	clk.Set(testStart + 21)
	if _, err := g.Generate(); !errors.Is(err, ErrInvalidLease) {
		t.Fatalf("after renewed lease: %v", err)
	}
}

func TestGenerateBatch(t *testing.T) { forEachKernel(t, testGenerateBatch) }

func testGenerateBatch(t *testing.T) {
	clk := newFakeClock(testStart + 5)
	g := newTestGenerator(t, 99, clk)
	var all []int64
	for _, n := range []int{0, 1, 7, 64, 1000, 65536} {
		buf := make([]int64, n)
		got, err := g.GenerateBatch(buf)
		if err != nil || got != n {
			t.Fatalf("GenerateBatch(%d) = %d, %v", n, got, err)
		}
		all = append(all, buf...)
	}
	// The rest of the second: a batch larger than what is left is cut.
	left := IDsPerSecond - len(all)
	buf := make([]int64, left+10)
	got, err := g.GenerateBatch(buf)
	if got != left || !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("over-long batch: %d, %v; want %d, exhausted", got, err, left)
	}
	all = append(all, buf[:got]...)
	checkUnique(t, all)
	for _, id := range all {
		ts, node, _, _ := g.Inspect(id)
		if ts != testStart+5 || node != 99 {
			t.Fatalf("Inspect: %d %d", ts, node)
		}
	}
}

// Inspect reads back every timestamp of the lifetime, including those past
// 2041 where the raw ID's top bit is set.
func TestInspectWholeLifetime(t *testing.T) {
	g := newTestGenerator(t, 0, newFakeClock(testStart))
	rng := rand.New(rand.NewPCG(5, 6))
	check := func(ts, node, seq int64) {
		id := int64(g.cipher.EncryptID(rawID(ts, node, seq)))
		gts, gnode, gseq, err := g.Inspect(id)
		if err != nil || gts != ts || gnode != node || gseq != seq {
			t.Fatalf("Inspect(%d,%d,%d) = %d,%d,%d,%v", ts, node, seq, gts, gnode, gseq, err)
		}
		gts, gnode, gseq, err = g.InspectString(EncodeString(id))
		if err != nil || gts != ts || gnode != node || gseq != seq {
			t.Fatalf("InspectString(%d,%d,%d) = %d,%d,%d,%v", ts, node, seq, gts, gnode, gseq, err)
		}
	}
	for _, ts := range []int64{Epoch, Epoch + 1<<29 - 1, Epoch + 1<<29, MaxTimestamp} {
		check(ts, 0, 0)
		check(ts, MaxNode, MaxSequence)
	}
	for range 100000 {
		check(Epoch+rng.Int64N(1<<30), rng.Int64N(MaxNode+1), rng.Int64N(MaxSequence+1))
	}
	// A generator whose clock is past 2041 issues IDs it reads back.
	late := int64(Epoch + 1<<29 + 12345)
	g2, err := NewGenerator(5, late-10, late+10, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	g2.TimeSource = func() int64 { return late }
	id, err := g2.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if ts, node, _, err := g2.Inspect(id); err != nil || ts != late || node != 5 {
		t.Fatalf("late Inspect = %d %d %v", ts, node, err)
	}
}

// Many goroutines on one Generator with the real clock: no duplicates, and
// every ID's fields are sane.
func TestGeneratorConcurrentUnique(t *testing.T) { forEachKernel(t, testGeneratorConcurrentUnique) }

func testGeneratorConcurrentUnique(t *testing.T) {
	now := time.Now().Unix()
	g, err := NewGenerator(11, now-5, now+3600, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	perG := 20000
	if testing.Short() {
		perG = 2000
	}
	results := collectConcurrently(t, 8, perG, func(buf []int64) error {
		for i := range buf {
			id, err := g.Generate()
			if err != nil {
				return err
			}
			buf[i] = id
		}
		return nil
	})
	checkUnique(t, results)
	for _, id := range results {
		ts, node, _, _ := g.Inspect(id)
		if node != 11 || ts < now-1 || ts > time.Now().Unix() {
			t.Fatalf("Inspect: ts %d node %d (start %d)", ts, node, now)
		}
	}
}

// collectConcurrently runs workers goroutines, each filling a slice of n
// IDs with gen, and returns all IDs. A worker error fails the test, except
// ErrResourceExhausted, which is retried after a short sleep.
func collectConcurrently(t *testing.T, workers, n int, gen func([]int64) error) []int64 {
	t.Helper()
	out := make([][]int64, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]int64, n)
			for {
				err := gen(buf)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrResourceExhausted) {
					errs <- err
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			out[w] = buf
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return slices.Concat(out...)
}
