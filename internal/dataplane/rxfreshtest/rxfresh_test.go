package rxfreshtest

// Decision table of the ingress RPC class (bpf/include/rxfresh.h), run in
// the kernel with BPF_PROG_TEST_RUN: one receiving socket's state carried
// through a sequence of packets, each step checking whether the packet is an
// RPC candidate (never marked) and the window the assist keeps open.

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/hbm-dev/hbm/internal/testutil"
)

const freshBytes = 64 << 10 // FRESH_BURST_BYTES

type step struct {
	name            string
	seq, payload    uint32
	segsOut, rcvNxt uint32
	freshRoom       bool // the last candidate found room in the RPC budget
	wantCandidate   bool
	wantWinBytes    uint32
	wantRPC         bool // rx_rpc after the step
}

// load loads the harness's programs (closed when the test ends), or skips
// the test where BPF_PROG_TEST_RUN cannot run.
func load(t *testing.T) *rxfreshObjects {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: BPF_PROG_TEST_RUN needs root")
	}
	testutil.RequireRoot(t)
	var objs rxfreshObjects
	if err := loadRxfreshObjects(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

func run(t *testing.T, steps []step) {
	t.Helper()
	objs := load(t)
	var c rxfreshRxfreshCase
	for _, s := range steps {
		c.Seq, c.Payload, c.SegsOut, c.RcvNxt = s.seq, s.payload, s.segsOut, s.rcvNxt
		c.S.FreshRoom = 0
		if s.freshRoom {
			c.S.FreshRoom = 1
		}
		if _, err := objs.RxfreshRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", s.name, err)
		}
		if got := c.Candidate != 0; got != s.wantCandidate {
			t.Errorf("%s: candidate %v, want %v", s.name, got, s.wantCandidate)
		}
		if c.WinBytes != s.wantWinBytes {
			t.Errorf("%s: window %d bytes, want %d", s.name, c.WinBytes, s.wantWinBytes)
		}
		if got := c.S.RxRpc != 0; got != s.wantRPC {
			t.Errorf("%s: rpc socket %v, want %v", s.name, got, s.wantRPC)
		}
	}
}

// A request/response socket: 10 KB requests, a reply after each.
func TestRPCSocket(t *testing.T) {
	const a = 1000
	run(t, []step{
		{"first data of a connection is a candidate", a, 1448, 0, a + 1448, true, true, freshBytes, true},
		{"rest of the 10 KB request", a + 1448, 8792, 0, a + 10240, true, true, freshBytes, true},
		// The server replied (data_segs_out 0 -> 1): the next request is a new burst.
		{"next request after the reply", a + 10240, 10240, 1, a + 20480, true, true, freshBytes, true},
		{"no room in the RPC budget: no open window", a + 20480, 10240, 2, a + 30720, false, true, 0, true},
		{"room again", a + 30720, 10240, 3, a + 40960, true, true, freshBytes, true},
	})
}

// A bulk transfer: a stream that never replies, then a 1 MB request.
func TestBulkSocket(t *testing.T) {
	const a = 5000
	run(t, []step{
		{"first 64 KB of a stream: candidate", a, 65536 - 1448, 0, a + 65536 - 1448, true, true, freshBytes, true},
		{"the segment that ends the fresh part", a + 65536 - 1448, 1448, 0, a + 65536, true, true, 0, true},
		{"past 64 KB without a reply: bulk, not an RPC socket", a + 65536, 1448, 0, a + 65536 + 1448, true, false, 0, false},
		{"much later, still bulk", a + 1<<20, 1448, 0, a + 1<<20 + 1448, true, false, 0, false},
		// A reply, then the next transfer: a candidate for 64 KB (never
		// marked), but the socket's last burst was large: no open window.
		{"next transfer after a reply", a + 2<<20, 1448, 1, a + 2<<20 + 1448, true, true, 0, false},
		{"it stays small: an RPC socket again at the next turnover", a + 2<<20 + 1448, 1448, 2, a + 2<<20 + 2896, true, true, freshBytes, true},
	})
}

// Sequence numbers wrap: the comparisons are modulo 2^32.
func TestSequenceWrap(t *testing.T) {
	a := uint32(0xffffff00)
	run(t, []step{
		{"burst starting just below the wrap", a, 1448, 0, a + 1448, true, true, freshBytes, true},
		{"inside the burst across the wrap", a + 1448, 1448, 0, a + 2896, true, true, freshBytes, true},
		{"past the fresh part across the wrap", a + 65536, 1448, 0, a + 65536 + 1448, true, false, 0, false},
	})
}
