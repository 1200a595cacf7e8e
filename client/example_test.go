package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/randflake/randflake/client"
)

// idService stands in for `randflake serve`: GET /v1/ids?count=N with
// Accept: text/plain answers N IDs, one per line. Here they count up from
// 1000.
func idService() http.Handler {
	var next atomic.Int64
	next.Store(1000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ids", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("count"))
		if err != nil || n < 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, `{"error":"count must be a whole number","kind":"bad_count"}`)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		first := next.Add(int64(n)) - int64(n)
		for i := range int64(n) {
			fmt.Fprintln(w, first+i)
		}
	})
	return mux
}

func Example() {
	srv := httptest.NewServer(idService())
	defer srv.Close()

	c, err := client.New(client.Config{
		URLs:      []string{srv.URL}, // more instances may follow; the client moves on when one fails
		BatchSize: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A deadline bounds the wait when the buffer is empty.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		id, err := c.Next(ctx)
		if err != nil {
			var se *client.ServerError
			switch {
			case errors.Is(err, client.ErrTooSlow):
				log.Fatal("the service answers slower than MaxAge: ", err)
			case errors.As(err, &se):
				log.Fatalf("the service answered %d (%s): %v", se.StatusCode, se.Kind, err)
			}
			log.Fatal(err)
		}
		fmt.Println(id)
	}
	// Output:
	// 1000
	// 1001
	// 1002
}
