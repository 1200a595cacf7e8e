package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/pglease"
	"github.com/randflake/randflake/privatefile"
)

// postgresFlags are serve's flags for node IDs from PostgreSQL
// (--node-source postgres).
type postgresFlags struct {
	dsn          string
	table        string
	ttl          time.Duration
	horizon      time.Duration // the fleet's bound on promises
	migrate      bool
	passwordFile string
}

func (p *postgresFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.dsn, "postgres-dsn", "", "claim node IDs from PostgreSQL: a postgres:// URL or key=value DSN (needs an explicit fleet secret; keep the password out of it with --postgres-password-file, $PGPASSFILE or $PGPASSWORD, or set the DSN by the variable)")
	fs.StringVar(&p.table, "postgres-table", pglease.DefaultTable, "PostgreSQL table of the claims, [SCHEMA.]TABLE")
	fs.DurationVar(&p.ttl, "postgres-ttl", 0, fmt.Sprintf("PostgreSQL claim TTL: a crashed process's node IDs are free again after it (default %v)", pglease.DefaultTTL))
	fs.DurationVar(&p.horizon, "postgres-horizon", 0, fmt.Sprintf("the fleet's bound on promises, the same on every member, at least --postgres-ttl; a wiped table is waited out for it (default %v)", pglease.DefaultHorizon))
	fs.BoolVar(&p.migrate, "postgres-migrate", false, "create the PostgreSQL tables (or check their schema version) before claiming; safe to repeat")
	fs.StringVar(&p.passwordFile, "postgres-password-file", "", "file holding the PostgreSQL password (a private file, as the secret; trailing newlines are ignored); it wins over $PGPASSWORD and $PGPASSFILE, and the DSN must not hold one")
}

// check returns a usage error for a password file without a DSN, or given
// besides a password in the DSN.
func (p *postgresFlags) check() error {
	switch {
	case p.passwordFile == "":
		return nil
	case p.dsn == "":
		return usagef("--postgres-password-file is for --postgres-dsn")
	case dsnHasPassword(p.dsn):
		return usagef("--postgres-password-file, and a password in --postgres-dsn: give the password once, in the file")
	}
	return nil
}

// openPostgres opens the PostgreSQL source on --postgres-dsn and, with
// --postgres-migrate, creates the tables first (waiting, within ctx, for a
// server not reachable yet). Errors never contain the DSN's password.
func (l *leaseFlags) openPostgres(ctx context.Context, e *env, log *slog.Logger, secret []byte) (*openedSource, error) {
	schema, table := splitTable(l.pg.table)
	pool, err := l.pg.pool(e)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	src, err := pglease.New(pglease.Config{
		Pool: pool, Secret: secret, Schema: schema, Table: table, Nodes: l.claim, TTL: l.pg.ttl, Horizon: l.pg.horizon, Logger: log,
	})
	if err != nil {
		pool.Close()
		if errors.Is(err, lease.ErrBeyondHorizon) {
			return nil, usagef("%v: give every member of the fleet the same --postgres-horizon ($RANDFLAKE_POSTGRES_HORIZON), at least --postgres-ttl", err)
		}
		return nil, fmt.Errorf("postgres: %w", err)
	}
	closeAll := func() {
		src.Close()
		pool.Close()
	}
	if l.pg.migrate {
		stop := waitNotice(log, "still waiting for node IDs from PostgreSQL", "table", l.pg.table, "step", "creating the tables")
		err := untilReachable(ctx, func() error { return src.Migrate(ctx) })
		stop()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("postgres: creating the tables: %w%s", err, pgHint(err))
		}
	}
	return &openedSource{src: src, secret: secret, describe: "postgres " + l.pg.table, network: true, cleanup: closeAll,
		waiting: "still waiting for node IDs from PostgreSQL", waitingArgs: []any{"table", l.pg.table},
		wrap: func(err error) error {
			if errors.Is(err, pglease.ErrNoSchema) {
				return fmt.Errorf("postgres: %w; create them with --postgres-migrate or pglease/schema.sql", err)
			}
			return fmt.Errorf("postgres: %w%s", err, pgHint(err))
		}}, nil
}

