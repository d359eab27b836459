package result

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// figure is one number of a run: how to read it from a run (ok false when
// the run lacks it), how to write it (nil: derived, such as the run's total
// goodput), and whether Spread reports it.
type figure struct {
	name     string
	get      func(*Run) (float64, bool)
	set      func(*Run, float64)
	headline bool
}

func findGroup(r *Run, name, dir string) *Group {
	for i := range r.Groups {
		if r.Groups[i].Name == name && r.Groups[i].Dir == dir {
			return &r.Groups[i]
		}
	}
	return nil
}

func findClass(r *Run, group, name string) *Class {
	for i := range r.Classes {
		if r.Classes[i].Group == group && r.Classes[i].Name == name {
			return &r.Classes[i]
		}
	}
	return nil
}

func findLink(r *Run, name string) *Link {
	for i := range r.Links {
		if r.Links[i].Name == name {
			return &r.Links[i]
		}
	}
	return nil
}

func round(v float64) uint64 { return uint64(math.Round(max(v, 0))) }

// figures lists the numbers of run (its groups, classes and links).
func figures(run *Run) []figure {
	fs := []figure{
		{name: "duration_s", get: func(r *Run) (float64, bool) { return r.DurationSec, true },
			set: func(r *Run, v float64) { r.DurationSec = v }},
		{name: "goodput_bps", headline: true, get: func(r *Run) (float64, bool) {
			var sum float64
			for _, g := range r.Groups {
				sum += g.GoodputBps
			}
			return sum, len(r.Groups) > 0
		}},
		{name: "cpu/busy_cores", headline: true, get: func(r *Run) (float64, bool) { return r.CPU.BusyCores, true },
			set: func(r *Run, v float64) { r.CPU.BusyCores = v }},
		{name: "cpu/softirq_cores", get: func(r *Run) (float64, bool) { return r.CPU.SoftirqCores, true },
			set: func(r *Run, v float64) { r.CPU.SoftirqCores = v }},
	}
	for _, g := range run.Groups {
		name, dir := g.Name, g.Dir
		gf := func(field string, headline bool, get func(*Group) float64, set func(*Group, float64)) {
			fs = append(fs, figure{name: "groups/" + name + "/" + field, headline: headline,
				get: func(r *Run) (float64, bool) {
					if x := findGroup(r, name, dir); x != nil {
						return get(x), true
					}
					return 0, false
				},
				set: func(r *Run, v float64) {
					if x := findGroup(r, name, dir); x != nil {
						set(x, v)
					}
				}})
		}
		gf("goodput_bps", true, func(g *Group) float64 { return g.GoodputBps }, func(g *Group, v float64) { g.GoodputBps = v })
		if g.LimitBps > 0 {
			gf("of_limit", true, func(g *Group) float64 { return g.GoodputBps / float64(max(g.LimitBps, 1)) }, func(*Group, float64) {})
		}
		if g.WireBps > 0 {
			gf("wire_bps", true, func(g *Group) float64 { return g.WireBps }, func(g *Group, v float64) { g.WireBps = v })
		}
		if g.TxBps > 0 {
			gf("tx_bps", true, func(g *Group) float64 { return g.TxBps }, func(g *Group, v float64) { g.TxBps = v })
		}
		if g.TxPacketBytes > 0 {
			gf("tx_packet_bytes", false, func(g *Group) float64 { return g.TxPacketBytes }, func(g *Group, v float64) { g.TxPacketBytes = v })
		}
		if g.Share > 0 {
			gf("share", true, func(g *Group) float64 { return g.Share }, func(g *Group, v float64) { g.Share = v })
		}
		gf("marked", false, func(g *Group) float64 { return float64(g.Marked) }, func(g *Group, v float64) { g.Marked = round(v) })
		gf("cwr", false, func(g *Group) float64 { return float64(g.CWR) }, func(g *Group, v float64) { g.CWR = round(v) })
		gf("dropped", true, func(g *Group) float64 { return float64(g.Dropped) }, func(g *Group, v float64) { g.Dropped = round(v) })
	}
	for _, c := range run.Classes {
		group, name := c.Group, c.Name
		cf := func(field string, headline bool, get func(*Class) (float64, bool), set func(*Class, float64)) {
			fs = append(fs, figure{name: "classes/" + group + "/" + name + "/" + field, headline: headline,
				get: func(r *Run) (float64, bool) {
					if x := findClass(r, group, name); x != nil {
						return get(x)
					}
					return 0, false
				},
				set: func(r *Run, v float64) {
					if x := findClass(r, group, name); x != nil {
						set(x, v)
					}
				}})
		}
		always := func(f func(*Class) float64) func(*Class) (float64, bool) {
			return func(c *Class) (float64, bool) { return f(c), true }
		}
		cf("goodput_bps", true, always(func(c *Class) float64 { return c.GoodputBps }), func(c *Class, v float64) { c.GoodputBps = v })
		cf("retransmits", true, always(func(c *Class) float64 { return float64(c.Retransmits) }), func(c *Class, v float64) { c.Retransmits = round(v) })
		cf("rtt_us", false, always(func(c *Class) float64 { return c.RTTUs }), func(c *Class, v float64) { c.RTTUs = v })
		cf("rtt_max_us", false, always(func(c *Class) float64 { return c.RTTMaxUs }), func(c *Class, v float64) { c.RTTMaxUs = v })
		cf("delivered_ce", false, always(func(c *Class) float64 { return float64(c.DeliveredCE) }), func(c *Class, v float64) { c.DeliveredCE = round(v) })
		switch c.Kind {
		case "rpc", "http":
			kind := c.Kind
			cf("rpcs", false, always(func(c *Class) float64 { return float64(c.RPCs) }), func(c *Class, v float64) { c.RPCs = int64(round(v)) })
			cf("inflight_max_us", false, always(func(c *Class) float64 { return c.InFlightMaxUs }), func(c *Class, v float64) { c.InFlightMaxUs = v })
			lf := func(field string, headline bool, p func(*Latency) *float64) {
				cf(field, headline, func(c *Class) (float64, bool) {
					if c.Latency == nil || c.Latency.Count == 0 {
						return 0, false
					}
					return *p(c.Latency), true
				}, func(c *Class, v float64) {
					if c.Latency != nil {
						*p(c.Latency) = v
					}
				})
			}
			lf("p50_us", true, func(l *Latency) *float64 { return &l.P50 })
			lf("p90_us", false, func(l *Latency) *float64 { return &l.P90 })
			lf("p99_us", true, func(l *Latency) *float64 { return &l.P99 })
			if kind == "rpc" { // wrk and ab give no P99.9
				lf("p999_us", true, func(l *Latency) *float64 { return &l.P999 })
			}
			lf("max_us", false, func(l *Latency) *float64 { return &l.Max })
			cf("latency_count", false, func(c *Class) (float64, bool) {
				if c.Latency == nil {
					return 0, false
				}
				return float64(c.Latency.Count), true
			}, func(c *Class, v float64) {
				if c.Latency != nil {
					c.Latency.Count = int64(round(v))
				}
			})
			if kind == "http" {
				cf("requests_per_s", true, always(func(c *Class) float64 { return c.ReqPerSec }), func(c *Class, v float64) { c.ReqPerSec = v })
				cf("http_errors", true, always(func(c *Class) float64 { return float64(c.HTTPErrors) }), func(c *Class, v float64) { c.HTTPErrors = round(v) })
			}
		case "udp":
			cf("offered_bps", true, always(func(c *Class) float64 { return c.OfferedBps }), func(c *Class, v float64) { c.OfferedBps = v })
			cf("sent_bps", true, always(func(c *Class) float64 { return c.SentBps }), func(c *Class, v float64) { c.SentBps = v })
			cf("send_errors", true, always(func(c *Class) float64 { return float64(c.SendErrors) }), func(c *Class, v float64) { c.SendErrors = round(v) })
			cf("datagrams", false, always(func(c *Class) float64 { return float64(c.Datagrams) }), func(c *Class, v float64) { c.Datagrams = round(v) })
		}
	}
	for _, l := range run.Links {
		name := l.Name
		lkf := func(field string, headline bool, get func(*Link) float64, set func(*Link, float64)) {
			fs = append(fs, figure{name: "links/" + name + "/" + field, headline: headline,
				get: func(r *Run) (float64, bool) {
					if x := findLink(r, name); x != nil {
						return get(x), true
					}
					return 0, false
				},
				set: func(r *Run, v float64) {
					if x := findLink(r, name); x != nil {
						set(x, v)
					}
				}})
		}
		lkf("drops", true, func(l *Link) float64 { return float64(l.Drops) }, func(l *Link, v float64) { l.Drops = round(v) })
		lkf("overlimits", false, func(l *Link) float64 { return float64(l.Overlimits) }, func(l *Link, v float64) { l.Overlimits = round(v) })
		lkf("backlog_max_bytes", false, func(l *Link) float64 { return float64(l.BacklogMax) }, func(l *Link, v float64) { l.BacklogMax = round(v) })
	}
	fs = append(fs, timelineFigures(run)...)
	if run.BPF != nil {
		bf := func(field string, get func(*BPFCost) float64, set func(*BPFCost, float64)) {
			fs = append(fs, figure{name: "bpf/" + field,
				get: func(r *Run) (float64, bool) {
					if r.BPF == nil {
						return 0, false
					}
					return get(r.BPF), true
				},
				set: func(r *Run, v float64) {
					if r.BPF != nil {
						set(r.BPF, v)
					}
				}})
		}
		bf("packets", func(b *BPFCost) float64 { return float64(b.Packets) }, func(b *BPFCost, v float64) { b.Packets = round(v) })
		bf("ns_per_packet", func(b *BPFCost) float64 { return b.NsPerPkt }, func(b *BPFCost, v float64) { b.NsPerPkt = v })
		bf("cores", func(b *BPFCost) float64 { return b.CoresTotal }, func(b *BPFCost, v float64) { b.CoresTotal = v })
		bf("cores_per_gbps", func(b *BPFCost) float64 { return b.CoresPerGbps }, func(b *BPFCost, v float64) { b.CoresPerGbps = v })
		for k := range run.BPF.CoresAt {
			bf("cores_at/"+k, func(b *BPFCost) float64 { return b.CoresAt[k] }, func(b *BPFCost, v float64) {
				if _, ok := b.CoresAt[k]; ok {
					b.CoresAt[k] = v
				}
			})
		}
	}
	return fs
}

