package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kubeletVolume lays out dir as the kubelet lays out a Secret volume:
// the files in a hidden timestamped directory, ..data a link to it, and
// a link per key, key -> ..data/key; update replaces them the kubelet's
// way (a new directory, a new ..data link renamed over the old, the old
// directory removed). With fsGroup >= 0 the volume is given to that group
// as the kubelet does (group read on files, setgid directories, the
// volume's directory a sticky, setgid tmpfs root).
type kubeletVolume struct {
	t       *testing.T
	dir     string
	mode    os.FileMode
	fsGroup int
	version int
}

func newKubeletVolume(t *testing.T, dir string, mode os.FileMode, fsGroup int, files map[string]string) *kubeletVolume {
	t.Helper()
	v := &kubeletVolume{t: t, dir: dir, mode: mode, fsGroup: fsGroup}
	v.must(os.MkdirAll(dir, 0o755))
	if fsGroup >= 0 {
		v.must(os.Chown(dir, -1, fsGroup))
		v.must(os.Chmod(dir, 0o777|os.ModeSticky|os.ModeSetgid))
	}
	v.update(files)
	return v
}

func (v *kubeletVolume) must(err error) {
	v.t.Helper()
	if err != nil {
		v.t.Fatal(err)
	}
}

func (v *kubeletVolume) path(key string) string { return filepath.Join(v.dir, key) }

