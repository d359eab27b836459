package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"

	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/svgplot"
)

// fmtShare3 is a share with three decimals (a borrower's rate of its due).
func fmtShare3(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return dash
	}
	return fmt.Sprintf("%.3f", v)
}

func fmtWake(ms float64) string {
	if math.IsNaN(ms) {
		return dash
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// timelineTables are a scenario's phase table (each phase's groups: rate,
// of their due, guarantee and lender, the wake of those that join) or,
// with a fairness summary, the fairness table.
func (s *scenario) timelineTables() []table {
	var runs []*result.Run
	for _, run := range s.Done {
		if run.Timeline != nil {
			runs = append(runs, run)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	nl := len(s.leadHeader())
	pt := table{Title: "Phases (rates on the wire at the receiver; due: the weighted max-min share; wake: from the first data to 0.9 of the guarantee for three windows in a row)",
		Header: append(s.leadHeader(), "phase", "group", "rate", "of due", "of guarantee", "of lender", "wake")}
	pt.Num = numCols(len(pt.Header), nl+2)
	ft := table{Title: "Fairness (each active group's rate against its weighted max-min share, in windows from the settle after each change; lenders' use while their borrowers' ceilings exceed them)",
		Header: append(s.leadHeader(), "window", "group-windows", "within 5%", "median |dev|", "P90 |dev|", "lenders' use", "least use")}
	ft.Num = numCols(len(ft.Header), nl)
	for _, run := range runs {
		tl := run.Timeline
		if tl.Fair != nil {
			fp := func(f func(*result.Fair) float64) func(*result.Run) float64 {
				return func(r *result.Run) float64 {
					if r.Timeline == nil || r.Timeline.Fair == nil {
						return math.NaN()
					}
					return f(r.Timeline.Fair)
				}
			}
			ft.add(append(s.lead(run), fmtDur(tl.Fair.WindowSec*1e6), fmtCount(uint64(tl.Fair.Samples)),
				cell(run, fp(func(f *result.Fair) float64 { return f.Within5 }), fmtPct),
				cell(run, fp(func(f *result.Fair) float64 { return f.MedianDev }), fmtShare3),
				cell(run, fp(func(f *result.Fair) float64 { return f.P90Dev }), fmtShare3),
				cell(run, fp(func(f *result.Fair) float64 { return f.LinkUse }), fmtShare3),
				cell(run, fp(func(f *result.Fair) float64 { return f.LinkUseMin }), fmtShare3))...)
			continue
		}
		for i, p := range tl.Phases {
			for _, g := range p.Groups {
				name := g.Name
				pick := func(f func(*result.Phase, *result.PhaseGroup) float64) func(*result.Run) float64 {
					return func(r *result.Run) float64 {
						if r.Timeline == nil || i >= len(r.Timeline.Phases) {
							return math.NaN()
						}
						rp := &r.Timeline.Phases[i]
						for j := range rp.Groups {
							if rp.Groups[j].Name == name {
								return f(rp, &rp.Groups[j])
							}
						}
						return math.NaN()
					}
				}
				wake := dash
				if g.Joined {
					wake = cell(run, pick(func(p *result.Phase, g *result.PhaseGroup) float64 { return result.WakeFigure(p, g) }), fmtWake)
					if g.WakeMs == nil {
						wake = "never (" + wake + ")"
					}
				}
				pt.add(append(s.lead(run), fmt.Sprintf("%d (%.1f-%.1f s)", i+1, p.StartSec, p.EndSec), name,
					cell(run, pick(func(_ *result.Phase, g *result.PhaseGroup) float64 { return g.RateBps }), fmtRate),
					cell(run, pick(func(_ *result.Phase, g *result.PhaseGroup) float64 { return g.OfShare }), fmtShare3),
					cell(run, pick(func(_ *result.Phase, g *result.PhaseGroup) float64 { return g.OfGuarantee }), fmtShare3),
					cell(run, pick(func(_ *result.Phase, g *result.PhaseGroup) float64 { return g.OfLender }), fmtShare3),
					wake)...)
			}
		}
	}
	var out []table
	if len(pt.Rows) > 0 {
		out = append(out, pt)
	}
	if len(ft.Rows) > 0 {
		out = append(out, ft)
	}
	return out
}

// Timeline chart layout.
const (
	tlPlotW = 720
	tlPlotH = 220
)

// TimelineSVG draws a run's per-group rates over its window (one line per
// group, each window's rate), with dashed lines at the guarantees and the
// lenders' rates (for up to four groups) and dotted ones at the phases'
// starts. Standalone adds what a file of its own needs (the SVG namespace
// and the charts' CSS).
func TimelineSVG(run *result.Run, standalone bool) template.HTML {
	tl := run.Timeline
	if tl == nil || len(tl.Groups) == 0 {
		return ""
	}
	esc := svgplot.Esc
	n, hi := 0, 0.0
	for _, g := range tl.Groups {
		n = max(n, len(g.RatesBps))
		for _, v := range g.RatesBps {
			hi = max(hi, v)
		}
	}
	type ref struct {
		v     float64
		label string
	}
	var refs []ref
	if len(tl.Groups) <= 4 {
		seen := map[uint64]bool{}
		for _, g := range tl.Groups {
			if g.LenderBps > 0 && !seen[g.LenderBps] {
				seen[g.LenderBps] = true
				refs = append(refs, ref{float64(g.LenderBps), "lender " + g.Lender + " " + fmtRate(float64(g.LenderBps))})
			}
		}
		for _, g := range tl.Groups {
			if g.GuaranteeBps > 0 {
				refs = append(refs, ref{float64(g.GuaranteeBps), g.Name + " guarantee"})
			}
		}
	}
	for _, r := range refs {
		hi = max(hi, r.v)
	}
	ticks := svgplot.LinearTicks(hi / 1e6) // Mbit/s
	top := ticks[len(ticks)-1] * 1e6
	labels := make([]string, len(ticks))
	left := padLeft
	for i, t := range ticks {
		labels[i] = svgplot.TickLabel(fmt.Sprintf("%g", t))
		left = max(left, 10+charW*len([]rune(labels[i])))
	}
	right := left + tlPlotW
	bottom := float64(padTop + tlPlotH)
	y := func(v float64) float64 { return bottom - max(v, 0)/top*tlPlotH }
	secs := float64(n) * tl.WindowSec
	x := func(t float64) float64 { return float64(left) + t/max(secs, 1e-9)*tlPlotW }
	legendTop := padTop + tlPlotH + 40
	items := 0
	for _, g := range tl.Groups {
		items += 18 + charW*len([]rune(g.Name)) + 14
	}
	rows := items/tlPlotW + 1
	height := legendTop + rows*legendRow + 6
	width := right + padRight

	title := fmt.Sprintf("Rate per group, %g ms windows: %s %s %s", tl.WindowSec*1000, run.ScenarioLabel(), run.CC, run.Limiter)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if standalone {
		p(`<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
		p(`<style>%s</style>`, svgplot.CSS)
	} else {
		p(`<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, width, height, width, height, esc(title))
	}
	p(`<title>%s</title>`, esc(title))
	p(`<text class="title" x="%d" y="18">%s</text>`, left, esc(title))
	for i, t := range ticks {
		p(`<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, y(t*1e6), y(t*1e6))
		p(`<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, left-4, y(t*1e6)+4, esc(labels[i]))
	}
	p(`<text class="label" x="4" y="%d">Mbit/s</text>`, padTop-4)
	for _, t := range svgplot.LinearTicks(secs) {
		if t > secs+1e-9 {
			continue
		}
		p(`<text class="label" x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, x(t), bottom+14, esc(svgplot.TickLabel(fmt.Sprintf("%g s", t))))
	}
	for _, ph := range tl.Phases {
		if ph.StartSec > 0 {
			p(`<line class="grid" stroke-dasharray="2 2" x1="%.1f" x2="%.1f" y1="%d" y2="%.1f"/>`, x(ph.StartSec), x(ph.StartSec), padTop, bottom)
		}
	}
	for _, r := range refs {
		p(`<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, y(r.v), y(r.v))
		p(`<text class="reflabel" x="%d" y="%.1f" text-anchor="end">%s</text>`, right-2, y(r.v)-3, esc(r.label))
	}
	lx, row := 0, 0
	for gi, g := range tl.Groups {
		color := svgplot.Palette[gi%len(svgplot.Palette)]
		var path strings.Builder
		for k, v := range g.RatesBps {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x((float64(k)+0.5)*tl.WindowSec), y(v))
		}
		if path.Len() > 0 {
			p(`<path d="%s" fill="none" stroke="%s" stroke-width="1"><title>%s</title></path>`, strings.TrimSpace(path.String()), color, esc(g.Name))
		}
		w := 18 + charW*len([]rune(g.Name)) + 14
		if lx > 0 && lx+w > tlPlotW {
			lx, row = 0, row+1
		}
		ly := legendTop + row*legendRow
		p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, left+lx, ly-10, color)
		p(`<text class="legend" x="%d" y="%d">%s</text>`, left+lx+16, ly, esc(g.Name))
		lx += w
	}
	p(`<line class="axis" x1="%d" x2="%d" y1="%d" y2="%.0f"/>`, left, left, padTop, bottom)
	p(`<line class="axis" x1="%d" x2="%d" y1="%.0f" y2="%.0f"/>`, left, right, bottom, bottom)
	p(`</svg>`)
	return template.HTML(b.String()) // every string above went through esc
}
