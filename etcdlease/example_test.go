package etcdlease_test

import (
	"context"
	"log"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A fleet member claims a block of 16 node IDs on etcd (up to 2 million
// IDs per second), kept alive for as long as it runs and released on
// Close. The first member ever started under a prefix waits about 31 s
// (the promise and the clock skew bound) before it issues: etcd cannot
// tell a new prefix from one whose keys were deleted.
func ExampleNewLeased() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	secret := []byte("fleet-secret-16b") // the same on every member; read it from a file
	ctx := context.Background()
	g, err := etcdlease.NewLeased(ctx, secret, etcdlease.Config{
		Client:  cli,
		Nodes:   16,
		OnError: func(err error) { log.Print(err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	l := g.Lease()
	log.Printf("node IDs %d to %d, from second %d", l.FirstNode, l.LastNode, l.Start)
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	log.Print(randflake.EncodeString(id))
}

// The source alone, for a generator configured by hand. The secret signs
// the records the source keeps in etcd, and is the generator's.
func ExampleNew() {
	var cli *clientv3.Client // connected to etcd
	secret := []byte("fleet-secret-16b")
	src, err := etcdlease.New(etcdlease.Config{Client: cli, Secret: secret, Prefix: "/myapp/randflake/", TTL: 15 * time.Second, Horizon: 45 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	g, err := randflake.NewLeased(context.Background(), randflake.LeasedConfig{
		Secret: secret,
		Source: src,
		Shards: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(context.Background())
}

// After etcd was restored from a snapshot under the same cluster ID while
// no member ran, nothing can tell: the operator marks the history of every
// block unknown before starting the fleet, and the next claims wait out
// the horizon once.
func ExampleSource_ResetHistory() {
	var cli *clientv3.Client // connected to the restored etcd
	src, err := etcdlease.New(etcdlease.Config{Client: cli, Secret: []byte("fleet-secret-16b")})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.ResetHistory(ctx); err != nil {
		log.Fatal(err)
	}
}
