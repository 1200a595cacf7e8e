package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/cmd/randflake/internal/server"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
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
	t.Parallel()
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

// The alert rules (deploy/prometheus/alerts.yaml) and the dashboard
// (deploy/grafana/dashboard.json) use only metrics a running serve
// exports.
func TestOperationsFilesUseExportedMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Skip("not in the repository")
	}
	type query struct{ where, expr string }
	var exprs []query
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr, For    string
				Labels, Annotations map[string]string
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a misspelt field is an error, not an ignored setting.
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("alerts.yaml, group %s: a rule without alert or expr: %+v", g.Name, r)
			}
			exprs = append(exprs, query{"alerts.yaml " + r.Alert, r.Expr})
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	b, err = os.ReadFile(filepath.Join(root, "deploy", "grafana", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard.json: panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, query{"dashboard.json panel " + p.Title, q.Expr})
		}
	}
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			exprs = append(exprs, query{"dashboard.json variable " + v.Name, m[1]})
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions found: %+v", len(exprs), exprs)
	}

	p := startServe(t, "--nodes", "0-63")
	exported := map[string]bool{}
	for name, mf := range scrape(t, p.url) {
		exported[name] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			exported[name+"_bucket"], exported[name+"_count"], exported[name+"_sum"] = true, true, true
		case dto.MetricType_SUMMARY:
			exported[name+"_count"], exported[name+"_sum"] = true, true
		}
	}
	used := map[string]bool{}
	for _, q := range exprs {
		names := promqlMetricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %s", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s: %s uses %s, which serve does not export", q.where, q.expr, n)
			}
		}
	}
	for _, n := range []string{"randflake_lease_seconds_remaining", "randflake_lease_renewal_failures_total", "http_request_duration_seconds_count", "http_request_duration_seconds_bucket"} {
		if !used[n] {
			t.Errorf("%s is in neither the alerts nor the dashboard", n)
		}
	}
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlBraces   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlName     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true}
)

// promqlMetricNames returns the metric names a PromQL expression
// selects: its identifiers outside strings, label matchers, ranges and
// grouping clauses that are neither functions nor keywords.
func promqlMetricNames(expr string) []string {
	expr = promqlStrings.ReplaceAllString(expr, " ")
	expr = promqlBraces.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, loc := range promqlName.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		if promqlKeywords[name] || strings.HasPrefix(rest, "(") {
			continue
		}
		if loc[0] > 0 && (expr[loc[0]-1] == '.' || '0' <= expr[loc[0]-1] && expr[loc[0]-1] <= '9') {
			continue // the exponent or unit of a number: 1e6, 5m
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (instance) (rate(http_request_duration_seconds_count{code=~"5..",x="a b"}[5m])) / sum(rate(up[1m])) > 0.01`: {"http_request_duration_seconds_count", "up"},
		`histogram_quantile(0.99, sum by (le, route) (rate(x_bucket[5m])))`:                                                 {"x_bucket"},
		`a > 0 and a < 4 or on (job) b * 1e6`:                                                                               {"a", "b"},
		`absent(randflake_nope)`:                                                                                            {"randflake_nope"},
	} {
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}
