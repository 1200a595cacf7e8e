package pglease

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
	"github.com/randflake/randflake/pglease/pgtest"
)

// The conformance suite of the lease engine, on PostgreSQL: every subtest
// gets a table of its own on the shared server (a rollback, a replica of
// its own), and every handle a connection pool of its own, as a process
// would. The subtests run side by side: each mostly waits for seconds to
// pass, now that every claim waits a takeover.
func TestConformance(t *testing.T) {
	srv := server(t)
	leasetest.Run(t, leasetest.Harness{
		Layout:   conformanceLayout,
		New:      func(t *testing.T) *leasetest.Store { return newConformanceStore(t, srv).hooks() },
		Parallel: true,
		// A claim step past its own timeout on a loaded machine is
		// tried again, as a deployment starts the process again.
		Transient: slowStep,
	})
}

// conformanceLayout is the suite's layout: 8 blocks of 16 node IDs.
var conformanceLayout = lease.BlockLayout{FirstNode: 0, LastNode: 127, Size: 16}

// conformanceStore is one subtest's store: a table, the server it is on
// (which a rollback replaces by a promoted copy) and the handles opened.
type conformanceStore struct {
	table string
	app   string // the application_name of the handles' connections

	mu      sync.Mutex
	server  *pgtest.Server // where the handles connect (unless through a proxy)
	admin   *pgxpool.Pool  // the test's own connections to it, for the hooks
	handles map[*store]*pgxpool.Pool
}

func newConformanceStore(t *testing.T, srv *pgtest.Server) *conformanceStore {
	cs := &conformanceStore{admin: newPool(t, srv.DSN()), app: uniqueName("conformance"), server: srv, handles: map[*store]*pgxpool.Pool{}}
	cs.table = newTable(t, cs.admin, "conformance")
	return cs
}

func (cs *conformanceStore) hooks() *leasetest.Store {
	return &leasetest.Store{
		Open: cs.open,
		Addr: cs.server.Addr(),
		Kill: cs.kill,
		Wipe: func(t *testing.T) {
			// The schema row first, as the holders' steps lock it, so
			// that the wipe cannot deadlock with them.
			cs.exec(t, `UPDATE `+cs.table+`_schema SET marker = NULL; DELETE FROM `+cs.table)
		},
		WipeKeepMarker: func(t *testing.T) {
			cs.exec(t, `SELECT 1 FROM `+cs.table+`_schema FOR UPDATE; DELETE FROM `+cs.table)
		},
		ReadRecord: func(t *testing.T, first int64) []byte {
			return nullBytes(cs.queryText(t, `SELECT record FROM `+cs.table+` WHERE first_node = $1`, first))
		},
		WriteRecord: cs.writeRecord,
		ReadMarker:  func(t *testing.T) []byte { return nullBytes(cs.queryText(t, `SELECT marker FROM `+cs.table+`_schema`)) },
		WriteMarker: func(t *testing.T, raw []byte) {
			cs.exec(t, `UPDATE `+cs.table+`_schema SET marker = $1`, nullText(raw))
		},
		Save: func(t *testing.T) func(t *testing.T) {
			c := copyTables(t, cs.db(), cs.table)
			return func(t *testing.T) { c.restore(t, cs.db()) }
		},
		Rollback: cs.rollback,
	}
}

// open opens a handle: a store on a pool of its own, connecting to the
// current server, or through p.Addr.
func (cs *conformanceStore) open(t *testing.T, p leasetest.Process) (lease.BlockStore, error) {
	pc, err := pgxpool.ParseConfig(cs.server.DSN())
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.RuntimeParams["application_name"] = cs.app
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		addr := p.Addr
		if addr == "" {
			cs.mu.Lock()
			addr = cs.server.Addr()
			cs.mu.Unlock()
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(port, 10, 16)
		cc.Host, cc.Port = host, uint16(n)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, err
	}
	t.Cleanup(pool.Close)
	l := p.Layout
	st, err := newStore(Config{Pool: pool, Table: cs.table, Nodes: l.Size, FirstNode: l.FirstNode, LastNode: l.LastNode,
		TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew, Holder: p.Name})
	if err != nil {
		pool.Close()
		return nil, err
	}
	// p.Now is not given to the store. The store checks this machine's
	// clock against the server's at every step that claims or records,
	// so a process whose clock is an hour ahead is refused with
	// ErrClockSkew before it touches a block (TestClockSkewRefused); the
	// suite's hour-ahead process is played with the engine's clock alone,
	// so that ClockAheadPerBlock checks the engine's per-block rule on the
	// records the table keeps.
	st.pool = pool
	cs.mu.Lock()
	cs.handles[st] = pool
	cs.mu.Unlock()
	return st, nil
}

// kill closes a handle's pool: its claims stay, and its later calls fail.
func (cs *conformanceStore) kill(t *testing.T, s lease.BlockStore) {
	st, _ := s.(*store)
	cs.mu.Lock()
	pool := cs.handles[st]
	cs.mu.Unlock()
	if pool == nil {
		t.Fatalf("Kill of a handle this store did not open: %v", s)
	}
	pool.Close()
}

func (cs *conformanceStore) writeRecord(t *testing.T, first int64, raw []byte) {
	size := conformanceLayout.Size
	cs.exec(t, `INSERT INTO `+cs.table+` (first_node, last_node, record) VALUES ($1, $2, $3)
		ON CONFLICT (first_node) DO UPDATE SET record = excluded.record`, first, first+size-1, nullText(raw))
}

// rollback freezes a copy of the server (a replica, stopped once it has
// replayed everything written so far) and returns what puts it back: the
// copy, made to forget its primary so that it replays nothing written
// since, promoted on a new timeline, and the handles' connections moved
// to it (those on the server are ended, new ones go to the copy), as
// after a failover to a replica that had not received the last commits.
// The server itself stays, for the other subtests, which run one after
// the other (the machine's two cores and the shared server make parallel
// subtests under load, and a base backup among them, slow enough to miss
// their budgets).
func (cs *conformanceStore) rollback(t *testing.T) func(t *testing.T) {
	cs.mu.Lock()
	srv := cs.server
	cs.mu.Unlock()
	r := pgtest.NewReplica(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lsn string
	if err := cs.db().QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	rc, err := pgx.Connect(ctx, r.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for {
		var done bool
		if err := rc.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&done); err != nil {
			t.Fatalf("waiting for the replica: %v", err)
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc.Close(ctx)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T) {
		if err := r.Unfollow(); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		if err := r.Promote(); err != nil {
			t.Fatal(err)
		}
		admin := newPool(t, r.DSN())
		cs.mu.Lock()
		cs.server, cs.admin = r, admin
		cs.mu.Unlock()
		// End the handles' connections to the old server.
		old := newPool(t, srv.DSN())
		if _, err := old.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, cs.app); err != nil {
			t.Fatal(err)
		}
		old.Close()
	}
}

// db returns the test's own pool on the current server.
func (cs *conformanceStore) db() *pgxpool.Pool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.admin
}

func (cs *conformanceStore) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := cs.db().Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func (cs *conformanceStore) queryText(t *testing.T, sql string, args ...any) *string {
	t.Helper()
	var s *string
	err := cs.db().QueryRow(context.Background(), sql, args...).Scan(&s)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return s
}

func nullBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

func nullText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
