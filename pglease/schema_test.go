package pglease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// Migrate is idempotent and safe to run concurrently; the file it runs is
// schema.sql with the names filled in; a schema of another version is
// refused by Migrate and by Acquire, and missing tables are a clear error.
func TestMigrate(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := New(Config{Pool: pool, Table: "never_migrated"})
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
	if _, err := pool.Exec(ctx, `CREATE SCHEMA "app schema"`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- MigrateTable(ctx, pool, "app schema", "concurrent")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent MigrateTable: %v", err)
		}
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'app schema' AND tablename IN ('concurrent', 'concurrent_schema')`).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("tables in the schema: %d, %v", tables, err)
	}
	src, err := New(Config{Pool: pool, Schema: "app schema", Table: "concurrent", TTL: testTTL, MaxClockSkew: testSkew})
	if err != nil {
		t.Fatal(err)
	}
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire on a table in a schema: %v", err)
	}
	if err := src.Release(ctx, l, 0); err != nil {
		t.Fatal(err)
	}

	// The SQL for a name is the file with every name replaced.
	text, err := SchemaSQL("app schema", "concurrent")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, DefaultTable) || !strings.Contains(text, `"app schema"."concurrent_schema"`) || !strings.Contains(text, `CONSTRAINT "concurrent_disjoint"`) {
		t.Errorf("SchemaSQL:\n%s", text)
	}
	if def, _ := SchemaSQL("", ""); !strings.Contains(def, "CREATE TABLE IF NOT EXISTS \"randflake_blocks\" (") || !strings.Contains(def, "VALUES (1)") {
		t.Errorf("SchemaSQL for the defaults:\n%s", def)
	}

	// Another version: refused, and left alone.
	table := newTable(t, pool, "versioned")
	if _, err := pool.Exec(ctx, `UPDATE `+table+`_schema SET version = 2`); err != nil {
		t.Fatal(err)
	}
	if err := MigrateTable(ctx, pool, "", table); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Migrate of version 2: %v, want ErrSchemaVersion", err)
	} else {
		t.Logf("Migrate of a newer schema: %v", err)
	}
	s, _ = New(Config{Pool: pool, Table: table, TTL: testTTL, MaxClockSkew: testSkew})
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Acquire on version 2: %v, want ErrSchemaVersion", err)
	} else {
		t.Logf("Acquire on a newer schema: %v", err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT version FROM `+table+`_schema`).Scan(&v); err != nil || v != 2 {
		t.Errorf("version after the refusals: %d, %v", v, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+table+`_schema`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Acquire without a version row: %v, want ErrSchemaVersion", err)
	}
}

// Every second read from the table is range-checked before any
// arithmetic: a used_until outside the lifetime of Randflake IDs (a forged
// row, with the table's own check dropped) is refused with ErrCorrupt and
// leaves nothing claimed; a block used up to the last second is never
// handed out again.
func TestUsedSecondsRangeChecked(t *testing.T) {
	t.Parallel()
	srv := server(t)
	pool := newPool(t, srv.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := newTable(t, pool, "forged")
	// The table refuses such values itself.
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node, used_until) VALUES (0, 0, 9223372036854775807)`)
	if err == nil || !strings.Contains(err.Error(), "forged_used") {
		t.Fatalf("inserting an impossible second: %v, want the check constraint's violation", err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT forged_used`); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int64{9223372036854775807, 9223372036854775806, -5, 0, randflake.Epoch - 1, randflake.MaxTimestamp + 1} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (first_node, last_node, used_until) VALUES (0, 0, $1)
			ON CONFLICT (first_node) DO UPDATE SET used_until = $1`, bad); err != nil {
			t.Fatal(err)
		}
		src, err := New(Config{Pool: pool, Table: table, Nodes: 1, LastNode: 1, TTL: testTTL, MaxClockSkew: testSkew})
		if err != nil {
			t.Fatal(err)
		}
		l, err := src.Acquire(ctx)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("used second %d: Acquire gave %v, %v; want ErrCorrupt", bad, l, err)
		}
		if bad == 0 {
			t.Logf("a forged row: %v", err)
		}
		var held int
		if err := pool.QueryRow(ctx, `SELECT count(token) FROM `+table).Scan(&held); err != nil || held != 0 {
			t.Errorf("used second %d: %d claims left behind (%v)", bad, held, err)
		}
	}

	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET used_until = $1`, int64(randflake.MaxTimestamp)); err != nil {
		t.Fatal(err)
	}
	src, _ := New(Config{Pool: pool, Table: table, Nodes: 1, LastNode: 1, TTL: testTTL, MaxClockSkew: testSkew})
	l, err := src.Acquire(ctx)
	if err != nil || l.FirstNode != 1 {
		t.Fatalf("with node 0 used up: %v, %v; want node 1", l, err)
	}
	other, _ := New(Config{Pool: pool, Table: table, Nodes: 1, LastNode: 1, TTL: testTTL, MaxClockSkew: testSkew})
	if l2, err := other.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Errorf("with node 0 used up and node 1 held: %v, %v; want ErrNoFreeNodes", l2, err)
	}
	// A forged second in a held row: the renewal refuses it.
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET used_until = 9223372036854775807 WHERE first_node = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Renew(ctx, l); !errors.Is(err, ErrCorrupt) {
		t.Errorf("renewal over a forged row: %v, want ErrCorrupt", err)
	}
	if err := src.Release(ctx, l, l.Start); err != nil {
		t.Fatal(err)
	}
}

// Source.Migrate creates the configured tables on a source opened from a
// DSN, after which it claims; a second call changes nothing.
func TestSourceMigrate(t *testing.T) {
	t.Parallel()
	srv := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(Config{DSN: srv.DSN(), Table: "source_migrated"})
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
