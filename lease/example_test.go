package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// The engine on the simplest store, a static range that records nothing:
// the lease starts after the clock plus the skew bound (rule 10 of
// docs/leases.md) and runs as long as Randflake IDs last. A durable store
// (statedir, etcdlease, pglease, kubelease, or your own) goes in its place
// with its own layout.
func ExampleNewBlockSource() {
	store, err := lease.NewStaticStore(100, 163, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	src, err := lease.NewBlockSource(store, lease.BlockSourceConfig{
		Secret: []byte("fleet-secret-16b"),
		Layout: lease.StaticLayout(100, 163),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := src.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Release(ctx, l, l.Start-1)
	fmt.Printf("node IDs %d-%d (%d), to the end of Randflake IDs: %v\n",
		l.FirstNode, l.LastNode, l.Nodes(), l.End == randflake.MaxTimestamp)
	fmt.Println("starts after now:", l.Start > time.Now().Unix())
	// Output:
	// node IDs 100-163 (64), to the end of Randflake IDs: true
	// starts after now: true
}
