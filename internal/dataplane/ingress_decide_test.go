package dataplane

// Decision tests of the ingress program: BPF_PROG_TEST_RUN on synthesized
// packets with the virtual queue placed at known backlogs, as for egress.
// The test run's skb->sk is a dummy socket, not TCP, so the one-hole-per-flow
// rule (which reads the receiver's rcv_nxt) is exercised by the integration
// tests, not here.

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpSegFlags is tcpSeg with the given TCP flags (ACK is always set).
func tcpSegFlags(payload int, flags byte) []byte {
	b := tcpSeg(payload)
	b[13] |= flags
	return b
}

const tcpPSH, tcpFIN, tcpSYN = 0x08, 0x01, 0x02

func TestIngressDecisions(t *testing.T) {
	h := newHarnessDir(t, Ingress, limit1G)
	th := limit1G.Thresholds
	between := func(a, b time.Duration) time.Duration { return (a + b) / 2 }
	markRegion := between(th.Mark, th.DropLarge)
	largeDrop := between(th.DropLarge, th.DropSmall)
	allDrop := th.DropSmall + time.Millisecond

	cases := []decision{
		{"v4 tcp idle queue passes", -time.Minute, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 ect tcp below mark passes unmarked", th.Mark / 2, ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(1448)), retPass, ecnECT0, func(s Stats) uint64 { return s.Packets }},
		{"v4 ect tcp in mark region gets CE", markRegion, ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(1448)), retPass, ecnCE, func(s Stats) uint64 { return s.Marked }},
		{"v6 ect1 tcp in mark region gets CE", markRegion, ipv6(unix.IPPROTO_TCP, ecnECT1, tcpSeg(1448)), retPass, ecnCE, func(s Stats) uint64 { return s.Marked }},
		{"v4 ect udp in mark region gets CE", markRegion, ipv4(unix.IPPROTO_UDP, ecnECT0, udpDgram(1000)), retPass, ecnCE, func(s Stats) uint64 { return s.Marked }},
		// No congestion code on ingress: non-ECT TCP passes unsignalled until the drop thresholds.
		{"v4 non-ect tcp in mark region passes, no cwr", markRegion, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 large tcp past drop-large: drop, no cn", largeDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), retDrop, ecnNotECT, func(s Stats) uint64 { return s.Dropped }},
		{"v4 large ect tcp past drop-large: drop", largeDrop, ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(1448)), retDrop, ecnECT0, func(s Stats) uint64 { return s.Dropped }},
		{"v6 large tcp past drop-large: drop", largeDrop, ipv6(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), retDrop, ecnNotECT, func(s Stats) uint64 { return s.Dropped }},
		{"v4 small tcp data past drop-large passes", largeDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(40)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 small tcp data past drop-small: drop", allDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(40)), retDrop, ecnNotECT, func(s Stats) uint64 { return s.Dropped }},
		// The receiver's proxy for "never a flow's last packets in flight".
		{"v4 pure ack past drop-small passes", allDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(0)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v6 pure ack past drop-small passes", allDrop, ipv6(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(0)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 syn past drop-small passes", allDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(0, tcpSYN)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 large PSH segment past drop-small passes", allDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(1448, tcpPSH)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 large ect PSH segment past drop-small passes with CE", allDrop, ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSegFlags(1448, tcpPSH)), retPass, ecnCE, func(s Stats) uint64 { return s.Marked }},
		{"v4 FIN with data past drop-small passes", allDrop, ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(1000, tcpFIN)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 udp in mark region passes unmarked", markRegion, ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(1000)), retPass, ecnNotECT, func(s Stats) uint64 { return s.Packets }},
		{"v4 large udp past drop-large: drop", largeDrop, ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(1000)), retDrop, ecnNotECT, func(s Stats) uint64 { return s.Dropped }},
		{"v6 small udp past drop-small: drop", allDrop, ipv6(unix.IPPROTO_UDP, ecnNotECT, udpDgram(10)), retDrop, ecnNotECT, func(s Stats) uint64 { return s.Dropped }},
		{"v4 already-CE passes, not counted as ours", markRegion, ipv4(unix.IPPROTO_TCP, ecnCE, tcpSeg(1448)), retPass, ecnCE, func(s Stats) uint64 { return s.Packets }},
	}
	checkDecisions(t, h, cases, func(t *testing.T, before, after Stats) {
		if after.CWR != before.CWR {
			t.Errorf("ingress counted a congestion code")
		}
	})
}

// A flow's last segments (PSH, FIN) pass past every drop threshold, but not
// past the virtual queue's bound (max_backlog): there the queue would forget
// their charge, and what passes so would pass any rate (policy.h,
// rx_protected). Pure ACKs and SYNs pass even there. The hole of the same
// rule reads the receiver's rcv_nxt: exercised by the integration tests.
func TestIngressProtectedBound(t *testing.T) {
	h := newHarnessDir(t, Ingress, limit1G)
	for _, c := range []struct {
		name string
		pkt  []byte
		want uint32
	}{
		{"large PSH segment", ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(1448, tcpPSH)), retDrop},
		{"ect PSH segment", ipv6(unix.IPPROTO_TCP, ecnECT0, tcpSegFlags(1448, tcpPSH)), retDrop},
		{"small PSH segment", ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(40, tcpPSH)), retDrop},
		{"FIN with data", ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(1000, tcpFIN)), retDrop},
		{"pure ack", ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(0)), retPass},
		{"syn", ipv4(unix.IPPROTO_TCP, ecnNotECT, tcpSegFlags(0, tcpSYN)), retPass},
	} {
		// An hour of backlog: vq_clamp holds the queue at its bound.
		h.setBacklog(time.Hour)
		before := h.counters()
		ret, _ := h.run(c.pkt, 0, 0)
		after := h.counters()
		if ret != c.want {
			t.Errorf("%s at the queue's bound: verdict %d, want %d", c.name, ret, c.want)
		}
		if dropped := after.Dropped - before.Dropped; (c.want == retDrop) != (dropped == 1) {
			t.Errorf("%s at the queue's bound: dropped counter moved by %d", c.name, dropped)
		}
	}
}

