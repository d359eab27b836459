package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"

	"github.com/hbm-dev/hbm/internal/svgplot"
)

// barChart is a grouped bar chart: one cluster of bars per group (a run),
// one bar per series (a class, a counter) in each.
type barChart struct {
	Title  string
	Groups []string // x categories; "\n" splits a label over two lines
	Series []series
	Log    bool                 // logarithmic y axis (values <= 0 are not drawn)
	Format func(float64) string // tick and tooltip labels
	Refs   []ref                // dashed horizontal reference lines
}

type series struct {
	Name   string
	Values []float64 // one per group; NaN: missing
}

type ref struct {
	Value float64
	Label string
}

// The shared chart pieces (internal/svgplot, also used by hbm analyze).
var (
	palette     = svgplot.Palette
	linearTicks = svgplot.LinearTicks
	logTicks    = svgplot.LogTicks
	tickLabel   = svgplot.TickLabel
	esc         = svgplot.Esc
)

const (
	padLeft   = 48 // at least; wider for long tick labels
	padRight  = 16
	padTop    = 30
	plotH     = 200
	minPlotW  = 280
	legendRow = 16
	charW     = 7 // a generous width of an 11px character
)

// svg renders the chart as an inline <svg> element (no xmlns: HTML5 knows
// it, and the report holds no URL at all).
func (c *barChart) svg() template.HTML {
	// The y scale, and the left margin its labels need.
	var vals []float64
	for _, s := range c.Series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && (!c.Log || v > 0) {
				vals = append(vals, v)
			}
		}
	}
	for _, r := range c.Refs {
		vals = append(vals, r.Value)
	}
	var ticks []float64
	var y func(float64) float64
	bottom := float64(padTop + plotH)
	if c.Log {
		lo, hi := math.Inf(1), 0.0
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		ticks = logTicks(lo, hi)
		l0, l1 := math.Log10(ticks[0]), math.Log10(ticks[len(ticks)-1])
		y = func(v float64) float64 {
			v = max(v, ticks[0])
			return bottom - (math.Log10(v)-l0)/(l1-l0)*plotH
		}
	} else {
		hi := 0.0
		for _, v := range vals {
			hi = max(hi, v)
		}
		ticks = linearTicks(hi)
		top := ticks[len(ticks)-1]
		y = func(v float64) float64 { return bottom - max(v, 0)/top*plotH }
	}
	labels := make([]string, len(ticks))
	left := padLeft
	for i, t := range ticks {
		labels[i] = tickLabel(c.Format(t))
		left = max(left, 10+charW*len([]rune(labels[i])))
	}

	// The x layout: clusters spread over at least minPlotW pixels.
	ns := max(len(c.Series), 1)
	gw := max(64, ns*12+16)
	bw := min(24, (gw-16)/ns)
	plotW := max(len(c.Groups)*gw, minPlotW)
	if len(c.Groups) > 0 {
		gw = plotW / len(c.Groups)
	}
	right := left + plotW
	width := right + padRight

	// The legend: items flow left to right under the plot, wrapping.
	type item struct{ x, row int }
	var items []item
	x, row := 0, 0
	for _, s := range c.Series {
		w := 18 + charW*len([]rune(s.Name)) + 14
		if x > 0 && x+w > plotW {
			x, row = 0, row+1
		}
		items = append(items, item{x, row})
		x += w
	}
	legendTop := padTop + plotH + 48 // below the two-line group labels
	height := legendTop + (row+1)*legendRow + 6

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(c.Title))
	p(`<title>%s</title>`, esc(c.Title))
	p(`<text class="title" x="%d" y="18">%s</text>`, left, esc(c.Title))
	if c.Log { // minor grid: 2..9 times each decade
		for _, t := range ticks[:len(ticks)-1] {
			for m := 2.0; m < 10; m++ {
				p(`<line class="minor" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, y(m*t), y(m*t))
			}
		}
	}
	for i, t := range ticks {
		p(`<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, y(t), y(t))
		p(`<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, left-4, y(t)+4, esc(labels[i]))
	}
	for gi, g := range c.Groups {
		x0 := left + gi*gw + (gw-ns*bw)/2
		for si, s := range c.Series {
			if gi >= len(s.Values) {
				continue
			}
			v := s.Values[gi]
			if math.IsNaN(v) || (c.Log && v <= 0) {
				continue
			}
			top := y(v)
			p(`<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s · %s: %s</title></rect>`,
				x0+si*bw, top, bw-1, bottom-top, palette[si%len(palette)],
				esc(strings.ReplaceAll(g, "\n", " ")), esc(s.Name), esc(c.Format(v)))
		}
		cx := left + gi*gw + gw/2
		for li, line := range strings.SplitN(g, "\n", 2) {
			p(`<text class="label" x="%d" y="%.0f" text-anchor="middle">%s</text>`, cx, bottom+14+float64(li*12), esc(line))
		}
	}
	for _, r := range c.Refs {
		ry := y(r.Value)
		p(`<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, ry, ry)
		p(`<text class="reflabel" x="%d" y="%.1f" text-anchor="end">%s</text>`, right-2, ry-3, esc(r.Label))
	}
	p(`<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, left, left, padTop, padTop+plotH)
	p(`<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, left, right, padTop+plotH, padTop+plotH)
	for i, s := range c.Series {
		lx, ly := left+items[i].x, legendTop+items[i].row*legendRow
		p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, lx, ly-10, palette[i%len(palette)])
		p(`<text class="legend" x="%d" y="%d">%s</text>`, lx+16, ly, esc(s.Name))
	}
	p(`</svg>`)
	return template.HTML(b.String()) // every string above went through esc
}
