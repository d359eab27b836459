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
	w := newWriter(t, client, server, snap)
	w.pkt(0, false, 100, 0, true, 0)
	w.pkt(100*time.Microsecond, true, 900, 101, true, 0)
	w.pkt(100*time.Microsecond, false, 101, 901, false, 0)
	w.pkt(1000*time.Microsecond, false, 101, 901, false, 1500)
	w.pkt(1001*time.Microsecond, false, 1601, 901, false, 1500)
	w.pkt(1201*time.Microsecond, true, 901, 3101, false, 0)
	w.save(path)
}

// WriteRPC writes to path a capture of n request/response exchanges from
// client:40000 to server:5201 after a handshake: every 1 ms a 1000-byte
// request, the server's ACK of it 100 us later and its 64-byte response 400
// us after that.
func WriteRPC(t testing.TB, path string, client, server net.IP, snap, n int) {
	t.Helper()
	w := newWriter(t, client, server, snap)
	w.pkt(0, false, 100, 0, true, 0)
	w.pkt(100*time.Microsecond, true, 900, 101, true, 0)
	w.pkt(100*time.Microsecond, false, 101, 901, false, 0)
	cseq, sseq := uint32(101), uint32(901)
	for i := range n {
		at := time.Duration(i+1) * time.Millisecond
		w.pkt(at, false, cseq, sseq, false, 1000)
		cseq += 1000
		w.pkt(at+100*time.Microsecond, true, sseq, cseq, false, 0)
		w.pkt(at+500*time.Microsecond, true, sseq, cseq, false, 64)
		sseq += 64
	}
	w.save(path)
}

type writer struct {
	t    testing.TB
	out  bytes.Buffer
	w    *pcapgo.Writer
	c, s net.IP
	snap int
	t0   time.Time
}

func newWriter(t testing.TB, client, server net.IP, snap int) *writer {
	w := &writer{t: t, c: client.To4(), s: server.To4(), snap: snap, t0: time.Unix(1700000000, 0)}
	w.w = pcapgo.NewWriter(&w.out)
	if err := w.w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *writer) pkt(at time.Duration, fromSrv bool, seq, ack uint32, syn bool, n int) {
	t := w.t
	src, dst, sp, dp := w.c, w.s, layers.TCPPort(40000), layers.TCPPort(5201)
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
	ci := gopacket.CaptureInfo{Timestamp: w.t0.Add(at), CaptureLength: min(len(b), w.snap), Length: len(b)}
	if err := w.w.WritePacket(ci, b[:ci.CaptureLength]); err != nil {
		t.Fatal(err)
	}
}

func (w *writer) save(path string) {
	if err := os.WriteFile(path, w.out.Bytes(), 0o644); err != nil {
		w.t.Fatal(err)
	}
}
