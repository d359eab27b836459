package dataplane

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/rate"
)

// The share loop's first interval after a long idle spans the whole idle
// time, and the egress loop drains over four such intervals: at 40 Gbit/s
// its target (rate x time left / drain time) once overflowed 64 bits from
// about half a second of idle, and the wrapped target cut the share of a
// group that had sent half its rate, to the floor. Such a group is under
// its rate: its share must rise.
func TestShareLoopAfterLongIdle(t *testing.T) {
	const r = rate.Rate(40_000_000_000)
	h := newHarness(t, Limit{Rate: r, Thresholds: rate.Default(r)})
	const idle = 3 * time.Second
	now := monoNow()
	q := hbmHbmQueue{
		VtimeNs:  now,
		CtlNs:    now - uint64(idle),
		CtlLenNs: uint64(time.Millisecond),
		CtlMinNs: uint64(time.Millisecond),
		// Half the rate over the idle interval: 2.5e9 bytes/s for 3 s.
		CtlWire:  uint64(r) / 8 / 2 * uint64(idle/time.Second),
		ShareMul: 1 << 16,
		// Four flows: a share of a quarter of the rate, which may rise
		// to the whole rate (one flow's share is already at its ceiling).
		Flows: 4, FlowsNow: 4, Seen: 4, SeenNow: 4, Bulk: 4, BulkNow: 4,
		EpochNs:  now, // the flows' window is current
		WinLenNs: uint64(time.Second),
	}
	must(t, h.queues.Put(&h.key, &q))
	h.run(ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), 0, 0)
	must(t, h.queues.Lookup(&h.key, &q))
	if q.CtlNs < now {
		t.Fatalf("the control interval did not end (ctl_ns %d, before %d)", q.CtlNs, now)
	}
	if q.ShareMul <= 1<<16 {
		t.Errorf("share multiple %d/65536 after an interval at half the rate, want above 65536 (it must rise)", q.ShareMul)
	}
}

// Over its drop-large threshold an egress group's share multiple m is cut at
// once, by up to half per interval, but only while m is above the fair
// share (caps grown while the group idled). The cut stops at the fair share:
// below it the backlog is what no cap holds (a server's new connections'
// first flights), and cut further, m took a keep-alive pool's caps to half
// their fair share at its start and the loop's gain needed a second or more
// to bring them back (64 keep-alive clients of 100 KB at 200mbit: 0.93-0.95
// of the limit in such runs). Each case is one interval that ends between
// drop-large and drop-small with the group sending 4x its rate, the floor out of the way
// (unpaced bytes lower it to a sixteenth of the fair share).
func TestShareCutStopsAtFair(t *testing.T) {
	const r = rate.Rate(200_000_000)
	const one = 1 << 16
	th := rate.Default(r)
	h := newHarness(t, Limit{Rate: r, Thresholds: th}) // each case puts the whole queue
	for _, tc := range []struct {
		name   string
		m      uint64
		lo, hi uint64
	}{
		{"m at 1.5x: cut to the fair share, not to 3/4 of it", 3 * one / 2, one, one},
		{"m at 3x: halved, still above the fair share", 3 * one, 3 * one / 2, 3 * one / 2},
		{"m below the fair share: a step of the loop (a 32nd down), no cut", one * 9 / 10, one*9/10 - one*9/10/16, one*9/10 - one*9/10/64},
	} {
		now := monoNow()
		// Between drop-large and drop-small: a small packet passes.
		backlog := uint64(th.DropLarge+th.DropSmall) / 2
		const dt = 10 * time.Millisecond
		q := hbmHbmQueue{
			VtimeNs:         now + backlog,
			CtlNs:           now - uint64(dt),
			CtlLenNs:        uint64(time.Millisecond),
			CtlMinNs:        uint64(time.Millisecond),
			CtlMinBacklogNs: int64(backlog),
			CtlWire:         4 * uint64(r) / 8 * uint64(dt) / uint64(time.Second),
			ShareMul:        tc.m,
			UnpacedBps:      uint64(r), // far above the rate: the floor at a 16th
			Flows:           4, FlowsNow: 4, Seen: 4, SeenNow: 4, Bulk: 4, BulkNow: 4,
			EpochNs:  now,
			WinLenNs: uint64(time.Second),
		}
		must(t, h.queues.Put(&h.key, &q))
		h.run(ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(64)), 0, 0)
		must(t, h.queues.Lookup(&h.key, &q))
		if q.CtlNs < now {
			t.Fatalf("%s: the control interval did not end (ctl_ns %d, before %d)", tc.name, q.CtlNs, now)
		}
		if q.ShareMul < tc.lo || q.ShareMul > tc.hi {
			t.Errorf("%s: m %d/65536, want [%d, %d]", tc.name, q.ShareMul, tc.lo, tc.hi)
		}
	}
}

