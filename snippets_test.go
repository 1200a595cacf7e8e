package randflake_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Go snippets of README.md, CONTRIBUTING.md and docs/*.md are excerpts of code that
// compiles: every ```go block must appear, line after line, in a Go file of
// the repository (an Example function or a test, mostly). Lines compare
// after trimming and collapsing white space, so indentation and the
// alignment of comments do not matter; blank lines are skipped on both
// sides. A snippet that no file holds is a snippet nobody compiled.

// docSnippet is one ```go block of a Markdown file.
type docSnippet struct {
	file  string   // path relative to the repository root
	line  int      // line of the opening fence
	lines []string // normalized, blank lines dropped
}

// normalizeLine trims a line and collapses its runs of white space.
func normalizeLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// goSnippets returns the ```go blocks of the Markdown file at path.
func goSnippets(t *testing.T, root, rel string) []docSnippet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []docSnippet
	var cur *docSnippet
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.TrimSpace(line)
		switch {
		case cur == nil && fence == "```go":
			cur = &docSnippet{file: rel, line: n}
		case cur != nil && fence == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			if l := normalizeLine(line); l != "" {
				cur.lines = append(cur.lines, l)
			}
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: a ```go block is never closed", rel, cur.line)
	}
	return out
}

// goSources returns the normalized non-blank lines of every Go file of the
// repository, every module included, by path.
func goSources(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == ".git" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if l = normalizeLine(l); l != "" {
				lines = append(lines, l)
			}
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = lines
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// holds reports whether want appears as consecutive lines of have, and
// otherwise how many leading lines of want appear so.
func holds(have, want []string) (bool, int) {
	best := 0
	for i := range have {
		n := 0
		for n < len(want) && i+n < len(have) && have[i+n] == want[n] {
			n++
		}
		if n == len(want) {
			return true, n
		}
		best = max(best, n)
	}
	return false, best
}

func TestDocSnippetsCompile(t *testing.T) {
	root := "." // the root module's directory is the repository's
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	sources := goSources(t, root)
	count := 0
	for _, f := range files {
		for _, s := range goSnippets(t, root, f) {
			count++
			if len(s.lines) == 0 {
				t.Errorf("%s:%d: an empty ```go block", s.file, s.line)
				continue
			}
			best, bestFile := 0, ""
			found := false
			for path, lines := range sources {
				ok, n := holds(lines, s.lines)
				if ok {
					found = true
					break
				}
				if n > best {
					best, bestFile = n, path
				}
			}
			if found {
				continue
			}
			if best == 0 {
				t.Errorf("%s:%d: no Go file of the repository holds this snippet; its first line %q is nowhere", s.file, s.line, s.lines[0])
			} else {
				t.Errorf("%s:%d: no Go file of the repository holds this snippet; %s holds its first %d lines, then not %q",
					s.file, s.line, bestFile, best, s.lines[best])
			}
		}
	}
	if count == 0 {
		t.Error("README.md, CONTRIBUTING.md and docs/*.md hold no ```go block: the test checks nothing")
	}
	t.Logf("%d Go snippets in %d Markdown files", count, len(files))
}

// TestREADMEIsShort keeps the README a page a newcomer reads in minutes;
// the rest belongs in docs/.
func TestREADMEIsShort(t *testing.T) {
	const most = 180
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > most {
		t.Errorf("README.md has %d lines, more than %d: move the detail into docs/", n, most)
	}
}
