package kubelease_test

import (
	"context"
	"fmt"
	"log"

	"github.com/randflake/randflake/kubelease"
)

// A pod of a Deployment claims a block of node IDs as a Lease object in
// its own namespace, as its service account, and issues IDs on it. The
// service account needs get, list, create, update and delete on leases
// (deploy/kubernetes/deployment/role.yaml).
func ExampleNewLeased() {
	secret := []byte("0123456789abcdef") // the fleet's secret, from a Secret volume
	cli, err := kubelease.InCluster()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	gen, err := kubelease.NewLeased(ctx, secret, kubelease.Config{Client: cli})
	if err != nil {
		log.Fatal(err) // an RBAC refusal names the verb: errors.Is(err, kubelease.ErrForbidden)
	}
	defer gen.Close(ctx)
	id, err := gen.Generate()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id)
}

// Outside a cluster, a kubeconfig file's current context gives the API
// server, the user (a token or a client certificate) and the namespace.
func ExampleLoadKubeconfig() {
	cli, err := kubelease.LoadKubeconfig("/home/me/.kube/config")
	if err != nil {
		log.Fatal(err)
	}
	src, err := kubelease.New(kubelease.Config{Client: cli, Secret: []byte("0123456789abcdef"), Name: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	_ = src // a randflake.LeaseSource, for randflake.NewLeased
}
