package report

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// scenario is the runs of one scenario, in the order of results.json, with
// the classes they share as table columns and chart series.
type scenario struct {
	Name       string
	Runs       []*result.Run // all, skipped and failed included
	Done       []*result.Run // runs with figures
	Classes    []string      // class keys, first appearance first
	RPCClasses []string      // the rpc ones, smallest first
	UDPClasses []string
	WebClasses []string // the http ones
	Groups     []string
	Variants   bool // some run has a variant (a counts dimension)
	Wire       bool // some run has a group's interface rate (tx_bps)
}

func done(run *result.Run) bool { return run.Skipped == "" && run.Error == "" }

func scenarios(r *result.Results) []*scenario {
	var out []*scenario
	idx := map[string]*scenario{}
	for i := range r.Runs {
		run := &r.Runs[i]
		name := run.ScenarioLabel() // a scenario over IPv4 and IPv6: two sections
		s := idx[name]
		if s == nil {
			s = &scenario{Name: name}
			idx[name] = s
			out = append(out, s)
		}
		s.Runs = append(s.Runs, run)
		if run.Variant != "" {
			s.Variants = true
		}
		if done(run) {
			s.Done = append(s.Done, run)
		}
	}
	for _, s := range out {
		s.index()
	}
	return out
}

// index collects the scenario's groups and classes. Class keys carry the
// group name only when the scenario has more than one group.
func (s *scenario) index() {
	seen := map[string]bool{}
	for _, run := range s.Done {
		for _, g := range run.Groups {
			if !seen["g:"+g.Name] {
				seen["g:"+g.Name] = true
				s.Groups = append(s.Groups, g.Name)
			}
		}
		for _, c := range run.Classes {
			if !seen["g:"+c.Group] {
				seen["g:"+c.Group] = true
				s.Groups = append(s.Groups, c.Group)
			}
		}
	}
	size := map[string]int{}
	for _, run := range s.Done {
		for i := range run.Classes {
			c := &run.Classes[i]
			k := s.key(c)
			if seen["c:"+k] {
				continue
			}
			seen["c:"+k] = true
			s.Classes = append(s.Classes, k)
			switch c.Kind {
			case "rpc":
				s.RPCClasses = append(s.RPCClasses, k)
				size[k] = c.SizeBytes
			case "udp":
				s.UDPClasses = append(s.UDPClasses, k)
			case "http":
				s.WebClasses = append(s.WebClasses, k)
			}
		}
		for _, g := range run.Groups {
			if g.TxBps > 0 {
				s.Wire = true
			}
		}
	}
	sort.SliceStable(s.RPCClasses, func(i, j int) bool { return size[s.RPCClasses[i]] < size[s.RPCClasses[j]] })
}

func (s *scenario) key(c *result.Class) string {
	if len(s.Groups) > 1 && c.Group != "" {
		return c.Group + "/" + c.Name
	}
	return c.Name
}

func (s *scenario) class(run *result.Run, key string) *result.Class {
	for i := range run.Classes {
		if s.key(&run.Classes[i]) == key {
			return &run.Classes[i]
		}
	}
	return nil
}

func group(run *result.Run, name string) *result.Group {
	for i := range run.Groups {
		if run.Groups[i].Name == name {
			return &run.Groups[i]
		}
	}
	return nil
}

func runLabel(run *result.Run) string {
	if run.Variant != "" {
		return run.Variant + " " + run.CC + " / " + run.Limiter
	}
	return run.CC + " / " + run.Limiter
}

// lead is a table row's first cells: the variant when the scenario has
// them, the congestion control and the limiter.
func (s *scenario) lead(run *result.Run) []string {
	if s.Variants {
		return []string{run.Variant, run.CC, run.Limiter}
	}
	return []string{run.CC, run.Limiter}
}

func (s *scenario) leadHeader() []string {
	if s.Variants {
		return []string{"variant", "cc", "limiter"}
	}
	return []string{"cc", "limiter"}
}

