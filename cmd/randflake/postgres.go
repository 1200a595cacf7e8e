package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/randflake/randflake/pglease"
)

// postgresFlags are serve's flags for node IDs from PostgreSQL
// (--node-source postgres).
type postgresFlags struct {
	dsn     string
	table   string
	ttl     time.Duration
	migrate bool
}

func (p *postgresFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.dsn, "postgres-dsn", "", "claim node IDs from PostgreSQL: a postgres:// URL or key=value DSN (needs an explicit fleet secret; keep the password out of it with $PGPASSFILE or $PGPASSWORD, or set the DSN by the variable)")
	fs.StringVar(&p.table, "postgres-table", pglease.DefaultTable, "PostgreSQL table of the claims, [SCHEMA.]TABLE")
	fs.DurationVar(&p.ttl, "postgres-ttl", 0, fmt.Sprintf("PostgreSQL claim TTL: a crashed process's node IDs are free again after it (default %v)", pglease.DefaultTTL))
	fs.BoolVar(&p.migrate, "postgres-migrate", false, "create the PostgreSQL tables (or check their schema version) before claiming; safe to repeat")
}

// openPostgres opens the PostgreSQL source on --postgres-dsn and, with
// --postgres-migrate, creates the tables first (waiting, within ctx, for a
// server not reachable yet). Errors never contain the DSN's password.
func (l *leaseFlags) openPostgres(ctx context.Context, log *slog.Logger, secret []byte) (*openedSource, error) {
	schema, table := splitTable(l.pg.table)
	src, err := pglease.New(pglease.Config{
		DSN: l.pg.dsn, Secret: secret, Schema: schema, Table: table, Nodes: l.claim, TTL: l.pg.ttl, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if l.pg.migrate {
		stop := waitNotice(log, "still waiting for PostgreSQL to create the tables", "table", l.pg.table)
		err := untilReachable(ctx, func() error { return src.Migrate(ctx) })
		stop()
		if err != nil {
			src.Close()
			return nil, fmt.Errorf("postgres: creating the tables: %w", err)
		}
	}
	return &openedSource{src: src, secret: secret, describe: "postgres " + l.pg.table, network: true, cleanup: src.Close,
		waiting: "still waiting for node IDs from PostgreSQL", waitingArgs: []any{"table", l.pg.table},
		wrap: func(err error) error {
			if errors.Is(err, pglease.ErrNoSchema) {
				return fmt.Errorf("postgres: %w; create them with --postgres-migrate or pglease/schema.sql", err)
			}
			return fmt.Errorf("postgres: %w", err)
		}}, nil
}

// untilReachable runs op until it succeeds, fails for a reason other than
// an unreachable server (a network error), or ctx ends. So a process
// started before its database waits for it, as it does for etcd, while a
// refused password or missing tables end it at once.
func untilReachable(ctx context.Context, op func() error) error {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := op()
		var netErr *net.OpError
		if err == nil || !errors.As(err, &netErr) {
			return err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// splitTable splits [SCHEMA.]TABLE at its first dot.
func splitTable(name string) (schema, table string) {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return schema, table
	}
	return "", name
}
