package pgtest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/randflake/randflake/pglease/pgtest"
)

// A test starts a server of its own, uses it, restarts it and closes it.
// In a test, New does the same and also closes the server at the end of
// the test, skipping it without server binaries. For tests sharing one
// server, the package's TestMain is
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and a test gets the server with
//
//	srv := pgtest.Shared(t)
func ExampleStart() {
	srv, err := pgtest.Start()
	if err != nil {
		log.Fatal(err) // errors.Is(err, pgtest.ErrNotFound) without binaries
	}
	defer srv.Close()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		log.Fatal(err)
	}
	conn.Close(ctx)

	// An outage: clients see the server go away and come back on the
	// same address.
	if err := srv.Restart(); err != nil {
		log.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, srv.DSN())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n)
}
