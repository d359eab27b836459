package eval

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
)

// cpuTimes is the first line of /proc/stat, in clock ticks.
type cpuTimes struct {
	busy, softirq uint64
	at            time.Time
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

func readCPU() cpuTimes {
	c := cpuTimes{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return c
	}
	v := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
	// user nice system idle iowait irq softirq steal
	c.busy = v(1) + v(2) + v(3) + v(6) + v(7)
	c.softirq = v(7)
	return c
}

func cpuBetween(a, b cpuTimes) result.CPU {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return result.CPU{}
	}
	return result.CPU{
		BusyCores:    float64(b.busy-a.busy) / clkTck / wall,
		SoftirqCores: float64(b.softirq-a.softirq) / clkTck / wall,
	}
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