// cell formats pick(run). A run of several repetitions shows the median
// over its completed repetitions with their minimum and maximum:
// "190 Mbit/s (180–195 Mbit/s)". pick returns NaN for a missing figure.
func cell(run *result.Run, pick func(*result.Run) float64, f func(float64) string) string {
	var vs []float64
	for i := range run.Repetitions {
		if r := &run.Repetitions[i]; done(r) {
			if v := pick(r); !math.IsNaN(v) {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) < 2 {
		return f(pick(run))
	}
	return withSpread(result.Median(vs), slices.Min(vs), slices.Max(vs), f)
}

// withSpread is "MED (MIN–MAX)", the unit written once inside the
// parentheses when the three share it: "190 Mbit/s (180–195 Mbit/s)",
// "1.01 (0.95–1.02)".
func withSpread(med, lo, hi float64, f func(float64) string) string {
	m, a, b := f(med), f(lo), f(hi)
	if m == dash {
		return m
	}
	unit := func(x string) string {
		if i := strings.LastIndexByte(x, ' '); i >= 0 {
			return x[i:]
		}
		return ""
	}
	if u := unit(a); u != "" && unit(b) == u {
		a = strings.TrimSuffix(a, u)
	}
	return m + " (" + a + "–" + b + ")"
}

// wire is the sum of the groups' interface rates (NaN if none has one);
// share is that over the sum of their limits (NaN unless every group with
// a rate has a limit).
func wire(run *result.Run) float64 {
	sum, n := 0.0, 0
	for _, g := range run.Groups {
		if g.TxBps > 0 {
			sum += g.TxBps
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum
}

func share(run *result.Run) float64 {
	var tx, lim float64
	for _, g := range run.Groups {
		if g.TxBps > 0 {
			if g.LimitBps == 0 {
				return math.NaN()
			}
			tx += g.TxBps
			lim += float64(g.LimitBps)
		}
	}
	if lim == 0 {
		return math.NaN()
	}
	return tx / lim
}

// classPick reads a figure of the class with key k (NaN without it).
func (s *scenario) classPick(k string, f func(*result.Class) float64) func(*result.Run) float64 {
	return func(r *result.Run) float64 {
		if c := s.class(r, k); c != nil {
			return f(c)
		}
		return math.NaN()
	}
}

func latPick(f func(*result.Latency) float64) func(*result.Class) float64 {
	return func(c *result.Class) float64 {
		if c.Latency == nil || c.Latency.Count == 0 {
			return math.NaN()
		}
		return f(c.Latency)
	}
}

func fmtShare(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// goodput is the run's application throughput: its groups', or its
// classes' when it has no groups.
func goodput(run *result.Run) float64 {
	var sum float64
	for _, g := range run.Groups {
		sum += g.GoodputBps
	}
	if len(run.Groups) == 0 {
		for _, c := range run.Classes {
			sum += c.GoodputBps
		}
	}
	return sum
}

// limit is the sum of the groups' limits, 0 when any group is unlimited.
func limit(run *result.Run) uint64 {
	var sum uint64
	for _, g := range run.Groups {
		if g.LimitBps == 0 {
			return 0
		}
		sum += g.LimitBps
	}
	return sum
}

// ofLimit is goodput as a fraction of limit, NaN without a limit.
func ofLimit(goodput float64, limit uint64) float64 {
	if limit == 0 {
		return math.NaN()
	}
	return goodput / float64(limit)
}

type counters struct{ Retrans, Marked, CWR, HBMDrops, QdiscDrops uint64 }

func count(run *result.Run) counters {
	var c counters
	for _, cl := range run.Classes {
		c.Retrans += cl.Retransmits
	}
	for _, g := range run.Groups {
		c.Marked += g.Marked
		c.CWR += g.CWR
		c.HBMDrops += g.Dropped
	}
	for _, l := range run.Links {
		c.QdiscDrops += l.Drops
	}
	return c
}

// smallestRPC is the run's rpc (or http) class with the fewest bytes (the
// 10 KB one in the built-in scenarios), or nil.
func smallestRPC(run *result.Run) *result.Class {
	var best *result.Class
	for i := range run.Classes {
		c := &run.Classes[i]
		if (c.Kind == "rpc" || c.Kind == "http") && (best == nil || c.SizeBytes < best.SizeBytes) {
			best = c
		}
	}
	return best
}

// table is a rendered table, shared by the Markdown and HTML writers.
type table struct {
	Title  string
	Header []string
	Num    []bool // right-aligned columns
	Rows   [][]string
}

func (t *table) add(row ...string) { t.Rows = append(t.Rows, row) }

// IsNum says whether column i holds numbers (right-aligned).
func (t table) IsNum(i int) bool { return i < len(t.Num) && t.Num[i] }

func lat(c *result.Class, pick func(*result.Latency) float64) string {
	if c == nil || c.Latency == nil || c.Latency.Count == 0 {
		return dash
	}
	return fmtDur(pick(c.Latency))
}

func numCols(n int, first int) []bool {
	num := make([]bool, n)
	for i := first; i < n; i++ {
		num[i] = true
	}
	return num
}

// tables renders a scenario's completed runs: throughput, RPC latency, and
// loss and cost.
func (s *scenario) tables() []table {
	if len(s.Done) == 0 {
		return nil
	}
	nl := len(s.leadHeader())
	tp := table{Title: "Throughput", Header: append(s.leadHeader(), "goodput", "of limit")}
	if s.Wire {
		tp.Header = append(tp.Header, "wire", "wire share")
	}
	if len(s.Groups) > 1 {
		for _, g := range s.Groups {
			tp.Header = append(tp.Header, g)
		}
	}
	for _, k := range s.Classes {
		tp.Header = append(tp.Header, k)
	}
	tp.Num = numCols(len(tp.Header), nl)

	lt := table{Title: "RPC latency (first byte sent to last byte of the reply)", Header: s.leadHeader()}
	for _, k := range s.RPCClasses {
		lt.Header = append(lt.Header, k+" RPCs", k+" P50", k+" P99", k+" P99.9")
	}
	lt.Num = numCols(len(lt.Header), nl)

	ut := table{Title: "UDP (offered: what the senders tried; sent: what sendmsg accepted; received: what the sinks counted)", Header: s.leadHeader()}
	for _, k := range s.UDPClasses {
		ut.Header = append(ut.Header, k+" offered", k+" sent", k+" received", k+" received of limit", k+" send errors", k+" first error")
	}
	ut.Num = numCols(len(ut.Header), nl)
	for i := range ut.Num {
		if i >= nl && (i-nl)%6 == 5 {
			ut.Num[i] = false
		}
	}

	wt := table{Title: "HTTP (requests as the load generator counts them: wrk from the request's send, connect excluded; ab connect included, in whole ms)", Header: s.leadHeader()}
	for _, k := range s.WebClasses {
		wt.Header = append(wt.Header, k+" client", k+" requests", k+" req/s", k+" P50", k+" P90", k+" P99", k+" max", k+" errors")
	}
	wt.Num = numCols(len(wt.Header), nl)
	for i := range wt.Num {
		if i >= nl && (i-nl)%8 == 0 {
			wt.Num[i] = false
		}
	}

	lc := table{Title: "Loss and cost", Header: append(s.leadHeader(), "retrans", "HBM marks", "HBM cwr", "HBM drops",
		"qdisc drops", "CPU busy cores", "softirq cores", "BPF ns/pkt", "BPF cores", "BPF cores per Gbit/s", "BPF cores at")}
	lc.Num = numCols(len(lc.Header)-1, nl)
	lc.Num = append(lc.Num, false)

	for _, run := range s.Done {
		row := append(s.lead(run), cell(run, goodput, fmtRate),
			cell(run, func(r *result.Run) float64 { return ofLimit(goodput(r), limit(r)) }, fmtPct))
		if s.Wire {
			row = append(row, cell(run, wire, fmtRate), cell(run, share, fmtShare))
		}
		if len(s.Groups) > 1 {
			for _, name := range s.Groups {
				g := group(run, name)
				if g == nil {
					row = append(row, dash)
					continue
				}
				pick := func(f func(*result.Group) float64) func(*result.Run) float64 {
					return func(r *result.Run) float64 {
						if g := group(r, name); g != nil {
							return f(g)
						}
						return math.NaN()
					}
				}
				c := cell(run, pick(func(g *result.Group) float64 { return g.GoodputBps }), fmtRate)
				if g.LimitBps > 0 {
					c += ", " + cell(run, pick(func(g *result.Group) float64 { return ofLimit(g.GoodputBps, g.LimitBps) }), fmtPct)
				}
				if g.Share > 0 {
					c += ", wire " + cell(run, pick(func(g *result.Group) float64 { return g.Share }), fmtShare)
				}
				row = append(row, c)
			}
		}
		for _, k := range s.Classes {
			if c := s.class(run, k); c != nil {
				row = append(row, cell(run, s.classPick(k, func(c *result.Class) float64 { return c.GoodputBps }), fmtRate))
			} else {
				row = append(row, dash)
			}
		}
		tp.add(row...)

		row = s.lead(run)
		for _, k := range s.RPCClasses {
			c := s.class(run, k)
			rpcs := dash
			if c != nil {
				rpcs = fmtCount(uint64(max(c.RPCs, 0)))
			}
			row = append(row, rpcs,
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P50 })), fmtDur),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P99 })), fmtDur),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P999 })), fmtDur))
		}
		lt.add(row...)

		row = s.lead(run)
		for _, k := range s.UDPClasses {
			c := s.class(run, k)
			if c == nil {
				row = append(row, dash, dash, dash, dash, dash, dash)
				continue
			}
			recvOf := func(r *result.Run) float64 {
				c := s.class(r, k)
				if c == nil {
					return math.NaN()
				}
				if g := group(r, c.Group); g != nil && g.LimitBps > 0 {
					return c.GoodputBps / float64(g.LimitBps)
				}
				return math.NaN()
			}
			first := c.SendError
			for i := range run.Repetitions {
				if first == "" {
					if rc := s.class(&run.Repetitions[i], k); rc != nil {
						first = rc.SendError
					}
				}
			}
			if first == "" {
				first = dash
			}
			row = append(row,
				cell(run, s.classPick(k, func(c *result.Class) float64 { return c.OfferedBps }), fmtRate),
				cell(run, s.classPick(k, func(c *result.Class) float64 { return c.SentBps }), fmtRate),
				cell(run, s.classPick(k, func(c *result.Class) float64 { return c.GoodputBps }), fmtRate),
				cell(run, recvOf, fmtShare),
				cell(run, s.classPick(k, func(c *result.Class) float64 { return float64(c.SendErrors) }), func(v float64) string {
					if math.IsNaN(v) {
						return dash
					}
					return fmtCount(uint64(math.Round(v)))
				}),
				first)
		}
		ut.add(row...)

		row = s.lead(run)
		for _, k := range s.WebClasses {
			c := s.class(run, k)
			if c == nil {
				row = append(row, dash, dash, dash, dash, dash, dash, dash, dash)
				continue
			}
			counted := func(f func(*result.Class) float64) string {
				return cell(run, s.classPick(k, f), func(v float64) string {
					if math.IsNaN(v) {
						return dash
					}
					return fmtCount(uint64(math.Round(v)))
				})
			}
			row = append(row, c.HTTPClient,
				counted(func(c *result.Class) float64 { return float64(c.RPCs) }),
				cell(run, s.classPick(k, func(c *result.Class) float64 { return c.ReqPerSec }), fmtFloat),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P50 })), fmtDur),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P90 })), fmtDur),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.P99 })), fmtDur),
				cell(run, s.classPick(k, latPick(func(l *result.Latency) float64 { return l.Max })), fmtDur),
				counted(func(c *result.Class) float64 { return float64(c.HTTPErrors) }))
		}
		wt.add(row...)

		n := count(run)
		bpf := []string{dash, dash, dash, dash}
		if b := run.BPF; b != nil {
			var at []string
			keys := sortedKeys(b.CoresAt) // then by cores, which grow with the rate: 10gbit before 100gbit
			sort.SliceStable(keys, func(i, j int) bool { return b.CoresAt[keys[i]] < b.CoresAt[keys[j]] })
			for _, k := range keys {
				at = append(at, k+": "+fmtFloat(b.CoresAt[k]))
			}
			bpf = []string{fmtFloat(b.NsPerPkt), fmtFloat(b.CoresTotal), fmtFloat(b.CoresPerGbps), strings.Join(at, ", ")}
			if len(at) == 0 {
				bpf[3] = dash
			}
		}
		lc.add(append(append(s.lead(run), fmtCount(n.Retrans), fmtCount(n.Marked), fmtCount(n.CWR),
			fmtCount(n.HBMDrops), fmtCount(n.QdiscDrops), fmtFloat(run.CPU.BusyCores), fmtFloat(run.CPU.SoftirqCores)), bpf...)...)
	}
	out := []table{tp}
	if len(s.RPCClasses) > 0 {
		out = append(out, lt)
	}
	if len(s.UDPClasses) > 0 {
		out = append(out, ut)
	}
	if len(s.WebClasses) > 0 {
		out = append(out, wt)
	}
	out = append(out, s.timelineTables()...)
	return append(out, lc)
}

