package main

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

// runLoad runs randflake load in-process with args and returns its exit
// status and output.
func runLoad(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false }}
	code := run(e, append([]string{"load"}, args...))
	return code, stdout.String() + stderr.String()
}

// loadConfigOf is the load test that load's command line args asks for.
func loadConfigOf(t *testing.T, args ...string) loadConfig {
	t.Helper()
	var c loadCmd
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil {
		t.Fatalf("load %s: %v", strings.Join(args, " "), err)
	}
	return cfg
}

// load's flags are the load test it runs: its defaults, and every flag
// set.
func TestLoadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want loadConfig
	}{
		{nil, loadConfig{URL: "http://127.0.0.1:8080", Format: "json", Batch: 1, Concurrency: 4, Duration: 5 * time.Second, Verify: true}},
		{[]string{"--url", "http://localhost:1/x", "--format", "text", "--batch", "7", "--concurrency", "1024", "--duration", "60s",
			"--requests", "9", "--rate", "1.5", "--verify=false"},
			loadConfig{URL: "http://localhost:1/x", Format: "text", Batch: 7, Concurrency: 1024, Duration: time.Minute, Requests: 9, Rate: 1.5}},
	} {
		if got := loadConfigOf(t, c.args...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("load %q: %+v, want %+v", c.args, got, c.want)
		}
	}
	if cfg := loadConfigOf(t, "--url", "https://[::1]:8443"); cfg.TLS == nil || cfg.URL != "https://[::1]:8443" {
		t.Errorf("an https --url: %+v, want a TLS configuration", cfg)
	}
}

// --duration alone bounds a run: at its end load prints the report of the
// requests it completed.
func TestLoadDuration(t *testing.T) {
	code, out := runLoad(t, "--url", loadService(t), "--duration", "1s", "--concurrency", "4")
	if code != 0 || !strings.HasPrefix(out, "json, batch 1: requests ") || !strings.Contains(out, "\nlatency p50 ") {
		t.Errorf("load --duration 1s: exit %d:\n%s", code, out)
	}
}

// The bounds are usage errors beyond them.
func TestLoadBoundsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "1025"}, "--concurrency must be between 1 and 1024"},
		{[]string{"--concurrency", "100000"}, "--concurrency must be between 1 and 1024"},
		{[]string{"--duration", "61s"}, "--duration in (0, 60s]"},
	} {
		code, out := runLoad(t, c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("load %q: exit %d, %q; want exit 2 and %q", c.args, code, out, c.want)
		}
	}
}
