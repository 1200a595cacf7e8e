package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

// TestRun runs the command twice on one fresh state directory, as a new
// user would, and checks that it prints the IDs asked for, that each line's
// fields are the ID's own (decoded again under the directory's secret),
// and that the second process, on the same node IDs, repeats no ID of the
// first.
func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	t.Setenv("RANDFLAKE_STATE_DIR", dir)
	seen := map[string]bool{}
	for run := 1; run <= 2; run++ {
		var stdout, stderr bytes.Buffer
		if code := run0(t, &stdout, &stderr, "-n", "300"); code != 0 {
			t.Fatalf("run %d: exit status %d, want 0; stderr:\n%s", run, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), dir) {
			t.Errorf("run %d: stderr does not name the state directory %s:\n%s", run, dir, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 301 {
			t.Fatalf("run %d: %d lines, want a header and 300 IDs:\n%s", run, len(lines), stdout.String())
		}
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) != 5 {
				t.Fatalf("run %d: line %q has %d fields, want 5", run, line, len(f))
			}
			id, err := randflake.DecodeString(f[0])
			if err != nil {
				t.Fatalf("run %d: line %q: %v", run, line, err)
			}
			if f[1] != strconv.FormatInt(id, 10) {
				t.Errorf("run %d: line %q: the int64 column is not the string's value %d", run, line, id)
			}
			ts, node, seq, err := inspector(t, dir).Inspect(id)
			if err != nil {
				t.Fatalf("run %d: line %q: %v", run, line, err)
			}
			want := []string{time.Unix(ts, 0).UTC().Format(time.RFC3339), strconv.FormatInt(node, 10), strconv.FormatInt(seq, 10)}
			if strings.Join(f[2:], " ") != strings.Join(want, " ") {
				t.Errorf("run %d: line %q: fields %q, the ID under the directory's secret holds %q", run, line, f[2:], want)
			}
			if seen[f[0]] {
				t.Errorf("run %d: ID %s printed twice", run, f[0])
			}
			seen[f[0]] = true
		}
	}
}

// TestUsage checks the usage errors' exit status.
func TestUsage(t *testing.T) {
	t.Setenv("RANDFLAKE_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	for _, args := range [][]string{{"-n", "-1"}, {"-n", "x"}, {"extra"}} {
		var stdout, stderr bytes.Buffer
		if code := run0(t, &stdout, &stderr, args...); code != 2 {
			t.Errorf("gen %q: exit status %d, want 2; stderr: %s", args, code, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("gen %q wrote to standard output: %q", args, stdout.String())
		}
	}
}

func run0(t *testing.T, stdout, stderr *bytes.Buffer, args ...string) int {
	t.Helper()
	return run(context.Background(), args, stdout, stderr)
}

// inspector reads IDs back under the state directory's secret.
func inspector(t *testing.T, dir string) randflake.Inspector {
	t.Helper()
	d, err := statedir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	in, err := randflake.NewInspector(d.Secret())
	if err != nil {
		t.Fatal(err)
	}
	return in
}
