package rxfreshtest

// Decision table of what a packet's verdict leaves in its socket's assist
// state (bpf/include/policy.h, verdict_learn), run in the kernel with
// BPF_PROG_TEST_RUN: a refused packet must not overwrite the share with the
// 0 its verdict carries, which both assists read as "no limit".

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
	const old, oldXfer = 7_000_000, 56_000_000
	for _, tc := range []struct {
		name               string
		dir, drop          uint32
		want, xfer         uint64
		wantWant, wantXfer uint64
	}{
		{"egress, passed: takes the new shares", dirEgress, 0, 5_000_000, 40_000_000, 5_000_000, 40_000_000},
		{"egress, passed with no limit on the path: 0 (the cap is lifted)", dirEgress, 0, 0, 0, 0, 0},
		{"egress, refused (its verdict says 0): keeps the last shares", dirEgress, 1, 0, 0, old, oldXfer},
		{"ingress, passed: takes the new share, no transfer share", dirIngress, 0, 5_000_000, 40_000_000, 5_000_000, oldXfer},
		{"ingress, passed with no limit on the path: 0 (the clamp is lifted)", dirIngress, 0, 0, 0, 0, oldXfer},
		{"ingress, refused (its verdict says 0): keeps the last share", dirIngress, 1, 0, 0, old, oldXfer},
		{"ingress, refused above a level that set a share: keeps the last", dirIngress, 1, 3_000_000, 0, old, oldXfer},
	} {
		c := rxfreshLearnCase{LastWantBps: old, LastXferBps: oldXfer, WantBps: tc.want, XferBps: tc.xfer, Dir: tc.dir, Drop: tc.drop}
		if _, err := objs.LearnRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.OutWantBps != tc.wantWant || c.OutXferBps != tc.wantXfer {
			t.Errorf("%s: want_Bps %d, xfer_Bps %d; want %d, %d", tc.name, c.OutWantBps, c.OutXferBps, tc.wantWant, tc.wantXfer)
		}
	}
}
