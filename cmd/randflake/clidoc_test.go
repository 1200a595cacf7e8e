package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cliDoc is the command-line reference, whose blocks are the commands'
// help texts.
var cliDoc = filepath.Join("..", "..", "docs", "cli.md")

// helpTexts returns every command's --help text by its path after
// "randflake" ("" for the list of commands), in the order of the command
// tables, subcommands after their parent.
func helpTexts() (paths []string, texts map[string]string) {
	texts = map[string]string{}
	var top bytes.Buffer
	topUsage(&top)
	paths, texts[""] = append(paths, ""), top.String()
	var walk func(table []command, prefix string)
	walk = func(table []command, prefix string) {
		for _, c := range table {
			path := prefix + c.name
			var b bytes.Buffer
			c.help(&b, path)
			paths, texts[path] = append(paths, path), b.String()
			if p, ok := c.new().(parent); ok {
				walk(p.subcommands(), path+" ")
			}
		}
	}
	walk(commands(), "")
	return paths, texts
}

// cliSection matches a command's section of docs/cli.md: its heading,
// prose, then its help in a text block.
var cliSection = regexp.MustCompile("(?s)\n## `(randflake[a-z -]*)`\n(.*?)```text\n(.*?)```\n")

// docs/cli.md holds, in a section per command and subcommand, the
// command's --help text verbatim (its usage text and its flags), so that
// the reference cannot drift from the commands: a command without a
// section, a section without a command, or a text that differs fails.
// go test -run TestCLIDoc -update rewrites the blocks (the prose stays).
func TestCLIDoc(t *testing.T) {
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	paths, texts := helpTexts()
	seen := map[string]bool{}
	var stale []string
	doc = cliSection.ReplaceAllStringFunc(doc, func(sec string) string {
		m := cliSection.FindStringSubmatch(sec)
		path := strings.TrimSpace(strings.TrimPrefix(m[1], "randflake"))
		want, ok := texts[path]
		if !ok {
			t.Errorf("%s: section for `%s`, which is no command", cliDoc, m[1])
			return sec
		}
		seen[path] = true
		if m[3] != want {
			stale = append(stale, m[1])
			return strings.Replace(sec, "```text\n"+m[3]+"```\n", "```text\n"+want+"```\n", 1)
		}
		return sec
	})
	for _, p := range paths {
		if !seen[p] {
			t.Errorf("%s has no section \"## `%s`\" with its help:\n```text\n%s```", cliDoc, strings.TrimSpace("randflake "+p), texts[p])
		}
	}
	if len(stale) == 0 {
		return
	}
	if *update {
		if err := os.WriteFile(cliDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the help of %s differs from the command's (go test -run TestCLIDoc -update rewrites the blocks)", cliDoc, strings.Join(stale, ", "))
}
