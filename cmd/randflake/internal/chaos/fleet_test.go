//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
	"github.com/randflake/randflake/internal/testserver"
	"github.com/randflake/randflake/leasetest"
)

// clientSpec is one client goroutine per server: it fetches count IDs per
// request, pausing about pause between requests.
type clientSpec struct {
	count int
	pause time.Duration
}

type fleetConfig struct {
	name string   // "etcd" or "statedir", in every line printed
	env  []string // environment of every serve process
	// args returns serve's arguments after --listen, and a function undoing
	// what it set up, called if this attempt does not become ready.
	args         func(s *server) ([]string, func(), error)
	clients      []clientSpec
	readyTimeout time.Duration // per start attempt
	requestLimit time.Duration // per request
}

// fleet is a set of `randflake serve` processes, each with its clients and
// the IDs they received.
type fleet struct {
	t   *testing.T
	cfg fleetConfig
	dir string

	start time.Time
	// supervise ends the start-up loops; clients ends the client loops.
	superviseCtx, clientsCtx     context.Context
	stopSupervising, stopClients context.CancelFunc
	supervisors, clients         sync.WaitGroup
	lastOK                       atomic.Int64 // Unix nanoseconds of the newest successful fetch
	mu                           sync.Mutex
	servers                      []*server
	windows                      []window // when client errors are expected
	stopped                      bool
	replacements, claimants      int
}

func newFleet(t *testing.T, cfg fleetConfig) *fleet {
	f := &fleet{t: t, cfg: cfg, dir: logDir(t, cfg.name), start: time.Now()}
	f.superviseCtx, f.stopSupervising = context.WithCancel(context.Background())
	f.clientsCtx, f.stopClients = context.WithCancel(context.Background())
	t.Cleanup(func() { f.stop(5 * time.Second) })
	return f
}

// logDir returns the directory of the servers' logs: a temporary one,
// removed at the end, or, with RANDFLAKE_CHAOS_LOGS=DIR, DIR/NAME, kept.
func logDir(t *testing.T, name string) string {
	keep := os.Getenv("RANDFLAKE_CHAOS_LOGS")
	if keep == "" {
		return t.TempDir()
	}
	dir := filepath.Join(keep, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("chaos %s: the servers' logs are kept in %s\n", name, dir)
	return dir
}

// event prints one line of the timeline, with the time since the start.
func (f *fleet) event(format string, args ...any) {
	fmt.Printf("chaos %-8s %6.1fs  %s\n", f.cfg.name, time.Since(f.start).Seconds(), fmt.Sprintf(format, args...))
}

// server is one logical server: the start attempts of one name until one
// becomes ready, then that process with its clients.
type server struct {
	f          *fleet
	name, role string // role: initial, replacement, claimant
	note       string // why it was started
	// extra are serve flags of this server alone, after the fleet's (a
	// longer TTL); a server with extra flags is spared by the events aimed
	// at one server (kills, pauses, partitions, replays), whose bounds
	// assume the fleet's TTL.
	extra     []string
	launched  time.Time
	logPath   string
	transport *http.Transport

	mu         sync.Mutex
	p          *proc
	url        string
	proxies    []*leasetest.Proxy
	state      string // starting, serving, paused, cut, killed, crashed, stopped, not started
	readyAt    time.Time
	attempts   int
	startFails map[string]int
	// failedStarts are the failed start attempts, when and why, for the
	// summary's expected and unexpected counts.
	failedStarts []failedStart
	ended        string
	stopC        context.CancelFunc
	clientsWG    sync.WaitGroup
	// doomed is the start attempt kill has chosen while it was starting;
	// the supervisor never lets that one become serving, even if it
	// answered /readyz before the SIGKILL reached it.
	doomed *proc

	coll collector
	// episodes are what the schedule did to the server, for the reports.
	episodes []episode
}

type episode struct {
	what        string
	from, until time.Time
}

// addEpisode records an episode of the server.
func (s *server) addEpisode(what string, from, until time.Time) {
	s.mu.Lock()
	s.episodes = append(s.episodes, episode{what, from, until})
	s.mu.Unlock()
}

// episodeAt describes the episode of the server that ended at most 3s
// before the Unix nanosecond t, if any: "SIGSTOP 20.3s-24.9s".
func (s *server) episodeAt(t int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.episodes {
		if t >= e.from.UnixNano() && t <= e.until.Add(3*time.Second).UnixNano() {
			return fmt.Sprintf("%s %.1fs-%.1fs", e.what, e.from.Sub(s.f.start).Seconds(), e.until.Sub(s.f.start).Seconds())
		}
	}
	return ""
}

func (s *server) getState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *server) setState(st string) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

