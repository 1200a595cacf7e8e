package randflake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every lease event reaches the logger: acquired, waiting for the start,
// renewal failed (with the source's error), renewed late, lost, acquired
// again and released.
func TestLeasedLogsLeaseEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 2 s leases to start, fail and be lost: not in -short")
	}
	t.Parallel()
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	src := &testSource{first: 10, last: 11, ttl: 2, start: time.Now().Unix() + 1}
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
	defer cancel()
	g, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src, Shards: 2, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	// Each event comes within a lease second or two; the bound, stretched
	// by how slow the machine is, only ends a wait for one that never
	// comes.
	waitUntil := func(what string, cond func(log string) bool) {
		t.Helper()
		slow := slowdown.Start()
		for start := time.Now(); !cond(out.String()); time.Sleep(10 * time.Millisecond) {
			if d := slow.Stretch(8 * time.Second); time.Since(start) > d {
				t.Fatalf("no %s in the log within %v (%s):\n%s", what, d, slow, out.String())
			}
		}
	}
	waitFor := func(what string) {
		t.Helper()
		waitUntil(fmt.Sprintf("%q", what), func(log string) bool { return strings.Contains(log, what) })
	}
	waitFor("lease acquired")
	waitFor("waiting for the lease to start")
	src.set(func(s *testSource) { s.renewErr = errors.New("disk full") })
	waitFor("lease renewal failed")
	waitFor("disk full")
	src.set(func(s *testSource) { s.renewErr = nil })
	waitFor("lease renewed late")
	src.set(func(s *testSource) {
		s.start = 0
		s.renewErr = fmt.Errorf("claim deleted: %w", ErrLeaseLost)
	})
	waitFor("lease lost")
	waitUntil("second acquisition", func(log string) bool { return strings.Count(log, "lease acquired") >= 2 })
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor("lease released")
	if !strings.Contains(out.String(), "nodes=10-11") {
		t.Errorf("the log does not name the node range:\n%s", out.String())
	}
}

// A lease on node IDs nobody has used starts right after the epoch
// (2024-10-27T03:33:21Z). The log gives the first second the generator
// may use instead, the second of the acquisition, which reads as the
// clock does.
func TestLeasedLogsFirstUsableSecond(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	src := &testSource{first: 12, last: 12, ttl: 30, start: Epoch + 1}
	before := time.Now().Unix()
	ctx, cancel := context.WithTimeout(context.Background(), slowdown.Stretch(10*time.Second))
	defer cancel()
	g, err := NewLeased(ctx, LeasedConfig{Secret: testSecret, Source: src, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	if got := g.Lease().Start; got != Epoch+1 {
		t.Fatalf("lease start %d, want the source's %d", got, Epoch+1)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	logged := out.String()
	if !strings.Contains(logged, "last_used=none") {
		t.Errorf("release of a lease that issued nothing: want last_used=none in\n%s", logged)
	}
	for _, event := range []string{"lease acquired", "lease released"} {
		var line string
		for _, l := range strings.Split(logged, "\n") {
			if strings.Contains(l, event) {
				line = l
			}
		}
		_, start, ok := strings.Cut(line, " start=")
		start, _, _ = strings.Cut(start, " ")
		ts, err := time.Parse(time.RFC3339, start)
		if !ok || err != nil {
			t.Fatalf("no start in the %q line %q", event, line)
		}
		if ts.Unix() < before || ts.Unix() > after {
			t.Errorf("%s: start=%s, want the second of the acquisition (%s to %s)", event, start, formatSecond(before), formatSecond(after))
		}
	}
}
