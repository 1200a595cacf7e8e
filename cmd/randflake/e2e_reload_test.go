package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// selfSigned returns a certificate for localhost valid from notBefore to
// notAfter, and its key, in PEM.
func selfSigned(t *testing.T, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "out of its time"},
		DNSNames:     []string{"localhost"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})
}

// waitMetric waits (15 s stretched by the measured slowdown) until the
// series of the operations listener's metrics reaches at least want.
func waitMetric(t *testing.T, p *serveProcess, ops, series string, want float64) {
	t.Helper()
	meter := slowdown.Start()
	limit := meter.Stretch(15 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		got := metric(t, ops, series)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, not %v, %v later (%s); logs:\n%s", series, got, want, limit, meter, p.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A reload never swaps the valid certificate for an expired one or one not
// yet valid: the current one stays for new connections, an error is
// logged and the refusal counted; a valid new certificate is taken as
// before. A tokens file that fails to reload (others may read it) is
// counted and logged, and the tokens in use stay.
func TestServeReloadRefusesCertificateOutOfItsTime(t *testing.T) {
	dir := t.TempDir()
	p, ops, s := memoryServeIn(t, dir)
	first := servedSerial(t, s, p.url)
	if first != s.serverCertSerial {
		t.Fatalf("serve started with certificate %s, not %s", first, s.serverCertSerial)
	}
	refusals := `randflake_reload_failures_total{file="tls",reason="certificate_not_valid"}`
	now := time.Now()
	for i, c := range []struct {
		what                string
		notBefore, notAfter time.Time
	}{
		{"expired", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)},
		{"not yet valid", now.Add(24 * time.Hour), now.Add(48 * time.Hour)},
	} {
		certPEM, keyPEM := selfSigned(t, c.notBefore, c.notAfter)
		writeAtomically(t, s.keyFile, keyPEM, 0o600)
		writeAtomically(t, s.certFile, certPEM, 0o644)
		waitMetric(t, p, ops, refusals, float64(i+1))
		if got := servedSerial(t, s, p.url); got != first {
			t.Errorf("after a reload of an %s certificate, new connections get certificate %s, not the valid %s", c.what, got, first)
		}
	}
	if !strings.Contains(p.logs.String(), `level=ERROR msg="TLS certificate not reloaded: the new one is not valid now; the current one stays"`) {
		t.Errorf("no error logged for the refused certificates; logs:\n%s", p.logs.String())
	}
	// A valid one is taken.
	next := s.ca.Server(t, "randflake-2")
	writeAtomically(t, s.keyFile, next.KeyPEM, 0o600)
	writeAtomically(t, s.certFile, next.CertPEM, 0o644)
	waitSerial(t, s, p, next.Cert.SerialNumber.String())

	// The tokens file readable by others: not reloaded, counted, logged
	// (a warning, as every failed reload of a file); the tokens in use
	// stay.
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("honest "+honestToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tokens, 0o644)
	waitMetric(t, p, ops, `randflake_reload_failures_total{file="issue_tokens",reason="error"}`, 1)
	if !strings.Contains(p.logs.String(), `level=WARN msg="issue tokens not reloaded; the current clients stay"`) {
		t.Errorf("no warning logged for the tokens file others can read; logs:\n%s", p.logs.String())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool()}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", p.url+"/v1/ids", nil)
	req.Header.Set("Authorization", "Bearer "+attackerToken)
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a token of the tokens in use, after a failed reload: %d, want 200", resp.StatusCode)
	}
}
