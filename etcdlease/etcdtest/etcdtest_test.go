package etcdtest_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/etcdlease/etcdtest"
)

// header is the part of etcdctl's JSON answers the tests read.
type header struct {
	Header struct {
		ClusterID uint64 `json:"cluster_id"`
		Revision  int64  `json:"revision"`
	} `json:"header"`
	Kvs []struct {
		Key []byte `json:"key"`
	} `json:"kvs"`
}

// get reads key with etcdctl and returns the response header and whether
// the key exists.
func get(t *testing.T, s *etcdtest.Server, key string) (h header, found bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := s.Ctl(ctx, "get", key, "-w", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("etcdctl get %s: %v in %q", key, err, out)
	}
	return h, len(h.Kvs) == 1
}

func put(t *testing.T, s *etcdtest.Server, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := s.Ctl(ctx, "put", key, value); err != nil {
		t.Fatal(err)
	}
}

// A server serves once started, refuses when stopped or killed, serves its
// data again on the same endpoint after a restart, and Close removes its
// directory.
func TestServer(t *testing.T) {
	t.Parallel()
	s := etcdtest.New(t)
	put(t, s, "/kept", "1")
	if _, ok := get(t, s, "/kept"); !ok {
		t.Fatal("/kept not found right after the put")
	}
	pid := s.PID()
	if pid == 0 || !s.Running() {
		t.Fatal("no process for a started server")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if s.Running() || s.PID() != 0 {
		t.Fatal("the server runs after Stop")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := s.Ctl(ctx, "get", "/kept"); err == nil {
		t.Fatal("etcdctl reached a stopped server")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	if _, ok := get(t, s, "/kept"); !ok {
		t.Fatal("/kept lost across a restart")
	}
	put(t, s, "/after-kill", "1")
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, s, "/after-kill"); !ok {
		t.Fatal("an acknowledged write lost across SIGKILL")
	}
	dir := s.Dir()
	s.Close()
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s after Close: %v", dir, err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a closed server succeeded")
	}
}

// A restore brings back the snapshot's keys and revision on a new data
// directory: under the same cluster token, with the same cluster ID; under
// another token, with another.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	s := etcdtest.New(t)
	put(t, s, "/before", "1")
	snap := filepath.Join(t.TempDir(), "snap.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	put(t, s, "/after", "1")
	put(t, s, "/after", "2")
	h0, _ := get(t, s, "/after")
	data0 := s.DataDir()

	if err := s.Restore(ctx, snap, etcdtest.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	h1, after := get(t, s, "/after")
	if _, before := get(t, s, "/before"); !before || after {
		t.Errorf("after the restore: /before found %v, /after found %v; want true, false", before, after)
	}
	if h1.Header.ClusterID != h0.Header.ClusterID || h1.Header.Revision >= h0.Header.Revision {
		t.Errorf("restore under the same token: cluster %x revision %d, before %x revision %d; want the same cluster, an older revision",
			h1.Header.ClusterID, h1.Header.Revision, h0.Header.ClusterID, h0.Header.Revision)
	}
	if s.DataDir() == data0 {
		t.Error("the restore reused the data directory")
	}

	if err := s.Restore(ctx, snap, etcdtest.RestoreOptions{ClusterToken: "another"}); err != nil {
		t.Fatal(err)
	}
	h2, _ := get(t, s, "/before")
	if h2.Header.ClusterID == h0.Header.ClusterID || s.ClusterToken() != "another" {
		t.Errorf("restore under another token: cluster %x (token %q), before %x; want another cluster", h2.Header.ClusterID, s.ClusterToken(), h0.Header.ClusterID)
	}
	// A restart keeps the restored data.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, s, "/before"); !ok {
		t.Error("the restored data lost across a restart")
	}
}

// Find names both binaries, or says how to install them.
func TestFind(t *testing.T) {
	t.Setenv(etcdtest.BinEnv, t.TempDir())
	if _, _, err := etcdtest.Find(); err == nil || !strings.Contains(err.Error(), "etcd-server") {
		t.Errorf("Find in an empty directory: %v", err)
	}
}
