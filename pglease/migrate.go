package pglease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the schema this package creates and works
// on, recorded in the schema-version table. Version 1 (a used_until column,
// before the lease engine) is upgraded in place by Migrate.
const SchemaVersion = 2

// DefaultTable is the name of the blocks table when Config.Table is empty.
// Its schema-version table is the same name plus "_schema".
const DefaultTable = "randflake_blocks"

// schemaSQL is the file schema.sql, written for DefaultTable.
//
//go:embed schema.sql
var schemaSQL string

// upgradeV1SQL is the file schema_upgrade_v1.sql, written for DefaultTable.
//
//go:embed schema_upgrade_v1.sql
var upgradeV1SQL string

// SchemaSQL returns the SQL that MigrateTable runs for schema.table: the
// file schema.sql of this package with the table's names filled in, for an
// operator who applies the schema by hand (psql --single-transaction). A
// version 1 schema needs schema_upgrade_v1.sql first (UpgradeSQL).
func SchemaSQL(schema, table string) (string, error) {
	n, err := newNames(schema, table)
	if err != nil {
		return "", err
	}
	return n.sql(schemaSQL), nil
}

// UpgradeSQL returns the SQL that MigrateTable runs, before SchemaSQL's,
// to upgrade the tables of schema.table from version 1: the file
// schema_upgrade_v1.sql with the table's names filled in.
func UpgradeSQL(schema, table string) (string, error) {
	n, err := newNames(schema, table)
	if err != nil {
		return "", err
	}
	return n.sql(upgradeV1SQL), nil
}

// DB is what Migrate needs of a database handle: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all have it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates the tables of DefaultTable, in the first schema of the
// search path, if they do not exist yet, or upgrades them from version 1
// (see MigrateTable).
func Migrate(ctx context.Context, db DB) error {
	return MigrateTable(ctx, db, "", DefaultTable)
}

// MigrateTable creates the blocks table schema.table (schema "" means the
// first schema of the search path) and its schema-version table, running
// the embedded schema.sql in one transaction, or upgrades them in place
// from version 1 (schema_upgrade_v1.sql, then schema.sql). It is
// idempotent, and safe to run from several processes at once (they
// serialise on an advisory lock). Only tables created from nothing are
// fresh (their first claim waits nothing); after an upgrade the first
// claim waits out the longest promise a version 1 holder can have made.
// If the schema-version table holds another version than 1 or
// SchemaVersion, or the blocks table exists without it, MigrateTable
// changes nothing and returns an error wrapping ErrSchemaVersion.
func MigrateTable(ctx context.Context, db DB, schema, table string) error {
	n, err := newNames(schema, table)
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pglease: migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Concurrent CREATE TABLE IF NOT EXISTS can fail on the catalog's
	// unique indexes; one migration at a time per table name.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "randflake pglease migrate "+n.blocks); err != nil {
		return fmt.Errorf("pglease: migrate: %w", err)
	}
	v, err := schemaVersion(ctx, tx, n)
	switch {
	case errors.Is(err, ErrNoSchema):
		var blocks *string
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1)::text", n.blocks).Scan(&blocks); err != nil {
			return fmt.Errorf("pglease: migrate: looking for %s: %w", n.blocks, err)
		}
		if blocks != nil {
			return fmt.Errorf("%w: %s exists without its schema-version table %s (not created by pglease, or damaged); not touched",
				ErrSchemaVersion, n.blocks, n.version)
		}
	case err != nil:
		return err
	case v == 1:
		if _, err := tx.Exec(ctx, n.sql(upgradeV1SQL)); err != nil {
			return fmt.Errorf("pglease: migrate %s from version 1: %w", n.blocks, err)
		}
	case v != SchemaVersion:
		return versionError(n, v)
	}
	// The file is idempotent: on tables at this version it only recreates
	// what someone dropped by hand.
	if _, err := tx.Exec(ctx, n.sql(schemaSQL)); err != nil {
		return fmt.Errorf("pglease: migrate %s: %w", n.blocks, err)
	}
	if v, err = schemaVersion(ctx, tx, n); err != nil {
		return err
	}
	if v != SchemaVersion {
		return fmt.Errorf("%w: the migration wrote version %d, want %d", ErrSchemaVersion, v, SchemaVersion)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pglease: migrate: %w", err)
	}
	return nil
}

func versionError(n names, v int) error {
	if v == 1 {
		return fmt.Errorf("%w: %s says version 1; run pglease.Migrate (or --postgres-migrate) to upgrade it to version %d",
			ErrSchemaVersion, n.version, SchemaVersion)
	}
	return fmt.Errorf("%w: %s says version %d, this package knows only version %d (a newer pglease migrated it? use that release)",
		ErrSchemaVersion, n.version, v, SchemaVersion)
}

// querier is what reading the schema version needs: a pool, a connection
// or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion reads the version row; a missing table is ErrNoSchema.
// (A query on a missing table would abort a transaction, so the catalog
// is asked first.)
func schemaVersion(ctx context.Context, q querier, n names) (int, error) {
	var reg *string
	if err := q.QueryRow(ctx, "SELECT to_regclass($1)::text", n.version).Scan(&reg); err != nil {
		return 0, fmt.Errorf("pglease: looking for %s: %w", n.version, err)
	}
	if reg == nil {
		return 0, fmt.Errorf("%w: %s", ErrNoSchema, n.version)
	}
	var v int
	err := q.QueryRow(ctx, "SELECT version FROM "+n.version).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s has no version row", ErrSchemaVersion, n.version)
	}
	if err != nil {
		return 0, fmt.Errorf("pglease: reading the schema version from %s: %w", n.version, err)
	}
	return v, nil
}

// names are the quoted names of a blocks table.
type names struct {
	table   string // unqualified, unquoted
	schema  string // "" for the search path
	display string // schema.table, unquoted, for messages
	blocks  string // qualified and quoted
	version string // qualified and quoted
}

func newNames(schema, table string) (names, error) {
	if table == "" {
		table = DefaultTable
	}
	// PostgreSQL truncates identifiers to 63 bytes: "_schema_single"
	// must still fit.
	if len(table) > 63-len("_schema_single") || strings.ContainsRune(table, 0) || len(schema) > 63 || strings.ContainsRune(schema, 0) {
		return names{}, fmt.Errorf("pglease: table name %q or schema %q too long (at most %d and 63 bytes) or not text", table, schema, 63-len("_schema_single"))
	}
	qual := func(name string) string {
		if schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{schema, name}.Sanitize()
	}
	display := table
	if schema != "" {
		display = schema + "." + table
	}
	return names{table: table, schema: schema, display: display, blocks: qual(table), version: qual(table + "_schema")}, nil
}

var nameWord = regexp.MustCompile(`\b` + DefaultTable + `(\w*)`)

// sql rewrites schema.sql for these names: the two tables qualified, the
// constraints named after the table.
func (n names) sql(text string) string {
	return nameWord.ReplaceAllStringFunc(text, func(w string) string {
		switch suffix := strings.TrimPrefix(w, DefaultTable); suffix {
		case "":
			return n.blocks
		case "_schema":
			return n.version
		default:
			return pgx.Identifier{n.table + suffix}.Sanitize()
		}
	})
}

// Migrate creates or upgrades the tables the source was configured with
// (Config.Schema and Config.Table) on its own connection pool, as
// MigrateTable does; its errors never contain the connection's password.
// It is for a command that opens its source from a DSN and creates the
// schema on request.
func (s *Source) Migrate(ctx context.Context) error {
	return s.red.scrub(MigrateTable(ctx, s.pool, s.st.n.schema, s.st.n.table))
}
