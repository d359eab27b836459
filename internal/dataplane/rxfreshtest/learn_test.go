package rxfreshtest

// Decision table of what a packet's verdict leaves in its socket's assist
// state (bpf/include/policy.h, verdict_learn), run in the kernel with
// BPF_PROG_TEST_RUN: a refused packet must not overwrite the share with the
// 0 its verdict carries, which both assists read as "no limit"; an egress
// packet that passed leaves its groups' least rate in force in KiB/s (the
// cwnd clamp's size: assist.h, cwnd_segs), saturated at 32 bits.

import (
	"testing"

	"github.com/cilium/ebpf"
)

const (
	dirEgress  = uint32(rxfreshHbmDirHBM_DIR_EGRESS)
	dirIngress = uint32(rxfreshHbmDirHBM_DIR_INGRESS)
)

func TestVerdictLearn(t *testing.T) {
	objs := load(t)
	const old, oldXfer, oldGroup = 7_000_000, 56_000_000, 24_414 // oldGroup: 200 Mbit/s in KiB/s
	const gbit = 125_000_000                                     // 1 Gbit/s in bytes/s: 122,070 KiB/s
	for _, tc := range []struct {
		name               string
		dir, drop          uint32
		want, xfer, group  uint64
		wantWant, wantXfer uint64
		wantGroup          uint32
	}{
		{"egress, passed: takes the new shares and rate", dirEgress, 0, 5_000_000, 40_000_000, gbit, 5_000_000, 40_000_000, 122_070},
		{"egress, passed with no limit on the path: 0 (the cap is lifted)", dirEgress, 0, 0, 0, 0, 0, 0, 0},
		{"egress, refused (its verdict says 0): keeps the last shares and rate", dirEgress, 1, 0, 0, 0, old, oldXfer, oldGroup},
		{"egress, a rate past 32 bits of KiB/s: saturated", dirEgress, 0, 5_000_000, 40_000_000, 1 << 50, 5_000_000, 40_000_000, 0xffffffff},
		{"ingress, passed: takes the new share, no transfer share or rate", dirIngress, 0, 5_000_000, 40_000_000, gbit, 5_000_000, oldXfer, oldGroup},
		{"ingress, passed with no limit on the path: 0 (the clamp is lifted)", dirIngress, 0, 0, 0, 0, 0, oldXfer, oldGroup},
		{"ingress, refused (its verdict says 0): keeps the last share", dirIngress, 1, 0, 0, 0, old, oldXfer, oldGroup},
		{"ingress, refused above a level that set a share: keeps the last", dirIngress, 1, 3_000_000, 0, gbit, old, oldXfer, oldGroup},
	} {
		c := rxfreshLearnCase{LastWantBps: old, LastXferBps: oldXfer, LastGroupKBps: oldGroup, WantBps: tc.want, XferBps: tc.xfer,
			GroupBps: tc.group, Dir: tc.dir, Drop: tc.drop}
		if _, err := objs.LearnRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.OutWantBps != tc.wantWant || c.OutXferBps != tc.wantXfer || c.OutGroupKBps != tc.wantGroup {
			t.Errorf("%s: want_Bps %d, xfer_Bps %d, group_kBps %d; want %d, %d, %d", tc.name,
				c.OutWantBps, c.OutXferBps, c.OutGroupKBps, tc.wantWant, tc.wantXfer, tc.wantGroup)
		}
	}
}
