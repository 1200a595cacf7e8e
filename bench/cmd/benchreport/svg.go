package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// A barChart is a horizontal bar chart: panels (one per machine) of rows,
// each row a label and one bar per series that has a value, on a shared
// logarithmic or linear x axis.
type barChart struct {
	Title    string
	Subtitle string
	XLabel   string
	Log      bool
	Ref      float64 // a dashed reference line at this x, 0 for none
	RefLabel string
	Series   []series
	Panels   []chartPanel
	Footer   []string
}

type series struct {
	Name  string
	Color string
}

type chartPanel struct {
	Title string
	Note  string // shown under the title, e.g. why the panel is empty
	Rows  []chartRow
}

// chartRow is a group header (Header set, no bars) or a labelled row of bars.
type chartRow struct {
	Label  string
	Header bool
	Bars   []chartBar
}

type chartBar struct {
	Series int     // index into barChart.Series
	V      float64 // the bar's length
	Lo, Hi float64 // whisker (confidence interval); Hi == 0 for none
	Text   string  // printed after the bar
}

// Layout, in pixels.
const (
	chartWidth  = 980
	chartPad    = 16
	fontSize    = 12
	barHeight   = 14
	barGap      = 3
	rowPad      = 9
	headerRow   = 24
	panelTitle  = 26
	axisHeight  = 22
	legendBox   = 12
	legendSpace = 22
)

// textWidth estimates the width of s in the chart's sans-serif font; it is
// generous so that labels never collide.
func textWidth(s string, size float64, bold bool) float64 {
	w := 0.58
	if bold {
		w = 0.64
	}
	return float64(utf8.RuneCountInString(s)) * size * w
}

// scale maps values to x positions.
type scale struct {
	log    bool
	lo, hi float64 // domain: decades (log10) for a log scale
	x0, x1 float64
}

func (s scale) x(v float64) float64 {
	if s.log {
		if v <= 0 {
			return s.x0
		}
		v = math.Log10(v)
	}
	t := (v - s.lo) / (s.hi - s.lo)
	return s.x0 + math.Max(0, math.Min(1, t))*(s.x1-s.x0)
}

type tick struct {
	v     float64
	label string
	major bool
}

