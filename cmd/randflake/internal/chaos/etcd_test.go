//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake/etcdlease/etcdtest"
	"github.com/randflake/randflake/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The raft timing of the cluster, etcd's defaults, given explicitly because
// the time bounds checked after a quorum loss depend on the election
// timeout.
const (
	heartbeat       = 100 * time.Millisecond
	electionTimeout = time.Second
)

// cluster is a real etcd cluster of several members: one etcd process per
// member, each on its own loopback ports and data directory. (Package
// etcdtest starts single-member servers; a quorum to lose takes three.)
// The binaries are etcdtest's: etcd and etcdctl from $RANDFLAKE_ETCD_BIN
// or PATH.
type cluster struct {
	bin, ctlBin string
	dir         string
	token       string
	members     []*member
	env         []string
	restores    int // data directories made by restore so far
}

type member struct {
	c                    *cluster
	name                 string
	dataDir, logPath     string
	clientPort, peerPort int
	mu                   sync.Mutex
	p                    *proc
	starts               int
}

// newCluster lays out n members; start starts them. Without the binaries
// the error wraps etcdtest.ErrNotFound.
func newCluster(dir string, n int, token string) (*cluster, error) {
	bin, ctlBin, err := etcdtest.Find()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, ctlBin: ctlBin, dir: dir, token: token, env: baseEnv()}
	for i := range n {
		m := &member{c: c, name: fmt.Sprintf("m%d", i+1)}
		var err error
		if m.clientPort, err = testserver.FreePort(); err != nil {
			return nil, err
		}
		if m.peerPort, err = testserver.FreePort(); err != nil {
			return nil, err
		}
		m.dataDir = filepath.Join(dir, m.name+".data")
		m.logPath = filepath.Join(dir, m.name+".log")
		c.members = append(c.members, m)
	}
	return c, nil
}

func (c *cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.peerURL())
	}
	return strings.Join(parts, ",")
}

// endpoints returns the members' client addresses.
func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientAddr())
	}
	return eps
}

func (m *member) clientAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.clientPort))
}
func (m *member) peerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(m.peerPort))
}

// start starts the member's etcd process. After the first start the data
// directory decides the membership and the --initial flags are ignored.
func (m *member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil && !m.p.exited() {
		return fmt.Errorf("%s is running", m.name)
	}
	client := "http://" + m.clientAddr()
	p, err := startProc(m.name, m.logPath, m.c.env, m.c.bin,
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", m.c.initialCluster(),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", m.c.token,
		"--heartbeat-interval", strconv.Itoa(int(heartbeat/time.Millisecond)),
		"--election-timeout", strconv.Itoa(int(electionTimeout/time.Millisecond)),
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	)
	if err != nil {
		return fmt.Errorf("starting etcd member %s: %w", m.name, err)
	}
	m.p = p
	m.starts++
	return nil
}

// kill SIGKILLs the member and reaps it.
func (m *member) kill() {
	m.mu.Lock()
	p := m.p
	m.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// stop stops the member cleanly (SIGTERM, then SIGKILL after 10s).
func (m *member) stop() {
	m.mu.Lock()
	p := m.p
	m.mu.Unlock()
	if p != nil {
		p.term(10 * time.Second)
	}
}

func (m *member) proc() *proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p
}

var healthClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// healthy reports whether the member answers /health with "true" (it has a
// leader and serves requests).
func (m *member) healthy() bool {
	resp, err := healthClient.Get("http://" + m.clientAddr() + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	return json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// waitHealthy waits until every member in ms is healthy, or fails when one
// exits or ctx ends.
func waitHealthy(ctx context.Context, ms ...*member) error {
	for _, m := range ms {
		for !m.healthy() {
			if p := m.proc(); p == nil {
				return fmt.Errorf("etcd member %s was never started", m.name)
			} else if p.exited() {
				return fmt.Errorf("etcd member %s exited (%s): %s", m.name, p.exit(), p.tail(5))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("etcd member %s not healthy: %w; log: %s", m.name, ctx.Err(), m.proc().tail(5))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// leader returns the index of the member that leads the cluster, or -1.
func (c *cluster) leader(ctx context.Context, cli *clientv3.Client) int {
	for _, m := range c.members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.clientAddr())
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		for i, o := range c.members {
			oc, cancel := context.WithTimeout(ctx, time.Second)
			ost, err := cli.Status(oc, o.clientAddr())
			cancel()
			if err == nil && ost.Header.MemberId == st.Leader {
				return i
			}
		}
	}
	return -1
}

// version returns the version the etcd binary reports.
func (c *cluster) version() string {
	out, err := exec.Command(c.bin, "--version").Output()
	if err != nil {
		return "unknown version"
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown version"
}

// ctl runs etcdctl (API version 3) against every member, within ctx, and
// returns its standard output; the error includes its standard error.
func (c *cluster) ctl(ctx context.Context, args ...string) ([]byte, error) {
	return c.ctlAt(ctx, strings.Join(c.endpoints(), ","), args...)
}

func (c *cluster) ctlAt(ctx context.Context, endpoints string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.ctlBin, append([]string{"--endpoints=" + endpoints, "--dial-timeout=2s", "--command-timeout=10s"}, args...)...)
	cmd.Env = append(baseEnv(), "ETCDCTL_API=3")
	out, err := cmd.Output() // its standard error goes into the *exec.ExitError
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	if err != nil {
		return out, fmt.Errorf("etcdctl %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// snapshot saves a snapshot of the keyspace, taken from a healthy member,
// to path (etcdctl snapshot save).
func (c *cluster) snapshot(ctx context.Context, path string) error {
	var errs []error
	for _, m := range c.members {
		if !m.healthy() {
			continue
		}
		_, err := c.ctlAt(ctx, m.clientAddr(), "snapshot", "save", path)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no member saved a snapshot: %w", errors.Join(errs...))
}

// restore brings the whole cluster back from the snapshot at path, as an
// operator does after a disaster: every member is stopped, restored with
// etcdctl snapshot restore into a new data directory under the cluster's
// own token, names and peer URLs (so the member IDs and the cluster ID are
// the same as before: only the revision, gone back to the snapshot's, tells
// the copy from the cluster the clients knew), and started again on the
// same ports. It returns once every member is healthy, with the time when
// the last member had stopped. The old data directories are left as they
// were.
func (c *cluster) restore(ctx context.Context, path string) (stopped time.Time, err error) {
	for _, m := range c.members {
		m.stop()
	}
	stopped = time.Now()
	c.restores++
	for _, m := range c.members {
		data := filepath.Join(c.dir, fmt.Sprintf("%s.restore%d", m.name, c.restores))
		if _, err := c.ctlAt(ctx, m.clientAddr(), "snapshot", "restore", path, "--name", m.name, "--data-dir", data,
			"--initial-cluster", c.initialCluster(), "--initial-cluster-token", c.token,
			"--initial-advertise-peer-urls", m.peerURL()); err != nil {
			return stopped, fmt.Errorf("restoring etcd member %s: %w", m.name, err)
		}
		m.mu.Lock()
		m.dataDir = data
		m.mu.Unlock()
	}
	for _, m := range c.members {
		if err := m.start(); err != nil {
			return stopped, err
		}
	}
	return stopped, waitHealthy(ctx, c.members...)
}