func (v *kubeletVolume) update(files map[string]string) {
	v.t.Helper()
	v.version++
	old, err := os.Readlink(v.path("..data"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		v.t.Fatal(err)
	}
	ts := fmt.Sprintf("..2026_12_01_10_00_00.%09d", v.version)
	v.must(os.Mkdir(v.path(ts), 0o755))
	v.must(os.Chmod(v.path(ts), 0o755))
	mode := v.mode
	if v.fsGroup >= 0 {
		v.must(os.Chown(v.path(ts), -1, v.fsGroup))
		v.must(os.Chmod(v.path(ts), 0o755|os.ModeSetgid))
		mode |= 0o040
	}
	for key, content := range files {
		p := filepath.Join(v.path(ts), key)
		v.must(os.WriteFile(p, []byte(content), mode))
		v.must(os.Chmod(p, mode))
		if v.fsGroup >= 0 {
			v.must(os.Chown(p, -1, v.fsGroup))
		}
		if _, err := os.Lstat(v.path(key)); errors.Is(err, os.ErrNotExist) {
			v.symlink("..data/"+key, v.path(key))
		}
	}
	v.symlink(ts, v.path("..data_tmp"))
	v.must(os.Rename(v.path("..data_tmp"), v.path("..data")))
	if old != "" {
		v.must(os.RemoveAll(v.path(old)))
	}
}

func (v *kubeletVolume) symlink(target, link string) {
	v.t.Helper()
	v.must(os.Symlink(target, link))
	if v.fsGroup >= 0 {
		v.must(os.Lchown(link, -1, v.fsGroup))
	}
}

const (
	volumeSecret  = "9e1d2c3b4a5968778695a4b3c2d1e0f1"
	inspectToken  = "inspection-token-from-a-volume-0123"
	aliceVolToken = "alice-token-from-a-volume-0123456789"
	bobVolToken   = "bob-token-from-a-volume-0123456789ab"
)

// podFiles is the Secret's keys, as `kubectl create secret generic
// randflake --from-file=secret=secret.hex ...` makes them.
func podFiles(issuer, token string) map[string]string {
	return map[string]string{
		"secret":        volumeSecret + "\n",
		"inspect-token": inspectToken + "\n",
		"issue-tokens":  issuer + " " + token + "\n",
	}
}

// podEnv is docs/operations.md's pod specification (the StatefulSet's
// pod 0, its secret from a Secret volume), on a loopback port, with the
// volume's inspection and issue tokens.
func podEnv(v *kubeletVolume, state string) []string {
	return []string{
		"RANDFLAKE_NODE_SOURCE=statefulset",
		"RANDFLAKE_ORDINAL=0",
		"RANDFLAKE_SECRET_FILE=" + v.path("secret"),
		"RANDFLAKE_SECRET=",
		"RANDFLAKE_STATE_DIR=" + state,
		"RANDFLAKE_INSPECT_TOKEN_FILE=" + v.path("inspect-token"),
		"RANDFLAKE_ISSUE_TOKENS_FILE=" + v.path("issue-tokens"),
	}
}

// getWithToken asks url with a bearer token and returns the status.
func getWithToken(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// checkPod checks a serve started from a Secret volume: IDs need the
// volume's issue token, are on pod 0's node IDs under the volume's
// secret, and inspection takes the volume's inspection token.
func checkPod(t *testing.T, p *serveProcess, token string) {
	t.Helper()
	if code := getWithToken(t, p.url+"/v1/ids?count=2", "not-"+token); code != 401 {
		t.Errorf("a wrong issue token: status %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", p.url+"/v1/ids?format=int&count=200", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ IDs []string }
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	ids := got.IDs
	if resp.StatusCode != 200 || err != nil || len(ids) != 200 {
		t.Fatalf("IDs with the volume's issue token: status %d, %v, %d IDs", resp.StatusCode, err, len(ids))
	}
	checkUnique(t, ids, 200, nil)
	// Under the volume's secret every ID is pod 0's (node IDs 0-1023);
	// under another secret they would scatter over all 131,072.
	env := []string{"RANDFLAKE_SECRET=" + volumeSecret, "RANDFLAKE_SECRET_FILE="}
	for node, n := range nodesOf(t, env, ids) {
		if node < 0 || node > 1023 {
			t.Errorf("%d IDs on node %d under the volume's secret, want pod 0's node IDs 0-1023", n, node)
		}
	}
	if code := getWithToken(t, p.url+"/v1/ids/"+ids[0], inspectToken); code != 200 {
		t.Errorf("inspection with the volume's inspection token: status %d", code)
	}
	if strings.Contains(p.logs.String(), volumeSecret) || strings.Contains(p.logs.String(), token) {
		t.Errorf("the logs show the secret or a token:\n%s", p.logs.String())
	}
}

// docs/operations.md's pod specification works: serve reads the fleet
// secret, the inspection token and the issue tokens from a Secret volume
// laid out as the kubelet does (links into ..data, mode 0400, owned by the
// process's user or root), and after the kubelet's atomic update a SIGHUP
// brings in the new issue tokens.
func TestServeSecretVolume(t *testing.T) {
	t.Parallel()
	v := newKubeletVolume(t, filepath.Join(t.TempDir(), "etc-randflake"), 0o400, -1, podFiles("alice", aliceVolToken))
	p := startServeEnv(t, podEnv(v, t.TempDir()))
	checkPod(t, p, aliceVolToken)

	v.update(podFiles("bob", bobVolToken))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, regexp.MustCompile(`issue tokens reloaded`), 10*time.Second)
	if code := getWithToken(t, p.url+"/v1/ids?count=2", bobVolToken); code != 200 {
		t.Errorf("the updated volume's token after SIGHUP: status %d, want 200", code)
	}
	if code := getWithToken(t, p.url+"/v1/ids?count=2", aliceVolToken); code != 401 {
		t.Errorf("the replaced token after SIGHUP: status %d, want 401", code)
	}
	stop(t, p)

	// The kubelet's default mode, 0644, leaves the secret readable by all:
	// refused, with the fix.
	open := newKubeletVolume(t, filepath.Join(t.TempDir(), "etc-randflake"), 0o644, -1, podFiles("alice", aliceVolToken))
	r := runBinaryTimeout(t, 20*time.Second, podEnv(open, t.TempDir()), "serve", "--listen", "127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, open.dir+"/") || !strings.Contains(r.stderr, "defaultMode: 0400, or 0440 with the pod's fsGroup") {
		t.Errorf("a world-readable Secret volume: exit %d, stderr %q; want a refusal naming its file, with the fix", r.code, r.stderr)
	}
	// gen reads the secret alone.
	r = runBinaryTimeout(t, 20*time.Second, podEnv(open, t.TempDir()), "gen", "-n", "1")
	if r.code != 1 || !strings.Contains(r.stderr, open.path("secret")+" is accessible to group or others (mode -rw-r--r--): chmod 600 it") || !strings.Contains(r.stderr, "defaultMode: 0400, or 0440 with the pod's fsGroup") {
		t.Errorf("a world-readable secret in a Secret volume: exit %d, stderr %q; want a refusal naming it, with the fix", r.code, r.stderr)
	}
	// A link out of the volume is refused.
	out := newKubeletVolume(t, filepath.Join(t.TempDir(), "etc-randflake"), 0o400, -1, podFiles("alice", aliceVolToken))
	elsewhere := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(elsewhere, []byte(volumeSecret+"\n"), 0o600)
	os.Remove(out.path("secret"))
	os.Symlink(elsewhere, out.path("secret"))
	r = runBinaryTimeout(t, 20*time.Second, podEnv(out, t.TempDir()), "gen", "-n", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "leads to "+elsewhere+", outside "+out.dir) {
		t.Errorf("a link out of the volume: exit %d, stderr %q", r.code, r.stderr)
	}
}

// The pod as Kubernetes runs it (runAsUser 65532, runAsGroup 65532,
// fsGroup 65532; the Secret volume root's, group 65532, mode 0440 from
// defaultMode 0400): the real binary, run as that user, starts and
// serves. Without fsGroup (root's files, mode 0400) it cannot read the
// secret and says to set fsGroup. This needs root, to give files to root
// and run the binary as another user: CI runs as root.
func TestServeSecretVolumeAsPodUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("this test needs root (to run the binary as the pod's user), and CI runs as root")
		}
		t.Skip("needs root to run the binary as the pod's user")
	}
	const pod = 65532
	dir, err := os.MkdirTemp("", "randflake-pod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The image's binary, where the pod's user can run it.
	bin := filepath.Join(dir, "randflake")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o700)
	os.Chown(state, pod, pod)
	asPod := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"HOME=" + state}, env...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: pod, Gid: pod, Groups: []uint32{pod}}}
		return cmd
	}

	v := newKubeletVolume(t, filepath.Join(dir, "etc-randflake"), 0o400, pod, podFiles("alice", aliceVolToken))
	if fi, err := os.Stat(v.path("secret")); err != nil || fi.Mode().Perm() != 0o440 || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Sys().(*syscall.Stat_t).Gid != pod {
		t.Fatalf("the volume's secret: %v, %v; want root's, group %d, mode 0440", fi, err, pod)
	}
	p := startProcess(t, asPod(podEnv(v, state), "serve", "--listen", "127.0.0.1:0"))
	logs := p.logs
	limit := within(startupTimeout)
	for deadline := time.Now().Add(limit); p.url == ""; time.Sleep(20 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil {
			p.url = "http://" + m[1] + m[2]
			break
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("serve as uid %d exited (%v) before serving:\n%s", pod, err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve as uid %d not serving after %v (%s):\n%s", pod, limit, slowness(), logs.String())
		}
	}
	checkPod(t, p, aliceVolToken)
	stop(t, p)

	// Without fsGroup, as the docs' old pod specification had it: the
	// secret is root's and mode 0400, which the pod's user cannot read.
	bare := newKubeletVolume(t, filepath.Join(dir, "no-fsgroup"), 0o400, -1, podFiles("alice", aliceVolToken))
	cmd := asPod(podEnv(bare, state), "gen", "-n", "1")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "set the pod's fsGroup and defaultMode: 0440") {
		t.Errorf("without fsGroup: exit %d (%v), output %q; want a refusal saying to set fsGroup", code, err, out)
	}
	// The pod's own file, group-readable: refused (only root's may be).
	own := newKubeletVolume(t, filepath.Join(dir, "own"), 0o400, pod, podFiles("alice", aliceVolToken))
	target, _ := filepath.EvalSymlinks(own.path("secret"))
	os.Chown(target, pod, -1)
	cmd = asPod(podEnv(own, state), "gen", "-n", "1")
	out, _ = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "a secret may be readable by its group only when root owns it") {
		t.Errorf("the pod user's own group-readable secret: exit %d, output %q", code, out)
	}
}