func (s scale) ticks() []tick {
	var ts []tick
	if s.log {
		for d := int(s.lo); d <= int(s.hi); d++ {
			v := math.Pow(10, float64(d))
			ts = append(ts, tick{v, formatNumber(v), true})
			if d < int(s.hi) {
				ts = append(ts, tick{2 * v, "", false}, tick{5 * v, "", false})
			}
		}
		return ts
	}
	step := niceStep(s.hi / 8)
	for v := 0.0; v <= s.hi+step/1e6; v += step {
		ts = append(ts, tick{v, formatNumber(v) + "×", true})
	}
	return ts
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// svg renders the chart. The output is deterministic.
func (c *barChart) svg() []byte {
	// Domain and column widths.
	minV, maxV := math.Inf(1), 0.0
	labelW, textW := 100.0, 40.0
	for _, p := range c.Panels {
		for _, r := range p.Rows {
			if !r.Header {
				labelW = math.Max(labelW, textWidth(r.Label, fontSize, false))
			}
			for _, b := range r.Bars {
				minV = math.Min(minV, b.V)
				maxV = math.Max(maxV, b.V)
				if b.Hi > 0 {
					minV = math.Min(minV, b.Lo)
					maxV = math.Max(maxV, b.Hi)
				}
				textW = math.Max(textW, textWidth(b.Text, fontSize-1, false))
			}
		}
	}
	if maxV == 0 {
		minV, maxV = 1, 10
	}
	sc := scale{log: c.Log, x0: chartPad + labelW + 10, x1: chartWidth - chartPad - textW - 8}
	if c.Log {
		sc.lo = math.Floor(math.Log10(math.Max(minV, 1e-9)))
		sc.hi = math.Ceil(math.Log10(maxV))
		if sc.hi <= sc.lo {
			sc.hi = sc.lo + 1
		}
	} else {
		sc.hi = math.Max(maxV, c.Ref) * 1.02
		sc.hi = math.Ceil(sc.hi/niceStep(sc.hi/8)) * niceStep(sc.hi/8)
	}

	var body bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&body, format, a...) }
	y := 30.0
	w(`<text x="%d" y="%.0f" class="title">%s</text>`+"\n", chartPad, y, esc(c.Title))
	if c.Subtitle != "" {
		y += 20
		w(`<text x="%d" y="%.0f" class="sub">%s</text>`+"\n", chartPad, y, esc(c.Subtitle))
	}
	// Legend, wrapped.
	y += 24
	lx := float64(chartPad)
	for i, s := range c.Series {
		iw := legendBox + 6 + textWidth(s.Name, fontSize, false) + 20
		if lx+iw > chartWidth-chartPad && lx > chartPad {
			lx = chartPad
			y += legendSpace
		}
		w(`<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="%s" class="legend" data-series="%d"/>`+"\n",
			lx, y-legendBox+2, legendBox, legendBox, s.Color, i)
		w(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+legendBox+6, y, esc(s.Name))
		lx += iw
	}
	if c.Ref > 0 && c.RefLabel != "" {
		iw := 30 + textWidth(c.RefLabel, fontSize, false)
		if lx+iw > chartWidth-chartPad && lx > chartPad {
			lx = chartPad
			y += legendSpace
		}
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="ref"/>`+"\n", lx, y-4, lx+22, y-4)
		w(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, y, esc(c.RefLabel))
	}
	y += 14

	for _, p := range c.Panels {
		y += panelTitle
		w(`<text x="%d" y="%.1f" class="panel">%s</text>`+"\n", chartPad, y-8, esc(p.Title))
		if p.Note != "" {
			y += 18
			w(`<text x="%d" y="%.1f" class="note">%s</text>`+"\n", chartPad, y-6, esc(p.Note))
		}
		if len(p.Rows) == 0 {
			y += 8
			continue
		}
		top := y
		// Rows first into their own buffer: the grid goes underneath.
		var stripes, rows bytes.Buffer
		stripe := 0
		for _, r := range p.Rows {
			if r.Header {
				y += headerRow
				// A white ground keeps grid lines out of the heading.
				fmt.Fprintf(&rows, `<rect x="%d" y="%.1f" width="%.1f" height="18" fill="#fff"/>`+"\n",
					chartPad, y-headerRow+4, textWidth(r.Label, fontSize, true)+6)
				fmt.Fprintf(&rows, `<text x="%d" y="%.1f" class="group">%s</text>`+"\n", chartPad, y-7, esc(r.Label))
				stripe = 0
				continue
			}
			h := float64(len(r.Bars))*barHeight + float64(max(len(r.Bars)-1, 0))*barGap + 2*rowPad
			if stripe%2 == 0 {
				fmt.Fprintf(&stripes, `<rect x="%d" y="%.1f" width="%d" height="%.1f" class="stripe"/>`+"\n",
					chartPad, y, chartWidth-2*chartPad, h)
			}
			stripe++
			fmt.Fprintf(&rows, `<text x="%.1f" y="%.1f" class="label">%s</text>`+"\n", sc.x0-8, y+h/2+4, esc(r.Label))
			by := y + rowPad
			for _, b := range r.Bars {
				s := c.Series[b.Series]
				xe := sc.x(b.V)
				tip := r.Label + " · " + s.Name + ": " + b.Text
				if b.Hi > 0 {
					tip += fmt.Sprintf(" (95%% CI %s to %s)", formatNumber(b.Lo), formatNumber(b.Hi))
				}
				fmt.Fprintf(&rows, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" class="bar" data-series="%d"><title>%s</title></rect>`+"\n",
					sc.x0, by, math.Max(xe-sc.x0, 1), barHeight, s.Color, b.Series, esc(tip))
				end := xe
				if b.Hi > 0 && b.Hi > b.Lo {
					xl, xh := sc.x(b.Lo), sc.x(b.Hi)
					cy := by + barHeight/2
					fmt.Fprintf(&rows, `<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f" class="ci"/>`+"\n",
						xl, cy, xh, xl, cy-4, cy+4, xh, cy-4, cy+4)
					end = math.Max(end, xh)
				}
				fmt.Fprintf(&rows, `<text x="%.1f" y="%.1f" class="value">%s</text>`+"\n", end+4, by+barHeight-3, esc(b.Text))
				by += barHeight + barGap
			}
			y += h
		}
		// Stripes, grid and reference line under the bars; tick labels
		// below.
		body.Write(stripes.Bytes())
		for _, t := range sc.ticks() {
			x := sc.x(t.v)
			cls := "grid"
			if !t.major {
				cls = "minor"
			}
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="%s"/>`+"\n", x, top, x, y, cls)
			if t.label != "" {
				w(`<text x="%.1f" y="%.1f" class="tick">%s</text>`+"\n", x, y+15, esc(t.label))
			}
		}
		if c.Ref > 0 {
			x := sc.x(c.Ref)
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="ref"/>`+"\n", x, top-4, x, y+2)
		}
		body.Write(rows.Bytes())
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>`+"\n", sc.x0, top, sc.x0, y)
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>`+"\n", sc.x0, y, sc.x1, y)
		y += axisHeight
	}
	y += 14
	w(`<text x="%.1f" y="%.1f" class="xlabel">%s</text>`+"\n", (sc.x0+sc.x1)/2, y, esc(c.XLabel))
	for _, f := range c.Footer {
		y += 17
		w(`<text x="%d" y="%.1f" class="foot">%s</text>`+"\n", chartPad, y, esc(f))
	}
	y += 14

	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="%d" role="img">`+"\n",
		chartWidth, y, chartWidth, y, fontSize)
	fmt.Fprintf(&out, "<title>%s</title>\n", esc(c.Title))
	out.WriteString(`<style>
.title{font-size:17px;font-weight:bold;fill:#111}
.sub{fill:#444}
.panel{font-size:14px;font-weight:bold;fill:#111}
.note{fill:#8a4b00;font-style:italic}
.group{font-weight:bold;fill:#333}
.label{text-anchor:end;fill:#111}
.value{font-size:11px;fill:#111;paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.tick{font-size:11px;fill:#444;text-anchor:middle}
.xlabel{fill:#111;text-anchor:middle;font-weight:bold}
.foot{font-size:11px;fill:#555}
.stripe{fill:#f4f6f8}
.grid{stroke:#c9ced4;stroke-width:1}
.minor{stroke:#e3e6ea;stroke-width:1;stroke-dasharray:2 3}
.axis{stroke:#333;stroke-width:1}
.ref{stroke:#c62828;stroke-width:1.5;stroke-dasharray:5 3}
.ci{stroke:#111;stroke-width:1.2;fill:none}
</style>
<rect width="100%" height="100%" fill="#fff"/>
`)
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes()
}

func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
