// Package pglease hands out Randflake node IDs to the processes of a fleet
// through a PostgreSQL table, for deployments whose one shared, durable
// service is a database: no two processes use a node ID at the same time,
// and none reuses a second another may have used on it.
//
// The table (see schema.sql, created by Migrate) has one row per block of
// Config.Nodes node IDs that was ever claimed:
//
//	first_node, last_node   the block's node IDs
//	used_until              the newest second any holder may have put in an
//	                        ID on the block; it outlives its holders
//	holder, token           the current claim (NULL while free): the
//	expires_at              holder's description, a random token only the
//	                        holder knows, and when the claim lapses by the
//	                        database server's clock
//
// # Claims, promises and releases
//
// A claim is one statement, so one transaction: it takes a block that is
// free or whose claim has expired (expires_at before the server's
// clock_timestamp()), locking the row, reads its used_until, sets the new
// token and expires_at = clock_timestamp() + TTL, and raises used_until to
// the claimant's lease end. The lease starts strictly after the used_until
// it read. Renewal is one statement too, conditioned on the token: it moves
// expires_at to clock_timestamp() + TTL and raises used_until to the new
// lease end before the generator may use it. So whoever claims the block
// next starts after every second the holder may have used, even if the
// holder crashed and never wrote again, and even if the next holder's clock
// is behind: uniqueness rests on the recorded seconds, not on clocks.
//
// A clean release records the newest second actually used and clears the
// claim in one statement: the block is free at once, and the next holder
// starts right after that second. After a crash the claim lapses one TTL
// after the last renewal, by the server's clock, and the next holder
// starts after the crashed holder's last lease end, which has passed by
// then. Rows are never deleted: a table holds at most one row per block.
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
// could take its node IDs over. (A constant offset between the clocks
// cancels out; 2K covers any change of the difference within the bound
// between a renewal and a takeover, such as steps of either clock.) Every
// claim and renewal also reads the server's clock and fails with
// ErrClockSkew when it differs from this machine's by more than K plus the
// round trip, so a violated bound is reported, not assumed away.
//
// # Assumptions
//
//   - The database keeps every committed transaction: durable commits
//     (fsync, synchronous_commit on) and, with replicas, failover only to a
//     synchronous standby. A database restored from a backup, or a failover
//     to an asynchronous replica that had not received the last commits,
//     holds older used_until seconds than the holders used; see
//     docs/leases.md for the statement to run before restarting the fleet.
//   - The clocks of the holders and of the server differ by at most
//     MaxClockSkew (checked at every claim and renewal), and the server's
//     clock_timestamp() does not step back.
//   - Every process of the fleet uses the same table, secret, node range and
//     Nodes (blocks are aligned to it; blocks of another size that overlap
//     are never claimed, which an exclusion constraint guarantees), and
//     nothing else writes to the table.
package pglease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
)

// Defaults of Config.
const (
	DefaultNodes        = 16               // node IDs per block and process: 2 million IDs per second
	DefaultTTL          = 10 * time.Second // how long a claim outlives its last renewal
	DefaultMaxClockSkew = time.Second      // bound on the difference between a holder's and the server's clock
	// MinTTL is the shortest TTL.
	MinTTL = 2 * time.Second
)

// Errors of PostgreSQL leases.
var (
	// ErrNoFreeNodes: every block of node IDs is claimed.
	ErrNoFreeNodes = errors.New("pglease: every node-ID block is claimed")
	// ErrClockBehind: the free blocks were used up to a second too far
	// ahead of this machine's clock to wait for (more than 2 x TTL + 1s).
	ErrClockBehind = errors.New("pglease: the node IDs' recorded second is too far ahead of this machine's clock")
	// ErrCorrupt: a row holds a second outside the lifetime of Randflake
	// IDs, which this package never writes.
	ErrCorrupt = errors.New("pglease: corrupt used second")
	// ErrClockSkew: the database server's clock and this machine's differ
	// by more than Config.MaxClockSkew.
	ErrClockSkew = errors.New("pglease: this machine's clock and the database server's differ by more than MaxClockSkew")
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
	// Schema and Table name the blocks table (Table: DefaultTable if
	// empty; Schema: the first schema of the search path if empty). Its
	// schema-version table is Table + "_schema". Create both with
	// MigrateTable (or Migrate for the defaults).
	Schema, Table string
	// Nodes is the number of node IDs in a block, which a process claims
	// (0: DefaultNodes). Each issues up to 131,072 IDs per second. Use the
	// same value across the fleet: blocks are aligned to it.
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
	// Holder describes this process in its claims (default: host name and
	// process ID).
	Holder string

	// Shards, OnError and Logger are passed to randflake.LeasedConfig by
	// NewLeased: Logger receives the lease's events, and the source's own
	// (takeovers of expired claims, waits for a previous holder's seconds,
	// releases that found the claim gone). Nil logs nothing.
	Shards  int
	OnError func(error)
	Logger  *slog.Logger
}

