package eval

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// writePcap writes a handshake, 3000 bytes in two segments and their ACK.
func writePcap(t *testing.T, path string) {
	t.Helper()
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(128, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	c, s := net.IPv4(198, 18, 0, 1).To4(), net.IPv4(198, 18, 0, 2).To4()
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
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(at), CaptureLength: min(len(b), 128), Length: len(b)}
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

func TestCaptureCharts(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "captures"), 0o755)
	writePcap(t, filepath.Join(dir, "captures", "x.pcap"))
	perRun := captureCharts(dir)

	run := &result.Run{Capture: &result.Capture{File: "captures/x.pcap", Host: "snd", Interface: "ev0-0", Packets: 6, Full: true}}
	charts, note := perRun(run)
	if len(charts) != 3 || !strings.Contains(string(charts[0]), "198.18.0.1:40000 → 198.18.0.2:5201") {
		t.Errorf("%d charts, want the connection's 3: %.200s", len(charts), charts)
	}
	for _, want := range []string{"captures/x.pcap", "6 packets on ev0-0 of snd", "the 64 MB bound ended it early", "1 of 1 connections"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}

	for _, c := range []struct {
		capture *result.Capture
		want    string
	}{
		{nil, ""},
		{&result.Capture{File: "captures/x.pcap", Error: "AF_PACKET socket: operation not permitted"}, "capture: AF_PACKET socket: operation not permitted"},
		{&result.Capture{File: "captures/missing.pcap"}, "no such file"},
	} {
		charts, note := perRun(&result.Run{Capture: c.capture})
		if len(charts) != 0 || (c.want == "") != (note == "") || !strings.Contains(note, c.want) {
			t.Errorf("%+v: %d charts, note %q; want none and %q", c.capture, len(charts), note, c.want)
		}
	}
}
