package result

import (
	"fmt"
	"slices"
)

func (t *Timeline) clone() *Timeline {
	if t == nil {
		return nil
	}
	out := *t
	out.Groups = slices.Clone(t.Groups)
	out.Phases = slices.Clone(t.Phases)
	for i := range out.Phases {
		out.Phases[i].Groups = slices.Clone(t.Phases[i].Groups)
		for j := range out.Phases[i].Groups {
			if w := out.Phases[i].Groups[j].WakeMs; w != nil {
				v := *w
				out.Phases[i].Groups[j].WakeMs = &v
			}
		}
	}
	if t.Fair != nil {
		f := *t.Fair
		out.Fair = &f
	}
	return &out
}

// findPhaseGroup is group name's figures in phase i.
func findPhaseGroup(r *Run, i int, name string) *PhaseGroup {
	if r.Timeline == nil || i >= len(r.Timeline.Phases) {
		return nil
	}
	p := &r.Timeline.Phases[i]
	for j := range p.Groups {
		if p.Groups[j].Name == name {
			return &p.Groups[j]
		}
	}
	return nil
}

// WakeFigure is a joined group's wake as a figure: its time, or, if it
// never held its guarantee, the phase's length (a bound).
func WakeFigure(p *Phase, g *PhaseGroup) float64 {
	if g.WakeMs != nil {
		return *g.WakeMs
	}
	return (p.EndSec - p.StartSec) * 1000
}

// timelineFigures are the phases' figures ("phases/2/b/of_guarantee") and
// the fairness figures ("fair/within_5pct"). Phase figures are headline
// figures unless the timeline has a fairness summary (many phases).
func timelineFigures(run *Run) []figure {
	tl := run.Timeline
	if tl == nil {
		return nil
	}
	var fs []figure
	headline := tl.Fair == nil
	for i, p := range tl.Phases {
		for _, g := range p.Groups {
			name := g.Name
			pf := func(field string, get func(*PhaseGroup) (float64, bool), set func(*PhaseGroup, float64)) {
				fs = append(fs, figure{name: fmt.Sprintf("phases/%d/%s/%s", i+1, name, field), headline: headline,
					get: func(r *Run) (float64, bool) {
						if x := findPhaseGroup(r, i, name); x != nil {
							return get(x)
						}
						return 0, false
					},
					set: func(r *Run, v float64) {
						if x := findPhaseGroup(r, i, name); x != nil {
							set(x, v)
						}
					}})
			}
			pf("rate_bps", func(g *PhaseGroup) (float64, bool) { return g.RateBps, true }, func(g *PhaseGroup, v float64) { g.RateBps = v })
			if g.ShareBps > 0 {
				pf("of_share", func(g *PhaseGroup) (float64, bool) { return g.OfShare, g.ShareBps > 0 }, func(g *PhaseGroup, v float64) { g.OfShare = v })
			}
			if g.OfGuarantee > 0 {
				pf("of_guarantee", func(g *PhaseGroup) (float64, bool) { return g.OfGuarantee, true }, func(g *PhaseGroup, v float64) { g.OfGuarantee = v })
			}
			if g.OfLender > 0 {
				pf("of_lender", func(g *PhaseGroup) (float64, bool) { return g.OfLender, true }, func(g *PhaseGroup, v float64) { g.OfLender = v })
			}
			if g.Joined {
				pf("wake_ms", func(x *PhaseGroup) (float64, bool) {
					return WakeFigure(&tl.Phases[i], x), true
				}, func(x *PhaseGroup, v float64) {
					x.WakeMs = nil
					if p := &tl.Phases[i]; v < (p.EndSec-p.StartSec)*1000 {
						x.WakeMs = &v
					}
				})
			}
		}
	}
	if tl.Fair != nil {
		ff := func(field string, get func(*Fair) float64, set func(*Fair, float64)) {
			fs = append(fs, figure{name: "fair/" + field, headline: true,
				get: func(r *Run) (float64, bool) {
					if r.Timeline == nil || r.Timeline.Fair == nil {
						return 0, false
					}
					return get(r.Timeline.Fair), true
				},
				set: func(r *Run, v float64) {
					if r.Timeline != nil && r.Timeline.Fair != nil {
						set(r.Timeline.Fair, v)
					}
				}})
		}
		ff("within_5pct", func(f *Fair) float64 { return f.Within5 }, func(f *Fair, v float64) { f.Within5 = v })
		ff("median_dev", func(f *Fair) float64 { return f.MedianDev }, func(f *Fair, v float64) { f.MedianDev = v })
		ff("p90_dev", func(f *Fair) float64 { return f.P90Dev }, func(f *Fair, v float64) { f.P90Dev = v })
		ff("link_use", func(f *Fair) float64 { return f.LinkUse }, func(f *Fair, v float64) { f.LinkUse = v })
		ff("link_use_min", func(f *Fair) float64 { return f.LinkUseMin }, func(f *Fair, v float64) { f.LinkUseMin = v })
	}
	return fs
}
