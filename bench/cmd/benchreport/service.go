package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The service suite: randflake serve on a loopback port, measured by one
// run of the bench module's load generator (cmd/loadgen) per mode. It runs once per report run, after the
// rounds of the other suites, not once per round.

// serviceMode is one row of the service suite: one loadgen run.
type serviceMode struct {
	name  string   // passed as --benchfmt NAME; the benchmark is Service/NAME
	label string   // what the report calls the row
	args  []string // load's flags, but --url, --bare-url and --benchfmt
	// bare runs the mode against the bare net/http handler, served by a
	// process of its own (loadgen --serve-bare) as the service is,
	// so that both share the machine with the load generator alike.
	bare bool
}

// serviceModes is the service suite, one load run per row, in this order.
// Every run goes to the same service; -short shortens every --duration to
// serviceShortDuration. A name must not end in a hyphen and digits (the
// benchmark format reads that as GOMAXPROCS).
//
// Every run counts answers instead of decoding them (--verify=false: status,
// type, length and number of IDs checked), so that the load generator,
// which shares the machine, costs as little as it can; the bare handler is
// measured that way too.
var serviceModes = []serviceMode{
	{name: serviceBinary, label: "binary batches of 1,048,576 IDs",
		args: []string{"--batch", "1048576", "--concurrency", "2", "--format", "binary", "--verify=false", "--duration", "5s"}},
	{name: serviceJSON, label: "JSON batches of 10,000 IDs",
		args: []string{"--batch", "10000", "--concurrency", "2", "--verify=false", "--duration", "5s"}},
	{name: serviceSingle, label: "single IDs, unpaced",
		args: []string{"--batch", "1", "--concurrency", "8", "--verify=false", "--duration", "5s"}},
	{name: servicePaced, label: "single IDs, paced at 5,000 requests/s",
		args: []string{"--batch", "1", "--concurrency", "8", "--rate", "5000", "--verify=false", "--duration", "5s"}},
	// The bare net/http handler under the load of serviceSingle: the
	// ceiling of HTTP on this machine.
	{name: serviceBare, label: "bare net/http handler, single IDs, unpaced", bare: true,
		args: []string{"--batch", "1", "--concurrency", "8", "--duration", "5s", "--bare"}},
}

// bareArgs are the flags of the bare handler's own process, but the
// address: a body of the size and type of a single-ID JSON answer.
var bareArgs = []string{"--batch", "1"}

// bareVar stands for the bare handler's port in the commands the report
// shows.
const bareVar = "$BARE_PORT"

// The names of the modes that the report's ratios compare.
const (
	serviceBinary = "batch-binary"
	serviceJSON   = "batch-json"
	serviceSingle = "single"
	servicePaced  = "single-paced"
	serviceBare   = "bare-handler"
)

// serveNodeIDs is how many node IDs the service claims from its state
// directory (randflake serve's default): with 131,072 IDs per node ID and
// second, the most it can ever hand out.
const serveNodeIDs = 1024

// serveArgs are the flags of randflake serve, but --listen.
var serveArgs = []string{"--claim", strconv.Itoa(serveNodeIDs)}

// Targets the report holds the service to.
const (
	targetBareShare = 0.90 // single-ID requests/s at least this share of the bare handler's
	targetPacedP99  = 2.0  // ms: p99 latency at 5,000 requests/s below this
)

const serviceShortDuration = "1s"

// serviceChoice says whether a run measures the service suite.
type serviceChoice int

const (
	serviceOff         serviceChoice = iota
	serviceOn                        // run it
	serviceIfAvailable               // run it (-short; the same as serviceOn since the load generator is this module's)
)

// portVar stands for the service's port in the commands the report shows.
const portVar = "$PORT"

// serveDisplay is the command that starts the service, as the report shows
// it.
func serveDisplay() string {
	return "RANDFLAKE_STATE_DIR=$(mktemp -d) randflake serve --listen 127.0.0.1:" + portVar + " " + strings.Join(serveArgs, " ")
}

// loadArgs are the arguments of the load run of mode m against baseURL,
// or against the bare handler at bareURL for a bare mode.
func loadArgs(m serviceMode, baseURL, bareURL string, short bool) []string {
	args := []string{"--url", baseURL}
	args = append(args, m.args...)
	if m.bare {
		args = append(args, "--bare-url", bareURL)
	}
	if short {
		args = withDuration(args, serviceShortDuration)
	}
	return append(args, "--benchfmt", m.name)
}

// loadDisplay is the load command of mode m as the report shows it (for a
// bare mode, with the command of the bare handler's process before it).
func loadDisplay(m serviceMode, short bool) string {
	cmd := "loadgen " + strings.Join(loadArgs(m, "http://127.0.0.1:"+portVar, "http://127.0.0.1:"+bareVar, short), " ")
	if m.bare {
		cmd = "loadgen --serve-bare 127.0.0.1:" + bareVar + " " + strings.Join(bareArgs, " ") + " & " + cmd
	}
	return cmd
}

