package pglease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// concurrently runs f from n goroutines at once and returns their errors.
func concurrently(n int, f func() error) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f()
		}()
	}
	wg.Wait()
	return errs
}

// versionRow reads the schema-version row of table.
func versionRow(t *testing.T, pool *pgxpool.Pool, table string) (version int, marker *string, fresh bool) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT version, marker, fresh FROM `+table+`_schema`).Scan(&version, &marker, &fresh); err != nil {
		t.Fatal(err)
	}
	return version, marker, fresh
}

// Migrate is idempotent and safe to run concurrently; the file it runs is
// schema.sql with the names filled in; tables it creates from nothing are
// fresh, and their first claim waits nothing and ends the freshness; a
// schema of another version is refused by Migrate and by Acquire, and
// missing tables are a clear error.
func TestMigrate(t *testing.T) {
	t.Parallel()
	pool, ctx := sharedPool(t, 30*time.Second)

	s, err := New(Config{Pool: pool, Secret: testSecret, Table: uniqueName("never_migrated")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("Acquire without tables: %v, want ErrNoSchema", err)
	} else {
		t.Logf("without tables: %v", err)
	}

	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	schema := uniqueName("app schema")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	for _, err := range concurrently(4, func() error { return MigrateTable(ctx, pool, schema, "concurrent") }) {
		if err != nil {
			t.Errorf("concurrent MigrateTable: %v", err)
		}
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('concurrent', 'concurrent_schema')`, schema).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("tables in the schema: %d, %v", tables, err)
	}
	qualified := `"` + schema + `".concurrent`
	if v, marker, fresh := versionRow(t, pool, qualified); v != SchemaVersion || marker != nil || !fresh {
		t.Fatalf("new tables: version %d, marker %v, fresh %v; want %d, none, fresh", v, marker, fresh, SchemaVersion)
	}
	src, err := New(Config{Pool: pool, Secret: testSecret, Schema: schema, Table: "concurrent", TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire on a table in a schema: %v", err)
	}
	// At once: a wait for unknown history would start the lease seconds
	// after the claim began; on fresh tables it starts before.
	if l.Start > t0.Unix() {
		t.Errorf("first claim on fresh tables: %v after %v, starting after second %d the claim began; want it at once, without a wait for unknown history",
			l, time.Since(t0).Round(time.Millisecond), t0.Unix())
	}
	if v, marker, fresh := versionRow(t, pool, qualified); v != SchemaVersion || marker == nil || fresh {
		t.Errorf("after the first claim: version %d, marker %v, fresh %v; want a marker and no longer fresh", v, marker, fresh)
	}
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	// Migrating again keeps the marker, and the tables are not fresh again.
	if err := MigrateTable(ctx, pool, schema, "concurrent"); err != nil {
		t.Fatal(err)
	}
	if _, marker, fresh := versionRow(t, pool, qualified); marker == nil || fresh {
		t.Errorf("Migrate after a claim: marker %v, fresh %v", marker, fresh)
	}

	// The SQL for a name is the file with every name replaced.
	text, err := SchemaSQL("app schema", "concurrent")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, DefaultTable) || !strings.Contains(text, `"app schema"."concurrent_schema"`) || !strings.Contains(text, `CONSTRAINT "concurrent_disjoint"`) {
		t.Errorf("SchemaSQL:\n%s", text)
	}
	if def, _ := SchemaSQL("", ""); !strings.Contains(def, "CREATE TABLE IF NOT EXISTS \"randflake_blocks\" (") || !strings.Contains(def, "SELECT 2, NOT EXISTS") {
		t.Errorf("SchemaSQL for the defaults:\n%s", def)
	}
	if up, _ := UpgradeSQL("app schema", "concurrent"); strings.Contains(up, DefaultTable) || !strings.Contains(up, `ALTER TABLE "app schema"."concurrent" DROP COLUMN IF EXISTS used_until`) {
		t.Errorf("UpgradeSQL:\n%s", up)
	}

	// Another version: refused, and left alone.
	table := newTable(t, pool, "versioned")
	if _, err := pool.Exec(ctx, `UPDATE `+table+`_schema SET version = 3`); err != nil {
		t.Fatal(err)
	}
	if err := MigrateTable(ctx, pool, "", table); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Migrate of version 3: %v, want ErrSchemaVersion", err)
	} else {
		t.Logf("Migrate of a newer schema: %v", err)
	}
	s, _ = New(Config{Pool: pool, Secret: testSecret, Table: table, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew})
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Acquire on version 3: %v, want ErrSchemaVersion", err)
	} else {
		t.Logf("Acquire on a newer schema: %v", err)
	}
	if v, _, _ := versionRow(t, pool, table); v != 3 {
		t.Errorf("version after the refusals: %d", v)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+table+`_schema`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Acquire without a version row: %v, want ErrSchemaVersion", err)
	}
	if err := MigrateTable(ctx, pool, "", table); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Migrate without a version row: %v, want ErrSchemaVersion", err)
	}
	// A blocks table without its schema-version table is not touched.
	if _, err := pool.Exec(ctx, `DROP TABLE `+table+`_schema`); err != nil {
		t.Fatal(err)
	}
	if err := MigrateTable(ctx, pool, "", table); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Migrate of a blocks table without its version table: %v, want ErrSchemaVersion", err)
	} else {
		t.Logf("a blocks table alone: %v", err)
	}
}

