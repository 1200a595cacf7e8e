//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package randflake_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

// The README's Use section: one process on one machine, nothing to
// configure. The state directory (here a temporary one through
// $RANDFLAKE_STATE_DIR; unset, the per-user default) holds the secret and
// the node-ID claims of every process on the machine, and is made on first
// use.
func Example_readme() {
	tmp, err := os.MkdirTemp("", "randflake-readme")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Setenv("RANDFLAKE_STATE_DIR", tmp)
	defer os.Unsetenv("RANDFLAKE_STATE_DIR")

	ctx := context.Background()
	g, err := statedir.NewLeased(ctx, "", statedir.Options{}) // "": the default state directory
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx) // records the last second used, for the next process

	id, err := g.GenerateContext(ctx) // an int64; waits for the next second if this one's IDs are used up
	if err != nil {
		log.Fatal(err)
	}
	s := randflake.ID(id).String()      // base32hex, 13 characters at most
	ts, node, seq, err := g.Inspect(id) // only with the secret

	local := g.NewLocal() // one per goroutine: its own buffer, no atomic operation per ID
	next, err := local.GenerateContext(ctx)

	fmt.Println(len(s) <= 13, err == nil, ts > 0, node >= 0, seq >= 0, next != id)
	// Output: true true true true true true
}
