package uniqueid_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"

	"github.com/randflake/randflake/uniqueid"
)

func ExampleParse() {
	for _, s := range []string{
		"ZVPxAI86UcIH5JttIKoSNAAAAAc", // Apache httpd 2.4
		"ZVPxAMAAAgoAABCSEjQAAAAH",    // classic mod_unique_id
	} {
		tok, err := uniqueid.Parse(s)
		if err != nil {
			log.Fatal(err)
		}
		switch tok.Layout {
		case uniqueid.Current:
			fmt.Printf("%s %v root=%x counter=%d thread=%d\n",
				tok.Layout, tok.Time, tok.Root, tok.Counter, tok.ThreadIndex)
		case uniqueid.Classic:
			fmt.Printf("%s %v addr=%v pid=%d counter=%d thread=%d\n",
				tok.Layout, tok.Time, tok.Addr, tok.PID, tok.Counter, tok.ThreadIndex)
		}
		fmt.Println(tok.String() == s)
	}

	_, err := uniqueid.Parse("ZVPxAI86UcIH5JttIKoSNAAAA@c")
	fmt.Println(err)
	// Output:
	// current 2023-11-14 22:13:20 +0000 UTC root=8f3a51c207e49b6d20aa counter=4660 thread=7
	// true
	// classic 2023-11-14 22:13:20 +0000 UTC addr=192.0.2.10 pid=4242 counter=4660 thread=7
	// true
	// uniqueid: malformed token: character '@' at offset 25 is not in the current alphabet (A-Z a-z 0-9 - _); '@' occurs only in classic tokens, which are 24 characters long
}

func ExampleCurrentGenerator_Append() {
	g, err := uniqueid.NewCurrent()
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	buf = g.Append(buf[:0]) // no allocation: buf has room
	tok, _ := uniqueid.Parse(string(buf))
	fmt.Println(len(buf), tok.Layout, tok.Root == g.Root())
	// Output: 27 current true
}

func ExampleNewClassic() {
	// Configure the address explicitly, or pass netip.Addr{} to use the
	// host's first non-loopback IPv4 address.
	g, err := uniqueid.NewClassic(netip.MustParseAddr("192.0.2.10"))
	if err != nil {
		log.Fatal(err)
	}
	s, _ := g.GenerateString()
	tok, _ := uniqueid.Parse(s)
	fmt.Println(len(s), tok.Layout, tok.Addr, tok.PID == g.PID())
	// Output: 24 classic 192.0.2.10 true
}

func ExampleMiddleware() {
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := uniqueid.FromContext(r.Context())
		fmt.Fprintf(w, "handled %s as %s\n", r.URL.Path, id)
	})
	h := uniqueid.Middleware(app, uniqueid.Options{
		Header: "X-Request-Id",
		// An Apache front end forwards its token with
		//   RequestHeader set X-Request-Id "%{UNIQUE_ID}e"
		TrustIncoming: true,
	})

	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Request-Id", "ZVPxAI86UcIH5JttIKoSNAAAAAc")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Print(rec.Body.String())
	fmt.Println(rec.Header().Get("X-Request-Id"))
	// Output:
	// handled / as ZVPxAI86UcIH5JttIKoSNAAAAAc
	// ZVPxAI86UcIH5JttIKoSNAAAAAc
}

func ExampleCGIHandler() {
	// The CGI program sees the request's token in $UNIQUE_ID, as under
	// Apache with mod_unique_id.
	script := &cgi.Handler{Path: "/usr/lib/cgi-bin/report.cgi"}
	http.Handle("/report", uniqueid.Middleware(uniqueid.CGIHandler(script), uniqueid.Options{}))
}
