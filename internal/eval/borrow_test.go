package eval

import (
	"math"
	"strings"
	"testing"
	"time"
)

const borrowScenario = `
name: borrow
duration: 6s
warmup: 0s
quick: {duration: 6s, warmup: 0s}
hosts: [snd, rcv]
links:
  - name: wire
    hosts: [snd, rcv]
cgroups:
  - name: p
    host: snd
    egress: 1gbit
  - name: a
    host: snd
    parent: p
    egress: 300mbit
    egress_ceil: 1gbit
  - name: b
    host: snd
    parent: p
    egress: 700mbit
    egress_ceil: 1gbit
    priority: batch
flows:
  - {kind: stream, count: 4, from: a, to: rcv}
  - {kind: stream, count: 4, from: b, to: rcv, active: ["3s-6s"]}
timeline:
  window: 10ms
  settle: 1s
`

func parseBorrow(t *testing.T, doc string) *Scenario {
	t.Helper()
	s, err := Parse("borrow.yaml", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseBorrow(t *testing.T) {
	s := parseBorrow(t, borrowScenario)
	a, b := s.Cgroup("a"), s.Cgroup("b")
	if a.EgressBps != 300e6 || a.EgressCeilBps != 1e9 || s.lender(a) != s.Cgroup("p") || priorityOf(a) != 1 || priorityOf(b) != 2 || htbPrio(b) != 7 {
		t.Errorf("a %+v, b %+v", a, b)
	}
	if got := s.labPath("b"); got != "p/b" {
		t.Errorf("lab path of b %q, want p/b", got)
	}
	if got := cgroupNames(s); strings.Join(got, " ") != "p p/a p/b" {
		t.Errorf("lab cgroups %v", got)
	}
	if iv := s.Flows[1].ActiveD; len(iv) != 1 || iv[0] != (Interval{3 * time.Second, 6 * time.Second}) {
		t.Errorf("active %v", iv)
	}
	if tl := s.Timeline; tl.WindowD != 10*time.Millisecond || tl.SettleD != time.Second || tl.FairWindowD != 0 {
		t.Errorf("timeline %+v", tl)
	}
	if got := phaseBounds(s, 6*time.Second); len(got) != 3 || got[1] != 3*time.Second {
		t.Errorf("phase bounds %v", got)
	}
	if activeIn(s, "b", 0, 3*time.Second) || !activeIn(s, "b", 3*time.Second, 6*time.Second) || !activeIn(s, "a", 0, 3*time.Second) {
		t.Error("activeIn wrong")
	}
	if as := s.limitedAncestors(b); len(as) != 1 || as[0].Name != "p" {
		t.Errorf("ancestors of b %v", as)
	}
}

func TestParseBorrowBad(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(borrowScenario, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(borrowScenario, old, new, 1)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"unknown parent", edit("parent: p\n    egress: 300mbit", "parent: q\n    egress: 300mbit"), `borrow.yaml:16: cgroups[1].parent: unknown group "q"`},
		{"parent after child", strings.Replace(edit("  - name: p\n    host: snd\n    egress: 1gbit\n", ""), "flows:", "  - {name: p, host: snd, egress: 1gbit}\nflows:", 1), `cgroups[0].parent: unknown group "p"`},
		{"own parent", edit("parent: p\n    egress: 300mbit", "parent: a\n    egress: 300mbit"), `cgroups[1].parent: a group cannot be its own parent`},
		{"parent on another host", edit("  - name: p\n    host: snd", "  - name: p\n    host: rcv"), `cgroups[1].parent: "p" is on host "rcv", "a" on "snd"`},
		{"ceil without parent", edit("    parent: p\n    egress: 300mbit\n", "    egress: 300mbit\n"), `cgroups[1].egress_ceil: a ceiling borrows from the parent's egress limit`},
		{"ceil without lender", edit("    egress: 1gbit\n", "    ingress: 1gbit\n"), `cgroups[1].egress_ceil: a ceiling borrows`},
		{"ceil below rate", edit("egress_ceil: 1gbit\n  - name: b", "egress_ceil: 200mbit\n  - name: b"), `borrow.yaml:18: cgroups[1].egress_ceil: 200mbit below the guarantee 300mbit`},
		{"ceil bad rate", edit("egress_ceil: 1gbit\n  - name: b", "egress_ceil: lots\n  - name: b"), `cgroups[1].egress_ceil: invalid rate "lots"`},
		{"ceil without rate", edit("    egress: 300mbit\n", ""), `cgroups[1].egress_ceil: a ceiling needs a guarantee`},
		{"bad priority", edit("priority: batch", "priority: urgent"), `borrow.yaml:24: cgroups[2].priority: unknown priority "urgent" (latency, normal, batch)`},
		{"priority without ceil", edit("    egress_ceil: 1gbit\n    priority: batch\n", "    priority: batch\n"), `cgroups[2].priority: a priority orders borrowing: it needs egress_ceil`},
		{"ceil in hbm_args", edit("priority: batch", "priority: batch\n    hbm_args: [--egress-ceil=2gbit]"), `cgroups[2].hbm_args[0]`},
		{"flow from a lender", edit("from: a, to: rcv}", "from: p, to: rcv}"), `flows[0].from[0]: group "p" has groups nested in it`},
		{"active on rpc", edit("{kind: stream, count: 4, from: b", "{kind: rpc, size: 10KB, from: b"), `flows[1].active: only a stream flow has active intervals`},
		{"active not an interval", edit(`["3s-6s"]`, `["3s"]`), `borrow.yaml:27: flows[1].active[0]: "3s": want START-END`},
		{"active bad duration", edit(`["3s-6s"]`, `["3-6s"]`), `flows[1].active[0]: "3-6s": want START-END`},
		{"active backwards", edit(`["3s-6s"]`, `["4s-3s"]`), `flows[1].active[0]: "4s-3s": an interval starts at 0 or later and lasts at least 100ms`},
		{"active overlapping", edit(`["3s-6s"]`, `["1s-3s", "2s-4s"]`), `flows[1].active[1]: "2s-4s" starts before the interval before it ends`},
		{"active past the window", edit(`["3s-6s"]`, `["3s-7s"]`), `flows[1].active[0]: "3s-7s" ends after the window (duration 6s)`},
		{"active past the quick window", edit("quick: {duration: 6s", "quick: {duration: 4s"), `flows[1].active[0]: "3s-6s" ends after the quick run's window (quick.duration 4s)`},
		{"timeline window", edit("window: 10ms", "window: 2s"), `timeline.window: 2s out of range 1ms..1s`},
		{"timeline settle", edit("settle: 1s", "settle: soon"), `timeline.settle: bad duration "soon"`},
		{"fair window", edit("settle: 1s", "settle: 1s\n  fair_window: 15ms"), `timeline.fair_window: 15ms: a multiple of the window (10ms)`},
		{"timeline key", edit("settle: 1s", "setle: 1s"), `unknown key "setle" in timeline`},
	} {
		_, err := Parse("borrow.yaml", strings.NewReader(c.doc))
		if err == nil {
			t.Errorf("%s: parsed", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestFairShares(t *testing.T) {
	s := parseBorrow(t, borrowScenario)
	near := func(got map[string]float64, want map[string]float64) bool {
		for k, v := range want {
			if math.Abs(got[k]-v) > 1 {
				return false
			}
		}
		return len(got) == len(want)
	}
	// Alone: the lender's whole rate (its ceiling). Together: b is batch,
	// a normal; the guarantees fill the lender.
	if got := fairShares(s, []string{"a"}); !near(got, map[string]float64{"a": 1e9}) {
		t.Errorf("a alone: %v", got)
	}
	if got := fairShares(s, []string{"a", "b"}); !near(got, map[string]float64{"a": 300e6, "b": 700e6}) {
		t.Errorf("a and b: %v", got)
	}
	// Guarantees 100 and 100 of 400: the latency group takes what is left.
	prio := strings.NewReplacer("1gbit", "400mbit", "300mbit", "100mbit", "700mbit", "100mbit").Replace(borrowScenario)
	prio = strings.Replace(prio, "egress_ceil: 400mbit\n  - name: b", "egress_ceil: 400mbit\n    priority: latency\n  - name: b", 1)
	s = parseBorrow(t, prio)
	if got := fairShares(s, []string{"a", "b"}); !near(got, map[string]float64{"a": 300e6, "b": 100e6}) {
		t.Errorf("latency a and batch b: %v", got)
	}
	// One class: in proportion to the guarantees, up to the ceilings.
	three := strings.Replace(borrowScenario, "    priority: batch\n", "", 1)
	three = strings.Replace(three, "egress: 1gbit\n", "egress: 2gbit\n", 1)
	three = strings.Replace(three, "flows:", `  - {name: c, host: snd, parent: p, egress: 100mbit, egress_ceil: 2gbit}
flows:
  - {kind: stream, from: c, to: rcv}`, 1)
	s = parseBorrow(t, three)
	got := fairShares(s, []string{"a", "b", "c"})
	// Weighted max-min over 2gbit: 900mbit left after the guarantees, x
	// more per guarantee bit; b's room (300) caps it at x = 3/7 < 900/1100,
	// so b stops at its ceiling and a and c share the other 600 in 3:1.
	want := map[string]float64{"a": 300e6 + 450e6, "b": 1e9, "c": 100e6 + 150e6}
	if !near(got, want) {
		t.Errorf("three groups: %v, want %v", got, want)
	}
	var sum float64
	for _, v := range got {
		sum += v
	}
	if math.Abs(sum-2e9) > 1 {
		t.Errorf("three groups sum to %v, want the lender's 2e9", sum)
	}
}

func TestWake(t *testing.T) {
	ws := 0.01
	origin := time.Unix(1000, 0)
	rates := make([]float64, 600)
	// b starts at 3.005 s: 2 windows at half its guarantee, then at it;
	// a dip of one window first.
	for k := 300; k < 600; k++ {
		rates[k] = 700e6
	}
	rates[300], rates[301], rates[303] = 350e6, 350e6, 100e6
	first := origin.Add(3005 * time.Millisecond)
	w := wake(rates, ws, 3*time.Second, 6*time.Second, first, origin, 700e6)
	if w == nil {
		t.Fatal("never woke")
	}
	if math.Abs(*w-(3.04-3.005)*1000) > 1e-6 {
		t.Errorf("wake %.3f ms, want 35 (from the first data at 3.005 s to the window at 3.04 s)", *w)
	}
	// Never at 0.9 of its guarantee: nil.
	for k := 300; k < 600; k++ {
		rates[k] = 600e6
	}
	if w := wake(rates, ws, 3*time.Second, 6*time.Second, first, origin, 700e6); w != nil {
		t.Errorf("wake %v at 0.86 of the guarantee, want never", *w)
	}
	// Without a first packet in the phase: the phase's first window with data.
	for k := 320; k < 600; k++ {
		rates[k] = 700e6
	}
	if w := wake(rates, ws, 3*time.Second, 6*time.Second, time.Time{}, origin, 700e6); w == nil || math.Abs(*w-200) > 1e-6 {
		t.Errorf("wake %v, want 200 ms (data from 3.0 s, at the guarantee from 3.2 s)", w)
	}
}

func TestBuildTimeline(t *testing.T) {
	s := parseBorrow(t, borrowScenario)
	origin := time.Unix(1000, 0)
	perWin := func(bps float64) uint64 { return uint64(bps / 8 * 0.01) }
	bytes := map[string][]uint64{"a": make([]uint64, 600), "b": make([]uint64, 600)}
	for k := 0; k < 600; k++ {
		if k < 300 {
			bytes["a"][k] = perWin(970e6)
		} else {
			bytes["a"][k], bytes["b"][k] = perWin(303e6), perWin(693e6)
		}
	}
	first := map[string]time.Time{"a": origin.Add(-20 * time.Millisecond), "b": origin.Add(3 * time.Second)}
	tl := buildTimeline(s, 6*time.Second, bytes, first, origin)
	if len(tl.Groups) != 2 || len(tl.Groups[0].RatesBps) != 600 || tl.Groups[1].Lender != "p" || tl.Groups[1].Priority != "batch" {
		t.Fatalf("groups %+v", tl.Groups)
	}
	if len(tl.Phases) != 2 {
		t.Fatalf("phases %+v", tl.Phases)
	}
	p1, p2 := tl.Phases[0], tl.Phases[1]
	if len(p1.Groups) != 1 || math.Abs(p1.Groups[0].OfLender-0.97) > 0.002 || math.Abs(p1.Groups[0].OfShare-0.97) > 0.002 || p1.MeasuredFromSec != 1 || math.Abs(p1.MeasuredToSec-2.8) > 1e-9 {
		t.Errorf("phase 1 %+v", p1)
	}
	if len(p2.Groups) != 2 || math.Abs(p2.Groups[0].OfGuarantee-1.01) > 0.002 || math.Abs(p2.Groups[1].OfGuarantee-0.99) > 0.002 || p2.Groups[0].Joined {
		t.Errorf("phase 2 %+v", p2)
	}
	if b := p2.Groups[1]; !b.Joined || b.WakeMs == nil || *b.WakeMs != 0 {
		t.Errorf("b's wake %+v", b)
	}
	if tl.Fair != nil {
		t.Errorf("fairness without fair_window: %+v", tl.Fair)
	}
	// In 100 ms windows, a at 0.97 of its due alone is within 5%; b at
	// 0.5 of its due for the first half second of phase 2 is not.
	s.Timeline.FairWindowD, s.Timeline.SettleD = 100*time.Millisecond, 0
	for k := 300; k < 350; k++ {
		bytes["b"][k] = perWin(350e6)
	}
	tl = buildTimeline(s, 6*time.Second, bytes, first, origin)
	f := tl.Fair
	// Phase 1: 30 windows of a; phase 2: 30 windows of a and b, 5 of b out.
	if f == nil || f.Samples != 90 || math.Abs(f.Within5-85.0/90) > 1e-9 || f.LinkWindows != 60 || f.LinkUseMin > 0.66 || f.LinkUse < 0.9 {
		t.Errorf("fairness %+v", f)
	}
}