// Source is a randflake.LeaseSource on a PostgreSQL table. It holds at most
// one lease at a time; use one Source per generator. It is safe for
// concurrent use.
type Source struct {
	pool     *pgxpool.Pool
	owned    bool   // pool opened from Config.DSN
	password string // removed from every error
	n        names
	nodes    int64
	first    int64
	last     int64
	ttl      time.Duration
	skew     time.Duration
	holder   string
	log      *slog.Logger

	mu    sync.Mutex
	claim *claim
}

// claim is a held lease.
type claim struct {
	lease    randflake.Lease
	token    string
	promised int64 // the used_until recorded for it
}

// New returns a lease source on PostgreSQL. With Config.DSN it opens a pool
// (connecting on first use).
func New(cfg Config) (*Source, error) {
	if (cfg.Pool == nil) == (cfg.DSN == "") {
		return nil, errors.New("pglease: set exactly one of Config.Pool and Config.DSN")
	}
	n, err := newNames(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, err
	}
	s := &Source{n: n, nodes: cfg.Nodes, first: cfg.FirstNode, last: cfg.LastNode, ttl: cfg.TTL, skew: cfg.MaxClockSkew, holder: cfg.Holder, log: cfg.Logger}
	if s.nodes == 0 {
		s.nodes = DefaultNodes
	}
	if s.first == 0 && s.last == 0 {
		s.last = randflake.MaxNode
	}
	if err := randflake.CheckNodeRange(s.first, s.last); err != nil {
		return nil, fmt.Errorf("pglease: %w", err)
	}
	if s.nodes < 1 || s.nodes > s.last-s.first+1 {
		return nil, fmt.Errorf("pglease: %d node IDs per block: want 1 to %d, the size of the range %d-%d", s.nodes, s.last-s.first+1, s.first, s.last)
	}
	if s.ttl == 0 {
		s.ttl = DefaultTTL
	}
	if s.ttl < MinTTL {
		return nil, fmt.Errorf("pglease: TTL %v: want at least %v", cfg.TTL, MinTTL)
	}
	if s.skew == 0 {
		s.skew = DefaultMaxClockSkew
	}
	if s.skew < 0 || 2*s.skew+margin(s.ttl) > s.ttl/2 {
		return nil, fmt.Errorf("pglease: MaxClockSkew %v with TTL %v: 2 x MaxClockSkew + %v must not exceed half the TTL", s.skew, s.ttl, margin(s.ttl))
	}
	if s.holder == "" {
		h, _ := os.Hostname()
		s.holder = fmt.Sprintf("%s pid %d", h, os.Getpid())
	}
	if cfg.Pool != nil {
		s.pool = cfg.Pool
		s.password = cfg.Pool.Config().ConnConfig.Password
		return s, nil
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		// The parser's message can quote the connection string; a
		// malformed one may hide a password from its redaction.
		return nil, errors.New("pglease: Config.DSN is not a valid PostgreSQL connection string (not shown: it may hold a password)")
	}
	s.password = pc.ConnConfig.Password
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, s.scrub(fmt.Errorf("pglease: opening the connection pool: %w", err))
	}
	s.pool, s.owned = pool, true
	return s, nil
}

// NewLeased returns a generator on node IDs claimed from PostgreSQL. A pool
// it opened from Config.DSN stays open for the generator's life, and the
// process's: pass Config.Pool to control it.
func NewLeased(ctx context.Context, secret []byte, cfg Config) (*randflake.Leased, error) {
	src, err := New(cfg)
	if err != nil {
		return nil, err
	}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:  secret,
		Source:  src,
		Shards:  cfg.Shards,
		OnError: cfg.OnError,
		Logger:  cfg.Logger,
	})
	if err != nil {
		src.Close()
		return nil, err
	}
	return g, nil
}

