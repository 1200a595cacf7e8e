// Command testreport reads the `go test -json` streams of test.sh's steps
// and prints what a reader of the suite needs: each package's result, the
// whole output of every failing test (and of every package that failed
// without a failing test: a build error, a panic, a time-out), and a last
// line that counts the tests, "N passed, N failed" (", N skipped" after it
// when some were).
//
//	testreport [-show REGEXP] STEP=FILE.json|STEP=FILE.log ...
//
// A FILE.json is a step's `go test -json` stream. A FILE.log is the output
// of a step that is not a test run (go vet, say) and failed: it is printed
// and counts as one failure. A test is counted once, at its leaves: a test
// with subtests counts as its subtests. A package that failed with no
// failing test counts as one failure. -show prints the output lines of passing tests that match
// REGEXP too (a step's figures). The exit status is 1 if anything failed,
// 2 on bad usage or an unreadable file.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (test2json's TestEvent, and the
// go command's BuildEvent, which carries ImportPath instead of Package).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// testKey names a test within a package.
type testKey struct{ pkg, test string }

// step is what one stream said.
type step struct {
	name     string
	order    []testKey          // tests in the order they started
	result   map[testKey]string // pass, fail or skip
	output   map[testKey]*strings.Builder
	pkgOut   map[string]*strings.Builder // output outside any test, by package
	build    map[string]*strings.Builder // build output, by import path
	pkgRes   map[string]string
	pkgTime  map[string]float64
	pkgOrder []string
	garbage  []string // lines that were not JSON (the go command's own errors)
}

func newStep(name string) *step {
	return &step{
		name: name, result: map[testKey]string{}, output: map[testKey]*strings.Builder{},
		pkgOut: map[string]*strings.Builder{}, build: map[string]*strings.Builder{},
		pkgRes: map[string]string{}, pkgTime: map[string]float64{},
	}
}

func appendTo(m map[string]*strings.Builder, k, s string) {
	b := m[k]
	if b == nil {
		b = new(strings.Builder)
		m[k] = b
	}
	b.WriteString(s)
}

