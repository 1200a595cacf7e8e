package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/randflake/randflake"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Every second read from etcd is checked before any arithmetic: a used
// key outside the lifetime of Randflake IDs is refused, never wrapped into
// a lease that starts at once; a range used up to the last second is
// never handed out again.
func TestUsedSecondsRangeChecked(t *testing.T) {
	srv := startEtcd(t)
	cli := newClient(t, srv.endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, bad := range []string{"9223372036854775807", "9223372036854775806", "-5", "0", "12x", fmt.Sprint(int64(randflake.MaxTimestamp) + 1)} {
		prefix := fmt.Sprintf("/corrupt%d/", i)
		if _, err := cli.Put(ctx, prefix+"used/000000", bad); err != nil {
			t.Fatal(err)
		}
		src, err := New(Config{Client: cli, Prefix: prefix, Nodes: 1, LastNode: 0, TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := src.Acquire(ctx)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("used second %q: Acquire gave %v, %v; want ErrCorrupt", bad, l, err)
		}
		if err != nil {
			// Nothing is left claimed.
			resp, _ := cli.Get(ctx, prefix+"claim/", clientv3.WithPrefix())
			if resp != nil && len(resp.Kvs) != 0 {
				t.Errorf("used second %q: %d claim keys left behind", bad, len(resp.Kvs))
			}
		}
	}

	prefix := "/usedup/"
	if _, err := cli.Put(ctx, prefix+"used/000000", fmt.Sprint(int64(randflake.MaxTimestamp))); err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Client: cli, Prefix: prefix, Nodes: 1, LastNode: 1, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := src.Acquire(ctx)
	if err != nil || l.FirstNode != 1 {
		t.Fatalf("with node 0 used up: %v, %v; want node 1", l, err)
	}
	other, _ := New(Config{Client: cli, Prefix: prefix, Nodes: 1, LastNode: 1, TTL: 3 * time.Second})
	if l2, err := other.Acquire(ctx); !errors.Is(err, ErrNoFreeNodes) {
		t.Errorf("with node 0 used up and node 1 held: %v, %v; want ErrNoFreeNodes", l2, err)
	}
	if err := src.Release(ctx, l, l.Start); err != nil {
		t.Fatal(err)
	}
}