// A version 1 schema is refused until Migrate upgrades it in place, from
// several processes at once: the rows and their claims stay, used_until
// goes, and the first claim waits out the longest promise a version 1
// holder can have recorded, once.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	pool, ctx := sharedPool(t, 30*time.Second)
	table := uniqueName("from_v1")
	n, _ := newNames("", table)
	if _, err := pool.Exec(ctx, n.sql(schemaV1)); err != nil {
		t.Fatal(err)
	}
	// Block 0-15 held by a version 1 holder, 16-31 free; both used up to
	// two seconds from now.
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node, used_until, holder, token, claimed_at, expires_at) VALUES
		(0, 15, extract(epoch FROM clock_timestamp())::bigint + 2, 'v1 holder', 'v1 token', clock_timestamp(), clock_timestamp() + interval '20 seconds'),
		(16, 31, extract(epoch FROM clock_timestamp())::bigint + 2, NULL, NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Pool: pool, Secret: testSecret, Table: table, Nodes: 16, LastNode: 31, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Acquire(ctx); !errors.Is(err, ErrSchemaVersion) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Acquire on version 1: %v, want ErrSchemaVersion asking for Migrate", err)
	} else {
		t.Logf("Acquire on version 1: %v", err)
	}
	for _, err := range concurrently(4, func() error { return MigrateTable(ctx, pool, "", table) }) {
		if err != nil {
			t.Fatalf("concurrent MigrateTable from version 1: %v", err)
		}
	}
	if err := MigrateTable(ctx, pool, "", table); err != nil {
		t.Fatal(err)
	}
	if v, marker, fresh := versionRow(t, pool, table); v != SchemaVersion || marker != nil || fresh {
		t.Fatalf("upgraded: version %d, marker %v, fresh %v; want %d, none, not fresh", v, marker, fresh, SchemaVersion)
	}
	var cols string
	if err := pool.QueryRow(ctx, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != "first_node,last_node,holder,token,claimed_at,expires_at,record" {
		t.Errorf("columns after the upgrade: %s", cols)
	}
	var rows, claims int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(token) FROM `+table).Scan(&rows, &claims); err != nil || rows != 2 || claims != 1 {
		t.Fatalf("rows after the upgrade: %d, claims %d (%v); want both rows and the version 1 claim", rows, claims, err)
	}
	t0 := time.Now()
	l, err := src.Acquire(ctx)
	waited := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Release(ctx, l, 0)
	// TTL + 2 x MaxClockSkew, rounded up to whole seconds.
	if l.FirstNode != 16 || l.Start < t0.Unix()+4 || waited < 3*time.Second {
		t.Errorf("first claim after the upgrade: %v after %v; want node IDs 16-31 from at least second %d", l, waited, t0.Unix()+4)
	}
	other, _ := New(cfg)
	if _, err := other.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Errorf("claim while the version 1 claim holds: %v, want ErrNoFreeNodes", err)
	}
	if _, marker, fresh := versionRow(t, pool, table); marker == nil || fresh {
		t.Errorf("after the first claim: marker %v, fresh %v", marker, fresh)
	}
	t.Logf("the first claim after the upgrade waited %v and starts at second %d (%d s after it began)", waited.Round(time.Millisecond), l.Start, l.Start-t0.Unix())
}

// Rows are checked, never trusted: a record that fails its check (forged,
// or written under another secret) is unknown history, waited out; a row
// that is not a range of node IDs (the table's checks dropped) is
// ErrCorrupt; a row of another block size is ErrFleetMismatch; neither
// leaves a claim behind. The table itself refuses both.
func TestRowsChecked(t *testing.T) {
	t.Parallel()
	pool, ctx := sharedPool(t, 30*time.Second)
	table := newTable(t, pool, "forged")
	cfg := Config{Pool: pool, Secret: testSecret, Table: table, Nodes: 1, LastNode: 1, TTL: testTTL, Horizon: testTTL, MaxClockSkew: testSkew}
	claims := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(token) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The table refuses impossible rows itself.
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node) VALUES (5, 2)`); err == nil || !strings.Contains(err.Error(), table+"_nodes") {
		t.Fatalf("inserting node IDs 5-2: %v, want the check constraint's violation", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node) VALUES (0, 0), (0, 1)`); err == nil {
		t.Fatal("inserting overlapping blocks succeeded")
	}

	// A first claim makes a marker; then a forged record (a well-formed
	// one, with its tag computed under another secret).
	src, _ := New(cfg)
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Release(ctx, l, l.Start-1); err != nil {
		t.Fatal(err)
	}
	otherCfg := cfg
	otherCfg.Secret = []byte("another-secret16")
	otherTable := newTable(t, pool, "forger")
	otherCfg.Table = otherTable
	forger, _ := New(otherCfg)
	fl, err := forger.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var forged string
	if err := pool.QueryRow(ctx, `SELECT record FROM `+otherTable+` WHERE first_node = $1`, fl.FirstNode).Scan(&forged); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET record = $1 WHERE first_node = $2`, forged, fl.FirstNode); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l, err = src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(t0); l.Start < t0.Unix()+4 || waited < 3*time.Second {
		t.Errorf("claim over a forged record: %v after %v; want the history waited out (from second %d on)", l, waited, t0.Unix()+4)
	}
	t.Logf("a record forged under another secret: the next claim waited %v", time.Since(t0).Round(time.Millisecond))
	if err := src.Release(ctx, l, l.Start-1); err != nil {
		t.Fatal(err)
	}

	// Rows that no process of this package writes, with the table's
	// checks dropped: refused, nothing claimed.
	if _, err := pool.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT `+table+`_nodes, DROP CONSTRAINT `+table+`_disjoint`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		first, last int64
		want        error
	}{
		{1, 0, ErrCorrupt},
		{1, randflake.MaxNode + 1, ErrCorrupt},
		{1, 2, lease.ErrFleetMismatch},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node) VALUES ($1, $2)
			ON CONFLICT (first_node) DO UPDATE SET last_node = $2`, c.first, c.last); err != nil {
			t.Fatal(err)
		}
		s, _ := New(cfg)
		if l, err := s.Acquire(ctx); !errors.Is(err, c.want) {
			t.Errorf("a row of node IDs %d-%d: Acquire gave %v, %v; want %v", c.first, c.last, l, err, c.want)
		} else {
			t.Logf("a row of node IDs %d-%d: %v", c.first, c.last, err)
		}
		if n := claims(); n != 0 {
			t.Errorf("a row of node IDs %d-%d: %d claims left behind", c.first, c.last, n)
		}
	}
}

// Source.Migrate creates the configured tables on a source opened from a
// DSN, after which it claims; a second call changes nothing.
func TestSourceMigrate(t *testing.T) {
	t.Parallel()
	srv := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(Config{DSN: srv.DSN(), Secret: testSecret, Table: uniqueName("source_migrated")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("Acquire before Migrate: %v, want ErrNoSchema", err)
	}
	for i := range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate %d: %v", i+1, err)
		}
	}
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after Migrate: %v", err)
	}
	if err := s.Release(ctx, l, l.Start-1); err != nil {
		t.Fatal(err)
	}
}
