package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/randflake/randflake/internal/loadclient"
	"github.com/randflake/randflake/privatefile"
)

const loadUsage = `load [--url URL] [--format json|text|binary] [--batch N] [--concurrency C]
     [--duration D | --requests R] [--rate Q] [--verify=false]
     [--token-file FILE] [--cacert FILE] [--cert FILE --key FILE]

Sends GET /v1/ids?count=N requests to a running randflake serve, bounded in
count and time, and reports requests and IDs per second and latency
percentiles. By default every answer is decoded as it arrives and its IDs
checked for duplicates; a duplicate, a malformed answer or an error fails
the run (exit status 1). With --verify=false each answer is read
into a counting sink through a reused buffer instead: its status,
Content-Type, length (Content-Length when sent) and number of IDs are
checked, so that the load generator costs little.

Bounds. The run ends at --duration (at most 60s): the requests still in
flight then are cancelled, and the run waits for them to stop before it
reports, so that none outlives it; they are not counted, and the report
says how many there were.
--concurrency is at most 1024. Memory is bounded whatever the run's
length or the answers' size: latencies are kept in a histogram
(percentiles within 1%, the maximum exact), and answers are read as they
arrive through a buffer of at most 256 KiB per connection (32 MiB in
all), counted or, with --verify, decoded a buffer at a time. --verify
looks for duplicates among the last 1,048,576 to 2,097,152 IDs received
(two tables of 16 MiB): a duplicate within one answer, or between two
IDs fewer than 1,048,576 IDs apart, is always caught; two equal IDs
further apart may not be.
Services that share node IDs by mistake repeat IDs of the same second,
which arrive close together: within the window at the rates load reaches.

A service with TLS is reached at an https --url: --cacert is the CA
certificate (PEM) that signed its certificate (default: the system's),
--cert and --key a client certificate for one that requires them. HTTPS
runs HTTP/1.1, one connection per --concurrency as in plain HTTP, so that
the two compare. --token-file is a private file holding the bearer token
for a service with --issue-tokens-file. A 429 answer (over the client's
share) is counted and waited out as its Retry-After asks, as is a 503 of
kind exhausted (the second's IDs used up) or busy (the service's budget
of answers in flight full).`

// loadCmd is randflake load: a bounded load test of randflake serve.
type loadCmd struct {
	cfg       loadConfig // the run's flags (loadclient.Config.Flags)
	tokenFile string
	caCert    string
	cert      string
	key       string
}

func (c *loadCmd) flags(fs *flag.FlagSet) {
	c.cfg.Flags(fs, "--")
	fs.StringVar(&c.tokenFile, "token-file", "", "private file holding the bearer token to send (for serve --issue-tokens-file)")
	fs.StringVar(&c.caCert, "cacert", "", "PEM CA certificate(s) to verify an https --url with (default: the system's)")
	fs.StringVar(&c.cert, "cert", "", "PEM client certificate to present to an https --url (with --key)")
	fs.StringVar(&c.key, "key", "", "PEM private key of --cert (a private file: mode 600)")
}

func (c *loadCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	rep, err := loadTest(context.Background(), cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, rep)
	return nil
}

// config checks the flags and returns the load test they ask for.
func (c *loadCmd) config() (loadConfig, error) {
	cfg := c.cfg
	if err := cfg.Check("--", true); err != nil {
		return loadConfig{}, usagef("%v", err)
	}
	https := strings.HasPrefix(cfg.URL, "https:")
	if (c.cert == "") != (c.key == "") {
		return loadConfig{}, usagef("--cert and --key go together")
	}
	if !https && (c.caCert != "" || c.cert != "") {
		return loadConfig{}, usagef("--cacert, --cert and --key need an https --url")
	}
	var err error
	if https {
		if cfg.TLS, err = clientTLS(c.caCert, c.cert, c.key); err != nil {
			return loadConfig{}, err
		}
	}
	if c.tokenFile != "" {
		if cfg.Token, err = readLoadToken(c.tokenFile); err != nil {
			return loadConfig{}, err
		}
	}
	return cfg, nil
}

// loadConfig is a load test, checked.
type loadConfig = loadclient.Config

// loadReport is the outcome of a load test; it prints as load's report.
type loadReport struct{ loadclient.Report }

// percentile returns the latency below which p percent of the requests
// completed (within 1%; exact for the maximum, p = 100).
func (r loadReport) percentile(p float64) time.Duration { return r.Percentile(p) }

// loadTest runs the load (see package loadclient): at cfg.Duration, or
// when ctx ends, the requests in flight are cancelled, and it returns once
// every worker has stopped.
func loadTest(ctx context.Context, cfg loadConfig) (loadReport, error) {
	rep, err := loadclient.Run(ctx, cfg)
	return loadReport{rep}, err
}

// clientTLS is load's TLS configuration: caFile's CAs (else the system's),
// and the client certificate certFile with keyFile, if given.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := readPublicFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		if cfg.RootCAs, err = parseCAs(b); err != nil {
			return nil, fmt.Errorf("--cacert %s: %w", caFile, err)
		}
	}
	if certFile != "" {
		certPEM, err := readPublicFile(certFile)
		if err != nil {
			return nil, fmt.Errorf("--cert: %w", err)
		}
		keyPEM, err := privatefile.Read(keyFile, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		defer clear(keyPEM)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("--cert %s and --key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readLoadToken reads --token-file: a private file, its content trimmed.
func readLoadToken(file string) (string, error) {
	b, err := privatefile.Read(file, maxTokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer clear(b)
	token := strings.TrimSpace(string(b))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: want one token, without white space inside", file)
	}
	return token, nil
}
