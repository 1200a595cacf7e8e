package main

import (
	"bytes"
	binenc "encoding/binary" // "binary" is the e2e tests' built command
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		stop bool
		want string // the arguments left, then the flags: n json
		err  string
	}{
		{args: []string{"-5", "--json", "a"}, want: "-5 a | 1 true"},
		{args: []string{"-n", "-5", "x"}, want: "x | -5 false"},
		{args: []string{"a", "-n=7", "--json=false", "b"}, want: "a b | 7 false"},
		{args: []string{"--", "-n", "--json"}, want: "-n --json | 1 false"},
		{args: []string{"-", "--n", "3"}, want: "- | 3 false"},
		{args: []string{"a", "-n", "3"}, stop: true, want: "a -n 3 | 1 false"},
		{args: []string{"-n"}, err: "flag needs an argument: -n"},
		{args: []string{"-x"}, err: "flag provided but not defined: -x"},
		{args: []string{"-n", "abc"}, err: `invalid value "abc" for flag -n: parse error`},
		{args: []string{"-h"}, err: flag.ErrHelp.Error()},
		{args: []string{"a", "--help"}, err: flag.ErrHelp.Error()},
	} {
		fs := newFlags("test")
		n := fs.Int("n", 1, "")
		j := fs.Bool("json", false, "")
		rest, err := parseFlags(fs, c.args, c.stop)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: error %v, want %s", c.args, err, c.err)
			}
			continue
		}
		got := strings.Join(rest, " ") + " | " + strconv.Itoa(*n) + " " + strconv.FormatBool(*j)
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.args, got, err, c.want)
		}
	}
}

func TestGenClaim(t *testing.T) {
	for _, c := range []struct{ n, def, want int64 }{
		{0, 64, 64}, {1, 64, 64}, {64 << 17, 64, 64}, {64<<17 + 1, 64, 128},
		{10_000_000, 64, 128}, {1 << 40, 64, genMaxClaim}, {1, 16, 64}, {1 << 40, 2048, 2048},
	} {
		if got := genClaim(c.n, c.def); got != c.want {
			t.Errorf("genClaim(%d, %d) = %d, want %d", c.n, c.def, got, c.want)
		}
	}
}

// runInProcess runs the command in-process with goldenEnv and the golden
// clock; terminal says whether its files are terminals.
func runInProcess(t *testing.T, terminal bool, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	t.Setenv("RANDFLAKE_STATE_DIR", t.TempDir())
	var out, errb bytes.Buffer
	e := &env{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv:     func(k string) string { return goldenEnv[k] },
		isTerminal: func(any) bool { return terminal },
		now:        func() time.Time { return goldenClock },
	}
	code = run(e, args)
	return out.String(), errb.String(), code
}

// gen --format binary writes the IDs of --format int, 8 bytes each,
// big-endian, and nothing else.
func TestGenBinaryDecodes(t *testing.T) {
	const n = 20000
	bin, errs, code := runInProcess(t, false, "gen", "-n", strconv.Itoa(n), "--format", "binary", "--nodes", "7")
	if code != 0 || errs != "" || len(bin) != 8*n {
		t.Fatalf("binary: exit %d, %d bytes, stderr %q; want 0 and %d bytes", code, len(bin), errs, 8*n)
	}
	text, _, code := runInProcess(t, false, "gen", "-n", strconv.Itoa(n), "--format", "int", "--nodes", "7")
	lines := strings.Fields(text)
	if code != 0 || len(lines) != n {
		t.Fatalf("int: exit %d, %d lines", code, len(lines))
	}
	seen := make(map[int64]bool, n)
	for i, line := range lines {
		id := int64(binenc.BigEndian.Uint64([]byte(bin[8*i:])))
		if want, _ := strconv.ParseInt(line, 10, 64); id != want {
			t.Fatalf("ID %d: binary %d, int %s", i, id, line)
		}
		if seen[id] {
			t.Fatalf("ID %d twice", id)
		}
		seen[id] = true
	}
	if got := strconv.FormatInt(int64(binenc.BigEndian.Uint64([]byte(bin))), 10); got != goldenDecimals[0] {
		t.Errorf("first ID %s, want the golden %s", got, goldenDecimals[0])
	}
}

