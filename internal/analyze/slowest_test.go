package analyze

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// TestSlowest: the slowest exchanges first, each with the packets of both
// directions from its request's first byte to the response's first,
// numbered from each direction's first data byte.
func TestSlowest(t *testing.T) {
	data := capture(t, rpc(), capOpts{})
	got, total, err := Slowest(bytes.NewReader(data), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []schema.SlowExchange{{
		Requester: "198.18.7.1:40000", Responder: "198.18.7.2:5201",
		StartUnixUS: 1767323045000000 + 1000,
		ResponseUS:  500, NetworkUS: 100, PeerUS: 400,
		Packets: []schema.SlowPacket{
			{AtUS: 0, FromRequester: true, Flags: "A", Seq: 0, Len: 1460, Ack: 0},
			{AtUS: 1, FromRequester: true, Flags: "A", Seq: 1460, Len: 1460, Ack: 0},
			{AtUS: 100, Flags: "A", Seq: 0, Ack: 2920},
			{AtUS: 500, Flags: "A", Seq: 0, Len: 64, Ack: 2920},
		},
	}}
	if total != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("slowest 1 of %d:\n got  %+v\n want %+v (of 2)", total, got, want)
	}
	// More asked than there are: both, slowest first.
	got, _, err = Slowest(bytes.NewReader(data), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ResponseUS != 500 || got[1].ResponseUS != 300 ||
		!reflect.DeepEqual(got[1].Packets, []schema.SlowPacket{
			{AtUS: 0, FromRequester: true, Flags: "A", Seq: 2920, Len: 1460, Ack: 128},
			{AtUS: 300, Flags: "A", Seq: 128, Len: 64, Ack: 4380},
		}) {
		t.Errorf("slowest 5: %+v", got)
	}
	if _, _, err := Slowest(bytes.NewReader(data), 0); err == nil {
		t.Error("0 exchanges asked: no error")
	}
	// A one-way transfer has none.
	got, total, err = Slowest(bytes.NewReader(capture(t, basic(), capOpts{})), 3)
	if err != nil || len(got) != 0 || total != 0 {
		t.Errorf("bulk transfer: %+v of %d, %v; want none", got, total, err)
	}
}

// A request lost whole and repaired (the loss probe's SACK, a CE mark),
// and a later connection on the same ports: each exchange gets its own
// connection's packets only.
func TestSlowestLossAndReusedPorts(t *testing.T) {
	s := handshake()
	s = append(s,
		d(1000, 0, 1460), // lost on the way
		seg{at: 1001, seq: cs(1460), ack: srvISN + 1, n: 1460, ecn: 3},
		seg{at: 1100, fromSrv: true, seq: srvISN + 1, ack: cs(0), sack: [][2]uint32{{cs(1460), cs(2920)}}},
		d(1200, 0, 1460),
		a(1300, 2920),
		seg{at: 1400, fromSrv: true, seq: srvISN + 1, ack: cs(2920), n: 64},
		seg{at: 1500, seq: cs(2920), ack: srvISN + 65, fin: true},
		seg{at: 1600, fromSrv: true, seq: srvISN + 65, ack: cs(2921), fin: true},
	)
	// The same ports again: a new SYN with another sequence space, and a
	// 100 µs exchange.
	const isn2, srv2 = 7000, 9000
	s = append(s,
		seg{at: 5000, seq: isn2, syn: true, noAck: true, mss: 1460},
		seg{at: 5010, fromSrv: true, seq: srv2, ack: isn2 + 1, syn: true, mss: 1460},
		seg{at: 5020, seq: isn2 + 1, ack: srv2 + 1},
		seg{at: 6000, seq: isn2 + 1, ack: srv2 + 1, n: 100},
		seg{at: 6100, fromSrv: true, seq: srv2 + 1, ack: isn2 + 101, n: 50},
	)
	got, total, err := Slowest(bytes.NewReader(capture(t, s, capOpts{})), 2)
	if err != nil {
		t.Fatal(err)
	}
	if total != 2 || len(got) != 2 {
		t.Fatalf("%d of %d exchanges, want 2 of 2: %+v", len(got), total, got)
	}
	want := []schema.SlowPacket{
		{AtUS: 0, FromRequester: true, Flags: "A", Seq: 0, Len: 1460},
		{AtUS: 1, FromRequester: true, Flags: "A", CE: true, Seq: 1460, Len: 1460},
		{AtUS: 100, Flags: "A", Ack: 0, SACK: [][2]uint32{{1460, 2920}}},
		{AtUS: 200, FromRequester: true, Flags: "A", Seq: 0, Len: 1460},
		{AtUS: 300, Flags: "A", Ack: 2920},
		{AtUS: 400, Flags: "A", Len: 64, Ack: 2920},
	}
	if got[0].ResponseUS != 400 || got[0].NetworkUS != 300 || !reflect.DeepEqual(got[0].Packets, want) {
		t.Errorf("the lost request: %+v\n want packets %+v", got[0], want)
	}
	want = []schema.SlowPacket{
		{AtUS: 0, FromRequester: true, Flags: "A", Len: 100},
		{AtUS: 100, Flags: "A", Len: 50, Ack: 100},
	}
	if got[1].ResponseUS != 100 || !reflect.DeepEqual(got[1].Packets, want) {
		t.Errorf("the second connection's exchange: %+v\n want packets %+v", got[1], want)
	}
}
