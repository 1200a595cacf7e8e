package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
	"github.com/randflake/randflake/pglease/pgtest"
)

// The end-to-end tests of serve on a PostgreSQL server that speaks SSL
// with a certificate the test made and wants a password: the real binary
// connects with sslmode=verify-full, the password coming from
// --postgres-password-file (or its variable) or from $PGPASSFILE, never
// from the DSN.

// securedPostgres is a PostgreSQL server with SSL on and a role that
// logs in with a password.
type securedPostgres struct {
	srv        *pgtest.Server
	ca         *tlstest.CA
	caFile     string
	host, port string
}

const (
	pgRole     = "app"
	pgPassword = "pg-pw-never-shown-6620"
)

// startSecuredPostgres starts a server for t with SSL on (a server
// certificate for 127.0.0.1 from a new CA, whose certificate is written to
// dir) and the role pgRole, which must give pgPassword.
func startSecuredPostgres(t *testing.T, dir string) *securedPostgres {
	t.Helper()
	srv := pgtest.New(t)
	ca := tlstest.NewCA(t, "postgres CA")
	pair := ca.Server(t, "postgres")
	if err := srv.EnableSSL(pair.CertPEM, pair.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddPasswordRole(pgRole, pgPassword); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "postgres-ca.crt")
	writeFileT(t, caFile, ca.PEM, 0o644)
	host, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return &securedPostgres{srv: srv, ca: ca, caFile: caFile, host: host, port: port}
}

// dsn is a connection string for pgRole without a password, verifying
// the server's certificate against rootCert.
func (p *securedPostgres) dsn(rootCert string) string {
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=5",
		p.host, p.port, pgRole, pgRole, rootCert)
}

