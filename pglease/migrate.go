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
// on, recorded in the schema-version table.
const SchemaVersion = 1

// DefaultTable is the name of the blocks table when Config.Table is empty.
// Its schema-version table is the same name plus "_schema".
const DefaultTable = "randflake_blocks"

// schemaSQL is the file schema.sql, written for DefaultTable.
//
//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the SQL that MigrateTable runs for schema.table: the
// file schema.sql of this package with the table's names filled in, for an
// operator who applies the schema by hand (psql --single-transaction).
func SchemaSQL(schema, table string) (string, error) {
	n, err := newNames(schema, table)
	if err != nil {
		return "", err
	}
	return n.sql(schemaSQL), nil
}

// DB is what Migrate needs of a database handle: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all have it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Errors of the schema.
var (
	// ErrNoSchema: the tables do not exist; run Migrate (or schema.sql).
	ErrNoSchema = errors.New("pglease: the lease tables do not exist (run pglease.Migrate or schema.sql first)")
	// ErrSchemaVersion: the schema-version table holds a version this
	// package does not know, such as one written by a newer release.
	ErrSchemaVersion = errors.New("pglease: unknown schema version")
)

// Migrate creates the tables of DefaultTable, in the first schema of the
// search path, if they do not exist yet (see MigrateTable).
func Migrate(ctx context.Context, db DB) error {
	return MigrateTable(ctx, db, "", DefaultTable)
}

// MigrateTable creates the blocks table schema.table (schema "" means the
// first schema of the search path) and its schema-version table, running
// the embedded schema.sql in one transaction. It is idempotent, and safe to
// run from several processes at once (they serialise on an advisory lock).
// If the schema-version table holds another version than SchemaVersion,
// MigrateTable changes nothing and returns an error wrapping
// ErrSchemaVersion.
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
		if _, err := tx.Exec(ctx, n.sql(schemaSQL)); err != nil {
			return fmt.Errorf("pglease: migrate %s: %w", n.blocks, err)
		}
		if v, err = schemaVersion(ctx, tx, n); err != nil {
			return err
		}
		if v != SchemaVersion {
			return fmt.Errorf("%w: schema.sql wrote version %d, want %d", ErrSchemaVersion, v, SchemaVersion)
		}
	case err != nil:
		return err
	case v != SchemaVersion:
		return versionError(n, v)
	default:
		// Already at this version: the file is idempotent, so running it
		// again only recreates what someone dropped by hand.
		if _, err := tx.Exec(ctx, n.sql(schemaSQL)); err != nil {
			return fmt.Errorf("pglease: migrate %s: %w", n.blocks, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pglease: migrate: %w", err)
	}
	return nil
}

func versionError(n names, v int) error {
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
	return names{table: table, schema: schema, blocks: qual(table), version: qual(table + "_schema")}, nil
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
	return s.scrub(MigrateTable(ctx, s.pool, s.n.schema, s.n.table))
}
