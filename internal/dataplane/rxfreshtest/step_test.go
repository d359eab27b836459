package rxfreshtest

// Decision table of one step of a group's share loop (bpf/include/share.h,
// share_step), run in the kernel with BPF_PROG_TEST_RUN: how far the share
// multiplier m moves towards the interval's correction. Ingress a quarter
// of the way; egress a sixteenth (a server's unpaced first segments come in
// bursts that a faster loop followed, swinging every paced flow's cap).

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestShareStep(t *testing.T) {
	objs := load(t)
	const one = 1 << 16 // m and ratio are 16-bit fixed point
	for _, tc := range []struct {
		name     string
		m, ratio uint64
		egress   uint32
		want     uint64
	}{
		{"ingress: a quarter of the way up", one, 2 * one, 0, one + one/4},
		{"ingress: a quarter of the way down", one, one / 2, 0, one - one/8},
		{"egress: a sixteenth of the way up", one, 2 * one, 1, one + one/16},
		{"egress: a sixteenth of the way down", one, one / 2, 1, one - one/32},
		{"egress, on target: m stays", 3 * one / 4, one, 1, 3 * one / 4},
		{"ingress, on target: m stays", 3 * one / 4, one, 0, 3 * one / 4},
		{"egress, the largest m and ratio: no overflow", 1 << 35, 2 * one, 1, (1 << 35) + (1 << 31)},
		{"ingress, the largest m and ratio: no overflow", 1 << 35, 2 * one, 0, (1 << 35) + (1 << 33)},
	} {
		c := rxfreshStepCase{M: tc.m, Ratio: tc.ratio, Egress: tc.egress}
		if _, err := objs.StepRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.OutM != tc.want {
			t.Errorf("%s: m %d, want %d", tc.name, c.OutM, tc.want)
		}
	}
}
