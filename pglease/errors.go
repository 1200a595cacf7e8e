package pglease

import (
	"errors"

	"github.com/randflake/randflake/lease"
)

// Errors of PostgreSQL leases: the schema's, the two of the lease engine's
// that this package's users test for, and the rows' and the clocks'.
var (
	// ErrNoSchema: the tables do not exist; run Migrate (or schema.sql).
	ErrNoSchema = errors.New("pglease: the lease tables do not exist (run pglease.Migrate or schema.sql first)")
	// ErrSchemaVersion: the schema-version table holds a version this
	// package does not work on: version 1 before Migrate upgraded it, or
	// one written by a newer release.
	ErrSchemaVersion = errors.New("pglease: unknown schema version")
	// ErrNoFreeNodes: every block of node IDs is claimed (the lease
	// engine's lease.ErrNoFreeNodes).
	ErrNoFreeNodes = lease.ErrNoFreeNodes
	// ErrClockBehind: the free blocks were used up to seconds ahead of this
	// machine's clock, which may have stepped back (the lease engine's
	// lease.ErrClockBehind).
	ErrClockBehind = lease.ErrClockBehind
	// ErrCorrupt: a row of the blocks table that no process of this
	// package can have written: node IDs that are not a block of any
	// size (possible only with the table's checks dropped).
	ErrCorrupt = errors.New("pglease: corrupt row")
	// ErrClockSkew: the database server's clock and this machine's differ
	// by more than Config.MaxClockSkew.
	ErrClockSkew = errors.New("pglease: this machine's clock and the database server's differ by more than MaxClockSkew")
)
