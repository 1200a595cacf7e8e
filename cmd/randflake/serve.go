package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/privatefile"
)

const serveUsage = `serve [--listen ADDR] [--node-source SOURCE] [--nodes FIRST-LAST | --etcd ENDPOINTS | --postgres-dsn DSN]
      [--tls-cert-file FILE --tls-key-file FILE [--tls-client-ca-file FILE]] [--ops-listen ADDR]
      [--issue-tokens-file FILE] [--client-rate N [--client-burst N]] [flags]

Serves IDs over HTTP, or HTTPS with HTTP/2:
  GET /v1/ids?count=N[&format=string|int]  N new IDs (JSON {"ids":[...]}, or one
                                           per line with Accept: text/plain, or
                                           8 bytes each, big-endian, with Accept:
                                           application/octet-stream, up to
                                           --max-binary-count)
  GET /v1/ids/{id}                         time, node and sequence of an ID; only
                                           with --inspect-token-file and its token
                                           (16 characters or more) as
                                           "Authorization: Bearer TOKEN"
  GET /healthz, /readyz, /metrics          liveness, readiness (a lease is held),
                                           Prometheus metrics
  GET /openapi.yaml                        this API's OpenAPI 3.1 description
Errors are JSON {"error":MESSAGE,"kind":KIND}; the cause goes to the log only.
A request head over 16 KiB (HTTP/1.1: past 20 KiB, net/http's read buffer
included) gets net/http's plain-text 431.

TLS: --tls-cert-file and --tls-key-file (PEM, both or neither) serve HTTPS,
TLS 1.2 or later, HTTP/2 or HTTP/1.1 by ALPN. --tls-client-ca-file requires
client certificates signed by its CAs (mutual TLS). The files are read
again on SIGHUP and whenever their content changes (checked every 2 s), a
new certificate serving new connections while open ones go on; a reload
that fails keeps the current files, logs why and counts in
randflake_reload_failures_total, as does a new certificate expired or not
yet valid, which never replaces a valid one.
--ops-listen ADDR serves /healthz, /readyz and /metrics, and nothing else,
in plain HTTP on a second address, for probes and Prometheus when the main
one needs TLS or client certificates; /metrics then leaves the main address.

Who may issue: with --issue-tokens-file (a private file, one "NAME TOKEN"
a line, tokens of 16 characters or more, # comments; read again on SIGHUP
and on change), GET /v1/ids needs "Authorization: Bearer TOKEN" with a
listed token, or a verified client certificate; else 401. A client is its
token's name, else its certificate's common name (else first DNS name),
else its address. --client-rate N gives each client N IDs a second, in
bursts of up to --client-burst IDs (default N): a request over its share
gets 429 with Retry-After, one for more than the burst gets 400.

Node IDs (--node-source): statedir, the state directory's file locks (the
default); static, the range of --nodes (implied by it); etcd, claims at
--etcd (implied by it); postgres, claims in a PostgreSQL table at
--postgres-dsn (implied by it); statefulset, a Kubernetes StatefulSet pod's share:
ordinal K (from $RANDFLAKE_ORDINAL, else the host name NAME-K) gets node
IDs K*N to K*N+N-1 for N = --nodes-per-pod. Pods x N must stay within
131,072 node IDs (N=1024: 128 pods); each pod issues up to N x 131,072 IDs
a second; kubernetes, Lease objects in the pod's namespace (--kube-namespace)
through the service account, or --kubeconfig outside a cluster. etcd,
postgres, kubernetes and statefulset need the fleet's secret (--secret-file,
$RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET).

Every flag can also be set by the variable beside it in brackets; the
command line wins, and an empty variable counts as unset.

Logs go to standard error (--log-format text or json): the lease's events,
failures behind 5xx answers, refused clients, reloads, waits for node IDs,
and with --access-log one line per request. SIGTERM or SIGINT: finish
requests in flight, release the node IDs, exit 0; also while still waiting
for node IDs. A second signal stops at once. SIGHUP: read the TLS and
issue tokens files again.`

// serveCmd is randflake serve: the HTTP ID service. Its flags become a
// serveConfig (config), which runs until a signal (serveConfig.run).
type serveCmd struct {
	listen        string
	opsListen     string
	maxCount      int
	maxBinary     int
	maxInflight   int64
	tokenFile     string
	tlsCert       string
	tlsKey        string
	tlsClientCA   string
	issueTokens   string
	clientRate    int64
	clientBurst   int64
	grace         time.Duration
	headerTimeout time.Duration
	idleTimeout   time.Duration
	logFormat     string
	accessLog     bool
	gen           generatorFlags
}

