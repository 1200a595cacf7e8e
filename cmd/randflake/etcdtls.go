package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/privatefile"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A secured etcd (--etcd-cacert, --etcd-cert, --etcd-key, --etcd-user,
// --etcd-password-file): the client speaks TLS, trusting the CA file's
// certificates (else the system's), presents a client certificate if one
// is given, and authenticates as a user whose password is read from a
// file. The CA and certificate files are read with
// privatefile.ReadPublic, the key and the password file with
// privatefile.Read: all may lie in a Kubernetes Secret volume.
//
// A process started before its etcd waits for it, as without these flags;
// but a TLS handshake that fails (a server certificate the CA does not
// vouch for, a client certificate the server refuses, a server that does
// not speak TLS) and a refused user or password end it at once, with an
// error naming what failed. The password never appears in a log line or
// an error.

// maxPasswordFile bounds --etcd-password-file and --postgres-password-file.
const maxPasswordFile = 4096

// etcdSecurity are the flags of a secured etcd.
type etcdSecurity struct {
	cacert, cert, key  string
	user, passwordFile string
}

func (s *etcdSecurity) register(fs *flag.FlagSet) {
	fs.StringVar(&s.cacert, "etcd-cacert", "", "with --etcd: PEM file of the CAs that sign etcd's server certificate (default: the system's); endpoints use TLS")
	fs.StringVar(&s.cert, "etcd-cert", "", "with --etcd: PEM file of the client certificate shown to etcd (with --etcd-key); endpoints use TLS")
	fs.StringVar(&s.key, "etcd-key", "", "with --etcd: PEM file of the client certificate's private key (a private file, as the secret)")
	fs.StringVar(&s.user, "etcd-user", "", "with --etcd: the etcd user to authenticate as (with --etcd-password-file)")
	fs.StringVar(&s.passwordFile, "etcd-password-file", "", "with --etcd: file holding --etcd-user's password (a private file, as the secret; trailing newlines are ignored)")
}

// usesTLS reports whether a TLS flag is set.
func (s *etcdSecurity) usesTLS() bool { return s.cacert != "" || s.cert != "" || s.key != "" }

// set reports whether any of the flags is set.
func (s *etcdSecurity) set() bool { return s.usesTLS() || s.user != "" || s.passwordFile != "" }

// check returns a usage error for flags that do not go together: each
// needs --etcd, the certificate needs its key and the user a password
// file (and the other way round), and TLS excludes plain http://
// endpoints.
func (s *etcdSecurity) check(endpoints string) error {
	switch {
	case endpoints == "" && s.set():
		return usagef("--etcd-cacert, --etcd-cert, --etcd-key, --etcd-user and --etcd-password-file are for --etcd")
	case (s.cert == "") != (s.key == ""):
		return usagef("--etcd-cert and --etcd-key go together")
	case (s.user == "") != (s.passwordFile == ""):
		return usagef("--etcd-user and --etcd-password-file go together")
	}
	if s.usesTLS() {
		for _, ep := range strings.Split(endpoints, ",") {
			if scheme, _, ok := strings.Cut(ep, "://"); ok && scheme != "https" {
				return usagef("--etcd endpoint %q is not TLS, but --etcd-cacert, --etcd-cert or --etcd-key is given: write it https://HOST:PORT or HOST:PORT", ep)
			}
		}
	}
	return nil
}

