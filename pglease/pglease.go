// Package pglease hands out Randflake node IDs to the processes of a fleet
// through a PostgreSQL table, for deployments whose one shared, durable
// service is a database: no two processes use a node ID at the same time,
// and none reuses a second another may have used on it.
//
// The package is a storage layer only. The rules that make leases safe
// (where a lease starts, the promises recorded before seconds are used,
// unknown or rolled-back history waited out, clocks behind a block's
// record) live in the lease engine, lease.BlockSource; this package
// is the lease.BlockStore it runs on, and Source is the engine on that
// store. docs/leases.md states the rules.
//
// # The tables
//
// The blocks table (see schema.sql, created by Migrate) has one row per
// block of Config.Nodes node IDs that was ever claimed:
//
//	first_node, last_node   the block's node IDs
//	record                  the engine's record of the block: the newest
//	                        second any holder may have used on it, signed
//	                        under the fleet secret (text, kept verbatim;
//	                        NULL if none was written)
//	holder, token           the current claim (NULL while free): the
//	claimed_at, expires_at  holder's description, a random token only the
//	                        holder knows, and when the claim lapses by the
//	                        database server's clock
//
// Its schema-version table (the table's name plus "_schema") has one row:
// the schema version, the engine's fleet marker (its digest covers every
// record, so a deleted, edited or rolled-back row is seen) and fresh, true
// only while Migrate created the tables from nothing and no claim has been
// made since: the first claim on a fresh table waits nothing, and any other
// table without a marker (wiped, or upgraded from version 1) is unknown
// history, waited out once.
//
// # Steps, claims and renewals
//
// Every step of the engine (a claim, a recorded promise, a release, a
// history reset) is one transaction that starts by locking the row of the
// schema-version table (SELECT ... FOR UPDATE): the steps of the whole
// fleet run one at a time, so a step reads the marker, the rows and the
// server's identity consistently and writes them back without a conflict.
// Steps are short (a handful of statements on a few rows), and each
// transaction bounds its lock waits and its idle time
// (lock_timeout, idle_in_transaction_session_timeout: a third of the TTL),
// so a holder cut off in the middle of a step holds the fleet's lock for
// at most that long.
//
// A claim sets the block's token and expires_at = clock_timestamp() + TTL
// only if the block is free or its claim has expired, by the server's
// clock, in the claiming statement itself. A renewal is one statement,
// outside that lock, conditioned on the token: it moves expires_at to
// clock_timestamp() + TTL; a claim taken over is randflake.ErrLeaseLost.
// The engine records a new promise (Promise = TTL ahead of the clock, in
// a step of its own) whenever a renewal's lease end would pass the last
// one. A holder renews a third of the way through a lease of about TTL -
// 2 x MaxClockSkew - margin, so it records at one renewal in two or three
// with the defaults (every 4 to 5 seconds), one in three or four with a
// TTL of 3 s (TestPromiseWrites). One TTL is the shortest promise that
// does not cost a write at every renewal, and the longest whose cost
// nobody pays: a crashed holder's last promise has passed, to the second,
// when its claim lapses one TTL after its last renewal, so its successor
// waits at most about a second more; a longer promise would make every
// takeover after a crash, and every wait for unknown history, longer.
//
// # The lease end and the clock-skew bound
//
// The generator's lease end is computed on this machine's clock. A renewal
// sent at local time t0 is executed by the server at some server time S
// later than t0 in real time, and sets expires_at = S + TTL; another
// process can take the block over only once the server's clock passes
// expires_at. If the two clocks differ by at most K = Config.MaxClockSkew
// at every moment, the server read at least t0 - K when the renewal ran, and
// at a takeover, when the server reads more than S + TTL, this machine
// reads more than S + TTL - K >= t0 + TTL - 2K. The lease end is therefore
// the last whole second that ends a margin (a tenth of the TTL, at least
// 200ms) before t0 + TTL - 2K:
//
//	End = floor(t0 + TTL - 2*MaxClockSkew - margin) - 1
//
// and the generator, which issues nothing after End, stops before anyone
// could take its node IDs over. Every step that claims or records, and
// every renewal, also reads the server's clock and fails with ErrClockSkew
// when it differs from this machine's by more than K plus the round trip,
// so a violated bound is reported, not assumed away, and no record carries
// a time read on a clock that far off.
//
// # History that goes back
//
// The store's identity is the server's system identifier (from
// pg_control_system(), if the role may call it, as any role may by
// default) and its current timeline (from the name of the current WAL
// file, which any role may read); its position is the current WAL
// location. A failover to a replica, or a point-in-time or base-backup
// restore that ends recovery, starts a new timeline: the identity changes,
// a holder drops its claim at its next renewal or promise (randflake.
// ErrLeaseLost wrapping lease.ErrHistoryRolledBack), and the next
// claims wait out the longest promise. A WAL position lower than one a
// running process saw, under the same identity, is treated the same way.
// Rows deleted, edited or put back from an older copy while the marker
// stays are seen through the marker's digest, and a marker deleted is
// unknown history: both are waited out once.
//
// What cannot be detected: a copy of the data directory (or a dump of both
// tables, marker included) restored under the same system identifier and
// timeline while no holder runs. Its records and marker agree with each
// other, and no running process remembers a later position. After such a
// restore, before any process claims, run Source.ResetHistory (every
// block's history becomes unknown up to now + the longest promise, so that
// the next claims wait it out). Likewise, tables dropped and created
// again by Migrate are fresh, as if new: do that only with no process
// running, or reset the history after.
//
// All processes of a fleet must see the same identity: run them under
// roles that may all, or may all not, call pg_control_system(). Otherwise
// each identity reads as a failover to the other: claims are dropped and
// waits paid whenever processes of both kinds write.
//
// # Roles and privileges
//
// Migrate needs the privileges to create the tables. The processes of the
// fleet need only SELECT, INSERT and UPDATE on both tables (and USAGE on
// their schema).
//
// # Assumptions
//
//   - The database keeps what it committed (fsync and synchronous_commit
//     on), or loses it only in ways the identity shows (a new timeline),
//     or while no holder runs and the operator then resets the history.
//   - The clocks of the holders and of the server differ by at most
//     MaxClockSkew (checked at every claim, record and renewal), and the
//     server's clock_timestamp() does not step back.
//   - Every process of the fleet uses the same table, secret, node range
//     and Nodes (the marker records the layout; a process configured
//     otherwise is refused with lease.ErrFleetMismatch), and nothing
//     else writes to the tables. Every member has the same
//     Config.Horizon, at least its TTL.
package pglease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Defaults of Config.
const (
	DefaultNodes        = 16               // node IDs per block and process: 2 million IDs per second
	DefaultTTL          = 10 * time.Second // how long a claim outlives its last renewal
	DefaultMaxClockSkew = time.Second      // bound on the difference between a holder's and the server's clock
	// MinTTL is the shortest TTL.
	MinTTL = 2 * time.Second
	// DefaultHorizon is the fleet's bound on promises (Config.Horizon):
	// the promise of DefaultTTL, one TTL.
	DefaultHorizon = DefaultTTL
)

