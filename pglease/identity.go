package pglease

import (
	"context"
	"fmt"
	"strconv"

	"github.com/randflake/randflake/lease"
)

// The store's identity (lease.StoreIdentity) is read in the same
// statement as the rest of a step or a renewal, from a subquery w holding
// the current WAL location as lsn:
//
//   - the system identifier, from pg_control_system(), which any role may
//     call unless an administrator revoked it (then NULL: the identity is
//     the timeline alone);
//   - the timeline, the first 8 hex digits of the current WAL file's name
//     (pg_walfile_name works for any role, and names the timeline a
//     promotion or the end of a recovery switched to at once, unlike the
//     last checkpoint's);
//   - the position, the WAL location as a number of bytes.
//
// A failover, a point-in-time restore or a restored base backup ends
// recovery on a new timeline: the identity changes. A server restart or a
// crash recovery keeps it, and its WAL location only grows.

// walSubquery is the FROM item that reads the WAL location once.
const walSubquery = `(SELECT pg_current_wal_lsn() AS lsn) w`

// identityColumns returns the select-list items of the identity: system
// identifier (text or NULL), timeline (hex), position (decimal text).
func identityColumns(sysid bool) string {
	sys := "NULL::text"
	if sysid {
		sys = "(SELECT system_identifier::text FROM pg_control_system())"
	}
	return sys + `, substr(pg_walfile_name(w.lsn), 1, 8), (w.lsn - '0/0'::pg_lsn)::text`
}

// makeIdentity builds the identity from what identityColumns read.
func makeIdentity(sysid *string, timeline, position string) (lease.StoreIdentity, error) {
	tl, err := strconv.ParseUint(timeline, 16, 32)
	if err != nil {
		return lease.StoreIdentity{}, fmt.Errorf("pglease: the server's WAL file name starts with %q, not a timeline", timeline)
	}
	pos, err := strconv.ParseUint(position, 10, 64)
	if err != nil {
		return lease.StoreIdentity{}, fmt.Errorf("pglease: the server's WAL location %q is not a number", position)
	}
	id := fmt.Sprintf("timeline %d", tl)
	if sysid != nil {
		id = fmt.Sprintf("system %s timeline %d", *sysid, tl)
	}
	return lease.StoreIdentity{ID: id, Position: pos}, nil
}

// sysidReadable reports whether the role may call pg_control_system(),
// asking the server the first time only: a process keeps one form of
// identity for its life.
func (st *store) sysidReadable(ctx context.Context) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sysidKnown {
		return st.sysid, nil
	}
	var ok bool
	if err := st.pool.QueryRow(ctx, `SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')`).Scan(&ok); err != nil {
		return false, st.dbError("connecting and reading the server's identity", err)
	}
	st.sysid, st.sysidKnown = ok, true
	return ok, nil
}
