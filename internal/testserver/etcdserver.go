package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// What the harnesses that start etcd share: etcdtest (module etcdlease)
// runs etcd for the etcd store, kubetest (module kubelease) runs it under
// a kube-apiserver. Both find the binaries alike, start a single member
// with the same flags, restore it from snapshots with etcdctl, and wait
// for it (and the API server) to be ready the same way.

// EtcdBinEnv is the environment variable that, when set, names the
// directory holding etcd and etcdctl; FindEtcd then looks nowhere else.
const EtcdBinEnv = "RANDFLAKE_ETCD_BIN"

// ErrNoEtcd is wrapped by the error of FindEtcd when etcd or etcdctl is
// not found.
var ErrNoEtcd = errors.New("no etcd binaries (etcd, etcdctl)")

// FindEtcd returns the paths of the etcd and etcdctl binaries: those in
// the directory $RANDFLAKE_ETCD_BIN (EtcdBinEnv) names if it is set, else
// those on PATH. If either is missing, the error wraps ErrNoEtcd and says
// where it looked; the caller adds how to install them.
func FindEtcd() (etcd, etcdctl string, err error) {
	if d := os.Getenv(EtcdBinEnv); d != "" {
		etcd, etcdctl = filepath.Join(d, "etcd"), filepath.Join(d, "etcdctl")
		if isFile(etcd) && isFile(etcdctl) {
			return etcd, etcdctl, nil
		}
		return "", "", fmt.Errorf("%w in $%s=%s", ErrNoEtcd, EtcdBinEnv, d)
	}
	etcd, err1 := exec.LookPath("etcd")
	etcdctl, err2 := exec.LookPath("etcdctl")
	if err1 != nil || err2 != nil {
		return "", "", fmt.Errorf("%w on PATH", ErrNoEtcd)
	}
	return etcd, etcdctl, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// EtcdMember is the single member of a test's etcd cluster.
type EtcdMember struct {
	// Name is the member's name.
	Name string
	// DataDir is its data directory.
	DataDir string
	// ClientURL and PeerURL are the URLs it listens on and advertises
	// (http://127.0.0.1:PORT).
	ClientURL, PeerURL string
	// Token is the initial cluster token: with the name and the peer
	// URL, it makes the cluster ID.
	Token string
}

// Args returns etcd's arguments for the member: a new single-member
// cluster on DataDir (or the one a restore left there), with short raft
// ticks (a heartbeat every 10 ms, elections after 100 ms) so that it is
// ready within a fraction of a second, logging warnings and worse to its
// standard error.
func (m EtcdMember) Args() []string {
	return []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", m.Name + "=" + m.PeerURL,
		"--initial-cluster-token", m.Token,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"}
}

// RestoreArgs returns etcdctl's arguments that restore the snapshot file
// into DataDir as this member (etcdctl snapshot restore).
func (m EtcdMember) RestoreArgs(snapshot string) []string {
	return []string{"snapshot", "restore", snapshot, "--data-dir", m.DataDir, "--name", m.Name,
		"--initial-cluster", m.Name + "=" + m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster-token", m.Token}
}

// Etcdctl runs the etcdctl binary (API version 3) with args, within ctx,
// and returns its standard output. The error names the arguments, wraps
// the command's error and ctx's cause, and ends with etcdctl's standard
// error.
func Etcdctl(ctx context.Context, etcdctl string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, etcdctl, args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = fmt.Errorf("%v (%w)", err, cause)
		}
		return stdout.Bytes(), fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// EtcdListedMember is a member of an etcd cluster as EtcdHealthy lists it.
type EtcdListedMember struct {
	Name     string   `json:"name"`
	PeerURLs []string `json:"peerURLs"`
}

// etcdProbes is the probes' own client: not http.DefaultClient, whose
// transport a test binary may have replaced (the command's tests check
// every answer of theirs against the OpenAPI document).
var etcdProbes = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// EtcdHealthy asks the etcd at clientURL whether it is healthy (its
// /health answers true once the member has a leader and serves requests)
// and returns its members, for the caller to check that the etcd
// answering is its own: another server that took the port would answer
// too.
func EtcdHealthy(ctx context.Context, clientURL string) ([]EtcdListedMember, error) {
	var health struct {
		Health string `json:"health"`
	}
	if err := etcdProbe(ctx, http.MethodGet, clientURL+"/health", nil, &health); err != nil {
		return nil, err
	}
	if health.Health != "true" {
		return nil, fmt.Errorf("%s/health: %q", clientURL, health.Health)
	}
	var list struct {
		Members []EtcdListedMember `json:"members"`
	}
	if err := etcdProbe(ctx, http.MethodPost, clientURL+"/v3/cluster/member/list", []byte("{}"), &list); err != nil {
		return nil, fmt.Errorf("listing the members: %w", err)
	}
	return list.Members, nil
}

// etcdProbe sends a request to etcd and decodes its JSON answer into out.
func etcdProbe(ctx context.Context, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := etcdProbes.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}

// probeBound bounds one probe of WaitReady on idle cores.
const probeBound = 2 * time.Second

// WaitReady waits until the server p, just started by StartServer, is
// ready: it calls ready every poll until it returns nil, for at most
// bound on idle cores, stretched by the slowdown measured meanwhile
// (package internal/slowdown). Each call's context ends within 2 s,
// stretched likewise. Name names the server and what it waits for
// ("kubetest: etcd", "healthy") in errors. It returns an error if p
// exits first (wrapping ErrPortTaken if p said a port was taken), and
// stops p, with SIGKILL, if ready returns an error wrapping ErrPortTaken
// (another server answers on p's port) or bound passes first.
func WaitReady(p *ServerProcess, name, what string, bound, poll time.Duration, ready func(context.Context) error) error {
	meter, began := slowdown.Start(), time.Now()
	for {
		limit := meter.Stretch(bound)
		ctx, cancel := context.WithTimeout(context.Background(), max(min(limit-time.Since(began), meter.Stretch(probeBound)), time.Millisecond))
		err := ready(ctx)
		cancel()
		select {
		case <-p.Exited():
			// Exited: whatever answered was not p.
			if taken := p.PortTaken(); taken != nil {
				return fmt.Errorf("%s: %w", name, taken)
			}
			return fmt.Errorf("%s exited: %v\n%s", name, p.State(), tailOf(p.Output()))
		default:
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrPortTaken) {
			p.Stop(os.Kill, meter.Stretch(10*time.Second))
			return fmt.Errorf("%s: %w", name, err)
		}
		if time.Since(began) > limit {
			p.Stop(os.Kill, meter.Stretch(10*time.Second))
			return fmt.Errorf("%s not %s within %v (%v on idle cores; %s): %v\n%s",
				name, what, time.Since(began).Round(time.Millisecond), bound, meter, err, tailOf(p.Output()))
		}
		select {
		case <-p.Exited():
		case <-time.After(poll):
		}
	}
}

// tailOf returns the last 4 KB of a server's output.
func tailOf(out string) string {
	if len(out) > 4096 {
		out = out[len(out)-4096:]
	}
	return out
}
