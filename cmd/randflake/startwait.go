package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/randflake/randflake/lease"
)

// notReachableYet reports whether err says the server cannot be reached
// yet: a network error, or a PostgreSQL server that refuses connections
// while it starts up, recovers or shuts down (SQLSTATE 57P03,
// cannot_connect_now) or that lost the connection (class 08).
func notReachableYet(err error) bool {
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return true
	}
	code := pgCode(err)
	return code == "57P03" || strings.HasPrefix(code, "08")
}

// storeSlow reports whether err says a step on the store was not done in
// time: a step's own bound or a request's deadline passed (a stalled or
// overloaded server), or PostgreSQL cancelled a statement or gave up on a
// lock (SQLSTATE 57014, 55P03). The step may still have been applied.
func storeSlow(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrGRPCTimeout) {
		return true
	}
	if status.Code(err) == codes.DeadlineExceeded {
		return true
	}
	code := pgCode(err)
	return code == "57014" || code == "55P03"
}

// untilReachable runs op until it succeeds, fails for a reason other than
// a server not reachable yet (notReachableYet), or ctx ends. So a process
// started before its database waits for it, as it does for etcd, while a
// refused password or missing tables end it at once.
func untilReachable(ctx context.Context, op func() error) error {
	return retryWhile(ctx, op, notReachableYet)
}

// maxSlowClaims is how many claims at start-up may fail on a slow store
// (storeSlow) before the process gives up.
const maxSlowClaims = 10

// slowClaimLapse is how long after a claim failed on a slow store "no
// free node IDs" is waited out: the claim that timed out may have been
// written, and then holds its node IDs until it lapses (the stores'
// default TTLs are 10 to 15 s).
const slowClaimLapse = time.Minute

// untilClaimed runs claim (NewLeased on a network store) until it
// succeeds, fails for a reason a wait does not mend, or ctx ends. Waited
// out:
//   - a server not reachable yet (notReachableYet), so a process started
//     before its store waits for it;
//   - a claim that failed on a slow store (storeSlow), tried again up to
//     maxSlowClaims times, each logged: a stalled or overloaded server
//     fails one claim and passes the next;
//   - no free node IDs within slowClaimLapse of such a failure: the
//     claim that timed out may hold its node IDs until it lapses.
//
// Anything else (a refused password, another fleet's secret, a store
// whose node IDs are all held) ends the start-up at once.
func untilClaimed(ctx context.Context, log *slog.Logger, claim func() error) error {
	slow := 0
	var slowAt time.Time
	return retryWhile(ctx, claim, func(err error) bool {
		switch {
		case ctx.Err() != nil:
			// Stopped (or out of time) during the claim: retryWhile
			// returns the context's error, logging no retry.
			return true
		case notReachableYet(err):
			return true
		case storeSlow(err):
			if slow == maxSlowClaims {
				return false
			}
			slow++
			slowAt = time.Now()
			log.Warn("a claim of node IDs failed on a slow store; claiming again", "try", slow, "of", maxSlowClaims, "err", err)
			return true
		case errors.Is(err, lease.ErrNoFreeNodes):
			return slow > 0 && time.Since(slowAt) < slowClaimLapse
		}
		return false
	})
}

// retryPause and maxRetryPause bound the pauses of retryWhile (tests
// shorten them).
var retryPause, maxRetryPause = 100 * time.Millisecond, 2 * time.Second

// retryWhile runs op until it succeeds, fails with an error again does
// not accept, or ctx ends (then it returns ctx's error), pausing between
// tries, twice as long each time, from retryPause to maxRetryPause.
func retryWhile(ctx context.Context, op func() error, again func(error) bool) error {
	for delay := retryPause; ; delay = min(2*delay, maxRetryPause) {
		err := op()
		if err == nil || !again(err) {
			return err
		}
		if err := lease.Sleep(ctx, delay); err != nil {
			return err
		}
	}
}
