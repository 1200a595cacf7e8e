package pgtest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/randflake/randflake/pglease/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// query connects to dsn and returns the server's answer to SELECT 41 + 1.
func query(t *testing.T, dsn string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	c, err := pgx.Connect(ctx, dsn)
	if err == nil {
		defer c.Close(ctx)
		err = c.QueryRow(ctx, "SELECT 41 + 1").Scan(&n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// connect connects to dsn within ctx; the connection is closed when t
// ends.
func connect(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// primaryWithTable starts a server of the test's own holding a table
// "kept" with one row, and returns a context bounding the test to 60
// seconds, the server and a connection to it.
func primaryWithTable(t *testing.T) (context.Context, *pgtest.Server, *pgx.Conn) {
	t.Helper()
	p := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pc := connect(ctx, t, p.DSN())
	if _, err := pc.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	return ctx, p, pc
}

// A server accepts connections once started, refuses them when stopped,
// accepts them again on the same address after a restart, keeps its data
// across it, and Close removes its directory.
func TestServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL: not in -short")
	}
	s, err := pgtest.Start()
	if errors.Is(err, pgtest.ErrNotFound) && !pgtest.Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if _, err := os.Stat(s.Dir()); err != nil {
		t.Fatalf("server directory: %v", err)
	}
	if n := query(t, s.DSN()); n != 42 {
		t.Fatalf("SELECT 41 + 1 = %d", n)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)

	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if c, err := pgx.Connect(ctx, s.DSN()); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Errorf("address %s after the restart, was %s", s.Addr(), addr)
	}
	if n := query(t, s.DSNAt(addr)); n != 42 {
		t.Fatalf("after the restart, SELECT 41 + 1 = %d", n)
	}
	c, err = pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Fatalf("row after the restart: %d, %v", v, err)
	}
	c.Close(ctx)

	dir := s.Dir()
	s.Close()
	closed = true
	s.Close() // a second Close does nothing
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server directory after Close: %v", err)
	}
	if err := s.Start(); err == nil {
		t.Error("Start of a closed server succeeded")
	}
}

// A replica follows its primary, read-only; promoted after its primary
// stopped, it accepts writes on a new timeline, with the data it had.
func TestReplicaPromote(t *testing.T) {
	t.Parallel()
	ctx, p, pc := primaryWithTable(t)
	timeline := func(c *pgx.Conn) string {
		t.Helper()
		var tl string
		if err := c.QueryRow(ctx, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)").Scan(&tl); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	if tl := timeline(pc); tl != "00000001" {
		t.Fatalf("a new server's timeline: %s", tl)
	}
	r := pgtest.NewReplica(t, p)
	if r.Addr() == p.Addr() {
		t.Fatalf("the replica listens on its primary's address %s", r.Addr())
	}
	if _, err := pc.Exec(ctx, "INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	rc := connect(ctx, t, r.DSN())
	var n int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := rc.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 || time.Now().After(deadline) {
			break
		}
	}
	if n != 2 {
		t.Fatalf("the replica has %d rows 20s after the primary wrote 2", n)
	}
	if _, err := rc.Exec(ctx, "INSERT INTO kept VALUES (3)"); err == nil {
		t.Fatal("a replica accepted a write")
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Exec(ctx, "INSERT INTO kept VALUES (3)"); err != nil {
		t.Fatalf("write after the promotion: %v", err)
	}
	if tl := timeline(rc); tl != "00000002" {
		t.Errorf("the promoted replica's timeline: %s, want 00000002", tl)
	}
}

// A replica stopped and made to forget its primary replays nothing more
// when started again, though its primary runs and writes: promoted, it
// holds the data it had when it stopped.
func TestUnfollow(t *testing.T) {
	t.Parallel()
	ctx, p, pc := primaryWithTable(t)
	r := pgtest.NewReplica(t, p)
	if err := r.Unfollow(); err == nil {
		t.Fatal("Unfollow of a running replica succeeded")
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Unfollow(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, "INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	rc := connect(ctx, t, r.DSN())
	var n int
	if err := rc.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the promoted copy has %d rows (%v), want the 1 it had when it stopped", n, err)
	}
}

// Shared returns the one server Main started, to every test.
func TestShared(t *testing.T) {
	t.Parallel()
	s := pgtest.Shared(t)
	if s != pgtest.Shared(t) {
		t.Fatal("two shared servers")
	}
	if n := query(t, s.DSN()); n != 42 {
		t.Fatalf("SELECT 41 + 1 = %d", n)
	}
}

// Find looks only in $RANDFLAKE_PGLEASE_BIN when it is set, and says how
// to install the binaries when they are not there.
func TestFindEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(pgtest.BinEnv, dir)
	_, err := pgtest.Find()
	if !errors.Is(err, pgtest.ErrNotFound) {
		t.Fatalf("Find with an empty $%s: %v, want ErrNotFound", pgtest.BinEnv, err)
	}
	t.Log(err)
	if _, err := pgtest.Start(); !errors.Is(err, pgtest.ErrNotFound) {
		t.Fatalf("Start with an empty $%s: %v, want ErrNotFound", pgtest.BinEnv, err)
	}
}

func TestRequired(t *testing.T) {
	for ci, want := range map[string]bool{"": false, "false": false, "0": false, "true": true, "1": true, "yes": true} {
		t.Setenv("CI", ci)
		if got := pgtest.Required(); got != want {
			t.Errorf("CI=%q: Required() = %v, want %v", ci, got, want)
		}
	}
}
