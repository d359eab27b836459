package rxfreshtest

// Decision table of the receive-window clamp (bpf/include/rxwin.h,
// rxwin_bytes), run in the kernel with BPF_PROG_TEST_RUN: one receiving
// socket's state carried through the ACKs it sends, each step moving the
// clock and the data received, and checking the clamp.

import (
	"testing"

	"github.com/cilium/ebpf"
)

const (
	mss   = 1448
	floor = 2 * mss // RXWIN_MIN_MSS segments
	ms    = uint64(1_000_000)
)

type ack struct {
	name    string
	after   uint64 // ns since the last step
	rttUs   uint64 // the kernel's RTT estimate
	got     uint32 // bytes received since the last step
	wantWin uint32
}

// runAcks carries one socket with want_Bps want (and RPC state set by init)
// through acks.
func runAcks(t *testing.T, want uint64, init func(*rxfreshHbmSock), acks []ack) {
	t.Helper()
	objs := load(t)
	c := rxfreshRxwinCase{NowNs: 1000 * ms, Mss: mss, RcvNxt: 1000}
	c.S.WantBps = want
	if init != nil {
		init(&c.S)
	}
	for _, a := range acks {
		c.NowNs += a.after
		c.RttUs = a.rttUs
		c.RcvNxt += a.got
		if _, err := objs.RxwinRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", a.name, err)
		}
		if c.WinBytes != a.wantWin {
			t.Errorf("%s: window %d bytes, want %d", a.name, c.WinBytes, a.wantWin)
		}
	}
}

// A share far above what the flow sends (the share loop wound up: 20 Gbit/s,
// 125 KB at 50 us): the window opens only as the flow uses it, one doubling
// per interval, and closes again when it stops.
func TestRxWindowGrowsAsUsed(t *testing.T) {
	runAcks(t, 2_500_000_000, nil, []ack{
		{"a new flow starts at the floor, not at the share's 125 KB", 0, 50, 0, floor},
		{"10 KB per RTT delivered: twice that", ms, 50, 204_800, 20_480},
		{"it filled that: twice again", ms, 50, 409_600, 40_960},
		{"far more delivered: the share's window binds", ms, 50, 2_000_000, 125_000},
		{"one idle interval: the better of the last two holds", ms, 50, 0, 125_000},
		{"two idle intervals: back to the floor", ms, 50, 0, floor},
		{"idle for 50 ms: the floor", 50 * ms, 50, 0, floor},
	})
}

// The window's RTT is the least estimate of the last second: a 1 ms sample
// (the grain of TCP timestamps) does not open it; an RTT that stays up for
// a second does.
func TestRxWindowLeastRTT(t *testing.T) {
	runAcks(t, 100_000_000, nil, []ack{ // 800 Mbit/s: 5,000 bytes at 50 us
		{"first ACK: the floor", 0, 50, 0, floor},
		{"share x 50 us", ms, 50, 1_000_000, 5_000},
		{"a 1 ms sample: still share x 50 us", ms, 1000, 1_000_000, 5_000},
		{"1 ms for half a second: still 50 us (last half)", 600 * ms, 1000, 60_000_000, 5_000},
		{"1 ms for over a second: share x 1 ms", 600 * ms, 1000, 60_000_000, 100_000},
	})
}

// A queue the flow does not own (another flow's, on the path) holds its RTT
// at 4x its least: what it delivers per RTT is counted on the RTT it has
// now, so the window is not shrunk round after round to the floor.
func TestRxWindowQueuedPath(t *testing.T) {
	runAcks(t, 2_500_000_000, nil, []ack{
		{"first ACK: the floor", 0, 50, 0, floor},
		{"20 KB per 50 us RTT delivered", ms, 50, 409_600, 40_960},
		{"RTT 200 us, the window delivered per RTT: twice the window", ms, 200, 204_800, 81_920},
		{"it filled that: the share's window binds", ms, 200, 409_600, 125_000},
	})
}

// An RPC socket keeps its request's window open through a request
// (rxfresh.h), whatever it delivered before.
func TestRxWindowRPCSocket(t *testing.T) {
	runAcks(t, 2_500_000_000, func(s *rxfreshHbmSock) {
		s.Burst, s.RxRpc, s.FreshRoom = 1, 1, 1
		s.BurstEnd = 1000 + freshBytes
	}, []ack{
		{"10 KB into a request: 64 KB open", 0, 50, 10240, freshBytes},
	})
}

