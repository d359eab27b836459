package rxfreshtest

// Decision table of the egress share floor's cut at the end of a control
// interval (bpf/include/share.h, floor_steer), run in the kernel with
// BPF_PROG_TEST_RUN. The floor gives way while the standing queue stays
// above the mark, but only where the floor bound the share: a share above
// its floor is the loop's to lower, and cutting a floor that does not bind
// only let the loop take the share below it later. In borrow-ten the
// small borrowers' queues stood above the mark while their rate in force
// moved under them, their floors were cut to half with the share well
// above them, and they then got 0.90-0.93 of their due (docs/design.md).

import (
	"testing"

	"github.com/cilium/ebpf"
)

func TestFloorSteer(t *testing.T) {
	objs := load(t)
	const (
		binds = 1 << 16 // FLOOR_BINDS
		up    = 1 << 12 // FLOOR_CUT_UP
		down  = 1 << 10 // FLOOR_CUT_DOWN
		most  = 1 << 15 // FLOOR_CUT_MAX
		mark  = 4_000_000
		tgt   = 2_000_000
	)
	for _, tc := range []struct {
		name     string
		standing int64
		cut      uint32
		want     uint32
	}{
		{"above the mark, the floor binds: cut a sixteenth more", mark + 1, binds | 2*up, binds | 3*up},
		{"above the mark, the floor does not bind: the cut stays", mark + 1, 2 * up, 2 * up},
		{"above the mark, binding, at the most: stays at half", 20_000_000, binds | most, binds | most},
		{"between target and mark: the cut stays", 3_000_000, binds | 2*up, binds | 2*up},
		{"at the target, binding: comes back a sixty-fourth", tgt, binds | 2*up, binds | (2*up - down)},
		{"below the target, not binding: comes back too", 0, 2 * up, 2*up - down},
		{"below the target, nearly none left: none", -1_000_000, down / 2, 0},
	} {
		c := rxfreshFloorCase{Standing: tc.standing, TargetNs: tgt, MarkNs: mark, FloorCut: tc.cut}
		if _, err := objs.FloorRun.Run(&ebpf.RunOptions{Context: &c, ContextOut: &c}); err != nil {
			t.Fatalf("%s: test run: %v", tc.name, err)
		}
		if c.FloorCut != tc.want {
			t.Errorf("%s: floor_cut %#x, want %#x", tc.name, c.FloorCut, tc.want)
		}
	}
}
