package analyze

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// The capture-file side: pcapgo reads pcap and pcapng files (tcpdump's, also
// gzip-compressed), and a DecodingLayerParser decodes each packet into
// layers it reuses, so that reading allocates nothing per packet.

// packetSource is what pcapgo's two readers have in common.
type packetSource interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// Only the file's first bytes tell pcap from pcapng.
const pcapngMagic = 0x0a0d0d0a

// openCapture recognises the format and returns a reader of its packets.
func openCapture(r io.Reader) (packetSource, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	head, err := br.Peek(4)
	if len(head) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, errors.New("empty file: not a pcap or pcapng capture")
		}
		return nil, err
	}
	if len(head) == 4 && binary.LittleEndian.Uint32(head) == pcapngMagic {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("not a valid pcapng capture: %w", describe(err))
		}
		return ng, nil
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("not a pcap or pcapng capture: %w", describe(err))
	}
	return pr, nil
}

// describe makes a short read say what it means.
func describe(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("file ends too early (truncated): %w", err)
	}
	return err
}

// packet is what the analysis needs of one TCP segment.
type packet struct {
	ts               int64 // ns since the epoch
	v6               bool
	src, dst         [16]byte // IPv4 in the first 4 bytes
	sport, dport     uint16
	seq, ack         uint32
	syn, fin, rst    bool
	psh              bool
	hasAck, ece, cwr bool
	ecn              uint8 // the IP header's ECN field: 3 is CE
	payload          int   // TCP payload length on the wire (not just captured)
	mss              uint16
	tsOpt            bool // the segment carries a timestamp option
	nsack            int
	sack             [4][2]uint32 // SACK blocks (left, right)
}

// decoder turns link-layer frames into packets.
type decoder struct {
	link    layers.LinkType
	parser  *gopacket.DecodingLayerParser
	raw4    *gopacket.DecodingLayerParser // LINKTYPE_RAW: first layer from the version nibble
	raw6    *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType

	eth  layers.Ethernet
	sll  layers.LinuxSLL
	sll2 layers.LinuxSLL2
	lo   layers.Loopback
	vlan layers.Dot1Q
	ip4  layers.IPv4
	ip6  layers.IPv6
	tcp  layers.TCP
}

// errUnsupportedLink is returned for a link type the decoder cannot read.
type errUnsupportedLink struct{ link layers.LinkType }

func (e errUnsupportedLink) Error() string {
	return fmt.Sprintf("unsupported link type %d (%s): hbm analyze reads Ethernet, Linux cooked (SLL, SLL2), loopback and raw IP captures", uint16(e.link), e.link)
}

func newDecoder(link layers.LinkType) (*decoder, error) {
	d := &decoder{link: link, decoded: make([]gopacket.LayerType, 0, 8)}
	all := []gopacket.DecodingLayer{&d.eth, &d.sll, &d.sll2, &d.lo, &d.vlan, &d.ip4, &d.ip6, &d.tcp}
	mk := func(first gopacket.LayerType) *gopacket.DecodingLayerParser {
		p := gopacket.NewDecodingLayerParser(first, all...)
		p.IgnoreUnsupported = true // payloads, ICMP, UDP...: stop there without an error
		return p
	}
	switch link {
	case layers.LinkTypeEthernet:
		d.parser = mk(layers.LayerTypeEthernet)
	case layers.LinkTypeLinuxSLL:
		d.parser = mk(layers.LayerTypeLinuxSLL)
	case layers.LinkTypeLinuxSLL2:
		d.parser = mk(layers.LayerTypeLinuxSLL2)
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		d.parser = mk(layers.LayerTypeLoopback)
	case layers.LinkTypeIPv4:
		d.parser = mk(layers.LayerTypeIPv4)
	case layers.LinkTypeIPv6:
		d.parser = mk(layers.LayerTypeIPv6)
	case layers.LinkTypeRaw, 12: // 12: LINKTYPE_RAW's number on OpenBSD
		d.raw4, d.raw6 = mk(layers.LayerTypeIPv4), mk(layers.LayerTypeIPv6)
	default:
		return nil, errUnsupportedLink{link}
	}
	return d, nil
}