func TestGenProgress(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 0
	out, errs, code := runInProcess(t, true, "gen", "-n", "3", "--nodes", "7")
	if code != 0 || strings.Fields(out)[0] != goldenIDs[0] || errs != "\r3 of 3 IDs (100%)\n" {
		t.Errorf("on a terminal: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, errs, _ := runInProcess(t, false, "gen", "-n", "3", "--nodes", "7"); errs != "" {
		t.Errorf("not on a terminal: stderr %q", errs)
	}
	progressEvery = time.Hour // a short run says nothing
	if _, errs, _ := runInProcess(t, true, "gen", "-n", "3", "--nodes", "7"); errs != "" {
		t.Errorf("short run: stderr %q", errs)
	}
}

func TestWriteVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/randflake/randflake/cmd/randflake", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-08-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		},
	}
	var b strings.Builder
	writeVersion(&b, "", bi)
	want := "randflake (devel)\n" +
		"module    github.com/randflake/randflake/cmd/randflake (devel)\n" +
		"revision  0123456789abcdef 2026-08-01T12:00:00Z (modified)\n" +
		"go        go1.26.0 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := b.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "kernel    "+randflake.Kernel()) {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	b.Reset()
	bi.Main.Version, bi.Settings = "v0.2.0", nil
	writeVersion(&b, "", bi)
	if got := b.String(); !strings.HasPrefix(got, "randflake v0.2.0\n") || !strings.Contains(got, "revision  unknown") {
		t.Errorf("installed at v0.2.0:\n%s", got)
	}
	if got := b.String(); strings.Contains(got, "not built in a VCS checkout") || !strings.Contains(got, "the build recorded no VCS information: built outside a VCS checkout, with -buildvcs=false, or by go run or go test") {
		t.Errorf("without VCS information, the reason should list what may have happened:\n%s", got)
	}
	b.Reset()
	bi.Main.Version = "v0.2.1-0.20260801120000-0123456789ab"
	writeVersion(&b, "", bi)
	if got := b.String(); !strings.Contains(got, "revision  0123456789ab (the commit prefix in the module's pseudo-version; the build recorded no VCS information)\n") {
		t.Errorf("a pseudo-version names its commit:\n%s", got)
	}
	for v, want := range map[string]string{
		"v0.0.0-20260801120000-0123456789ab":              "0123456789ab",
		"v1.2.4-pre.0.20260801120000-abcdefabcdef":        "abcdefabcdef",
		"v2.0.0-20260801120000-0123456789ab+incompatible": "0123456789ab",
		"v0.2.0": "", "(devel)": "", "v1.0.0-rc.1": "", "v0.0.0-2026-0123456789ab": "",
	} {
		if got := pseudoRevision(v); got != want {
			t.Errorf("pseudoRevision(%q) = %q, want %q", v, got, want)
		}
	}
	b.Reset()
	bi.Main.Version = "v0.2.0"
	writeVersion(&b, "v0.3.0", bi)
	if got := b.String(); !strings.HasPrefix(got, "randflake v0.3.0\n") {
		t.Errorf("stamped v0.3.0:\n%s", got)
	}
	b.Reset()
	writeVersion(&b, "", nil)
	if got := b.String(); !strings.HasPrefix(got, "randflake (devel)\n") {
		t.Errorf("without build information:\n%s", got)
	}
}

