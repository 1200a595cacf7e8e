package server

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/randflake/randflake/internal/slowdown"
)

func TestRouteOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/ids": RouteIDs, "/v1/ids/abc": RouteInspect, "/v1/ids/-12": RouteInspect,
		"/healthz": RouteHealth, "/readyz": RouteReady, "/metrics": RouteMetrics, "/openapi.yaml": RouteOpenAPI,
		"/v1/ids/": RouteOther, "/v1/ids/a/b": RouteOther, "//healthz": RouteOther, "/healthz/": RouteOther,
		"/secret/path": RouteOther, "": RouteOther,
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// The request durations are counted by route and status, the lease's
// series come from the Config's functions, and every error kind starts at
// zero.
func TestOpsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, ts := newServer(t, Config{
		Registry:      reg,
		LeaseNodes:    func() (int64, int64) { return 64, 127 },
		LeaseRenewals: func() (uint64, uint64) { return 5, 2 },
	})
	for _, path := range []string{"/v1/ids?count=2", "/v1/ids?count=2", "/v1/ids?count=0", "/x/y", "/openapi.yaml"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// A duration is observed once the handler has returned, which can be
	// just after the client has read the whole answer.
	n := 0
	for deadline := time.Now().Add(slowdown.Stretch(5 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
		if n = testutil.CollectAndCount(reg, "http_request_duration_seconds"); n >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if n != 4 {
		t.Errorf("%d request-duration series, want 4 (/v1/ids 200 and 400, other 404, /openapi.yaml 200)", n)
	}
	want := `
# HELP randflake_lease_first_node First node ID of the current lease.
# TYPE randflake_lease_first_node gauge
randflake_lease_first_node 64
# HELP randflake_lease_last_node Last node ID of the current lease.
# TYPE randflake_lease_last_node gauge
randflake_lease_last_node 127
# HELP randflake_lease_renewal_failures_total Failed renewals of the node-ID lease.
# TYPE randflake_lease_renewal_failures_total counter
randflake_lease_renewal_failures_total 2
# HELP randflake_lease_renewals_total Successful renewals of the node-ID lease.
# TYPE randflake_lease_renewals_total counter
randflake_lease_renewals_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "randflake_lease_first_node", "randflake_lease_last_node",
		"randflake_lease_renewals_total", "randflake_lease_renewal_failures_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "randflake_errors_total"); n != len(kinds) {
		t.Errorf("%d randflake_errors_total series, want one per kind, %d", n, len(kinds))
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds", "randflake_lease_seconds_remaining"} {
		if testutil.CollectAndCount(reg, name) != 1 {
			t.Errorf("no %s", name)
		}
	}
}

// GET /openapi.yaml is the embedded document; HEAD has its length only.
func TestOpenAPIServed(t *testing.T) {
	_, ts := newServer(t, Config{})
	resp, err := http.Get(ts.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(body, OpenAPI) {
		t.Errorf("GET: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	resp, err = http.Head(ts.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(OpenAPI)) {
		t.Errorf("HEAD: %d, length %d, want 200 and %d", resp.StatusCode, resp.ContentLength, len(OpenAPI))
	}
	resp, err = http.Post(ts.URL+"/openapi.yaml", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}
