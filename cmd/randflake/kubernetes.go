package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/randflake/randflake/kubelease"
	"github.com/randflake/randflake/lease"
)

// kubeFlags are serve's flags for node IDs from Kubernetes Lease objects
// (--node-source kubernetes).
type kubeFlags struct {
	namespace  string
	kubeconfig string
	name       string
	ttl        time.Duration
	horizon    time.Duration // the fleet's bound on promises
	skew       time.Duration
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.namespace, "kube-namespace", "", "with --node-source kubernetes: namespace of the Lease objects (default: the pod's own, or the kubeconfig context's)")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "with --node-source kubernetes: kubeconfig file to reach the API server from outside a cluster (token or client-certificate users); default: the pod's service account")
	fs.StringVar(&k.name, "kube-lease-name", kubelease.DefaultName, "with --node-source kubernetes: name of the fleet's Lease object, prefix of its blocks' and value of their randflake.io/fleet label")
	fs.DurationVar(&k.ttl, "kube-ttl", 0, fmt.Sprintf("with --node-source kubernetes: leaseDurationSeconds of the claims: a crashed process's node IDs are free again after it (default %v)", kubelease.DefaultTTL))
	fs.DurationVar(&k.horizon, "kube-horizon", 0, fmt.Sprintf("with --node-source kubernetes: the fleet's bound on promises, the same on every member, at least --kube-ttl; deleted Lease objects are waited out for it (default %v)", kubelease.DefaultHorizon))
	fs.DurationVar(&k.skew, "kube-max-clock-skew", 0, fmt.Sprintf("with --node-source kubernetes: bound on this machine's clock against the API server's, checked at every claim and renewal (default %v)", kubelease.DefaultMaxClockSkew))
}

// set reports whether any flag of the kubernetes source was given.
func (k *kubeFlags) set() bool {
	return k.namespace != "" || k.kubeconfig != "" || k.ttl != 0 || k.horizon != 0 || k.skew != 0 || (k.name != "" && k.name != kubelease.DefaultName)
}

// check returns a usage error for flags out of range.
func (k *kubeFlags) check() error {
	if k.ttl < 0 || k.horizon < 0 || k.skew < 0 {
		return usagef("--kube-ttl, --kube-horizon and --kube-max-clock-skew must not be negative")
	}
	return nil
}

// openKubernetes opens the Kubernetes source: a client of --kubeconfig, or
// of the pod's service account, on the Lease objects of --kube-namespace.
func (l *leaseFlags) openKubernetes(ctx context.Context, log *slog.Logger, secret []byte) (*openedSource, error) {
	var (
		cli *kubelease.Client
		err error
	)
	if l.kube.kubeconfig != "" {
		cli, err = kubelease.LoadKubeconfig(l.kube.kubeconfig)
	} else {
		cli, err = kubelease.InCluster()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	src, err := kubelease.New(kubelease.Config{
		Client: cli, Namespace: l.kube.namespace, Name: l.kube.name, Secret: secret,
		Nodes: l.claim, TTL: l.kube.ttl, Horizon: l.kube.horizon, MaxClockSkew: l.kube.skew, Logger: log,
	})
	if err != nil {
		if errors.Is(err, lease.ErrBeyondHorizon) {
			return nil, usagef("%v: give every member of the fleet the same --kube-horizon ($RANDFLAKE_KUBE_HORIZON), at least --kube-ttl", err)
		}
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	where := cli.Server()
	return &openedSource{src: src, secret: secret, describe: "kubernetes " + src.Store().Info().Name, network: true,
		waiting: "still waiting for node IDs from Kubernetes Lease objects", waitingArgs: []any{"server", where},
		wrap: func(err error) error {
			if errors.Is(err, kubelease.ErrForbidden) {
				return fmt.Errorf("kubernetes: %w (see deploy/kubernetes/deployment/role.yaml)", err)
			}
			return fmt.Errorf("kubernetes at %s: %w", where, err)
		}}, nil
}