// The clamp is lowered no faster than the window already advertised
// drains (rxwin_descend): a clamp below the window the receiver advertised
// last holds its ACKs back (tcp's __tcp_ack_snd_check) until the
// application reads, and on a busy CPU the sender's loss probe fires first.
func TestRxWindowDescends(t *testing.T) {
	objs := load(t)
	for _, tc := range []struct {
		name      string
		win, cur  uint64
		left      int32
		wantClamp uint64
	}{
		{"raising: at once", 64 << 10, 4 * mss, 0, 64 << 10},
		{"unchanged", 10_000, 10_000, 5_000, 10_000},
		{"within 1/8 above: left as it is", 11_000, 10_000, 0, 10_000},
		{"within 1/8 below: left as it is", 9_000, 10_000, 0, 10_000},
		{"lowering with the window used up: at once", floor, 64 << 10, 0, floor},
		{"data beyond the window (left below zero): as none left", floor, 64 << 10, -mss, floor},
		{"lowering while 40 KB of the window is left: to 40 KB", floor, 64 << 10, 40 << 10, 40 << 10},
		{"a step of one segment, far less than 1/8: taken", floor, 20 << 10, 20<<10 - mss, 20<<10 - mss},
		{"left at or above the clamp: nothing to set", floor, 20 << 10, 20 << 10, 20 << 10},
		{"wanted above left: the wanted clamp", 32 << 10, 64 << 10, 8 << 10, 32 << 10},
	} {
		if got := descend(t, objs, tc.win, tc.cur, tc.left); got != tc.wantClamp {
			t.Errorf("%s: clamp %d bytes, want %d", tc.name, got, tc.wantClamp)
		}
	}
}

func descend(t *testing.T, objs *rxfreshObjects, win, cur uint64, left int32) uint64 {
	t.Helper()
	c := rxfreshRxdescendCase{Win: win, Cur: cur, Left: left}
	if _, err := objs.RxdescendRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
		t.Fatalf("test run: %v", err)
	}
	return c.Clamp
}

// A socket whose clamp stands far above what it wants (its first burst's
// 64 KB window, the share's 3 KB) reaches it however often it ACKs, and no
// ACK on the way is held back. The kernel's side is modelled: the ACK whose
// callback sets the clamp advertises rcv_wnd = the larger of the clamp and
// the window left, each rounded up to the scale unit (tcp_select_window
// never moves the right edge back), and the next ACK goes at once only if
// the clamp, rounded up, is at least that rcv_wnd (__tcp_ack_snd_check).
// Until rxwin_descend floored the clamp at left itself, it kept a segment
// and a scale unit above it, and a receiver that ACKed every segment or
// every two (quick-ACK after CE marks) kept 20 KB of a 3 KB share for whole
// runs: the drop storms of docs/design.md.
func TestRxWindowDescentConverges(t *testing.T) {
	objs := load(t)
	const unit = 1024     // rcv_wscale 10, tcp_rmem's 32 MB
	const minClamp = 2304 // TCP_WINDOW_CLAMP's least: SOCK_MIN_RCVBUF / 2
	alignUp := func(v uint64) uint64 { return (v + unit - 1) / unit * unit }
	for _, tc := range []struct {
		name    string
		perAck  uint32 // bytes received between ACKs
		maxAcks int
	}{
		{"an ACK every segment (quick-ACK)", mss, 64},
		{"an ACK every two segments", 2 * mss, 32},
		{"an ACK every 16 KB (GRO)", 16 << 10, 6},
	} {
		clamp := uint64(64088) // a first burst's window
		rcvWnd := alignUp(clamp)
		acks := 0
		for ; acks < 200 && rcvWnd > alignUp(floor); acks++ {
			// Data arrives: the ACK for it goes at once only if the
			// window on offer is not below the last one.
			if alignUp(clamp) < rcvWnd {
				t.Fatalf("%s: ACK %d held back: clamp %d offers %d, last advertised %d", tc.name, acks, clamp, alignUp(clamp), rcvWnd)
			}
			left := int64(rcvWnd) - int64(tc.perAck)
			if next := descend(t, objs, floor, clamp, int32(left)); next != clamp {
				clamp = max(next, minClamp)
			}
			rcvWnd = max(alignUp(clamp), alignUp(uint64(max(left, 0))))
		}
		if acks > tc.maxAcks {
			t.Errorf("%s: the advertised window took %d ACKs to come down from 64 KB to %d, want at most %d (now %d, clamp %d)",
				tc.name, acks, alignUp(floor), tc.maxAcks, rcvWnd, clamp)
		}
	}
}
