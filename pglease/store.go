package pglease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// store is the lease.BlockStore on a blocks table and its
// schema-version table: the storage primitives of the lease engine, and
// nothing else (see the package documentation).
type store struct {
	pool    *pgxpool.Pool
	red     redactor
	n       names
	layout  lease.BlockLayout
	ttl     time.Duration
	skew    time.Duration
	horizon time.Duration // the fleet\'s bound on promises (Config.Horizon)
	holder  string
	log     *slog.Logger
	now     func() time.Time // this machine's clock, for the skew checks

	mu         sync.Mutex
	sysid      bool // the role may read the system identifier
	sysidKnown bool
}

// claimHandle is the store's handle on a claim (lease.StoreClaim).
type claimHandle struct {
	token  string  // random, known only to the holder
	blocks []int64 // first node IDs of the claimed blocks
}

// newStore checks the configuration (all but the pool and the secret).
func newStore(cfg Config) (*store, error) {
	n, err := newNames(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, err
	}
	st := &store{n: n, ttl: cfg.TTL, skew: cfg.MaxClockSkew, holder: cfg.Holder, log: cfg.Logger, now: time.Now}
	nodes, first, last := cfg.Nodes, cfg.FirstNode, cfg.LastNode
	if nodes == 0 {
		nodes = DefaultNodes
	}
	if first == 0 && last == 0 {
		last = randflake.MaxNode
	}
	if err := randflake.CheckNodeRange(first, last); err != nil {
		return nil, fmt.Errorf("pglease: %w", err)
	}
	if nodes < 1 || nodes > last-first+1 {
		return nil, fmt.Errorf("pglease: %d node IDs per block: want 1 to %d, the size of the range %d-%d", nodes, last-first+1, first, last)
	}
	// Node IDs past the last whole block are not used.
	st.layout = lease.BlockLayout{FirstNode: first, LastNode: first + (last-first+1)/nodes*nodes - 1, Size: nodes}
	if st.ttl == 0 {
		st.ttl = DefaultTTL
	}
	if st.ttl < MinTTL {
		return nil, fmt.Errorf("pglease: TTL %v: want at least %v", cfg.TTL, MinTTL)
	}
	if st.skew == 0 {
		st.skew = DefaultMaxClockSkew
	}
	if st.skew < 0 || 2*st.skew+margin(st.ttl) > st.ttl/2 {
		return nil, fmt.Errorf("pglease: MaxClockSkew %v with TTL %v: 2 x MaxClockSkew + %v must not exceed half the TTL", st.skew, st.ttl, margin(st.ttl))
	}
	if cfg.Horizon < 0 {
		return nil, fmt.Errorf("pglease: negative Horizon %v", cfg.Horizon)
	}
	st.horizon = cfg.Horizon
	if st.horizon == 0 {
		st.horizon = DefaultHorizon
	}
	if st.holder == "" {
		st.holder = defaultHolder()
	}
	return st, nil
}

// Info describes the claims: they lapse one TTL after the last renewal by
// the server's clock, and a holder records its promises one TTL ahead.
// Every holder's clock is within MaxClockSkew of the server's, so two
// holders' clocks are within twice that of each other: the bound the
// engine needs when it waits out what an unknown holder may have promised.
func (st *store) Info() lease.StoreInfo {
	return lease.StoreInfo{
		Name:         "postgres " + st.n.display,
		EndFor:       func(t0 time.Time) int64 { return endFor(t0, st.ttl, st.skew) },
		Promise:      st.ttl,
		Durable:      true,
		MaxClockSkew: 2 * st.skew,
	}
}

// opTimeout bounds each statement and each step, so that a connection that
// hangs (a partition that drops packets) fails within a third of the TTL.
func (st *store) opTimeout() time.Duration {
	d := st.ttl / 3
	if stretchOp != nil {
		d = stretchOp(d)
	}
	return d
}

// stretchOp is nil in the product. The package's tests set it, before
// any store is made, to stretch opTimeout by how much slower than on idle
// cores the machine runs them, so that a step is not cut short because a
// loaded test machine, not the database, was slow.
var stretchOp func(time.Duration) time.Duration

