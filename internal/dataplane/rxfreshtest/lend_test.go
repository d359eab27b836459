package rxfreshtest

// Decision table of a lender's multiple at a lending interval's end
// (bpf/include/lendctl.h, lend_tick), run in the kernel with
// BPF_PROG_TEST_RUN. Above the mark the multiple falls only while the queue
// grows or stands: cutting on while it drains (the borrowers' caps follow a
// cut only at their flows' next packets) took the multiple below the rate
// and back past it every few tens of intervals (docs/design.md, "The
// lender cuts only while its queue grows").

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestLendTick(t *testing.T) {
	objs := load(t)
	const (
		one   = 1 << 16 // LEND_ONE
		ms    = 1_000_000
		now   = 1_000 * ms
		gbit  = 1_000_000_000
		rateB = gbit / 8 // bytes/s
		// bytes passed in a 1 ms interval at a rate of r bytes/s
		perMs = 1000
	)
	lent := [3]uint64{0, 3 * one, 0} // the normal class lent three times its guarantees
	wanted := [3]uint64{0, now - ms, 0}
	for _, tc := range []struct {
		name             string
		bytes            uint64
		backlog          int64
		prev             uint32
		wantNs           [3]uint64
		rate, ceil, eff  uint64
		q16              [3]uint64
		ret, want, prevO uint32
	}{
		{"above the mark and growing: down by the rate over what passed (half)", 2 * rateB / perMs, 6 * ms, 5 * ms, wanted, gbit, gbit, gbit, [3]uint64{0, 3 * one / 2, 0}, 0, 0, 6 * ms},
		{"above the mark and standing: down a sixteenth at least", rateB / perMs, 6 * ms, 6 * ms, wanted, gbit, gbit, gbit, [3]uint64{0, 3 * one * 15 / 16, 0}, 0, 0, 6 * ms},
		{"above the mark but falling: stays", 2 * rateB / perMs, 6 * ms, 7 * ms, wanted, gbit, gbit, gbit, lent, 0, 0, 6 * ms},
		{"below the mark, half passed, wanted: up a quarter of the way to twice", rateB / 2 / perMs, ms, 6 * ms, wanted, gbit, gbit, gbit, [3]uint64{0, 3 * one * 5 / 4, 0}, 0, 0, ms},
		{"below the mark, nobody wanted within 4 ms: stays", rateB / 2 / perMs, ms, 0, [3]uint64{0, now - 5*ms, 0}, gbit, gbit, gbit, lent, 0, 0, ms},
		{"credit (a backlog below zero) is recorded as none", rateB / 2 / perMs, -2 * ms, 3 * ms, [3]uint64{}, gbit, gbit, gbit, lent, 0, 0, 0},
		{"a borrower (and lender) held by its queue, below its ceiling: wants more, cuts what it lends", 2 * rateB / 10 / perMs, 5 * ms, 4 * ms, [3]uint64{}, gbit / 10, gbit, 3 * gbit / 10, [3]uint64{0, 3 * one * 15 / 16, 0}, 1, 1, 5 * ms},
	} {
		c := rxfreshLendCase{Q16: lent, WantNs: tc.wantNs, EffBps: tc.eff, RateBps: tc.rate, CeilBps: tc.ceil,
			MarkNs: 4 * ms, Bytes: tc.bytes, StartNs: now - ms, NowNs: now, Backlog: tc.backlog, PrevNs: tc.prev}
		if _, err := objs.LendRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Q16 != tc.q16 || c.Ret != tc.ret || c.Want != tc.want || c.PrevNs != tc.prevO {
			t.Errorf("%s: multiples %v, returned %d, want %d, backlog noted %d; want %v, %d, %d, %d",
				tc.name, c.Q16, c.Ret, c.Want, c.PrevNs, tc.q16, tc.ret, tc.want, tc.prevO)
		}
	}
}
