package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/statedir"
)

// The golden tests run subcommands in-process, through env, and compare
// what they print with testdata/NAME.golden. go test -run TestGolden
// -update rewrites the files.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenClock is the clock of gen's generators in the golden tests. A
// static lease starts at the wall clock's next second, so this must lie
// ahead of the wall clock (and before randflake.MaxTimestamp, in 2058).
var goldenClock = time.Date(2056, 1, 2, 3, 4, 5, 0, time.UTC)

// The three IDs gen makes at goldenClock on node 7 under testSecretHex,
// in string and decimal form (testdata/gen-string.golden, gen-int.golden).
var (
	goldenIDs      = []string{"56t36f9dacqf4", "6f4h8rlkekc5t", "f76eqgtdllut"}
	goldenDecimals = []string{"6013544078139353572", "7463072463919395005", "548540665548167133"}
)

// goldenCase is one in-process run of the command.
type goldenCase struct {
	name     string            // of the golden file, testdata/NAME.golden
	args     []string          // after "randflake"; $DIR is the case's directory
	stdin    string            // standard input
	env      map[string]string // the environment, $DIR expanded; nil: goldenEnv
	terminal bool              // whether standard input and output are terminals
	// setup, if set, prepares the case's directory; check, if set, checks
	// it afterwards.
	setup, check func(t *testing.T, dir string)
	// redact, if set, rewrites standard output before the comparison, for
	// output that differs from run to run; it fails t if the output is
	// not as expected.
	redact func(t *testing.T, stdout string) string
}

var goldenEnv = map[string]string{"RANDFLAKE_SECRET": testSecretHex}