// decode fills p from one frame; it reports false for anything that is not a
// whole TCP header over IPv4 or IPv6 (other protocols, fragments, frames cut
// short by the snap length inside the headers).
func (d *decoder) decode(data []byte, wireLen int, p *packet) bool {
	parser := d.parser
	if parser == nil {
		if len(data) == 0 {
			return false
		}
		switch data[0] >> 4 {
		case 4:
			parser = d.raw4
		case 6:
			parser = d.raw6
		default:
			return false
		}
	}
	d.decoded = d.decoded[:0]
	// Errors (a malformed or truncated layer) leave the layers decoded so far.
	_ = parser.DecodeLayers(data, &d.decoded)
	n := len(d.decoded)
	if n == 0 {
		return false
	}
	if d.decoded[n-1] != layers.LayerTypeTCP {
		// A snap length that cuts into the TCP options leaves gopacket
		// without a TCP layer: the fixed header is all the analysis needs
		// but the SYN's MSS and the SACK blocks.
		if !d.fixedTCP(d.decoded[n-1]) {
			return false
		}
		d.decoded = append(d.decoded, layers.LayerTypeTCP)
		n++
	}
	if n < 2 {
		return false
	}
	t := &d.tcp
	hdr := int(t.DataOffset) * 4
	switch d.decoded[n-2] { // the layer right under TCP
	case layers.LayerTypeIPv4:
		ip := &d.ip4
		if ip.FragOffset != 0 || ip.Flags&layers.IPv4MoreFragments != 0 {
			return false
		}
		p.v6 = false
		p.src, p.dst = [16]byte{}, [16]byte{}
		copy(p.src[:4], ip.SrcIP.To4())
		copy(p.dst[:4], ip.DstIP.To4())
		p.ecn = ip.TOS & 3
		if tot := int(binary.BigEndian.Uint16(ip.Contents[2:4])); tot != 0 {
			p.payload = tot - len(ip.Contents) - hdr
		} else { // TSO/GSO seen before segmentation: the length is the frame's
			p.payload = len(ip.Payload) - hdr + (wireLen - len(data))
		}
	case layers.LayerTypeIPv6:
		ip := &d.ip6
		p.v6 = true
		copy(p.src[:], ip.SrcIP.To16())
		copy(p.dst[:], ip.DstIP.To16())
		p.ecn = ip.TrafficClass & 3
		if ip.Length != 0 {
			p.payload = int(ip.Length) - hdr
		} else { // jumbogram (BIG TCP): the length is the frame's
			p.payload = len(ip.Payload) - hdr + (wireLen - len(data))
		}
	default:
		return false // TCP over something else (an IPv6 extension header we do not walk)
	}
	if p.payload < 0 {
		return false
	}
	p.sport, p.dport = uint16(t.SrcPort), uint16(t.DstPort)
	p.seq, p.ack = t.Seq, t.Ack
	p.syn, p.fin, p.rst, p.psh, p.hasAck, p.ece, p.cwr = t.SYN, t.FIN, t.RST, t.PSH, t.ACK, t.ECE, t.CWR
	p.mss, p.tsOpt, p.nsack = 0, false, 0
	for i := range t.Options {
		o := &t.Options[i]
		switch o.OptionType {
		case layers.TCPOptionKindMSS:
			if len(o.OptionData) == 2 {
				p.mss = binary.BigEndian.Uint16(o.OptionData)
			}
		case layers.TCPOptionKindTimestamps:
			p.tsOpt = true
		case layers.TCPOptionKindSACK:
			b := o.OptionData
			for len(b) >= 8 && p.nsack < len(p.sack) {
				p.sack[p.nsack] = [2]uint32{binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])}
				p.nsack++
				b = b[8:]
			}
		}
	}
	return true
}

// fixedTCP decodes the fixed 20 bytes of a TCP header whose options the
// capture cut off, right above the IP layer ip.
func (d *decoder) fixedTCP(ip gopacket.LayerType) bool {
	var b []byte
	switch ip {
	case layers.LayerTypeIPv4:
		if d.ip4.Protocol != layers.IPProtocolTCP {
			return false
		}
		b = d.ip4.Payload
	case layers.LayerTypeIPv6:
		if d.ip6.NextHeader != layers.IPProtocolTCP {
			return false
		}
		b = d.ip6.Payload
	default:
		return false
	}
	if len(b) < 20 || b[12]>>4 < 5 {
		return false
	}
	t := &d.tcp
	t.SrcPort = layers.TCPPort(binary.BigEndian.Uint16(b[0:2]))
	t.DstPort = layers.TCPPort(binary.BigEndian.Uint16(b[2:4]))
	t.Seq = binary.BigEndian.Uint32(b[4:8])
	t.Ack = binary.BigEndian.Uint32(b[8:12])
	t.DataOffset = b[12] >> 4
	f := b[13]
	t.FIN, t.SYN, t.RST, t.PSH, t.ACK, t.ECE, t.CWR = f&0x01 != 0, f&0x02 != 0, f&0x04 != 0, f&0x08 != 0, f&0x10 != 0, f&0x40 != 0, f&0x80 != 0
	t.Options = t.Options[:0]
	return true
}
