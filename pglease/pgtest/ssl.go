package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SSL and passwords: a test of a client's TLS or authentication turns them
// on in a running server. [Server.EnableSSL] installs a server certificate
// and sets ssl = on; [Server.AddPasswordRole] makes a role that must log in
// with its password over TCP. The harness's own role, [User], stays
// trusted, so that [Server.DSN] keeps working for the test and for
// [Server.Start].

// EnableSSL installs certPEM and keyPEM (PEM) as the server's certificate
// and key, files in its data directory that only the server's user may
// read, and turns SSL on (ALTER SYSTEM SET ssl = on, then a configuration
// reload). It returns once a new connection can use SSL, within 30
// seconds. Clients verify the certificate against the CA that issued it,
// with sslmode=verify-full and sslrootcert=FILE.
func (s *Server) EnableSSL(certPEM, keyPEM []byte) error {
	data := filepath.Join(s.dir, "data")
	for _, f := range []struct {
		name string
		b    []byte
	}{{"server.crt", certPEM}, {"server.key", keyPEM}} {
		if err := s.writeServerFile(filepath.Join(data, f.name), f.b); err != nil {
			return fmt.Errorf("pgtest: EnableSSL: %w", err)
		}
	}
	err := s.exec("ALTER SYSTEM SET ssl_cert_file = 'server.crt'",
		"ALTER SYSTEM SET ssl_key_file = 'server.key'",
		"ALTER SYSTEM SET ssl = on",
		"SELECT pg_reload_conf()")
	if err != nil {
		return fmt.Errorf("pgtest: EnableSSL: %w", err)
	}
	// The reload is asynchronous: wait until a new connection gets SSL.
	return s.until("SSL to be on", func(ctx context.Context, c *pgx.Conn) (bool, error) {
		var on bool
		err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&on)
		return on, err
	}, "sslmode=require")
}

// AddPasswordRole creates a role that may log in with password, and owns
// a database of its own of the same name (where it may create tables),
// and requires a password of every role but [User] on TCP connections
// (scram-sha-256); [User] stays trusted. It returns once the server
// enforces it, within 30 seconds.
func (s *Server) AddPasswordRole(role, password string) error {
	if role == "" || role == User || strings.ContainsAny(role, `"'\ `) || strings.ContainsRune(password, 0) {
		return fmt.Errorf("pgtest: AddPasswordRole: role %q: want a plain name other than %s", role, User)
	}
	ident := pgx.Identifier{role}.Sanitize()
	lit := "'" + strings.ReplaceAll(password, "'", "''") + "'"
	if err := s.exec("SET password_encryption = 'scram-sha-256'",
		"CREATE ROLE "+ident+" LOGIN PASSWORD "+lit,
		"CREATE DATABASE "+ident+" OWNER "+ident); err != nil {
		return fmt.Errorf("pgtest: AddPasswordRole: %w", err)
	}
	hba := strings.Join([]string{
		"# written by pgtest.AddPasswordRole",
		"local all all trust",
		"host all " + User + " 127.0.0.1/32 trust",
		"host all " + User + " ::1/128 trust",
		"host all all 127.0.0.1/32 scram-sha-256",
		"host all all ::1/128 scram-sha-256",
		"host replication " + User + " 127.0.0.1/32 trust",
		"",
	}, "\n")
	if err := s.writeServerFile(filepath.Join(s.dir, "data", "pg_hba.conf"), []byte(hba)); err != nil {
		return fmt.Errorf("pgtest: AddPasswordRole: %w", err)
	}
	if err := s.exec("SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgtest: AddPasswordRole: %w", err)
	}
	// Wait until the server reads the new rules: a login without the
	// password is then refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := strings.NewReplacer("user="+User, "user="+role, "dbname="+Database, "dbname="+role).Replace(s.DSN())
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			var pgErr interface{ SQLState() string }
			if errors.As(err, &pgErr) && pgErr.SQLState() == "28P01" {
				return nil // password authentication failed: enforced
			}
		} else {
			c.Close(context.Background())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: AddPasswordRole: passwords not enforced after 30s (last: %v)\n%s", err, s.LogTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeServerFile writes a file of the server's data directory, readable
// by the server's user only.
func (s *Server) writeServerFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(tmp, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// exec runs statements, one at a time, as [User].
func (s *Server) exec(stmts ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(q, " PASSWORD ", 2)[0], err)
		}
	}
	return nil
}

// connect connects as [User] (Server.DSN), trying again until ctx ends:
// each try has the DSN's connect_timeout of 2 s, which a loaded machine's
// server (a backend forked for each connection) can miss. The error is
// the last try's.
func (s *Server) connect(ctx context.Context) (*pgx.Conn, error) {
	for {
		c, err := pgx.Connect(ctx, s.DSN())
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// until connects as [User], with extra added to the DSN, until ok says
// yes, within 30 seconds.
func (s *Server) until(what string, ok func(context.Context, *pgx.Conn) (bool, error), extra string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := strings.Replace(s.DSN(), "sslmode=disable", extra, 1)
	var last error
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			var done bool
			done, err = ok(ctx, c)
			c.Close(context.Background())
			if err == nil && done {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: waiting for %s: not after 30s (last: %v)\n%s", what, last, s.LogTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
