package main

import (
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/internal/slowdown"
)

// leaseStatus is lease status --format json, decoded.
type leaseStatus struct {
	Store    string    `json:"store"`
	Read     time.Time `json:"read"`
	Takeover float64   `json:"takeover_wait_seconds"`
	Marker   struct {
		State      string `json:"state"`
		FleetKeyID string `json:"fleet_key_id"`
		OwnKeyID   string `json:"own_key_id"`
		Horizon    int64  `json:"horizon_seconds"`
		Detect     int64  `json:"detection_bound_seconds"`
		DigestOK   bool   `json:"digest_ok"`
	} `json:"marker"`
	Blocks []struct {
		First  int64  `json:"first"`
		Last   int64  `json:"last"`
		Held   bool   `json:"held"`
		Record string `json:"record"`
		Until  int64  `json:"until"`
		Free   int64  `json:"free_from"`
	} `json:"blocks"`
}

func statusJSONOf(t *testing.T, env []string, args ...string) leaseStatus {
	t.Helper()
	r := runBinary(t, "", env, append([]string{"lease", "status", "--format", "json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("lease status --format json %v: exit %d, stderr %q", args, r.code, r.stderr)
	}
	var st leaseStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("lease status --format json %v: %v\n%s", args, err, r.stdout)
	}
	return st
}

// treeHash hashes every file's path, mode and contents under dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Write([]byte(p + info.Mode().String()))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

// lease status on a state directory: refused where there is none (and
// none created), then the marker and the block gen used, in a table and
// as JSON, with nothing written.
func TestLeaseStatusStateDir(t *testing.T) {
	t.Parallel()
	dir, env := ownStateEnv(t)
	missing := filepath.Join(dir, "none")
	r := runBinary(t, "", []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + missing}, "lease", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "no state directory at "+missing) {
		t.Errorf("lease status without a state directory: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("lease status created the state directory %s (%v)", missing, err)
	}
	if r := runBinary(t, "", env, "gen", "-n", "3"); r.code != 0 {
		t.Fatalf("gen: exit %d, %s", r.code, r.stderr)
	}
	before := treeHash(t, dir)
	r = runBinary(t, "", env, "lease", "status")
	if r.code != 0 {
		t.Fatalf("lease status: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"store:    state directory " + dir, "marker:   ok, fleet key ID ", "records match", "NODES", "0-63 ", " ok ", "64-131071 (2047 blocks)", "0 of 2048 blocks held"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lease status: no %q in\n%s", want, r.stdout)
		}
	}
	st := statusJSONOf(t, env)
	if st.Marker.State != "ok" || !st.Marker.DigestOK || st.Marker.FleetKeyID != st.Marker.OwnKeyID || len(st.Marker.OwnKeyID) != 16 {
		t.Errorf("lease status --format json: marker %+v, want ok under this fleet's key", st.Marker)
	}
	if len(st.Blocks) != 2048 || st.Blocks[0].Record != "ok" || st.Blocks[0].Held || st.Blocks[1].Record != "none" {
		t.Errorf("lease status --format json: %d blocks, first two %+v, want 2048, gen's block 0-63 ok and released", len(st.Blocks), st.Blocks[:min(2, len(st.Blocks))])
	}
	if after := treeHash(t, dir); after != before {
		t.Error("lease status changed the state directory")
	}
	if r := runBinary(t, "", env, "lease", "status", "--format", "yaml"); r.code != 2 || !strings.Contains(r.stderr, "--format must be text or json") {
		t.Errorf("lease status --format yaml: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBinary(t, "", env, "lease", "status", "--nodes", "0-15"); r.code != 1 || !strings.Contains(r.stderr, "records nothing") {
		t.Errorf("lease status on a static range: exit %d, stderr %q", r.code, r.stderr)
	}
}

// lease status on etcd: a running serve's claim is held, the marker is
// this fleet's; read under another fleet's secret the marker shows as
// another fleet's, and the holder keeps its block.
func TestLeaseStatusEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out unknown history on a new etcd prefix (9 s): not in -short")
	}
	t.Parallel()
	endpoint := startEtcd(t)
	args := []string{"--etcd", endpoint, "--claim", "4", "--etcd-ttl", "3s", "--etcd-horizon", "9s"}
	p := startServe(t, args...)
	fetch(t, p, 10)
	st := statusJSONOf(t, secretEnv, args...)
	held := 0
	// A claim now waits the takeover (rule 14): etcd's claims lapse.
	if st.Takeover <= 0 || st.Marker.Detect <= 0 {
		t.Errorf("lease status on etcd: takeover wait %vs, the marker's detection bound %ds; want both above 0", st.Takeover, st.Marker.Detect)
	}
	earliest := st.Read.Unix() + int64(st.Takeover) + 1
	for _, b := range st.Blocks {
		if b.Held {
			held++
			if b.Record != "ok" || b.Until == 0 {
				t.Errorf("the held block %+v: want its record ok, with its promise", b)
			}
		} else if b.Free < earliest {
			t.Errorf("the free block %+v: free from %d, before the takeover wait of %vs from the read at %d", b, b.Free, st.Takeover, st.Read.Unix())
		}
	}
	if held != 1 || st.Marker.State != "ok" || st.Marker.FleetKeyID != st.Marker.OwnKeyID || !strings.HasPrefix(st.Store, "etcd ") {
		t.Errorf("lease status on etcd with one serve: %d blocks held, marker %+v, store %q; want 1, ok, this fleet's", held, st.Marker, st.Store)
	}
	if text := runBinary(t, "", secretEnv, append([]string{"lease", "status"}, args...)...); text.code != 0 || !strings.Contains(text.stdout, "a takeover ") {
		t.Errorf("lease status on etcd (text): exit %d, no takeover wait in\n%s%s", text.code, text.stdout, text.stderr)
	} else {
		t.Logf("lease status on etcd with one serve:\n%s", text.stdout)
	}
	other := []string{"RANDFLAKE_SECRET=" + strings.Repeat("ab", 16), "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir()}
	st2 := statusJSONOf(t, other, args...)
	if st2.Marker.State != "another fleet" || st2.Marker.FleetKeyID != st.Marker.OwnKeyID || st2.Marker.OwnKeyID == st.Marker.OwnKeyID {
		t.Errorf("lease status under another secret: marker %+v, want another fleet's (key ID %s)", st2.Marker, st.Marker.OwnKeyID)
	}
	// serve under the other secret is refused and writes nothing: the
	// fleet's marker is unchanged and its holder keeps issuing.
	r := runBinaryTimeout(t, slowdown.Stretch(60*time.Second), other, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "another fleet's secret") {
		t.Errorf("serve under another fleet's secret: exit %d, stderr %q; want exit 1 naming another fleet's secret", r.code, r.stderr)
	}
	st3 := statusJSONOf(t, secretEnv, args...)
	if st3.Marker != st.Marker {
		t.Errorf("after serve under another secret the marker reads %+v, was %+v", st3.Marker, st.Marker)
	}
	fetch(t, p, 10)
	stop(t, p)
}