func goldenCases() []goldenCase {
	inspectable := []string{goldenIDs[0], goldenIDs[1], "+" + goldenDecimals[2]}
	return []goldenCase{
		{name: "usage", args: nil},
		{name: "help", args: []string{"--help"}},
		{name: "unknown", args: []string{"nope"}},

		{name: "gen-string", args: []string{"gen", "-n", "3", "--nodes", "7"}},
		{name: "gen-int", args: []string{"gen", "-n", "3", "--format", "int", "--nodes", "7"}},
		{name: "gen-json", args: []string{"gen", "-n", "3", "--format", "json", "--nodes", "7"}},
		{name: "gen-binary", args: []string{"gen", "-n", "3", "--format", "binary", "--nodes", "7"}, redact: hexLines},
		{name: "gen-binary-terminal", args: []string{"gen", "-n", "3", "--format", "binary", "--nodes", "7"}, terminal: true},
		{name: "gen-json-none", args: []string{"gen", "-n", "0", "--format", "json", "--nodes", "7"}},
		{name: "gen-help", args: []string{"gen", "--help"}},
		{name: "gen-negative", args: []string{"gen", "-n", "-1", "--nodes", "7"}},
		{name: "gen-bad-format", args: []string{"gen", "--format", "xml", "--nodes", "7"}},
		{name: "gen-bad-flag", args: []string{"gen", "--bogus"}},
		{name: "gen-bad-nodes", args: []string{"gen", "--nodes", "5-3"}},
		{name: "gen-nodes-and-etcd", args: []string{"gen", "--nodes", "1-2", "--etcd", "h:1"}},
		{name: "gen-extra", args: []string{"gen", "--nodes", "7", "extra"}},
		{name: "gen-bad-secret", args: []string{"gen", "--nodes", "7"}, env: map[string]string{"RANDFLAKE_SECRET": "0123"}},

		{name: "inspect", args: append([]string{"inspect"}, inspectable...)},
		{name: "inspect-json", args: append([]string{"inspect", "--json"}, inspectable...)},
		{name: "inspect-stdin", args: []string{"inspect"}, stdin: strings.Join(goldenIDs, "\n") + "\n"},
		{name: "inspect-bad", args: []string{"inspect", goldenIDs[0], "not-an-id", "vvvvvvvvvvvvvv", "+x", goldenIDs[1]}},
		{name: "inspect-terminal", args: []string{"inspect"}, terminal: true},
		{name: "inspect-empty", args: []string{"inspect"}, stdin: " \n"},
		{name: "inspect-help", args: []string{"inspect", "--help"}},

		{name: "keygen", args: []string{"keygen", "--out", "$DIR/secret"}, check: checkSecretFile},
		{name: "keygen-exists", args: []string{"keygen", "--out", "$DIR/secret"},
			setup: writeFile("secret", "old\n", 0o600), check: checkContent("secret", "old\n")},
		{name: "keygen-force", args: []string{"keygen", "--out", "$DIR/secret", "--force"},
			setup: writeFile("secret", "old\n", 0o644), check: checkSecretFile},
		{name: "keygen-stdout", args: []string{"keygen", "--out", "-"}, redact: redactSecret},
		{name: "keygen-terminal", args: []string{"keygen", "--out", "-"}, terminal: true},
		{name: "keygen-terminal-show", args: []string{"keygen", "--out", "-", "--show"}, terminal: true, redact: redactSecret},
		{name: "keygen-no-out", args: []string{"keygen"}},
		{name: "keygen-help", args: []string{"keygen", "--help"}},

		{name: "uniqueid", args: []string{"uniqueid"}},
		{name: "uniqueid-help", args: []string{"uniqueid", "--help"}},
		{name: "uniqueid-unknown", args: []string{"uniqueid", "frob"}},
		{name: "uniqueid-parse", args: []string{"uniqueid", "parse", "aw6BNLExJklyqKErjVoWCgAAAAA", "aw6BNMAAAgcAAA28cpszJhVo", "garbage"}},
		{name: "uniqueid-gen-help", args: []string{"uniqueid", "gen", "--help"}},
		{name: "uniqueid-gen-bad-addr", args: []string{"uniqueid", "gen", "--layout", "classic", "--addr", "::1"}},

		{name: "serve-help", args: []string{"serve", "--help"}},
		{name: "serve-bad-count", args: []string{"serve", "--max-count", "0"}},
		{name: "serve-bad-log-format", args: []string{"serve", "--log-format", "xml"}},
		{name: "serve-env-bad-count", args: []string{"serve"}, env: map[string]string{"RANDFLAKE_MAX_COUNT": "many"}},
		{name: "serve-env-zero-count", args: []string{"serve"}, env: map[string]string{"RANDFLAKE_MAX_COUNT": "0"}},
		{name: "serve-env-bad-bool", args: []string{"serve"}, env: map[string]string{"RANDFLAKE_ACCESS_LOG": "sometimes"}},
		{name: "serve-env-bad-duration", args: []string{"serve"}, env: map[string]string{"RANDFLAKE_SHUTDOWN_TIMEOUT": "10"}},
		{name: "serve-env-flag-wins", args: []string{"serve", "--max-count", "5"},
			env: map[string]string{"RANDFLAKE_MAX_COUNT": "0", "RANDFLAKE_LOG_FORMAT": "xml"}},
		{name: "serve-env-flag-wins-bad-env", args: []string{"serve", "--max-count", "5", "--log-format", "xml"},
			env: map[string]string{"RANDFLAKE_MAX_COUNT": "many"}},
		{name: "serve-node-source-bad", args: []string{"serve", "--node-source", "zookeeper"}},
		{name: "serve-node-source-env-bad", args: []string{"serve"}, env: map[string]string{"RANDFLAKE_NODE_SOURCE": "zookeeper"}},
		{name: "serve-node-source-contradicts-nodes", args: []string{"serve", "--node-source", "statefulset", "--nodes", "1-2"}},
		{name: "serve-node-source-contradicts-etcd", args: []string{"serve", "--etcd", "h:1"}, env: map[string]string{"RANDFLAKE_NODE_SOURCE": "statedir"}},
		{name: "serve-node-source-static-without-nodes", args: []string{"serve", "--node-source", "static"}},
		{name: "serve-node-source-etcd-without-etcd", args: []string{"serve", "--node-source", "etcd"}},
		{name: "serve-node-source-postgres-without-dsn", args: []string{"serve", "--node-source", "postgres"}},
		{name: "serve-postgres-dsn-and-nodes", args: []string{"serve", "--nodes", "0-9"}, env: map[string]string{"RANDFLAKE_POSTGRES_DSN": "host=db"}},
		{name: "serve-postgres-dsn-contradicts-source", args: []string{"serve", "--node-source", "statedir", "--postgres-dsn", "host=db"}},
		{name: "serve-postgres-ttl-negative", args: []string{"serve", "--postgres-dsn", "host=db", "--postgres-ttl", "-1s"}},
		{name: "serve-nodes-per-pod-bad", args: []string{"serve", "--node-source", "statefulset", "--nodes-per-pod", "131073"}},
		{name: "serve-env-nodes-per-pod-bad", args: []string{"serve", "--node-source", "statefulset"}, env: map[string]string{"RANDFLAKE_NODES_PER_POD": "0x"}},
		{name: "load-help", args: []string{"load", "--help"}},
		{name: "load-remote", args: []string{"load", "--url", "http://example.com"}},
		{name: "load-concurrency-too-high", args: []string{"load", "--concurrency", "100000"}},
		{name: "bench-help", args: []string{"bench", "--help"}},

		{name: "help-gen", args: []string{"help", "gen"}},
		{name: "help-uniqueid-parse", args: []string{"help", "uniqueid", "parse"}},
		{name: "help-unknown", args: []string{"help", "nope"}},
		{name: "help-too-deep", args: []string{"help", "gen", "x"}},
		{name: "h", args: []string{"-h"}},
		{name: "inspect-h", args: []string{"inspect", "-h"}},
		{name: "uniqueid-parse-help", args: []string{"uniqueid", "parse", "--help"}},
		{name: "gen-bad-value", args: []string{"gen", "-n", "abc"}},
		{name: "gen-missing-value", args: []string{"gen", "--nodes", "7", "-n"}},
		{name: "uniqueid-gen-bad-flag", args: []string{"uniqueid", "gen", "--bogus"}},
		{name: "completion-bad", args: []string{"completion", "fish"}},
		{name: "completion-none", args: []string{"completion"}},
		{name: "version-extra", args: []string{"version", "x"}},

		{name: "inspect-negative", args: []string{"inspect", "-4064785178339119907", "--json", "-1"}},
		{name: "inspect-flags-after", args: []string{"inspect", goldenIDs[0], "--json"}},
		{name: "inspect-dashdash", args: []string{"inspect", "--", "--json"}},
		{name: "inspect-stdin-json", args: []string{"inspect"},
			stdin: `["56t36f9dacqf4","6f4h8rlkekc5t","f76eqgtdllut"]` + "\n" + `[548540665548167133, -4064785178339119907, "+548540665548167133", true]` + "\n"},
		{name: "inspect-stdin-json-empty", args: []string{"inspect"}, stdin: "[]\n"},
		{name: "inspect-stdin-bad-json", args: []string{"inspect"}, stdin: `["56t36f9dacqf4",`},
		{name: "inspect-secret-file", args: []string{"inspect", "--secret-file", "$DIR/secret", goldenIDs[0]},
			env: map[string]string{}, setup: writeFile("secret", testSecretHex+"\n", 0o600)},
		{name: "inspect-secret-file-env", args: []string{"inspect", goldenIDs[0]},
			env: map[string]string{"RANDFLAKE_SECRET_FILE": "$DIR/secret"}, setup: writeFile("secret", testSecretHex+"\n", 0o600)},
		{name: "inspect-state-dir", args: []string{"inspect", "+1"},
			env: map[string]string{"RANDFLAKE_STATE_DIR": "$DIR/state"}, redact: redactFields},
		{name: "gen-state-dir", args: []string{"gen", "--nodes", "7"},
			env: map[string]string{"RANDFLAKE_STATE_DIR": "$DIR/state"}, redact: redactIDs},
		{name: "gen-state-dir-again", args: []string{"gen", "--nodes", "7"},
			env: map[string]string{"RANDFLAKE_STATE_DIR": "$DIR/state"}, redact: redactIDs,
			setup: func(t *testing.T, dir string) {
				if _, err := statedir.Open(filepath.Join(dir, "state")); err != nil {
					t.Fatal(err)
				}
			}},
		// Input echoed in messages is escaped: NUL, invalid UTF-8 and
		// terminal escape sequences never reach standard error raw.
		{name: "inspect-escape", args: []string{"inspect", "a\x00b", "\xff\xfe", "\x1b[2J\x1b]0;title\x07", "ok\u00e9", goldenIDs[0]}},
		{name: "inspect-stdin-escape", args: []string{"inspect"}, stdin: "a\x00b \xff\xfe\n\x1b[31mred\x1b[0m " + goldenIDs[1] + "\n"},
		{name: "inspect-stdin-json-escape", args: []string{"inspect"}, stdin: `["\u001b[2J", "\u0000", "` + goldenIDs[2] + `", {"a":"\u001b"}, [1, 2], null]`},
		{name: "inspect-stdin-json-bad-byte", args: []string{"inspect"}, stdin: "[\"" + goldenIDs[0] + "\", \x1b]"},
		{name: "inspect-stdin-json-raw-control", args: []string{"inspect"}, stdin: "[\"a\x1b[2Jb\"]"},
		{name: "inspect-stdin-json-not-array", args: []string{"inspect"}, stdin: "[\"" + goldenIDs[0] + "\"] \"\x00\""},
		{name: "inspect-stdin-long", args: []string{"inspect"}, stdin: strings.Repeat("\x1b", 300) + " " + goldenIDs[0] + " " + strings.Repeat("x", 100000) + "\n"},
		{name: "inspect-stdin-json-long", args: []string{"inspect"}, stdin: `["` + strings.Repeat("y", 1000) + `", "` + goldenIDs[0] + `", [` + strings.Repeat("1,", 500) + `1]]`},
		{name: "uniqueid-parse-escape", args: []string{"uniqueid", "parse", "\x1b[2J", "aw6BNLExJklyqKErjVoWCgAAAA\x00", "\xff"}},
		{name: "uniqueid-parse-stdin-escape", args: []string{"uniqueid", "parse"}, stdin: "\x1b]0;x\x07 aw6BNLExJklyqKErjVoWCgAAAAA " + strings.Repeat("\xff", 400) + "\n"},
		{name: "uniqueid-parse-stdin", args: []string{"uniqueid", "parse"}, stdin: "aw6BNLExJklyqKErjVoWCgAAAAA\n aw6BNMAAAgcAAA28cpszJhVo\n"},
		{name: "uniqueid-parse-terminal", args: []string{"uniqueid", "parse"}, terminal: true},
		{name: "uniqueid-parse-empty", args: []string{"uniqueid", "parse"}, stdin: "\n"},
	}
}

