package loadclient

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// Flags sets a run's defaults and each flag's field; Check refuses every
// value out of bounds with a UsageError naming the flag as the program
// writes it, and https only where the program allows it.
func TestFlagsAndCheck(t *testing.T) {
	parse := func(dash string, args ...string) Config {
		t.Helper()
		var c Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.Flags(fs, dash)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	def := parse("--")
	want := Config{URL: "http://127.0.0.1:8080", Format: "json", Batch: 1, Concurrency: 4, Duration: 5 * time.Second, Verify: true}
	if def != want {
		t.Fatalf("defaults %+v, want %+v", def, want)
	}
	if err := def.Check("--", true); err != nil {
		t.Fatalf("the defaults refused: %v", err)
	}
	set := parse("-", "-url", "http://localhost:9/", "-format", "binary", "-batch", "7", "-concurrency", "3",
		"-duration", "2s", "-requests", "5", "-rate", "1.5", "-verify=false")
	want = Config{URL: "http://localhost:9/", Format: "binary", Batch: 7, Concurrency: 3, Duration: 2 * time.Second, Requests: 5, Rate: 1.5}
	if set != want {
		t.Fatalf("flags set %+v, want %+v", set, want)
	}
	for _, c := range []struct {
		dash    string
		httpsOK bool
		args    []string
		want    string
	}{
		{"--", true, []string{"--url", "ftp://127.0.0.1:1"}, "--url must be an http or https URL"},
		{"-", false, []string{"-url", "https://127.0.0.1:1"}, "-url must be an http URL"},
		{"--", true, []string{"--url", "https://example.com"}, "--url must point at this machine"},
		{"--", true, []string{"--batch", "0"}, "--batch must be positive, --duration in (0, 60s]"},
		{"-", false, []string{"-duration", "61s"}, "-batch must be positive, -duration in (0, 60s]"},
		{"--", true, []string{"--rate", "-1"}, "--requests and --rate not negative"},
		{"--", true, []string{"--concurrency", "1025"}, "--concurrency must be between 1 and 1024"},
		{"-", false, []string{"-format", "xml"}, "-format must be json, text or binary"},
	} {
		cfg := parse(c.dash, c.args...)
		err := cfg.Check(c.dash, c.httpsOK)
		var ue UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: Check gave %v, want a UsageError containing %q", c.args, err, c.want)
		}
	}
	https := parse("--", "--url", "https://[::1]:8443")
	if err := https.Check("--", true); err != nil || https.URL != "https://[::1]:8443" {
		t.Errorf("an https URL on ::1 where allowed: %v, URL %q", err, https.URL)
	}
}
