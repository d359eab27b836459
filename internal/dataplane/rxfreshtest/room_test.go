package rxfreshtest

// Decision table of the room (bpf/include/room.h, room_plan), run in the
// kernel with BPF_PROG_TEST_RUN on a queue and two sockets kept in the
// harness's maps between steps: the unpaced first window a transfer is
// given from its group's credit as its owner writes, and the reservation
// that keeps two sockets writing together from each taking the same
// credit.

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestRoomPlan(t *testing.T) {
	objs := load(t)
	const (
		now     = uint64(10_000_000_000) // ns
		ms      = uint64(1_000_000)
		rate    = 100_000_000 // bits/s: 12,500 bytes a millisecond
		perByte = 80          // ns a byte takes at it
		burst   = 4 * ms      // 50,000 bytes of credit
		mss     = 1448
		reset   = 0
		plan    = 1
		charge  = 2
		a, b    = 0, 1
	)
	type step struct {
		op, sock uint32
		at       uint64 // ns after now
		want     uint32 // plan: segments
	}
	for _, tc := range []struct {
		name   string
		vtime  uint64 // reset: the queue's vtime_ns (0: idle for long)
		flows  uint32
		steps  []step
		agreed bool // after the last step the queue's vtime_ns and plans' end agree
	}{
		{name: "an idle group: the first writer's window is its whole credit, 34 segments of 50,000 bytes",
			steps: []step{{plan, a, 0, 34}}},
		{name: "a second writer at the same moment: what the first left, too little for a window",
			steps: []step{{plan, a, 0, 34}, {plan, b, 0, 0}}},
		{name: "the same socket planning again (TCP's call, then its owner's write): its own plan is returned first",
			steps: []step{{plan, a, 0, 34}, {plan, a, 0, 34}, {plan, a, 0, 34}}},
		{name: "a second writer 2 ms later: 2 ms of credit less what the first window took beyond the 4 ms",
			steps: []step{{plan, a, 0, 34}, {plan, b, 2 * ms, 16}}},
		{name: "the first window sent, then a second writer 1 ms later: the charge is not counted twice",
			steps: []step{{plan, a, 0, 34}, {charge, a, 0, 0}, {plan, b, 1 * ms, 7}}},
		{name: "the first window sent: the queue's vtime reaches the plans' end",
			steps: []step{{plan, a, 0, 34}, {charge, a, 0, 0}}, agreed: true},
		{name: "a plan never sent lapses: a writer a burst later finds the whole credit",
			steps: []step{{plan, a, 0, 34}, {plan, b, 10 * ms, 34}}},
		{name: "a socket planning again after another reserved: its plan is not returned (it may be the other's credit)",
			steps: []step{{plan, a, 0, 34}, {plan, b, 2 * ms, 16}, {plan, a, 2 * ms, 0}}},
		{name: "eight flows counted (one transfer's weight): the writer gets half",
			flows: 8, steps: []step{{plan, a, 0, 17}}},
		{name: "a backlogged group: no room",
			vtime: now + ms, steps: []step{{plan, a, 0, 0}}},
	} {
		c := rxfreshRoomCase{NowNs: now, RateBps: rate, NsPerByte: perByte, BurstNs: burst, Op: reset,
			VtimeNs: tc.vtime, Flows: tc.flows, Mss: mss}
		run := func(what string) {
			t.Helper()
			if _, err := objs.RoomRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
				t.Fatalf("%s: %s: test run: %v", tc.name, what, err)
			}
		}
		run("reset")
		for i, s := range tc.steps {
			c.Op, c.Sock, c.NowNs, c.Segs = s.op, s.sock, now+s.at, 0
			run("step")
			if s.op == plan && c.Segs != s.want {
				t.Errorf("%s: step %d: socket %d planned %d segments, want %d", tc.name, i, s.sock, c.Segs, s.want)
			}
		}
		if tc.agreed {
			d := int64(c.VtimeNs - c.PlanVtNs)
			if d < -1000 || d > 1000 {
				t.Errorf("%s: vtime_ns %d and the plans' end %d differ by %d ns, want within 1 us", tc.name, c.VtimeNs, c.PlanVtNs, d)
			}
		}
	}
}

// TestRoomPlanCap: with a credit of more than 64 KB a window is at most
// CWND_XFER_SEGS segments.
func TestRoomPlanCap(t *testing.T) {
	objs := load(t)
	c := rxfreshRoomCase{NowNs: 10_000_000_000, RateBps: 1_000_000_000, NsPerByte: 8, BurstNs: 4_000_000, Mss: 1448}
	for _, op := range []uint32{0, 1} {
		c.Op = op
		if _, err := objs.RoomRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("test run: %v", err)
		}
	}
	if c.Segs != 44 {
		t.Errorf("4 ms of credit at 1gbit (500,000 bytes): %d segments, want 44", c.Segs)
	}
}
