package kubetest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/randflake/randflake/internal/testserver"
)

// A server that finds its port taken starts again on new ones: etcd on a
// port where another program answers etcd's health check (only the member
// list tells it apart), the API server on a port another program listens
// on, and the cluster's address stays the one the tests were given.
func TestStartOnTakenPorts(t *testing.T) {
	SkipShort(t)
	apiserver, etcd, etcdctl, err := Find()
	if errors.Is(err, ErrNotFound) && !testserver.ServersRequired() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cluster{apiserver: apiserver, etcd: etcd, etcdctl: etcdctl, dir: dir, tokens: map[string]string{}}
	if err := c.setup(); err != nil {
		t.Fatal(err)
	}
	c.etcdDir = etcdBase(dir)
	t.Cleanup(c.Close)

	// Another program on etcd's client port, healthy as an etcd is.
	impostor, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"health":"true"}`)) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(impostor)
	t.Cleanup(func() { srv.Close() })
	// And one listening on the API server's port.
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	takenEtcd, takenAPI := port(t, impostor), port(t, squatter)
	peer, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}

	c.mu.Lock()
	c.etcdPort, c.peerPort, c.apiPort = takenEtcd, peer, takenAPI
	err = c.startEtcd(context.Background(), "")
	if err == nil {
		err = c.startAPI()
	}
	etcdPort, apiPort := c.etcdPort, c.apiPort
	c.mu.Unlock()
	if err != nil {
		t.Fatalf("starting on taken ports: %v", err)
	}
	if etcdPort == takenEtcd || apiPort == takenAPI {
		t.Fatalf("etcd on port %d, the API server on %d: the taken ports were %d and %d", etcdPort, apiPort, takenEtcd, takenAPI)
	}
	addr := c.Addr()
	check := func(when, ns string) {
		t.Helper()
		if err := c.CreateNamespace(Context(t, "creating a namespace "+when), ns); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if c.Addr() != addr {
			t.Fatalf("%s: the cluster's address is %s, not %s as before", when, c.Addr(), addr)
		}
	}
	check("after the first start", "first")

	// The API server's port taken while it is stopped: it starts again on
	// another, behind the same address.
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(apiPort))
	if err != nil {
		t.Fatalf("taking the stopped API server's port: %v", err)
	}
	defer ln.Close()
	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("restarting on a taken port: %v", err)
	}
	c.mu.Lock()
	again := c.apiPort
	c.mu.Unlock()
	if again == apiPort {
		t.Fatalf("the API server started again on its taken port %d", apiPort)
	}
	check("after the restart", "second")
	t.Logf("etcd moved from port %d to %d, the API server from %d to %d, then to %d, behind %s", takenEtcd, etcdPort, takenAPI, apiPort, again, addr)
}

func port(t *testing.T, ln net.Listener) int {
	t.Helper()
	return ln.Addr().(*net.TCPAddr).Port
}
