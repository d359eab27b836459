package rxfreshtest

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestGateQueue is the handshake gate's queue (bpf/include/gateq.h): the
// group's virtual queue without its bound, whose excess a new connection
// waits out past one bound's worth of what the bound cut (a burst's, as
// before), until the group's queue drains to its mark. Each mutant fails
// rows: a gate that answers to the bounded queue alone the "past the
// allowance" rows; one whose queue does not start again from the group's
// where it fell behind the "behind" rows; one that keeps the debt after the
// queue drained the "drained" row.
func TestGateQueue(t *testing.T) {
	objs := load(t)
	const (
		ms  = 1_000_000
		now = 1_000 * ms
		// the defaults at any rate they fit (rate.Default)
		dl    = 12 * ms // drop-large
		mark  = 4 * ms
		bound = 48 * ms // max backlog
		// the most the gate's queue holds: GATE_MAX_NS (gateq.h)
		// past the threshold, past the allowance
		gateMax = 600 * ms
		end     = now + bound + dl + gateMax
	)
	for _, tc := range []struct {
		name          string
		vtime, gateVt uint64
		cost          uint64
		over          int64
		gateVtOut     uint64
		until         uint64 // when the last held connection is let go
	}{
		{"never cut: the gate's queue is the group's", now + 5*ms, now + 5*ms, ms, 5*ms - dl, now + 6*ms, 0},
		{"behind the group's (it drained to credit, or a new queue): charged from the group's",
			now - 2*ms, 0, ms, -2*ms - dl, now - ms, 0},
		{"behind the group's (a refund): charged from the group's",
			now + 20*ms, now + 19*ms, ms, 8 * ms, now + 21*ms, 0},
		{"cut at the bound, within the allowance (a burst's): over by the group's queue",
			now + 48*ms, now + 70*ms, ms, 36 * ms, now + 71*ms, 0},
		{"cut past the allowance: over by what the bound forgot past it",
			now + 48*ms, now + 120*ms, ms, 60 * ms, now + 121*ms, 0},
		{"past the allowance while the group's queue stands above its mark: kept",
			now + 10*ms, now + 100*ms, ms, 40 * ms, now + 101*ms, 0},
		{"past the allowance, the group's queue drained to its mark: forgiven at the next packet",
			now + 3*ms, now + 100*ms, ms, 40 * ms, now + 4*ms, 0},
		{"a gate's queue in the past counts nothing",
			now + 20*ms, now - 5*ms, ms, 8 * ms, now + 21*ms, 0},
		{"at most GATE_MAX_NS past the threshold",
			now + 48*ms, end - ms/2, ms, gateMax - ms/2, end, 0},
		{"a round longer than 100 ms is remembered (128 clients of 20 KB at 100mbit: 220 ms)",
			now + 48*ms, now + bound + dl + 250*ms, ms, 250 * ms, now + bound + dl + 251*ms, 0},
		{"no packet: unchanged", now + 48*ms, now + 120*ms, 0, 60 * ms, now + 120*ms, 0},
		// The group's queue drains to its mark because the connections
		// the gate holds are not sending yet: the gate's queue is kept
		// until the last of them is let go (gate_until_ns). Forgotten at
		// once, the next connections went ahead of them: 256 clients of
		// 20 KB at 100mbit sent 1.77x the limit.
		{"drained to its mark while a held connection still waits: kept",
			now + 3*ms, now + 100*ms, ms, 40 * ms, now + 101*ms, now + 50*ms},
		{"drained to its mark, the last held connection let go: forgiven",
			now + 3*ms, now + 100*ms, ms, 40 * ms, now + 4*ms, now - ms},
	} {
		c := rxfreshGateCase{VtimeNs: tc.vtime, GateVtNs: tc.gateVt, NowNs: now, DropLargeNs: dl, MarkNs: mark, MaxBacklogNs: bound, CostNs: tc.cost, GateUntilNs: tc.until}
		if _, err := objs.GateRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.OverNs != tc.over || c.GateVtNs != tc.gateVtOut {
			t.Errorf("%s: over %d ns, gate's queue at now%+d; want %d, now%+d",
				tc.name, c.OverNs, int64(c.GateVtNs-now), tc.over, int64(tc.gateVtOut-now))
		}
	}
}

// TestGateWait: the timeout the gate asks for (gateq.h, gate_reply and
// gate_longest_ns), in jiffies of 4 ms. A connection that leaves whole once
// admitted (its kind's record fits ADMIT_BYTES and every group over its
// threshold admits) may wait a whole round, up to GATE_MAX_NS: at 100 ms, 128
// clients of 20 KB at 100mbit (a 220 ms round) sent 2.03x the limit. One
// that is paced afterwards waits at most GATE_PACED_MAX_NS: with 600 ms
// there, 128 clients of 50 KB at 100mbit had a P99 of 815 ms against 622.
func TestGateWait(t *testing.T) {
	objs := load(t)
	const (
		ms = 1_000_000
		j  = 4 * ms
	)
	for _, tc := range []struct {
		name         string
		wait, least  int64
		fits, admits uint32
		reply        uint32
	}{
		{"a short excess waits the least", ms, 4 * ms, 1, 1, 1},
		{"rounded up to whole jiffies", 9 * ms, 4 * ms, 1, 1, 3},
		{"admitted whole: a 220 ms round is waited out", 220 * ms, 4 * ms, 1, 1, 55},
		{"admitted whole: at most GATE_MAX_NS", 2000 * ms, 4 * ms, 1, 1, 150},
		{"paced afterwards (the record is over ADMIT_BYTES): at most 100 ms", 220 * ms, 4 * ms, 0, 1, 25},
		{"paced afterwards (a group over its threshold paces): at most 100 ms", 220 * ms, 4 * ms, 1, 0, 25},
		{"a far client's least wait is kept over the paced bound", 50 * ms, 150 * ms, 0, 0, 38},
		{"a client further than GATE_MAX_NS is not gated", 50 * ms, 700 * ms, 1, 1, 0},
	} {
		c := rxfreshGateWaitCase{WaitNs: tc.wait, LeastNs: tc.least, JiffyNs: j, Fits: tc.fits, Admits: tc.admits}
		if _, err := objs.GateWaitRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Reply != tc.reply {
			t.Errorf("%s: timeout %d jiffies, want %d", tc.name, c.Reply, tc.reply)
		}
	}
}
