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
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

const (
	countReset = 0 // COUNT_* in rxfresh.bpf.c
	countPkt   = 1
	countIdle  = 2
	countClose = 3
	countWrite = 4
	xferWeight = 8
)

// countWin is the flow-count window of the cases; countMs is n ms in ns.
const countWin = uint64(250 * time.Millisecond)

func countMs(n uint64) uint64 { return n * uint64(time.Millisecond) }

// runCount runs one step of count_run and returns the case as it came back.
func runCount(t *testing.T, objs *rxfreshObjects, c rxfreshCountCase, what string) rxfreshCountCase {
	t.Helper()
	if _, err := objs.CountRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

func TestShareCount(t *testing.T) {
	objs := load(t)
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
		runCount(t, objs, rxfreshCountCase{Op: countReset, NowNs: countMs(1000), WinNs: countWin}, tc.name+": reset")
		for i, st := range tc.steps {
			c := runCount(t, objs, rxfreshCountCase{Op: countPkt, NowNs: countMs(1000 + st.at), Xfer: st.xfer},
				fmt.Sprintf("%s: step %d", tc.name, i))
			got := [5]uint32{c.Flows, c.FlowsNow, c.Seen, c.SeenNow, c.ShareFlows}
			want := [5]uint32{st.flows, st.flowsNow, st.seen, st.seenNow, st.shareFlows}
			if got != want {
				t.Errorf("%s: step %d (%d ms, xfer %d): flows, flows_now, seen, seen_now, share_flows %v, want %v",
					tc.name, i, st.at, st.xfer, got, want)
			}
		}
	}
}

// An egress flow that goes idle leaves the flow counts at once but stays
// in the share's count (grace_w) until it sends again or closes: a
// keep-alive connection's next response waits in its socket for its first
// packet's pacing time, and the share rose for every response waiting so
// (measured: 128 keep-alive clients of 3 KB at 50mbit, 16% of sockets at
// every sample with their whole response unsent, the count of sending
// flows 584-1,024 units of 1,024 from one 17 ms sample to the next, and the
// share with it: docs/design.md). A closed flow leaves at once.
func TestShareCountIdleGrace(t *testing.T) {
	objs := load(t)
	type step struct {
		at       uint64 // ms after the reset
		sock, op uint32
		// want after it
		flowsNow, grace, shareFlows uint32
	}
	const w = xferWeight
	steps := []step{
		{1, 0, countPkt, w, 0, w},
		{2, 1, countPkt, 2 * w, 0, 2 * w},
		{3, 0, countIdle, w, w, 2 * w},    // A idle: still counted
		{4, 0, countIdle, w, w, 2 * w},    // ... once
		{5, 0, countPkt, 2 * w, 0, 2 * w}, // A's next response: counted, not in grace
		{6, 0, countIdle, w, w, 2 * w},    // idle again
		{7, 0, countClose, w, 0, w},       // and closed: gone
		{8, 1, countClose, 0, 0, 1},       // B closed while sending: gone at once
		{9, 2, countPkt, w, 0, w},         // C
		{260, 2, countIdle, 0, w, w},      // idle in the next window
		{261, 2, countPkt, w, 0, w},       // back
	}
	runCount(t, objs, rxfreshCountCase{Op: countReset, NowNs: countMs(1000), WinNs: countWin}, "reset")
	for i, st := range steps {
		c := runCount(t, objs, rxfreshCountCase{Op: st.op, NowNs: countMs(1000 + st.at), Xfer: 1, Sock: st.sock},
			fmt.Sprintf("step %d", i))
		got := [3]uint32{c.FlowsNow, c.Grace, c.ShareFlows}
		want := [3]uint32{st.flowsNow, st.grace, st.shareFlows}
		if got != want {
			t.Errorf("step %d (%d ms, flow %d, op %d): flows_now, grace, share_flows %v, want %v",
				i, st.at, st.sock, st.op, got, want)
		}
	}
}

// An idle egress flow whose owner writes again is counted back at the write
// (share.h, share_write), not at its first packet, which may wait out its
// pacing time: counted only from that packet, a keep-alive pool's flows
// spent the wait in grace_w, halved every control interval, and the share
// swung by half with the count (128 keep-alive clients of 5 KB at 100mbit:
// docs/design.md, "Counted at the write"). Only a write that answers
// something (the socket received data since its last transfer began): TCP's
// small-queue handler writes right after a socket goes idle, answering
// nothing, and a flow that never sends again must fade from the count.
func TestShareCountWrite(t *testing.T) {
	objs := load(t)
	type step struct {
		at       uint64 // ms after the reset
		sock, op uint32
		rcv      uint32 // the socket's bytes_received
		// want after it
		flowsNow, grace, shareFlows uint32
	}
	const w = xferWeight
	const a, b = 0, 1
	steps := []step{
		{1, a, countPkt, 100, w, 0, w},
		{2, b, countPkt, 0, 2 * w, 0, 2 * w},
		{3, a, countIdle, 100, w, w, 2 * w},
		{4, a, countWrite, 100, w, w, 2 * w},     // nothing received: still idle
		{5, a, countWrite, 149, 2 * w, 0, 2 * w}, // a request came: counted back
		{6, a, countWrite, 149, 2 * w, 0, 2 * w}, // ... once
		{20, a, countPkt, 149, 2 * w, 0, 2 * w},  // its first packet: counted already
		{21, a, countIdle, 149, w, w, 2 * w},
		{22, b, countIdle, 0, 0, 2 * w, 2 * w},
		{260, a, countWrite, 200, w, w, 2 * w}, // in the next window
		{261, b, countWrite, 0, w, w, 2 * w},   // b received nothing
		{262, a, countClose, 200, 0, w, w},
	}
	runCount(t, objs, rxfreshCountCase{Op: countReset, NowNs: countMs(1000), WinNs: countWin}, "reset")
	for i, st := range steps {
		c := runCount(t, objs, rxfreshCountCase{Op: st.op, NowNs: countMs(1000 + st.at), Xfer: 1, Sock: st.sock, Rcv: st.rcv},
			fmt.Sprintf("step %d", i))
		got := [3]uint32{c.FlowsNow, c.Grace, c.ShareFlows}
		want := [3]uint32{st.flowsNow, st.grace, st.shareFlows}
		if got != want {
			t.Errorf("step %d (%d ms, flow %d, op %d, rcv %d): flows_now, grace, share_flows %v, want %v",
				i, st.at, st.sock, st.op, st.rcv, got, want)
		}
	}
}