func (c *serveCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.IntVar(&c.maxCount, "max-count", 10000, "largest count a request may ask for")
	fs.IntVar(&c.maxBinary, "max-binary-count", server.DefaultMaxBinaryCount, "largest count a request for binary IDs (Accept: application/octet-stream, 8 bytes per ID) may ask for")
	fs.Int64Var(&c.maxInflight, "max-inflight-bytes", server.DefaultMaxInflightBytes, "bytes the answers in flight may hold in all (one client: an eighth); a request past it waits briefly, then gets 503 busy")
	fs.StringVar(&c.tokenFile, "inspect-token-file", "", "file holding the bearer token (16 characters or more) that enables GET /v1/ids/{id}")
	fs.StringVar(&c.tlsCert, "tls-cert-file", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key-file")
	fs.StringVar(&c.tlsKey, "tls-key-file", "", "PEM private key of --tls-cert-file (a private file: mode 600)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca-file", "", "PEM CA certificates: require client certificates they signed (mutual TLS)")
	fs.StringVar(&c.opsListen, "ops-listen", "", "also serve /healthz, /readyz and /metrics (only) in plain HTTP on this address; /metrics leaves --listen")
	fs.StringVar(&c.issueTokens, "issue-tokens-file", "", `private file of the clients that may issue, one "NAME TOKEN" a line: GET /v1/ids then needs one as a bearer token, or a client certificate`)
	fs.Int64Var(&c.clientRate, "client-rate", 0, "each client's share: IDs a second (0: no shares)")
	fs.Int64Var(&c.clientBurst, "client-burst", 0, "with --client-rate: the most IDs a client may take at once (default: the rate)")
	fs.DurationVar(&c.grace, "shutdown-timeout", 10*time.Second, "how long to wait for requests in flight on shutdown")
	fs.DurationVar(&c.headerTimeout, "header-timeout", 5*time.Second, "how long a client may take to send its request headers")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on standard error: text or json")
	fs.BoolVar(&c.accessLog, "access-log", false, "log one line per request (method, path without the query, status, bytes, duration, remote address)")
	c.gen.registerFleet(fs)
	envUsage(fs)
}

// envConfigured: every flag of serve has a RANDFLAKE_* variable.
func (c *serveCmd) envConfigured() {}

func (c *serveCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	cfg, err := c.config(e)
	if err != nil {
		return err
	}
	// A signal while the node IDs are being acquired releases what is
	// held and ends the process; once one has come, a second ends the
	// process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	// SIGHUP reloads the TLS and issue tokens files, from the start:
	// also while waiting for node IDs, it does not end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := cfg.run(ctx, e, hup); err != nil {
		// A command-line mistake found while opening the node source (a
		// fleet source without the fleet's secret) is a usage error:
		// exit status 2 and a pointer to --help, as for a bad flag.
		var ue usageError
		if errors.As(err, &ue) {
			return err
		}
		// In the log's format, for whatever reads the log.
		cfg.log.Error("serve failed", "err", err)
		return errReported
	}
	return nil
}

// serveConfig is what the service runs with, checked.
type serveConfig struct {
	log         *slog.Logger
	listen      string
	opsListen   string        // "" for no operations listener
	tokenFile   string        // the inspection token's file; "" for none
	tlsCert     string        // "" for plain HTTP
	tlsKey      string        // with tlsCert
	tlsClientCA string        // "" for no client certificates
	issueTokens string        // "" for no issue tokens
	server      server.Config // without Generator, LeaseEnd, InspectToken and IssueTokens
	http        *http.Server  // the timeouts and the error log
	ops         *http.Server  // of the operations listener, with opsListen
	grace       time.Duration // for requests in flight on shutdown
	gen         *generatorFlags
}

