package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

func TestParseServiceOutput(t *testing.T) {
	good := "BenchmarkService/single \t 88000\t 56818 ns/op\t 17600 IDs/s\t 17600 req/s\t 0.3637 p50-ms\t 2.910 p99-ms\n"
	l, err := parseServiceOutput([]byte("requests 88000, IDs 88000 (all distinct), 5.00s\n"+good+"latency p50 363µs\n"), serviceSingle)
	if err != nil {
		t.Fatal(err)
	}
	if l.name != "Service/single" || l.procs != 1 || l.iters != 88000 || len(l.values) != 5 ||
		l.values[2] != (value{17600, "req/s"}) || l.values[4] != (value{2.91, "p99-ms"}) {
		t.Errorf("parsed %+v", l)
	}
	l, err = parseServiceOutput([]byte("BenchmarkService/batch-json-8 1 1.9e6 ns/op 5.2e6 IDs/s 520 req/s 2.25 p50-ms 9.7 p99-ms 4 p90-ms\n"), serviceJSON)
	if err != nil || l.procs != 8 || l.iters != 1 || len(l.values) != 6 {
		t.Errorf("with GOMAXPROCS and an extra unit: %+v, %v", l, err)
	}
	for _, tc := range []struct{ out, want string }{
		{"", "0 result lines in the output of load, want one BenchmarkService/single line"},
		{good + good, "2 result lines in the output of load, want one BenchmarkService/single line"},
		{strings.Replace(good, "/single", "/bare-handler", 1), "result line of BenchmarkService/bare-handler, want BenchmarkService/single"},
		{"BenchmarkService/single 5 2 ns/op 3 IDs/s 4 req/s\n", "result line BenchmarkService/single has no p50-ms, p99-ms"},
		{"BenchmarkService/single 5 2 ns/op 3 IDs/s 4 req/s 1 p50 ms 2 p99-ms\n", "0 result lines in the output of load, want one BenchmarkService/single line"},
	} {
		if _, err := parseServiceOutput([]byte(tc.out), serviceSingle); err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.out, err, tc.want)
		}
	}
}

func TestServiceModes(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range serviceModes {
		if seen[m.name] {
			t.Errorf("mode %s twice", m.name)
		}
		seen[m.name] = true
		// The name must survive the benchmark format: no -digits suffix.
		l, err := parseServiceOutput([]byte("BenchmarkService/"+m.name+" 1 1 ns/op 1 IDs/s 1 req/s 1 p50-ms 1 p99-ms\n"), m.name)
		if err != nil || l.procs != 1 {
			t.Errorf("mode %s: %v, procs %d", m.name, err, l.procs)
		}
		if !strings.Contains(strings.Join(m.args, " "), "--duration 5s") {
			t.Errorf("mode %s: no --duration 5s", m.name)
		}
	}
	for _, name := range []string{serviceBinary, serviceJSON, serviceSingle, servicePaced, serviceBare} {
		if !seen[name] {
			t.Errorf("no mode %s, which the report compares", name)
		}
	}
	got := loadDisplay(serviceModes[3], true)
	want := "loadgen --url http://127.0.0.1:$PORT --batch 1 --concurrency 8 --rate 5000 --verify=false --duration 1s --benchfmt single-paced"
	if got != want {
		t.Errorf("short paced command:\n%s\nwant\n%s", got, want)
	}
	if got := strings.Join(withDuration([]string{"--duration=5s", "-x", "--duration", "5s"}, "1s"), " "); got != "--duration=1s -x --duration 1s" {
		t.Errorf("withDuration: %s", got)
	}
	if got := serveDisplay(); got != "RANDFLAKE_STATE_DIR=$(mktemp -d) randflake serve --listen 127.0.0.1:$PORT --claim 1024" {
		t.Errorf("serve command: %s", got)
	}
}

func TestServiceEnv(t *testing.T) {
	got := serviceEnv([]string{"HOME=/h", "RANDFLAKE_KERNEL=avx2", "RANDFLAKE_SECRET=00", "RANDFLAKE_STATE_DIR=/x", "RANDFLAKE_SECRET_FILE=/s", "RANDFLAKE_INSPECT_TOKEN_FILE=/t", "PATH=/bin"}, "/state")
	if strings.Join(got, " ") != "HOME=/h PATH=/bin RANDFLAKE_STATE_DIR=/state" {
		t.Errorf("env: %q", got)
	}
}

func TestCheckResultsService(t *testing.T) {
	r := fakeResults(t, "test-amd64-00000001", "amd64", []string{"generic"}, false)
	var keep []*Benchmark
	for _, b := range r.Benchmarks {
		if b.Name != serviceBenchmark(serviceBare) {
			keep = append(keep, b)
		}
	}
	r.Benchmarks = keep
	err := checkResults(r)
	if want := `no result for service Service/bare-handler under kernel "generic"`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	r.Run.Service = nil // a run without the suite
	if err := checkResults(r); err != nil {
		t.Errorf("without the service suite: %v", err)
	}
}

// TestServiceStartStop builds randflake, starts the service on a free port
// with a new state directory, checks that it serves IDs and stops it, and
// runs the suite in its short form with the load generator, cmd/loadgen.
func TestServiceStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs randflake serve")
	}
	root, _, err := moduleDirs()
	if err != nil {
		t.Fatal(err)
	}
	cfg := runConfig{RootDir: root, WorkDir: t.TempDir(), Short: true, Service: serviceIfAvailable, Log: io.Discard}
	s, err := prepareService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := s.start()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(svc.url + "/v1/ids?count=3")
	if err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(b), `{"ids":[`) {
			t.Errorf("GET /v1/ids: %d %s", resp.StatusCode, b)
		}
	}
	if err := svc.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(svc.url + "/readyz"); err == nil {
		t.Error("the service still answers after stop")
	}
	if _, err := os.Stat(svc.state); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind: %v", svc.state, err)
	}
	if !strings.Contains(svc.log.String(), "lease released") {
		t.Errorf("the service did not release its node IDs:\n%s", svc.log.Bytes())
	}
	var raw strings.Builder
	res, info, err := s.run("generic", &raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(serviceModes) || info.NodeIDs != serveNodeIDs || info.Serve != serveDisplay() {
		t.Fatalf("%d results, %+v", len(res), info)
	}
	for i, m := range serviceModes {
		if res[i].line.name != serviceBenchmark(m.name) || res[i].command != loadDisplay(m, true) {
			t.Errorf("mode %s: %s, %s", m.name, res[i].line.name, res[i].command)
		}
	}
	if n := strings.Count(raw.String(), "randflake-kernel: generic\n"); n != len(serviceModes) {
		t.Errorf("raw output: %d kernel lines\n%s", n, raw.String())
	}
}
