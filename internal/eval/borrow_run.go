package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hbm-dev/hbm/internal/analyze"
	"github.com/hbm-dev/hbm/internal/eval/report"
	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/workload"
)

// timelineCount is a run's count of each source group's bytes on the wire:
// one packet socket per receiving interface, counting the server ports of
// the groups whose flows arrive there.
type timelineCount struct {
	origin time.Time
	width  time.Duration
	counts []*analyze.Rates
	group  []map[uint16]string // per count: port -> source group
	where  []string
}

// startTimeline starts counting at the receivers, windows from origin.
func (t *topology) startTimeline(eps []*endpoint, origin time.Time) (*timelineCount, error) {
	tc := &timelineCount{origin: origin, width: t.s.Timeline.WindowD}
	byDev := map[devKey]map[uint16]string{}
	var order []devKey
	for _, ep := range eps {
		if ep.http {
			continue
		}
		k := t.dev(t.s.HostOf(ep.to), t.s.HostOf(ep.src))
		if byDev[k] == nil {
			byDev[k] = map[uint16]string{}
			order = append(order, k)
		}
		byDev[k][uint16(ep.port)] = ep.src
	}
	for _, k := range order {
		var ports []uint16
		for p := range byDev[k] {
			ports = append(ports, p)
		}
		r, err := analyze.StartRates(k.ns, k.dev, ports, origin, tc.width)
		if err != nil {
			tc.stop()
			return nil, err
		}
		tc.counts = append(tc.counts, r)
		tc.group = append(tc.group, byDev[k])
		tc.where = append(tc.where, k.host+" on "+k.dev)
	}
	return tc, nil
}

// stop ends the counts and returns each group's bytes per window, the
// time of its first data, and the packets the sockets lost.
func (tc *timelineCount) stop() (bytes map[string][]uint64, first map[string]time.Time, dropped int64, err error) {
	bytes, first = map[string][]uint64{}, map[string]time.Time{}
	for i, r := range tc.counts {
		b, f, st, e := r.Stop()
		if err == nil {
			err = e
		}
		dropped += st.Dropped
		for port, g := range tc.group[i] {
			for len(bytes[g]) < len(b[port]) {
				bytes[g] = append(bytes[g], 0)
			}
			for w, n := range b[port] {
				bytes[g][w] += n
			}
			if ft, ok := f[port]; ok && (first[g].IsZero() || ft.Before(first[g])) {
				first[g] = ft
			}
		}
	}
	tc.counts = nil
	return bytes, first, dropped, err
}

// activeRun runs the flows with active intervals: a client per interval,
// started at its start and stopped at its end, measured over it.
type activeRun struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	results map[*Flow]map[string][]*workload.Result // flow -> source -> one per interval
	errs    []error
	notes   []string
}

// startActive starts the schedule of the active flows, from origin (the
// window's start) to dur after it.
func (t *topology) startActive(ctx context.Context, eps []*endpoint, ccOf func(*Flow) string, origin time.Time, dur time.Duration) *activeRun {
	a := &activeRun{results: map[*Flow]map[string][]*workload.Result{}}
	for i := range t.s.Flows {
		fl := &t.s.Flows[i]
		if len(fl.ActiveD) == 0 {
			continue
		}
		a.results[fl] = map[string][]*workload.Result{}
		for _, src := range fl.From {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				for _, iv := range fl.ActiveD {
					if iv.End > dur {
						a.fail(fmt.Errorf("flow %s: active interval %v-%v ends after the window (%v)", fl.Name, iv.Start, iv.End, dur))
						return
					}
					if err := workload.SleepCtx(ctx, time.Until(origin.Add(iv.Start))); err != nil {
						return
					}
					r, err := t.activeInterval(ctx, fl, src, findEndpoint(eps, fl.To, src), ccOf(fl), origin.Add(iv.End))
					if err != nil {
						a.fail(fmt.Errorf("flow %s from %s, interval %v-%v: %w", fl.Name, src, iv.Start, iv.End, err))
						return
					}
					a.mu.Lock()
					a.results[fl][src] = append(a.results[fl][src], r)
					a.mu.Unlock()
				}
			}()
		}
	}
	return a
}