// notDone lists the scenario's skipped and failed runs with their reasons.
func (s *scenario) notDone() []string {
	var out []string
	for _, run := range s.Runs {
		switch {
		case run.Skipped != "":
			out = append(out, runLabel(run)+": skipped: "+run.Skipped)
		case run.Error != "":
			out = append(out, runLabel(run)+": failed: "+run.Error)
		}
	}
	return out
}

// diagnoses lists the scenario's diagnoses, each prefixed with its run.
func (s *scenario) diagnoses() []string {
	var out []string
	for _, run := range s.Runs {
		for _, d := range run.Diagnoses {
			out = append(out, runLabel(run)+": "+d)
		}
	}
	return out
}

type kv struct{ K, V string }

// metaRows is the machine and invocation, in reading order.
func metaRows(m *result.Meta) []kv {
	started := dash
	if !m.Started.IsZero() {
		started = m.Started.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	or := func(s string) string {
		if s == "" {
			return dash
		}
		return s
	}
	quick := "no"
	if m.Quick {
		quick = "yes"
	}
	return []kv{
		{"started", started},
		{"elapsed", fmtDur(m.ElapsedSec * 1e6)},
		{"command", or(strings.Join(m.Command, " "))},
		{"quick", quick},
		{"host", or(m.Hostname)},
		{"kernel", or(m.Kernel)},
		{"CPUs", fmtCount(uint64(max(m.CPUs, 0)))},
		{"hbm version", or(m.HBMVersion)},
		{"Go version", or(m.GoVersion)},
		{"congestion controls available", or(strings.Join(m.CCAvailable, " "))},
	}
}

func sysctlRows(m *result.Meta) []kv {
	var out []kv
	for _, k := range sortedKeys(m.Sysctls) {
		out = append(out, kv{k, m.Sysctls[k]})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
