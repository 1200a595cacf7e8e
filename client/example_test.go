package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/randflake/randflake/client"
)

// idService stands in for `randflake serve`: GET /v1/ids?count=N answers
// N IDs, 8 bytes each, big-endian, when Accept lists
// application/octet-stream (the client's default), else one per line.
// Here they count up from 1000.
func idService() http.Handler {
	var next atomic.Int64
	next.Store(1000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ids", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("count"))
		if err != nil || n < 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, `{"error":"count must be a whole number","kind":"bad_count"}`)
			return
		}
		first := next.Add(int64(n)) - int64(n)
		if strings.Contains(r.Header.Get("Accept"), "application/octet-stream") {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(8*n))
			var b [8]byte
			for i := range int64(n) {
				binary.BigEndian.PutUint64(b[:], uint64(first+i))
				w.Write(b[:])
			}
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for i := range int64(n) {
			fmt.Fprintln(w, first+i)
		}
	})
	return mux
}

func Example() {
	srv := httptest.NewServer(idService())
	defer srv.Close()

	c, err := client.New(client.Config{
		URLs:      []string{srv.URL}, // more instances may follow; the client moves on when one fails
		BatchSize: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A deadline bounds the wait when the buffer is empty.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		id, err := c.Next(ctx)
		if err != nil {
			var se *client.ServerError
			switch {
			case errors.Is(err, client.ErrTooSlow):
				log.Fatal("the service answers slower than MaxAge: ", err)
			case errors.As(err, &se):
				log.Fatalf("the service answered %d (%s): %v", se.StatusCode, se.Kind, err)
			}
			log.Fatal(err)
		}
		fmt.Println(id)
	}
	// Output:
	// 1000
	// 1001
	// 1002
}

// Fetch takes one whole batch in one request, here in the binary format
// (the default): BatchSize IDs or an error, never fewer IDs. A short or
// malformed answer is an error.
func ExampleClient_Fetch() {
	srv := httptest.NewServer(idService())
	defer srv.Close()

	c, err := client.New(client.Config{
		URL:       srv.URL,
		BatchSize: 65536, // the service takes up to 1,048,576 in the binary format
		// Format: client.FormatJSON would ask for JSON instead.
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ids, err := c.Fetch(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), ids[0], ids[len(ids)-1])
	// Output:
	// 65536 1000 66535
}

// A service with TLS, and a token: the client trusts the service's CA
// through its HTTPClient (here the test server's own certificate; a
// client certificate for mutual TLS would go in Certificates) and sends
// the token as a bearer token. TokenFile would read the token from a file.
func Example_tls() {
	const token = "example-token-0123456789"
	ids := idService()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, `{"error":"a valid bearer token is required","kind":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		ids.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate()) // or the CA certificate, from its PEM file
	hc := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{
				RootCAs:    roots,
				MinVersion: tls.VersionTLS12,
				// Certificates: []tls.Certificate{clientCert}, for a
				// service with --tls-client-ca-file
			},
			ForceAttemptHTTP2: true, // HTTP/2 with a TLSClientConfig of one's own
		},
	}
	c, err := client.New(client.Config{URL: srv.URL, HTTPClient: hc, Token: token, BatchSize: 10})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	batch, err := c.Fetch(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(batch), batch[0])
	// Output:
	// 10 1000
}

// A service whose certificate is signed by a CA of one's own (the
// self-signed recipe of docs/tutorial-tls.md): the client trusts that CA,
// read from its PEM file, and no other. Here the test server's certificate
// stands in for ca.pem.
func Example_caFile() {
	srv := httptest.NewTLSServer(idService())
	defer srv.Close()
	dir, err := os.MkdirTemp("", "randflake-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	caFile := filepath.Join(dir, "ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		log.Fatal(err)
	}
	serviceURL := srv.URL
	ctx := context.Background()

	caPEM, err := os.ReadFile(caFile) // ca.pem of the recipe
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		log.Fatalf("%s holds no PEM certificate", caFile)
	}
	c, err := client.New(client.Config{
		URL: serviceURL, // "https://127.0.0.1:8443" in the recipe
		HTTPClient: &http.Client{
			Timeout: 10 * time.Second,
			Transport: &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
				ForceAttemptHTTP2: true, // HTTP/2, as a nil HTTPClient would use
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	id, err := c.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id)
	// Output:
	// 1000
}