// pgHint is what an operator should do about an error connecting to
// PostgreSQL, if it says anything: "" if not.
func pgHint(err error) string {
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verify):
		return " (the server's certificate must come from a CA of sslrootcert= in --postgres-dsn, and name the host the DSN gives)"
	case pgCode(err) == "28P01":
		return " (the password comes from --postgres-password-file, else the DSN, else $PGPASSWORD, else $PGPASSFILE)"
	}
	return ""
}

// pgCode returns the SQLSTATE of the PostgreSQL error in err's chain, or
// "" if there is none.
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// splitTable splits [SCHEMA.]TABLE at its first dot.
func splitTable(name string) (schema, table string) {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return schema, table
	}
	return "", name
}

// maxPassFile bounds the file $PGPASSFILE names.
const maxPassFile = 1 << 20

// pool opens the connection pool of --postgres-dsn (connecting on first
// use), with the password of --postgres-password-file if given: the
// password goes to the driver's configuration, never into a connection
// string. A file $PGPASSFILE names must be a private file (as the
// secret); the driver then reads the password from it, as libpq does,
// when neither the DSN, $PGPASSWORD nor --postgres-password-file gives
// one. Errors never show the DSN: it may hold a password.
func (p *postgresFlags) pool(e *env) (*pgxpool.Pool, error) {
	if f := e.getenv("PGPASSFILE"); f != "" {
		b, err := privatefile.Read(f, maxPassFile)
		clear(b)
		if err != nil {
			return nil, fmt.Errorf("$PGPASSFILE: %w", err)
		}
	}
	pc, err := pgxpool.ParseConfig(p.dsn)
	if err != nil {
		// The parser's message can quote the connection string.
		return nil, errors.New("--postgres-dsn is not a valid PostgreSQL connection string (not shown: it may hold a password)")
	}
	if p.passwordFile != "" {
		pw, err := readPasswordFile(p.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--postgres-password-file: %w", err)
		}
		pc.ConnConfig.Password = pw
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, errors.New("opening the connection pool of --postgres-dsn failed (not shown: it may hold a password)")
	}
	return pool, nil
}

// dsnHasPassword reports whether a connection string, a postgres:// URL
// or key=value pairs, holds a password.
func dsnHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return false // refused by the driver's parser anyway
		}
		if _, ok := u.User.Password(); ok {
			return true
		}
		return u.Query().Has("password")
	}
	for _, kv := range dsnPairs(dsn) {
		if kv[0] == "password" {
			return true
		}
	}
	return false
}

// dsnPairs splits a key=value connection string into its pairs, with the
// rules of libpq: white space around '=' and between pairs, values in
// single quotes, and backslash escapes.
func dsnPairs(s string) [][2]string {
	var pairs [][2]string
	i := 0
	skip := func() {
		for i < len(s) && strings.IndexByte(" \t\n\r\f\v", s[i]) >= 0 {
			i++
		}
	}
	for {
		skip()
		if i >= len(s) {
			return pairs
		}
		start := i
		for i < len(s) && s[i] != '=' && strings.IndexByte(" \t\n\r\f\v", s[i]) < 0 {
			i++
		}
		key := s[start:i]
		skip()
		if i >= len(s) || s[i] != '=' {
			return pairs // malformed: the driver refuses it
		}
		i++
		skip()
		var val strings.Builder
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		for i < len(s) {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				val.WriteByte(s[i+1])
				i += 2
				continue
			}
			if quoted && c == '\'' {
				i++
				break
			}
			if !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0 {
				break
			}
			val.WriteByte(c)
			i++
		}
		pairs = append(pairs, [2]string{key, val.String()})
	}
}
