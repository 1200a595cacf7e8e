package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/client"
)

// The end-to-end tests of who may issue (--issue-tokens-file) and of the
// clients' fair shares (--client-rate, --client-burst), with the real
// binary, real curl and the Go client.

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
	carolToken = "carol-token-0123456789abcdef"
)

// Issuing needs a listed token: curl and the Go client get 401 without
// one or with a wrong one, and IDs with a listed one; inspection keeps its
// own token; SIGHUP (and a change on disk) reloads the file, a bad file
// keeps the clients there were; no token ever reaches the log.
func TestServeIssueTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("runs curl: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("# who may issue\nalice "+aliceToken+"\nbob\t"+bobToken+"\n"), 0o600)
	inspect := filepath.Join(dir, "inspect")
	os.WriteFile(inspect, []byte("inspection-token-0123456789\n"), 0o600)
	p := startServe(t, "--nodes", "0-63", "--issue-tokens-file", tokens, "--inspect-token-file", inspect, "--access-log")

	for what, args := range map[string][]string{
		"no token":          {p.url + "/v1/ids?count=2"},
		"a wrong token":     {"-H", "Authorization: Bearer not-" + aliceToken, p.url + "/v1/ids?count=2"},
		"the inspect token": {"-H", "Authorization: Bearer inspection-token-0123456789", p.url + "/v1/ids?count=2"},
		"basic":             {"-u", "alice:" + aliceToken, p.url + "/v1/ids?count=2"},
	} {
		r := runCurl(t, args...)
		if r.status != 401 || r.header.Get("Www-Authenticate") != `Bearer realm="randflake"` || !strings.Contains(string(r.body), `"kind":"unauthorized"`) {
			t.Errorf("curl with %s: %d %q %s; want a JSON 401 with the bearer challenge", what, r.status, r.header.Get("Www-Authenticate"), r.body)
		}
		checkCurl(t, p.url+"/v1/ids?count=2", r)
	}
	r := runCurl(t, "-H", "Authorization: Bearer "+aliceToken, p.url+"/v1/ids?count=2")
	if r.status != 200 || !strings.Contains(string(r.body), `"ids"`) {
		t.Errorf("curl with alice's token: %d %s", r.status, r.body)
	}
	checkCurl(t, p.url+"/v1/ids?count=2", r)
	// The issue token does not inspect.
	if r := runCurl(t, "-H", "Authorization: Bearer "+aliceToken, p.url+"/v1/ids/3vgoe12ccb8gh"); r.status != 401 {
		t.Errorf("inspection with alice's token: %d, want 401", r.status)
	}

	fetchWith := func(token string) error {
		t.Helper()
		c, err := client.New(client.Config{URL: p.url, Token: token, BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ids, err := c.Fetch(context.Background())
		if err == nil && len(ids) != 100 {
			err = fmt.Errorf("%d IDs", len(ids))
		}
		return err
	}
	is401 := func(err error) bool {
		var se *client.ServerError
		return errors.As(err, &se) && se.StatusCode == 401 && se.Kind == "unauthorized"
	}
	if err := fetchWith(bobToken); err != nil {
		t.Errorf("Go client with bob's token: %v", err)
	}
	if err := fetchWith(carolToken); !is401(err) {
		t.Errorf("Go client with carol's token before she is listed: %v, want the 401", err)
	}

	// SIGHUP after a new file: carol in, alice out.
	writeAtomically(t, tokens, []byte("carol "+carolToken+"\nbob "+bobToken+"\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, regexp.MustCompile(`msg="issue tokens (reloaded" clients=2 trigger=SIGHUP|unchanged" trigger=SIGHUP)`), 10*time.Second)
	if err := fetchWith(carolToken); err != nil {
		t.Errorf("carol after the reload: %v", err)
	}
	if err := fetchWith(aliceToken); !is401(err) {
		t.Errorf("alice after the reload: %v, want the 401", err)
	}
	// Bad files keep carol and bob: a repeated token, a short one, a
	// world-readable file. Each is logged with its reason on SIGHUP.
	for _, c := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{"carol " + carolToken + "\ndave " + carolToken + "\n", 0o600, "line 2 (client dave): the token is the same as line 1's"},
		{"carol " + carolToken + "\nerin erin-tk-42\n", 0o600, "line 2 (client erin): the token is shorter than 16 characters"},
		{"carol " + carolToken + "\n", 0o644, "chmod 600"},
	} {
		before := strings.Count(p.logs.String(), "issue tokens not reloaded")
		writeAtomically(t, tokens, []byte(c.content), c.mode)
		p.cmd.Process.Signal(syscall.SIGHUP)
		limit := within(10 * time.Second)
		for deadline := time.Now().Add(limit); strings.Count(p.logs.String(), "issue tokens not reloaded") == before; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q: no failed reload logged within %v (%s):\n%s", c.content, limit, slowness(), p.logs.String())
			}
		}
		lines := regexp.MustCompile(`level=WARN msg="issue tokens not reloaded; the current clients stay" trigger=\S+ err=.*`).FindAllString(p.logs.String(), -1)
		if !strings.Contains(lines[len(lines)-1], c.want) {
			t.Errorf("%q: logged %q, want %q", c.content, lines[len(lines)-1], c.want)
		}
		for _, token := range []string{carolToken, bobToken} {
			if err := fetchWith(token); err != nil {
				t.Errorf("after the bad file %q: %v", c.content, err)
			}
		}
	}
	// Nothing secret in the log: not a token, not the inspection token.
	stop(t, p)
	for _, secret := range []string{aliceToken, bobToken, carolToken, "inspection-token", "erin-tk-42"} {
		if strings.Contains(p.logs.String(), secret) {
			t.Errorf("the log holds %q:\n%s", secret, p.logs.String())
		}
	}
	if !strings.Contains(p.logs.String(), "client=bob") {
		t.Errorf("the access log does not name the client bob")
	}
}

// A bad tokens file refuses to start, naming the line and never the token.
func TestServeIssueTokensRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{"alice " + aliceToken + "\nbob " + aliceToken + "\n", 0o600, "line 2 (client bob): the token is the same as line 1's"},
		{"alice " + aliceToken + "\nalice " + bobToken + "\n", 0o600, "line 2: client alice is listed twice (also on line 1)"},
		{"# nobody\n", 0o600, "no client is listed"},
		{"alice " + aliceToken + " extra\n", 0o600, "line 1: want NAME TOKEN"},
		{"alice " + aliceToken + "\n", 0o604, "chmod 600"},
	} {
		f := filepath.Join(dir, "tokens")
		os.Remove(f)
		os.WriteFile(f, []byte(c.content), c.mode)
		r := runBinaryTimeout(t, 30*time.Second, secretEnv, "serve", "--nodes", "0-9", "--issue-tokens-file", f)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d, %q; want exit 1 and %q", c.content, r.code, r.stderr, c.want)
		}
		if strings.Contains(r.stderr, aliceToken) || strings.Contains(r.stderr, bobToken) {
			t.Errorf("%q: the message holds a token: %q", c.content, r.stderr)
		}
	}
}

// shareRun is what one client saw in TestServeClientRate.
type shareRun struct {
	requests, ok, quota, other int
	ids                        int64
	latencies                  []time.Duration
	firstErr                   string
}

func (r *shareRun) successRate() float64 { return float64(r.ok) / float64(r.requests) }

func (r *shareRun) p99() time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return l[int(0.99*float64(len(l)-1))]
}

// fairnessLoad runs, for d and until client steady has made minSteady
// requests (a loaded machine makes fewer a second): flooders goroutines
// of client flood, each asking for 1,048,576 binary IDs again as soon as
// it has an answer (ignoring Retry-After), and client steady asking for
// 1,000 JSON IDs at 50 requests a second, 50,000 IDs a second. It
// returns what each saw and how long the run took, from the start of the
// first request to the cancelling of the last.
func fairnessLoad(t *testing.T, url string, flooders int, d time.Duration, minSteady int) (flood, steady shareRun, elapsed time.Duration) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: flooders + 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: contractTransport{base: tr}, Timeout: within(30 * time.Second)}
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// The run's end: d, once steady has made minSteady requests, or
	// the most a loaded machine is given for them.
	limit := within(d + 30*time.Second)
	go func() {
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			n := steady.requests
			mu.Unlock()
			if since := time.Since(start); since >= d && n >= minSteady || since >= limit {
				return
			}
		}
	}()
	ask := func(run *shareRun, token, accept string, count int) {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/ids?count=%d", url, count), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", accept)
		start := time.Now()
		resp, err := hc.Do(req)
		var n int64
		if err == nil {
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return // the run is over: an interrupted request counts for nothing
		}
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		run.requests++
		switch {
		case err != nil:
			run.other++
			if run.firstErr == "" {
				run.firstErr = err.Error()
			}
		case resp.StatusCode == 200:
			run.ok++
			run.latencies = append(run.latencies, took)
			if accept == "application/octet-stream" {
				run.ids += n / 8
			} else {
				run.ids += int64(count)
			}
		case resp.StatusCode == 429:
			run.quota++
		default:
			run.other++
			if run.firstErr == "" {
				run.firstErr = resp.Status
			}
		}
	}
	var wg sync.WaitGroup
	for range flooders {
		wg.Go(func() {
			for ctx.Err() == nil {
				ask(&flood, "flood-token-0123456789", "application/octet-stream", 1<<20)
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				ask(&steady, "steady-token-0123456789", "application/json", 1000)
			}
		}
	})
	<-ctx.Done()
	elapsed = time.Since(start)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return flood, steady, elapsed
}

// Two clients, one flooding with 1,048,576-ID binary batches as fast as
// it can: under --client-rate the other keeps all of its share (every
// request served), the flooder gets 429s and no more than its own share
// over the run's length; the per-client metrics count both by name.
// A client whose share is used up gets 429 with the seconds until its
// batch fits, and a batch above the burst is a 400, as curl sees. Without
// --client-rate (the control, logged and not asserted) the flooder takes
// the whole of each second.
func TestServeClientRate(t *testing.T) {
	if testing.Short() {
		t.Skip("floods serve for 5 s twice: not in -short")
	}
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("flood flood-token-0123456789\nsteady steady-token-0123456789\n"), 0o600)
	const d = 5 * time.Second
	const rate = 1 << 20
	// Enough requests to see a failure: 50 a second on idle cores, fewer
	// on a loaded one, which runs longer for them.
	const minSteady = 50
	// 64 node IDs: 8,388,608 IDs a second in all.
	p := startServe(t, "--nodes", "0-63", "--issue-tokens-file", tokens, "--client-rate", fmt.Sprint(rate), "--client-burst", fmt.Sprint(1<<20), "--max-binary-count", fmt.Sprint(2<<20))
	flood, steady, elapsed := fairnessLoad(t, p.url, 2, d, minSteady)
	t.Logf("with --client-rate %d, %v: steady: %d requests, %.2f%% served, p99 %v, %d IDs; flood: %d requests, %d served, %d refused (429), %d IDs",
		rate, elapsed.Round(time.Millisecond), steady.requests, 100*steady.successRate(), steady.p99(), steady.ids, flood.requests, flood.ok, flood.quota, flood.ids)
	if steady.requests < minSteady || steady.ok != steady.requests {
		t.Errorf("steady: %d of %d requests served in %v (first error: %s); want every one, and at least %d (%s)", steady.ok, steady.requests, elapsed, steady.firstErr, minSteady, slowness())
	}
	if flood.quota == 0 || flood.other != 0 {
		t.Errorf("flood: %d refused over its share, %d other failures (%s); want 429s only", flood.quota, flood.other, flood.firstErr)
	}
	// Its share: the burst, then the rate, over the run and a second of
	// slack for the requests in flight at its ends.
	if most := int64(1<<20) + int64(rate)*int64((elapsed+2*time.Second-1)/time.Second); flood.ids > most {
		t.Errorf("flood got %d IDs in %v, more than its share (%d)", flood.ids, elapsed, most)
	}
	mfs := scrape(t, p.url)
	for _, c := range []struct {
		metric, client string
		want           float64
	}{
		{"randflake_client_ids_issued_total", "steady", float64(steady.ids)},
		{"randflake_client_ids_issued_total", "flood", float64(flood.ids)},
		{"randflake_client_quota_refusals_total", "flood", float64(flood.quota)},
		{"randflake_client_quota_refusals_total", "steady", 0},
	} {
		// Requests cut off by the end of the run may have been counted
		// by the service and not by the test.
		got, _ := metricValue(mfs, c.metric, "client", c.client)
		if got < c.want || c.metric == "randflake_client_quota_refusals_total" && got > c.want+2 {
			t.Errorf("%s{client=%q} = %v, want %v", c.metric, c.client, got, c.want)
		}
	}
	if n := len(mfs["randflake_client_ids_issued_total"].GetMetric()); n != 3 {
		t.Errorf("%d series of randflake_client_ids_issued_total, want 3 (flood, steady, other)", n)
	}
	stop(t, p)

	// What curl sees, on a share that refills slowly (1,000 IDs a second,
	// bursts of 100,000), so that however slow curl is to start, a share
	// used up stays used up: the first batch of 100,000 is served, the
	// next refused with 429 and the seconds until it fits (about 100,
	// less what has refilled since), and a batch above the burst could
	// never fit (400).
	const slowRate, slowBurst = 1000, 100_000
	q := startServe(t, "--nodes", "0-63", "--issue-tokens-file", tokens, "--client-rate", fmt.Sprint(slowRate), "--client-burst", fmt.Sprint(slowBurst))
	url := q.url + "/v1/ids?count=" + fmt.Sprint(slowBurst)
	auth := []string{"-H", "Authorization: Bearer flood-token-0123456789", "-H", "Accept: application/octet-stream"}
	asked := time.Now()
	r := runCurl(t, append(slices.Clone(auth), url)...)
	if r.status != 200 || len(r.body) != 8*slowBurst {
		t.Errorf("curl for the whole burst: %d, %d bytes; want 200 and %d", r.status, len(r.body), 8*slowBurst)
	}
	r = runCurl(t, append(slices.Clone(auth), url)...)
	since := time.Since(asked)
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	// The first batch was served less than since before the second was
	// asked for: fewer than since × slowRate IDs have come back.
	least := int(math.Ceil(float64(slowBurst)/slowRate - since.Seconds()))
	if r.status != 429 || err != nil || secs < max(1, least) || secs > slowBurst/slowRate || !strings.Contains(string(r.body), `"kind":"quota"`) {
		t.Errorf("curl again %v later: %d, Retry-After %q, %s; want 429 quota with Retry-After %d to %d", since.Round(time.Millisecond), r.status, r.header.Get("Retry-After"), r.body, max(1, least), slowBurst/slowRate)
	}
	checkCurl(t, url, r)
	url = q.url + "/v1/ids?count=" + fmt.Sprint(slowBurst+1)
	r = runCurl(t, "-H", "Authorization: Bearer steady-token-0123456789", "-H", "Accept: application/octet-stream", url)
	if r.status != 400 || !strings.Contains(string(r.body), "a client's burst") {
		t.Errorf("curl for more than the burst: %d %s; want 400", r.status, r.body)
	}
	checkCurl(t, url, r)
	stop(t, q)

	// The control: the same load without shares.
	c := startServe(t, "--nodes", "0-63", "--issue-tokens-file", tokens)
	flood, steady, elapsed = fairnessLoad(t, c.url, 2, d, minSteady)
	t.Logf("without --client-rate, %v: steady: %d requests, %.2f%% served (first failure: %s), p99 %v; flood: %d requests, %d served, %d IDs",
		elapsed.Round(time.Millisecond), steady.requests, 100*steady.successRate(), steady.firstErr, steady.p99(), flood.requests, flood.ok, flood.ids)
	stop(t, c)
}

// SIGHUP no longer ends serve: without files to reload it says so, and
// goes on serving. (It used to end the process, as an unhandled SIGHUP
// does.)
func TestServeSIGHUPWithoutFiles(t *testing.T) {
	t.Parallel()
	p := startServe(t, "--nodes", "0-63")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, regexp.MustCompile(`msg="SIGHUP: nothing to reload`), 10*time.Second)
	if _, err := getIDs(http.DefaultClient, p.url, 10); err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	stop(t, p)
}