// --no-drop on ingress: marks only, whatever the backlog.
func TestIngressNoDrop(t *testing.T) {
	l := limit1G
	l.NoDrop = true
	h := newHarnessDir(t, Ingress, l)
	for _, backlog := range []time.Duration{l.Thresholds.DropLarge + time.Millisecond, l.Thresholds.DropSmall * 2, time.Hour} {
		h.setBacklog(backlog)
		before := h.counters()
		if ret, out := h.run(ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(1448)), 0, 0); ret != retPass || ecnOf(out) != ecnCE {
			t.Errorf("backlog %v: ect tcp verdict %d ecn %d, want pass with CE", backlog, ret, ecnOf(out))
		}
		if ret, out := h.run(ipv6(unix.IPPROTO_TCP, ecnNotECT, tcpSeg(1448)), 0, 0); ret != retPass || ecnOf(out) != ecnNotECT {
			t.Errorf("backlog %v: non-ect tcp verdict %d ecn %d, want pass unmarked", backlog, ret, ecnOf(out))
		}
		if ret, _ := h.run(ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(1000)), 0, 0); ret != retPass {
			t.Errorf("backlog %v: udp verdict %d, want pass", backlog, ret)
		}
		after := h.counters()
		if after.Dropped != before.Dropped || after.Marked-before.Marked != 1 || after.Packets-before.Packets != 3 {
			t.Errorf("backlog %v: counters moved %+v -> %+v, want 3 passed, 1 marked, none dropped", backlog, before, after)
		}
	}
}

// A GRO packet on ingress costs what it was on the wire, as a GSO one does
// on egress, and is marked whole.
func TestIngressGROCost(t *testing.T) {
	h := newHarnessDir(t, Ingress, limit1G)
	const segs, mss = 4, 700
	wire := uint64(segs * (ethHdr + 20 + tcpHdr + mss))
	h.setBacklog(0)
	before := h.counters()
	v0 := h.vtime()
	if ret, _ := h.run(ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(segs*mss)), segs, mss); ret != retPass {
		t.Fatalf("verdict %d", ret)
	}
	after := h.counters()
	if d := after.Bytes - before.Bytes; d != wire {
		t.Errorf("charged %d wire bytes, want %d", d, wire)
	}
	if d := after.Packets - before.Packets; d != segs {
		t.Errorf("counted %d packets, want %d", d, segs)
	}
	if adv, cost := float64(h.vtime()-v0), limit1G.Rate.CostExact(wire); adv < cost-1 || adv > cost+1 {
		t.Errorf("vtime advanced %.0f ns, want %.0f", adv, cost)
	}
	h.setBacklog(limit1G.Thresholds.Mark + time.Millisecond)
	before = h.counters()
	if ret, out := h.run(ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(segs*mss)), segs, mss); ret != retPass || ecnOf(out) != ecnCE {
		t.Fatalf("GRO packet in the mark region: verdict %d ecn %d, want pass with CE", ret, ecnOf(out))
	}
	if d := h.counters().Marked - before.Marked; d != segs {
		t.Errorf("marked %d, want %d (its segments)", d, segs)
	}
}

// The two directions of one group are separate queues: an egress backlog
// does not touch ingress packets, and ingress charges only its own key.
func TestIngressIndependentOfEgress(t *testing.T) {
	h := newHarnessDir(t, Ingress, limit1G)
	ek := key(testCgroupID(t), Egress)
	must(t, h.limits.Put(&ek, &h.cfg))
	must(t, h.queues.Put(&ek, &hbmHbmQueue{VtimeNs: monoNow() + uint64(time.Hour)}))
	h.setBacklog(0)
	if ret, out := h.run(ipv4(unix.IPPROTO_TCP, ecnECT0, tcpSeg(1448)), 0, 0); ret != retPass || ecnOf(out) != ecnECT0 {
		t.Fatalf("verdict %d ecn %d: the egress backlog leaked into ingress", ret, ecnOf(out))
	}
	var q hbmHbmQueue
	must(t, h.queues.Lookup(&ek, &q))
	if q.VtimeNs < monoNow()+uint64(59*time.Minute) {
		t.Fatal("ingress packet moved the egress queue")
	}
	// Without an ingress config the program passes all, even with egress set.
	must(t, h.limits.Delete(&h.key))
	h.setBacklog(time.Hour)
	if ret, _ := h.run(ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(1000)), 0, 0); ret != retPass {
		t.Fatalf("unconfigured ingress: verdict %d, want pass", ret)
	}
}
