package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/randflake/randflake/kubelease"
	"github.com/randflake/randflake/kubelease/kubetest"
	"github.com/randflake/randflake/leasetest"
)

// serve --node-source kubernetes against a real kube-apiserver on a real
// etcd (kubetest): processes scaling up and down, a SIGKILLed holder taken
// over after its TTL, a holder cut off from the API server, an API-server
// restart, every Lease deleted after a SIGKILL, RBAC refusals. Every case
// collects the IDs the processes issued and looks for duplicates.

// kubeTTL and kubeSkew are the claims' TTL and clock bound in these tests:
// the shortest TTL the bound allows.
const (
	kubeTTL  = 6 * time.Second
	kubeSkew = 100 * time.Millisecond
)

// kubeFleet is a test's cluster, namespace and kubeconfig.
type kubeFleet struct {
	c          *kubetest.Cluster
	ns         string
	kubeconfig string // the granted user's, on the API server
	dir        string
}

// newKubeFleet starts a cluster for t and makes a namespace whose lease
// verbs are granted to kubetest.User. Without kube-apiserver or etcd it
// skips t, or fails it under CI.
func newKubeFleet(t *testing.T) *kubeFleet {
	t.Helper()
	c := kubetest.New(t)
	t.Logf("kube-apiserver ready %v after its start", c.StartupTime().Round(time.Millisecond))
	f := &kubeFleet{c: c, ns: c.Namespace(t, "e2e"), dir: t.TempDir()}
	f.kubeconfig = f.config(t, kubetest.User, "")
	return f
}

