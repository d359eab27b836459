package jsonout

import "testing"

func TestDirectionSub(t *testing.T) {
	a := Direction{RateBps: 5, Enforced: true, Bytes: 100, Packets: 10, Marked: 4, CWR: 3, Dropped: 2, DroppedBytes: 20}
	b := Direction{RateBps: 9, Bytes: 40, Packets: 4, Marked: 1, CWR: 1, Dropped: 1, DroppedBytes: 5}
	want := Direction{RateBps: 5, Enforced: true, Bytes: 60, Packets: 6, Marked: 3, CWR: 2, Dropped: 1, DroppedBytes: 15}
	if got := a.Sub(b); got != want {
		t.Errorf("Sub: %+v, want %+v", got, want)
	}
}