// withDuration returns args with the value of every --duration set to d.
func withDuration(args []string, d string) []string {
	out := slices.Clone(args)
	for i := range out {
		switch {
		case out[i] == "--duration" && i+1 < len(out):
			out[i+1] = d
		case strings.HasPrefix(out[i], "--duration="):
			out[i] = "--duration=" + d
		}
	}
	return out
}

// serviceSuite is the service suite, ready to run: randflake and the
// load generator are built.
type serviceSuite struct {
	cfg     runConfig
	bin     string // randflake, for serve
	loadBin string // loadgen, for the load and the bare handler
}

// prepareService builds randflake and the load generator.
func prepareService(cfg runConfig) (*serviceSuite, error) {
	if cfg.Service == serviceOff {
		return nil, nil
	}
	s := &serviceSuite{cfg: cfg, bin: filepath.Join(cfg.WorkDir, "randflake"), loadBin: filepath.Join(cfg.WorkDir, "loadgen")}
	for _, b := range []struct{ out, dir, pkg string }{
		{s.bin, filepath.Join(cfg.RootDir, "cmd", "randflake"), "."},
		{s.loadBin, filepath.Join(cfg.RootDir, "bench"), "./cmd/loadgen"},
	} {
		fmt.Fprintf(cfg.Log, "building %s\n", b.out)
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		cmd.Env = append(os.Environ(), "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s in %s: %v\n%s", b.pkg, cmd.Dir, err, out)
		}
	}
	return s, nil
}

// command returns the command that runs bin with args, through cfg.Exec,
// in the environment of the suite.
func (s *serviceSuite) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	argv := append(append(slices.Clone(s.cfg.Exec), bin), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = serviceEnv(os.Environ(), "")
	return cmd
}

// serviceEnv returns env without the variables that would make the service
// use another state directory, secret or kernel than its own defaults, and
// with RANDFLAKE_STATE_DIR=stateDir unless stateDir is "".
func serviceEnv(env []string, stateDir string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "RANDFLAKE_STATE_DIR", "RANDFLAKE_SECRET", "RANDFLAKE_SECRET_FILE", "RANDFLAKE_KERNEL", "RANDFLAKE_INSPECT_TOKEN_FILE":
			continue
		}
		out = append(out, e)
	}
	if stateDir != "" {
		out = append(out, "RANDFLAKE_STATE_DIR="+stateDir)
	}
	return out
}

// serviceResult is the outcome of one mode.
type serviceResult struct {
	line    resultLine
	command string // as the report shows it
}

// run starts the service, runs every mode against it, appends load's output
// to raw under kernel, and stops the service.
func (s *serviceSuite) run(kernel string, raw io.Writer) ([]serviceResult, *ServiceInfo, error) {
	svc, err := s.start()
	if err != nil {
		return nil, nil, err
	}
	var out []serviceResult
	for _, m := range serviceModes {
		t := time.Now()
		var res serviceResult
		if m.bare {
			res, err = s.loadBare(m, svc.url, kernel, raw)
		} else {
			res, err = s.load(m, svc.url, "", kernel, raw)
		}
		if err != nil {
			return nil, nil, errors.Join(err, svc.stop())
		}
		out = append(out, res)
		fmt.Fprintf(s.cfg.Log, "service   %-13s %s  %5.1fs\n", m.name, serviceFigures(res.line), time.Since(t).Seconds())
	}
	if err := svc.stop(); err != nil {
		return nil, nil, err
	}
	return out, &ServiceInfo{Serve: serveDisplay(), NodeIDs: serveNodeIDs}, nil
}

// serviceFigures is a one-line summary of a mode's result, for the log.
func serviceFigures(l resultLine) string {
	var parts []string
	for _, v := range l.values {
		if v.unit != "ns/op" {
			parts = append(parts, formatNumber(v.v)+" "+v.unit)
		}
	}
	return strings.Join(parts, ", ")
}