func (a *activeRun) fail(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}

// activeInterval runs one client of fl from src until end and returns its
// measurement (from when it was ready).
func (t *topology) activeInterval(ctx context.Context, fl *Flow, src string, ep *endpoint, cc string, end time.Time) (*workload.Result, error) {
	c, err := t.startClient(ctx, fl, src, ep, cc, time.Until(end)+30*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	if line, err := c.next(ctx, 15*time.Second); err != nil || line != "ready" {
		return nil, fmt.Errorf("workload client: %q %v", line, err)
	}
	if err := c.send("begin w"); err != nil {
		return nil, err
	}
	werr := workload.SleepCtx(ctx, time.Until(end))
	c.send("end")
	if werr != nil {
		return nil, werr
	}
	line, err := c.next(ctx, 15*time.Second)
	if err != nil {
		return nil, err
	}
	var wr workload.Result
	if err := json.Unmarshal([]byte(line), &wr); err != nil {
		return nil, fmt.Errorf("workload client: %w: %.200q", err, line)
	}
	return &wr, nil
}

// wait waits for the schedule's end and returns, per flow and source, one
// result over the whole window: its goodput the bytes of its intervals
// over the window's length.
func (a *activeRun) wait(window float64) (map[*Flow]map[string]*workload.Result, error) {
	a.wg.Wait()
	if len(a.errs) > 0 {
		return nil, a.errs[0]
	}
	out := map[*Flow]map[string]*workload.Result{}
	for fl, bySrc := range a.results {
		out[fl] = map[string]*workload.Result{}
		for src, rs := range bySrc {
			m := &workload.Result{Duration: window}
			var bits, rttW float64
			for _, r := range rs {
				bits += r.TotalGoodput * r.Duration
				m.Retransmits += r.Retransmits
				m.DeliveredCE += r.DeliveredCE
				m.RTTMax = max(m.RTTMax, r.RTTMax)
				m.RTT += r.RTT * r.Duration
				rttW += r.Duration
				m.Warnings = append(m.Warnings, r.Warnings...)
			}
			if window > 0 {
				m.TotalGoodput = bits / window
				m.Goodput = m.TotalGoodput
			}
			if rttW > 0 {
				m.RTT /= rttW
			}
			out[fl][src] = m
		}
	}
	return out, nil
}

// timelineGroups are the source groups of a scenario's flows (http
// excepted), in the order of the flows.
func timelineGroups(s *Scenario) []string {
	var out []string
	for _, fl := range s.Flows {
		if fl.Kind == "http" {
			continue
		}
		for _, src := range fl.From {
			if !slices.Contains(out, src) {
				out = append(out, src)
			}
		}
	}
	return out
}

// activeIn reports whether group g has a flow running all through [a, b)
// of the window.
func activeIn(s *Scenario, g string, a, b time.Duration) bool {
	for _, fl := range s.Flows {
		if fl.Kind == "http" || !slices.Contains(fl.From, g) {
			continue
		}
		if len(fl.ActiveD) == 0 {
			return true
		}
		for _, iv := range fl.ActiveD {
			if iv.Start <= a && iv.End >= b {
				return true
			}
		}
	}
	return false
}

// phaseBounds are the window's change points: 0, every active interval's
// start and end within the window, and dur.
func phaseBounds(s *Scenario, dur time.Duration) []time.Duration {
	pts := []time.Duration{0, dur}
	for _, fl := range s.Flows {
		for _, iv := range fl.ActiveD {
			for _, p := range []time.Duration{iv.Start, iv.End} {
				if p > 0 && p < dur && !slices.Contains(pts, p) {
					pts = append(pts, p)
				}
			}
		}
	}
	slices.Sort(pts)
	return pts
}

// fairShares is what each active group is due (bits/s): a group without a
// ceiling its limit (0: none); a borrower its weighted max-min share of
// its lender: its guarantee, then of what the lender has left, the higher
// priorities' fill first, in proportion to the guarantees, each up to its
// ceiling.
func fairShares(s *Scenario, active []string) map[string]float64 {
	out := map[string]float64{}
	byLender := map[string][]*Cgroup{}
	var lenders []string
	for _, g := range active {
		c := s.Cgroup(g)
		if c == nil {
			continue
		}
		l := s.lender(c)
		if l == nil {
			out[g] = float64(c.EgressBps)
			continue
		}
		if byLender[l.Name] == nil {
			lenders = append(lenders, l.Name)
		}
		byLender[l.Name] = append(byLender[l.Name], c)
	}
	for _, ln := range lenders {
		cs := byLender[ln]
		left := float64(s.Cgroup(ln).EgressBps)
		for _, c := range cs {
			out[c.Name] = float64(c.EgressBps)
			left -= float64(c.EgressBps)
		}
		for prio := range Priorities {
			if left <= 0 {
				break
			}
			var cls []*Cgroup
			for _, c := range cs {
				if priorityOf(c) == prio {
					cls = append(cls, c)
				}
			}
			left -= waterfill(cls, left, out)
		}
	}
	return out
}

// waterfill gives up to extra more to cs in proportion to their
// guarantees, each up to its ceiling, adding to out; it returns what it
// gave.
func waterfill(cs []*Cgroup, extra float64, out map[string]float64) float64 {
	room := func(c *Cgroup) float64 { return float64(c.EgressCeilBps) - float64(c.EgressBps) }
	cs = slices.Clone(cs)
	sort.Slice(cs, func(i, j int) bool {
		return room(cs[i])/float64(cs[i].EgressBps) < room(cs[j])/float64(cs[j].EgressBps)
	})
	given := 0.0
	for i, c := range cs {
		var w float64
		for _, o := range cs[i:] {
			w += float64(o.EgressBps)
		}
		// Each of the rest at x per guarantee bit; the first fills first.
		x := (extra - given) / w
		if x*float64(c.EgressBps) >= room(c) {
			out[c.Name] += room(c)
			given += room(c)
			continue
		}
		for _, o := range cs[i:] {
			out[o.Name] += x * float64(o.EgressBps)
		}
		return extra
	}
	return given
}

// wakeTail is the end of a phase the figures leave out (the next change's
// clients starting).
const wakeTail = 200 * time.Millisecond

// buildTimeline turns the counted bytes into the run's timeline: each
// group's rate per window, the phases' figures, the fairness summary.
func buildTimeline(s *Scenario, dur time.Duration, bytes map[string][]uint64, first map[string]time.Time, origin time.Time) *result.Timeline {
	spec := s.Timeline
	w := spec.WindowD
	ws := w.Seconds()
	nWin := int(dur / w)
	tl := &result.Timeline{WindowSec: ws}
	rates := map[string][]float64{}
	for _, g := range timelineGroups(s) {
		tg := result.TimelineGroup{Name: g, RatesBps: make([]float64, nWin)}
		for k := 0; k < nWin && k < len(bytes[g]); k++ {
			tg.RatesBps[k] = float64(bytes[g][k]) * 8 / ws
		}
		if c := s.Cgroup(g); c != nil {
			tg.GuaranteeBps, tg.CeilBps = c.EgressBps, c.EgressCeilBps
			if l := s.lender(c); l != nil {
				tg.Priority, tg.Lender, tg.LenderBps = Priorities[priorityOf(c)], l.Name, l.EgressBps
			}
		}
		rates[g] = tg.RatesBps
		tl.Groups = append(tl.Groups, tg)
	}
	// mean is group g's rate over windows [k0, k1).
	mean := func(g string, k0, k1 int) float64 {
		k0, k1 = max(k0, 0), min(k1, nWin)
		if k1 <= k0 {
			return 0
		}
		sum := 0.0
		for _, v := range rates[g][k0:k1] {
			sum += v
		}
		return sum / float64(k1-k0)
	}
	winAt := func(d time.Duration) int { return int((d + w - 1) / w) } // the first window starting at or after d
	var dev []float64
	var within int
	var use []float64
	bounds := phaseBounds(s, dur)
	for i := 0; i+1 < len(bounds); i++ {
		a, b := bounds[i], bounds[i+1]
		ph := result.Phase{StartSec: a.Seconds(), EndSec: b.Seconds()}
		for _, g := range timelineGroups(s) {
			if activeIn(s, g, a, b) {
				ph.Active = append(ph.Active, g)
			}
		}
		share := fairShares(s, ph.Active)
		k0, k1 := winAt(a+spec.SettleD), int((b-wakeTail)/w)
		if k1 > k0 {
			ph.MeasuredFromSec, ph.MeasuredToSec = float64(k0)*ws, float64(k1)*ws
		}
		for _, g := range ph.Active {
			c := s.Cgroup(g)
			pg := result.PhaseGroup{Name: g, ShareBps: share[g]}
			if k1 > k0 {
				pg.RateBps = mean(g, k0, k1)
				if pg.ShareBps > 0 {
					pg.OfShare = pg.RateBps / pg.ShareBps
				}
				if c != nil && c.EgressBps > 0 {
					pg.OfGuarantee = pg.RateBps / float64(c.EgressBps)
				}
				if l := lenderOf(s, c); l != nil {
					pg.OfLender = pg.RateBps / float64(l.EgressBps)
				}
			}
			if i > 0 && !activeIn(s, g, bounds[i-1], a) && c != nil && c.EgressBps > 0 {
				pg.Joined = true
				pg.WakeMs = wake(rates[g], ws, a, b, first[g], origin, float64(c.EgressBps))
			}
			ph.Groups = append(ph.Groups, pg)
		}
		tl.Phases = append(tl.Phases, ph)
		// Fairness, in windows of FairWindow from the settle on.
		if spec.FairWindowD == 0 {
			continue
		}
		per := int(spec.FairWindowD / w)
		for f0 := k0; f0+per <= int(b/w); f0 += per {
			for _, g := range ph.Active {
				if share[g] <= 0 {
					continue
				}
				d := math.Abs(mean(g, f0, f0+per)/share[g] - 1)
				dev = append(dev, d)
				if d <= 0.05 {
					within++
				}
			}
			for _, ln := range lendersOf(s, ph.Active) {
				var demand, got float64
				for _, g := range ph.Active {
					if c := s.Cgroup(g); c != nil && s.lender(c) != nil && s.lender(c).Name == ln.Name {
						demand += float64(c.EgressCeilBps)
						got += mean(g, f0, f0+per)
					}
				}
				if demand >= float64(ln.EgressBps) {
					use = append(use, got/float64(ln.EgressBps))
				}
			}
		}
	}
	if spec.FairWindowD > 0 {
		f := &result.Fair{WindowSec: spec.FairWindowD.Seconds(), Samples: len(dev), LinkWindows: len(use)}
		if len(dev) > 0 {
			f.Within5 = float64(within) / float64(len(dev))
			sort.Float64s(dev)
			f.MedianDev = result.Median(dev)
			f.P90Dev = dev[min(len(dev)-1, int(math.Ceil(0.9*float64(len(dev))))-1)]
		}
		if len(use) > 0 {
			sum := 0.0
			for _, u := range use {
				sum += u
			}
			f.LinkUse, f.LinkUseMin = sum/float64(len(use)), slices.Min(use)
		}
		tl.Fair = f
	}
	return tl
}

// lenderOf is c's lender (nil for a host or a group without a ceiling).
func lenderOf(s *Scenario, c *Cgroup) *Cgroup {
	if c == nil {
		return nil
	}
	return s.lender(c)
}

// lendersOf are the lenders of the active groups.
func lendersOf(s *Scenario, active []string) []*Cgroup {
	var out []*Cgroup
	for _, g := range active {
		if l := lenderOf(s, s.Cgroup(g)); l != nil && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// wake is how long (ms) after its first data in phase [a, b) a group holds
// 0.9 of guarantee for three windows in a row (as scripts/bench-borrow.sh
// measures it); nil if it never does. Its first data is its first packet
// of over 1000 bytes if that falls in the phase (its first start), else
// the first window of the phase with over 1500 bytes.
func wake(rates []float64, ws float64, a, b time.Duration, first, origin time.Time, guarantee float64) *float64 {
	t0 := -1.0 // seconds from the origin
	if !first.IsZero() {
		if f := first.Sub(origin); f >= a-50*time.Millisecond && f < b {
			t0 = f.Seconds()
		}
	}
	if t0 < 0 {
		for k := int(a.Seconds() / ws); k < len(rates) && float64(k)*ws < b.Seconds(); k++ {
			if rates[k]*ws/8 > 1500 {
				t0 = float64(k) * ws
				break
			}
		}
	}
	if t0 < 0 {
		return nil
	}
	run := 0
	for k := int(math.Floor(t0/ws + 1e-9)); k < len(rates) && float64(k+1)*ws <= b.Seconds(); k++ {
		if rates[k] >= 0.9*guarantee {
			run++
			if run == 3 {
				ms := max((float64(k-2)*ws-t0)*1000, 0)
				return &ms
			}
		} else {
			run = 0
		}
	}
	return nil
}

// timelineSource says where a timeline's bytes were counted.
func (tc *timelineCount) source() string {
	return "Frame bytes of the TCP and UDP packets received toward each group's server ports (a GSO packet as its segments, each with its headers), counted on " + strings.Join(tc.where, ", ")
}

// timelineLine sums a timeline up for the progress line: each phase's
// groups as shares of their due (and of their guarantee or lender), the
// wakes, the fairness figures.
func timelineLine(tl *result.Timeline) []string {
	if tl == nil {
		return nil
	}
	if tl.Fair != nil {
		f := tl.Fair
		return []string{fmt.Sprintf("within 5%% of the fair share %.2f of %d group-windows of %v s (median deviation %.3f), lenders' use %.3f (min %.3f)",
			f.Within5, f.Samples, f.WindowSec, f.MedianDev, f.LinkUse, f.LinkUseMin)}
	}
	var out []string
	for i, p := range tl.Phases {
		var gs []string
		for _, g := range p.Groups {
			x := fmt.Sprintf("%s %s", g.Name, fmtBps(g.RateBps))
			if g.OfShare > 0 {
				x += fmt.Sprintf(" (%.3f of due", g.OfShare)
				if g.OfLender > 0 {
					x += fmt.Sprintf(", %.3f of lender", g.OfLender)
				}
				if g.OfGuarantee > 0 {
					x += fmt.Sprintf(", %.3f of guarantee", g.OfGuarantee)
				}
				x += ")"
			}
			if g.Joined {
				if g.WakeMs != nil {
					x += fmt.Sprintf(" wake %.0fms", *g.WakeMs)
				} else {
					x += " wake never"
				}
			}
			gs = append(gs, x)
		}
		out = append(out, fmt.Sprintf("phase %d: %s", i+1, strings.Join(gs, ", ")))
	}
	return out
}

// writeTimelineCharts writes each run's timeline chart to
// dir/charts/SCENARIO[-VARIANT]-CC-LIMITER.svg.
func writeTimelineCharts(dir string, res *result.Results) error {
	charts := filepath.Join(dir, "charts")
	made := false
	for i := range res.Runs {
		run := &res.Runs[i]
		if run.Timeline == nil {
			continue
		}
		if !made {
			if err := mkdirNoFollow(charts); err != nil {
				return err
			}
			made = true
		}
		parts := []string{run.Scenario, run.Variant, run.CC, run.Limiter}
		if run.IPv6 {
			parts = append(parts, "ipv6")
		}
		parts = slices.DeleteFunc(parts, func(s string) bool { return s == "" })
		name := strings.NewReplacer("/", "_", " ", "_", "=", "").Replace(strings.Join(parts, "-")) + ".svg"
		svg := report.TimelineSVG(run, true)
		if err := writeFileNoFollow(charts, name, func(w io.Writer) error {
			_, err := io.WriteString(w, string(svg))
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
