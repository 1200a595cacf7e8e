package pglease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
)

func TestMakeIdentity(t *testing.T) {
	sys := "7714359650963099115"
	for _, c := range []struct {
		sys           *string
		timeline, pos string
		id            string
		position      uint64
		bad           bool
	}{
		{&sys, "00000001", "22024800", "system 7714359650963099115 timeline 1", 22024800, false},
		{nil, "0000000A", "0", "timeline 10", 0, false},
		{nil, "FFFFFFFF", "18446744073709551615", "timeline 4294967295", 1<<64 - 1, false},
		{nil, "0000000G", "1", "", 0, true},
		{nil, "00000001", "-1", "", 0, true},
		{nil, "00000001", "1.5", "", 0, true},
	} {
		id, err := makeIdentity(c.sys, c.timeline, c.pos)
		if c.bad {
			if err == nil {
				t.Errorf("%q, %q: %+v accepted", c.timeline, c.pos, id)
			}
			continue
		}
		if err != nil || id != (lease.StoreIdentity{ID: c.id, Position: c.position}) {
			t.Errorf("%q, %q: %+v, %v; want %q at %d", c.timeline, c.pos, id, err, c.id, c.position)
		}
	}
}

// identityRecorder is the store, recording the identities its renewals
// read.
type identityRecorder struct {
	*store
	ids []lease.StoreIdentity
}

func (r *identityRecorder) Renew(ctx context.Context, held lease.StoreClaim) (lease.StoreIdentity, error) {
	id, err := r.store.Renew(ctx, held)
	if err == nil {
		r.ids = append(r.ids, id)
	}
	return id, err
}

// A role with no privilege but on the two tables claims, renews and
// releases, and reads the identity: with the system identifier while it
// may call pg_control_system() (as any role may by default), the timeline
// alone once an administrator revoked that. Every step reads the WAL
// position, which only grows. A process of the other kind then reads the
// identity as changed, and its first claim waits the history out.
func TestUnprivilegedRole(t *testing.T) {
	t.Parallel()
	srv := server(t)
	admin, ctx := sharedPool(t, 60*time.Second)
	// A database of the test's own: the revocation below is per database.
	db, role := uniqueName("unprivileged"), uniqueName("app")
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Roles are shared by the server's databases: drop it, and its
		// database, to leave nothing behind.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		admin.Exec(ctx, `DROP DATABASE `+db+` WITH (FORCE)`)
		admin.Exec(ctx, `DROP ROLE `+role)
	})
	host, port := hostPort(t, srv)
	dsn := func(user string) string {
		return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable connect_timeout=2", host, port, user, db)
	}
	owner := newPool(t, dsn("randflake"))
	table := newTable(t, owner, "by_role")
	if _, err := owner.Exec(ctx, `GRANT SELECT, INSERT, UPDATE ON `+table+`, `+table+`_schema TO `+role); err != nil {
		t.Fatal(err)
	}
	var sysid string
	if err := owner.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&sysid); err != nil {
		t.Fatal(err)
	}
	appPool := newPool(t, dsn(role))
	cfg := Config{Pool: appPool, Secret: testSecret, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}

	// claim claims, renews twice and releases as the role, and returns
	// the identity and positions the renewals read, and how long the
	// claim took.
	claim := func(what string) (lease.StoreIdentity, time.Duration) {
		t.Helper()
		st := &identityRecorder{store: openStore(t, cfg)}
		s, err := lease.NewBlockSource(st, lease.BlockSourceConfig{Secret: testSecret, Layout: st.layout})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		l, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("%s: claim: %v", what, err)
		}
		took := time.Since(t0)
		st.ids = nil
		for range 2 {
			if l, err = s.Renew(ctx, l); err != nil {
				t.Fatalf("%s: renewal: %v", what, err)
			}
		}
		if err := s.Release(ctx, l, l.Start-1); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
		ids := st.ids
		if len(ids) != 2 {
			t.Fatalf("%s: %d renewals of the store, want 2", what, len(ids))
		}
		if ids[0].ID != ids[1].ID || ids[0].Position == 0 || ids[1].Position < ids[0].Position {
			t.Errorf("%s: identities read %+v: want one ID and a position that grows", what, ids)
		}
		return ids[1], took
	}

	id, took := claim("as a role that may read the system identifier")
	if want := "system " + sysid + " timeline 1"; id.ID != want {
		t.Errorf("identity %q, want %q", id.ID, want)
	}
	t.Logf("a plain role: identity %q at position %d; claim in %v", id.ID, id.Position, took.Round(time.Millisecond))

	if _, err := owner.Exec(ctx, `REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	id2, took2 := claim("as a role that may not")
	if id2.ID != "timeline 1" || id2.Position < id.Position {
		t.Errorf("identity after the revocation: %+v; want %q from position %d on", id2, "timeline 1", id.Position)
	}
	if took2 < time.Duration(testWait-1)*time.Second {
		t.Errorf("the first claim under the other form of identity took %v: want the history waited out (%d s)", took2, testWait)
	}
	var marker string
	if err := owner.QueryRow(ctx, `SELECT marker FROM `+table+`_schema`).Scan(&marker); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(marker, "id=timeline+1 ") {
		t.Errorf("marker after the revocation: %q", marker)
	}
	t.Logf("the role without pg_control_system(): identity %q at position %d; its first claim, which read the other form of identity in the marker, waited %v",
		id2.ID, id2.Position, took2.Round(time.Millisecond))
}