// A group admits its new connections at the handshake gate (their first
// ADMIT_BYTES unpaced) while a response waits long for its turn, and paces
// them while it does not (share.h, admit_steer). The decision, taken as a
// control interval ends, rests on the flow count's recent peak (as the
// time a 32 KB first flight takes at a transfer's fair share: 40 ms to
// turn on, under 20 to turn off) and on the gate's backlog, whichever is
// longer; between the two thresholds the group keeps its regime. 200mbit:
// 25e6 bytes/s, so a transfer (weight 8) among W units of weight takes
// 32768 x W / (8 x 25e6) s for 32 KB: 84 ms at W 512 (64 transfers), 10.5
// ms at 64 (8), 30 ms at 183.
func TestAdmitSteer(t *testing.T) {
	const r = rate.Rate(200_000_000)
	const on = uint32(1) << 31
	h := newHarness(t, Limit{Rate: r, Thresholds: rate.Default(r)})
	for _, tc := range []struct {
		name    string
		admit   uint32 // before: the regime and the count's peak, 1/16ths
		flows   uint32 // the flow count now (weight)
		gateMs  int64  // the gate's backlog
		wantOn  bool
		peakMin uint32 // the peak after, 1/16ths, at least ...
		peakMax uint32 // ... and at most
	}{
		{"64 transfers, pacing: admit", 0, 512, 0, true, 512 * 16, 512 * 16},
		{"8 transfers, pacing: pace", 0, 64, 0, false, 64 * 16, 64 * 16},
		{"8 transfers, admitting, no gate backlog: pace", on, 64, 0, false, 64 * 16, 64 * 16},
		{"30 ms at the count, pacing: keeps pacing", 0, 183, 0, false, 183 * 16, 183 * 16},
		{"30 ms at the count, admitting: keeps admitting", on | 183*16, 183, 0, true, 183 * 16, 183 * 16},
		// No flow counts as one (share_flows).
		{"admitting, nobody sending, the crowd at the gate (100 ms): admit", on, 0, 100, true, 16, 16},
		{"pacing, the gate 60 ms behind: admit", 0, 0, 60, true, 16, 16},
		{"admitting, nobody sending, the gate 30 ms behind: keeps admitting", on, 0, 30, true, 16, 16},
		{"admitting, nobody sending, the gate idle: pace", on, 0, 0, false, 16, 16},
		// 10 ms of a peak that halves in ~0.7 s: 1% lower, still on.
		{"the crowd's count dips to none: its peak holds", on | 512*16, 0, 0, true, 500 * 16, 510 * 16},
	} {
		now := monoNow()
		const dt = 10 * time.Millisecond
		q := hbmHbmQueue{
			VtimeNs:  now,
			GateVtNs: uint64(int64(now) + tc.gateMs*int64(time.Millisecond)),
			CtlNs:    now - uint64(dt),
			CtlLenNs: uint64(time.Millisecond),
			CtlMinNs: uint64(time.Millisecond),
			ShareMul: 1 << 16,
			Admit:    tc.admit,
			FlowsNow: tc.flows, SeenNow: tc.flows,
			EpochNs:  now,
			WinLenNs: uint64(time.Second),
		}
		if tc.gateMs == 0 {
			q.GateVtNs = 0
		} else {
			// The gate's queue runs ahead of the group's only while
			// that stands above its mark (gateq.h): 10 ms, a small
			// packet passes.
			q.VtimeNs = now + uint64(10*time.Millisecond)
		}
		must(t, h.queues.Put(&h.key, &q))
		h.run(ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(64)), 0, 0)
		must(t, h.queues.Lookup(&h.key, &q))
		if q.CtlNs < now {
			t.Fatalf("%s: the control interval did not end (ctl_ns %d, before %d)", tc.name, q.CtlNs, now)
		}
		if got := q.Admit&on != 0; got != tc.wantOn {
			t.Errorf("%s: admitting %v, want %v (admit %#x)", tc.name, got, tc.wantOn, q.Admit)
		}
		if peak := q.Admit &^ on; peak < tc.peakMin || peak > tc.peakMax {
			t.Errorf("%s: the count's peak %d/16, want [%d, %d]/16", tc.name, peak, tc.peakMin, tc.peakMax)
		}
	}
}