func (s *server) proc() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// logTail returns the last n lines of the server's log (every attempt's).
func (s *server) logTail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (s *server) pidString() string {
	if p := s.proc(); p != nil {
		return "pid " + strconv.Itoa(p.pid())
	}
	return "no process"
}

// launch starts a server under name in the background: it retries until
// one attempt is ready (serving with a valid lease), then starts its
// clients.
func (f *fleet) launch(name, role, note string) *server {
	return f.launchWith(name, role, note, nil)
}

// launchWith is launch with serve flags of this server alone after the
// fleet's (the last of a flag given twice wins).
func (f *fleet) launchWith(name, role, note string, extra []string) *server {
	s := &server{
		f: f, name: name, role: role, note: note, launched: time.Now(), extra: extra,
		logPath:    filepath.Join(f.dir, name+".log"),
		transport:  &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 10 * time.Second},
		state:      "starting",
		startFails: map[string]int{},
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		s.state = "not started"
		return s
	}
	f.servers = append(f.servers, s)
	f.supervisors.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.supervisors.Done()
		f.supervise(s)
	}()
	return s
}

func (f *fleet) supervise(s *server) {
	for attempt := 1; ; attempt++ {
		if f.superviseCtx.Err() != nil {
			s.setState("not started")
			return
		}
		port, err := testserver.FreePort()
		if err != nil {
			f.t.Errorf("%s: %v", s.name, err)
			s.setState("not started")
			return
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args, undo, err := f.cfg.args(s)
		if err != nil {
			f.t.Errorf("%s: %v", s.name, err)
			s.setState("not started")
			return
		}
		args = append(args, s.extra...)
		if lf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			fmt.Fprintf(lf, "=== attempt %d at %s\n", attempt, time.Now().Format(time.RFC3339Nano))
			lf.Close()
		}
		p, err := startProc(s.name, s.logPath, f.cfg.env, binary, append([]string{"serve", "--listen", addr}, args...)...)
		if err != nil {
			f.t.Errorf("%s: %v", s.name, err)
			undo()
			s.setState("not started")
			return
		}
		s.mu.Lock()
		s.p, s.url, s.attempts = p, "http://"+addr, attempt
		s.mu.Unlock()
		why := f.waitReady(s, p)
		if why == "" {
			s.mu.Lock()
			if p.exited() || s.state != "starting" || s.doomed == p {
				why = "killed during start-up"
			} else {
				s.state, s.readyAt = "serving", time.Now()
			}
			s.mu.Unlock()
		}
		if why == "" {
			fails := ""
			if attempt > 1 {
				fails = fmt.Sprintf(", after %d failed attempts: %s", attempt-1, s.failSummary())
			}
			f.event("%s ready (%s), %.1fs after launch%s", s.name, s.pidString(), time.Since(s.launched).Seconds(), fails)
			f.startClients(s)
			return
		}
		p.kill()
		undo()
		s.mu.Lock()
		first := s.startFails[why] == 0
		s.startFails[why]++
		s.failedStarts = append(s.failedStarts, failedStart{at: time.Now(), why: why})
		s.state = "starting"
		s.mu.Unlock()
		if why == "stopping" {
			s.setState("not started")
			return
		}
		if first {
			f.event("%s: start attempt %d failed (%s); retrying", s.name, attempt, why)
		}
		select {
		case <-f.superviseCtx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (s *server) failSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return countsString(s.startFails)
}

// waitReady waits until the attempt p answers /readyz with 200, and returns
// "" then, or why it did not.
func (f *fleet) waitReady(s *server, p *proc) string {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	limit := within(f.cfg.readyTimeout)
	deadline := time.Now().Add(limit)
	for {
		if p.exited() {
			return startFailure(p)
		}
		if f.superviseCtx.Err() != nil {
			return "stopping"
		}
		if resp, err := hc.Get(s.url + "/readyz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ""
			}
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("not ready within %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startFailure classifies why a start attempt exited.
func startFailure(p *proc) string {
	if e := p.exit(); e == "SIGKILL" {
		return "killed during start-up"
	}
	last := p.lastLine()
	if strings.Contains(last, "every node-ID block is claimed") {
		return "no free node IDs"
	}
	if m := errRE.FindStringSubmatch(last); m != nil {
		last = strings.ReplaceAll(m[1], `\"`, `"`)
	}
	if len(last) > 200 {
		last = last[:200] + "…"
	}
	return p.exit() + ": " + last
}

// errRE finds the error of a failed serve's last log line.
var errRE = regexp.MustCompile(`err="((?:[^"\\]|\\.)*)"`)

func (f *fleet) startClients(s *server) {
	ctx, cancel := context.WithCancel(f.clientsCtx)
	s.mu.Lock()
	s.stopC = cancel
	p := s.p
	s.mu.Unlock()
	// Report a process that exits while it should be serving.
	f.clients.Add(1)
	go func() {
		defer f.clients.Done()
		select {
		case <-p.done:
		case <-f.clientsCtx.Done():
			return
		}
		s.mu.Lock()
		st := s.state
		if st == "serving" || st == "paused" || st == "cut" {
			s.state = "crashed"
			s.ended = "exited by itself (" + p.exit() + "): " + p.lastLine()
		}
		ended := s.ended
		s.mu.Unlock()
		if st == "serving" || st == "paused" || st == "cut" {
			f.event("%s %s", s.name, ended)
			cancel()
		}
	}()
	for _, spec := range f.cfg.clients {
		s.clientsWG.Add(1)
		f.clients.Add(1)
		go func() {
			defer f.clients.Done()
			defer s.clientsWG.Done()
			s.client(ctx, spec)
		}()
	}
}

// stopServing stops the server's clients and waits for them.
func (s *server) stopServing() {
	s.mu.Lock()
	stop := s.stopC
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.clientsWG.Wait()
	s.transport.CloseIdleConnections()
}

// kill SIGKILLs the server's current process. It returns the state the
// server was in, or "between attempts" if it was starting but had no
// process running; a server still starting goes on with another attempt.
// Requests the server's clients had in flight fail: those failures, in the
// two seconds after the kill, are expected.
func (s *server) kill() string {
	s.mu.Lock()
	st, p := s.state, s.p
	if st == "starting" && (p == nil || p.exited()) {
		s.mu.Unlock()
		return "between attempts"
	}
	if st != "starting" {
		s.state = "killed"
	} else {
		s.doomed = p
	}
	s.mu.Unlock()
	at := time.Now()
	p.kill()
	s.f.expect(s, at, at.Add(2*time.Second), "SIGKILL")
	if st != "starting" {
		s.stopServing()
		s.mu.Lock()
		s.ended = "SIGKILL by the test"
		s.mu.Unlock()
		s.closeProxies()
	}
	return st
}

func (s *server) closeProxies() {
	s.mu.Lock()
	ps := s.proxies
	s.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

// pick returns a random server among those in one of the states, in
// launch order, or nil.
func (f *fleet) pick(rng *rand.Rand, states ...string) *server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c []*server
	for _, s := range f.servers {
		if slices.Contains(states, s.getState()) {
			c = append(c, s)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[rng.IntN(len(c))]
}

// pickIssuing returns a random server among those serving that issued IDs
// in the last second, in launch order, or nil. Servers with flags of their
// own are never picked.
func (f *fleet) pickIssuing(rng *rand.Rand) *server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c []*server
	recent := time.Now().Add(-time.Second).UnixNano()
	for _, s := range f.servers {
		if s.getState() == "serving" && s.coll.lastOK.Load() > recent && s.extra == nil {
			c = append(c, s)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[rng.IntN(len(c))]
}

func (f *fleet) all() []*server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.servers)
}

// waitProgress waits until the fleet has issued an ID fetched after since,
// and returns how long after since that was.
func (f *fleet) waitProgress(since time.Time, timeout time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if last := f.lastOK.Load(); last > since.UnixNano() {
			return time.Duration(last - since.UnixNano()), true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStarted waits until no server is starting any more.
func (f *fleet) waitStarted(timeout time.Duration) []*server {
	deadline := time.Now().Add(timeout)
	for {
		var starting []*server
		for _, s := range f.all() {
			if s.getState() == "starting" {
				starting = append(starting, s)
			}
		}
		if len(starting) == 0 || time.Now().After(deadline) {
			return starting
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the run: start-ups are abandoned, clients stopped, and every
// running server gets SIGTERM (and SIGKILL after grace). It may be called
// more than once.
func (f *fleet) stop(grace time.Duration) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	f.mu.Unlock()
	f.stopSupervising()
	f.supervisors.Wait()
	f.stopClients()
	f.clients.Wait()
	var wg sync.WaitGroup
	for _, s := range f.all() {
		s.mu.Lock()
		st, p := s.state, s.p
		if st == "serving" || st == "paused" || st == "cut" {
			s.state = "stopped"
		}
		s.mu.Unlock()
		if st != "serving" && st != "paused" && st != "cut" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			ps := s.proxies
			s.mu.Unlock()
			for _, px := range ps {
				px.Heal()
			}
			clean := p.term(grace)
			s.mu.Lock()
			s.ended = p.exit() + " after SIGTERM"
			if p.exit() != "exit 0" {
				s.ended += ": " + p.lastLine()
			}
			if !clean {
				s.ended = fmt.Sprintf("no exit within %v of SIGTERM: SIGKILL", grace)
			}
			s.mu.Unlock()
			s.transport.CloseIdleConnections()
			s.closeProxies()
		}()
	}
	wg.Wait()
}

// batch is one successful fetch: the IDs before index end, sent and
// received at those Unix nanoseconds.
type batch struct {
	end        int
	send, recv int64
}

// collector holds every ID a server's clients received, and their
// failures.
type collector struct {
	mu       sync.Mutex
	ids      []uint64
	batches  []batch
	errs     map[string]int
	failures []failure
	lastOK   atomic.Int64
	lastID   atomic.Uint64
}

// failure is one failed request: its kind, and when it failed (Unix
// nanoseconds).
type failure struct {
	at   int64
	kind string
}

func (c *collector) add(ids []uint64, send, recv time.Time) {
	c.mu.Lock()
	c.ids = append(c.ids, ids...)
	c.batches = append(c.batches, batch{end: len(c.ids), send: send.UnixNano(), recv: recv.UnixNano()})
	c.mu.Unlock()
	c.lastOK.Store(recv.UnixNano())
	if len(ids) > 0 {
		c.lastID.Store(ids[len(ids)-1])
	}
}

func (c *collector) fail(kind string, at time.Time) {
	c.mu.Lock()
	if c.errs == nil {
		c.errs = map[string]int{}
	}
	c.errs[kind]++
	c.failures = append(c.failures, failure{at.UnixNano(), kind})
	c.mu.Unlock()
}

// client fetches IDs until ctx ends, counting failures by kind.
func (s *server) client(ctx context.Context, spec clientSpec) {
	hc := &http.Client{Transport: s.transport, Timeout: s.f.cfg.requestLimit}
	s.mu.Lock()
	url := s.url + "/v1/ids?format=int&count=" + strconv.Itoa(spec.count)
	s.mu.Unlock()
	for ctx.Err() == nil {
		send := time.Now()
		ids, kind := fetch(ctx, hc, url, spec.count)
		recv := time.Now()
		if ctx.Err() != nil {
			return // the run is over; a request cut short is no failure
		}
		if ids != nil {
			s.coll.add(ids, send, recv)
			for {
				last := s.f.lastOK.Load()
				if last >= recv.UnixNano() || s.f.lastOK.CompareAndSwap(last, recv.UnixNano()) {
					break
				}
			}
		}
		pause := spec.pause
		if kind != "" {
			s.coll.fail(kind, recv)
			pause = max(pause, 50*time.Millisecond)
		}
		d := pause/2 + rand.N(pause+1)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// fetch asks for count IDs as decimal lines. It returns the IDs received
// (nil if none can be trusted) and a failure kind, "" on success.
func fetch(ctx context.Context, hc *http.Client, url string, count int) ([]uint64, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "bad request: " + err.Error()
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, errKind(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		if k := errKind(err); k == "timeout" {
			return nil, "timeout"
		}
		return nil, "truncated body"
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Kind string }
		json.Unmarshal(body, &e)
		if e.Kind == "" {
			e.Kind = "?"
		}
		return nil, fmt.Sprintf("%d %s", resp.StatusCode, e.Kind)
	}
	ids := make([]uint64, 0, count)
	for len(body) > 0 {
		i := 0
		for i < len(body) && body[i] != '\n' {
			i++
		}
		line := body[:i]
		if i < len(body) {
			i++
		}
		body = body[i:]
		if len(line) == 0 {
			continue
		}
		v, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return nil, "malformed body"
		}
		ids = append(ids, uint64(v))
	}
	if len(ids) != count {
		return ids, "short batch"
	}
	return ids, ""
}

// errKind names a request failure.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	return "other: " + err.Error()
}

// countsString formats counts by kind, most frequent first: "503 lease×12, refused×3".
func countsString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// within stretches a time bound of the chaos runs by how much slower than
// on idle cores this process has run (internal/slowdown): the events'
// recoveries are bounded, but a loaded machine recovers later.
func within(d time.Duration) time.Duration { return slowdown.Stretch(d) }
