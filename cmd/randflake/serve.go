package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/randflake/randflake/statedir"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/randflake/randflake/cmd/randflake/internal/server"
)

func runServe(e *env, args []string) error {
	fs := newFlags(e, "serve", `serve [--listen ADDR] [--nodes FIRST-LAST | --etcd ENDPOINTS] [flags]

Serves IDs over HTTP:
  GET /v1/ids?count=N[&format=string|int]  N new IDs (JSON {"ids":[...]}, or one
                                           per line with Accept: text/plain)
  GET /v1/ids/{id}                         time, node and sequence of an ID; only
                                           with --inspect-token-file and the token
                                           as "Authorization: Bearer TOKEN"
  GET /healthz, /readyz, /metrics          liveness, readiness (a lease is held),
                                           Prometheus metrics
SIGTERM or SIGINT: finish requests in flight, release the node IDs, exit 0.`)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	maxCount := fs.Int("max-count", 10000, "largest count a request may ask for")
	tokenFile := fs.String("inspect-token-file", "", "file holding the bearer token that enables GET /v1/ids/{id} ($RANDFLAKE_INSPECT_TOKEN_FILE)")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "how long to wait for requests in flight on shutdown")
	headerTimeout := fs.Duration("header-timeout", 5*time.Second, "how long a client may take to send its request headers")
	idleTimeout := fs.Duration("idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
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
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	token := ""
	if *tokenFile == "" {
		*tokenFile = e.getenv("RANDFLAKE_INSPECT_TOKEN_FILE")
	}
	if *tokenFile != "" {
		b, err := readSecretBytes(*tokenFile)
		if err != nil {
			return fmt.Errorf("inspection token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if len(token) < 16 {
			return errors.New("inspection token: at least 16 characters are required")
		}
	}
	g, err := openGenerator(e, &sf, &lf, statedir.DefaultNodes)
	if err != nil {
		return err
	}
	defer g.Close()

	srv, err := server.New(server.Config{
		Generator:    g,
		LeaseEnd:     g.LeaseEnd,
		MaxCount:     *maxCount,
		InspectToken: token,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: *headerTimeout,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       *idleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "nodes", g.Describe())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
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

// readSecretBytes reads a small file that must not be readable by others.
func readSecretBytes(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %v; others must not be able to read it (chmod 600)", path, st.Mode().Perm())
	}
	if st.Size() > 4096 {
		return nil, fmt.Errorf("%s is too large", path)
	}
	return os.ReadFile(path)
}
