package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"

	dto "github.com/prometheus/client_model/go"
)

// scrape fetches url's /metrics and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// metricValue returns the value of the series of name whose labels
// include labels (name=value pairs), and whether there is one. For a
// histogram it is the count.
func metricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// /metrics has the runtime, process, request-duration and lease series,
// with the values the requests made and the lease imply; /openapi.yaml
// is the embedded document.
func TestServeMetrics(t *testing.T) {
	p := startServe(t, "--nodes", "100-163")
	get := func(path string, want int) {
		t.Helper()
		resp, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s: status %d, want %d", path, resp.StatusCode, want)
		}
	}
	for range 7 {
		get("/v1/ids?count=3", 200)
	}
	get("/v1/ids?count=0", 400)
	get("/v1/ids?count=0", 400)
	get("/no/such/path", 404)
	get("/v1/ids/abc", 404) // inspection disabled: the route, not other

	resp, err := http.Get(p.url + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(doc, server.OpenAPI) {
		t.Errorf("/openapi.yaml: %d %q, %d bytes; want 200 application/yaml, the %d bytes of the document",
			resp.StatusCode, resp.Header.Get("Content-Type"), len(doc), len(server.OpenAPI))
	}

	mfs := scrape(t, p.url)
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{"/v1/ids", "200", 7},
		{"/v1/ids", "400", 2},
		{"other", "404", 1},
		{"/v1/ids/{id}", "404", 1},
		{"/openapi.yaml", "200", 1},
	} {
		got, ok := metricValue(mfs, "http_request_duration_seconds", "route", c.route, "code", c.code)
		if !ok || got != c.want {
			t.Errorf("http_request_duration_seconds count {route=%q,code=%q} = %v (present: %v), want %v", c.route, c.code, got, ok, c.want)
		}
	}
	if n, _ := metricValue(mfs, "http_request_duration_seconds", "route", "/readyz", "code", "200"); n < 1 {
		t.Errorf("no /readyz request counted, though startServe waited for readiness")
	}
	for _, mf := range mfs["http_request_duration_seconds"].GetMetric() {
		for _, lp := range mf.Label {
			if lp.GetName() == "route" && strings.Contains(lp.GetValue(), "no/such") {
				t.Errorf("a raw path became a route label: %q", lp.GetValue())
			}
		}
	}
	for _, c := range []struct {
		name     string
		min, max float64
	}{
		{"randflake_lease_first_node", 100, 100},
		{"randflake_lease_last_node", 163, 163},
		// A static lease runs to the largest timestamp.
		{"randflake_lease_seconds_remaining", float64(randflake.MaxTimestamp) - 2e9, float64(randflake.MaxTimestamp)},
		{"randflake_lease_renewals_total", 0, 1e6},
		{"randflake_lease_renewal_failures_total", 0, 0},
		{"randflake_ids_issued_total", 21, 21},
		{"go_goroutines", 1, 1e6},
		{"process_resident_memory_bytes", 1, 1 << 40},
		{"process_start_time_seconds", 1, 1e10},
	} {
		got, ok := metricValue(mfs, c.name)
		if !ok || got < c.min || got > c.max {
			t.Errorf("%s = %v (present: %v), want %v to %v", c.name, got, ok, c.min, c.max)
		}
	}
}