// Config configures a Source.
type Config struct {
	// Pool is the connection pool to use; the Source does not close it.
	// Exactly one of Pool and DSN must be set.
	Pool *pgxpool.Pool
	// DSN is a connection string (a postgres:// URL or key=value pairs,
	// as libpq takes them) for a pool the Source opens, and closes on
	// Close. Errors never contain it, nor its password.
	DSN string
	// Secret is the fleet's 16-byte secret, the same as the generators'.
	// Block records and the fleet marker are signed under a key derived
	// from it, so that an edited row is never trusted. Required by New;
	// NewLeased sets it from its argument.
	Secret []byte
	// Schema and Table name the blocks table (Table: DefaultTable if
	// empty; Schema: the first schema of the search path if empty). Its
	// schema-version table is Table + "_schema". Create both with
	// MigrateTable (or Migrate for the defaults).
	Schema, Table string
	// Nodes is the number of node IDs in a block, which a process claims
	// (0: DefaultNodes). Each issues up to 131,072 IDs per second. Use the
	// same value across the fleet: blocks are aligned to it, and node IDs
	// past the last whole block of the range are not used.
	Nodes int64
	// FirstNode and LastNode bound the node IDs the fleet uses. Zero for
	// both means all of them, 0 to 131071.
	FirstNode, LastNode int64
	// TTL is how long a claim outlives its last renewal, by the server's
	// clock, at least MinTTL (0: DefaultTTL). A crashed process's node IDs
	// are free again one TTL after its last renewal.
	TTL time.Duration
	// MaxClockSkew bounds the difference between this machine's clock and
	// the database server's (0: DefaultMaxClockSkew). The lease ends
	// 2 x MaxClockSkew earlier than the claim could lapse (see the package
	// documentation); 2 x MaxClockSkew plus the margin (TTL/10, at least
	// 200ms) must not exceed half the TTL. A claim or renewal that sees a
	// larger difference fails with ErrClockSkew.
	MaxClockSkew time.Duration
	// Horizon is the fleet's bound on promises: the longest TTL any
	// member of the fleet may use, the same on every member (0:
	// DefaultHorizon, the default TTL). A process whose TTL is longer is
	// refused, naming both. Unknown history (a wiped table, one upgraded
	// from version 1, a failover) is waited out for Horizon plus 2 x
	// MaxClockSkew (two holders' clocks may differ by that much), whatever
	// the marker said: the bound survives a wipe. To lengthen TTLs, raise
	// Horizon on every member first (rule 13 of docs/leases.md).
	Horizon time.Duration
	// Holder describes this process in its claims (default: host name and
	// process ID).
	Holder string

	// Shards, OnError and Logger are passed to randflake.LeasedConfig by
	// NewLeased: Logger receives the lease's events, and the source's own
	// (takeovers of expired claims, waits for a previous holder's seconds,
	// history found unknown). Nil logs nothing.
	Shards  int
	OnError func(error)
	Logger  *slog.Logger
}