// Close closes the pool the Source opened from Config.DSN; a Config.Pool is
// left open. It does not release a held lease (Release does).
func (s *Source) Close() {
	if s.owned {
		s.pool.Close()
	}
}

// margin is how long before the claim could lapse, on this machine's clock
// and beyond the clock-skew allowance, the generator stops.
func margin(ttl time.Duration) time.Duration {
	return max(ttl/10, 200*time.Millisecond)
}

// endFor returns the last second a holder may use after a claim or renewal
// sent at t0: the last whole second that ends margin before t0 + TTL -
// 2 x MaxClockSkew (see the package documentation), at most MaxTimestamp.
func endFor(t0 time.Time, ttl, skew time.Duration) int64 {
	return min(t0.Add(ttl-2*skew-margin(ttl)).Unix()-1, randflake.MaxTimestamp)
}

func (s *Source) endFor(t0 time.Time) int64 { return endFor(t0, s.ttl, s.skew) }

// opTimeout bounds each statement, so that a connection that hangs (a
// partition that drops packets) fails within a third of the TTL.
func (s *Source) opTimeout() time.Duration { return s.ttl / 3 }

// checkSkew checks the server's clock reading srv, taken between t0 and t1
// on this machine's clock, against MaxClockSkew.
func (s *Source) checkSkew(t0, t1, srv time.Time) error {
	// The server's timestamps have microseconds; allow for the rounding.
	k := s.skew + time.Millisecond
	if srv.Before(t0.Add(-k)) || srv.After(t1.Add(k)) {
		return fmt.Errorf("%w: the server's clock read %s while this machine's read %s to %s (MaxClockSkew %v)",
			ErrClockSkew, srv.UTC().Format(time.RFC3339Nano), t0.UTC().Format(time.RFC3339Nano), t1.UTC().Format(time.RFC3339Nano), s.skew)
	}
	return nil
}

// checkUsed checks a used_until second read from block first..last: it
// must lie in the lifetime of Randflake IDs. Anything else was not written
// by this package; it is refused rather than guessed at.
func (s *Source) checkUsed(first, last, v int64) error {
	if v < randflake.Epoch || v > randflake.MaxTimestamp {
		return fmt.Errorf("%w: %s row of node IDs %d-%d has used_until %d, not a second from %d to %d; fix it only if no process can have used these node IDs since",
			ErrCorrupt, s.n.blocks, first, last, v, int64(randflake.Epoch), int64(randflake.MaxTimestamp))
	}
	return nil
}

// redacted is an error whose message had the password removed. It answers
// errors.Is and errors.As like the original but does not unwrap to it.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string        { return e.msg }
func (e *redacted) Is(target error) bool { return errors.Is(e.err, target) }
func (e *redacted) As(target any) bool   { return errors.As(e.err, target) }

// scrub removes the connection's password from an error's message.
func (s *Source) scrub(err error) error {
	if err == nil || s.password == "" || !strings.Contains(err.Error(), s.password) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), s.password, "xxxxx"), err: err}
}

// Acquire claims Config.Nodes node IDs: the first free block whose
// recorded second has passed, or else the free block whose recorded second
// is the oldest. The lease starts after the recorded second; if that is
// beyond what the claim covers yet, Acquire keeps the claim alive and
// waits, within ctx. Every block claimed is ErrNoFreeNodes.
func (s *Source) Acquire(ctx context.Context) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim != nil {
		return randflake.Lease{}, errors.New("pglease: the source already holds a lease")
	}
	l, err := s.acquire(ctx)
	return l, s.scrub(err)
}