// completionWords lists every subcommand and flag, from the command table.
func completionWords() []string {
	var words []string
	var walk func(table []command, prefix string)
	walk = func(table []command, prefix string) {
		for _, c := range table {
			words = append(words, c.name)
			fs := newFlags(prefix + c.name)
			sc := c.new()
			sc.flags(fs)
			fs.VisitAll(func(f *flag.Flag) { words = append(words, compFlag{name: f.Name}.spelling()) })
			if p, ok := sc.(parent); ok {
				walk(p.subcommands(), prefix+c.name+" ")
			}
		}
	}
	walk(commands(), "")
	return words
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			out, errs, code := runInProcess(t, false, "completion", shell)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			for _, w := range append(completionWords(), "--help", "--version") {
				if !strings.Contains(out, " "+w) && !strings.Contains(out, "'"+w) {
					t.Errorf("%s is missing from the script", w)
				}
			}
			for _, w := range []string{"serve", "--listen", "--etcd-ttl", "-n", "--layout", "--quick", "--secret-file"} {
				if !strings.Contains(out, w) {
					t.Errorf("%s is missing from the script", w)
				}
			}
			sh, err := exec.LookPath(shell)
			if err != nil {
				t.Skipf("%s is not installed: the text is checked only", shell)
			}
			script := filepath.Join(t.TempDir(), "script")
			if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(sh, "-n", script).CombinedOutput(); err != nil {
				t.Fatalf("%s -n: %v\n%s", shell, err, b)
			}
			if shell != "bash" {
				return
			}
			// What bash offers for partial command lines.
			for _, c := range []struct{ line, want string }{
				{"randflake ge", "gen"},
				{"randflake gen --for", "--format"},
				{"randflake uniqueid ", "gen parse --help"},
				{"randflake uniqueid gen --la", "--layout"},
				{"randflake uniqueid parse -", "--help"},
				{"randflake inspect --js", "--json"},
				{"randflake completion ", "bash zsh --help"},
				{"randflake gen --secret-file ", ""},
				{"randflake --ver", "--version"},
			} {
				words := strings.Split(c.line, " ")
				prog := "source " + script + "; COMP_WORDS=(" + strings.Join(quoteAll(words), " ") + "); COMP_CWORD=" +
					strconv.Itoa(len(words)-1) + `; _randflake; echo "${COMPREPLY[*]}"`
				b, err := exec.Command(sh, "-c", prog).CombinedOutput()
				if got := strings.TrimSpace(string(b)); err != nil || got != c.want {
					t.Errorf("%q: %q (%v), want %q", c.line, got, err, c.want)
				}
			}
		})
	}
}

func quoteAll(words []string) []string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return q
}