// sslConnections counts the connections of pgRole with and without SSL.
// The server is the test's own, and pgRole only serve's.
func (p *securedPostgres) sslConnections(t *testing.T) (withSSL, without int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = $1`, pgRole).Scan(&withSSL, &without)
	if err != nil {
		t.Fatal(err)
	}
	return withSSL, without
}

// serve on PostgreSQL over SSL with sslmode=verify-full and the password
// from --postgres-password-file, in a Kubernetes Secret volume: two
// processes, one configured by flags and one by variables, claim disjoint
// node IDs, every connection of theirs uses SSL, and a third process
// reads the password from $PGPASSFILE. A CA that did not sign the
// server's certificate, a wrong password (from the file or from
// $PGPASSFILE) and a $PGPASSFILE others may read each end serve with
// status 1 and a message naming what failed. No output of any run, nor
// the metrics, holds a password.
func TestServePostgresTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	pg := startSecuredPostgres(t, dir)
	const wrongPassword = "wrong-pg-pw-never-shown-2291"
	vol := newKubeletVolume(t, filepath.Join(dir, "volume"), 0o600, -1, map[string]string{
		"password": pgPassword + "\n", "wrong": wrongPassword + "\n",
	})
	var out outputs
	defer out.check(t, pgPassword, wrongPassword)

	common := []string{"--node-source", "postgres", "--claim", "4"}
	flags := slices.Concat(common, []string{"--postgres-dsn", pg.dsn(pg.caFile), "--postgres-password-file", vol.path("password")})
	env := append(slices.Clone(secretEnv), "RANDFLAKE_POSTGRES_DSN="+pg.dsn(pg.caFile), "RANDFLAKE_POSTGRES_PASSWORD_FILE="+vol.path("password"))

	a := startServeSecured(t, secretEnv, append([]string{"--postgres-migrate"}, flags...)...)
	b := startServeSecured(t, env, common...)
	ids := disjointIDs(t, secretEnv, 2000, a, b)
	withSSL, without := pg.sslConnections(t)
	if withSSL == 0 || without != 0 {
		t.Errorf("connections of %s: %d with SSL, %d without; want some, all with SSL", pgRole, withSSL, without)
	}
	out.add(scrapeText(t, a.url+"/metrics"))
	t.Logf("%d IDs from 2 processes on PostgreSQL over SSL (verify-full), none twice, no node ID shared; %d connections, all SSL", len(ids), withSSL)

	// $PGPASSFILE, as libpq reads it: HOST:PORT:DATABASE:USER:PASSWORD.
	passFile := filepath.Join(dir, "pgpass")
	writeFileT(t, passFile, []byte(fmt.Sprintf("%s:%s:%s:%s:%s\n", pg.host, pg.port, pgRole, pgRole, pgPassword)), 0o600)
	c := startServeSecured(t, append(slices.Clone(secretEnv), "PGPASSFILE="+passFile), slices.Concat(common, []string{"--postgres-dsn", pg.dsn(pg.caFile)})...)
	ids = append(ids, fetch(t, c, 2000)...)
	if checkUnique(t, ids, 6000, nil); t.Failed() {
		t.FailNow()
	}
	for _, p := range []*serveProcess{a, b, c} {
		stop(t, p)
		out.add(p.logs.String())
	}

	t.Run("wrong CA", func(t *testing.T) {
		other := tlstest.NewCA(t, "another CA")
		otherFile := filepath.Join(t.TempDir(), "other-ca.crt")
		writeFileT(t, otherFile, other.PEM, 0o644)
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--postgres-dsn", pg.dsn(otherFile), "--postgres-password-file", vol.path("password")})...)
		out.add(msg)
		wantAll(t, "serve with a CA that did not sign the server's certificate", msg, "postgres:", "tls", "certificate signed by unknown authority", "sslrootcert=")
	})
	t.Run("wrong password", func(t *testing.T) {
		msg := serveFails(t, secretEnv, slices.Concat(common, []string{"--postgres-dsn", pg.dsn(pg.caFile), "--postgres-password-file", vol.path("wrong")})...)
		out.add(msg)
		wantAll(t, "serve with a wrong password", msg, "postgres:", "password authentication failed", pgRole, "--postgres-password-file")
	})
	t.Run("wrong password in PGPASSFILE", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "pgpass")
		writeFileT(t, bad, []byte(fmt.Sprintf("*:*:*:%s:%s\n", pgRole, wrongPassword)), 0o600)
		msg := serveFails(t, append(slices.Clone(secretEnv), "PGPASSFILE="+bad), slices.Concat(common, []string{"--postgres-dsn", pg.dsn(pg.caFile)})...)
		out.add(msg)
		wantAll(t, "serve with a wrong password in $PGPASSFILE", msg, "postgres:", "password authentication failed")
	})
	t.Run("PGPASSFILE readable by others", func(t *testing.T) {
		open := filepath.Join(t.TempDir(), "pgpass")
		writeFileT(t, open, []byte(fmt.Sprintf("*:*:*:%s:%s\n", pgRole, pgPassword)), 0o644)
		msg := serveFails(t, append(slices.Clone(secretEnv), "PGPASSFILE="+open), slices.Concat(common, []string{"--postgres-dsn", pg.dsn(pg.caFile)})...)
		out.add(msg)
		wantAll(t, "serve with a $PGPASSFILE others may read", msg, "$PGPASSFILE", open, "accessible to group or others")
	})
	t.Run("file wins over PGPASSFILE", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "pgpass")
		writeFileT(t, bad, []byte(fmt.Sprintf("*:*:*:%s:%s\n", pgRole, wrongPassword)), 0o600)
		p := startServeSecured(t, append(slices.Clone(secretEnv), "PGPASSFILE="+bad, "PGPASSWORD="+wrongPassword), flags...)
		checkUnique(t, fetch(t, p, 100), 100, nil)
		stop(t, p)
		out.add(p.logs.String())
	})
}

// --postgres-password-file is refused without --postgres-dsn and beside
// a password in the DSN (status 2: which one is meant?), in either form
// of DSN, from flags or variables.
func TestPostgresPasswordFileRefused(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "password")
	writeFileT(t, file, []byte("pw-never-shown-0042\n"), 0o600)
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"without a DSN", nil, []string{"--postgres-password-file", file}, "--postgres-password-file is for --postgres-dsn"},
		{"password in a key=value DSN", nil, []string{"--postgres-dsn", "host=127.0.0.1 password = 'a b\\'c' user=x", "--postgres-password-file", file}, "give the password once"},
		{"password in a URL", nil, []string{"--postgres-dsn", "postgres://x:pw@127.0.0.1/db", "--postgres-password-file", file}, "give the password once"},
		{"password in a URL's query", nil, []string{"--postgres-dsn", "postgresql://x@127.0.0.1/db?password=pw", "--postgres-password-file", file}, "give the password once"},
		{"variables", []string{"RANDFLAKE_POSTGRES_DSN=host=h password=pw", "RANDFLAKE_POSTGRES_PASSWORD_FILE=" + file}, nil, "$RANDFLAKE_POSTGRES_PASSWORD_FILE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBinaryTimeout(t, 20*time.Second, append(slices.Clone(secretEnv), c.env...), append([]string{"serve", "--listen", "127.0.0.1:0"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, want 2 and %q in:\n%s", r.code, c.want, r.stderr)
			}
			if strings.Contains(r.stderr, "pw-never-shown") {
				t.Errorf("the password file's content is shown:\n%s", r.stderr)
			}
		})
	}
}

// dsnHasPassword finds a password in either form of connection string,
// quoted, escaped or not, and nothing else.
func TestPostgresDSNHasPassword(t *testing.T) {
	for dsn, want := range map[string]bool{
		"host=h user=u":                            false,
		"host=h password=p":                        true,
		"password=p":                               true,
		"host=h  password = 'a b' user=u":          true,
		`host=h application_name='password=x'`:     false,
		`host=h application_name=pass\ password=x`: false,
		"host=h passfile=/x":                       false,
		"postgres://u@h/db":                        false,
		"postgres://u:p@h/db":                      true,
		"postgres://u:@h/db":                       true,
		"postgresql://u@h/db?password=p":           true,
		"postgresql://u@h/db?sslmode=verify-full":  false,
	} {
		if got := dsnHasPassword(dsn); got != want {
			t.Errorf("dsnHasPassword(%q) = %v, want %v", dsn, got, want)
		}
	}
}