func (s *Source) acquire(ctx context.Context) (randflake.Lease, error) {
	qctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	v, err := schemaVersion(qctx, s.pool, s.n)
	cancel()
	if err != nil {
		return randflake.Lease{}, err
	}
	if v != SchemaVersion {
		return randflake.Lease{}, versionError(s.n, v)
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	mismatched := 0
	for attempt := 0; attempt < 5; attempt++ {
		var slots []slot
		slots, mismatched, err = s.freeSlots(ctx)
		if err != nil {
			return randflake.Lease{}, err
		}
		for _, sl := range slots {
			l, ok, err := s.claimSlot(ctx, sl, token)
			if err != nil || ok {
				return l, err
			}
		}
		if len(slots) == 0 {
			break
		}
	}
	err = fmt.Errorf("%w (%d node IDs each, in %d-%d, table %s)", ErrNoFreeNodes, s.nodes, s.first, s.last, s.n.blocks)
	if mismatched > 0 {
		err = fmt.Errorf("%w; %d blocks of another size overlap the range (does Config.Nodes differ between processes?)", err, mismatched)
	}
	return randflake.Lease{}, err
}

// slot is a block that may be claimed.
type slot struct {
	first, last int64
	until       int64 // its used_until (Epoch for a new block)
	exists      bool  // it has a row
}

// freeSlots returns the blocks that are free or whose claim has expired,
// those whose recorded second has passed first, in order, then the others
// by their recorded second; and the number of rows of another block size
// in the range.
func (s *Source) freeSlots(ctx context.Context) ([]slot, int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT first_node, last_node, used_until,
		token IS NOT NULL AND expires_at >= clock_timestamp()
		FROM `+s.n.blocks+` WHERE first_node <= $2 AND last_node >= $1`, s.first, s.last)
	if err != nil {
		return nil, 0, fmt.Errorf("pglease: reading %s: %w", s.n.blocks, err)
	}
	type row struct {
		first, last, used int64
		held              bool
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.first, &r.last, &r.used, &r.held); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("pglease: reading %s: %w", s.n.blocks, err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("pglease: reading %s: %w", s.n.blocks, err)
	}
	count := (s.last - s.first + 1) / s.nodes
	blocked := make(map[int64]bool) // slot index: overlapped by another block size
	existing := make(map[int64]row) // slot index: its row
	mismatched := 0
	for _, r := range all {
		if err := s.checkUsed(r.first, r.last, r.used); err != nil {
			return nil, 0, err
		}
		lo, hi := max(r.first, s.first), min(r.last, s.last)
		i, j := (lo-s.first)/s.nodes, (hi-s.first)/s.nodes
		if i == j && r.first == s.first+i*s.nodes && r.last == r.first+s.nodes-1 {
			existing[i] = r
			continue
		}
		mismatched++
		for k := i; k <= j && k < count; k++ {
			blocked[k] = true
		}
	}
	var slots []slot
	for i := int64(0); i < count; i++ {
		if blocked[i] {
			continue
		}
		first := s.first + i*s.nodes
		sl := slot{first: first, last: first + s.nodes - 1, until: randflake.Epoch}
		if r, ok := existing[i]; ok {
			if r.held || r.used >= randflake.MaxTimestamp {
				continue
			}
			sl.until, sl.exists = r.used, true
		}
		slots = append(slots, sl)
	}
	now := time.Now().Unix()
	sort.SliceStable(slots, func(i, j int) bool {
		pi, pj := slots[i].until < now, slots[j].until < now
		if pi != pj {
			return pi
		}
		return !pi && slots[i].until < slots[j].until
	})
	return slots, mismatched, nil
}

// The claim of a block with a row: only if it is free or its claim has
// expired, by the server's clock, and it is not used up. The row lock
// makes concurrent claimants of one block wait for each other, and the
// loser finds the row claimed. Parameters: first node, last node, token,
// holder, TTL in milliseconds, lease end.
const claimSQL = `WITH prev AS (
	SELECT first_node, used_until, holder, token IS NOT NULL AS expired FROM %[1]s
	WHERE first_node = $1 AND last_node = $2
	AND (token IS NULL OR expires_at < clock_timestamp())
	AND used_until >= 1730000000 AND used_until < 2803741823
	FOR UPDATE
)
UPDATE %[1]s b SET holder = $4, token = $3, claimed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
	used_until = GREATEST(b.used_until, $6::bigint)
FROM prev WHERE b.first_node = prev.first_node
RETURNING prev.used_until, prev.holder, prev.expired, clock_timestamp()`

// The claim of a block without a row: its first use. The constraints make
// a concurrent insert of the same or an overlapping block lose.
const insertSQL = `INSERT INTO %[1]s (first_node, last_node, used_until, holder, token, claimed_at, expires_at)
VALUES ($1, $2, GREATEST($6::bigint, 1730000000), $4, $3, clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 millisecond')
ON CONFLICT DO NOTHING
RETURNING 1730000000::bigint, NULL::text, false, clock_timestamp()`

// claimSlot tries to claim sl. It returns ok false, and no error, if
// another process claimed it first.
func (s *Source) claimSlot(ctx context.Context, sl slot, token string) (randflake.Lease, bool, error) {
	t0 := time.Now()
	end := s.endFor(t0)
	q := insertSQL
	if sl.exists {
		q = claimSQL
	}
	qctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	var used int64
	var prevHolder *string
	var expired bool
	var srv time.Time
	err := s.pool.QueryRow(qctx, fmt.Sprintf(q, s.n.blocks), sl.first, sl.last, token, s.holder, s.ttl.Milliseconds(), end).
		Scan(&used, &prevHolder, &expired, &srv)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		return randflake.Lease{}, false, nil
	}
	if err != nil {
		// The claim may have been committed with the answer lost: it
		// lapses after one TTL, having promised only up to end.
		return randflake.Lease{}, false, fmt.Errorf("pglease: claiming node IDs %d-%d: %w", sl.first, sl.last, err)
	}
	t1 := time.Now()
	c := &claim{token: token, promised: max(used, end)}
	c.lease = randflake.Lease{FirstNode: sl.first, LastNode: sl.last, Start: used + 1, End: end}
	if err := s.checkUsed(sl.first, sl.last, used); err != nil {
		s.unclaim(c)
		return randflake.Lease{}, false, err
	}
	if err := s.checkSkew(t0, t1, srv); err != nil {
		s.unclaim(c)
		return randflake.Lease{}, false, err
	}
	if expired && s.log != nil {
		prev := ""
		if prevHolder != nil {
			prev = *prevHolder
		}
		s.log.Info("pglease: took over node IDs whose holder's claim had expired",
			"nodes", fmt.Sprintf("%d-%d", sl.first, sl.last), "previous_holder", prev, "start", formatSecond(c.lease.Start))
	}
	if c.lease.End < c.lease.Start {
		if s.log != nil {
			s.log.Info("pglease: waiting for the previous holder's seconds to pass",
				"nodes", fmt.Sprintf("%d-%d", sl.first, sl.last), "start", formatSecond(c.lease.Start))
		}
		if c.lease.End, err = s.waitFor(ctx, c); err != nil {
			s.unclaim(c)
			return randflake.Lease{}, false, err
		}
	}
	if err := c.lease.Validate(); err != nil {
		s.unclaim(c)
		return randflake.Lease{}, false, fmt.Errorf("pglease: claimed %v: %w", c.lease, err)
	}
	s.claim = c
	return c.lease, true, nil
}

func formatSecond(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

// unclaim clears c's claim after a claim that cannot be used, best effort
// (unclaimed, it lapses after one TTL). used_until stays as it is.
func (s *Source) unclaim(c *claim) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout())
	defer cancel()
	s.pool.Exec(ctx, `UPDATE `+s.n.blocks+` SET holder = NULL, token = NULL, claimed_at = NULL, expires_at = NULL
		WHERE first_node = $1 AND token = $2`, c.lease.FirstNode, c.token)
}

// waitFor renews c's claim until its lease end reaches the lease's start,
// and returns the lease end then.
func (s *Source) waitFor(ctx context.Context, c *claim) (int64, error) {
	start := c.lease.Start
	validity := s.ttl - 2*s.skew - margin(s.ttl)
	// A holder records at most about TTL + MaxClockSkew ahead of the
	// server's clock, and the fence of docs/leases.md as much plus a
	// second; anything further ahead is a clock far behind.
	limit := int64(2*s.ttl/time.Second) + 1
	for {
		if start-time.Now().Unix() > limit {
			return 0, fmt.Errorf("%w: node IDs %d-%d used up to %s", ErrClockBehind, c.lease.FirstNode, c.lease.LastNode, formatSecond(start-1))
		}
		// Sleep until a renewal would cover start, or a third of the TTL,
		// whichever comes first.
		d := time.Until(time.Unix(start+1, 0).Add(-validity))
		d = min(max(d, 10*time.Millisecond), s.ttl/3)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
		end, err := s.renew(ctx, c)
		if err != nil {
			if errors.Is(err, randflake.ErrLeaseLost) || ctx.Err() != nil {
				return 0, err
			}
			continue
		}
		if end >= start {
			return end, nil
		}
	}
}

// renew extends c's claim by one TTL from now and records the new lease
// end in used_until, and returns that end. A claim no longer c's is
// ErrLeaseLost.
func (s *Source) renew(ctx context.Context, c *claim) (int64, error) {
	t0 := time.Now()
	end := s.endFor(t0)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	var used int64
	var srv time.Time
	err := s.pool.QueryRow(ctx, `UPDATE `+s.n.blocks+`
		SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond', used_until = GREATEST(used_until, $4::bigint)
		WHERE first_node = $1 AND token = $2
		RETURNING used_until, clock_timestamp()`, c.lease.FirstNode, c.token, s.ttl.Milliseconds(), end).Scan(&used, &srv)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pglease: the claim on node IDs %d-%d is gone (it expired and was taken over): %w",
			c.lease.FirstNode, c.lease.LastNode, randflake.ErrLeaseLost)
	}
	if err != nil {
		return 0, fmt.Errorf("pglease: renewing the claim on node IDs %d-%d: %w", c.lease.FirstNode, c.lease.LastNode, err)
	}
	t1 := time.Now()
	if err := s.checkUsed(c.lease.FirstNode, c.lease.LastNode, used); err != nil {
		return 0, err
	}
	c.promised = max(c.promised, used)
	if err := s.checkSkew(t0, t1, srv); err != nil {
		return 0, err
	}
	return end, nil
}

// held returns the claim of l, or an error.
func (s *Source) held(l randflake.Lease) (*claim, error) {
	c := s.claim
	if c == nil || !c.lease.SameClaim(l) {
		return nil, fmt.Errorf("pglease: lease on %v is not held by this source", l)
	}
	return c, nil
}

// Renew extends the claim by one TTL from now, on the server's clock, and
// moves the lease end to 2 x MaxClockSkew plus the margin before that, on
// this machine's clock, recording it in used_until first. A claim taken
// over by another process (after it expired) is ErrLeaseLost; other errors
// (the database unreachable, ErrClockSkew) are transient. A claim that
// expired but was not taken over is simply renewed.
func (s *Source) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return randflake.Lease{}, err
	}
	end, err := s.renew(ctx, c)
	if err != nil {
		if errors.Is(err, randflake.ErrLeaseLost) {
			s.claim = nil
		}
		return randflake.Lease{}, s.scrub(err)
	}
	if end > c.lease.End {
		c.lease.End = end
	}
	return c.lease, nil
}

// Release records the newest second used (at least l.Start-1, at most the
// recorded promise) and clears the claim in one statement: the node IDs
// are free at once. If the database cannot be reached, the claim lapses one
// TTL after the last renewal and the last promise stands. A used_until
// raised by someone else while the claim was held (an operator's fence) is
// kept.
func (s *Source) Release(ctx context.Context, l randflake.Lease, lastUsed int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return err
	}
	s.claim = nil
	v := min(max(lastUsed, c.lease.Start-1, randflake.Epoch), c.promised)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.n.blocks+`
		SET holder = NULL, token = NULL, claimed_at = NULL, expires_at = NULL,
		used_until = CASE WHEN used_until > $4::bigint THEN used_until ELSE $3::bigint END
		WHERE first_node = $1 AND token = $2`, c.lease.FirstNode, c.token, v, c.promised)
	if err != nil {
		return s.scrub(fmt.Errorf("pglease: releasing node IDs %d-%d: %w", c.lease.FirstNode, c.lease.LastNode, err))
	}
	if tag.RowsAffected() == 0 && s.log != nil {
		s.log.Warn("pglease: releasing node IDs whose claim was already gone (it expired and was taken over)",
			"nodes", fmt.Sprintf("%d-%d", c.lease.FirstNode, c.lease.LastNode))
	}
	return nil
}
