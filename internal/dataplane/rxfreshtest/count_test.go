package rxfreshtest

// Decision table of a flow's count in its group's flow-count windows
// (bpf/include/share.h, share_count), run in the kernel with
// BPF_PROG_TEST_RUN: the share divides the group's room by the larger of
// the last window's count and the current one's, each flow weighing
// XFER_WEIGHT while in a transfer and 1 once bulk. A flow that changes
// class is counted with its new weight in both windows' counts, whether
// it changes within a window or with its first packet of a new one (a
// group's first flows turn bulk as a window ends: docs/design.md).

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

const (
	countReset = 0
	countPkt   = 1
	xferWeight = 8
)

func TestShareCount(t *testing.T) {
	objs := load(t)
	const win = uint64(250 * time.Millisecond)
	ms := func(n uint64) uint64 { return n * uint64(time.Millisecond) }
	type step struct {
		at   uint64 // ms after the reset
		xfer uint32
		// want after it
		flows, flowsNow, seen, seenNow, shareFlows uint32
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a transfer, then bulk within the next window", []step{
			{1, 1, 0, xferWeight, 0, xferWeight, xferWeight},
			{260, 1, xferWeight, xferWeight, xferWeight, xferWeight, xferWeight},
			{300, 0, 1, 1, 1, 1, 1},
		}},
		{"a transfer, then bulk with its first packet of the next window", []step{
			{1, 1, 0, xferWeight, 0, xferWeight, xferWeight},
			{260, 0, 1, 1, 1, 1, 1},
			{270, 0, 1, 1, 1, 1, 1},
		}},
		{"bulk, then a transfer with its first packet of the next window", []step{
			{1, 0, 0, 1, 0, 1, 1},
			{260, 1, xferWeight, xferWeight, xferWeight, xferWeight, xferWeight},
		}},
		{"a class kept across windows: counted once in each", []step{
			{1, 1, 0, xferWeight, 0, xferWeight, xferWeight},
			{100, 1, 0, xferWeight, 0, xferWeight, xferWeight},
			{260, 1, xferWeight, xferWeight, xferWeight, xferWeight, xferWeight},
		}},
		{"a window skipped while idle counts as empty", []step{
			{1, 1, 0, xferWeight, 0, xferWeight, xferWeight},
			{600, 0, 0, 1, 0, 1, 1},
		}},
	} {
		c := rxfreshCountCase{Op: countReset, NowNs: ms(1000), WinNs: win}
		if _, err := objs.CountRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: reset: %v", tc.name, err)
		}
		for i, st := range tc.steps {
			c := rxfreshCountCase{Op: countPkt, NowNs: ms(1000 + st.at), Xfer: st.xfer}
			if _, err := objs.CountRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
				t.Fatalf("%s: step %d: %v", tc.name, i, err)
			}
			got := [5]uint32{c.Flows, c.FlowsNow, c.Seen, c.SeenNow, c.ShareFlows}
			want := [5]uint32{st.flows, st.flowsNow, st.seen, st.seenNow, st.shareFlows}
			if got != want {
				t.Errorf("%s: step %d (%d ms, xfer %d): flows, flows_now, seen, seen_now, share_flows %v, want %v",
					tc.name, i, st.at, st.xfer, got, want)
			}
		}
	}
}
