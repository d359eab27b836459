package analyze

import (
	"encoding/binary"
	"testing"
	"time"
)

// ipFrame is an Ethernet + IPv4 header of total length n with protocol proto
// toward port.
func ipFrame(proto byte, n int, port uint16) []byte {
	b := make([]byte, 14+20+4)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	b[14] = 0x45
	binary.BigEndian.PutUint16(b[16:], uint16(n))
	b[14+9] = proto
	binary.BigEndian.PutUint16(b[14+20+2:], port)
	return b
}

func TestRatesCount(t *testing.T) {
	origin := time.Unix(100, 0)
	r := &Rates{origin: origin.UnixNano(), width: int64(10 * time.Millisecond),
		ports: map[uint16][]uint64{5201: nil, 5202: nil}, first: map[uint16]int64{}}
	at := func(ms int) int64 { return origin.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	for _, c := range []struct {
		f    []byte
		t    int64
		want bool
	}{
		{ipFrame(6, 1500, 5201), at(-1), false}, // before the origin: its first data only
		{ipFrame(6, 1500, 5201), at(0), true},
		{ipFrame(6, 1500, 5201), at(9), true},
		{ipFrame(6, 52, 5202), at(15), true}, // an ACK-sized packet counts, but is not first data
		{ipFrame(17, 1200, 5202), at(25), true},
		{ipFrame(6, 1500, 5203), at(5), false},      // another port
		{ipFrame(1, 1500, 5201), at(5), false},      // not TCP or UDP
		{ipFrame(6, 1500, 5201)[:20], at(5), false}, // cut short
	} {
		if got := r.count(c.f, c.t); got != c.want {
			t.Errorf("count at %d: %v, want %v", c.t, got, c.want)
		}
	}
	if got := r.ports[5201]; len(got) != 1 || got[0] != 3000 {
		t.Errorf("5201: %v, want [3000]", got)
	}
	if got := r.ports[5202]; len(got) != 3 || got[1] != 52 || got[2] != 1200 {
		t.Errorf("5202: %v, want [0 52 1200]", got)
	}
	if r.first[5201] != at(-1) || r.first[5202] != at(25) {
		t.Errorf("first data: %v, want 5201 at -1 ms and 5202 at 25 ms", r.first)
	}
}
