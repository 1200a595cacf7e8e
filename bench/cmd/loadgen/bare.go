package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/randflake/randflake/internal/loadclient"
)

// bareID stands for an ID in the bare handler's bodies: 13 characters, the
// length of most IDs in base32hex.
const bareID = "0123456789abc"

// bareBody is the bare handler's fixed answer: the size and form of the
// service's answer to cfg's requests.
func bareBody(cfg loadConfig) []byte {
	switch cfg.Format {
	case "binary":
		return make([]byte, 8*cfg.Batch)
	case "text":
		return bytes.Repeat([]byte(bareID+"\n"), cfg.Batch)
	}
	b := []byte(`{"ids":[`)
	for i := range cfg.Batch {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `"`+bareID+`"`...)
	}
	return append(b, "]}\n"...)
}

// bareHandler is the bare net/http handler: the fixed body of bareBody
// with its Content-Type, as the simplest handler would write it. Its
// text/plain carries a charset, as the service's does.
func bareHandler(cfg loadConfig) http.Handler {
	body, ctype := bareBody(cfg), loadclient.ContentType(cfg.Format)
	if cfg.Format == "text" {
		ctype += "; charset=utf-8"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Write(body)
	})
}

// startBare serves the bare handler on addr and returns its listener.
func startBare(addr string, cfg loadConfig) (net.Listener, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: bareHandler(cfg), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln, srv, nil
}

// loadBare runs cfg's load, unverified, against a bare handler started on
// a loopback port of this process.
func loadBare(ctx context.Context, cfg loadConfig) (loadReport, error) {
	if cfg.BareURL != "" {
		cfg.URL, cfg.Verify = cfg.BareURL, false
		return loadTest(ctx, cfg)
	}
	ln, srv, err := startBare("127.0.0.1:0", cfg)
	if err != nil {
		return loadReport{}, err
	}
	defer srv.Close()
	cfg.URL, cfg.Verify = "http://"+ln.Addr().String(), false
	return loadTest(ctx, cfg)
}

// bareWhere says where the bare handler runs.
func bareWhere(cfg loadConfig) string {
	if cfg.BareURL != "" {
		return cfg.BareURL
	}
	return "in this process"
}

// serveBare serves the bare handler on addr until a signal.
func serveBare(stderr io.Writer, addr string, cfg loadConfig) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		return usageError("--serve-bare needs a loopback address such as 127.0.0.1:18091")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, srv, err := startBare(addr, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bare handler on http://%s: fixed %d-byte %s body\n", ln.Addr(), len(bareBody(cfg)), loadclient.ContentType(cfg.Format))
	<-ctx.Done()
	return srv.Close()
}
