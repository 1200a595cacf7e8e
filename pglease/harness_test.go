package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/leasetest"
	"github.com/randflake/randflake/pglease/pgtest"
)

// sinceStart measures the process's slowdown from its start (the package's
// first use); its Stretch is the one place the tests stretch their
// bounds from.
var sinceStart = slowdown.Start()

// The tests run against real PostgreSQL servers that pgtest starts. One
// server is shared by the tests (each works on a table of its own); a test
// that restarts the server starts its own. IDs are collected and checked
// for duplicates by package leasetest, network faults played by its Proxy.

// TestMain runs the test binary as a holder process when leasetest's
// process harness started it, and otherwise starts the shared server.
// Either way the bound on each step of a store is stretched by how much
// slower than on idle cores the process runs (the one place the tests'
// stores get their timeouts from): a loaded test machine, not the
// database, must not cut a step short.
func TestMain(m *testing.M) {
	stretchOp = sinceStart.Stretch
	leasetest.HolderMain(openHolderStore)
	pgtest.Main(m)
}

// slowStep reports whether err is a step of a store that failed only
// because it was slow: past its bound (the context's deadline, a lock or
// statement timeout). Leased retries such a failed acquisition; a test
// claiming in a loop may too.
func slowStep(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		(errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014"))
}

// server returns the shared server, or skips the test without one.
func server(t *testing.T) *pgtest.Server {
	t.Helper()
	return pgtest.Shared(t)
}

// ownServer starts a server for t alone.
func ownServer(t *testing.T) *pgtest.Server {
	t.Helper()
	return pgtest.New(t)
}

// newPool returns a pool on dsn, closed at the end of the test.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// tables numbers the tables of the tests, so that a test run again in the
// same process (-count) or beside others gets tables of its own.
var tables atomic.Int64

// uniqueName returns name with a suffix no other test of this process uses.
func uniqueName(name string) string {
	return fmt.Sprintf("%s_%d", name, tables.Add(1))
}

// sharedPool returns a pool of the test's own on the shared server (see
// newPool), and a context that ends after timeout, or with the test.
func sharedPool(t *testing.T, timeout time.Duration) (*pgxpool.Pool, context.Context) {
	t.Helper()
	pool := newPool(t, server(t).DSN())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return pool, ctx
}

// tableConfig returns the tests' configuration (blocks of 16 node IDs in
// 0..last, the test secret, TTL and clock skew bound) on a table of the
// test's own, named after name (see newTable), and a pool of its own on
// the shared server.
func tableConfig(t *testing.T, name string, last int64) Config {
	t.Helper()
	pool := newPool(t, server(t).DSN())
	return Config{Pool: pool, Secret: testSecret, Table: newTable(t, pool, name), Nodes: 16, LastNode: last, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
}

// newTable migrates a table of the test's own on pool and returns its name.
func newTable(t testing.TB, pool *pgxpool.Pool, name string) string {
	t.Helper()
	name = uniqueName(name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := MigrateTable(ctx, pool, "", name); err != nil {
		t.Fatal(err)
	}
	return name
}

var testSecret = []byte("fleet-secret-16b")

const (
	testTTL  = 3 * time.Second
	testSkew = 200 * time.Millisecond
	// testWait is how long unknown history is waited out with testTTL
	// and testSkew: TTL + 2 x MaxClockSkew, rounded up to whole seconds.
	testWait = 4
)

// validity is how long after a renewal is sent the test configuration's
// lease lasts: TTL - 2 x MaxClockSkew - margin.
const validity = testTTL - 2*testSkew - 300*time.Millisecond

// newLeased returns a generator on cfg, closed when t ends; its start-up
// (which may wait out unknown history) is bounded by leasetest's
// StartTimeout.
func newLeased(t *testing.T, cfg Config) *randflake.Leased {
	t.Helper()
	return leasetest.NewLeased(t, func(ctx context.Context) (*randflake.Leased, error) { return NewLeased(ctx, testSecret, cfg) })
}

// leasedWhenFree claims node IDs with cfg as soon as a block is free,
// trying again while every block is held, for up to limit, stretched by
// the measured slowdown. The generator is closed at the end of the test.
func leasedWhenFree(t *testing.T, cfg Config, limit time.Duration) *randflake.Leased {
	t.Helper()
	m := slowdown.Start()
	ctx, cancel := context.WithTimeout(context.Background(), sinceStart.Stretch(limit+30*time.Second))
	defer cancel()
	for began := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		g, err := NewLeased(ctx, testSecret, cfg)
		if err == nil {
			leasetest.CloseAtEnd(t, g)
			return g
		}
		if !errors.Is(err, ErrNoFreeNodes) || time.Since(began) > m.Stretch(limit) {
			t.Fatalf("%s claiming when a block is free: %v (after %v, a limit of %v; %s)",
				cfg.Holder, err, time.Since(began).Round(time.Millisecond), m.Stretch(limit).Round(time.Millisecond), m)
		}
	}
}

// openStore returns the store of cfg, on cfg.Pool, without a lease engine.
func openStore(t testing.TB, cfg Config) *store {
	t.Helper()
	st, err := newStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.pool = cfg.Pool
	return st
}

// checker returns a duplicate checker for the tests' IDs.
func checker(t *testing.T) *leasetest.Checker { return leasetest.NewChecker(t, testSecret) }

// takeoverOf returns the seconds every claim on cfg waits after it, when
// no record asks for longer (rule 14 of docs/leases.md).
func takeoverOf(t *testing.T, cfg Config) int64 { return leasetest.TakeoverSeconds(t, newStore, cfg) }
