package rxfreshtest

// Decision table of the egress assist's cwnd clamp (bpf/include/assist.h,
// cwnd_segs), run in the kernel with BPF_PROG_TEST_RUN: a millisecond at
// the flow's cap, or half a millisecond at its group's rate where that is
// more, never past four milliseconds at the cap; twice the cap's bytes in
// flight at the RTT at least, and never below four segments.

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestCwndSegs(t *testing.T) {
	objs := load(t)
	const (
		mss  = 1448
		mbit = 125_000 // bytes/s
	)
	for _, tc := range []struct {
		name                      string
		mss, srttUs, cap, groupBs uint64
		want                      uint32
	}{
		{"no cap: no clamp", mss, 50, 0, 1000 * mbit, 0},
		{"a cap past the option's 32 bits: no clamp", mss, 50, 1 << 33, 1000 * mbit, 0},
		// One of 32 streams in a 1gbit group (31.25 Mbit/s): a millisecond
		// at the cap is 2 segments (4 KB), half a millisecond at 1 Gbit/s 43,
		// four at the cap 10.
		{"one of 32 at 1gbit: four milliseconds at the cap", mss, 50, 31_250 * mbit / 1000, 1000 * mbit, 10},
		{"the same, group not known (an older socket): the minimum", mss, 50, 31_250 * mbit / 1000, 0, 4},
		// One of 4 (250 Mbit/s): 21 segments a millisecond at the cap, 43
		// at the group's half millisecond.
		{"one of 4 at 1gbit: half a millisecond at the group's rate", mss, 50, 250 * mbit, 1000 * mbit, 43},
		{"the same, group not known: a millisecond at the cap", mss, 50, 250 * mbit, 0, 21},
		// A flow with the whole group: a millisecond at the cap is more.
		{"alone in its group: a millisecond at the cap", mss, 50, 1000 * mbit, 1000 * mbit, 86},
		// The demo: 3 flows in 200mbit (66.7 Mbit/s each): 5 segments a
		// millisecond, 8 at the group's half.
		{"one of 3 at 200mbit: the group's half millisecond", mss, 50, 66_667 * mbit / 1000, 200 * mbit, 8},
		{"one of 128 at 200mbit: the minimum", mss, 50, 1_562 * mbit / 1000, 200 * mbit, 4},
		{"a long RTT: twice the cap's bytes in flight", mss, 20_000, 31_250 * mbit / 1000, 1000 * mbit, 107},
		{"mss 0 (not known): 1448 bytes", 0, 50, 250 * mbit, 1000 * mbit, 43},
		{"a group rate past the option's 32 bits: four milliseconds at the cap", mss, 50, 250 * mbit, 1 << 40, 86},
		{"more than 65535 segments: no clamp", 100, 100_000, 4_000_000_000, 0, 0},
	} {
		c := rxfreshCwndCase{Mss: tc.mss, SrttUs: tc.srttUs, Cap: tc.cap, GroupBps: tc.groupBs}
		if _, err := objs.CwndRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Segs != tc.want {
			t.Errorf("%s: %d segments, want %d", tc.name, c.Segs, tc.want)
		}
	}
}