// handle returns the store's handle of held, nil if held is nil.
func (st *store) handle(held lease.StoreClaim) (*claimHandle, error) {
	if held == nil {
		return nil, nil
	}
	h, ok := held.(*claimHandle)
	if !ok || h == nil || len(h.blocks) == 0 {
		return nil, fmt.Errorf("pglease: %s: not a claim of this store: %v", st.n.display, held)
	}
	return h, nil
}

// Update runs one step of the engine in one transaction (see
// lease.BlockStore): it locks the schema-version row, which serialises
// the steps of every process on the table, reads the marker, the rows and
// the server's identity, calls fn, applies its changes and commits.
func (st *store) Update(ctx context.Context, held lease.StoreClaim, all bool, fn func(*lease.StoreView) (*lease.StoreChanges, error)) (lease.StoreClaim, error) {
	h, err := st.handle(held)
	if err != nil {
		return nil, err
	}
	if h == nil && !all {
		return nil, fmt.Errorf("pglease: %s: a step that reads no block", st.n.display)
	}
	sysid, err := st.sysidReadable(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, st.opTimeout())
	defer cancel()
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return nil, st.dbError("starting a step", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		tx.Rollback(rctx) // after Commit, does nothing
	}()
	s := &step{st: st, tx: tx, held: h, all: all}
	if err := s.read(ctx, sysid); err != nil {
		return nil, err
	}
	ch, err := fn(&s.view)
	if err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, ch)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, st.dbError("committing a step", err)
	}
	s.logTakeovers()
	return res, nil
}

// step is one transaction of Update.
type step struct {
	st      *store
	tx      pgx.Tx
	held    *claimHandle
	all     bool
	view    lease.StoreView
	readSet map[int64]bool // first node IDs of the blocks read
	// expired claims on blocks read (first node -> previous holder), to
	// log when they are taken over
	expired map[int64]string
	taken   []int64
	// this machine's clock before and after the server's was read, and
	// the server's, when the schema-version row was locked
	clock [3]time.Time
}

// read locks the schema-version row and reads the marker, the identity and
// the rows into s.view.
func (s *step) read(ctx context.Context, sysid bool) error {
	st := s.st
	ms := st.opTimeout().Milliseconds()
	if _, err := s.tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d; SET LOCAL idle_in_transaction_session_timeout = %d", ms, ms, ms)); err != nil {
		return st.dbError("starting a step", err)
	}
	var (
		version        int
		marker, sys    *string
		timeline, wpos string
		srv            time.Time
	)
	t0 := st.now()
	err := s.tx.QueryRow(ctx, `SELECT v.version, v.marker, v.fresh, clock_timestamp(), `+identityColumns(sysid)+`
		FROM `+st.n.version+` v, `+walSubquery+` FOR UPDATE OF v`).Scan(&version, &marker, &s.view.Fresh, &srv, &sys, &timeline, &wpos)
	s.clock = [3]time.Time{t0, st.now(), srv}
	s.view.Clock = srv
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s has no version row", ErrSchemaVersion, st.n.version)
	case errors.As(err, &pe) && pe.Code == "42703": // undefined column
		return fmt.Errorf("%w: %s lacks the columns of version %d (a version 1 schema: run pglease.Migrate to upgrade it)", ErrSchemaVersion, st.n.version, SchemaVersion)
	case err != nil:
		return st.dbError("locking the fleet's steps", err)
	case version != SchemaVersion:
		return versionError(st.n, version)
	}
	if s.view.Identity, err = makeIdentity(sys, timeline, wpos); err != nil {
		return err
	}
	s.view.NextID = s.view.Identity.ID
	if marker != nil {
		s.view.Marker = []byte(*marker)
	}
	if s.all {
		return s.readAll(ctx)
	}
	return s.readHeld(ctx)
}

// row is a row of the blocks table as read.
type row struct {
	first, last   int64
	record        *string
	held          bool
	token, holder *string
}

func (s *step) query(ctx context.Context, sql string, args ...any) ([]row, error) {
	rows, err := s.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.st.dbError("reading the blocks", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.first, &x.last, &x.record, &x.held, &x.token, &x.holder)
		return x, err
	})
	if err != nil {
		return nil, s.st.dbError("reading the blocks", err)
	}
	return out, nil
}

func recordBytes(r *string) []byte {
	if r == nil {
		return nil
	}
	return []byte(*r)
}

