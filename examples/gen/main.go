// Command gen prints Randflake IDs from a sharded generator, with their
// decoded fields. It is the smallest complete use of the library: a
// process-wide generator for a range of node IDs, under a secret that a
// real deployment would load from a file (this example makes a random one
// per run and never prints it).
//
//	go run ./examples/gen -n 5
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/randflake/randflake"
)

func main() {
	n := flag.Int("n", 10, "number of IDs to print")
	flag.Parse()
	if *n < 0 {
		fmt.Fprintln(os.Stderr, "gen: -n must not be negative")
		os.Exit(2)
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	now := time.Now().Unix()
	g, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     secret,
		FirstNode:  0,
		LastNode:   15,
		LeaseStart: now,
		LeaseEnd:   now + 3600,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	ids := make([]int64, *n)
	if _, err := g.GenerateBatch(ids); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Printf("kernel %s\n%-14s %-20s %-20s %5s %6s\n", randflake.Kernel(), "string", "int64", "time (UTC)", "node", "seq")
	for _, id := range ids {
		ts, node, seq, _ := g.Inspect(id)
		fmt.Printf("%-14s %-20d %-20s %5d %6d\n", randflake.EncodeString(id), id,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), node, seq)
	}
}
