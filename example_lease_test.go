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
