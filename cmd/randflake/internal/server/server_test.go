package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

var secret = []byte("0123456789abcdef")

func newSharded(t *testing.T) *randflake.Sharded {
	t.Helper()
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{Secret: secret, FirstNode: 0, LastNode: 63, LeaseStart: now - 1, LeaseEnd: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Generator == nil {
		cfg.Generator = newSharded(t)
	}
	if cfg.LeaseEnd == nil {
		cfg.LeaseEnd = func() int64 { return time.Now().Unix() + 3600 }
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

type errorBody struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestIDs(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 500})
	resp, body := do(t, "GET", ts.URL+"/v1/ids", nil)
	var got struct{ IDs []string }
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != 1 {
		t.Fatalf("default count: %d %s", resp.StatusCode, body)
	}
	if _, err := randflake.DecodeString(got.IDs[0]); err != nil {
		t.Fatalf("ID %q: %v", got.IDs[0], err)
	}
	resp, body = do(t, "GET", ts.URL+"/v1/ids?count=500&format=int", nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got.IDs) != 500 {
		t.Fatalf("count=500: %d %.80s", resp.StatusCode, body)
	}
	resp, body = do(t, "GET", ts.URL+"/v1/ids?count=7", map[string]string{"Accept": "text/plain"})
	lines := strings.Fields(string(body))
	if resp.StatusCode != 200 || len(lines) != 7 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("text: %d %q", resp.StatusCode, body)
	}
}

// Every bad input gets a 400 (or 404/405) with a JSON error body.
func TestBadInput(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 100})
	cases := []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/ids?count=", 400},
		{"GET", "/v1/ids?count=0", 400},
		{"GET", "/v1/ids?count=-5", 400},
		{"GET", "/v1/ids?count=abc", 400},
		{"GET", "/v1/ids?count=1.5", 400},
		{"GET", "/v1/ids?count=101", 400},
		{"GET", "/v1/ids?count=99999999999999999999", 400},
		{"GET", "/v1/ids?count=1&count=2", 400},
		{"GET", "/v1/ids?format=hex", 400},
		{"GET", "/nope", 404},
		{"GET", "/v1/idz", 404},
		{"POST", "/v1/ids", 405},
		{"DELETE", "/v1/ids", 405},
		{"PUT", "/healthz", 405},
		{"GET", "/v1/ids/3vgoe12ccb8gh", 404}, // inspection disabled
	}
	for _, c := range cases {
		resp, body := do(t, c.method, ts.URL+c.path, nil)
		var e errorBody
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Error == "" || e.Kind == "" {
			t.Errorf("%s %s: %d %q; want %d with a JSON error", c.method, c.path, resp.StatusCode, body, c.status)
		}
	}
}

func TestInspect(t *testing.T) {
	gen := newSharded(t)
	const token = "a-long-inspection-token"
	_, ts := newServer(t, Config{Generator: gen, InspectToken: token})
	id, err := gen.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := ts.URL + "/v1/ids/" + randflake.EncodeString(id)
	for _, auth := range []string{"", "Bearer wrong-token-xxxxxxxxxx", "Basic " + token, token, "Bearer " + token + "x"} {
		resp, _ := do(t, "GET", path, map[string]string{"Authorization": auth})
		if resp.StatusCode != 401 {
			t.Errorf("auth %q: status %d", auth, resp.StatusCode)
		}
	}
	resp, body := do(t, "GET", path, map[string]string{"Authorization": "Bearer " + token})
	var got struct {
		Node, Sequence, Timestamp int64
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("inspect: %d %s", resp.StatusCode, body)
	}
	ts0, node, seq, _ := gen.Inspect(id)
	if got.Node != node || got.Sequence != seq || got.Timestamp != ts0 {
		t.Fatalf("inspect = %+v, want %d %d %d", got, ts0, node, seq)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/ids/not!an!id", map[string]string{"Authorization": "Bearer " + token})
	if resp.StatusCode != 400 {
		t.Fatalf("bad ID: %d", resp.StatusCode)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	var end atomic.Int64
	_, ts := newServer(t, Config{LeaseEnd: end.Load})
	if resp, _ := do(t, "GET", ts.URL+"/healthz", nil); resp.StatusCode != 200 {
		t.Fatal("healthz", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", ts.URL+"/readyz", nil); resp.StatusCode != 503 {
		t.Fatal("readyz without lease", resp.StatusCode)
	}
	end.Store(time.Now().Unix() + 100)
	if resp, _ := do(t, "GET", ts.URL+"/readyz", nil); resp.StatusCode != 200 {
		t.Fatal("readyz with lease", resp.StatusCode)
	}
	do(t, "GET", ts.URL+"/v1/ids?count=5", nil)
	do(t, "GET", ts.URL+"/v1/ids?count=x", nil)
	_, body := do(t, "GET", ts.URL+"/metrics", nil)
	for _, want := range []string{
		"randflake_ids_issued_total 5",
		`randflake_errors_total{kind="bad_count"} 1`,
		`randflake_kernel_info{kernel="` + randflake.Kernel() + `"} 1`,
		"randflake_batch_size_count 1",
		"randflake_lease_seconds_left ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// failing is a generator that always fails.
type failing struct{ err error }

func (f failing) GenerateBatch([]int64) (int, error) { return 0, f.err }
func (f failing) Inspect(int64) (int64, int64, int64, error) {
	return 0, 0, 0, errors.New("no")
}

func TestGeneratorErrors(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{randflake.ErrResourceExhausted, 503},
		{randflake.ErrInvalidLease, 503},
		{randflake.ErrConsistencyViolation, 503},
		{errors.New("boom"), 500},
	} {
		_, ts := newServer(t, Config{Generator: failing{c.err}})
		resp, body := do(t, "GET", ts.URL+"/v1/ids?count=3", nil)
		if resp.StatusCode != c.status || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%v: %d %s", c.err, resp.StatusCode, body)
		}
	}
}

// Batches from many concurrent clients are unique.
func TestConcurrentBatchesUnique(t *testing.T) {
	_, ts := newServer(t, Config{})
	var mu sync.Mutex
	var all []string
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				resp, err := http.Get(ts.URL + "/v1/ids?count=1000")
				if err != nil {
					t.Error(err)
					return
				}
				var got struct{ IDs []string }
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if err != nil || len(got.IDs) != 1000 {
					t.Errorf("decode: %v, %d IDs", err, len(got.IDs))
					return
				}
				mu.Lock()
				all = append(all, got.IDs...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(all)
	if len(all) != 16*20*1000 {
		t.Fatalf("%d IDs", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate %s", all[i])
		}
	}
}
