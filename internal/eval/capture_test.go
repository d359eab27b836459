package eval

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/analyze/pcaptest"
	"github.com/hbm-dev/hbm/internal/eval/result"
)

// writePcap writes a handshake, 3000 bytes in two segments and their ACK,
// headers only (pcaptest.WriteTransfer).
func writePcap(t *testing.T, path string) {
	pcaptest.WriteTransfer(t, path, net.IPv4(198, 18, 0, 1), net.IPv4(198, 18, 0, 2), 128)
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

	// A request/response connection gets its split: 20 requests, each
	// answered 500 us after it left, 100 us of it the network's.
	pcaptest.WriteRPC(t, filepath.Join(dir, "captures", "rpc.pcap"), net.IPv4(198, 18, 0, 1), net.IPv4(198, 18, 0, 2), 128, 20)
	_, note = perRun(&result.Run{Capture: &result.Capture{File: "captures/rpc.pcap", Host: "snd", Interface: "ev0-0", Packets: 63}})
	for _, want := range []string{
		"Requests from 198.18.0.1:40000: 20, response p50 500 µs p99 500 µs; network p50 100 µs p99 100 µs; server p50 400 µs p99 400 µs.",
		// ... and every connection's pooled: the 19 whose end the next
		// request shows; the SYN 1 ms before the first request.
		"19 requests completed, every connection's pooled: request to the response's last byte p50 500 µs, p90 500 µs, p99 500 µs, max 500 µs. On the 1 connection whose SYN the capture holds: SYN to the first request p50 1.00 ms",
	} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if _, note = perRun(run); strings.Contains(note, "Requests from") || strings.Contains(note, "requests completed") {
		t.Errorf("one-way transfer: note %q has a request split", note)
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
