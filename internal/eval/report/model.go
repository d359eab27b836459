package report

import (
	"math"
	"sort"
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
	Groups     []string
}

func done(run *result.Run) bool { return run.Skipped == "" && run.Error == "" }

func scenarios(r *result.Results) []*scenario {
	var out []*scenario
	idx := map[string]*scenario{}
	for i := range r.Runs {
		run := &r.Runs[i]
		s := idx[run.Scenario]
		if s == nil {
			s = &scenario{Name: run.Scenario}
			idx[run.Scenario] = s
			out = append(out, s)
		}
		s.Runs = append(s.Runs, run)
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
			if c.Kind == "rpc" {
				s.RPCClasses = append(s.RPCClasses, k)
				size[k] = c.SizeBytes
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

func runLabel(run *result.Run) string { return run.CC + " / " + run.Limiter }

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

// smallestRPC is the run's rpc class with the fewest bytes (the 10 KB one
// in the built-in scenarios), or nil.
func smallestRPC(run *result.Run) *result.Class {
	var best *result.Class
	for i := range run.Classes {
		c := &run.Classes[i]
		if c.Kind == "rpc" && (best == nil || c.SizeBytes < best.SizeBytes) {
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
	tp := table{Title: "Throughput", Header: []string{"cc", "limiter", "goodput", "of limit"}}
	if len(s.Groups) > 1 {
		for _, g := range s.Groups {
			tp.Header = append(tp.Header, g)
		}
	}
	for _, k := range s.Classes {
		tp.Header = append(tp.Header, k)
	}
	tp.Num = numCols(len(tp.Header), 2)

	lt := table{Title: "RPC latency (first byte sent to last byte of the reply)", Header: []string{"cc", "limiter"}}
	for _, k := range s.RPCClasses {
		lt.Header = append(lt.Header, k+" RPCs", k+" P50", k+" P99", k+" P99.9")
	}
	lt.Num = numCols(len(lt.Header), 2)

	lc := table{Title: "Loss and cost", Header: []string{"cc", "limiter", "retrans", "HBM marks", "HBM cwr", "HBM drops",
		"qdisc drops", "CPU busy cores", "softirq cores", "BPF ns/pkt", "BPF cores", "BPF cores per Gbit/s", "BPF cores at"}}
	lc.Num = numCols(len(lc.Header)-1, 2)
	lc.Num = append(lc.Num, false)

	for _, run := range s.Done {
		row := []string{run.CC, run.Limiter, fmtRate(goodput(run)), fmtPct(ofLimit(goodput(run), limit(run)))}
		if len(s.Groups) > 1 {
			for _, name := range s.Groups {
				g := group(run, name)
				if g == nil {
					row = append(row, dash)
					continue
				}
				cell := fmtRate(g.GoodputBps)
				if g.LimitBps > 0 {
					cell += " (" + fmtPct(ofLimit(g.GoodputBps, g.LimitBps)) + ")"
				}
				row = append(row, cell)
			}
		}
		for _, k := range s.Classes {
			if c := s.class(run, k); c != nil {
				row = append(row, fmtRate(c.GoodputBps))
			} else {
				row = append(row, dash)
			}
		}
		tp.add(row...)

		row = []string{run.CC, run.Limiter}
		for _, k := range s.RPCClasses {
			c := s.class(run, k)
			rpcs := dash
			if c != nil {
				rpcs = fmtCount(uint64(max(c.RPCs, 0)))
			}
			row = append(row, rpcs,
				lat(c, func(l *result.Latency) float64 { return l.P50 }),
				lat(c, func(l *result.Latency) float64 { return l.P99 }),
				lat(c, func(l *result.Latency) float64 { return l.P999 }))
		}
		lt.add(row...)

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
		lc.add(append([]string{run.CC, run.Limiter, fmtCount(n.Retrans), fmtCount(n.Marked), fmtCount(n.CWR),
			fmtCount(n.HBMDrops), fmtCount(n.QdiscDrops), fmtFloat(run.CPU.BusyCores), fmtFloat(run.CPU.SoftirqCores)}, bpf...)...)
	}
	out := []table{tp}
	if len(s.RPCClasses) > 0 {
		out = append(out, lt)
	}
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
