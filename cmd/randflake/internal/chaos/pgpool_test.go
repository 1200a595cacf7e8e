//go:build chaos

package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/pglease"
)

// pgTables acts on the PostgreSQL fleet's tables as an operator with psql
// would: pglease's blocks table (one row per block of node IDs ever
// claimed: its record and its claim) and its schema-version table (the
// fleet marker). Every call opens a connection of its own, as the server
// is restarted under the test.
//
// As in the etcd run, only the lowest blocks form the free pool: every
// other block has a row claimed for good by a stand-in (a token and an
// expiry at infinity), as if the rest of a large fleet held it, so that
// processes must hand node IDs to one another.
type pgTables struct {
	dsn  string
	free int64 // blocks 0..free-1 are free
}

const (
	pgBlocks = pglease.DefaultTable
	pgSchema = pglease.DefaultTable + "_schema"
)

// tx runs fn in one transaction on a new connection.
func (p *pgTables) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	conn, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The servers' steps lock the schema row first, then the rows of
		// the blocks; locking in the same order keeps a wipe under
		// running servers from deadlocking with them.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgSchema+` FOR UPDATE`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// blockRest claims, with a stand-in row, every block from the pool's end
// on that has no row yet.
func blockRest(ctx context.Context, tx pgx.Tx, free int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+pgBlocks+` (first_node, last_node, holder, token, claimed_at, expires_at)
		SELECT g, g + $2 - 1, 'the chaos test: held for good, not part of the free pool', 'stand-in', now(), 'infinity'
		FROM generate_series($1::integer, $3::integer, $2::integer) g
		ON CONFLICT (first_node) DO NOTHING`, free*pgClaim, pgClaim, randflake.MaxNode)
	return err
}

// block puts the stand-ins in place.
func (p *pgTables) block(ctx context.Context) error {
	return p.tx(ctx, func(tx pgx.Tx) error { return blockRest(ctx, tx, p.free) })
}

// wipe deletes every row of the blocks table (DELETE FROM, the rows of the
// servers still running included) and, if marker is set, the fleet
// marker too; the stand-ins are put back in the same transaction, as if
// the rest of the fleet claimed its blocks again at once. It returns how
// many rows were deleted.
func (p *pgTables) wipe(ctx context.Context, marker bool) (int64, error) {
	var n int64
	err := p.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM `+pgBlocks)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if marker {
			if _, err := tx.Exec(ctx, `UPDATE `+pgSchema+` SET marker = NULL`); err != nil {
				return err
			}
		}
		return blockRest(ctx, tx, p.free)
	})
	return n, err
}

// grow frees the block after the pool (deletes its stand-in row, which has
// no record) and returns its first node ID.
func (p *pgTables) grow(ctx context.Context) (int64, error) {
	first := p.free * pgClaim
	err := p.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM `+pgBlocks+` WHERE first_node = $1 AND token = 'stand-in'`, first)
		return err
	})
	if err != nil {
		return 0, err
	}
	p.free++
	return first, nil
}

// records returns the records of the pool's blocks, by first node ID.
func (p *pgTables) records(ctx context.Context) (map[int64]string, error) {
	recs := map[int64]string{}
	err := p.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT first_node, record FROM `+pgBlocks+` WHERE record IS NOT NULL AND first_node < $1`, p.free*pgClaim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var first int64
			var rec string
			if err := rows.Scan(&first, &rec); err != nil {
				return err
			}
			recs[first] = rec
		}
		return rows.Err()
	})
	return recs, err
}

// putBack writes saved records back over the current ones, as a restore of
// the rows from an older copy would (the marker stays), and returns how
// many records it changed.
func (p *pgTables) putBack(ctx context.Context, saved map[int64]string) (int64, error) {
	var n int64
	err := p.tx(ctx, func(tx pgx.Tx) error {
		for first, rec := range saved {
			tag, err := tx.Exec(ctx, `INSERT INTO `+pgBlocks+` AS b (first_node, last_node, record) VALUES ($1, $2, $3)
				ON CONFLICT (first_node) DO UPDATE SET record = excluded.record WHERE b.record IS DISTINCT FROM excluded.record`,
				first, first+pgClaim-1, rec)
			if err != nil {
				return fmt.Errorf("putting back the record of node IDs from %d: %w", first, err)
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	return n, err
}
