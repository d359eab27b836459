package rxfreshtest

// Decision table of how a TCP packet is protected from refusal at a level
// (bpf/include/policy.h, protection, with the packet's own protection as
// the hooks set it: tx_protected on egress, rx_protected's on ingress), run
// in the kernel with BPF_PROG_TEST_RUN: handshakes and flows something else
// holds always; an egress flow with fewer than min_inflight packets out
// always where the pacing assist holds the group's flows, and only up to
// the queue's bound without it (--no-pace), where nothing else would hold
// a server whose responses never have two packets out; an ingress packet
// as rx_protected said, whatever the limit.

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
		ingress, rx           uint32
		want                  uint32
	}{
		{"a SYN-ACK, paced group", 1, 0, 0, 2, 1, 0, 0, always},
		{"a SYN-ACK, --no-pace: the gate's to hold, never refused", 1, 0, 0, 2, 0, 0, 0, always},
		{"a flow TCP paces at its share (flow_held)", 0, 1, 10, 2, 1, 0, 0, always},
		{"one packet out, paced group: the assist holds it", 0, 0, 1, 2, 1, 0, 0, always},
		{"nothing out, paced group", 0, 0, 0, 2, 1, 0, 0, always},
		{"one packet out, --no-pace: up to the queue's bound", 0, 0, 1, 2, 0, 0, 0, bound},
		{"nothing out, --no-pace: up to the queue's bound", 0, 0, 0, 2, 0, 0, 0, bound},
		{"two packets out, paced group: refusable", 0, 0, 2, 2, 1, 0, 0, none},
		{"two packets out, --no-pace: refusable", 0, 0, 2, 2, 0, 0, 0, none},
		{"packets out unknown (no TCP socket): refusable", 0, 0, ^uint32(0), 2, 0, 0, 0, none},
		{"min_inflight 0: nothing protected by count", 0, 0, 0, 0, 0, 0, 0, none},
		{"ingress, rx_protected none: refusable, the count unknown", 0, 0, 0, 2, 1, 1, none, none},
		{"ingress, rx_protected bound (PSH, an open hole)", 0, 0, 0, 2, 1, 1, bound, bound},
		{"ingress, rx_protected always (pure ACK, SYN)", 0, 0, 0, 2, 0, 1, always, always},
	} {
		c := rxfreshProtectCase{Syn: tc.syn, Held: tc.held, PacketsOut: tc.packetsOut, MinInflight: tc.min, Pace: tc.pace,
			Ingress: tc.ingress, Rx: tc.rx}
		if _, err := objs.ProtectRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Prot != tc.want {
			t.Errorf("%s: protection %d, want %d", tc.name, c.Prot, tc.want)
		}
	}
}
