package uniqueid_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/uniqueid"
)

// Both randflake generators are token sources for the middleware.
var (
	_ uniqueid.Source = (*randflake.Generator)(nil)
	_ uniqueid.Source = (*randflake.Sharded)(nil)
)

// Requests get encrypted Randflake IDs instead of Apache tokens; the
// secret's holder can read their time and node back.
func ExampleMiddleware_randflake() {
	now := time.Now().Unix()
	ids, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     []byte("super-secret-key"),
		FirstNode:  0,
		LastNode:   15,
		LeaseStart: now,
		LeaseEnd:   now + 3600,
	})
	if err != nil {
		log.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := uniqueid.FromContext(r.Context())
		_, node, _, err := ids.InspectString(id)
		fmt.Println(err == nil && node <= 15)
	})
	h := uniqueid.Middleware(app, uniqueid.Options{Source: ids})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	// Output: true
}

func TestMiddlewareWithRandflakeSource(t *testing.T) {
	now := time.Now().Unix()
	g, err := randflake.NewGenerator(9, now-1, now+3600, []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	h := uniqueid.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = uniqueid.FromContext(r.Context())
	}), uniqueid.Options{Source: g})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got == "" || rec.Header().Get(uniqueid.DefaultHeader) != got {
		t.Fatalf("token %q, header %q", got, rec.Header().Get(uniqueid.DefaultHeader))
	}
	_, node, _, err := g.InspectString(got)
	if err != nil || node != 9 {
		t.Fatalf("InspectString(%q) = node %d, %v", got, node, err)
	}
}
