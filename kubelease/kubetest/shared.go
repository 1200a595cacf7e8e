package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/randflake/randflake/internal/testserver"
)

// shared is the cluster the tests of a package share (Shared), started on
// first use and closed by Main.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Main is a TestMain for a package whose tests share one cluster: it runs
// the tests, then closes the cluster if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		shared.c.Close()
	}
	os.Exit(code)
}

// Shared returns the cluster the package's tests share, starting it on
// first use; each test works in a namespace of its own (Namespace). Without
// binaries it skips t, or fails it under CI; under -short it skips t (see
// SkipShort). The package's TestMain must be Main, which closes it.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	SkipShort(t)
	shared.once.Do(func() { shared.c, shared.err = Start() })
	if errors.Is(shared.err, ErrNotFound) && !testserver.ServersRequired() {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatalf("kubetest: starting the shared etcd and kube-apiserver: %v", shared.err)
	}
	return shared.c
}

var namespaces atomic.Int64

// Namespace creates a namespace no other test of this process uses, named
// after prefix, and grants User the lease verbs in it.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%100000, namespaces.Add(1))
	ctx, cancel := boundCtx(context.Background(), "creating namespace "+ns+" and granting "+User+" the lease verbs in it", CallTimeout)
	defer cancel()
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatalf("kubetest: creating namespace %s: %v", ns, err)
	}
	if err := c.Grant(ctx, ns, User, LeaseVerbs...); err != nil {
		t.Fatalf("kubetest: granting %s the lease verbs in %s: %v", User, ns, err)
	}
	return ns
}