// readAll reads every block of the layout: the rows that overlap the range,
// each of which must be one of its blocks, and the blocks without a row.
func (s *step) readAll(ctx context.Context) error {
	st, lay := s.st, s.st.layout
	rows, err := s.query(ctx, `SELECT first_node, last_node, record, token IS NOT NULL AND expires_at >= clock_timestamp(), token, holder
		FROM `+st.n.blocks+` WHERE first_node <= $2 AND last_node >= $1 ORDER BY first_node`, lay.FirstNode, lay.LastNode)
	if err != nil {
		return err
	}
	byFirst := make(map[int64]row, len(rows))
	for _, r := range rows {
		if r.first > r.last || r.first < 0 || r.last > randflake.MaxNode {
			return fmt.Errorf("%w: %s holds a row of node IDs %d-%d, not a range of node IDs (the table's checks were dropped?)", ErrCorrupt, st.n.display, r.first, r.last)
		}
		if r.first < lay.FirstNode || (r.first-lay.FirstNode)%lay.Size != 0 || r.last != r.first+lay.Size-1 || r.last > lay.LastNode {
			return fmt.Errorf("%w: %s holds node IDs %d-%d as one block; this process is configured for blocks of %d node IDs in %d-%d (does Config.Nodes or the node range differ between processes?)",
				lease.ErrFleetMismatch, st.n.display, r.first, r.last, lay.Size, lay.FirstNode, lay.LastNode)
		}
		byFirst[r.first] = r
	}
	if s.held != nil {
		if err := s.checkHeld(byFirst); err != nil {
			return err
		}
	}
	s.readSet = make(map[int64]bool, lay.Count())
	s.expired = map[int64]string{}
	s.view.Blocks = make([]lease.BlockState, 0, lay.Count())
	for i := int64(0); i < lay.Count(); i++ {
		first, last := lay.Block(i)
		b := lease.BlockState{First: first, Last: last}
		if r, ok := byFirst[first]; ok {
			b.Record, b.Held = recordBytes(r.record), r.held
			if s.held != nil && r.token != nil && *r.token == s.held.token {
				b.Held = true
			}
			if b.Held && r.holder != nil {
				b.Holder = *r.holder
			}
			if r.token != nil && !r.held && r.holder != nil {
				s.expired[first] = *r.holder
			}
		}
		s.readSet[first] = true
		s.view.Blocks = append(s.view.Blocks, b)
	}
	return nil
}

// readHeld reads the held claim's blocks, locking their rows, and checks
// that the claim is still this store's.
func (s *step) readHeld(ctx context.Context) error {
	st := s.st
	rows, err := s.query(ctx, `SELECT first_node, last_node, record, true, token, holder
		FROM `+st.n.blocks+` WHERE first_node = ANY($1) ORDER BY first_node FOR UPDATE`, s.held.blocks)
	if err != nil {
		return err
	}
	byFirst := make(map[int64]row, len(rows))
	for _, r := range rows {
		byFirst[r.first] = r
	}
	if err := s.checkHeld(byFirst); err != nil {
		return err
	}
	s.readSet = map[int64]bool{}
	for _, f := range s.held.blocks {
		r := byFirst[f]
		s.readSet[f] = true
		s.view.Blocks = append(s.view.Blocks, lease.BlockState{First: r.first, Last: r.last, Record: recordBytes(r.record), Held: true})
	}
	return nil
}

// checkHeld checks that every block of the held claim has a row with the
// claim's token.
func (s *step) checkHeld(byFirst map[int64]row) error {
	for _, f := range s.held.blocks {
		r, ok := byFirst[f]
		if !ok || r.token == nil || *r.token != s.held.token {
			return s.st.lost(f)
		}
	}
	return nil
}

// lost is the error of a claim that is no longer this store's.
func (st *store) lost(first int64) error {
	return fmt.Errorf("pglease: %s: the claim on node IDs %d-%d is gone (it expired and was taken over, or its row was deleted): %w",
		st.n.display, first, first+st.layout.Size-1, randflake.ErrLeaseLost)
}

