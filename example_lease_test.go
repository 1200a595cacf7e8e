package randflake_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/randflake/randflake"
)

// A generator on a fixed range of node IDs. It starts at the next second,
// so that a restarted process never reuses a second of its predecessor.
func ExampleNewLeased() {
	ctx := context.Background()
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret: []byte("super-secret-key"),
		Source: randflake.StaticSource{FirstNode: 32, LastNode: 47},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	_, node, _, _ := g.Inspect(id)
	l := g.Lease()
	fmt.Println(l.FirstNode, l.LastNode, node >= 32 && node <= 47)
	// Output: 32 47 true
}

// In a Kubernetes StatefulSet, pod web-3 with 64 node IDs per pod gets node
// IDs 192 to 255. POD_NAME comes from the downward API (metadata.name).
func ExampleStatefulSetSource() {
	os.Setenv("POD_NAME", "web-3")
	defer os.Unsetenv("POD_NAME")
	src, err := randflake.StatefulSetSource("POD_NAME", 64)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(src.FirstNode, src.LastNode)
	// Output: 192 255
}

// A worker goroutine of a Leased generator keeps a Local: the fastest way
// to take IDs one at a time, still bound to the lease. GenerateContext
// waits when the lease's node IDs have used up the current second.
func ExampleLeased_NewLocal() {
	ctx := context.Background()
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret: []byte("super-secret-key"),
		Source: randflake.StaticSource{FirstNode: 32, LastNode: 47},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	local := g.NewLocal() // owned by this goroutine
	seen := map[int64]bool{}
	for range 1000 {
		id, err := local.GenerateContext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		seen[id] = true
	}
	fmt.Println(len(seen))
	// Output: 1000
}
