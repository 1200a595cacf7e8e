package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/pglease/pgtest"
)

// serve --node-source postgres against a real PostgreSQL server: without
// the tables it refuses and names the fix; with --postgres-migrate the
// first process creates them; processes claim disjoint node IDs, release
// them on SIGTERM, and a later process takes them over without a
// duplicate. The DSN comes from the variable and carries a password that
// no output may show.
func TestServeWithPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL: not in -short")
	}
	t.Parallel()
	srv := pgtest.New(t)
	const password = "pw-never-shown-7391"
	env := append(slices.Clone(secretEnv), "RANDFLAKE_POSTGRES_DSN="+srv.DSN()+" password="+password)
	args := []string{"--node-source", "postgres", "--claim", "4"}
	var outputs []string
	defer func() {
		for _, out := range outputs {
			if strings.Contains(out, password) {
				t.Errorf("the DSN's password appears in serve's output:\n%s", out)
			}
		}
	}()

	r := runBinaryTimeout(t, 30*time.Second, env, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	outputs = append(outputs, r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, "--postgres-migrate") {
		t.Fatalf("serve without the tables: exit %d, want 1 and a hint of --postgres-migrate: %q\n%s", r.code, r.stderr, srv.LogTail())
	}

	a := startServeEnv(t, env, append([]string{"--postgres-migrate"}, args...)...)
	b := startServeEnv(t, env, args...)
	idsA, idsB := fetch(t, a, 2000), fetch(t, b, 2000)
	all := append(slices.Clone(idsA), idsB...)
	if checkUnique(t, all, 4000, nil); t.Failed() {
		t.FailNow()
	}
	na, nb := nodesOf(t, secretEnv, idsA), nodesOf(t, secretEnv, idsB)
	if len(na) > 4 || len(nb) > 4 {
		t.Fatalf("more node IDs than claimed: %v %v", na, nb)
	}
	for n := range na {
		if nb[n] > 0 {
			t.Fatalf("node %d used by both processes", n)
		}
	}
	if !strings.Contains(a.logs.String(), "postgres randflake_blocks") {
		t.Errorf("the serving line does not name the source: %s", a.logs.String())
	}
	stop(t, a)
	c := startServeEnv(t, env, args...)
	idsC := fetch(t, c, 2000)
	all = append(all, idsC...)
	if checkUnique(t, all, 6000, nil); t.Failed() {
		t.FailNow() // after the takeover of a's block
	}
	stop(t, b)
	stop(t, c)
	outputs = append(outputs, a.logs.String(), b.logs.String(), c.logs.String())
	t.Logf("%d IDs from 3 processes on PostgreSQL, none twice", len(all))

	// Without an explicit secret it refuses to start.
	r = runBinary(t, "", []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir(), "RANDFLAKE_POSTGRES_DSN=" + srv.DSN()}, "serve", "--listen", "127.0.0.1:0")
	if r.code != 2 || !strings.Contains(r.stderr, "shared secret") {
		t.Fatalf("serve on PostgreSQL without a secret: %d %q", r.code, r.stderr)
	}
}

// A process started while PostgreSQL is down waits for it, says so, and
// serves once the server is up; a refused login ends it at once.
func TestServeWaitsForPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL: not in -short")
	}
	t.Parallel()
	srv := pgtest.New(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	env := append(slices.Clone(secretEnv), "RANDFLAKE_POSTGRES_DSN="+srv.DSN())
	p := spawnServe(t, env, "--postgres-migrate")
	waitLog(t, p, regexp.MustCompile(`still waiting for node IDs from PostgreSQL`), 10*time.Second)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	m := waitLog(t, p, addrRE, 30*time.Second)
	p.url = "http://" + m[1] + m[2]
	checkUnique(t, fetch(t, p, 1000), 1000, nil)
	stop(t, p)

	r := runBinaryTimeout(t, 30*time.Second, slices.Clone(secretEnv), "serve", "--listen", "127.0.0.1:0",
		"--postgres-dsn", strings.Replace(srv.DSN(), "user="+pgtest.User, "user=nobody_here", 1))
	if r.code != 1 || !strings.Contains(r.stderr, "nobody_here") {
		t.Fatalf("serve with a role the server refuses: exit %d, want 1 naming the role: %q", r.code, r.stderr)
	}
}
