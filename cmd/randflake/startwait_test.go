package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
)

// errStepTimeout is a store step past its bound, as the stores report one:
// a cause wrapping context.DeadlineExceeded.
var errStepTimeout = fmt.Errorf("kubelease: Put \"https://127.0.0.1:1/x\": a step on the claim: not done within 2s: %w", context.DeadlineExceeded)

// script returns a claim that fails with errs in turn, then succeeds, and
// how many times it was called.
func script(errs ...error) (func() error, *int) {
	n := 0
	return func() error {
		n++
		if n <= len(errs) {
			return errs[n-1]
		}
		return nil
	}, &n
}

func TestUntilClaimed(t *testing.T) {
	retryPause, maxRetryPause = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() { retryPause, maxRetryPause = 100*time.Millisecond, 2*time.Second })
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	noFree := fmt.Errorf("%w (16 node IDs each)", lease.ErrNoFreeNodes)
	otherFleet := lease.ErrFleetMismatch
	slows := func(n int) []error {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = errStepTimeout
		}
		return errs
	}
	for _, c := range []struct {
		name  string
		errs  []error
		fails error // nil: the claim succeeds in the end
		calls int
		warns int // "claiming again" warnings
	}{
		{"not reachable, then claimed", []error{refused, refused}, nil, 3, 0},
		{"slow, then claimed", []error{errStepTimeout}, nil, 2, 1},
		{"slow, then its own claim holds the node IDs", []error{errStepTimeout, noFree, noFree}, nil, 4, 1},
		{"no free node IDs without a slow claim", []error{noFree}, lease.ErrNoFreeNodes, 1, 0},
		{"another fleet", []error{errStepTimeout, otherFleet}, lease.ErrFleetMismatch, 2, 1},
		{"slow every time", slows(maxSlowClaims + 1), context.DeadlineExceeded, maxSlowClaims + 1, maxSlowClaims},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			claim, calls := script(c.errs...)
			err := untilClaimed(context.Background(), log, claim)
			if c.fails == nil && err != nil {
				t.Fatalf("untilClaimed: %v; want the claim to succeed after %d failures", err, len(c.errs))
			}
			if c.fails != nil && !errors.Is(err, c.fails) {
				t.Fatalf("untilClaimed returned %v; want an error wrapping %v", err, c.fails)
			}
			if *calls != c.calls {
				t.Errorf("the claim was made %d times; want %d", *calls, c.calls)
			}
			if n := strings.Count(logs.String(), "claiming again"); n != c.warns {
				t.Errorf("%d \"claiming again\" warnings; want %d; log:\n%s", n, c.warns, logs.String())
			}
		})
	}
}

func TestUntilClaimedStopsWithContext(t *testing.T) {
	retryPause, maxRetryPause = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() { retryPause, maxRetryPause = 100*time.Millisecond, 2*time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := untilClaimed(ctx, slog.New(slog.DiscardHandler), func() error {
		n++
		if n == 3 {
			cancel()
		}
		return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("after the context was cancelled at the third try: %d tries, error %v; want 3 tries and context.Canceled", n, err)
	}
}
