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