// apply writes ch: claims, then records, then the marker, then the release.
func (s *step) apply(ctx context.Context, ch *lease.StoreChanges) (lease.StoreClaim, error) {
	st := s.st
	var res lease.StoreClaim
	if s.held != nil {
		res = s.held
	}
	if ch == nil {
		return res, nil
	}
	if err := s.check(ch); err != nil {
		return nil, err
	}
	// A step that claims or records anything checks this machine's clock
	// against the server's first: the records say what this clock read,
	// and claims lapse by the server's. (Releasing alone needs no clock.)
	if len(ch.Claim) > 0 || len(ch.Records) > 0 || ch.Marker != nil {
		if err := checkSkew(s.clock[0], s.clock[1], s.clock[2], st.skew); err != nil {
			return nil, fmt.Errorf("%w (table %s)", err, st.n.display)
		}
	}
	if len(ch.Claim) > 0 {
		h, err := s.claim(ctx, ch.Claim)
		if err != nil {
			return nil, err
		}
		res = h
	}
	for first, rec := range ch.Records {
		tag, err := s.tx.Exec(ctx, `INSERT INTO `+st.n.blocks+` AS b (first_node, last_node, record) VALUES ($1, $2, $3)
			ON CONFLICT (first_node) DO UPDATE SET record = excluded.record WHERE b.last_node = excluded.last_node`,
			first, first+st.layout.Size-1, string(rec))
		if err != nil {
			return nil, st.dbError(fmt.Sprintf("writing the record of node IDs %d-%d", first, first+st.layout.Size-1), err)
		}
		if tag.RowsAffected() != 1 {
			return nil, fmt.Errorf("pglease: %s: the row of node IDs %d-%d changed during the step: %w", st.n.display, first, first+st.layout.Size-1, lease.ErrStoreConflict)
		}
	}
	if ch.Marker != nil {
		tag, err := s.tx.Exec(ctx, `UPDATE `+st.n.version+` SET marker = $1, fresh = false`, string(ch.Marker))
		if err != nil {
			return nil, st.dbError("writing the fleet marker", err)
		}
		if tag.RowsAffected() != 1 {
			return nil, fmt.Errorf("pglease: %s: the version row changed during the step: %w", st.n.version, lease.ErrStoreConflict)
		}
	}
	if ch.Release {
		tag, err := s.tx.Exec(ctx, `UPDATE `+st.n.blocks+` SET holder = NULL, token = NULL, claimed_at = NULL, expires_at = NULL
			WHERE first_node = ANY($1) AND token = $2`, s.held.blocks, s.held.token)
		if err != nil {
			return nil, st.dbError("releasing the claim", err)
		}
		if tag.RowsAffected() != int64(len(s.held.blocks)) {
			return nil, fmt.Errorf("pglease: %s: the claim changed during the step: %w", st.n.display, lease.ErrStoreConflict)
		}
		res = nil
	}
	return res, nil
}

// check refuses changes the step cannot make: claims of blocks that are
// not blocks of the layout or were not read, records of blocks not read, a
// release without a claim.
func (s *step) check(ch *lease.StoreChanges) error {
	st := s.st
	if len(ch.Claim) > 0 && s.held != nil {
		return fmt.Errorf("pglease: %s: a step both holds a claim and claims blocks", st.n.display)
	}
	for _, f := range ch.Claim {
		if !s.readSet[f] {
			return fmt.Errorf("pglease: %s: claim of node IDs from %d, not a block read in the step", st.n.display, f)
		}
	}
	for f := range ch.Records {
		if !s.readSet[f] {
			return fmt.Errorf("pglease: %s: record of node IDs from %d, not a block read in the step", st.n.display, f)
		}
	}
	if ch.Release && s.held == nil {
		return fmt.Errorf("pglease: %s: release without a claim", st.n.display)
	}
	return nil
}