// loadBare runs a bare mode: it starts the bare handler's process, runs
// the mode against it and stops it.
func (s *serviceSuite) loadBare(m serviceMode, baseURL, kernel string, raw io.Writer) (serviceResult, error) {
	port, err := freePort()
	if err != nil {
		return serviceResult{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	bare := &runningService{url: "http://" + addr, done: make(chan struct{})}
	bare.cmd = s.command(context.Background(), s.loadBin, append([]string{"--serve-bare", addr}, bareArgs...)...)
	bare.cmd.Stdout, bare.cmd.Stderr = &bare.log, &bare.log
	if err := bare.cmd.Start(); err != nil {
		return serviceResult{}, err
	}
	go func() {
		bare.err = bare.cmd.Wait()
		close(bare.done)
	}()
	if err := bare.waitAnswers("/v1/ids?count=1", time.Minute); err != nil {
		return serviceResult{}, errors.Join(err, bare.stop())
	}
	res, err := s.load(m, baseURL, bare.url, kernel, raw)
	return res, errors.Join(err, bare.stop())
}

// load runs one mode against the service at baseURL (and the bare handler
// at bareURL, for a bare mode).
func (s *serviceSuite) load(m serviceMode, baseURL, bareURL, kernel string, raw io.Writer) (serviceResult, error) {
	limit := 5 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := s.command(ctx, s.loadBin, loadArgs(m, baseURL, bareURL, s.cfg.Short)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return serviceResult{}, fmt.Errorf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	fmt.Fprintf(raw, "randflake-kernel: %s\n", kernel)
	raw.Write(stdout.Bytes())
	l, err := parseServiceOutput(stdout.Bytes(), m.name)
	if err != nil {
		return serviceResult{}, fmt.Errorf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	return serviceResult{line: l, command: loadDisplay(m, s.cfg.Short)}, nil
}

// runningService is a started randflake serve.
type runningService struct {
	cmd   *exec.Cmd
	url   string
	state string        // its state directory, removed once it has stopped
	done  chan struct{} // closed when the process has exited
	err   error         // its exit status, once done
	log   bytes.Buffer  // its output, to read once done
}

// start starts randflake serve on a free loopback port with a new state
// directory and waits until it is ready.
func (s *serviceSuite) start() (*runningService, error) {
	state, err := os.MkdirTemp(s.cfg.WorkDir, "service-state-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	svc := &runningService{url: "http://" + addr, state: state, done: make(chan struct{})}
	svc.cmd = s.command(context.Background(), s.bin, append([]string{"serve", "--listen", addr}, serveArgs...)...)
	svc.cmd.Env = serviceEnv(os.Environ(), state)
	svc.cmd.Stdout, svc.cmd.Stderr = &svc.log, &svc.log
	if err := svc.cmd.Start(); err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	go func() {
		svc.err = svc.cmd.Wait()
		close(svc.done)
	}()
	fmt.Fprintf(s.cfg.Log, "service   randflake serve --listen %s (pid %d)\n", addr, svc.cmd.Process.Pid)
	if err := svc.waitReady(time.Minute); err != nil {
		return nil, errors.Join(err, svc.stop())
	}
	return svc, nil
}

// what names the process in messages: randflake serve, or loadgen
// --serve-bare.
func (svc *runningService) what() string {
	for _, a := range svc.cmd.Args {
		switch a {
		case "serve":
			return "randflake serve"
		case "--serve-bare":
			return "loadgen --serve-bare"
		}
	}
	return strings.Join(svc.cmd.Args, " ")
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

// waitReady polls /readyz until it answers 200, the process exits or the
// time is up.
func (svc *runningService) waitReady(limit time.Duration) error {
	return svc.waitAnswers("/readyz", limit)
}

// waitAnswers polls path until it answers 200, the process exits or the
// time is up.
func (svc *runningService) waitAnswers(path string, limit time.Duration) error {
	cli := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := cli.Get(svc.url + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-svc.done:
			return fmt.Errorf("%s exited before it was ready: %v\n%s", svc.what(), svc.err, svc.log.Bytes())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no 200 at %s%s after %v", strings.Join(svc.cmd.Args, " "), svc.url, path, limit)
		}
	}
}

// stop ends the service by its PID: SIGTERM, which lets it release its node
// IDs, then a kill if it has not exited within 15 seconds; then it removes
// the state directory. A service that exits with an error is reported, with
// its output.
func (svc *runningService) stop() error {
	if svc.state != "" {
		defer os.RemoveAll(svc.state)
	}
	select {
	case <-svc.done:
		return fmt.Errorf("%s (pid %d) exited early: %v\n%s", svc.what(), svc.cmd.Process.Pid, svc.err, svc.log.Bytes())
	default:
	}
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		svc.cmd.Process.Kill()
	}
	select {
	case <-svc.done:
	case <-time.After(15 * time.Second):
		svc.cmd.Process.Kill()
		<-svc.done
		return fmt.Errorf("%s (pid %d) did not stop within 15s of SIGTERM; killed\n%s", svc.what(), svc.cmd.Process.Pid, svc.log.Bytes())
	}
	if svc.err != nil {
		return fmt.Errorf("%s (pid %d) stopped with %v\n%s", svc.what(), svc.cmd.Process.Pid, svc.err, svc.log.Bytes())
	}
	return nil
}
