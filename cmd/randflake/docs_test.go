package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The documents that describe the service are checked against what it
// is: docs/service.md's error table against the OpenAPI document, and
// docs/operations.md's flag table against serve's flags.

// markdownTable returns the rows (cells trimmed, header and rule left out)
// of the first table in the Markdown file at path whose header row is
// header.
func markdownTable(t *testing.T, path, header string) [][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case !in && line == header:
			in = true
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
				continue // the rule under the header
			}
			rows = append(rows, cells)
		case in:
			return rows
		}
	}
	if !in {
		t.Fatalf("%s has no table with the header %q", path, header)
	}
	return rows
}

// errorPair is an error answer: its kind ("" for an answer without the
// JSON error body) and status.
type errorPair struct {
	kind   string
	status int
}

func (p errorPair) String() string {
	if p.kind == "" {
		return fmt.Sprintf("%d without a kind", p.status)
	}
	return fmt.Sprintf("%s %d", p.kind, p.status)
}

// specErrors returns every (kind, status) that the OpenAPI document at
// path lets an operation answer with, and the values of its ErrorKind.
func specErrors(t *testing.T, path string) (map[errorPair]bool, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				ErrorKind struct {
					Enum []string `json:"enum"`
				} `json:"ErrorKind"`
			} `json:"schemas"`
			Responses map[string]response `json:"responses"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	kinds := doc.Components.Schemas.ErrorKind.Enum
	if len(kinds) == 0 {
		t.Fatalf("%s: components.schemas.ErrorKind has no enum", path)
	}
	pairs := map[errorPair]bool{}
	for p, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains([]string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}, method) {
				continue // parameters, summary and the like
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %s %s: %v", path, method, p, err)
			}
			for code, r := range op.Responses {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s: %s %s: response %q is not a status code", path, method, p, code)
				}
				if status < 400 {
					continue
				}
				if ref, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
					named, found := doc.Components.Responses[ref]
					if !found {
						t.Fatalf("%s: %s %s %d refers to the missing response %q", path, method, p, status, ref)
					}
					r = named
				}
				if len(r.Content) == 0 {
					continue // a HEAD answer: no body, the GET's answer has the kind
				}
				ks := r.kinds()
				if len(ks) == 0 {
					ks = []string{""}
				}
				for _, k := range ks {
					if k != "" && !slices.Contains(kinds, k) {
						t.Errorf("%s: %s %s %d answers kind %q, which ErrorKind does not list", path, method, p, status, k)
					}
					pairs[errorPair{k, status}] = true
				}
			}
		}
	}
	return pairs, kinds
}

// operation is what the test reads of an OpenAPI operation.
type operation struct {
	Responses map[string]response `json:"responses"`
}

// response is an OpenAPI response, or a reference to one.
type response struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema schema `json:"schema"`
	} `json:"content"`
}

// schema is the part of a response schema that names error kinds.
type schema struct {
	AllOf      []schema `json:"allOf"`
	Properties map[string]struct {
		Const string   `json:"const"`
		Enum  []string `json:"enum"`
	} `json:"properties"`
}

// kinds returns the error kinds a response's schemas allow.
func (r response) kinds() []string {
	var out []string
	var walk func(s schema)
	walk = func(s schema) {
		if k, ok := s.Properties["kind"]; ok {
			if k.Const != "" {
				out = append(out, k.Const)
			}
			out = append(out, k.Enum...)
		}
		for _, sub := range s.AllOf {
			walk(sub)
		}
	}
	for _, c := range r.Content {
		walk(c.Schema)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var (
	kindCell   = regexp.MustCompile("^`([a-z_]+)`$")
	flagInCell = regexp.MustCompile("`--([a-z0-9-]+)`")
)

// TestServiceErrorTableMatchesOpenAPI checks that docs/service.md's error
// table lists every kind and status the OpenAPI document answers with,
// and nothing else.
func TestServiceErrorTableMatchesOpenAPI(t *testing.T) {
	const specPath, docPath = "../../api/openapi.yaml", "../../docs/service.md"
	spec, kinds := specErrors(t, specPath)
	table := map[errorPair]bool{}
	for _, row := range markdownTable(t, docPath, "| kind | status | when |") {
		if len(row) != 3 {
			t.Errorf("%s: error table row %q has %d cells, want 3", docPath, row, len(row))
			continue
		}
		var p errorPair
		if m := kindCell.FindStringSubmatch(row[0]); m != nil {
			p.kind = m[1]
		} else if row[0] != "(none)" {
			t.Errorf("%s: error table row %q: the kind is neither `kind` nor (none)", docPath, row)
			continue
		}
		status, err := strconv.Atoi(row[1])
		if err != nil {
			t.Errorf("%s: error table row %q: status %q is not a number", docPath, row, row[1])
			continue
		}
		p.status = status
		if table[p] {
			t.Errorf("%s: error table lists %s twice", docPath, p)
		}
		table[p] = true
	}
	for p := range spec {
		if !table[p] {
			t.Errorf("%s answers %s, which the error table of %s does not list", specPath, p, docPath)
		}
	}
	for p := range table {
		if !spec[p] {
			t.Errorf("the error table of %s lists %s, which no operation of %s answers", docPath, p, specPath)
		}
	}
	for _, k := range kinds {
		listed := false
		for p := range table {
			listed = listed || p.kind == k
		}
		if !listed {
			t.Errorf("ErrorKind value %q of %s is not in the error table of %s", k, specPath, docPath)
		}
	}
	if len(spec) < len(kinds) {
		t.Errorf("%s: %d error answers for %d kinds: the document was not read as expected", specPath, len(spec), len(kinds))
	}
}

// TestOperationsFlagTableListsEveryServeFlag checks that docs/operations.md's
// flag table lists every flag of serve, each beside its variable, and no
// flag serve does not have.
func TestOperationsFlagTableListsEveryServeFlag(t *testing.T) {
	const docPath = "../../docs/operations.md"
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	(&serveCmd{}).flags(fs)
	documented := map[string]bool{}
	for _, row := range markdownTable(t, docPath, "| flag | variable | default |") {
		if len(row) != 3 {
			t.Errorf("%s: flag table row %q has %d cells, want 3", docPath, row, len(row))
			continue
		}
		flags := flagInCell.FindAllStringSubmatch(row[0], -1)
		if len(flags) == 0 {
			t.Errorf("%s: flag table row %q names no flag", docPath, row)
		}
		for _, m := range flags {
			name := m[1]
			if documented[name] {
				t.Errorf("%s: the flag table lists --%s twice", docPath, name)
			}
			documented[name] = true
			if fs.Lookup(name) == nil {
				t.Errorf("%s: the flag table lists --%s, which serve does not have", docPath, name)
			}
			if v := "`" + envVar(name) + "`"; !strings.Contains(row[1], v) {
				t.Errorf("%s: the flag table's row of --%s does not name its variable %s", docPath, name, v)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !documented[f.Name] {
			t.Errorf("%s: serve has --%s, which the flag table does not list", docPath, f.Name)
		}
	})
}
