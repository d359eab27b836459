package analyze

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// genCapture writes a synthetic capture of about size bytes: conns bulk
// connections taking turns, each round 64 segments of 1448 bytes and 32
// ACKs (every 2nd segment) 100 µs later, with every 500th segment sent
// again and every 50th CE-marked. snap > 0 cuts frames to that many bytes,
// as tcpdump -s does. It returns the number of packets.
func genCapture(t testing.TB, w io.Writer, size int64, conns, snap int) int64 {
	bw := bufio.NewWriterSize(w, 1<<20)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(262144, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	// Templates: a data segment and an ACK with the timestamp option; seq,
	// ack, ports, TOS and flags are patched in place per packet.
	mk := func(payload int, fromSrv bool) []byte {
		s := seg{fromSrv: fromSrv, n: payload, ts: true}
		return frame(t, s, capOpts{})
	}
	dataT, ackT := mk(1448, false), mk(0, true)
	const ipOff, tcpOff = 14, 14 + 20
	patch := func(f []byte, sport, dport uint16, seq, ack uint32, tos byte) {
		f[ipOff+1] = tos
		binary.BigEndian.PutUint16(f[tcpOff:], sport)
		binary.BigEndian.PutUint16(f[tcpOff+2:], dport)
		binary.BigEndian.PutUint32(f[tcpOff+4:], seq)
		binary.BigEndian.PutUint32(f[tcpOff+8:], ack)
	}
	type st struct{ seq, ack uint32 }
	cs := make([]st, conns)
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	var written, pkts int64
	write := func(f []byte) {
		ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(f), Length: len(f)}
		if snap > 0 && len(f) > snap {
			f = f[:snap]
			ci.CaptureLength = snap
		}
		if err := pw.WritePacket(ci, f); err != nil {
			t.Fatal(err)
		}
		written += int64(16 + len(f))
		pkts++
	}
	n := 0
	for written < size {
		for c := range cs {
			port := uint16(40000 + c)
			s := &cs[c]
			start := s.seq
			for i := range 64 {
				n++
				seq := s.seq
				if n%500 == 0 && i > 0 { // a retransmission of the segment before
					seq -= 1448
				} else {
					s.seq += 1448
				}
				tos := byte(2)
				if n%50 == 0 {
					tos = 3
				}
				patch(dataT, port, 5201, seq, 1, tos)
				write(dataT)
				now = now.Add(time.Microsecond)
			}
			now = now.Add(100 * time.Microsecond)
			for a := start + 2*1448; a-start <= s.seq-start; a += 2 * 1448 {
				patch(ackT, 5201, port, 1, a, 0)
				write(ackT)
				now = now.Add(time.Microsecond)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return pkts
}

// The analysis allocates nothing per packet: ten times the packets cost
// (almost) no more allocations, only the amortised growth of the arrays.
func TestAllocsPerPacket(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	allocs := func(size int64) (float64, int64) {
		var buf bytes.Buffer
		n := genCapture(t, &buf, size, 4, 0)
		data := buf.Bytes()
		return testing.AllocsPerRun(2, func() {
			if _, err := Read(bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}), n
	}
	a1, n1 := allocs(2 << 20)
	a2, n2 := allocs(20 << 20)
	perPacket := (a2 - a1) / float64(n2-n1)
	t.Logf("%v allocations for %d packets, %v for %d: %.4f per packet", a1, n1, a2, n2, perPacket)
	if perPacket > 0.01 {
		t.Errorf("%.4f allocations per packet, want none (< 0.01)", perPacket)
	}
}

// BenchmarkRead analyses a generated capture: HBM_BENCH_MB megabytes (64 by
// default), full frames or, with HBM_BENCH_SNAP=N, headers only; with
// HBM_BENCH_KEEP=DIR the file stays there for timing `hbm analyze` on it.
// It reports the capture's bytes per second (MB/s).
func BenchmarkRead(b *testing.B) {
	mb, _ := strconv.Atoi(os.Getenv("HBM_BENCH_MB"))
	if mb <= 0 {
		mb = 64
	}
	snap, _ := strconv.Atoi(os.Getenv("HBM_BENCH_SNAP"))
	dir := os.Getenv("HBM_BENCH_KEEP")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, "bench-"+strconv.Itoa(mb)+"m-snap"+strconv.Itoa(snap)+".pcap")
	if _, err := os.Stat(path); err != nil {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		pk := genCapture(b, f, int64(mb)<<20, 16, snap)
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %d packets", path, pk)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rep, err := File(path)
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Connections) != 16 {
			b.Fatalf("%d connections, want 16", len(rep.Connections))
		}
	}
}
