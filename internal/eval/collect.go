package eval

import (
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
)

func cpuBetween(a, b netlab.CPUTimes) result.CPU {
	u := b.Since(a)
	return result.CPU{BusyCores: u.BusyCores, SoftirqCores: u.SoftirqCores}
}

// readQdisc returns the root qdisc's counters of dev in namespace ns.
func readQdisc(ns, dev string) (netlab.QdiscStats, error) { return netlab.ReadQdisc(ns, dev) }

// shaped is a qdisc the eval installed (a limiter or a bottleneck) and what
// it counted before the window.
type shaped struct {
	name, ns, dev, kind string
	rate                uint64
	before              netlab.QdiscStats
	maxBacklog          uint64
}

// progStats are the run time and run count of HBM's programs.
type progStats struct {
	skbNs, skbRuns, otherNs, otherRuns uint64
	ok                                 bool
}

// readProgStats sums the stats of the programs behind the links pinned in
// pinDir/links (cgroup_skb and sockops), when bpf stats are enabled. One
// program serves every group, so each is counted once however many links
// it has.
func readProgStats(pinDir string) progStats {
	var ps progStats
	seen := map[ebpf.ProgramID]bool{}
	dir := filepath.Join(pinDir, "links")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ps
	}
	for _, e := range entries {
		l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			continue
		}
		info, err := l.Info()
		l.Close()
		if err != nil || seen[info.Program] {
			continue
		}
		seen[info.Program] = true
		prog, err := ebpf.NewProgramFromID(info.Program)
		if err != nil {
			continue
		}
		st, err := prog.Stats()
		pi, ierr := prog.Info()
		prog.Close()
		if err != nil || ierr != nil {
			continue
		}
		ps.ok = true
		if pi.Type == ebpf.CGroupSKB {
			ps.skbNs += uint64(st.Runtime)
			ps.skbRuns += st.RunCount
		} else {
			ps.otherNs += uint64(st.Runtime)
			ps.otherRuns += st.RunCount
		}
	}
	return ps
}

// bpfCost turns program stats over wall seconds, with wireBps of traffic
// through HBM, into the seed-004 figures.
func bpfCost(a, b progStats, wall, wireBps float64) *result.BPFCost {
	if !a.ok || !b.ok || wall <= 0 {
		return nil
	}
	runs := b.skbRuns - a.skbRuns
	skbNs := b.skbNs - a.skbNs
	totalNs := skbNs + (b.otherNs - a.otherNs)
	c := &result.BPFCost{Packets: runs, CoresTotal: float64(totalNs) / 1e9 / wall}
	if runs > 0 {
		c.NsPerPkt = float64(skbNs) / float64(runs)
	}
	if wireBps > 0 {
		c.CoresPerGbps = c.CoresTotal / (wireBps / 1e9)
		c.CoresAt = map[string]float64{"10gbit": c.CoresPerGbps * 10, "100gbit": c.CoresPerGbps * 100}
	}
	return c
}

// hbmCounters maps "cgroup path/dir" to counters from hbm show --json.
func hbmCounters(h netlab.HBM) (map[string]jsonout.Direction, error) {
	st, err := h.Show()
	if err != nil {
		return nil, err
	}
	out := map[string]jsonout.Direction{}
	for _, g := range st {
		p := filepath.Clean("/" + g.Cgroup)
		if g.Egress != nil {
			out[p+"/egress"] = *g.Egress
		}
		if g.Ingress != nil {
			out[p+"/ingress"] = *g.Ingress
		}
	}
	return out, nil
}
