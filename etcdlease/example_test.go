package etcdlease_test

import (
	"context"
	"log"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A fleet member claims 16 node IDs on etcd (up to 2 million IDs per
// second), kept alive for as long as it runs and released on Close.
func ExampleNewLeased() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	secret := []byte("fleet-secret-16b") // the same on every member
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
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	log.Print(randflake.EncodeString(id))
}

// The source alone, for a generator configured by hand.
func ExampleNew() {
	var cli *clientv3.Client // connected to etcd
	src, err := etcdlease.New(etcdlease.Config{Client: cli, Prefix: "/myapp/randflake/", TTL: 15 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	g, err := randflake.NewLeased(context.Background(), randflake.LeasedConfig{
		Secret: []byte("fleet-secret-16b"),
		Source: src,
		Shards: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(context.Background())
}
