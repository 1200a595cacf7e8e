package pgtest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/randflake/randflake/pglease/pgtest"
)

// testCA is a certificate authority for the test: its certificate in
// PEM, and a server certificate for 127.0.0.1 it signed, with its key.
func testCA(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, key := newKey(), newKey()
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "postgres"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// EnableSSL makes the server speak SSL with the certificate given: a
// client verifying it against its CA (verify-full) gets an SSL session.
// AddPasswordRole then makes a role log in with its password only, while
// the harness's role stays trusted.
func TestEnableSSLAndPasswordRole(t *testing.T) {
	s := pgtest.New(t)
	caPEM, certPEM, keyPEM := testCA(t)
	if err := s.EnableSSL(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPasswordRole("app", "app-pw"); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app := strings.NewReplacer("user="+pgtest.User, "user=app", "dbname="+pgtest.Database, "dbname=app",
		"sslmode=disable", "sslmode=verify-full sslrootcert="+caFile).Replace(s.DSN())

	c, err := pgx.Connect(ctx, app+" password=app-pw")
	if err != nil {
		t.Fatalf("app over verify-full with its password: %v", err)
	}
	var ssl bool
	var user string
	if err := c.QueryRow(ctx, "SELECT ssl, current_user FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl, &user); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if !ssl || user != "app" {
		t.Errorf("session: ssl %v, user %q; want SSL as app", ssl, user)
	}
	// The role may create tables in its database.
	c, err = pgx.Connect(ctx, app+" password=app-pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Errorf("app creating a table in its database: %v", err)
	}
	c.Close(ctx)

	var pgErr *pgconn.PgError
	if _, err := pgx.Connect(ctx, app+" password=wrong"); !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("app with a wrong password: %v, want SQLSTATE 28P01", err)
	}
	if _, err := pgx.Connect(ctx, app); !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("app without a password: %v, want SQLSTATE 28P01", err)
	}
	// The harness's role is still trusted, with or without SSL.
	for _, dsn := range []string{s.DSN(), strings.Replace(s.DSN(), "sslmode=disable", "sslmode=verify-full sslrootcert="+caFile, 1)} {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("%s: %v", dsn, err)
			continue
		}
		c.Close(ctx)
	}
	// Another CA's certificate is not this server's.
	otherCA, _, _ := testCA(t)
	other := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(other, otherCA, 0o644); err != nil {
		t.Fatal(err)
	}
	var verr x509.UnknownAuthorityError
	_, err = pgx.Connect(ctx, strings.Replace(app, caFile, other, 1)+" password=app-pw")
	if !errors.As(err, &verr) {
		t.Errorf("verify-full against another CA: %v, want an unknown authority", err)
	}
}