// The fleet secret is a key: RANDFLAKE_SECRET is exactly 32 hexadecimal
// digits, a secret file 32 digits and one newline or 16 raw bytes that
// are not text. A password, 16 spaces or half a hexadecimal secret is
// refused with the fix, and never shown.
func TestSecretsAreKeys(t *testing.T) {
	state := "RANDFLAKE_STATE_DIR=" + t.TempDir()
	for _, c := range []struct{ name, value, say string }{
		{"a password", "passwordpassword", "16 characters are a password, not a key"},
		{"16 spaces", strings.Repeat(" ", 16), "16 characters are a password, not a key"},
		{"half a hexadecimal secret", "0011223344556677", "16 characters are a password, not a key"},
		{"a trailing newline", testSecretHex + "\n", "with white space around them: remove it"},
		{"33 digits", testSecretHex + "0", "found 33 characters"},
	} {
		for _, args := range [][]string{{"gen", "--nodes", "1"}, {"inspect", "3vgoe12ccb8gh"}} {
			r := runBinaryTimeout(t, 20*time.Second, []string{"RANDFLAKE_SECRET=" + c.value, "RANDFLAKE_SECRET_FILE=", state}, args...)
			if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "$RANDFLAKE_SECRET: statedir: secret: want exactly 32 hexadecimal digits") ||
				!strings.Contains(r.stderr, c.say) || !strings.Contains(r.stderr, "randflake keygen --out FILE") {
				t.Errorf("$RANDFLAKE_SECRET %s, %v: exit %d, stdout %q, stderr %q; want a refusal saying %q and the fix", c.name, args, r.code, r.stdout, r.stderr, c.say)
			}
			if v := strings.TrimSpace(c.value); v != "" && strings.Contains(r.stderr, v) {
				t.Errorf("$RANDFLAKE_SECRET %s: the error shows it: %q", c.name, r.stderr)
			}
		}
	}
	dir := t.TempDir()
	for _, c := range []struct{ name, content, say string }{
		{"a password", "passwordpassword", "16 characters of text, a password rather than a key"},
		{"a password and a newline", "passwordpasswor\n", "16 characters of text, a password rather than a key"},
		{"16 spaces", strings.Repeat(" ", 16), "16 characters of text, a password rather than a key"},
		{"half a hexadecimal secret", "0011223344556677", "16 characters of text, a password rather than a key"},
		{"blanks before the digits", "  " + testSecretHex + "\n", "found 35 bytes"},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		os.WriteFile(f, []byte(c.content), 0o600)
		r := runBinaryTimeout(t, 20*time.Second, []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + f, state}, "gen", "--nodes", "1")
		if r.code != 1 || !strings.Contains(r.stderr, f) || !strings.Contains(r.stderr, c.say) || !strings.Contains(r.stderr, "randflake keygen --out FILE") {
			t.Errorf("a secret file holding %s: exit %d, stderr %q; want a refusal naming it, saying %q and the fix", c.name, r.code, r.stderr, c.say)
		}
		if v := strings.TrimSpace(c.content); v != "" && strings.Contains(r.stderr, v) {
			t.Errorf("a secret file holding %s: the error shows it: %q", c.name, r.stderr)
		}
	}

	// Accepted forms, all the same key: IDs made under one decode under
	// the others to the node they were made on.
	raw, _ := hex.DecodeString(testSecretHex) // bytes 0-15: not text
	forms := map[string][]string{
		"upper-case digits":  {"RANDFLAKE_SECRET=" + strings.ToUpper(testSecretHex), "RANDFLAKE_SECRET_FILE="},
		"a file, LF":         {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + writeSecret(t, dir, "lf", testSecretHex+"\n")},
		"a file, CRLF":       {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + writeSecret(t, dir, "crlf", strings.ToUpper(testSecretHex)+"\r\n")},
		"a file, no newline": {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + writeSecret(t, dir, "bare", testSecretHex)},
		"a file, raw bytes":  {"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=" + writeSecret(t, dir, "raw", string(raw))},
	}
	gen := runBinary(t, "", secretEnv, "gen", "-n", "20", "--format", "int", "--nodes", "77")
	ids := strings.Fields(gen.stdout)
	if gen.code != 0 || len(ids) != 20 {
		t.Fatalf("gen: exit %d, %q", gen.code, gen.stderr)
	}
	for name, env := range forms {
		nodes := nodesOf(t, append(env, state), ids)
		if nodes[77] != 20 {
			t.Errorf("the secret as %s: the IDs decode to nodes %v, want all 20 on node 77", name, nodes)
		}
	}
}

func writeSecret(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
