package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/randflake/randflake/cmd/randflake/internal/server"
)

// The end-to-end tests check every answer they get from `randflake serve`
// against the service's OpenAPI document (internal/server/openapi.yaml):
// TestMain puts checkContract in http.DefaultTransport, so that every
// client without a transport of its own is checked, and rawHTTP checks
// what it reads. A violation fails the request that met it (its error
// names the route, the status and the body) and, in case the test
// tolerated that error, the whole run (TestMain).

// apiContract is the loaded OpenAPI document.
type apiContract struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	contract *apiContract

	violationsMu sync.Mutex
	violations   []string
	checked      int
)

// loadContract loads and validates the OpenAPI document.
func loadContract(data []byte) (*apiContract, error) {
	// net/http's 431 over HTTP/2 is a short HTML page, read as text.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	// The document names the default address; the tests' servers listen
	// on ports of the kernel's choice.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &apiContract{doc: doc, router: router}, nil
}

// check returns an error if the answer status, header, body to req
// breaks the contract.
func (c *apiContract) check(req *http.Request, status int, header http.Header, body []byte) error {
	err := c.checkAnswer(req, status, header, body)
	if err == nil {
		return nil
	}
	// kin-openapi's errors can hold the whole schema and value.
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}
	return fmt.Errorf("OpenAPI contract: %s %s answered %d (%s) %.300q: %s",
		req.Method, req.URL.RequestURI(), status, header.Get("Content-Type"), body, msg)
}

func (c *apiContract) checkAnswer(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	// The router answers with new RouteErrors carrying the reasons of
	// its two sentinel errors.
	var reason string
	if re := (*routers.RouteError)(nil); errors.As(err, &re) {
		reason = re.Reason
	}
	switch {
	case reason == routers.ErrPathNotFound.Error():
		// Not a path of the document: only 404 or, before any
		// routing, 431.
		return c.checkUnrouted(status, header, body, map[int]string{404: "NotFound", 431: "HeadersTooLarge"})
	case reason == routers.ErrMethodNotAllowed.Error():
		if status == 405 && header.Get("Allow") == "" {
			return errors.New("405 without an Allow header")
		}
		return c.checkUnrouted(status, header, body, map[int]string{405: "MethodNotAllowed", 431: "HeadersTooLarge"})
	case err != nil:
		return fmt.Errorf("finding the route: %w", err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			ExcludeResponseBody:   req.Method == http.MethodHead,
		},
	})
}

// checkUnrouted checks an answer to a request outside the document's
// routes against the component response that status must be one of.
func (c *apiContract) checkUnrouted(status int, header http.Header, body []byte, allowed map[int]string) error {
	name, ok := allowed[status]
	if !ok {
		return fmt.Errorf("status %d is not one the document allows here", status)
	}
	resp := c.doc.Components.Responses[name]
	if resp == nil || resp.Value == nil {
		return fmt.Errorf("the document has no response %s", name)
	}
	mt := resp.Value.Content.Get(header.Get("Content-Type"))
	if mt == nil {
		return fmt.Errorf("content type %q is not one of response %s", header.Get("Content-Type"), name)
	}
	if len(body) == 0 {
		return nil // HEAD
	}
	var v any = string(body) // net/http's 431, in text or HTML
	if strings.HasPrefix(header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("body: %w", err)
		}
	}
	return mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
}

// record notes a violation for TestMain.
func record(err error) {
	violationsMu.Lock()
	defer violationsMu.Unlock()
	checked++
	if err != nil {
		violations = append(violations, err.Error())
	}
}

// contractTransport checks every answer it carries against contract.
type contractTransport struct{ base http.RoundTripper }

func (t contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		// Hand the caller what came and the error; a cut answer is not
		// checked.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if cerr := contract.check(req, resp.StatusCode, resp.Header, body); cerr != nil {
		record(cerr)
		return nil, cerr
	}
	record(nil)
	return resp, nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// setUpContract loads the contract and installs contractTransport; it
// returns a function reporting the violations met, for TestMain.
func setUpContract() (report func() bool, err error) {
	contract, err = loadContract(server.OpenAPI)
	if err != nil {
		return nil, err
	}
	http.DefaultTransport = contractTransport{base: http.DefaultTransport}
	return func() bool {
		violationsMu.Lock()
		defer violationsMu.Unlock()
		for _, v := range violations {
			fmt.Fprintln(os.Stderr, v)
		}
		if len(violations) > 0 {
			fmt.Fprintf(os.Stderr, "%d of %d answers broke the OpenAPI contract\n", len(violations), checked)
		} else if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "%d answers kept the OpenAPI contract\n", checked)
		}
		return len(violations) == 0
	}, nil
}

// checkRaw checks an answer rawHTTP read to the request req (as sent).
func checkRaw(t *testing.T, req string, status int, header http.Header, body []byte) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(req)))
	if err != nil {
		t.Fatalf("%.40q…: %v", req, err)
	}
	r.URL.Scheme, r.URL.Host = "http", r.Host
	err = contract.check(r, status, header, body)
	record(err)
	if err != nil {
		t.Error(err)
	}
}

