package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The directory part of --issue-tokens-file is checked, against the real
// command: a directory link of another uid's refuses the start, and once
// serving, a swap of the link to another uid's (which would let that uid
// choose the tokens at each reload) is a failed reload, counted, that
// leaves the tokens in use: a token the other file lists stays refused.
func TestServeIssueTokensDirectoryLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a link of another uid needs root")
	}
	const otherUID = 65534
	dir := t.TempDir()
	for name, content := range map[string]string{
		"a": "alice " + aliceToken + "\n",
		"b": "alice " + aliceToken + "\nbob " + bobToken + "\n",
	} {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name, "tokens"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string, uid int) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(p, "tokens")
	}

	theirs := link("theirs", "b", otherUID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := runBinaryContext(t, ctx, "", secretEnv, "serve", "--listen", "127.0.0.1:0", "--nodes", "0-9", "--issue-tokens-file", theirs)
	if r.code != 1 || !strings.Contains(r.stderr, "belongs to uid 65534") {
		t.Errorf("--issue-tokens-file through a directory link of uid 65534: exit %d, %q; want exit 1 naming the link's owner", r.code, r.stderr)
	}

	ours := link("current", "a", os.Geteuid())
	p := startServe(t, "--nodes", "0-63", "--issue-tokens-file", ours)
	status := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", p.url+"/v1/ids", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := status(aliceToken), status(bobToken); a != 200 || b != 401 {
		t.Fatalf("before the swap: alice %d, bob %d; want 200 and 401", a, b)
	}
	// The other uid swaps the directory link (rename over it, as the
	// kubelet swaps ..data), to the file that lists bob.
	tmp := filepath.Join(dir, "current.new")
	if err := os.Symlink("b", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(tmp, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, p, p.url, `randflake_reload_failures_total{file="issue_tokens",reason="error"}`, 1)
	if a, b := status(aliceToken), status(bobToken); a != 200 || b != 401 {
		t.Errorf("after the swap to a link of uid 65534: alice %d, bob %d; want 200 and 401 (the tokens in use stay)", a, b)
	}
	if !strings.Contains(p.logs.String(), "belongs to uid 65534") {
		t.Errorf("the failed reload does not name the link's owner; logs:\n%s", p.logs.String())
	}
}
