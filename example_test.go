package randflake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/randflake/randflake"
)

// A generator for one node ID, as in the reference implementation.
func ExampleNewGenerator() {
	secret := []byte("super-secret-key") // 16 bytes, shared by the fleet
	now := time.Now().Unix()
	g, err := randflake.NewGenerator(42, now, now+3600, secret)
	if err != nil {
		log.Fatal(err)
	}
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	ts, node, seq, _ := g.Inspect(id) // only with the secret
	fmt.Println(node, seq, ts >= now)
	// Output: 42 0 true
}

// A sharded generator for a range of node IDs: the fast path for a busy
// process.
func ExampleNewSharded() {
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     []byte("super-secret-key"),
		FirstNode:  100,
		LastNode:   115, // up to 16 x 131,072 IDs per second
		LeaseStart: now,
		LeaseEnd:   now + 3600,
	})
	if err != nil {
		log.Fatal(err)
	}
	id, err := s.GenerateString()
	if err != nil {
		log.Fatal(err)
	}
	_, node, _, _ := s.InspectString(id)
	fmt.Println(len(id) <= 13, node >= 100 && node <= 115)
	// Output: true true
}

// GenerateBatch fills a slice with one reservation and one SIMD pass.
func ExampleSharded_GenerateBatch() {
	clock := func() int64 { return 1750000000 }
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     []byte("super-secret-key"),
		FirstNode:  7,
		LastNode:   7,
		LeaseStart: 1749999000,
		LeaseEnd:   1750003600,
		TimeSource: clock,
	})
	if err != nil {
		log.Fatal(err)
	}
	ids := make([]int64, 4)
	n, err := s.GenerateBatch(ids)
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range ids[:n] {
		ts, node, seq, _ := s.Inspect(id)
		fmt.Println(randflake.EncodeString(id), time.Unix(ts, 0).UTC().Format(time.RFC3339), node, seq)
	}
	// Output:
	// 2a8ha3u69v47e 2025-06-15T15:06:40Z 7 0
	// bcig0jjlh2vvo 2025-06-15T15:06:40Z 7 1
	// 7qd0qij48pkn1 2025-06-15T15:06:40Z 7 2
	// bm1er7fbulgab 2025-06-15T15:06:40Z 7 3
}

// IDs are JSON strings, safe from JavaScript's 53-bit numbers.
func ExampleID() {
	var v struct {
		ID randflake.ID `json:"id"`
	}
	v.ID = randflake.ID(-2990835006926556165)
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
	// Output: {"id":"dcvjbd135dsvr"}
}

// The cipher alone: a batch of IDs through the fastest kernel.
func ExampleSparx64_EncryptIDs() {
	c, err := randflake.NewSparx64([]byte("super-secret-key"))
	if err != nil {
		log.Fatal(err)
	}
	ids := []uint64{1, 2, 3}
	c.EncryptIDs(ids, ids)
	c.DecryptIDs(ids, ids)
	fmt.Println(ids)
	// Output: [1 2 3]
}

// A worker goroutine that takes many IDs one at a time keeps a Local: no
// atomic operation per ID.
func ExampleSharded_NewLocal() {
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     []byte("super-secret-key"),
		FirstNode:  0,
		LastNode:   63,
		LeaseStart: now,
		LeaseEnd:   now + 3600,
	})
	if err != nil {
		log.Fatal(err)
	}
	events := []string{"a", "b", "c"}
	local := s.NewLocal() // owned by this goroutine
	seen := map[int64]bool{}
	for range events {
		id, err := local.Generate()
		if err != nil {
			log.Fatal(err)
		}
		seen[id] = true
	}
	fmt.Println(len(seen))
	// Output: 3
}

// GenerateContext waits for the next second when the node range has
// issued all of the current one's IDs (131,072 per node ID), where
// Generate returns ErrResourceExhausted. Here one node ID gives 200,000
// IDs: the calls wait once or twice for a new second.
func ExampleSharded_GenerateContext() {
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret:     []byte("super-secret-key"),
		FirstNode:  7,
		LastNode:   7,
		LeaseStart: now,
		LeaseEnd:   now + 3600,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seconds := map[int64]int{}
	for range 200_000 {
		id, err := s.GenerateContext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ts, _, _, _ := s.Inspect(id)
		seconds[ts]++
	}
	fmt.Println(len(seconds) >= 2)
	// Output: true
}
