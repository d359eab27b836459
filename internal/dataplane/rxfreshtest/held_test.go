package rxfreshtest

// Decision table of which egress packets the policer may refuse at all
// (bpf/include/policy.h, flow_held), run in the kernel with
// BPF_PROG_TEST_RUN: a flow TCP already paces at its share, and the first
// segments of a connection opened through the handshake gate (the gate
// holds those), are never refused (a refusal would only stall them until
// the loss-probe timer); what nothing else holds still is.

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestFlowHeld(t *testing.T) {
	objs := load(t)
	const share = 4_000_000 // bytes/s
	const none = ^uint64(0)
	for _, tc := range []struct {
		name                string
		want, applied       uint64
		gateOpen, candidate uint32
		noState             uint32
		held                uint32
	}{
		{"paced, capped at its share: held by TCP", share, share, 0, 0, 0, 1},
		{"paced, capped below its share: held", share, share / 2, 0, 0, 0, 1},
		{"paced, capped within 1/32 above its share (pace_set's tolerance): held", share, share + share/32, 0, 0, 0, 1},
		{"paced, capped above its share (the share fell; the next ACK caps it): refusable", share, share + share/16, 0, 0, 0, 0},
		{"paced, never capped by the assist: refusable", share, 0, 0, 0, 0, 0},
		{"paced, cap lifted (no limit when it was set): refusable", share, none, 0, 0, 0, 0},
		{"paced, no share known yet: refusable", 0, share, 0, 0, 0, 0},
		{"a gated connection's paced packet: as any paced packet", share, share + share/16, 1, 0, 0, 0},
		{"first segments of an open the gate could not hold (a client's towards a server never reached; TCP does not pace them): refusable", share, share, 0, 1, 0, 0},
		{"first segments of an open through the gate (a server's, or a client's towards a known server): held", share, share, 1, 1, 0, 1},
		{"first segments through the gate, never capped: held", 0, 0, 1, 1, 0, 1},
		{"no assist state (not TCP, or no data sent): refusable", share, share, 1, 1, 1, 0},
	} {
		c := rxfreshHeldCase{WantBps: tc.want, Applied: tc.applied, GateOpen: tc.gateOpen, Candidate: tc.candidate, NoState: tc.noState}
		if _, err := objs.HeldRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Held != tc.held {
			t.Errorf("%s: flow_held %d, want %d", tc.name, c.Held, tc.held)
		}
	}
}
