//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/kubelease"
	"github.com/randflake/randflake/kubelease/kubetest"
)

// kubePool is the Kubernetes run's free pool, as in the etcd run: the
// lowest blocks are free, and every other block is claimed for good by a
// stand-in Lease object that names a holder and no renewal time (a claim
// kubelease takes to hold), as if the rest of a large fleet held it.
type kubePool struct {
	c    *kubetest.Cluster
	ns   string
	free int64 // blocks 0..free-1 are free
}

// kubeStandIn is the holder the stand-ins name.
const kubeStandIn = "the chaos test: held for good, not part of the free pool"

func kubeBlocks() int64 { return (randflake.MaxNode + 1) / kubeClaim }

func (p *kubePool) path(name string) string { return kubetest.LeasesPath(p.ns) + "/" + name }

// kubeStandInObject returns the stand-in Lease object of the block from first.
func kubeStandInObject(first int64) map[string]any {
	return map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{
			"name":   kubelease.BlockName(kubelease.DefaultName, first),
			"labels": map[string]string{kubelease.LabelFleet: kubelease.DefaultName, kubelease.LabelManagedBy: "randflake"},
		},
		"spec": map[string]any{"holderIdentity": kubeStandIn},
	}
}

// block creates the stand-ins of every block from the pool's end on that
// has no object; it returns how many blocks already had one.
func (p *kubePool) block(ctx context.Context) (taken int, err error) {
	for b := p.free; b < kubeBlocks(); b++ {
		err := p.c.Do(ctx, http.MethodPost, kubetest.LeasesPath(p.ns), kubeStandInObject(b*kubeClaim), nil)
		var se *kubetest.StatusError
		switch {
		case err == nil:
		case errors.As(err, &se) && se.Code == http.StatusConflict:
			taken++
		default:
			return taken, fmt.Errorf("creating the stand-in of node IDs %d-%d: %w", b*kubeClaim, (b+1)*kubeClaim-1, err)
		}
	}
	return taken, nil
}

// grow frees the block after the pool (deletes its stand-in) and returns
// its first node ID.
func (p *kubePool) grow(ctx context.Context) (int64, error) {
	first := p.free * kubeClaim
	if err := p.c.Do(ctx, http.MethodDelete, p.path(kubelease.BlockName(kubelease.DefaultName, first)), nil, nil); err != nil && !kubetest.IsNotFound(err) {
		return 0, err
	}
	p.free++
	return first, nil
}

// wipe deletes every Lease object of the fleet (the fleet's object with
// its marker, every block's, the running servers' too), as kubectl delete
// leases -l randflake.io/fleet=randflake would, and puts the stand-ins
// back.
func (p *kubePool) wipe(ctx context.Context) (taken int, err error) {
	sel := url.QueryEscape(kubelease.LabelFleet + "=" + kubelease.DefaultName)
	if err := p.c.DeleteLeases(ctx, p.ns, sel); err != nil {
		return 0, err
	}
	return p.block(ctx)
}

// object is a Lease object as the replay saves and puts it back: all of
// it, untyped, so that nothing is lost.
type object = map[string]any

// get reads the Lease object name.
func (p *kubePool) get(ctx context.Context, name string) (object, error) {
	var o object
	err := p.c.Do(ctx, http.MethodGet, p.path(name), nil, &o)
	return o, err
}

// putBack writes saved over the current object of the same name: the
// saved metadata's labels and annotations and the saved spec, at the
// current resource version (an update through the API, as an operator
// restoring a saved manifest would make it). The fleet writes the
// object meanwhile: an update refused because it changed since it was
// read (409) is made again on the object read anew, as `kubectl
// replace` is retried, up to putBackTries times.
func (p *kubePool) putBack(ctx context.Context, saved object) error {
	meta, _ := saved["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	var err error
	for try := 0; try < putBackTries; try++ {
		var cur object
		if cur, err = p.get(ctx, name); err != nil {
			return err
		}
		cm, _ := cur["metadata"].(map[string]any)
		cm["labels"], cm["annotations"] = meta["labels"], meta["annotations"]
		cur["spec"] = saved["spec"]
		err = p.c.Do(ctx, http.MethodPut, p.path(name), cur, nil)
		var api *kubelease.APIError
		if !errors.As(err, &api) || api.Code != http.StatusConflict {
			return err
		}
	}
	return fmt.Errorf("%s changed under %d updates in a row: %w", name, putBackTries, err)
}

// putBackTries is how many times putBack updates an object the fleet
// changed meanwhile.
const putBackTries = 10

// annotation returns an annotation of a Lease object as read.
func annotation(o object, key string) string {
	meta, _ := o["metadata"].(map[string]any)
	as, _ := meta["annotations"].(map[string]any)
	v, _ := as[key].(string)
	return v
}

// kubeCall bounds one call to the API server.
func kubeCall(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, within(20*time.Second))
}
