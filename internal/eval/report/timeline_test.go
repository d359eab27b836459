package report

import (
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

func timelineRun(limiter string, aAlone, aBoth, bBoth float64, wake *float64) result.Run {
	rates := func(f func(k int) float64) []float64 {
		out := make([]float64, 600)
		for k := range out {
			out[k] = f(k)
		}
		return out
	}
	return result.Run{
		Scenario: "borrow-1g", CC: "cubic", Limiter: limiter, DurationSec: 6,
		Groups: []result.Group{{Name: "a", Dir: "egress", LimitBps: 300e6, GoodputBps: 500e6}, {Name: "b", Dir: "egress", LimitBps: 700e6, GoodputBps: 340e6}},
		Timeline: &result.Timeline{WindowSec: 0.01, Source: "IP bytes <counted> on rcv",
			Groups: []result.TimelineGroup{
				{Name: "a", GuaranteeBps: 300e6, CeilBps: 1e9, Lender: "p", LenderBps: 1e9, RatesBps: rates(func(k int) float64 {
					if k < 300 {
						return aAlone * 1e9
					}
					return aBoth * 300e6
				})},
				{Name: "b", GuaranteeBps: 700e6, CeilBps: 1e9, Lender: "p", LenderBps: 1e9, RatesBps: rates(func(k int) float64 {
					if k < 300 {
						return 0
					}
					return bBoth * 700e6
				})},
			},
			Phases: []result.Phase{
				{StartSec: 0, EndSec: 3, Active: []string{"a"}, MeasuredFromSec: 1, MeasuredToSec: 2.8,
					Groups: []result.PhaseGroup{{Name: "a", RateBps: aAlone * 1e9, ShareBps: 1e9, OfShare: aAlone, OfGuarantee: aAlone * 1e9 / 300e6, OfLender: aAlone}}},
				{StartSec: 3, EndSec: 6, Active: []string{"a", "b"}, MeasuredFromSec: 4, MeasuredToSec: 5.8,
					Groups: []result.PhaseGroup{
						{Name: "a", RateBps: aBoth * 300e6, ShareBps: 300e6, OfShare: aBoth, OfGuarantee: aBoth, OfLender: aBoth * 0.3},
						{Name: "b", RateBps: bBoth * 700e6, ShareBps: 700e6, OfShare: bBoth, OfGuarantee: bBoth, OfLender: bBoth * 0.7, Joined: true, WakeMs: wake}}},
			}},
	}
}

func TestTimelineReport(t *testing.T) {
	w1, w2, w3 := 2.0, 38.0, 0.0
	reps := []result.Run{timelineRun("hbm", 0.97, 1.01, 0.99, &w1), timelineRun("hbm", 0.96, 1.00, 0.98, &w2), timelineRun("hbm", 0.98, 1.02, 0.995, &w3)}
	agg := result.Aggregate(reps)
	if s := agg.Stat("phases/2/b/wake_ms"); s == nil || s.Median != 2 || s.Min != 0 || s.Max != 38 {
		t.Errorf("wake spread %+v", s)
	}
	if s := agg.Stat("phases/1/a/of_lender"); s == nil || s.Median != 0.97 || s.Min != 0.96 || s.Max != 0.98 {
		t.Errorf("a alone spread %+v", s)
	}
	// A group that never wakes counts as the phase's length.
	never := result.Aggregate([]result.Run{timelineRun("htb", 0.94, 0.96, 0.5, nil), timelineRun("htb", 0.94, 0.96, 0.5, nil), timelineRun("htb", 0.94, 0.96, 0.95, &w1)})
	if s := never.Stat("phases/2/b/wake_ms"); s == nil || s.Median != 3000 || s.Min != 2 {
		t.Errorf("never-wake spread %+v", s)
	}
	if g := never.Timeline.Phases[1].Groups[1]; g.WakeMs != nil {
		t.Errorf("median wake of two nevers and one 2 ms: %v, want never", *g.WakeMs)
	}
	res := &result.Results{Runs: []result.Run{agg, never}}
	md := render(t, WriteMarkdown, res)
	for _, want := range []string{
		"| cubic | hbm | 1 (0.0-3.0 s) | a | 970 Mbit/s (960–980 Mbit/s) | 0.970 (0.960–0.980) | 3.23",
		"| cubic | hbm | 2 (3.0-6.0 s) | b | 693 Mbit/s (686–696 Mbit/s) | 0.990 (0.980–0.995) | 0.990 (0.980–0.995) | 0.693 (0.686–0.697) | 2 ms (0–38 ms) |",
		"| cubic | htb | 2 (3.0-6.0 s) | b |",
		"never (3000 ms (2–3000 ms))",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	html := render(t, WriteHTML, res)
	// Bar charts, plus a timeline per run.
	if n := wellFormed(t, html); n < 2 || strings.Count(html, `aria-label="Rate per group, 10 ms windows: borrow-1g cubic`) != 2 {
		t.Errorf("%d charts, timeline titles %d", n, strings.Count(html, `aria-label="Rate per group, 10 ms windows`))
	}
	for _, want := range []string{"IP bytes &lt;counted&gt; on rcv", ">a guarantee<", ">lender p 1.00 Gbit/s<"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	svg := string(TimelineSVG(&agg, true))
	if !strings.HasPrefix(svg, `<svg xmlns="http://www.w3.org/2000/svg"`) || wellFormed(t, svg) != 1 || strings.Count(svg, "<path ") != 2 {
		t.Errorf("standalone chart: %.300s", svg)
	}
	if TimelineSVG(&result.Run{}, true) != "" {
		t.Error("chart of a run without a timeline")
	}
}

func TestFairnessTable(t *testing.T) {
	run := timelineRun("hbm", 0.97, 1, 1, nil)
	run.Timeline.Fair = &result.Fair{WindowSec: 0.1, Samples: 200, Within5: 0.915, MedianDev: 0.012, P90Dev: 0.08, LinkUse: 0.95, LinkUseMin: 0.7, LinkWindows: 90}
	md := render(t, WriteMarkdown, &result.Results{Runs: []result.Run{run}})
	if !strings.Contains(md, "| cubic | hbm | 100 ms | 200 | 91.5% | 0.012 | 0.080 | 0.950 | 0.700 |") || strings.Contains(md, "| 1 (0.0-3.0 s) |") {
		t.Errorf("fairness table:\n%s", md)
	}
}
