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
