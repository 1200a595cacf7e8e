package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/client"
	"github.com/randflake/randflake/internal/slowdown"
)

var acceptBinary = map[string]string{"Accept": MediaTypeBinary}

// decodeBinary decodes a binary answer, failing t unless it is a whole
// number of IDs.
func decodeBinary(t *testing.T, body []byte) []int64 {
	t.Helper()
	if len(body)%8 != 0 {
		t.Fatalf("binary body of %d bytes, not a multiple of 8", len(body))
	}
	ids := make([]int64, len(body)/8)
	for i := range ids {
		ids[i] = int64(binary.BigEndian.Uint64(body[8*i:]))
	}
	return ids
}

// checkDistinct fails t if ids holds a duplicate.
func checkDistinct(t *testing.T, ids []int64) {
	t.Helper()
	s := slices.Clone(ids)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("ID %d twice among %d", s[i], len(s))
		}
	}
}

// A binary answer is count IDs of 8 bytes, big-endian, with the exact
// Content-Length; the IDs are real, distinct and counted in the metrics.
func TestBinaryIDs(t *testing.T) {
	gen := newSharded(t)
	_, ts := newServer(t, Config{Generator: gen})
	total := 0
	counts := []int{1, 2, 7, binaryFirst, binaryFirst + 1, 3*binaryFirst + 1, binaryChunk - 1, binaryChunk, binaryChunk + 1, 2*binaryChunk + 1, DefaultMaxBinaryCount}
	for _, n := range counts {
		before := time.Now().Unix()
		resp, body := do(t, "GET", ts.URL+"/v1/ids?count="+strconv.Itoa(n), acceptBinary)
		after := time.Now().Unix()
		if resp.StatusCode != 200 {
			t.Fatalf("count=%d: status %d %.200q", n, resp.StatusCode, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != MediaTypeBinary {
			t.Errorf("count=%d: Content-Type %q", n, ct)
		}
		if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(8*n) || resp.ContentLength != int64(8*n) {
			t.Errorf("count=%d: Content-Length %q, want %d", n, cl, 8*n)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("count=%d: Cache-Control %q", n, cc)
		}
		if len(body) != 8*n {
			t.Fatalf("count=%d: %d bytes, want %d", n, len(body), 8*n)
		}
		ids := decodeBinary(t, body)
		checkDistinct(t, ids)
		// Every ID's second lies within the request, however long a
		// loaded machine took to answer it.
		for _, i := range []int{0, n / 2, n - 1} {
			ts, node, _, err := gen.Inspect(ids[i])
			if err != nil || node < 0 || node > 63 || ts < before || ts > after {
				t.Fatalf("count=%d: ID %d (%d) reads back as time %d, node %d (%v); the request ran from second %d to %d", n, i, ids[i], ts, node, err, before, after)
			}
		}
		total += n
	}
	_, m := do(t, "GET", ts.URL+"/metrics", nil)
	k, small := len(counts), 0
	for _, n := range counts {
		if n <= 100000 {
			small++
		}
	}
	for _, want := range []string{"randflake_ids_issued_total " + strconv.FormatFloat(float64(total), 'g', -1, 64) + "\n", fmt.Sprintf("randflake_batch_size_count %d\n", k),
		// The batches up to 100,000 fall in that bucket; the largest in
		// the top bucket, not only in +Inf.
		fmt.Sprintf(`randflake_batch_size_bucket{le="100000"} %d`+"\n", small), fmt.Sprintf(`randflake_batch_size_bucket{le="1.048576e+06"} %d`+"\n", k)} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// The sign survives the byte order: the same IDs in decimal text and in
// binary, from a generator that hands out known values.
func TestBinaryByteOrder(t *testing.T) {
	want := []int64{-1, 0, 1, -4064785178339119907, 6013544078139353572, -1 << 63, 1<<63 - 1, 0x0102030405060708}
	_, ts := newServer(t, Config{Generator: &fixed{ids: want}})
	_, body := do(t, "GET", ts.URL+"/v1/ids?count=8", acceptBinary)
	if got := decodeBinary(t, body); !slices.Equal(got, want) {
		t.Fatalf("decoded %d, want %d", got, want)
	}
	if !strings.HasPrefix(string(body[56:]), "\x01\x02\x03\x04\x05\x06\x07\x08") {
		t.Fatalf("0x0102030405060708 sent as % x, want big-endian", body[56:])
	}
	if string(body[:8]) != "\xff\xff\xff\xff\xff\xff\xff\xff" || string(body[40:48]) != "\x80\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("-1 and MinInt64 sent as % x and % x", body[:8], body[40:48])
	}
}

// fixed hands out ids again and again.
type fixed struct {
	Generator
	ids []int64
}

func (f *fixed) GenerateBatch(dst []int64) (int, error) {
	for i := range dst {
		dst[i] = f.ids[i%len(f.ids)]
	}
	return len(dst), nil
}

// Accept chooses the binary format when it lists application/octet-stream
// with a q-value above 0 and no lower than JSON's and text's; otherwise
// the answer is what it was before the binary format existed.
func TestBinaryAccept(t *testing.T) {
	_, ts := newServer(t, Config{})
	for accept, want := range map[string]string{
		"application/octet-stream":                                  MediaTypeBinary,
		"Application/Octet-Stream":                                  MediaTypeBinary,
		"text/plain, application/octet-stream":                      MediaTypeBinary,
		"application/octet-stream, text/plain;q=0.5":                MediaTypeBinary,
		"application/json;q=0.2, application/octet-stream; q=0.9":   MediaTypeBinary,
		"application/octet-stream;q=0.5, application/json;q=0.5":    MediaTypeBinary,
		"application/octet-stream;q=0":                              "application/json",
		"application/octet-stream;q=0.000, text/plain":              "text/plain; charset=utf-8",
		"application/octet-stream;q=0.5, application/json":          "application/json",
		"application/octet-stream;q=0.5, text/plain;q=0.8":          "text/plain; charset=utf-8",
		"application/octet-stream;q=abc":                            "application/json",
		"application/octet-stream;q=2":                              "application/json",
		"*/*":                                                       "application/json",
		"application/*":                                             "application/json",
		"image/png":                                                 "application/json",
		"":                                                          "application/json",
		"application/octet-streamx":                                 "application/json",
		"application/octet-stream;charset=x, application/json;q=.1": MediaTypeBinary,
	} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?count=3", map[string]string{"Accept": accept})
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want {
			t.Errorf("Accept %q: %d, Content-Type %q; want %q", accept, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if want == MediaTypeBinary && len(body) != 24 {
			t.Errorf("Accept %q: %d bytes", accept, len(body))
		}
	}
}

// Binary requests have a limit of their own; over it, and for every other
// bad query, the usual JSON 400. format is checked but has no effect.
func TestBinaryLimits(t *testing.T) {
	_, ts := newServer(t, Config{MaxCount: 100, MaxBinaryCount: 5000})
	for q, msg := range map[string]string{
		"count=5001":              "count must be at most 5000",
		"count=0":                 "count must be at least 1",
		"count=99999999999999999": "count must be at most 5000",
		"count=1&format=hex":      `format must be "string" or "int"`,
		"count=1&x=1":             "unknown query parameter; /v1/ids takes count and format",
	} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?"+q, acceptBinary)
		var e errorBody
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e.Kind != KindBadRequest || e.Error != msg {
			t.Errorf("binary ?%s: %d %q; want 400 with %q", q, resp.StatusCode, body, msg)
		}
	}
	for _, q := range []string{"count=5000", "count=5000&format=int", "format=string&count=5000"} {
		resp, body := do(t, "GET", ts.URL+"/v1/ids?"+q, acceptBinary)
		if resp.StatusCode != 200 || len(body) != 40000 {
			t.Errorf("binary ?%s: %d, %d bytes; want 200 with 40000", q, resp.StatusCode, len(body))
		}
	}
	// JSON and text keep MaxCount.
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count=101", map[string]string{"Accept": "application/json"})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "count must be at most 100") {
		t.Errorf("JSON count=101: %d %q", resp.StatusCode, body)
	}
	// HEAD still issues nothing.
	resp, _ = do(t, "HEAD", ts.URL+"/v1/ids?count=10", acceptBinary)
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Errorf("binary HEAD: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if _, err := New(Config{Generator: newSharded(t), LeaseEnd: func() int64 { return 0 }, MaxBinaryCount: -1}); err == nil {
		t.Error("New accepted MaxBinaryCount -1")
	}
}

// failAfter hands out IDs for the first ok calls, then fails.
type failAfter struct {
	Generator
	ok    int64
	calls atomic.Int64
	err   error
}

func (f *failAfter) GenerateBatch(dst []int64) (int, error) {
	if f.calls.Add(1) > f.ok {
		return 0, f.err
	}
	return f.Generator.GenerateBatch(dst)
}

// A failure before the first byte is the usual JSON error; one after it
// aborts the connection, so that the client sees a body shorter than
// Content-Length and never a complete-looking answer.
func TestBinaryFailure(t *testing.T) {
	var logs, access syncBuffer
	gen := &failAfter{Generator: newSharded(t), ok: 0, err: fmt.Errorf("after 3 IDs: %w", randflake.ErrResourceExhausted)}
	_, ts := newServer(t, Config{Generator: gen, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		AccessLog: slog.New(slog.NewJSONHandler(&access, nil))})
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count=10", acceptBinary)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("failure before the first byte: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	errorBodyExactly(t, "failure before the first byte", body, KindExhausted)

	gen.calls.Store(0)
	gen.ok, gen.err = 2, errors.New("disk on fire")
	n := 3*binaryChunk + 5
	sent := 3 * binaryFirst // the two calls that succeed: binaryFirst IDs, then twice that
	r, err := http.NewRequest("GET", ts.URL+"/v1/ids?count="+strconv.Itoa(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Accept", MediaTypeBinary)
	resp, err = http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(8*n) {
		t.Errorf("failure after the first chunk: %d, Content-Length %d", resp.StatusCode, resp.ContentLength)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= 8*n {
		t.Errorf("failure after the first chunk: read %d of %d bytes, error %v; want a short body and io.ErrUnexpectedEOF", len(got), 8*n, err)
	}
	checkDistinct(t, decodeBinary(t, got[:len(got)/8*8]))
	_, m := do(t, "GET", ts.URL+"/metrics", nil)
	for _, want := range []string{
		"randflake_ids_issued_total " + strconv.Itoa(sent) + "\n", // sent before the failure
		`randflake_errors_total{kind="exhausted"} 1`, `randflake_errors_total{kind="internal"} 1`,
		"randflake_batch_size_count 0\n",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if want := fmt.Sprintf(`"msg":"issuing IDs failed after the answer began; connection aborted","kind":"internal","count":%d,"sent":%d,"err":"disk on fire"`, n, sent); !strings.Contains(logs.String(), want) {
		t.Errorf("log: %s", logs.String())
	}
	if !strings.Contains(access.String(), `"kind":"internal"`) {
		t.Errorf("access log: %s", access.String())
	}
}

// The client package against the real handler: its default, binary,
// fetches a batch of the largest size, all distinct; a batch cut short is
// an error, never a smaller batch.
func TestClientBinary(t *testing.T) {
	_, ts := newServer(t, Config{})
	c, err := client.New(client.Config{URL: ts.URL, BatchSize: DefaultMaxBinaryCount, MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ids, err := c.Fetch(context.Background())
	if err != nil || len(ids) != DefaultMaxBinaryCount {
		t.Fatalf("Fetch: %d IDs, %v", len(ids), err)
	}
	checkDistinct(t, ids)
	for range 3 {
		if _, err := c.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Over the limit: the service's 400, at once.
	big, err := client.New(client.Config{URL: ts.URL, BatchSize: DefaultMaxBinaryCount + 1, MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, err = big.Next(context.Background())
	var se *client.ServerError
	if !errors.As(err, &se) || se.StatusCode != 400 || se.Message != "count must be at most 1048576" {
		t.Errorf("BatchSize over the limit: %v", err)
	}
	// JSON, chosen in the configuration.
	jc, err := client.New(client.Config{URL: ts.URL, BatchSize: 10000, Format: client.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer jc.Close()
	if ids, err := jc.Fetch(context.Background()); err != nil || len(ids) != 10000 {
		t.Errorf("JSON Fetch: %d IDs, %v", len(ids), err)
	}

	gen := &failAfter{Generator: newSharded(t), ok: 1, err: randflake.ErrClosed}
	_, broken := newServer(t, Config{Generator: gen})
	bc, err := client.New(client.Config{URL: broken.URL, BatchSize: 2 * binaryChunk})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	ids, err = bc.Fetch(context.Background())
	if err == nil || ids != nil || !strings.Contains(err.Error(), "short response") {
		t.Errorf("Fetch of an aborted answer: %d IDs, %v; want no IDs and a short-response error", len(ids), err)
	}
}

// binaryPieces returns how many GenerateBatch calls an answer of count
// binary IDs makes when none fails: one a write, binaryFirst IDs first,
// each write twice the one before up to a chunk.
func binaryPieces(count int) int {
	n := 0
	for piece := binaryFirst; count > 0; n++ {
		count -= min(count, piece)
		piece = min(2*piece, binaryChunk)
	}
	return n
}

// exhaustOnce fills half of its second call's slice, then reports the
// second used up; every other call is passed on. It records when the
// second and third calls came.
type exhaustOnce struct {
	Generator
	calls         atomic.Int64
	second, third atomic.Int64 // UnixNano
}

func (e *exhaustOnce) GenerateBatch(dst []int64) (int, error) {
	call := e.calls.Add(1)
	switch call {
	case 2:
		e.second.Store(time.Now().UnixNano())
	case 3:
		e.third.Store(time.Now().UnixNano())
	}
	if call == 2 {
		n, err := e.Generator.GenerateBatch(dst[:len(dst)/2])
		if err != nil {
			return n, err
		}
		return n, fmt.Errorf("after %d IDs: %w", n, randflake.ErrResourceExhausted)
	}
	return e.Generator.GenerateBatch(dst)
}

// A second used up in the middle of a binary answer is waited out: the
// answer completes with the next second's IDs, none lost or repeated. The
// wait is for the next second and no longer: the generator is called
// again once the wall clock's second has changed, and within a second of
// that (stretched by the measured slowdown).
func TestBinaryWaitsOutExhaustion(t *testing.T) {
	meter := slowdown.Start()
	gen := &exhaustOnce{Generator: newSharded(t)}
	_, ts := newServer(t, Config{Generator: gen})
	n := 3 * binaryChunk
	resp, body := do(t, "GET", ts.URL+"/v1/ids?count="+strconv.Itoa(n), acceptBinary)
	if resp.StatusCode != 200 || len(body) != 8*n {
		t.Fatalf("status %d, %d bytes; want 200 and %d", resp.StatusCode, len(body), 8*n)
	}
	exhausted, resumed := time.Unix(0, gen.second.Load()), time.Unix(0, gen.third.Load())
	next := exhausted.Truncate(time.Second).Add(time.Second)
	if slack := meter.Stretch(time.Second); resumed.Before(next) || resumed.After(next.Add(slack)) {
		t.Errorf("exhausted at %v, generated again at %v; want from the next second %v to %v later (%s)",
			exhausted.Format(time.StampMicro), resumed.Format(time.StampMicro), next.Format(time.StampMicro), slack, meter)
	}
	ids := decodeBinary(t, body)
	checkDistinct(t, ids)
	// The pieces of binaryPieces, the second made in two calls: one more.
	if c, want := gen.calls.Load(), int64(binaryPieces(n)+1); c != want {
		t.Errorf("%d GenerateBatch calls, want %d (a call a write, and one more for the second write's other half)", c, want)
	}
	_, m := do(t, "GET", ts.URL+"/metrics", nil)
	for _, want := range []string{"randflake_ids_issued_total " + strconv.FormatFloat(float64(n), 'g', -1, 64) + "\n", "randflake_batch_size_count 1\n"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every error kind is exported from zero; none may have counted.
	if counted := regexp.MustCompile(`(?m)^randflake_errors_total\{[^}]*\} [^0].*$`).FindAllString(string(m), -1); len(counted) > 0 {
		t.Errorf("errors were counted: %q", counted)
	}
}