// configure reads the files into cfg: its TLS configuration, user name
// and password.
func (s *etcdSecurity) configure(cfg *clientv3.Config) error {
	if s.usesTLS() {
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.cacert != "" {
			b, err := readPublicFile(s.cacert)
			if err != nil {
				return fmt.Errorf("--etcd-cacert: %w", err)
			}
			if t.RootCAs, err = parseCAs(b); err != nil {
				return fmt.Errorf("--etcd-cacert %s: %w", s.cacert, err)
			}
		}
		if s.cert != "" {
			certPEM, err := readPublicFile(s.cert)
			if err != nil {
				return fmt.Errorf("--etcd-cert: %w", err)
			}
			keyPEM, err := privatefile.Read(s.key, maxPEMFile)
			if err != nil {
				return fmt.Errorf("--etcd-key: %w", err)
			}
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			clear(keyPEM)
			if err != nil {
				return fmt.Errorf("--etcd-cert %s and --etcd-key %s: %w", s.cert, s.key, err)
			}
			t.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = t
	}
	if s.user != "" {
		pw, err := readPasswordFile(s.passwordFile)
		if err != nil {
			return fmt.Errorf("--etcd-password-file: %w", err)
		}
		cfg.Username, cfg.Password = s.user, pw
	}
	return nil
}

// readPasswordFile reads a password from a private file: its content
// without trailing line ends. An empty password, or one holding a line
// end or a NUL byte, is refused (and not shown).
func readPasswordFile(path string) (string, error) {
	b, err := privatefile.Read(path, maxPasswordFile)
	if err != nil {
		return "", err
	}
	defer clear(b)
	pw := strings.TrimRight(string(b), "\r\n")
	switch {
	case pw == "":
		return "", fmt.Errorf("%s is empty", path)
	case strings.ContainsAny(pw, "\r\n\x00"):
		return "", fmt.Errorf("%s holds more than one line (or a NUL byte): want the password alone", path)
	}
	return pw, nil
}

// errEtcdUnreachable marks an attempt to connect to etcd that found no
// endpoint reachable yet: it is tried again.
var errEtcdUnreachable = errors.New("etcd not reachable yet")

// connectEtcd returns a client of cfg. Without TLS and authentication it
// connects in the background (a claim then waits for etcd). With either,
// it waits, within ctx and saying so in the log, until an endpoint
// answers; a TLS handshake that fails or a refused user or password is an
// error at once.
func (l *leaseFlags) connectEtcd(ctx context.Context, log *slog.Logger, cfg clientv3.Config) (*clientv3.Client, error) {
	secured := cfg.TLS != nil || cfg.Username != ""
	for _, ep := range cfg.Endpoints {
		secured = secured || strings.HasPrefix(ep, "https://")
	}
	if !secured {
		return clientv3.New(cfg)
	}
	if cfg.Username != "" && cfg.TLS == nil && !allHTTPS(cfg.Endpoints) {
		log.Warn("the etcd password goes over a connection without TLS: give --etcd-cacert (or https:// endpoints)", "endpoints", l.etcd)
	}
	stop := waitNotice(log, etcdWaiting, "endpoints", l.etcd)
	defer stop()
	var cli *clientv3.Client
	stalls := 0
	err := retryWhile(ctx, func() (err error) {
		cli, err = tryEtcd(ctx, cfg)
		return err
	}, func(err error) bool {
		if !errors.Is(err, errEtcdUnreachable) {
			return false
		}
		if errors.Is(err, errTLSStalled) {
			stalls++
		} else {
			stalls = 0
		}
		return stalls < maxTLSStalls
	})
	switch {
	case err == nil:
		return cli, nil
	case stalls >= maxTLSStalls:
		return nil, fmt.Errorf("no TLS handshake completed in %d attempts: is etcd serving plain http? Then give an http:// endpoint without --etcd-cacert, --etcd-cert and --etcd-key (last attempt: %w)", stalls, err)
	}
	return nil, err
}

// etcdWaiting is the notice logged while etcd is waited for.
const etcdWaiting = "still waiting for node IDs from etcd"

func allHTTPS(endpoints []string) bool {
	for _, ep := range endpoints {
		if !strings.HasPrefix(ep, "https://") {
			return false
		}
	}
	return true
}

// tryEtcd makes one attempt to connect: each endpoint's TLS handshake
// first (if TLS is used), then the client, which authenticates at once if
// there is a user. The error wraps errEtcdUnreachable when no endpoint
// could be reached.
func tryEtcd(ctx context.Context, cfg clientv3.Config) (*clientv3.Client, error) {
	probed, reached := 0, false
	var lastErr error
	for _, ep := range cfg.Endpoints {
		if !strings.HasPrefix(ep, "https://") && (cfg.TLS == nil || strings.Contains(ep, "://")) {
			continue // not TLS
		}
		probed++
		err := probeTLS(ctx, ep, cfg.TLS)
		switch {
		case err == nil:
			reached = true
		case len(cfg.Endpoints) > 1:
			lastErr = fmt.Errorf("endpoint %s: %w", ep, err)
		default:
			lastErr = err
		}
		if err != nil && !errors.Is(err, errEtcdUnreachable) {
			return nil, lastErr
		}
	}
	if probed == len(cfg.Endpoints) && !reached {
		return nil, lastErr
	}
	cli, err := newEtcdClient(ctx, cfg)
	if err == nil || ctx.Err() != nil {
		return cli, err
	}
	err = scrubPassword(err, cfg.Password)
	if transientEtcd(err) {
		return nil, fmt.Errorf("%w: %w", errEtcdUnreachable, err)
	}
	if cfg.Username != "" && isAuthError(err) {
		return nil, fmt.Errorf("authenticating as --etcd-user %s (password from --etcd-password-file, not shown): %w", cfg.Username, err)
	}
	return nil, err
}

// newEtcdClient is clientv3.New, which authenticates within
// cfg.DialTimeout, given up when ctx ends (the client, if it comes, is
// closed then). ctx is not the client's: it lives on after ctx.
func newEtcdClient(ctx context.Context, cfg clientv3.Config) (*clientv3.Client, error) {
	type result struct {
		cli *clientv3.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		cli, err := clientv3.New(cfg)
		done <- result{cli, err}
	}()
	select {
	case r := <-done:
		return r.cli, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.cli != nil {
				r.cli.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// transientEtcd reports whether an error of the client means that etcd
// was not reached or did not answer in time (tried again), rather than
// that it refused the client.
func transientEtcd(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// isAuthError reports whether etcd refused the user or its password.
func isAuthError(err error) bool {
	for _, target := range []error{rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound, rpctypes.ErrPermissionDenied} {
		if isEtcdError(err, target) {
			return true
		}
	}
	return false
}

// etcdHint is what an operator should do about an error of etcd that
// refused a request, if it says anything: "" if not.
func (l *leaseFlags) etcdHint(err error) string {
	prefix := l.prefix
	if prefix == "" {
		prefix = etcdlease.DefaultPrefix
	}
	switch {
	case isEtcdError(err, rpctypes.ErrUserEmpty):
		return " (etcd has authentication enabled: give --etcd-user and --etcd-password-file)"
	case isEtcdError(err, rpctypes.ErrPermissionDenied):
		return fmt.Sprintf(" (the role of --etcd-user %s needs readwrite on the keys under --etcd-prefix %s)", l.etcdSec.user, prefix)
	}
	return ""
}

// isEtcdError reports whether err, or an error it wraps, is the etcd
// server's error target.
func isEtcdError(err, target error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err == target || rpctypes.Error(err) == target {
			return true
		}
	}
	return false
}

// scrubPassword removes the password from an error's message. The etcd
// client never puts it in one; this keeps it so.
func scrubPassword(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "xxxxx"))
}

// errTLSStalled marks an endpoint that accepted a connection but did not
// complete a TLS handshake on it: it timed out or was closed. A server
// that is busy does that now and then; one that does not speak TLS (or
// speaks it only to others), every time.
var errTLSStalled = errors.New("connected, but no TLS handshake")

// stalled is an attempt that stalled: errTLSStalled and
// errEtcdUnreachable, with the reason.
type stalled struct{ err error }

func (e stalled) Error() string { return errTLSStalled.Error() + ": " + e.err.Error() }

func (e stalled) Is(target error) bool {
	return target == errTLSStalled || target == errEtcdUnreachable
}

func (e stalled) Unwrap() error { return e.err }

// maxTLSStalls is how many attempts in a row may stall, each within
// probeTimeout, before the endpoint is taken not to speak TLS.
const maxTLSStalls = 3

// probeTimeout bounds each step of a probe: the connection, the handshake,
// the first byte of the answer.
const probeTimeout = 3 * time.Second

// probeTLS makes a TLS handshake with the endpoint ep under cfg (the
// system's CAs if nil) and sends it a request, to learn whether the
// endpoint accepts this client: a TLS 1.3 server refuses a client
// certificate only after the client's side of the handshake is done. An
// endpoint that cannot be reached is errEtcdUnreachable, one that stalls
// errTLSStalled (wrapping errEtcdUnreachable); a handshake that fails, on
// either side, is an error saying why.
func probeTLS(ctx context.Context, ep string, cfg *tls.Config) error {
	host := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return fmt.Errorf("--etcd endpoint %q: want https://HOST:PORT or HOST:PORT", ep)
		}
		host = u.Host
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		return fmt.Errorf("--etcd endpoint %q: want https://HOST:PORT or HOST:PORT", ep)
	}
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cfg = cfg.Clone()
	cfg.ServerName = name
	cfg.NextProtos = nil // no ALPN: HTTP/1.1
	raw, err := (&net.Dialer{Timeout: probeTimeout}).DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("%w: %w", errEtcdUnreachable, err)
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	if err := conn.HandshakeContext(ctx); err != nil {
		return tlsFailure(err)
	}
	// A request any etcd answers without authentication; the answer
	// itself does not matter, only whether the TLS session holds.
	conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n"); err != nil {
		return tlsFailure(err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, io.EOF) && !isTimeout(err) {
		return tlsFailure(err)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsFailure turns an error of a TLS session, once connected, into what
// the operator needs: why the handshake failed, or errTLSStalled if it
// timed out or the connection was closed.
func tlsFailure(err error) error {
	var (
		verify *tls.CertificateVerificationError
		header tls.RecordHeaderError
		op     *net.OpError
	)
	switch {
	case errors.As(err, &verify):
		return fmt.Errorf("its server certificate is not trusted (check --etcd-cacert, and that the certificate names the endpoint's host): %w", err)
	case errors.As(err, &header):
		return fmt.Errorf("it does not speak TLS (give an http:// endpoint without --etcd-cacert, --etcd-cert and --etcd-key, or turn TLS on in etcd): %w", err)
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("it refused the TLS connection (check --etcd-cert and --etcd-key: etcd with --client-cert-auth wants a client certificate its --trusted-ca-file signed): %w", err)
	case isTimeout(err), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return stalled{err}
	}
	return fmt.Errorf("TLS handshake failed: %w", err)
}