// config checks the flags and makes the service's configuration. It reads
// no files: errors are usage errors.
func (c *serveCmd) config(e *env) (*serveConfig, error) {
	if c.maxCount < 1 || c.headerTimeout <= 0 || c.idleTimeout <= 0 || c.grace <= 0 {
		return nil, usagef("--max-count and the timeouts must be positive")
	}
	if c.maxBinary < 1 {
		return nil, usagef("--max-binary-count must be positive")
	}
	if c.maxInflight < 1<<20 {
		return nil, usagef("--max-inflight-bytes must be at least 1048576 (1 MiB): a smaller budget could not hold the answers of a few clients at once")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, usagef("--tls-cert-file and --tls-key-file go together: give both, or neither")
	}
	if c.tlsClientCA != "" && c.tlsCert == "" {
		return nil, usagef("--tls-client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are asked for over TLS only")
	}
	if c.clientRate < 0 || c.clientBurst < 0 {
		return nil, usagef("--client-rate and --client-burst must not be negative")
	}
	if c.clientBurst > 0 && c.clientRate == 0 {
		return nil, usagef("--client-burst needs --client-rate")
	}
	if c.opsListen != "" && c.opsListen == c.listen && !strings.HasSuffix(c.listen, ":0") {
		return nil, usagef("--ops-listen must be another address than --listen")
	}
	if err := c.gen.lease.check(); err != nil {
		return nil, err
	}
	log, err := newLogger(e.stderr, c.logFormat, slog.LevelInfo)
	if err != nil {
		return nil, err
	}
	if err := randflake.KernelOverrideError(); err != nil {
		log.Warn("RANDFLAKE_KERNEL not honoured", "err", err)
	}
	newHTTP := func() *http.Server {
		return &http.Server{
			ReadHeaderTimeout: c.headerTimeout,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       c.idleTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
	}
	cfg := &serveConfig{
		log:         log,
		listen:      c.listen,
		opsListen:   c.opsListen,
		tokenFile:   c.tokenFile,
		tlsCert:     c.tlsCert,
		tlsKey:      c.tlsKey,
		tlsClientCA: c.tlsClientCA,
		issueTokens: c.issueTokens,
		server: server.Config{MaxCount: c.maxCount, MaxBinaryCount: c.maxBinary, MaxInflightBytes: c.maxInflight, Logger: log,
			ClientRate: c.clientRate, ClientBurst: c.clientBurst, SeparateOps: c.opsListen != ""},
		http:  newHTTP(),
		grace: c.grace,
		gen:   &c.gen,
	}
	if c.opsListen != "" {
		cfg.ops = newHTTP()
	}
	if cfg.tokenFile == "" {
		cfg.tokenFile = e.getenv("RANDFLAKE_INSPECT_TOKEN_FILE")
	}
	if c.accessLog {
		cfg.server.AccessLog = log.With("log", "access")
	}
	return cfg, nil
}

// maxTokenFile bounds the inspection token file.
const maxTokenFile = 4096

// run reads the files, acquires node IDs and serves until ctx is done,
// then shuts down: requests in flight finish (within cfg.grace) and the
// node IDs are released. Each signal on hup reloads the files.
func (cfg *serveConfig) run(ctx context.Context, e *env, hup <-chan os.Signal) error {
	token, err := readToken(cfg.tokenFile)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry() // the server's, with the reloads' failures
	failures, err := newReloadFailures(reg)
	if err != nil {
		return err
	}
	var reload []reloadable
	var tlsf *tlsFiles
	if cfg.tlsCert != "" {
		if tlsf, err = loadTLSFiles(cfg.tlsCert, cfg.tlsKey, cfg.tlsClientCA, cfg.log); err != nil {
			return err
		}
		tlsf.failures = failures
		reload = append(reload, tlsf)
	}
	var tokensFile *issueTokensFile
	if cfg.issueTokens != "" {
		if tokensFile, cfg.server.IssueTokens, err = loadIssueTokens(cfg.issueTokens, cfg.log); err != nil {
			return err
		}
		tokensFile.failures = failures
		reload = append(reload, tokensFile)
	}
	wctx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	go watchFiles(wctx, cfg.log, hup, reload)

	g, err := cfg.gen.open(ctx, e, cfg.log)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped on request before serving: nothing is held any
			// more, so this is a clean stop like any other.
			cfg.log.Info("stopped while waiting for node IDs; nothing was served")
			return nil
		}
		return err
	}
	defer g.Close()

	sc := cfg.server
	sc.Registry = reg
	sc.Generator, sc.LeaseEnd, sc.InspectToken = g, g.LeaseEnd, token
	sc.LeaseNodes, sc.LeaseRenewals = g.Nodes, g.Renewals
	srv, err := server.New(sc)
	if err != nil {
		return err
	}
	if tokensFile != nil {
		tokensFile.set = srv.SetIssueTokens
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	var opsLn net.Listener
	if cfg.ops != nil {
		if opsLn, err = net.Listen("tcp", cfg.opsListen); err != nil {
			ln.Close()
			return fmt.Errorf("--ops-listen: %w", err)
		}
	}
	errc := make(chan error, 2)
	srv.Configure(cfg.http)
	if tlsf != nil {
		cfg.http.TLSConfig = tlsf.serverConfig()
		go func() { errc <- cfg.http.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- cfg.http.Serve(ln) }()
	}
	cfg.log.Info("serving", "addr", ln.Addr().String(), "nodes", g.Describe(), "tls", tlsf != nil)
	if opsLn != nil {
		srv.ConfigureOps(cfg.ops)
		go func() { errc <- cfg.ops.Serve(opsLn) }()
		cfg.log.Info("serving operations", "addr", opsLn.Addr().String())
	}
	select {
	case err := <-errc:
		cfg.http.Close()
		if cfg.ops != nil {
			cfg.ops.Close()
		}
		return err
	case <-ctx.Done():
	}
	cfg.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.grace)
	defer cancel()
	if cfg.ops != nil {
		defer cfg.ops.Shutdown(sctx)
	}
	if err := cfg.http.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := g.Close(); err != nil {
		return fmt.Errorf("releasing node IDs: %w", err)
	}
	cfg.log.Info("stopped")
	return nil
}

// readToken reads the inspection token from file; "" reads none.
func readToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := privatefile.Read(file, maxTokenFile)
	if err != nil {
		return "", fmt.Errorf("inspection token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	clear(b)
	if len(token) < 16 {
		return "", errors.New("inspection token: at least 16 characters are required")
	}
	return token, nil
}