func TestVersionBinary(t *testing.T) {
	t.Parallel()
	r := runBinary(t, "", nil, "version")
	first, _, _ := strings.Cut(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(first, "randflake ") || !strings.Contains(r.stdout, runtime.Version()) || !strings.Contains(r.stdout, "kernel    "+randflake.Kernel()) {
		t.Fatalf("version: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r2 := runBinary(t, "", nil, "--version"); r2.stdout != r.stdout || r2.code != 0 {
		t.Fatalf("--version: %q, version: %q", r2.stdout, r.stdout)
	}
	// A release build stamps its version with -X main.version.
	stamped := filepath.Join(t.TempDir(), "randflake")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v0.2.0", "-o", stamped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(stamped, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "randflake v0.2.0\n") {
		t.Fatalf("stamped build: %q, %v", out, err)
	}
}

func TestPipes(t *testing.T) {
	t.Parallel()
	// gen --format json | inspect
	gen := runBinary(t, "", secretEnv, "gen", "-n", "50", "--format", "json", "--nodes", "5")
	ins := runBinary(t, gen.stdout, secretEnv, "inspect", "--json")
	if gen.code != 0 || ins.code != 0 || strings.Count(ins.stdout, `"node":5,`) != 50 {
		t.Fatalf("gen --format json | inspect: %d %d %q %q", gen.code, ins.code, ins.stdout, ins.stderr)
	}
	if !strings.Contains(ins.stderr, "$RANDFLAKE_SECRET") || !strings.Contains(ins.stderr, "meaningless") || strings.Contains(ins.stderr, testSecretHex) {
		t.Fatalf("inspect's note on the secret: %q", ins.stderr)
	}
	// Negative decimals on the command line, flags after them.
	gen = runBinary(t, "", secretEnv, "gen", "-n", "200", "--format", "int", "--nodes", "5")
	var negative []string
	for _, f := range strings.Fields(gen.stdout) {
		if strings.HasPrefix(f, "-") {
			negative = append(negative, f)
		}
	}
	if len(negative) == 0 {
		t.Fatal("no negative IDs among 200")
	}
	ins = runBinary(t, "", secretEnv, append(append([]string{"inspect"}, negative...), "--json")...)
	if ins.code != 0 || strings.Count(ins.stdout, `"node":5,`) != len(negative) {
		t.Fatalf("inspect NEGATIVE... --json: %d %q %q", ins.code, ins.stdout, ins.stderr)
	}
	// uniqueid gen | uniqueid parse
	toks := runBinary(t, "", nil, "uniqueid", "gen", "-n", "4")
	p := runBinary(t, toks.stdout, nil, "uniqueid", "parse")
	if p.code != 0 || strings.Count(p.stdout, "layout=current") != 4 {
		t.Fatalf("uniqueid gen | uniqueid parse: %d %q %q", p.code, p.stdout, p.stderr)
	}
}

func TestKernelOverrideReported(t *testing.T) {
	t.Parallel()
	env := append(slicesClone(secretEnv), "RANDFLAKE_KERNEL=no-such-kernel")
	want := `RANDFLAKE_KERNEL="no-such-kernel"`
	if r := runBinary(t, "", env, "gen", "--nodes", "1"); r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("gen: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBinary(t, "", env, "bench", "--quick"); r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("bench: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBinary(t, "", env, "version"); !strings.Contains(r.stdout, "not honoured") {
		t.Errorf("version: %q", r.stdout)
	}
	if r := runBinary(t, "", secretEnv, "gen", "--nodes", "1"); r.stderr != "" {
		t.Errorf("gen without RANDFLAKE_KERNEL: stderr %q", r.stderr)
	}
}

func TestFirstUseReported(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	env := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + dir}
	r := runBinary(t, "", env, "gen")
	if r.code != 0 || !strings.Contains(r.stderr, "first use") || !strings.Contains(r.stderr, dir) {
		t.Fatalf("first gen: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runBinary(t, "", env, "gen"); r.code != 0 || r.stderr != "" {
		t.Fatalf("second gen: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestGenClaimsForLargeN(t *testing.T) {
	t.Parallel()
	// 64 node IDs, one block of the state directory, issue 8,388,608 IDs
	// a second: one more takes a second block (or, before, a wait for
	// the next second). The state file records the blocks used.
	for _, c := range []struct {
		n      int
		claim  string
		blocks string
	}{{1, "", "0"}, {64<<17 + 1, "", "0 1"}, {64<<17 + 1, "64", "0"}, {1, "192", "0 1 2"}} {
		dir, env := ownStateEnv(t)
		args := []string{"gen", "-n", strconv.Itoa(c.n)}
		if c.claim != "" {
			args = append(args, "--claim", c.claim)
		}
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %.200s", args, err, out)
		}
		state, err := os.ReadFile(filepath.Join(dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		var blocks []string
		for _, l := range strings.Split(string(state), "\n") {
			// "record FIRST rfb1 ...": the record of node IDs FIRST to
			// FIRST+63, block FIRST/64.
			if f := strings.Fields(l); len(f) > 2 && f[0] == "record" {
				first, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatalf("state line %q", l)
				}
				blocks = append(blocks, strconv.Itoa(first/statedir.BlockSize))
			}
		}
		if got := strings.Join(blocks, " "); got != c.blocks {
			t.Errorf("%v: blocks %q used, want %q\n%s", args, got, c.blocks, state)
		}
	}
}