func TestGolden(t *testing.T) {
	// Nothing here may touch a state directory but an empty one of its own.
	t.Setenv("RANDFLAKE_STATE_DIR", t.TempDir())
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.setup != nil {
				c.setup(t, dir)
			}
			got := runGolden(t, c, dir)
			if c.check != nil {
				c.check(t, dir)
			}
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (go test -run TestGolden -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

// runGolden runs c in-process and returns the text of its golden file:
// the command line, the exit status, standard output and standard error,
// with dir written as $DIR.
func runGolden(t *testing.T, c goldenCase, dir string) string {
	vars := c.env
	if vars == nil {
		vars = goldenEnv
	}
	expanded := map[string]string{}
	for k, v := range vars {
		expanded[k] = strings.ReplaceAll(v, "$DIR", dir)
	}
	vars = expanded
	var stdout, stderr bytes.Buffer
	e := &env{
		stdin:      strings.NewReader(c.stdin),
		stdout:     &stdout,
		stderr:     &stderr,
		getenv:     func(k string) string { return vars[k] },
		isTerminal: func(any) bool { return c.terminal },
		now:        func() time.Time { return goldenClock },
	}
	args := make([]string, len(c.args))
	for i, a := range c.args {
		args[i] = strings.ReplaceAll(a, "$DIR", dir)
	}
	code := run(e, args)
	out, errs := stdout.String(), stderr.String()
	if strings.Contains(out+errs, testSecretHex) {
		t.Errorf("the secret was printed")
	}
	if c.redact != nil {
		out = c.redact(t, out)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "$ %s\nexit status %d\n", strings.Join(append([]string{"randflake"}, echoArgs(c.args)...), " "), code)
	fmt.Fprintf(&b, "-- stdout --\n%s-- stderr --\n%s", out, strings.ReplaceAll(errs, dir, "$DIR"))
	return b.String()
}

var idLine = regexp.MustCompile(`^[0-9a-v]{1,13}\n$`)

// redactIDs replaces the one ID gen printed under a secret of its own.
func redactIDs(t *testing.T, stdout string) string {
	if !idLine.MatchString(stdout) {
		t.Errorf("gen printed %q, want one ID", stdout)
		return stdout
	}
	return "(an ID)\n"
}

// hexLines shows binary output as hexadecimal, 8 bytes (one ID) a line.
func hexLines(t *testing.T, stdout string) string {
	if len(stdout)%8 != 0 {
		t.Errorf("binary output of %d bytes, not a multiple of 8", len(stdout))
	}
	var b strings.Builder
	for i := 0; i < len(stdout); i += 8 {
		fmt.Fprintf(&b, "%x\n", stdout[i:min(i+8, len(stdout))])
	}
	return b.String()
}

var fieldsLine = regexp.MustCompile(`^1\t1\t\S+\tnode=\d+\tseq=\d+\n$`)

// redactFields replaces the fields inspect printed for ID 1 under a
// secret of its own.
func redactFields(t *testing.T, stdout string) string {
	if !fieldsLine.MatchString(stdout) {
		t.Errorf("inspect printed %q, want the fields of ID 1", stdout)
		return stdout
	}
	return "1\t1\t(fields)\n"
}

var secretLine = regexp.MustCompile(`^[0-9a-f]{32}\n$`)

// redactSecret replaces a secret printed by keygen.
func redactSecret(t *testing.T, stdout string) string {
	if !secretLine.MatchString(stdout) {
		t.Errorf("keygen printed %q, want 32 hex digits and a newline", stdout)
		return stdout
	}
	return "(32 hex digits)\n"
}

// checkSecretFile checks the secret file keygen wrote: mode 0600, 32 hex
// digits and a newline.
func checkSecretFile(t *testing.T, dir string) {
	path := filepath.Join(dir, "secret")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", path, m)
	}
	b, _ := os.ReadFile(path)
	if !secretLine.Match(b) {
		t.Errorf("%s holds %q, want 32 hex digits and a newline", path, b)
	}
}

func writeFile(name, content string, mode os.FileMode) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func checkContent(name, want string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
}

// echoArgs is args as the golden files show them: quoted where echo
// quotes, so that the files hold no control characters.
func echoArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = echo(a)
	}
	return out
}
