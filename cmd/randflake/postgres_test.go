package main

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A database that is starting up or unreachable is waited for; a refused
// password, a missing table or any other answer ends the wait at once.
func TestNotReachableYet(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("pglease: migrate: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		what string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"the database system is starting up (57P03)", pg("57P03"), true},
		{"connection failure (08006)", pg("08006"), true},
		{"password authentication failed (28P01)", pg("28P01"), false},
		{"relation does not exist (42P01)", pg("42P01"), false},
		{"deadlock detected (40P01)", pg("40P01"), false},
		{"another error", errors.New("pglease: the table holds another layout"), false},
	} {
		if got := notReachableYet(c.err); got != c.want {
			t.Errorf("%s: notReachableYet = %v, want %v", c.what, got, c.want)
		}
	}
}
