// Package pcaptest writes the small synthetic captures the tests of hbm
// analyze's readers (the CLI, eval's report) share.
package pcaptest

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// WriteTransfer writes to path a capture of one connection from client:40000
// to server:5201: a handshake, 3000 bytes in two segments from the client
// (1 ms after the SYN, 1 us apart), and the server's ACK 200 us after the
// last one. snap bounds the bytes kept of each packet.
func WriteTransfer(t testing.TB, path string, client, server net.IP, snap int) {
	t.Helper()
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	c, s := client.To4(), server.To4()
	t0 := time.Unix(1700000000, 0)
	pkt := func(at time.Duration, fromSrv bool, seq, ack uint32, syn bool, n int) {
		src, dst, sp, dp := c, s, layers.TCPPort(40000), layers.TCPPort(5201)
		if fromSrv {
			src, dst, sp, dp = dst, src, dp, sp
		}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
		tcp := &layers.TCP{SrcPort: sp, DstPort: dp, Seq: seq, Ack: ack, SYN: syn, ACK: ack != 0, Window: 1000}
		tcp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(make([]byte, n))); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(at), CaptureLength: min(len(b), snap), Length: len(b)}
		if err := w.WritePacket(ci, b[:ci.CaptureLength]); err != nil {
			t.Fatal(err)
		}
	}
	pkt(0, false, 100, 0, true, 0)
	pkt(100*time.Microsecond, true, 900, 101, true, 0)
	pkt(100*time.Microsecond, false, 101, 901, false, 0)
	pkt(1000*time.Microsecond, false, 101, 901, false, 1500)
	pkt(1001*time.Microsecond, false, 1601, 901, false, 1500)
	pkt(1201*time.Microsecond, true, 901, 3101, false, 0)
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