// claim claims the blocks: each only if it is free or its claim has
// expired, by the server's clock, in the claiming statement itself.
func (s *step) claim(ctx context.Context, firsts []int64) (*claimHandle, error) {
	st := s.st
	b := make([]byte, 16)
	rand.Read(b)
	h := &claimHandle{token: hex.EncodeToString(b), blocks: append([]int64(nil), firsts...)}
	for _, f := range firsts {
		var one int
		err := s.tx.QueryRow(ctx, `INSERT INTO `+st.n.blocks+` AS b (first_node, last_node, holder, token, claimed_at, expires_at)
			VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 millisecond')
			ON CONFLICT (first_node) DO UPDATE SET holder = excluded.holder, token = excluded.token,
				claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
			WHERE b.last_node = excluded.last_node AND (b.token IS NULL OR b.expires_at < clock_timestamp())
			RETURNING 1`, f, f+st.layout.Size-1, st.holder, h.token, st.ttl.Milliseconds()).Scan(&one)
		var pe *pgconn.PgError
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("pglease: %s: node IDs %d-%d: %w", st.n.display, f, f+st.layout.Size-1, lease.ErrBlockHeld)
		case errors.As(err, &pe) && (pe.Code == "23P01" || pe.Code == "23505"): // exclusion or unique violation
			return nil, fmt.Errorf("pglease: %s: node IDs %d-%d overlap a block claimed meanwhile: %w", st.n.display, f, f+st.layout.Size-1, lease.ErrBlockHeld)
		case err != nil:
			return nil, st.dbError(fmt.Sprintf("claiming node IDs %d-%d", f, f+st.layout.Size-1), err)
		}
		if _, ok := s.expired[f]; ok {
			s.taken = append(s.taken, f)
		}
	}
	return h, nil
}

// logTakeovers logs the expired claims a committed step took over.
func (s *step) logTakeovers() {
	if s.st.log == nil {
		return
	}
	for _, f := range s.taken {
		s.st.log.Info("pglease: took over node IDs whose holder's claim had expired",
			"table", s.st.n.display, "nodes", fmt.Sprintf("%d-%d", f, f+s.st.layout.Size-1), "previous_holder", s.expired[f])
	}
}

// Renew moves the claim's expiry to one TTL after the server's clock, in
// one statement conditioned on the claim's token, and reads the server's
// clock (checked against this machine's) and identity with it.
func (st *store) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	h, err := st.handle(held)
	if err != nil {
		return lease.StoreIdentity{}, err
	}
	if h == nil {
		return lease.StoreIdentity{}, fmt.Errorf("pglease: %s: renewal without a claim", st.n.display)
	}
	sysid, err := st.sysidReadable(ctx)
	if err != nil {
		return lease.StoreIdentity{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, st.opTimeout())
	defer cancel()
	var (
		renewed        int
		srv            time.Time
		sys            *string
		timeline, wpos string
	)
	t0 := st.now()
	err = st.pool.QueryRow(ctx, `WITH r AS (
			UPDATE `+st.n.blocks+` SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
			WHERE first_node = ANY($1) AND token = $2 RETURNING 1)
		SELECT (SELECT count(*) FROM r), clock_timestamp(), `+identityColumns(sysid)+` FROM `+walSubquery,
		h.blocks, h.token, st.ttl.Milliseconds()).Scan(&renewed, &srv, &sys, &timeline, &wpos)
	t1 := st.now()
	if err != nil {
		return lease.StoreIdentity{}, st.dbError(fmt.Sprintf("renewing the claim on node IDs %d-%d", h.blocks[0], h.blocks[len(h.blocks)-1]+st.layout.Size-1), err)
	}
	if renewed != len(h.blocks) {
		return lease.StoreIdentity{}, st.lost(h.blocks[0])
	}
	if err := checkSkew(t0, t1, srv, st.skew); err != nil {
		return lease.StoreIdentity{}, fmt.Errorf("%w (renewing the claim on node IDs %d-%d of table %s)", err, h.blocks[0], h.blocks[len(h.blocks)-1]+st.layout.Size-1, st.n.display)
	}
	return makeIdentity(sys, timeline, wpos)
}

// dbError describes a failed database operation, with the password
// removed: a missing table is ErrNoSchema, a serialisation failure or a
// deadlock ErrStoreConflict.
func (st *store) dbError(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01": // undefined table
			return st.red.scrub(fmt.Errorf("%w: %s (%w)", ErrNoSchema, st.n.display, err))
		case "40001", "40P01": // serialization failure, deadlock
			return st.red.scrub(fmt.Errorf("pglease: %s: %s: %w (%w)", st.n.display, what, lease.ErrStoreConflict, err))
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || (errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014")) {
		// Say what was slow: the step, against its bound (or the
		// caller's deadline, if that came first). 55P03: a lock wait
		// past lock_timeout; 57014: a statement past statement_timeout.
		return st.red.scrub(fmt.Errorf("pglease: %s: %s: not done within the bound on each step (%v) or the caller's deadline: %w",
			st.n.display, what, st.opTimeout(), err))
	}
	return st.red.scrub(fmt.Errorf("pglease: %s: %s: %w", st.n.display, what, err))
}
