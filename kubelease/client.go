package kubelease

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// In-cluster paths and variables of a pod's service account.
const (
	// ServiceAccountDir holds the pod's service-account token, the
	// cluster's CA certificate and the pod's namespace.
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenRefresh is how often a token file is read again: the kubelet
	// rotates projected tokens well before they expire.
	tokenRefresh = time.Minute
)

// ClientConfig says how to reach and authenticate to a Kubernetes API
// server. InCluster and LoadKubeconfig fill it in; tests may fill it in
// directly.
type ClientConfig struct {
	// Server is the API server's URL (https://host:port).
	Server string
	// CAFile or CAData is the CA bundle that signs the server's
	// certificate (PEM). Neither: the system's roots.
	CAFile string
	CAData []byte
	// InsecureSkipVerify skips checking the server's certificate (a
	// kubeconfig's insecure-skip-tls-verify); never set it in production.
	InsecureSkipVerify bool
	// Token is a bearer token; TokenFile a file holding one, read again
	// every minute (a service account's projected token is rotated).
	Token     string
	TokenFile string
	// CertFile and KeyFile, or CertData and KeyData, are a client
	// certificate and its key (PEM), for a user authenticated by
	// certificate.
	CertFile, KeyFile string
	CertData, KeyData []byte
	// Namespace is the namespace the configuration names (the pod's, or
	// the kubeconfig context's), used when Config.Namespace is empty.
	Namespace string
	// WrapTransport, if set, wraps the HTTP transport (tests use it to
	// play a crash or to count requests).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Timeout bounds each request, from its dial to the end of its
	// answer (0: 30 s). It is the client's only bound: the store bounds
	// its requests more tightly through their contexts, by its TTL.
	Timeout time.Duration
}

// Client is a connection to a Kubernetes API server: plain HTTPS requests
// with the Lease objects' JSON, no client library. It is safe for
// concurrent use.
type Client struct {
	server    *url.URL
	hc        *http.Client
	token     string
	tokenFile string
	namespace string

	mu        sync.Mutex
	fileToken string
	readAt    time.Time
}

// NewClient returns a client for cfg. It reads the files cfg names (the
// token file is read again every minute) but makes no request.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("kubelease: API server URL %q: want https://host:port", cfg.Server)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify}
	ca := cfg.CAData
	if cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("kubelease: reading the API server's CA: %w", err)
		}
	}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("kubelease: the API server's CA holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	cert, key := cfg.CertData, cfg.KeyData
	if cfg.CertFile != "" {
		if cert, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("kubelease: reading the client certificate: %w", err)
		}
	}
	if cfg.KeyFile != "" {
		if key, err = os.ReadFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("kubelease: reading the client key: %w", err)
		}
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("kubelease: the client certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	// No timeout of the transport's own (dial, handshake, answer): a
	// request is bounded by its context and by Timeout, whichever ends
	// first, so that a slow server is given the time its caller gives.
	var rt http.RoundTripper = &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	c := &Client{server: u, hc: &http.Client{Transport: rt, Timeout: timeout}, token: cfg.Token, tokenFile: cfg.TokenFile, namespace: cfg.Namespace}
	if c.tokenFile != "" {
		if _, err := c.bearer(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// InCluster returns a client for the API server of the cluster the
// process runs in, as its pod's service account: the token, the CA and the
// namespace from ServiceAccountDir, the server from KUBERNETES_SERVICE_HOST
// and KUBERNETES_SERVICE_PORT.
func InCluster() (*Client, error) { return inCluster(ServiceAccountDir, os.Getenv) }

// inCluster is InCluster with the service account's files in dir and the
// variables from getenv.
func inCluster(dir string, getenv func(string) string) (*Client, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("kubelease: not in a Kubernetes pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set): give a kubeconfig file")
	}
	cfg := ClientConfig{
		Server:    "https://" + net.JoinHostPort(host, port),
		CAFile:    dir + "/ca.crt",
		TokenFile: dir + "/token",
	}
	if ns, err := os.ReadFile(dir + "/namespace"); err == nil {
		cfg.Namespace = strings.TrimSpace(string(ns))
	}
	return NewClient(cfg)
}

// Namespace returns the namespace the client's configuration names, ""
// if none.
func (c *Client) Namespace() string { return c.namespace }

// Server returns the API server's URL.
func (c *Client) Server() string { return c.server.String() }

// bearer returns the token to send, reading the token file again when the
// copy is older than tokenRefresh.
func (c *Client) bearer() (string, error) {
	if c.tokenFile == "" {
		return c.token, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fileToken != "" && time.Since(c.readAt) < tokenRefresh {
		return c.fileToken, nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		if c.fileToken != "" {
			return c.fileToken, nil // keep the last one read
		}
		return "", fmt.Errorf("kubelease: reading the token file: %w", err)
	}
	c.fileToken, c.readAt = strings.TrimSpace(string(b)), time.Now()
	if c.fileToken == "" {
		return "", fmt.Errorf("kubelease: the token file %s is empty", c.tokenFile)
	}
	return c.fileToken, nil
}

// reply is what a request returned besides its decoded body.
type reply struct {
	// t0 and t1 are this machine's clock before the request was sent and
	// after the answer came; date is the server's Date header (zero if
	// absent or unreadable).
	t0, t1, date time.Time
}

// do sends one request: method on path (below the server's URL), with in
// as the JSON body if not nil, and decodes a successful answer into out if
// not nil. An answer that is not a success is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (reply, error) {
	var rep reply
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return rep, fmt.Errorf("kubelease: encoding a request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.server
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return rep, fmt.Errorf("kubelease: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "randflake-kubelease")
	tok, err := c.bearer()
	if err != nil {
		return rep, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rep.t0 = time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		// The URL error names the server and the path, never the token.
		return rep, fmt.Errorf("kubelease: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	rep.t1 = time.Now()
	if d, derr := http.ParseTime(resp.Header.Get("Date")); derr == nil {
		rep.date = d
	}
	if err != nil {
		return rep, fmt.Errorf("kubelease: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return rep, newAPIError(method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return rep, fmt.Errorf("kubelease: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return rep, nil
}
