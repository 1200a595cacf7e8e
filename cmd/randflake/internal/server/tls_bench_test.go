//go:build unix

package server

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/tlstest"
)

// BenchmarkTLS is the service over loopback connections in plain HTTP
// and over TLS, side by side in one run: single IDs in JSON over a
// keep-alive connection, one request at a time, and binary batches of
// 1,048,576 IDs. TLS runs HTTP/1.1, as plain HTTP does, and HTTP/2. Both
// ends run in this process, so that the client's decryption is counted
// too. The generator has 8,192 node IDs, so that a second's IDs are never
// used up. Besides the time, each reports the CPU time of the process
// (both ends) per request, cpu-ns/op, which other work on a shared
// machine moves less than the time.
//
//	go test -run '^$' -bench BenchmarkTLS -benchtime 3s -count 5 ./internal/server/
func BenchmarkTLS(b *testing.B) {
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{Secret: secret, LastNode: 8191, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Generator: g, LeaseEnd: func() int64 { return now + 3600 }})
	if err != nil {
		b.Fatal(err)
	}
	plain := httptest.NewUnstartedServer(s)
	s.Configure(plain.Config)
	plain.Start()
	defer plain.Close()
	ca := tlstest.NewCA(b, "bench CA")
	secure := httptest.NewUnstartedServer(s)
	s.Configure(secure.Config)
	secure.EnableHTTP2 = true
	secure.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server(b, "bench").TLS(b)}}
	secure.StartTLS()
	defer secure.Close()

	transports := []struct {
		name string
		url  string
		tr   *http.Transport
	}{
		{"plain", plain.URL, &http.Transport{}},
		{"TLS-HTTP1.1", secure.URL, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}},
		{"TLS-HTTP2", secure.URL, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}},
	}
	for _, w := range []struct {
		name   string
		count  int
		accept string
	}{{"single-JSON", 1, "application/json"}, {"binary-65536", 1 << 16, MediaTypeBinary}, {"binary-1048576", 1 << 20, MediaTypeBinary}} {
		for _, t := range transports {
			b.Run(w.name+"/"+t.name, func(b *testing.B) {
				defer t.tr.CloseIdleConnections()
				hc := &http.Client{Transport: t.tr}
				req, _ := http.NewRequest("GET", t.url+"/v1/ids?count="+strconv.Itoa(w.count), nil)
				req.Header.Set("Accept", w.accept)
				buf := make([]byte, 256<<10)
				if w.count > 1 {
					b.SetBytes(8 * int64(w.count))
				}
				b.ReportAllocs()
				cpu0 := cpuTime(b)
				for b.Loop() {
					resp, err := hc.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.CopyBuffer(io.Discard, resp.Body, buf)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatal(resp.Status)
					}
				}
				b.ReportMetric(float64(w.count)*float64(b.N)/b.Elapsed().Seconds(), "IDs/s")
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the CPU time, user and system, this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
