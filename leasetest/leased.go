package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// StartTimeout bounds the start of a generator in NewLeased: its first
// claim may wait out unknown history, a promise and a clock skew bound of
// a store's tests (a few seconds), and more under load: NewLeased
// stretches it by the measured slowdown (see package internal/slowdown).
const StartTimeout = 30 * time.Second

// NewLeased starts a generator for a module's test with start (the
// module's own constructor with the test's configuration, say), within
// StartTimeout stretched by the measured slowdown; an error fails t. The generator is closed, releasing its
// lease, when t ends (CloseAtEnd).
func NewLeased(t testing.TB, start func(ctx context.Context) (*randflake.Leased, error)) *randflake.Leased {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(StartTimeout))
	defer cancel()
	g, err := start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	CloseAtEnd(t, g)
	return g
}

// CloseAtEnd closes g, releasing its lease, when t ends, waiting up to 3
// seconds (stretched by the measured slowdown) for the release. A test may close g earlier itself: Close acts
// once.
func CloseAtEnd(t testing.TB, g *randflake.Leased) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(3*time.Second))
		defer cancel()
		g.Close(ctx)
	})
}

// TakeoverSeconds opens a store with open(cfg) (a module's NewStore, say)
// and returns, in whole seconds, how long every claim on it waits after
// the claim when no record asks for longer: lease.TakeoverWait of its
// Info (rule 14 of docs/leases.md). An error of open fails t.
func TakeoverSeconds[C any, S lease.BlockStore](t testing.TB, open func(C) (S, error), cfg C) int64 {
	t.Helper()
	st, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return int64(lease.TakeoverWait(st.Info()) / time.Second)
}
