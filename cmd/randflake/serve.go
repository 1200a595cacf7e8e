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

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/statedir"
)

const serveUsage = `serve [--listen ADDR] [--node-source SOURCE] [--nodes FIRST-LAST | --etcd ENDPOINTS | --postgres-dsn DSN] [flags]

Serves IDs over HTTP:
  GET /v1/ids?count=N[&format=string|int]  N new IDs (JSON {"ids":[...]}, or one
                                           per line with Accept: text/plain, or
                                           8 bytes each, big-endian, with Accept:
                                           application/octet-stream, up to
                                           --max-binary-count)
  GET /v1/ids/{id}                         time, node and sequence of an ID; only
                                           with --inspect-token-file and the token
                                           as "Authorization: Bearer TOKEN"
  GET /healthz, /readyz, /metrics          liveness, readiness (a lease is held),
                                           Prometheus metrics
  GET /openapi.yaml                        this API's OpenAPI 3.1 description
Errors are JSON {"error":MESSAGE,"kind":KIND}; the cause goes to the log only.
A request head (request line and headers) over 16 KiB gets 431.

Node IDs (--node-source): statedir, the state directory's file locks (the
default); static, the range of --nodes (implied by it); etcd, claims at
--etcd (implied by it); postgres, claims in a PostgreSQL table at
--postgres-dsn (implied by it); statefulset, a Kubernetes StatefulSet pod's share:
ordinal K (from $RANDFLAKE_ORDINAL, else the host name NAME-K) gets node
IDs K*N to K*N+N-1 for N = --nodes-per-pod. Pods x N must stay within
131,072 node IDs (N=1024: 128 pods); each pod issues up to N x 131,072 IDs
a second. etcd, postgres and statefulset need the fleet's secret (--secret-file,
$RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET).

Every flag can also be set by the variable beside it in brackets; the
command line wins, and an empty variable counts as unset.

Logs go to standard error (--log-format text or json): the lease's events,
failures behind 5xx answers, waits for node IDs, and with --access-log one
line per request. SIGTERM or SIGINT: finish requests in flight, release the
node IDs, exit 0; also while still waiting for node IDs. A second signal
stops at once.`

// serveCmd is randflake serve: the HTTP ID service. Its flags become a
// serveConfig (config), which runs until a signal (serveConfig.run).
type serveCmd struct {
	listen        string
	maxCount      int
	maxBinary     int
	tokenFile     string
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
	fs.StringVar(&c.tokenFile, "inspect-token-file", "", "file holding the bearer token that enables GET /v1/ids/{id} ($RANDFLAKE_INSPECT_TOKEN_FILE)")
	fs.DurationVar(&c.grace, "shutdown-timeout", 10*time.Second, "how long to wait for requests in flight on shutdown")
	fs.DurationVar(&c.headerTimeout, "header-timeout", 5*time.Second, "how long a client may take to send its request headers")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on standard error: text or json")
	fs.BoolVar(&c.accessLog, "access-log", false, "log one line per request (method, path without the query, status, bytes, duration, remote address)")
	c.gen.register(fs, statedir.DefaultNodes)
	c.gen.lease.registerSource(fs)
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
	if err := cfg.run(ctx, e); err != nil {
		// In the log's format, for whatever reads the log.
		cfg.log.Error("serve failed", "err", err)
		return errReported
	}
	return nil
}

// serveConfig is what the service runs with, checked.
type serveConfig struct {
	log       *slog.Logger
	listen    string
	tokenFile string        // the inspection token's file; "" for none
	server    server.Config // without Generator, LeaseEnd and InspectToken
	http      *http.Server  // the timeouts and the error log
	grace     time.Duration // for requests in flight on shutdown
	gen       *generatorFlags
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
	cfg := &serveConfig{
		log:       log,
		listen:    c.listen,
		tokenFile: c.tokenFile,
		server:    server.Config{MaxCount: c.maxCount, MaxBinaryCount: c.maxBinary, Logger: log},
		http: &http.Server{
			ReadHeaderTimeout: c.headerTimeout,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       c.idleTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		grace: c.grace,
		gen:   &c.gen,
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

// run acquires node IDs and serves until ctx is done, then shuts down:
// requests in flight finish (within cfg.grace) and the node IDs are
// released.
func (cfg *serveConfig) run(ctx context.Context, e *env) error {
	token, err := readToken(cfg.tokenFile)
	if err != nil {
		return err
	}
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
	sc.Generator, sc.LeaseEnd, sc.InspectToken = g, g.LeaseEnd, token
	sc.LeaseNodes, sc.LeaseRenewals = g.Nodes, g.Renewals
	srv, err := server.New(sc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(cfg.http, ln) }()
	cfg.log.Info("serving", "addr", ln.Addr().String(), "nodes", g.Describe())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cfg.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.grace)
	defer cancel()
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
	b, err := statedir.ReadPrivateFile(file, maxTokenFile)
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