// Median of vs (the mean of the middle two for an even count); NaN for none.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// clone deep-copies a run's slices so that setting figures leaves the
// original alone.
func clone(r *Run) Run {
	out := *r
	out.Groups = slices.Clone(r.Groups)
	out.Classes = slices.Clone(r.Classes)
	for i := range out.Classes {
		if l := out.Classes[i].Latency; l != nil {
			c := *l
			out.Classes[i].Latency = &c
		}
	}
	out.Links = slices.Clone(r.Links)
	if r.BPF != nil {
		b := *r.BPF
		b.CoresAt = map[string]float64{}
		for k, v := range r.BPF.CoresAt {
			b.CoresAt[k] = v
		}
		out.BPF = &b
	}
	out.Timeline = r.Timeline.clone()
	out.Diagnoses = nil
	out.Notes = slices.Clone(r.Notes)
	out.Repetitions, out.Spread = nil, nil
	return out
}

// Aggregate makes one run of the repetitions of one scenario, variant,
// congestion control and limiter. One repetition is returned as it is. Of
// several, the completed ones give the run's figures, each the median of
// its values (over the repetitions that have it), and Spread the median,
// minimum and maximum of the headline figures; the repetitions are kept in
// Repetitions. Without a completed one, the run is skipped or failed as the
// first repetition. Notes common to all repetitions appear once, others with
// their repetition's number; failed repetitions are noted.
func Aggregate(reps []Run) Run {
	if len(reps) == 1 {
		return reps[0]
	}
	if len(reps) == 0 {
		return Run{Error: "no repetitions"}
	}
	var done []*Run
	for i := range reps {
		if reps[i].Skipped == "" && reps[i].Error == "" {
			done = append(done, &reps[i])
		}
	}
	var out Run
	if len(done) == 0 {
		out = Run{Scenario: reps[0].Scenario, CC: reps[0].CC, Limiter: reps[0].Limiter, Variant: reps[0].Variant, IPv6: reps[0].IPv6,
			Skipped: reps[0].Skipped, Error: reps[0].Error}
	} else {
		out = clone(done[0])
		out.Notes = nil
		for _, f := range figures(done[0]) {
			var vs []float64
			for _, r := range done {
				if v, ok := f.get(r); ok && !math.IsNaN(v) {
					vs = append(vs, v)
				}
			}
			if len(vs) == 0 {
				continue
			}
			m := Median(vs)
			if f.set != nil {
				f.set(&out, m)
			}
			if f.headline {
				out.Spread = append(out.Spread, Stat{Name: f.name, N: len(vs), Median: m, Min: slices.Min(vs), Max: slices.Max(vs)})
			}
		}
	}
	// Notes.
	count := map[string]int{}
	for i := range reps {
		seen := map[string]bool{}
		for _, n := range reps[i].Notes {
			if !seen[n] {
				seen[n] = true
				count[n]++
			}
		}
	}
	added := map[string]bool{}
	for i := range reps {
		for _, n := range reps[i].Notes {
			if count[n] == len(reps) {
				if !added[n] {
					added[n] = true
					out.Notes = append(out.Notes, n)
				}
			} else if len(out.Notes) < 40 {
				out.Notes = append(out.Notes, fmt.Sprintf("repetition %d: %s", i+1, n))
			}
		}
	}
	if len(done) > 0 && len(done) < len(reps) {
		out.Notes = append(out.Notes, fmt.Sprintf("%d of %d repetitions completed: figures are the medians of those", len(done), len(reps)))
		for i := range reps {
			switch {
			case reps[i].Error != "":
				out.Notes = append(out.Notes, fmt.Sprintf("repetition %d failed: %s", i+1, reps[i].Error))
			case reps[i].Skipped != "":
				out.Notes = append(out.Notes, fmt.Sprintf("repetition %d skipped: %s", i+1, reps[i].Skipped))
			}
		}
	}
	out.Repetitions = make([]Run, len(reps))
	for i := range reps {
		out.Repetitions[i] = reps[i]
		out.Repetitions[i].Repetitions, out.Repetitions[i].Spread = nil, nil
	}
	return out
}

// Stat returns the run's spread of the named figure, or nil (a run of one
// repetition has none).
func (r *Run) Stat(name string) *Stat {
	for i := range r.Spread {
		if r.Spread[i].Name == name {
			return &r.Spread[i]
		}
	}
	return nil
}
