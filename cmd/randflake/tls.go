package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/randflake/randflake/privatefile"
)

// serve's TLS (--tls-cert-file, --tls-key-file, --tls-client-ca-file): the
// files are read at start, and again on SIGHUP and whenever their content
// changes (reload.go polls them), so that a certificate that cert-manager
// or the kubelet replaces, in place or by swapping a symbolic link, is
// served from the next handshake on. Connections already open keep the
// certificate they were made with. A reload that fails (a file missing or
// unreadable, a key that does not match, a CA file without certificates)
// keeps the current configuration, logs why and counts in
// randflake_reload_failures_total. So does a new certificate that is
// expired or not yet valid while the current one is valid: every
// verifying client would fail with it (at start, with nothing to keep,
// it is served with a warning).
//
// The certificate and CA files need not be secret, but must be trusted:
// they are read with privatefile.ReadPublic; the key is a private file,
// read with the checks of the secret file (privatefile.Read).
// Both follow the links of a Kubernetes Secret volume within its
// directory.

// maxPEMFile bounds each of the certificate, key and CA files.
const maxPEMFile = 1 << 20

// tlsFiles are the TLS files of serve and the configuration made of them.
type tlsFiles struct {
	certFile, keyFile, caFile string
	now                       func() time.Time

	current atomic.Pointer[tls.Config] // what handshakes get now

	reloadState // loaded: the digest of the files current was made of
}

// loadTLSFiles reads the files and makes the first configuration.
func loadTLSFiles(certFile, keyFile, caFile string, log *slog.Logger) (*tlsFiles, error) {
	f := &tlsFiles{certFile: certFile, keyFile: keyFile, caFile: caFile, now: time.Now, reloadState: reloadState{
		log: log, file: reloadTLS,
		notReloaded: "TLS files not reloaded; the current certificate stays", unchanged: "TLS files unchanged",
	}}
	cfg, digest, err := f.read()
	if err != nil {
		return nil, err
	}
	f.current.Store(cfg)
	f.took(digest)
	f.logLoaded("TLS certificate loaded", cfg, "")
	return f, nil
}

// serverConfig is the tls.Config of the listener: each handshake gets the
// current configuration. TLS 1.2 is the oldest version taken, and ALPN
// offers HTTP/2 and HTTP/1.1.
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.current.Load(), nil
		},
	}
}

// reload reads the files again. If their content changed and makes a
// valid configuration, it becomes current; if it changed and does not,
// the current one stays and the reason is logged, once for each content.
// With force (SIGHUP), the outcome is logged whatever it is.
func (f *tlsFiles) reload(trigger string, force bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, digest, err := f.read()
	if f.settle(digest, err, trigger, force) {
		return
	}
	if !validNow(cfg, f.now()) && validNow(f.current.Load(), f.now()) {
		// A valid certificate is never swapped for one that every
		// verifying client refuses.
		leaf, cur := cfg.Certificates[0].Leaf, f.current.Load().Certificates[0].Leaf
		if f.fail(digest, force) {
			f.log.Error("TLS certificate not reloaded: the new one is not valid now; the current one stays", "trigger", trigger,
				"not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339),
				"subject", leaf.Subject.String(), "current_not_after", cur.NotAfter.UTC().Format(time.RFC3339))
		}
		f.failures.failed(reloadTLS, reasonValidity)
		return
	}
	f.current.Store(cfg)
	f.took(digest)
	f.logLoaded("TLS certificate reloaded", cfg, trigger)
}

// logLoaded logs what cfg serves, and warns of a certificate out of its
// validity period: served all the same at start, with nothing to keep,
// or in place of a current one that is not valid either (reload refuses
// it for a valid one).
func (f *tlsFiles) logLoaded(msg string, cfg *tls.Config, trigger string) {
	leaf := cfg.Certificates[0].Leaf
	attrs := []any{"subject", leaf.Subject.String(), "dns_names", strings.Join(leaf.DNSNames, ","),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_certificates", cfg.ClientAuth == tls.RequireAndVerifyClientCert}
	if trigger != "" {
		attrs = append(attrs, "trigger", trigger)
	}
	f.log.Info(msg, attrs...)
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		f.log.Warn("the TLS certificate is not valid now", "not_before", leaf.NotBefore.UTC().Format(time.RFC3339),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// validNow reports whether cfg's certificate is within its validity
// period at now.
func validNow(cfg *tls.Config, now time.Time) bool {
	leaf := cfg.Certificates[0].Leaf
	return !now.Before(leaf.NotBefore) && !now.After(leaf.NotAfter)
}

// read reads the files and makes a configuration of them. The digest
// covers the content read, whether or not it made one.
func (f *tlsFiles) read() (*tls.Config, [sha256.Size]byte, error) {
	h := sha256.New()
	certPEM, err := readPublicFile(f.certFile)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("--tls-cert-file: %w", err)
	}
	keyPEM, err := privatefile.Read(f.keyFile, maxPEMFile)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("--tls-key-file: %w", err)
	}
	defer clear(keyPEM)
	var caPEM []byte
	if f.caFile != "" {
		if caPEM, err = readPublicFile(f.caFile); err != nil {
			return nil, [sha256.Size]byte{}, fmt.Errorf("--tls-client-ca-file: %w", err)
		}
	}
	for _, b := range [][]byte{certPEM, keyPEM, caPEM} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var digest [sha256.Size]byte
	h.Sum(digest[:0])

	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The message of crypto/tls names what is wrong (no PEM block,
		// a key that does not match), never the key itself.
		return nil, digest, fmt.Errorf("%s and %s: %w", f.certFile, f.keyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.caFile != "" {
		pool, err := parseCAs(caPEM)
		if err != nil {
			return nil, digest, fmt.Errorf("--tls-client-ca-file %s: %w", f.caFile, err)
		}
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	return cfg, digest, nil
}

// readPublicFile reads a certificate or CA file, up to maxPEMFile bytes,
// with the rules of privatefile.ReadPublic: a regular file of this user
// or root that no one else can write, reached through links (a Kubernetes
// Secret volume's) that stay inside its directory. Anyone may read it.
func readPublicFile(path string) ([]byte, error) {
	return privatefile.ReadPublic(path, maxPEMFile)
}

// parseCAs parses the CERTIFICATE blocks of a CA file into a pool; a file
// without one, or with a block that is not a certificate, is an error.
func parseCAs(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q: only CERTIFICATE blocks go here", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}
