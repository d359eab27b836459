package rxfreshtest

// Decision table of how an egress TCP packet is protected from refusal
// (bpf/include/policy.h, tx_protected), run in the kernel with
// BPF_PROG_TEST_RUN: handshakes and flows something else holds always; a
// flow with fewer than min_inflight packets out always where the pacing
// assist holds the group's flows, and only up to the queue's bound without
// it (--no-pace), where nothing else would hold a server whose responses
// never have two packets out.

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestTxProtected(t *testing.T) {
	objs := load(t)
	const (
		none   = 0 // PROTECT_NONE
		bound  = 1 // PROTECT_BOUND
		always = 2 // PROTECT_ALWAYS
	)
	for _, tc := range []struct {
		name                  string
		syn, held             uint32
		packetsOut, min, pace uint32
		want                  uint32
	}{
		{"a SYN-ACK, paced group", 1, 0, 0, 2, 1, always},
		{"a SYN-ACK, --no-pace: the gate's to hold, never refused", 1, 0, 0, 2, 0, always},
		{"a flow TCP paces at its share (flow_held)", 0, 1, 10, 2, 1, always},
		{"one packet out, paced group: the assist holds it", 0, 0, 1, 2, 1, always},
		{"nothing out, paced group", 0, 0, 0, 2, 1, always},
		{"one packet out, --no-pace: up to the queue's bound", 0, 0, 1, 2, 0, bound},
		{"nothing out, --no-pace: up to the queue's bound", 0, 0, 0, 2, 0, bound},
		{"two packets out, paced group: refusable", 0, 0, 2, 2, 1, none},
		{"two packets out, --no-pace: refusable", 0, 0, 2, 2, 0, none},
		{"packets out unknown (no TCP socket): refusable", 0, 0, ^uint32(0), 2, 0, none},
		{"min_inflight 0: nothing protected by count", 0, 0, 0, 0, 0, none},
	} {
		c := rxfreshProtectCase{Syn: tc.syn, Held: tc.held, PacketsOut: tc.packetsOut, MinInflight: tc.min, Pace: tc.pace}
		if _, err := objs.ProtectRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Prot != tc.want {
			t.Errorf("%s: protection %d, want %d", tc.name, c.Prot, tc.want)
		}
	}
}
