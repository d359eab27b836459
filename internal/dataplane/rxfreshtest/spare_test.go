package rxfreshtest

// Decision table of which packets a level leaves unsignalled, neither CE
// nor the congestion code (bpf/include/policy.h, signal_spared), run in the
// kernel with BPF_PROG_TEST_RUN: below the mark everything; a connection's
// first segments and a borrower's within its guarantee always; an egress
// TCP flow the pacing assist holds (assist state, a level that paces) up to
// drop-large, where a signal would only shrink its cwnd and its packets;
// what nothing else holds (UDP, --no-pace, no assist state) from the mark
// on, as before.

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestSignalSpared(t *testing.T) {
	objs := load(t)
	const mark, dropLarge = 4_000_000, 12_000_000 // ns
	below, between, above := int64(mark), int64(mark+1), int64(dropLarge+1)
	for _, tc := range []struct {
		name                  string
		backlog               int64
		pace, tcp, counted    uint32
		candidate, guaranteed uint32
		spared                uint32
	}{
		{"at the mark: every packet", below, 0, 0, 0, 0, 0, 1},
		{"paced flow between mark and drop-large: its cap signals", between, 1, 1, 1, 0, 0, 1},
		{"paced flow at drop-large: still spared", dropLarge, 1, 1, 1, 0, 0, 1},
		{"paced flow past drop-large: signalled", above, 1, 1, 1, 0, 0, 0},
		{"--no-pace flow between: signalled (nothing else holds it)", between, 0, 1, 1, 0, 0, 0},
		{"TCP without assist state between: signalled", between, 1, 1, 0, 0, 0, 0},
		{"not egress TCP (UDP, or ingress) between: signalled", between, 1, 0, 1, 0, 0, 0},
		{"a connection's first segments past drop-large: spared", above, 0, 1, 1, 1, 0, 1},
		{"a borrower within its guarantee past drop-large: spared", above, 0, 0, 0, 0, 1, 1},
	} {
		c := rxfreshSpareCase{BacklogNs: tc.backlog, MarkNs: mark, DropLargeNs: dropLarge, Pace: tc.pace,
			EgressTcp: tc.tcp, Counted: tc.counted, Candidate: tc.candidate, Guaranteed: tc.guaranteed}
		if _, err := objs.SpareRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.Spared != tc.spared {
			t.Errorf("%s: signal_spared %d, want %d", tc.name, c.Spared, tc.spared)
		}
	}
}
