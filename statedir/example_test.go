//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/randflake/randflake/statedir"
)

// One machine, nothing to configure: the state directory (here a
// temporary one; "" means the per-user default) holds the secret and the
// node-ID claims of every process using it.
func ExampleNewLeased() {
	tmp, err := os.MkdirTemp("", "randflake-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx := context.Background()
	g, err := statedir.NewLeased(ctx, filepath.Join(tmp, "randflake"), statedir.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx) // records the last second used for the next process
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	_, node, _, _ := g.Inspect(id)
	l := g.Lease()
	fmt.Println(l.Nodes(), node >= l.FirstNode && node <= l.LastNode)
	// Output: 1024 true
}