// The checker fails answers that break the document: a wrong status, a
// wrong body, a wrong content type, a missing header, an error of the
// wrong kind.
func TestContractCatchesViolations(t *testing.T) {
	c, err := loadContract(server.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	get := func(method, target string, hdr ...string) *http.Request {
		r, _ := http.NewRequest(method, "http://127.0.0.1:1"+target, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	js := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}}
	good := []struct {
		req    *http.Request
		status int
		header http.Header
		body   string
	}{
		{get("GET", "/v1/ids?count=2"), 200, js, `{"ids":["56t36f9dacqf4","6f4h8rlkekc5t"]}`},
		{get("GET", "/v1/ids?count=2&format=int"), 200, js, `{"ids":["6013544078139353572","-7463072463919395005"]}`},
		{get("GET", "/v1/ids", "Accept", "text/plain"), 200, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "56t36f9dacqf4\n"},
		{get("GET", "/v1/ids", "Accept", "application/octet-stream"), 200, http.Header{"Content-Type": {"application/octet-stream"}}, "\x00\x01\x02\x03\x04\x05\x06\x07"},
		{get("GET", "/v1/ids?count=0"), 400, js, `{"error":"count must be at least 1","kind":"bad_request"}`},
		{get("GET", "/nope"), 404, js, `{"error":"not found","kind":"not_found"}`},
		{get("POST", "/v1/ids"), 405, http.Header{"Content-Type": {"application/json"}, "Allow": {"GET"}}, `{"error":"method not allowed; allowed: GET","kind":"method_not_allowed"}`},
		{get("GET", "/readyz"), 200, js, `{"status":"ready","lease_seconds_left":12}`},
		{get("GET", "/v1/ids"), 401, http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {`Bearer realm="randflake"`}},
			`{"error":"a valid bearer token or client certificate is required","kind":"unauthorized"}`},
		{get("GET", "/v1/ids?count=5"), 429, http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}, "Cache-Control": {"no-store"}},
			`{"error":"over this client's share","kind":"quota"}`},
		{get("GET", "/healthz"), 431, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "431 Request Header Fields Too Large"},
		{get("GET", "/v1/ids"), 431, http.Header{"Content-Type": {"text/html; charset=utf-8"}}, "<h1>HTTP Error 431</h1>"},
		{get("GET", "/nope"), 431, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "431 Request Header Fields Too Large"},
	}
	for _, g := range good {
		if err := c.check(g.req, g.status, g.header, []byte(g.body)); err != nil {
			t.Errorf("a good answer failed: %v", err)
		}
	}
	bad := []struct {
		req    *http.Request
		status int
		header http.Header
		body   string
		want   string // in the error
	}{
		{get("GET", "/v1/ids"), 418, js, `{"ids":["1"]}`, "status"},
		{get("GET", "/v1/ids"), 200, js, `{"ids":[1]}`, "string"},
		{get("GET", "/v1/ids"), 200, js, `{"ids":["not an id!"]}`, "pattern"},
		{get("GET", "/v1/ids"), 200, js, `{"ids":[],"more":1}`, ""},
		{get("GET", "/v1/ids"), 200, http.Header{"Content-Type": {"text/html"}}, "<p>", "Content-Type"},
		{get("GET", "/v1/ids?count=0"), 400, js, `{"error":"x","kind":"not_found"}`, ""},
		{get("GET", "/v1/ids?count=0"), 400, js, `{"error":"x","kind":"bad_request","path":"/etc"}`, ""},
		{get("GET", "/nope"), 200, js, `{}`, "status 200"},
		{get("GET", "/nope"), 404, js, `{"error":"x","kind":"bad_request"}`, ""},
		{get("POST", "/v1/ids"), 405, js, `{"error":"x","kind":"method_not_allowed"}`, "Allow"},
		{get("GET", "/v1/ids/abc"), 401, js, `{"error":"x","kind":"unauthorized"}`, "WWW-Authenticate"},
		{get("GET", "/healthz"), 503, js, `{"error":"x","kind":"not_ready"}`, "status"},
		{get("GET", "/v1/ids"), 401, js, `{"error":"x","kind":"unauthorized"}`, "WWW-Authenticate"},
		{get("GET", "/v1/ids"), 401, http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {`Bearer realm="randflake"`}}, `{"error":"x","kind":"quota"}`, ""},
		{get("GET", "/v1/ids"), 429, js, `{"error":"x","kind":"quota"}`, "Retry-After"},
		{get("GET", "/v1/ids"), 429, http.Header{"Content-Type": {"application/json"}, "Retry-After": {"0"}}, `{"error":"x","kind":"quota"}`, "Retry-After"},
		{get("GET", "/v1/ids"), 429, http.Header{"Content-Type": {"application/json"}, "Retry-After": {"2"}}, `{"error":"x","kind":"exhausted"}`, ""},
		{get("GET", "/v1/ids"), 431, js, `{"error":"x","kind":"headers_too_large"}`, "Content-Type"},
		{get("GET", "/nope"), 431, js, `{"error":"x","kind":"headers_too_large"}`, "content type"},
		{get("GET", "/healthz"), 500, js, `{"error":"x","kind":"internal"}`, "status"},
	}
	for _, b := range bad {
		err := c.check(b.req, b.status, b.header, []byte(b.body))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s %s %d %s: got %v, want an error mentioning %q", b.req.Method, b.req.URL, b.status, b.body, err, b.want)
		}
	}
}

// The repository's api/openapi.yaml is the served document, byte for byte.
func TestOpenAPICopy(t *testing.T) {
	if _, err := os.Stat("../../go.work"); err != nil {
		t.Skip("not in the repository")
	}
	copy, err := os.ReadFile(filepath.Join("..", "..", "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copy, server.OpenAPI) {
		t.Errorf("api/openapi.yaml differs from cmd/randflake/internal/server/openapi.yaml, the served document; copy it over")
	}
}
