package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gated is a generator whose GenerateBatch waits at its gate: entered
// gets one value per call, and each call goes on once open is closed.
type gated struct {
	Generator
	entered chan int // the length asked for
	open    chan struct{}
}

func newGated(t *testing.T) *gated {
	return &gated{Generator: newSharded(t), entered: make(chan int, 64), open: make(chan struct{})}
}

func (g *gated) GenerateBatch(dst []int64) (int, error) {
	g.entered <- len(dst)
	<-g.open
	return g.Generator.GenerateBatch(dst)
}

const (
	aliceBudgetToken = "alice-budget-token-0123456789"
	bobBudgetToken   = "bob-budget-token-0123456789"
)

// An answer reserves the buffers it holds, sized to its count: a binary
// count=1 holds 8 bytes of IDs (and the writer's buffer), not a 512 KiB
// chunk; a large binary answer one chunk whatever its count; JSON its IDs
// and their text. Everything is given back when the answers end.
func TestInflightSizedToAnswer(t *testing.T) {
	g := newGated(t)
	s, ts := newServer(t, Config{Generator: g, MaxCount: 100000})
	for _, c := range []struct {
		accept string
		count  int
		want   int64
	}{
		{MediaTypeBinary, 1, 8 + answerOverhead},
		{MediaTypeBinary, 3, 4*8 + answerOverhead},
		{MediaTypeBinary, 65536, 8*binaryChunk + answerOverhead},
		{MediaTypeBinary, 1 << 20, 8*binaryChunk + answerOverhead},
		{"application/json", 1, scratchBytes + answerOverhead},
		{"text/plain", 50000, textBytes(50000) + answerOverhead},
	} {
		done := make(chan int)
		go func() {
			resp, _ := do(t, "GET", fmt.Sprintf("%s/v1/ids?count=%d", ts.URL, c.count), map[string]string{"Accept": c.accept})
			done <- resp.StatusCode
		}()
		<-g.entered // the answer is being made: its buffers are held
		if got := s.budget.inUse(); got != c.want {
			t.Errorf("%s count=%d holds %d bytes of the budget, want %d", c.accept, c.count, got, c.want)
		}
		g.open <- struct{}{} // the first GenerateBatch goes on
		for n := binaryPieces(c.count); c.accept == MediaTypeBinary && n > 1; n-- {
			<-g.entered
			g.open <- struct{}{}
		}
		if status := <-done; status != 200 {
			t.Errorf("%s count=%d: status %d", c.accept, c.count, status)
		}
		// The client has the whole answer; the handler gives its
		// buffers back as it returns, which may come just after.
		if got := heldAfter(s, 5*time.Second); got != 0 {
			t.Errorf("after %s count=%d: %d bytes still held 5 s after the answer ended", c.accept, c.count, got)
		}
	}
}

// heldAfter waits up to d for the answers in flight to give their
// buffers back, and returns what the budget still holds then.
func heldAfter(s *Server, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for s.budget.inUse() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return s.budget.inUse()
}

