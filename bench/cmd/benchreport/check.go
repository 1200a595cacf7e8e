package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// checkOutput reads the report and the charts back from disk and checks that
// they are well-formed and complete: every chart parses as SVG and holds
// every bar, label and value of its data; every Markdown table is regular;
// every image link resolves; every result of every shown machine appears,
// with its median, in that machine's table of results.
func checkOutput(rs []*Results, reportPath, resultsDir string) error {
	var errs []error
	for name, c := range map[string]*barChart{
		nsPerIDChartFile: nsPerIDChart(rs),
		speedupChartFile: speedupChart(rs),
	} {
		path := filepath.Join(resultsDir, name)
		b, err := os.ReadFile(path)
		if err == nil {
			err = checkSVG(b, c)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	md, err := os.ReadFile(reportPath)
	if err == nil {
		err = checkMarkdown(md, rs, filepath.Dir(reportPath), resultsDir)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", reportPath, err))
	}
	return errors.Join(errs...)
}

// svgDoc is what checkSVG gathers from a chart.
type svgDoc struct {
	texts map[string]int // text content of <text> elements, with counts
	bars  int            // <rect class="bar"> elements
}

// parseSVG parses b strictly as XML and checks the shape of an SVG image.
func parseSVG(b []byte) (*svgDoc, error) {
	doc := &svgDoc{texts: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	var stack []string
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				if t.Name.Local != "svg" || t.Name.Space != "http://www.w3.org/2000/svg" {
					return nil, fmt.Errorf("root element is %s %s, not svg", t.Name.Space, t.Name.Local)
				}
				if err := checkSVGSize(t.Attr); err != nil {
					return nil, err
				}
			}
			for _, a := range t.Attr {
				if strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf") {
					return nil, fmt.Errorf("<%s %s=%q>", t.Name.Local, a.Name.Local, a.Value)
				}
			}
			if t.Name.Local == "rect" && attr(t.Attr, "class") == "bar" {
				doc.bars++
				w, err := strconv.ParseFloat(attr(t.Attr, "width"), 64)
				if err != nil || w <= 0 {
					return nil, fmt.Errorf("bar of width %q", attr(t.Attr, "width"))
				}
			}
			stack = append(stack, t.Name.Local)
			text.Reset()
		case xml.EndElement:
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced </%s>", t.Name.Local)
			}
			if stack[len(stack)-1] == "text" {
				doc.texts[text.String()]++
			}
			stack = stack[:len(stack)-1]
			text.Reset()
		case xml.CharData:
			text.Write(t)
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("unclosed <%s>", stack[len(stack)-1])
	}
	if len(doc.texts) == 0 {
		return nil, fmt.Errorf("no text")
	}
	return doc, nil
}

func attr(as []xml.Attr, name string) string {
	for _, a := range as {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func checkSVGSize(as []xml.Attr) error {
	for _, name := range []string{"width", "height"} {
		v, err := strconv.ParseFloat(attr(as, name), 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) {
			return fmt.Errorf("svg %s=%q", name, attr(as, name))
		}
	}
	if f := strings.Fields(attr(as, "viewBox")); len(f) != 4 {
		return fmt.Errorf("svg viewBox=%q", attr(as, "viewBox"))
	}
	return nil
}

// checkSVG checks a chart against the data it was drawn from.
func checkSVG(b []byte, c *barChart) error {
	doc, err := parseSVG(b)
	if err != nil {
		return err
	}
	want := 0
	need := []string{c.Title, c.XLabel}
	for _, s := range c.Series {
		need = append(need, s.Name)
	}
	for _, p := range c.Panels {
		need = append(need, p.Title)
		if p.Note != "" {
			need = append(need, p.Note)
		}
		for _, r := range p.Rows {
			need = append(need, r.Label)
			for _, bar := range r.Bars {
				want++
				need = append(need, bar.Text)
			}
		}
	}
	if doc.bars != want {
		return fmt.Errorf("%d bars, want %d", doc.bars, want)
	}
	for _, t := range need {
		if doc.texts[t] == 0 {
			return fmt.Errorf("text %q missing", t)
		}
	}
	return nil
}

var (
	imageLink    = regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`)
	separatorRow = regexp.MustCompile(`^\|( ?-+:? \|)+$`)
)

// checkMarkdown checks the report's tables, image links and completeness.
func checkMarkdown(md []byte, rs []*Results, reportDir, resultsDir string) error {
	text := string(md)
	images := 0
	for _, m := range imageLink.FindAllStringSubmatch(text, -1) {
		images++
		p := filepath.Join(reportDir, filepath.FromSlash(m[1]))
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("image %s: %v", m[1], err)
		}
	}
	for _, name := range []string{nsPerIDChartFile, speedupChartFile} {
		rel, _ := filepath.Rel(reportDir, filepath.Join(resultsDir, name))
		if !strings.Contains(text, "]("+filepath.ToSlash(rel)+")") {
			return fmt.Errorf("no image link to %s", rel)
		}
	}

	// Tables: every row as wide as its header, a separator under the
	// header. Rows of the tables of all results are gathered per machine.
	type key struct{ machine, suite, name, kernel, unit string }
	medians := map[key]string{}
	machine := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if id, ok := strings.CutPrefix(lines[i], "## Machine "); ok {
			machine = id
		}
		if !strings.HasPrefix(lines[i], "|") {
			continue
		}
		header := cells(lines[i])
		if i+1 >= len(lines) || !separatorRow.MatchString(lines[i+1]) || len(cells(lines[i+1])) != len(header) {
			return fmt.Errorf("line %d: table without a separator row", i+1)
		}
		all := strings.Join(header, "|") == strings.Join(allResultsHeader, "|")
		i += 2
		for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			c := cells(lines[i])
			if len(c) != len(header) {
				return fmt.Errorf("line %d: %d cells under %d headers", i+1, len(c), len(header))
			}
			if all {
				k := key{machine, c[0], strings.Trim(c[1], "`"), c[2], c[3]}
				if _, dup := medians[k]; dup {
					return fmt.Errorf("line %d: result listed twice", i+1)
				}
				medians[k] = c[4]
			}
		}
	}
	want := 0
	for _, r := range shown(rs) {
		id := r.Machine.ID
		if !strings.Contains(text, "\n## Machine "+id+"\n") || !strings.Contains(text, "[`"+id+"`](#"+anchor(r.Machine)+")") {
			return fmt.Errorf("machine %s has no section or no row in the machines table", id)
		}
		for _, b := range r.Benchmarks {
			for _, m := range b.Metrics {
				want++
				got, ok := medians[key{id, b.Suite, b.Name, b.Kernel, m.Unit}]
				if !ok {
					return fmt.Errorf("machine %s: %s %s (%s, %s) is not in the table of results", id, b.Suite, b.Name, b.Kernel, m.Unit)
				}
				if !sameNumber(got, m.Median) {
					return fmt.Errorf("machine %s: %s %s (%s, %s): table says %s, median is %v", id, b.Suite, b.Name, b.Kernel, m.Unit, got, m.Median)
				}
			}
		}
	}
	for _, r := range rs {
		if r.Machine.Emulated && strings.Contains(text, "## Machine "+r.Machine.ID) {
			return fmt.Errorf("emulated machine %s is shown", r.Machine.ID)
		}
	}
	if len(medians) != want {
		return fmt.Errorf("tables of results have %d rows, the results %d", len(medians), want)
	}
	return nil
}

// cells splits a Markdown table row.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	parts := strings.Split(line, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
