package dataplane

// The data plane's cost per packet, as the kernel's bpf_stats count it, with
// one limited group and with 10,000: each packet looks its limits up by the
// cgroup ids on its path (one hash lookup per level), so the cost must not
// grow with the number of groups.

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/rate"
)

// costLimit is a limit the test packets never fill: at 40gbit a 100-byte
// packet costs 20 ns of virtual time, less than a test run takes, so the
// queue stays empty and every run takes the pass path through the share
// loop (pacing is on).
var costLimit = Limit{Rate: 40_000_000_000, Thresholds: rate.Default(40_000_000_000)}

// costHarness is the egress program with its group's limit plus extra other
// groups' limits and queues in the maps.
func costHarness(tb testing.TB, extra int) *harness {
	h := newHarness(tb, costLimit)
	var q hbmHbmQueue
	for i := 0; i < extra; i++ {
		k := key(h.key.CgroupId+uint64(i)+1, Egress)
		must(tb, h.limits.Put(&k, &h.cfg))
		must(tb, h.queues.Put(&k, &q))
	}
	return h
}

// nsPerRun runs the program n times on a 100-byte TCP packet and returns the
// kernel's run time per run (bpf_stats).
func (h *harness) nsPerRun(n uint32) float64 {
	return h.nsPerRunPkt(n, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(48)))
}

// nsPerRunPkt is nsPerRun for packet pkt (an IP packet).
func (h *harness) nsPerRunPkt(n uint32, pkt []byte) float64 {
	h.t.Helper()
	in := frame(pkt)
	st0, err := h.prog.Stats()
	must(h.t, err)
	if _, err := h.prog.Run(&ebpf.RunOptions{Data: in, Context: skbCtx(h.ifidx, 0, 0), Repeat: n}); err != nil {
		h.t.Fatalf("test run: %v", err)
	}
	st1, err := h.prog.Stats()
	must(h.t, err)
	runs := st1.RunCount - st0.RunCount
	if runs == 0 {
		h.t.Fatal("bpf_stats counted no runs")
	}
	return float64(st1.Runtime-st0.Runtime) / float64(runs)
}

func enableStats(tb testing.TB) {
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		tb.Fatalf("enable bpf_stats: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
}

// TestPacketCostFlat: the cost per packet with 10,000 limited groups is
// within 2x (plus 100 ns of noise) of the cost with one. A lookup that grew
// with the number of groups (a scan, a list) would be 10,000x.
func TestPacketCostFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs BPF")
	}
	enableStats(t)
	best := func(h *harness) float64 {
		b := h.nsPerRun(20000)
		for i := 0; i < 4; i++ {
			b = min(b, h.nsPerRun(20000))
		}
		return b
	}
	h1, h10k := costHarness(t, 0), costHarness(t, 9999)
	one, many := best(h1), best(h10k)
	for _, h := range []*harness{h1, h10k} {
		// The runs took the path being measured: passed and charged.
		if c := h.counters(); c.Packets < 5*20000 || c.Dropped != 0 {
			t.Fatalf("test runs: %d packets passed, %d dropped; want all %d passed", c.Packets, c.Dropped, 5*20000)
		}
	}
	t.Logf("egress program, bpf_stats: %.0f ns per packet with 1 group, %.0f ns with 10,000", one, many)
	if many > 2*one+100 {
		t.Errorf("%.0f ns per packet with 10,000 groups, against %.0f with one: the cost grows with the number of groups", many, one)
	}
}

// BenchmarkPacketCost reports the kernel's ns per packet (bpf_stats) at 1 and
// 10,000 limited groups: go test -run - -bench PacketCost ./internal/dataplane/
func BenchmarkPacketCost(b *testing.B) {
	enableStats(b)
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			h := costHarness(b, n-1)
			b.ResetTimer()
			ns := h.nsPerRun(uint32(max(b.N, 1)))
			b.ReportMetric(ns, "bpf-ns/pkt")
		})
	}
	// pps-64's packet: a 64-byte UDP datagram.
	b.Run("udp64", func(b *testing.B) {
		h := costHarness(b, 0)
		b.ResetTimer()
		ns := h.nsPerRunPkt(uint32(max(b.N, 1)), ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(64)))
		b.ReportMetric(ns, "bpf-ns/pkt")
	})
}