// config writes a kubeconfig of user on addr ("": the API server's).
func (f *kubeFleet) config(t *testing.T, user, addr string) string {
	t.Helper()
	dir := filepath.Join(f.dir, fmt.Sprintf("%s-%d", user, time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := f.c.Kubeconfig(dir, user, addr, f.ns)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// args are serve's flags of the fleet: blocks of claim node IDs, the test
// TTL and clock bound, the kubeconfig kc.
func (f *kubeFleet) args(kc string, claim int) []string {
	return []string{"--node-source", "kubernetes", "--kubeconfig", kc, "--claim", strconv.Itoa(claim),
		"--kube-ttl", kubeTTL.String(), "--kube-horizon", kubeTTL.String(), "--kube-max-clock-skew", kubeSkew.String()}
}

// kubePodEnv is the environment of pod name: the test secret, and the pod's
// name and UID as the downward API gives them.
func kubePodEnv(name string) []string {
	return append(slices.Clone(secretEnv), "POD_NAME="+name, "POD_UID=uid-of-"+name)
}

// startPod starts serve as pod name and waits until it is ready.
func startPod(t *testing.T, name string, args []string) *serveProcess {
	t.Helper()
	return startServeEnv(t, kubePodEnv(name), args...)
}

// leases returns the holderIdentity of every Lease object of the fleet
// in the namespace, by object name.
func (f *kubeFleet) leases(t *testing.T) map[string]string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ HolderIdentity string }
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.c.Do(ctx, http.MethodGet, kubetest.LeasesPath(f.ns)+"?labelSelector="+kubelease.LabelFleet+"%3D"+kubelease.DefaultName, nil, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range list.Items {
		out[l.Metadata.Name] = l.Spec.HolderIdentity
	}
	return out
}

// pods is a set of running serve processes and every ID they issued.
type pods struct {
	running map[string]*serveProcess
	all     []string
}

// fetchAll fetches n IDs from every running pod, checks that no two of
// them use a node ID, and adds the IDs to the collection.
func (p *pods) fetchAll(t *testing.T, n int) {
	t.Helper()
	owner := map[int64]string{}
	for name, proc := range p.running {
		ids := fetch(t, proc, n)
		p.all = append(p.all, ids...)
		for node := range nodesOf(t, secretEnv, ids) {
			if other, ok := owner[node]; ok {
				t.Fatalf("node ID %d used by %s and %s at once", node, other, name)
			}
			owner[node] = name
		}
	}
}

// Two to eight serve processes, scaled up and down as an autoscaler
// would, claim disjoint blocks as Lease objects named for them (the
// holder: pod name and UID); a ninth finds no free block; a stopped
// process's block goes to the next at once. RBAC refusals name the verb
// and the resource.
func TestServeKubernetesScaling(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver: not in -short")
	}
	t.Parallel() // a cluster of its own
	f := newKubeFleet(t)
	args := f.args(f.kubeconfig, 16384) // 8 blocks
	p := &pods{running: map[string]*serveProcess{}}
	// start starts the pods at once and waits until each serves (each
	// claim waits its takeover: side by side, not one after another).
	start := func(names ...string) {
		for _, n := range names {
			p.running[n] = spawnServe(t, kubePodEnv(n), args...)
		}
		for _, n := range names {
			waitServing(t, p.running[n])
		}
	}
	stopPods := func(names ...string) {
		for _, n := range names {
			stop(t, p.running[n])
			delete(p.running, n)
		}
	}
	began := time.Now()
	start("pod-0", "pod-1")
	t.Logf("first two pods ready %v after start (a new namespace: unknown history waited out once)", time.Since(began).Round(time.Millisecond))
	p.fetchAll(t, 1000)
	start("pod-2", "pod-3", "pod-4", "pod-5", "pod-6", "pod-7")
	p.fetchAll(t, 1000)
	held := f.leases(t)
	holders := 0
	for name, h := range held {
		if name == kubelease.DefaultName {
			if h != "" {
				t.Errorf("the fleet object %s names a holder %q", name, h)
			}
			continue
		}
		if regexp.MustCompile(`^pod-[0-7] uid uid-of-pod-[0-7] claim [0-9a-f]{16}$`).MatchString(h) {
			holders++
		}
	}
	if holders != 8 {
		t.Errorf("Lease objects with 8 processes: %v, want 8 held by pod name, UID and claim token", held)
	}
	// lease status shows the 8 blocks held, by pod, and the API server's
	// clock against this machine's.
	status := runBinaryTimeout(t, 60*time.Second, secretEnv, append([]string{"lease", "status"}, args...)...)
	for _, want := range []string{"store:    kubernetes ", "the store 20", "marker:   ok, fleet key ID ", "8 of 8 blocks held", " pod-0 uid uid-of-pod-0 "} {
		if status.code != 0 || !strings.Contains(status.stdout, want) {
			t.Errorf("lease status with 8 pods: exit %d, no %q in\n%s%s", status.code, want, status.stdout, status.stderr)
		}
	}
	if regexp.MustCompile(`claim [0-9a-f]{16}`).MatchString(status.stdout) {
		t.Errorf("lease status shows the holders' claim tokens:\n%s", status.stdout)
	}
	t.Logf("lease status with 8 pods:\n%s", status.stdout)
	// A ninth finds every block claimed.
	r := runBinaryTimeout(t, 60*time.Second, kubePodEnv("pod-8"), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "every node-ID block is claimed") {
		t.Errorf("a ninth process with 8 blocks held: exit %d, want 1 and no free block: %s", r.code, r.stderr)
	}
	stopPods("pod-1", "pod-3", "pod-5", "pod-6", "pod-7")
	p.fetchAll(t, 1000)
	began = time.Now()
	start("pod-8", "pod-9")
	t.Logf("two pods ready %v after start, on released blocks", time.Since(began).Round(time.Millisecond))
	p.fetchAll(t, 1000)
	want := 1000 * (2 + 8 + 3 + 5)
	if checkUnique(t, p.all, want, nil); t.Failed() {
		t.FailNow()
	}
	t.Logf("%d IDs from 10 processes (2, 8, 3, 5 at once), none twice", len(p.all))

	// RBAC: a user without the Role, and one without update.
	env := kubePodEnv("pod-x")
	r = runBinaryTimeout(t, 60*time.Second, env, append([]string{"serve", "--listen", "127.0.0.1:0"}, f.args(f.config(t, kubetest.Denied, ""), 16384)...)...)
	if r.code != 1 || !strings.Contains(r.stderr, `refused to list leases.coordination.k8s.io in namespace \"`+f.ns+`\"`) {
		t.Errorf("a user without the Role: exit %d, want 1 and the refused verb and resource: %s", r.code, r.stderr)
	}
	ns2 := f.c.Namespace(t, "readonly")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.c.Grant(ctx, ns2, kubetest.Denied, "get", "list"); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(f.dir, "readonly")
	os.Mkdir(ro, 0o700)
	kc, err := f.c.Kubeconfig(ro, kubetest.Denied, "", ns2)
	if err != nil {
		t.Fatal(err)
	}
	r = runBinaryTimeout(t, 60*time.Second, env, append([]string{"serve", "--listen", "127.0.0.1:0"}, f.args(kc, 16384)...)...)
	if r.code != 1 || !strings.Contains(r.stderr, `refused to create leases.coordination.k8s.io in namespace \"`+ns2+`\"`) {
		t.Errorf("a user with get and list only: exit %d, want 1 and the refused verb: %s", r.code, r.stderr)
	}
	for _, out := range []string{r.stderr} {
		if strings.Contains(out, f.c.Token(kubetest.Denied)) {
			t.Errorf("a token appears in serve's output: %s", out)
		}
	}
	// Without a secret: refused before any request.
	r = runBinaryTimeout(t, 30*time.Second, []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir()},
		append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	if r.code != 2 || !strings.Contains(r.stderr, "shared secret") {
		t.Errorf("serve --node-source kubernetes without a secret: exit %d, want 2 (a usage error): %s", r.code, r.stderr)
	}
}

// killMidSecond sends SIGKILL to p half-way through a second and returns
// when.
func killMidSecond(t *testing.T, p *serveProcess) time.Time {
	t.Helper()
	now := time.Now()
	time.Sleep(time.Duration((1500*time.Millisecond - time.Duration(now.Nanosecond())) % time.Second))
	at := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.done <- nil
	return at
}

// startPodWhenFree starts pod name until it gets node IDs, within
// timeout: while every block is held, serve exits with no free block.
func startPodWhenFree(t *testing.T, name string, args []string, timeout time.Duration) *serveProcess {
	t.Helper()
	timeout = within(timeout)
	deadline := time.Now().Add(timeout)
	for {
		proc := spawnServe(t, kubePodEnv(name), args...)
		for {
			if m := addrRE.FindStringSubmatch(proc.logs.String()); m != nil {
				proc.url = "http://" + m[1] + m[2]
				return proc
			}
			select {
			case err := <-proc.done:
				proc.done <- err
				if !strings.Contains(proc.logs.String(), "every node-ID block is claimed") {
					t.Fatalf("%s exited (%v) for another reason than no free block: %s", name, err, proc.logs.String())
				}
			case <-time.After(20 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("%s got no node IDs within %v: %s", name, timeout, proc.logs.String())
				}
				continue
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s got no node IDs within %v", name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fetchInts fetches n IDs from p as decimal strings, as fetch does, or
// returns why not.
func fetchInts(p *serveProcess, n int) ([]string, error) {
	resp, err := http.Get(p.url + "/v1/ids?format=int&count=" + strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var got struct{ IDs []string }
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got.IDs) != n {
		return nil, fmt.Errorf("%d IDs, %v", len(got.IDs), err)
	}
	return got.IDs, nil
}

// fetchUntilReady fetches n IDs from p, waiting up to timeout for it to
// serve again (503 while it holds no lease).
func fetchUntilReady(t *testing.T, p *serveProcess, n int, timeout time.Duration) []string {
	t.Helper()
	timeout = within(timeout)
	deadline := time.Now().Add(timeout)
	for {
		ids, err := fetchInts(p, n)
		if err == nil {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("no IDs within %v (%s): %v; logs:\n%s", timeout, slowness(), err, p.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A SIGKILLed holder's block is taken over once its TTL has passed; the
// processes survive an API-server restart; every Lease deleted right after
// a SIGKILL half-way through a second is waited out. Two blocks, so that
// a newcomer needs the killed holder's.
func TestServeKubernetesFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver: not in -short")
	}
	t.Parallel() // a cluster of its own
	f := newKubeFleet(t)
	args := f.args(f.kubeconfig, 65536) // 2 blocks
	var all []string
	a := startPod(t, "pod-a", args)
	b := startPod(t, "pod-b", args)
	all = append(all, fetch(t, a, 2000)...)
	all = append(all, fetch(t, b, 2000)...)
	time.Sleep(2 * time.Second) // a renewal or two
	all = append(all, fetch(t, a, 1000)...)

	// SIGKILL, then a newcomer: it gets a's block once the TTL has passed.
	killed := killMidSecond(t, a)
	c := startPodWhenFree(t, "pod-c", args, 6*kubeTTL)
	took := time.Since(killed)
	if took < kubeTTL-2*time.Second {
		t.Errorf("the killed holder's block was taken over %v after SIGKILL, before its TTL (%v) could pass", took, kubeTTL)
	}
	t.Logf("SIGKILLed holder's block taken over %v after the kill (TTL %v)", took.Round(time.Millisecond), kubeTTL)
	all = append(all, fetchUntilReady(t, c, 2000, 30*time.Second)...)
	all = append(all, fetch(t, b, 1000)...)

	// An API-server restart: the processes wait for it and serve again.
	began := time.Now()
	if err := f.c.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restarted in %v", time.Since(began).Round(time.Millisecond))
	all = append(all, fetchUntilReady(t, b, 1000, 60*time.Second)...)
	all = append(all, fetchUntilReady(t, c, 1000, 60*time.Second)...)
	t.Logf("both processes serving %v after the restart began", time.Since(began).Round(time.Millisecond))

	// SIGKILL half-way through a second, then every Lease deleted, then a
	// newcomer at once: history unknown, waited out.
	killMidSecond(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.c.DeleteLeases(ctx, f.ns, kubelease.LabelFleet+"%3D"+kubelease.DefaultName); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	d := startPodWhenFree(t, "pod-d", args, 8*kubeTTL)
	waited := time.Since(deleted)
	t.Logf("after every Lease was deleted, a newcomer serving %v later", waited.Round(time.Millisecond))
	all = append(all, fetchUntilReady(t, d, 2000, 30*time.Second)...)
	all = append(all, fetchUntilReady(t, c, 2000, 60*time.Second)...)
	want := len(all)
	if checkUnique(t, all, want, nil); t.Failed() {
		t.FailNow()
	}
	t.Logf("%d IDs from 4 processes across a SIGKILL takeover, an API-server restart and deleted Leases, none twice", len(all))
	stop(t, c)
	stop(t, d)
}

// A holder cut off from the API server by a TCP proxy stops issuing
// before its claim can pass to another, which takes it over after the
// TTL; the IDs of both never meet. One block.
func TestServeKubernetesCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver: not in -short")
	}
	t.Parallel() // a cluster of its own
	f := newKubeFleet(t)
	proxy := leasetest.NewProxy(t, f.c.Addr())
	viaProxy := f.args(f.config(t, kubetest.User, proxy.Addr()), 131072)
	direct := f.args(f.kubeconfig, 131072)
	a := startPod(t, "pod-a", viaProxy)
	all := fetch(t, a, 2000)
	time.Sleep(time.Second)
	proxy.Cut()
	cut := time.Now()
	// a issues until its lease ends, then answers 503.
	var lastOK time.Time
	most := within(3 * kubeTTL)
	for time.Since(cut) < most {
		ids, err := fetchInts(a, 100)
		if err != nil {
			break
		}
		all = append(all, ids...)
		lastOK = time.Now()
		time.Sleep(20 * time.Millisecond)
	}
	if lastOK.IsZero() || time.Since(cut) >= most {
		t.Fatalf("the cut-off process: last IDs %v after the cut; it never stopped (within %v: %s), or stopped at once", lastOK.Sub(cut), most, slowness())
	}
	stopped := lastOK.Sub(cut)
	b := startPodWhenFree(t, "pod-b", direct, 6*kubeTTL)
	took := time.Since(cut)
	if stopped >= took {
		t.Errorf("the cut-off process issued until %v after the cut, its successor started %v after it", stopped, took)
	}
	t.Logf("cut off: the holder stopped issuing %v after the cut (TTL %v); its block taken over %v after the cut",
		stopped.Round(time.Millisecond), kubeTTL, took.Round(time.Millisecond))
	all = append(all, fetchUntilReady(t, b, 2000, 30*time.Second)...)
	proxy.Heal()
	stop(t, b)
	if checkUnique(t, all, len(all), nil); t.Failed() {
		t.FailNow()
	}
	// The healed process finds its claim taken over and claims again.
	all = append(all, fetchUntilReady(t, a, 1000, 6*kubeTTL)...)
	if checkUnique(t, all, len(all), nil); t.Failed() {
		t.FailNow()
	}
	t.Logf("%d IDs from the cut-off holder and its successor, none twice", len(all))
	stop(t, a)
}

// An API server that stalls (SIGSTOP: it accepts connections and answers
// nothing) while serve makes its first claim: the claim's step times out,
// serve logs that it claims again and, once the server goes on (SIGCONT),
// claims and serves, rather than exiting.
func TestServeKubernetesStalledAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver: not in -short")
	}
	t.Parallel() // a cluster of its own
	f := newKubeFleet(t)
	pid := f.c.APIServerPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP to the API server (pid %d): %v", pid, err)
	}
	// SIGCONT to a running process does nothing: the cleanup resumes the
	// server on every path, once more after the test's own.
	resume := func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Errorf("SIGCONT to the API server (pid %d): %v", pid, err)
		}
	}
	t.Cleanup(resume)
	p := spawnServe(t, kubePodEnv("pod-a"), f.args(f.kubeconfig, 131072)...)
	m := waitLog(t, p, regexp.MustCompile(`msg="a claim of node IDs failed on a slow store; claiming again" try=(\d+)`), 6*kubeTTL)
	resume()
	waitServing(t, p)
	ids := fetch(t, p, 2000)
	if checkUnique(t, ids, 2000, nil); t.Failed() {
		t.FailNow()
	}
	t.Logf("claim %s failed on the stopped API server; serving after SIGCONT: %d IDs, none twice", m[1], len(ids))
	stop(t, p)
}
