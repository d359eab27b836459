package analyze

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// basic is a clean transfer of 8760 bytes (6 segments) in two rounds, then
// FINs. Times in µs.
func basic() []seg {
	s := handshake()
	s = append(s,
		// Round 1: two segments, one ACK 100 µs after the second.
		d(1000, 0, 1460), d(1010, 1460, 1460),
		a(1110, 2920),
		// Round 2: four segments; the first ACK covers the round's first.
		d(1110, 2920, 1460), d(1111, 4380, 1460), d(1112, 5840, 1460), d(1113, 7300, 1460),
		a(1211, 5840), a(1215, 8760),
		seg{at: 1300, seq: cs(8760), ack: srvISN + 1, fin: true},
		seg{at: 1400, fromSrv: true, seq: srvISN + 1, ack: cs(8761), fin: true},
		seg{at: 1500, seq: cs(8761), ack: srvISN + 2},
	)
	return s
}

func analyse(t *testing.T, data []byte) *schema.Report {
	t.Helper()
	rep, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func one(t *testing.T, rep *schema.Report) schema.Connection {
	t.Helper()
	if len(rep.Connections) != 1 {
		t.Fatalf("%d connections, want 1: %+v", len(rep.Connections), rep.Connections)
	}
	return rep.Connections[0]
}

func TestBasicTransfer(t *testing.T) {
	c := one(t, analyse(t, capture(t, basic(), capOpts{})))
	want := schema.Connection{
		Src: "198.18.7.1:40000", Dst: "198.18.7.2:5201",
		Bytes: 8760,
		// Samples: 1110-1010, 1211-1111, 1215-1113.
		RTT:         schema.RTT{Min: 100, P50: 100, P99: 102, Samples: 3},
		StartUnixUS: c.StartUnixUS, DurationUS: 1500, Packets: 15,
		Rounds: []schema.Round{
			{TUS: 1000, RTT: 110, SentBytes: 2920, AckedBytes: 2920, InflightBytes: 2920},
			// The ACK at 1215 comes after round 2 ended and counts with it.
			{TUS: 1110, RTT: 101, SentBytes: 5840, AckedBytes: 5840, InflightBytes: 5840},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	if c.StartUnixUS != 1767323045000000 {
		t.Errorf("start %d µs, want 2026-01-02T03:04:05Z", c.StartUnixUS)
	}
}

// The same transfer read through every supported container and link type,
// and cut to its headers, gives the same analysis.
func TestFormats(t *testing.T) {
	ref := one(t, analyse(t, capture(t, basic(), capOpts{})))
	for name, o := range map[string]capOpts{
		"pcapng":          {ng: true},
		"linux-sll":       {link: layers.LinkTypeLinuxSLL},
		"linux-sll2":      {link: layers.LinkTypeLinuxSLL2},
		"raw-ip":          {link: layers.LinkTypeRaw},
		"headers-only":    {snap: 14 + 20 + 20},
		"sll2-ng-headers": {link: layers.LinkTypeLinuxSLL2, ng: true, snap: 20 + 20 + 20},
	} {
		t.Run(name, func(t *testing.T) {
			c := one(t, analyse(t, capture(t, basic(), o)))
			if !reflect.DeepEqual(c, ref) {
				t.Errorf("got  %+v\nwant %+v", c, ref)
			}
		})
	}
	t.Run("ipv6", func(t *testing.T) {
		c := one(t, analyse(t, capture(t, basic(), capOpts{v6: true})))
		if c.Src != "[fd00:0:7::1]:40000" || c.Dst != "[fd00:0:7::2]:5201" {
			t.Errorf("endpoints %s -> %s", c.Src, c.Dst)
		}
		c.Src, c.Dst = ref.Src, ref.Dst
		if !reflect.DeepEqual(c, ref) {
			t.Errorf("got  %+v\nwant %+v", c, ref)
		}
	})
}

// A lost segment, SACKed, fast-retransmitted: one retransmission, not
// spurious, and no RTT sample from the ACK that covers it (Karn).
func TestRetransmission(t *testing.T) {
	s := handshake()
	s = append(s,
		d(1000, 0, 1460), d(1010, 1460, 1460), a(1110, 2920),
		d(1200, 2920, 1460), d(1201, 4380, 1460), d(1202, 5840, 1460), d(1203, 7300, 1460),
		seg{at: 1301, fromSrv: true, seq: srvISN + 1, ack: cs(2920), sack: [][2]uint32{{cs(4380), cs(5840)}}},
		seg{at: 1302, fromSrv: true, seq: srvISN + 1, ack: cs(2920), sack: [][2]uint32{{cs(4380), cs(7300)}}},
		seg{at: 1303, fromSrv: true, seq: srvISN + 1, ack: cs(2920), sack: [][2]uint32{{cs(4380), cs(8760)}}},
		d(1304, 2920, 1460),
		a(1404, 8760),
	)
	c := one(t, analyse(t, capture(t, s, capOpts{})))
	if c.Bytes != 8760 || c.Retransmissions != 1 || c.SpuriousRetransmissions != 0 {
		t.Errorf("bytes %d retransmissions %d spurious %d, want 8760 1 0", c.Bytes, c.Retransmissions, c.SpuriousRetransmissions)
	}
	if c.RTT != (schema.RTT{Min: 100, P50: 100, P99: 100, Samples: 1}) {
		t.Errorf("RTT %+v, want only round 1's sample of 100 µs", c.RTT)
	}
	want := []schema.Round{
		{TUS: 1000, RTT: 110, SentBytes: 2920, AckedBytes: 2920, InflightBytes: 2920},
		{TUS: 1200, RTT: 204, SentBytes: 7300, AckedBytes: 5840, InflightBytes: 5840, Retransmissions: 1},
	}
	if !reflect.DeepEqual(c.Rounds, want) {
		t.Errorf("rounds\n got  %+v\n want %+v", c.Rounds, want)
	}
}

// A retransmitted TSO burst counts in MSS-sized segments, as the kernel's
// total_retrans does.
func TestRetransmissionSegments(t *testing.T) {
	s := handshake()
	s = append(s, d(1000, 0, 4*1460), d(1300, 0, 3*1460), a(1400, 4*1460))
	c := one(t, analyse(t, capture(t, s, capOpts{})))
	if c.Retransmissions != 3 || c.Bytes != 4*1460 {
		t.Errorf("retransmissions %d bytes %d, want 3 and %d", c.Retransmissions, c.Bytes, 4*1460)
	}
}

// A SYN and a bare FIN sent again count as retransmissions, as they do in
// the kernel's total_retrans.
func TestControlRetransmissions(t *testing.T) {
	s := []seg{
		{at: 0, seq: cliISN, syn: true, noAck: true, mss: 1460},
		{at: 1000000, seq: cliISN, syn: true, noAck: true, mss: 1460},
	}
	s = append(s, handshake()[1:]...)
	s[2].at, s[3].at = 1000100, 1000100
	s = append(s, d(1001000, 0, 1460),
		seg{at: 1001001, seq: cs(1460), ack: srvISN + 1, fin: true},
		a(1001100, 1460),
		seg{at: 1001400, seq: cs(1460), ack: srvISN + 1, fin: true},
		a(1001500, 1461))
	c := one(t, analyse(t, capture(t, s, capOpts{})))
	if c.Retransmissions != 2 || c.Bytes != 1460 {
		t.Errorf("retransmissions %d bytes %d, want 2 (SYN, FIN) and 1460", c.Retransmissions, c.Bytes)
	}
}

func TestSpurious(t *testing.T) {
	pre := func() []seg {
		return append(handshake(), d(1000, 0, 1460), d(1010, 1460, 1460), a(1110, 2920)) // min RTT 100 µs
	}
	t.Run("dsack", func(t *testing.T) {
		// A retransmission 200 µs after the original; the original's ACK
		// comes 100 µs after it (no proof by time), then a DSACK.
		s := append(pre(), d(1200, 2920, 1460), d(1400, 2920, 1460), a(1500, 4380),
			seg{at: 1600, fromSrv: true, seq: srvISN + 1, ack: cs(4380), sack: [][2]uint32{{cs(2920), cs(4380)}}})
		c := one(t, analyse(t, capture(t, s, capOpts{})))
		if c.Retransmissions != 1 || c.SpuriousRetransmissions != 1 {
			t.Errorf("retransmissions %d spurious %d, want 1 1", c.Retransmissions, c.SpuriousRetransmissions)
		}
	})
	t.Run("early-ack", func(t *testing.T) {
		// Acknowledged 50 µs after the retransmission, with a 100 µs min RTT:
		// the ACK was the original's.
		s := append(pre(), d(1200, 2920, 1460), d(1250, 2920, 1460), a(1300, 4380))
		c := one(t, analyse(t, capture(t, s, capOpts{})))
		if c.Retransmissions != 1 || c.SpuriousRetransmissions != 1 {
			t.Errorf("retransmissions %d spurious %d, want 1 1", c.Retransmissions, c.SpuriousRetransmissions)
		}
	})
	t.Run("needed", func(t *testing.T) {
		s := append(pre(), d(1200, 2920, 1460), d(1500, 2920, 1460), a(1600, 4380))
		c := one(t, analyse(t, capture(t, s, capOpts{})))
		if c.Retransmissions != 1 || c.SpuriousRetransmissions != 0 {
			t.Errorf("retransmissions %d spurious %d, want 1 0", c.Retransmissions, c.SpuriousRetransmissions)
		}
	})
}

func TestECN(t *testing.T) {
	s := []seg{
		{at: 0, seq: cliISN, syn: true, noAck: true, mss: 1460, ece: true, cwr: true},
		{at: 100, fromSrv: true, seq: srvISN, ack: cliISN + 1, syn: true, mss: 1460, ece: true},
		{at: 100, seq: cliISN + 1, ack: srvISN + 1},
	}
	ce := func(x seg) seg { x.ecn = 3; return x }
	ect := func(x seg) seg { x.ecn = 2; return x }
	ece := func(x seg) seg { x.ece = true; x.ecn = 3; return x } // a CE ACK is not the sender's CE
	s = append(s,
		ect(d(1000, 0, 1460)), ce(d(1010, 1460, 1460)),
		ece(a(1110, 2920)),
		ce(d(1110, 2920, 1460)), ect(d(1111, 4380, 1460)),
		ece(a(1210, 4380)), ece(a(1211, 5840)),
		ce(d(1300, 5840, 1460)), // the capture ends before its ACK
	)
	c := one(t, analyse(t, capture(t, s, capOpts{})))
	if c.CE != 3 || c.ECE != 3 {
		t.Errorf("ce %d ece %d, want 3 3", c.CE, c.ECE)
	}
	if len(c.Rounds) != 3 {
		t.Fatalf("%d rounds, want 3: %+v", len(c.Rounds), c.Rounds)
	}
	// Round 2 ends with the ACK at 1210; the one at 1211 falls between
	// rounds and counts with the round it followed.
	for i, w := range [][2]int64{{1, 1}, {1, 2}, {1, 0}} {
		if r := c.Rounds[i]; r.CE != w[0] || r.ECE != w[1] {
			t.Errorf("round %d: ce %d ece %d, want %d %d", i, r.CE, r.ECE, w[0], w[1])
		}
	}
	if r := c.Rounds[2]; !r.Incomplete || r.SentBytes != 1460 || r.InflightBytes != 1460 || r.RTT != 0 {
		t.Errorf("round 3 not marked incomplete: %+v", c.Rounds[2])
	}
}

// The side that sends more is src, whichever side opened the connection.
func TestDirection(t *testing.T) {
	s := handshake()
	s = append(s,
		d(1000, 0, 100),
		seg{at: 1100, fromSrv: true, seq: srvISN + 1, ack: cs(100), n: 1460},
		seg{at: 1101, fromSrv: true, seq: srvISN + 1 + 1460, ack: cs(100), n: 1460},
		seg{at: 1200, seq: cs(100), ack: srvISN + 1 + 2920},
	)
	c := one(t, analyse(t, capture(t, s, capOpts{})))
	if c.Src != "198.18.7.2:5201" || c.Bytes != 2920 || len(c.Rounds) != 1 || c.Rounds[0].RTT != 100 {
		t.Errorf("got %+v, want the server's 2920 bytes in one 100 µs round", c)
	}
}

// A SYN with a new initial sequence number on the same ports starts a new
// connection.
func TestPortReuse(t *testing.T) {
	s := basic()
	for _, x := range basic() {
		x.at += 10000
		if x.fromSrv {
			x.ack += 50000
		} else {
			x.seq += 50000
		}
		s = append(s, x)
	}
	rep := analyse(t, capture(t, s, capOpts{}))
	if len(rep.Connections) != 2 {
		t.Fatalf("%d connections, want 2", len(rep.Connections))
	}
	for _, c := range rep.Connections {
		if c.Bytes != 8760 || len(c.Rounds) != 2 {
			t.Errorf("bytes %d rounds %d, want 8760 2", c.Bytes, len(c.Rounds))
		}
	}
}

func udpCapture(t testing.TB) []byte {
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: cliIP4, DstIP: srvIP4}
	udp := &layers.UDP{SrcPort: 1, DstPort: 2}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: net2mac(1), DstMAC: net2mac(2), EthernetType: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(buf.Bytes()), Length: len(buf.Bytes())}, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

func TestErrors(t *testing.T) {
	good := capture(t, basic(), capOpts{})
	wifi := capture(t, nil, capOpts{})
	wifi[20] = byte(layers.LinkTypeIEEE802_11) // the link type field of the file header
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":        {nil, "empty file"},
		"garbage":      {[]byte("this is not a capture file at all"), "not a pcap or pcapng capture"},
		"short header": {good[:10], "truncated"},
		"cut, no TCP":  {good[:24+16+5], "capture cut in its first record"}, // nothing whole to analyse
		"pcapng cut":   {capture(t, basic(), capOpts{ng: true})[:20], "truncated"},
		"udp only":     {udpCapture(t), "no TCP segments in the capture (3 packets"},
		"wifi":         {wifi, "unsupported link type 105"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("udp is ErrNoTCP", func(t *testing.T) {
		if _, err := Read(bytes.NewReader(udpCapture(t))); !errors.Is(err, ErrNoTCP) {
			t.Errorf("error %v, want ErrNoTCP", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := File(filepath.Join(t.TempDir(), "nope.pcap"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error %v, want not-exist", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		_, err := File(t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "is a directory") {
			t.Errorf("error %v, want a directory error", err)
		}
	})
}

// rpc is two request/response exchanges after the handshake: a 2,920-byte
// request ACKed by the server's kernel 100 µs after its first byte and
// answered 400 µs after that; then a 1,460-byte request whose response
// carries the ACK 300 µs after it. Server data the client did not ask for
// (a second response segment) opens no exchange.
func rpc() []seg {
	s := handshake()
	return append(s,
		d(1000, 0, 1460), d(1001, 1460, 1460),
		a(1100, 2920),
		seg{at: 1500, fromSrv: true, seq: srvISN + 1, ack: cs(2920), n: 64},
		seg{at: 1501, fromSrv: true, seq: srvISN + 65, ack: cs(2920), n: 64},
		seg{at: 2000, seq: cs(2920), ack: srvISN + 129, n: 1460},
		seg{at: 2300, fromSrv: true, seq: srvISN + 129, ack: cs(4380), n: 64},
	)
}

func TestExchanges(t *testing.T) {
	c := one(t, analyse(t, capture(t, rpc(), capOpts{})))
	want := &schema.Exchanges{
		Requester: "198.18.7.1:40000", Count: 2,
		Response: schema.Latency{P50: 300, P90: 500, P99: 500, Max: 500},
		Network:  schema.Latency{P50: 100, P90: 300, P99: 300, Max: 300},
		Peer:     schema.Latency{P50: 0, P90: 400, P99: 400, Max: 400},
		// The first response's last byte 501 µs after its request (the
		// next request ends it); the second's end is not in the capture.
		Complete: &schema.Latency{P50: 501, P90: 501, P99: 501, Max: 501},
	}
	if !reflect.DeepEqual(c.Exchanges, want) {
		t.Errorf("exchanges %+v, want %+v", c.Exchanges, want)
	}
	// Without the handshake the capture begins with the first request; the
	// client is still the requester (its port is the higher one).
	c = one(t, analyse(t, capture(t, rpc()[3:], capOpts{})))
	if !reflect.DeepEqual(c.Exchanges, want) {
		t.Errorf("no handshake: exchanges %+v, want %+v", c.Exchanges, want)
	}
	// Beginning mid-exchange, with the server's response: that response
	// answers nothing seen, and the second exchange is the only one.
	c = one(t, analyse(t, capture(t, rpc()[6:], capOpts{})))
	if e := c.Exchanges; e == nil || e.Requester != "198.18.7.1:40000" || e.Count != 1 || e.Response.Max != 300 || e.Peer.Max != 0 || e.Complete != nil {
		t.Errorf("from the response on: exchanges %+v, want one of 300 µs from the client, not known complete", e)
	}
	// A one-way transfer has none.
	if c := one(t, analyse(t, capture(t, basic(), capOpts{}))); c.Exchanges != nil {
		t.Errorf("bulk transfer: exchanges %+v, want none", c.Exchanges)
	}
}

// web is a connection from client port port opening at t0 (µs): its
// SYN-ACK wait µs later, then a 100-byte request 100 µs after that, a
// response of segs full segments 100 µs apart from 200 µs after the request,
// and (fin) the server's FIN 100 µs after its last segment.
func web(port uint16, t0, wait int64, segs int, fin bool) []seg {
	s := handshake()
	s[1].at, s[2].at = wait, wait
	s = append(s, d(wait+100, 0, 100))
	for i := range segs {
		s = append(s, seg{at: wait + 300 + int64(i)*100, fromSrv: true, seq: srvISN + 1 + uint32(i)*1460, ack: cs(100), n: 1460})
	}
	if fin {
		s = append(s, seg{at: wait + 300 + int64(segs)*100, fromSrv: true, seq: srvISN + 1 + uint32(segs)*1460, ack: cs(100), fin: true})
	}
	for i := range s {
		s[i].at += t0
		s[i].port = port
	}
	return s
}

// TestRequests: a server's connections pooled (schema.Requests): each
// request to its response's last byte where the capture shows that end
// (here the server's FIN), the SYN to the request (a SYN-ACK held 10 ms
// shows there), and the timeline, which ends the longest exchange before
// the capture does.
func TestRequests(t *testing.T) {
	var segs []seg
	segs = append(segs, web(40000, 0, 100, 2, true)...)         // request at 200, last byte at 500: 300 µs
	segs = append(segs, web(40001, 50_000, 10_000, 3, true)...) // SYN-ACK held 10 ms: request at 60,100, last byte at 60,500: 400 µs
	segs = append(segs, web(40002, 150_000, 100, 1, true)...)   // request at 150,200, last byte at 150,400: 200 µs ...
	segs = append(segs, web(40003, 250_000, 100, 2, false)...)  // ... and one whose end the capture does not show
	slices.SortStableFunc(segs, func(a, b seg) int { return cmp.Compare(a.at, b.at) })
	rep := analyse(t, capture(t, segs, capOpts{}))
	r := rep.Requests
	if r == nil {
		t.Fatal("no requests summary")
	}
	want := schema.Requests{
		Count:    3,
		Complete: schema.Latency{P50: 300, P90: 400, P99: 400, Max: 400},
		Opened:   3,
		Setup:    &schema.Latency{P50: 200, P90: 10_100, P99: 10_100, Max: 10_100},
		Total:    &schema.Latency{P50: 500, P90: 10_500, P99: 10_500, Max: 10_500},
		// The capture ends at 250,500 µs, the longest exchange is 400:
		// the exchanges begun by 250,100 are in it, in two 100 ms bins.
		TimelineBinUS: 100_000,
		Timeline: []schema.RequestBin{
			{TUS: 0, Count: 2, Mean: 350, Max: 400},
			{TUS: 100_000, Count: 1, Mean: 200, Max: 200},
		},
	}
	if !reflect.DeepEqual(*r, want) {
		t.Errorf("requests %+v\nwant %+v", *r, want)
	}
	if lo, hi, n := TimelineRange(r, 1); lo != 200 || hi != 350 || n != 2 {
		t.Errorf("TimelineRange: %v to %v in %d bins, want 200 to 350 in 2", lo, hi, n)
	}
	if _, _, n := TimelineRange(r, 2); n != 1 {
		t.Errorf("TimelineRange of bins of 2 or more: %d bins, want 1", n)
	}
	if h := string(TimelineChart(r)); !strings.Contains(h, "<svg") || !strings.Contains(h, ">bin<") || !strings.Contains(h, "by when it began (100 ms bins)") {
		t.Errorf("TimelineChart of two bins: %.200q, want a chart of bins", h)
	}
	one := *r
	one.Timeline = r.Timeline[:1]
	if h := TimelineChart(&one); h != "" {
		t.Errorf("TimelineChart of one bin: %.100q, want none", h)
	}
	// A bulk transfer has no exchange: no summary.
	if rep := analyse(t, capture(t, basic(), capOpts{})); rep.Requests != nil {
		t.Errorf("bulk transfer: requests %+v, want none", rep.Requests)
	}
}

// TestTruncatedCapture: a capture whose last record is cut (tcpdump killed
// mid-write) is analysed up to its last whole record, as Wireshark does,
// with a warning in the report; pcap and pcapng, the cut in the record's
// header or in its data.
func TestTruncatedCapture(t *testing.T) {
	segs := basic()
	for _, o := range []capOpts{{}, {ng: true}, {link: layers.LinkTypeLinuxSLL2, v6: true}} {
		full := capture(t, segs, o)
		prefix := capture(t, segs[:len(segs)-1], o)
		if !bytes.HasPrefix(full, prefix) {
			t.Fatalf("%+v: the capture of fewer segments is not a prefix", o)
		}
		want := analyse(t, prefix)
		for _, cut := range []int{len(prefix) + 1, len(prefix) + 7, len(prefix) + 16, len(prefix) + 17, len(full) - 1} {
			rep, err := Read(bytes.NewReader(full[:cut]))
			if err != nil {
				t.Errorf("%+v cut at %d of %d: %v, want the analysis of the %d whole packets", o, cut, len(full), err, len(segs)-1)
				continue
			}
			if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "last record is cut short") ||
				!strings.Contains(rep.Warnings[0], fmt.Sprintf("the %d whole packets", len(segs)-1)) {
				t.Errorf("%+v cut at %d: warnings %q, want one saying the last record is cut short and the %d whole packets were analysed", o, cut, rep.Warnings, len(segs)-1)
			}
			got := *rep
			got.Warnings = nil
			if !reflect.DeepEqual(&got, want) {
				t.Errorf("%+v cut at %d: analysis\n%+v\nwant that of the whole packets\n%+v", o, cut, got, want)
			}
		}
		if rep := analyse(t, full); len(rep.Warnings) != 0 {
			t.Errorf("%+v: whole capture: warnings %q", o, rep.Warnings)
		}
	}
}
