package analyze

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Synthetic captures for the tests: segments with known sequence numbers,
// flags, ECN bits and times, serialised with gopacket and written with
// pcapgo, as tcpdump would have written them.

var (
	cliIP4 = net.IPv4(198, 18, 7, 1).To4()
	srvIP4 = net.IPv4(198, 18, 7, 2).To4()
	cliIP6 = net.ParseIP("fd00:0:7::1")
	srvIP6 = net.ParseIP("fd00:0:7::2")
)

const (
	cliPort = 40000
	srvPort = 5201
	cliISN  = 4294967000 // wraps around 2^32 after 296 bytes
	srvISN  = 1000
)

// seg is one TCP segment of the test connection; at is in µs.
type seg struct {
	at       int64
	fromSrv  bool
	seq, ack uint32
	syn, fin bool
	noAck    bool
	ece, cwr bool
	ecn      uint8 // IP ECN field: 1/2 ECT, 3 CE
	n        int   // payload bytes
	mss      uint16
	ts       bool // a timestamp option
	sack     [][2]uint32
	port     uint16 // the client's port (0: cliPort)
}

type capOpts struct {
	link  layers.LinkType // Ethernet (default), LinuxSLL, LinuxSLL2, Raw
	v6    bool
	ng    bool // pcapng
	snap  int  // cut each frame to this many bytes (0: whole)
	start time.Time
}

// frame serialises s as one link-layer frame.
func frame(t testing.TB, s seg, o capOpts) []byte {
	t.Helper()
	src, dst := cliIP4, srvIP4
	sp, dp := layers.TCPPort(cliPort), layers.TCPPort(srvPort)
	if s.port != 0 {
		sp = layers.TCPPort(s.port)
	}
	if o.v6 {
		src, dst = cliIP6, srvIP6
	}
	if s.fromSrv {
		src, dst, sp, dp = dst, src, dp, sp
	}
	tcp := &layers.TCP{SrcPort: sp, DstPort: dp, Seq: s.seq, Ack: s.ack, SYN: s.syn, FIN: s.fin, ACK: !s.noAck, ECE: s.ece, CWR: s.cwr, Window: 65535}
	if s.mss > 0 {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: binary.BigEndian.AppendUint16(nil, s.mss)})
	}
	if s.ts {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)})
	}
	if len(s.sack) > 0 {
		var b []byte
		for _, blk := range s.sack {
			b = binary.BigEndian.AppendUint32(b, blk[0])
			b = binary.BigEndian.AppendUint32(b, blk[1])
		}
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindNop}, layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindSACK, OptionLength: uint8(2 + len(b)), OptionData: b})
	}
	var net gopacket.NetworkLayer
	var l []gopacket.SerializableLayer
	if o.v6 {
		ip := &layers.IPv6{Version: 6, TrafficClass: s.ecn, NextHeader: layers.IPProtocolTCP, HopLimit: 64, SrcIP: src, DstIP: dst}
		net, l = ip, append(l, ip)
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TOS: s.ecn, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
		net, l = ip, append(l, ip)
	}
	tcp.SetNetworkLayerForChecksum(net)
	l = append(l, tcp, gopacket.Payload(make([]byte, s.n)))
	et := layers.EthernetTypeIPv4
	if o.v6 {
		et = layers.EthernetTypeIPv6
	}
	var hdr []byte // the cooked headers gopacket cannot serialise
	switch o.link {
	case layers.LinkTypeEthernet, 0:
		l = append([]gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: net2mac(1), DstMAC: net2mac(2), EthernetType: et}}, l...)
	case layers.LinkTypeLinuxSLL: // packet type, ARPHRD, address length, address (8), protocol
		hdr = binary.BigEndian.AppendUint16(nil, 4)
		hdr = binary.BigEndian.AppendUint16(hdr, 1)
		hdr = binary.BigEndian.AppendUint16(hdr, 6)
		hdr = append(hdr, 2, 0, 0, 0, 0, 1, 0, 0)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(et))
	case layers.LinkTypeLinuxSLL2: // protocol, reserved, ifindex, ARPHRD, packet type, address length, address (8)
		hdr = binary.BigEndian.AppendUint16(nil, uint16(et))
		hdr = binary.BigEndian.AppendUint16(hdr, 0)
		hdr = binary.BigEndian.AppendUint32(hdr, 2)
		hdr = binary.BigEndian.AppendUint16(hdr, 1)
		hdr = append(hdr, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0)
	case layers.LinkTypeRaw:
	default:
		t.Fatalf("frame: link type %v", o.link)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, l...); err != nil {
		t.Fatal(err)
	}
	return append(hdr, buf.Bytes()...)
}

func net2mac(i byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, i} }

// capture writes segs as a capture file (pcap, or pcapng with o.ng).
func capture(t testing.TB, segs []seg, o capOpts) []byte {
	t.Helper()
	if o.link == 0 {
		o.link = layers.LinkTypeEthernet
	}
	if o.start.IsZero() {
		o.start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	}
	var out bytes.Buffer
	var write func(gopacket.CaptureInfo, []byte) error
	flush := func() error { return nil }
	if o.ng {
		w, err := pcapgo.NewNgWriter(&out, o.link)
		if err != nil {
			t.Fatal(err)
		}
		write, flush = w.WritePacket, w.Flush
	} else {
		w := pcapgo.NewWriterNanos(&out)
		if err := w.WriteFileHeader(65536, o.link); err != nil {
			t.Fatal(err)
		}
		write = w.WritePacket
	}
	for _, s := range segs {
		b := frame(t, s, o)
		ci := gopacket.CaptureInfo{Timestamp: o.start.Add(time.Duration(s.at) * time.Microsecond), CaptureLength: len(b), Length: len(b)}
		if o.snap > 0 && len(b) > o.snap {
			b = b[:o.snap]
			ci.CaptureLength = o.snap
		}
		if err := write(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// handshake is the three-way handshake at t = 0, 100, 100 µs: MSS 1460, no
// timestamps, so a segment is 1460 bytes.
func handshake() []seg {
	return []seg{
		{at: 0, seq: cliISN, syn: true, noAck: true, mss: 1460},
		{at: 100, fromSrv: true, seq: srvISN, ack: cliISN + 1, syn: true, mss: 1460},
		{at: 100, seq: cliISN + 1, ack: srvISN + 1},
	}
}

// d returns the client's data segment of n bytes at relative offset off.
func d(at int64, off uint32, n int) seg {
	return seg{at: at, seq: cliISN + 1 + off, ack: srvISN + 1, n: n}
}

// a returns the server's ACK of the client's data up to relative offset off.
func a(at int64, off uint32) seg {
	return seg{at: at, fromSrv: true, seq: srvISN + 1, ack: cliISN + 1 + off}
}

// cs is the client's sequence number at relative offset off (after the SYN).
func cs(off uint32) uint32 { return cliISN + 1 + off }