// Over the budget a request is answered 503 busy with Retry-After: 1, and
// nothing is issued; one client's answers hold at most its share, so that
// another client is served meanwhile; the refused client is served once
// its answers end.
func TestInflightBusyAndFair(t *testing.T) {
	g := newGated(t)
	s, ts := newServer(t, Config{Generator: g, MaxInflightBytes: 1 << 20,
		IssueTokens: mustTokens(t, "alice "+aliceBudgetToken+"\nbob "+bobBudgetToken)})
	s.budget.wait = time.Millisecond // the refusal, not the wait, is tested here
	alice := map[string]string{"Authorization": "Bearer " + aliceBudgetToken, "Accept": MediaTypeBinary}
	bob := map[string]string{"Authorization": "Bearer " + bobBudgetToken, "Accept": MediaTypeBinary}

	// Alice's first large answer is held at the generator: more than her
	// share (1 MiB / 8), it is served because she holds nothing else.
	first := make(chan int)
	go func() {
		resp, _ := do(t, "GET", ts.URL+"/v1/ids?count=65536", alice)
		first <- resp.StatusCode
	}()
	<-g.entered
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count=1", alice)
	var e struct{ Error, Kind string }
	json.Unmarshal(body, &e)
	if resp.StatusCode != 503 || e.Kind != KindBusy || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("alice's second answer while her first holds her share: %d %q Retry-After %q, want 503 busy with Retry-After: 1", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}

	// Bob is another client: his small answer fits in the budget.
	bobDone := make(chan int)
	go func() {
		resp, _ := do(t, "GET", ts.URL+"/v1/ids?count=1", bob)
		bobDone <- resp.StatusCode
	}()
	if n := <-g.entered; n != 1 {
		t.Errorf("bob's answer asked the generator for %d IDs, want 1", n)
	}
	close(g.open)
	if st := <-bobDone; st != 200 {
		t.Errorf("bob, another client, while alice holds her share: status %d, want 200", st)
	}
	if st := <-first; st != 200 {
		t.Errorf("alice's first answer: status %d", st)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/ids?count=1", alice)
	if resp.StatusCode != 200 {
		t.Errorf("alice once her answers ended: %d, want 200", resp.StatusCode)
	}
	if used := heldAfter(s, 5*time.Second); used != 0 {
		t.Errorf("%d bytes held 5 s after every answer ended", used)
	}
	// One busy answer, counted; the refused request issued nothing: the
	// generator saw only the three answers served. Not yet taken from the
	// gate: the later pieces of alice's first and her last answer's one.
	if n, want := len(g.entered), binaryPieces(65536); n != want {
		t.Errorf("%d GenerateBatch calls not taken from the gate, want %d (alice's first answer's later pieces and her last answer)", n, want)
	}
}

// The budget itself: a request that does not fit waits and gets the room
// given back meanwhile; it gives up when its context ends or its wait is
// over; waiting places are bounded, per client too; one answer larger
// than the budget is served when nothing else is held.
func TestInflightBudget(t *testing.T) {
	b := newInflight(800)
	b.wait = time.Hour // the waits below end by release or context only
	if !b.acquire(context.Background(), "a", 100) || !b.acquire(context.Background(), "b", 100) {
		t.Fatal("small reservations within the budget refused")
	}
	// a's share is 100 bytes: a second reservation waits for the first.
	got := make(chan bool)
	go func() { got <- b.acquire(context.Background(), "a", 100) }()
	waitFor(t, "a's second reservation to wait", func() bool { return b.waiting("a") == 1 })
	b.release("a", 100)
	if !<-got {
		t.Error("a waiting reservation was refused after room was given back")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- b.acquire(ctx, "a", 100) }()
	waitFor(t, "a's third reservation to wait", func() bool { return b.waiting("a") == 1 })
	cancel()
	if <-got {
		t.Error("a reservation granted after its context ended, with no room given back")
	}
	// Waiting places: maxClientWaiters for one client, then refused at
	// once (no waiting: acquire returns with the budget unchanged).
	ctx, cancel = context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range maxClientWaiters {
		wg.Add(1)
		go func() { defer wg.Done(); b.acquire(ctx, "a", 100) }()
	}
	waitFor(t, "a's requests to take their waiting places", func() bool { return b.waiting("a") == maxClientWaiters })
	if b.acquire(context.Background(), "a", 100) {
		t.Error("a reservation past the client's waiting places was granted")
	}
	cancel()
	wg.Wait()
	b.release("a", 100)
	b.release("b", 100)
	if used := b.inUse(); used != 0 {
		t.Fatalf("%d bytes held after every release", used)
	}
	// Larger than the budget: served alone, then nothing else fits.
	if !b.acquire(context.Background(), "c", 5000) {
		t.Error("an answer larger than the budget, with nothing held, was refused")
	}
	b.wait = time.Millisecond
	if b.acquire(context.Background(), "d", 1) {
		t.Error("a reservation granted while an answer larger than the budget is held")
	}
	b.release("c", 5000)
	if len(b.clients) != 0 {
		t.Errorf("%d client entries kept with nothing held or waiting", len(b.clients))
	}
}

// waiting returns the number of key's requests waiting.
func (b *inflight) waiting(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.clients[key]; c != nil {
		return c.waiting
	}
	return 0
}

// waitFor waits until cond holds; it fails naming what after a minute,
// which only a stall reaches.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