// Source is a randflake.LeaseSource on a PostgreSQL table: the lease
// engine (lease.BlockSource) on the table's store. It holds at most
// one lease at a time; use one Source per generator. It is safe for
// concurrent use.
type Source struct {
	pool  *pgxpool.Pool
	owned bool // pool opened from Config.DSN
	red   redactor
	st    *store
	bs    *lease.BlockSource
}

// New returns a lease source on PostgreSQL. Config.Secret is required: the
// fleet's 16 bytes. With Config.DSN it opens a pool (connecting on first
// use), closed again if New fails.
func New(cfg Config) (*Source, error) {
	if (cfg.Pool == nil) == (cfg.DSN == "") {
		return nil, errors.New("pglease: set exactly one of Config.Pool and Config.DSN")
	}
	st, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	s := &Source{st: st}
	if cfg.Pool != nil {
		s.pool = cfg.Pool
		s.red = redactor{password: cfg.Pool.Config().ConnConfig.Password}
	} else {
		pc, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			// The parser's message can quote the connection string; a
			// malformed one may hide a password from its redaction.
			return nil, errors.New("pglease: Config.DSN is not a valid PostgreSQL connection string (not shown: it may hold a password)")
		}
		s.red = redactor{password: pc.ConnConfig.Password}
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			return nil, s.red.scrub(fmt.Errorf("pglease: opening the connection pool: %w", err))
		}
		s.pool, s.owned = pool, true
	}
	st.pool, st.red = s.pool, s.red
	s.bs, err = lease.NewStoreSource(st, s.engine(cfg))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// engine is the lease engine's configuration of the Source on cfg.
func (s *Source) engine(cfg Config) lease.StoreConfig {
	return lease.StoreConfig{Name: "pglease", Secret: cfg.Secret, Layout: s.st.layout, Horizon: s.st.horizon, Logger: cfg.Logger,
		Shards: cfg.Shards, OnError: cfg.OnError, Close: s.Close}
}

// NewLeased returns a generator on node IDs claimed from PostgreSQL, with
// secret as both the generator's secret and Config.Secret (a different
// Config.Secret is an error). A pool it opened from Config.DSN stays open
// for the generator's life, and the process's: pass Config.Pool to
// control it.
func NewLeased(ctx context.Context, secret []byte, cfg Config) (*randflake.Leased, error) {
	if err := lease.CheckLeasedSecret("pglease", cfg.Secret, secret); err != nil {
		return nil, err
	}
	cfg.Secret = secret
	src, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return lease.NewStoreLeased(ctx, src, src.engine(cfg))
}

// Close closes the pool the Source opened from Config.DSN; a Config.Pool is
// left open. It does not release a held lease (Release does).
func (s *Source) Close() {
	if s.owned {
		s.pool.Close()
	}
}

// Acquire claims Config.Nodes node IDs (see lease.BlockSource.Acquire):
// a free block whose recorded seconds have passed, or else the free block
// whose seconds pass first, waiting for them within ctx while keeping the
// claim alive. Every block claimed is ErrNoFreeNodes; tables missing or of
// another version are ErrNoSchema or ErrSchemaVersion.
func (s *Source) Acquire(ctx context.Context) (randflake.Lease, error) {
	l, err := s.bs.Acquire(ctx)
	return l, s.red.scrub(err)
}

// Renew extends the claim by one TTL from now, on the server's clock, and
// moves the lease end to 2 x MaxClockSkew plus the margin before that, on
// this machine's clock, recording a new promise first when needed. A claim
// taken over by another process (after it expired), or a database that
// went back in time, is randflake.ErrLeaseLost; other errors (the database
// unreachable, ErrClockSkew) are transient.
func (s *Source) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	l, err := s.bs.Renew(ctx, l)
	return l, s.red.scrub(err)
}

// Release records the newest second used (at least l.Start-1, at most the
// recorded promise) and clears the claim in one step: the node IDs are
// free at once. If the database cannot be reached, the claim lapses one
// TTL after the last renewal and the last promise stands.
func (s *Source) Release(ctx context.Context, l randflake.Lease, lastUsed int64) error {
	return s.red.scrub(s.bs.Release(ctx, l, lastUsed))
}

// ResetHistory marks the history of every block of the table unknown up to
// now + the longest promise, so that the next claims wait it out; holders
// keep their claims. Run it after a restore that cannot be detected: a
// copy of the database (or of the two tables) restored under the same
// system identifier and timeline while no holder ran.
func (s *Source) ResetHistory(ctx context.Context) error {
	return s.red.scrub(s.bs.ResetHistory(ctx))
}

// Status reads the tables in one step and describes the fleet marker and
// every block (holder, record, promise) and the server's clock, writing
// nothing: randflake lease status.
func (s *Source) Status(ctx context.Context) (lease.FleetStatus, error) {
	st, err := s.bs.Status(ctx)
	return st, s.red.scrub(err)
}

// defaultHolder describes this process.
func defaultHolder() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", h, os.Getpid())
}
