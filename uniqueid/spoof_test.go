package uniqueid

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// metaVar is how net/http/cgi names the meta-variable of a request header,
// without the HTTP_ prefix: ASCII upper case, with '-' and '=' as '_'. The
// tests spell it out independently of the package's own implementation.
func metaVar(name string) string {
	return strings.NewReplacer("-", "_", "=", "_").Replace(strings.ToUpper(name))
}

// forged is the value a test client puts in header variant v of request n;
// forgedRE finds such values wherever they turn up.
func forged(n int, v string) string { return fmt.Sprintf("FORGED-r%d-%s", n, v) }

var forgedRE = regexp.MustCompile(`FORGED-r([0-9]+)-([A-Za-z_-]+)`)

// forgedIn describes the forged values in s as "request n via header v".
func forgedIn(s string) []string {
	var out []string
	for _, m := range forgedRE.FindAllStringSubmatch(s, -1) {
		out = append(out, fmt.Sprintf("request %s via header %q", m[1], m[2]))
	}
	return out
}

// mapVariants are header names, as raw http.Header keys, that a CGI host
// turns into HTTP_UNIQUE_ID along with the canonical Unique-Id. Only the
// first two can come off the wire through net/http's server, which
// canonicalises names; the others reach a handler called directly.
var mapVariants = []string{
	"Unique_id", "Unique-Id", "UNIQUE_ID", "UNIQUE-ID", "unique-id",
	"unique_id", "Unique_Id", "uNiQuE-iD", "UNIQUE=ID",
}

// TestMiddlewareDropsHeaderVariants sends requests whose headers carry
// forged values under every spelling of Unique-Id that differs only by
// case, '-' or '_', and checks that the next handler sees none of them:
// only the canonical header, holding the request's ID.
func TestMiddlewareDropsHeaderVariants(t *testing.T) {
	const requests = 240
	var got struct {
		header http.Header
		id     string
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.header = r.Header.Clone()
		got.id, _ = FromContext(r.Context())
	})
	h := Middleware(next, Options{})
	leaks := 0
	for n := 0; n < requests; n++ {
		req := httptest.NewRequest("GET", "/", nil)
		for _, v := range mapVariants {
			req.Header[v] = []string{forged(n, v)}
		}
		req.Header["unique__id"] = []string{"other"} // UNIQUE__ID: not a variant
		req.Header.Set("X-Other", "kept")
		resp := serve(h, req)
		id := resp.Header.Get("Unique-Id")
		if !Valid(id) || got.id != id {
			t.Fatalf("request %d: response header %q, context %q", n, id, got.id)
		}
		leaked := false
		for k, vs := range got.header {
			joined := strings.Join(vs, ", ")
			if f := forgedIn(joined); len(f) > 0 {
				t.Errorf("request %d: next handler saw %s=%q (%s)", n, k, joined, strings.Join(f, ", "))
				leaked = true
			} else if k != "Unique-Id" && metaVar(k) == "UNIQUE_ID" {
				t.Errorf("request %d: next handler saw variant %s=%q", n, k, joined)
				leaked = true
			}
		}
		if leaked {
			leaks++
		}
		if vs := got.header["Unique-Id"]; len(vs) != 1 || vs[0] != id {
			t.Errorf("request %d: Unique-Id seen downstream = %q, want [%q]", n, vs, id)
		}
		if got.header.Get("X-Other") != "kept" || !slices.Equal(got.header["unique__id"], []string{"other"}) {
			t.Errorf("request %d: unrelated headers lost: %v", n, got.header)
		}
	}
	if leaks > 0 {
		t.Errorf("%d of %d requests leaked a forged header variant", leaks, requests)
	}
}

// TestMiddlewareTrustIgnoresVariants checks that with TrustIncoming only the
// exact canonical header can supply the ID, and that variants of the token
// and incoming headers are dropped whether or not it does.
func TestMiddlewareTrustIgnoresVariants(t *testing.T) {
	tokA := "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	tokB := "ZVPxAMAAAgoAABCSEjQAAAAH"
	rf := &fakeRandflake{}
	var seenHeader http.Header
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenHeader = r.Header.Clone()
	})
	cases := []struct {
		name   string
		opts   Options
		header http.Header
		want   string      // kept ID, or "" for a fresh one
		after  http.Header // headers next must see besides the token header
	}{
		{"variant only", Options{TrustIncoming: true},
			http.Header{"Unique_id": {tokA}}, "", nil},
		{"raw lower case only", Options{TrustIncoming: true},
			http.Header{"unique-id": {tokA}}, "", nil},
		{"canonical and variant", Options{TrustIncoming: true},
			http.Header{"Unique-Id": {tokA}, "UNIQUE_ID": {tokB}}, tokA, nil},
		{"variant and canonical duplicate", Options{TrustIncoming: true},
			http.Header{"Unique-Id": {tokA}, "unique-id": {tokA}}, tokA, nil},
		{"incoming header variants", Options{TrustIncoming: true, IncomingHeader: "X-Upstream-Id"},
			http.Header{"X-Upstream-Id": {tokA}, "X_Upstream_Id": {tokB}, "x-upstream-id": {tokB}, "Unique_id": {tokB}},
			tokA, http.Header{"X-Upstream-Id": {tokA}}},
		{"incoming header a variant of the token header", Options{TrustIncoming: true, IncomingHeader: "Unique_Id"},
			http.Header{"Unique_id": {tokA}, "Unique-Id": {tokB}}, tokA, nil},
		{"custom token header", Options{Header: "X-Request-Id"},
			http.Header{"X_Request_Id": {tokA}, "x-request-id": {tokA}, "X-Request-Id": {tokA}, "Unique_id": {"other"}},
			"", http.Header{"Unique_id": {"other"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Source = rf
			h := Middleware(next, c.opts)
			req := httptest.NewRequest("GET", "/", nil)
			req.Header = c.header
			tokenHeader := http.CanonicalHeaderKey(c.opts.Header)
			if tokenHeader == "" {
				tokenHeader = DefaultHeader
			}
			id := serve(h, req).Header.Get(tokenHeader)
			if (c.want != "" && id != c.want) || (c.want == "" && !strings.HasPrefix(id, "rf")) {
				t.Errorf("ID %q, want %q (empty: a fresh one)", id, c.want)
			}
			want := http.Header{tokenHeader: {id}}
			for k, v := range c.after {
				want[k] = v
			}
			if fmt.Sprint(seenHeader) != fmt.Sprint(want) {
				t.Errorf("next saw headers %v, want %v", seenHeader, want)
			}
		})
	}
}
