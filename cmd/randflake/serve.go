package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/randflake/randflake/cmd/randflake/internal/server"
	"github.com/randflake/randflake/statedir"
)

// maxTokenFile bounds the inspection token file.
const maxTokenFile = 4096

func runServe(e *env, args []string) error {
	// Signals count from the start: a stop while the node IDs are being
	// acquired releases what is held and ends the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := newFlags(e, "serve", `serve [--listen ADDR] [--nodes FIRST-LAST | --etcd ENDPOINTS] [flags]

Serves IDs over HTTP:
  GET /v1/ids?count=N[&format=string|int]  N new IDs (JSON {"ids":[...]}, or one
                                           per line with Accept: text/plain)
  GET /v1/ids/{id}                         time, node and sequence of an ID; only
                                           with --inspect-token-file and the token
                                           as "Authorization: Bearer TOKEN"
  GET /healthz, /readyz, /metrics          liveness, readiness (a lease is held),
                                           Prometheus metrics
Errors are JSON {"error":MESSAGE,"kind":KIND}; the cause goes to the log only.
A request head (request line and headers) over 16 KiB gets 431.

Logs go to standard error (--log-format text or json): the lease's events,
failures behind 5xx answers, waits for node IDs, and with --access-log one
line per request. SIGTERM or SIGINT: finish requests in flight, release the
node IDs, exit 0; also while still waiting for node IDs. A second signal
stops at once.`)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	maxCount := fs.Int("max-count", 10000, "largest count a request may ask for")
	tokenFile := fs.String("inspect-token-file", "", "file holding the bearer token that enables GET /v1/ids/{id} ($RANDFLAKE_INSPECT_TOKEN_FILE)")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "how long to wait for requests in flight on shutdown")
	headerTimeout := fs.Duration("header-timeout", 5*time.Second, "how long a client may take to send its request headers")
	idleTimeout := fs.Duration("idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
	logFormat := fs.String("log-format", "text", "log format on standard error: text or json")
	accessLog := fs.Bool("access-log", false, "log one line per request (method, path without the query, status, bytes, duration, remote address)")
	var sf secretFlags
	sf.register(fs)
	var lf leaseFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *maxCount < 1 || *headerTimeout <= 0 || *idleTimeout <= 0 || *grace <= 0 {
		return usagef("--max-count and the timeouts must be positive")
	}
	log, err := newLogger(e.stderr, *logFormat, slog.LevelInfo)
	if err != nil {
		return err
	}
	cfg := serveConfig{
		listen: *listen, maxCount: *maxCount, tokenFile: *tokenFile, grace: *grace,
		headerTimeout: *headerTimeout, idleTimeout: *idleTimeout, accessLog: *accessLog,
	}
	if err := serve(ctx, stop, e, log, cfg, &sf, &lf); err != nil {
		if errors.As(err, new(usageError)) {
			return err
		}
		// In the log's format, for whatever reads the log.
		log.Error("serve failed", "err", err)
		return errReported
	}
	return nil
}

// serveConfig is what serve takes from the command line.
type serveConfig struct {
	listen, tokenFile    string
	maxCount             int
	grace, headerTimeout time.Duration
	idleTimeout          time.Duration
	accessLog            bool
}

// serve runs the service until ctx is done; stop ends the signal
// handling of ctx.
func serve(ctx context.Context, stop func(), e *env, log *slog.Logger, cfg serveConfig, sf *secretFlags, lf *leaseFlags) error {
	token, tokenFile := "", cfg.tokenFile
	if tokenFile == "" {
		tokenFile = e.getenv("RANDFLAKE_INSPECT_TOKEN_FILE")
	}
	if tokenFile != "" {
		b, err := statedir.ReadPrivateFile(tokenFile, maxTokenFile)
		if err != nil {
			return fmt.Errorf("inspection token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		clear(b)
		if len(token) < 16 {
			return errors.New("inspection token: at least 16 characters are required")
		}
	}
	g, err := openGenerator(ctx, e, log, sf, lf, statedir.DefaultNodes)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped on request before serving: nothing is held any
			// more, so this is a clean stop like any other.
			log.Info("stopped while waiting for node IDs; nothing was served")
			return nil
		}
		return err
	}
	defer g.Close()

	srv, err := server.New(server.Config{
		Generator:    g,
		LeaseEnd:     g.LeaseEnd,
		MaxCount:     cfg.maxCount,
		InspectToken: token,
		Logger:       log,
		AccessLog:    accessLogger(log, cfg.accessLog),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	hs := &http.Server{
		ReadHeaderTimeout: cfg.headerTimeout,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       cfg.idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(hs, ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "nodes", g.Describe())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := g.Close(); err != nil {
		return fmt.Errorf("releasing node IDs: %w", err)
	}
	log.Info("stopped")
	return nil
}

// newLogger returns a logger writing to w in format "text" or "json".
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format must be text or json")
}

// accessLogger returns the access log: log when on, nil when off.
func accessLogger(log *slog.Logger, on bool) *slog.Logger {
	if !on {
		return nil
	}
	return log.With("log", "access")
}