func (s *step) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			if t := strings.TrimSpace(string(line)); t != "" {
				s.garbage = append(s.garbage, t)
			}
			continue
		}
		if e.ImportPath != "" && e.Package == "" {
			if e.Action == "build-output" {
				appendTo(s.build, e.ImportPath, e.Output)
			}
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

func (s *step) event(e event) {
	if e.Test == "" {
		switch e.Action {
		case "start":
			if !slices.Contains(s.pkgOrder, e.Package) {
				s.pkgOrder = append(s.pkgOrder, e.Package)
			}
		case "output":
			appendTo(s.pkgOut, e.Package, e.Output)
		case "pass", "fail", "skip":
			if !slices.Contains(s.pkgOrder, e.Package) {
				s.pkgOrder = append(s.pkgOrder, e.Package)
			}
			s.pkgRes[e.Package] = e.Action
			s.pkgTime[e.Package] = e.Elapsed
			if e.FailedBuild != "" {
				appendTo(s.pkgOut, e.Package, "build failed: "+e.FailedBuild+"\n")
			}
		}
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "run":
		if _, ok := s.output[k]; !ok {
			s.order = append(s.order, k)
			s.output[k] = new(strings.Builder)
		}
	case "output":
		if s.output[k] == nil {
			s.order = append(s.order, k)
			s.output[k] = new(strings.Builder)
		}
		s.output[k].WriteString(e.Output)
	case "pass", "fail", "skip":
		if s.output[k] == nil {
			s.order = append(s.order, k)
			s.output[k] = new(strings.Builder)
		}
		s.result[k] = e.Action
	}
}

// leaf reports whether k has no subtests.
func (s *step) leaf(k testKey) bool {
	for _, o := range s.order {
		if o.pkg == k.pkg && strings.HasPrefix(o.test, k.test+"/") {
			return false
		}
	}
	return true
}

// counts is the tally of a step or of all of them.
type counts struct{ passed, failed, skipped int }

func (c *counts) add(o counts) {
	c.passed, c.failed, c.skipped = c.passed+o.passed, c.failed+o.failed, c.skipped+o.skipped
}

// report writes the step's packages and failures to w and returns its
// tally.
func (s *step) report(w io.Writer, show *regexp.Regexp) counts {
	var c counts
	failedIn := map[string]int{}
	for _, k := range s.order {
		if !s.leaf(k) {
			continue
		}
		switch s.result[k] {
		case "pass":
			c.passed++
		case "skip":
			c.skipped++
		case "fail":
			c.failed++
			failedIn[k.pkg]++
		default:
			// Started, never ended: the package died under it (a
			// panic or a time-out), which the package's failure says.
		}
	}
	for _, pkg := range s.pkgOrder {
		res := s.pkgRes[pkg]
		switch {
		case res == "fail":
			fmt.Fprintf(w, "FAIL %s %s (%.1fs)\n", s.name, pkg, s.pkgTime[pkg])
		case res == "":
			fmt.Fprintf(w, "FAIL %s %s: no result (the go command stopped)\n", s.name, pkg)
		case res == "skip":
			fmt.Fprintf(w, "--   %s %s: no tests\n", s.name, pkg)
		default:
			fmt.Fprintf(w, "ok   %s %s (%.1fs)\n", s.name, pkg, s.pkgTime[pkg])
		}
		if (res == "fail" || res == "") && failedIn[pkg] == 0 {
			c.failed++ // a failure that no test reported
		}
	}
	for _, k := range s.order {
		out := s.output[k].String()
		switch {
		case s.result[k] == "fail" && s.leaf(k):
			fmt.Fprintf(w, "\n--- %s: %s %s failed:\n%s", s.name, k.pkg, k.test, out)
		case show != nil:
			for _, l := range strings.SplitAfter(out, "\n") {
				if show.MatchString(l) {
					fmt.Fprint(w, l)
				}
			}
		}
	}
	for _, pkg := range s.pkgOrder {
		if res := s.pkgRes[pkg]; (res == "fail" || res == "") && failedIn[pkg] == 0 {
			fmt.Fprintf(w, "\n--- %s: %s failed with no failing test:\n", s.name, pkg)
			for ip, b := range s.build {
				if ip == pkg || strings.HasPrefix(ip, pkg+" [") {
					fmt.Fprint(w, b.String())
				}
			}
			if b := s.pkgOut[pkg]; b != nil {
				fmt.Fprint(w, b.String())
			}
			// The test that was running when the package died.
			for _, k := range s.order {
				if k.pkg == pkg && s.result[k] == "" && s.leaf(k) {
					fmt.Fprintf(w, "(still running: %s)\n%s", k.test, s.output[k].String())
				}
			}
		}
	}
	for ip, b := range s.build {
		pkg, _, _ := strings.Cut(ip, " [")
		if !slices.Contains(s.pkgOrder, pkg) {
			fmt.Fprintf(w, "\n--- %s: build output of %s:\n%s", s.name, ip, b.String())
		}
	}
	if len(s.garbage) > 0 {
		fmt.Fprintf(w, "\n--- %s: the go command said:\n%s\n", s.name, strings.Join(s.garbage, "\n"))
		if len(s.pkgOrder) == 0 {
			c.failed++ // nothing ran
		}
	}
	return c
}

func main() {
	show := flag.String("show", "", "also print the output lines of passing tests that match this regular expression")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testreport [-show REGEXP] STEP=FILE.json|STEP=FILE.log ...")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var re *regexp.Regexp
	if *show != "" {
		var err error
		if re, err = regexp.Compile(*show); err != nil {
			fmt.Fprintln(os.Stderr, "testreport: -show:", err)
			os.Exit(2)
		}
	}
	var total counts
	for _, arg := range flag.Args() {
		name, file, ok := strings.Cut(arg, "=")
		if !ok || name == "" || file == "" {
			fmt.Fprintf(os.Stderr, "testreport: %q is not STEP=FILE\n", arg)
			os.Exit(2)
		}
		if strings.HasSuffix(file, ".log") {
			b, err := os.ReadFile(file)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testreport:", err)
				os.Exit(2)
			}
			fmt.Printf("FAIL %s\n\n--- %s failed:\n%s\n", name, name, strings.TrimRight(string(b), "\n"))
			total.failed++
			continue
		}
		s := newStep(name)
		if err := readFile(s, file); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		total.add(s.report(os.Stdout, re))
	}
	line := fmt.Sprintf("%d passed, %d failed", total.passed, total.failed)
	if total.skipped > 0 {
		line += fmt.Sprintf(", %d skipped", total.skipped)
	}
	fmt.Println(line)
	if total.failed > 0 {
		os.Exit(1)
	}
}

func readFile(s *step, name string) error {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		s.garbage = append(s.garbage, "no output: the step did not run")
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return s.read(f)
}
