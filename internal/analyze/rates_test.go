package analyze

import (
	"encoding/binary"
	"testing"
	"time"
)

// ipFrame is an Ethernet + IPv4 header of total length n with protocol proto
// toward port, and a TCP header of 32 bytes (data offset 8).
func ipFrame(proto byte, n int, port uint16) []byte {
	b := make([]byte, 14+20+20)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	b[14] = 0x45
	binary.BigEndian.PutUint16(b[16:], uint16(n))
	b[14+9] = proto
	binary.BigEndian.PutUint16(b[14+20+2:], port)
	b[14+20+12] = 8 << 4
	return b
}

// ip6Frame is an Ethernet + IPv6 header whose payload (n bytes in all with
// the IPv6 header) is of next header proto toward port, and a TCP header of
// 32 bytes (data offset 8).
func ip6Frame(proto byte, n int, port uint16) []byte {
	b := make([]byte, 14+40+20)
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	b[14] = 0x60
	binary.BigEndian.PutUint16(b[14+4:], uint16(n-40))
	b[14+6] = proto
	binary.BigEndian.PutUint16(b[14+40+2:], port)
	b[14+40+12] = 8 << 4
	return b
}

// testRates is a count of ports 5201 and 5202 in 10 ms windows from an
// origin, and at gives the time ms after it.
func testRates() (*Rates, func(ms int) int64) {
	origin := time.Unix(100, 0)
	r := &Rates{origin: origin.UnixNano(), width: int64(10 * time.Millisecond),
		ports: map[uint16][]uint64{5201: nil, 5202: nil}, first: map[uint16]int64{}}
	return r, func(ms int) int64 { return origin.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
}

type countCase struct {
	f    []byte
	gso  int
	t    int64
	want bool
}

func countAll(t *testing.T, r *Rates, cases []countCase) {
	t.Helper()
	for _, c := range cases {
		if got := r.count(c.f, c.gso, c.t); got != c.want {
			t.Errorf("count at %d: %v, want %v", c.t, got, c.want)
		}
	}
}

func TestRatesCount(t *testing.T) {
	r, at := testRates()
	countAll(t, r, []countCase{
		{ipFrame(6, 1500, 5201), 0, at(-1), false}, // before the origin: its first data only
		{ipFrame(6, 1500, 5201), 0, at(0), true},
		{ipFrame(6, 1500, 5201), 0, at(9), true},
		{ipFrame(6, 52, 5202), 0, at(15), true}, // an ACK-sized packet counts, but is not first data
		{ipFrame(17, 1200, 5202), 0, at(25), true},
		{ipFrame(6, 1500, 5203), 0, at(5), false},      // another port
		{ipFrame(1, 1500, 5201), 0, at(5), false},      // not TCP or UDP
		{ipFrame(6, 1500, 5201)[:20], 0, at(5), false}, // cut short
		// A GSO packet of 5 segments of 1448 bytes (the last 1000): counted
		// as five frames, each with its 14 + 52 bytes of headers.
		{ipFrame(6, 52+4*1448+1000, 5201), 1448, at(35), true},
		// UDP GSO, 3 datagrams of 1000 bytes: 14 + 28 bytes of headers each.
		{ipFrame(17, 28+3000, 5202), 1000, at(36), true},
		// A GSO size past the payload: one segment.
		{ipFrame(6, 1500, 5201), 9000, at(45), true},
	})
	// Frames: every segment with its 14 bytes of Ethernet header.
	if got := r.ports[5201]; len(got) != 5 || got[0] != 2*1514 || got[3] != 5*(14+52)+4*1448+1000 || got[4] != 1514 {
		t.Errorf("5201: %v, want [3028 0 0 %d 1514]", got, 5*(14+52)+4*1448+1000)
	}
	if got := r.ports[5202]; len(got) != 4 || got[1] != 66 || got[2] != 1214 || got[3] != 3*(14+28)+3000 {
		t.Errorf("5202: %v, want [0 66 1214 %d]", got, 3*(14+28)+3000)
	}
	if r.first[5201] != at(-1) || r.first[5202] != at(25) {
		t.Errorf("first data: %v, want 5201 at -1 ms and 5202 at 25 ms", r.first)
	}
}

// The same over IPv6: a frame is the IPv6 header's 40 bytes, the payload
// and the Ethernet header; a GSO segment carries 40 + 32 bytes of headers.
func TestRatesCountIPv6(t *testing.T) {
	r, at := testRates()
	countAll(t, r, []countCase{
		{ip6Frame(6, 1500, 5201), 0, at(0), true},
		{ip6Frame(17, 1200, 5202), 0, at(1), true},
		{ip6Frame(6, 1500, 5203), 0, at(2), false},         // another port
		{ip6Frame(58, 1500, 5201), 0, at(3), false},        // ICMPv6
		{ip6Frame(0, 1500, 5201), 0, at(4), false},         // an extension header first: not followed
		{ip6Frame(6, 1500, 5201)[:14+40], 0, at(5), false}, // no ports
		// 4 segments of 1428 bytes (the last 500): 4 frames of 14 + 72 bytes of headers.
		{ip6Frame(6, 72+3*1428+500, 5201), 1428, at(12), true},
	})
	if got := r.ports[5201]; len(got) != 2 || got[0] != 1514 || got[1] != 4*(14+72)+3*1428+500 {
		t.Errorf("5201: %v, want [1514 %d]", got, 4*(14+72)+3*1428+500)
	}
	if got := r.ports[5202]; len(got) != 1 || got[0] != 1214 {
		t.Errorf("5202: %v, want [1214]", got)
	}
}
