package analyze

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// fuzzSeeds are valid captures of every format and link type, and cut
// copies of them: `go test` runs them all as regular cases, and
// `go test -fuzz FuzzRead ./internal/analyze/` mutates them.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, o := range []capOpts{
		{}, {ng: true}, {link: layers.LinkTypeLinuxSLL}, {link: layers.LinkTypeLinuxSLL2, ng: true},
		{link: layers.LinkTypeRaw, v6: true}, {snap: 54},
	} {
		full := capture(t, basic(), o)
		seeds = append(seeds, full)
		for _, cut := range []int{1, 4, 23, 24, 30, 60, len(full) / 2, len(full) - 1} {
			if cut < len(full) {
				seeds = append(seeds, full[:cut])
			}
		}
	}
	seeds = append(seeds, nil, []byte("garbage that is no capture"), udpCapture(t))
	return seeds
}

func FuzzRead(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		rep, err := Read(bytes.NewReader(data))
		// Time as well as crashes: a budget linear in the input's size
		// (100 ns a byte plus 100 ms: some 30 times the reader's rate).
		if took, budget := time.Since(start), 100*time.Millisecond+time.Duration(len(data))*100*time.Nanosecond; took > budget {
			t.Fatalf("%d bytes took %v, over the budget of %v", len(data), took, budget)
		}
		if err != nil {
			if rep != nil {
				t.Fatalf("a report with the error %v", err)
			}
			return
		}
		checkReport(t, rep)
	})
}

// checkReport checks what holds for any analysis, however odd the capture,
// and that it renders as JSON and HTML.
func checkReport(t *testing.T, rep *schema.Report) {
	t.Helper()
	if len(rep.Connections) == 0 {
		t.Fatal("no connections and no error")
	}
	for _, c := range rep.Connections {
		if c.Bytes < 0 || c.Retransmissions < 0 || c.SpuriousRetransmissions < 0 || c.SpuriousRetransmissions > c.Retransmissions ||
			c.CE < 0 || c.ECE < 0 || c.DurationUS < 0 || c.Packets <= 0 {
			t.Errorf("impossible counts: %+v", c)
		}
		if r := c.RTT; r.Min < 0 || r.Min > r.P50 || r.P50 > r.P99 || (r.Samples == 0 && (r.Min != 0 || r.P99 != 0)) {
			t.Errorf("impossible RTT summary: %+v", r)
		}
		for _, r := range c.Rounds {
			if r.RTT < 0 || r.SentBytes < 0 || r.AckedBytes < 0 || r.InflightBytes < 0 || r.CE < 0 || r.ECE < 0 || r.Retransmissions < 0 {
				t.Errorf("impossible round: %+v", r)
			}
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Error(err)
	}
	if err := WriteHTML(io.Discard, rep, "fuzz"); err != nil {
		t.Error(err)
	}
}

func TestFuzzSeeds(t *testing.T) {
	// The valid seeds analyse without an error; the cut ones never panic.
	valid := 0
	for _, s := range fuzzSeeds(t) {
		rep, err := Read(bytes.NewReader(s))
		if err == nil {
			valid++
			checkReport(t, rep)
		}
	}
	if valid < 6 {
		t.Errorf("only %d seeds analysed cleanly, want at least the 6 whole captures", valid)
	}
}

// worstCase is a capture crafted against per-ACK scans: n one-byte segments,
// then n retransmissions each covering all of them (every queued segment
// marked again), n DSACK ACKs that do not advance (each matched against
// every pending retransmission), and n ACKs advancing one byte at a time
// (each judging the pending retransmissions). Headers only (snap 54): the
// lengths come from the IP headers.
func worstCase(t testing.TB, n int) []byte {
	s := handshake()
	at := int64(1000)
	for i := range n {
		s = append(s, d(at, uint32(i), 1))
		at++
	}
	for range n {
		s = append(s, d(at, 0, n))
		at++
	}
	for range n {
		ack := a(at, 0)
		ack.sack = [][2]uint32{{cs(0), cs(1)}, {cs(0), cs(2)}}
		s = append(s, ack)
		at++
	}
	for i := 1; i <= n; i++ {
		s = append(s, a(at, uint32(i)))
		at++
	}
	return capture(t, s, capOpts{snap: 54})
}

// TestWorstCaseTime: the crafted capture is analysed in time linear in its
// size (the per-ACK and per-retransmission work is bounded), under a
// generous bound: 30,000 of each kind took over 10 s when every ACK
// scanned every pending retransmission and every retransmission re-marked
// every queued segment; well under a second now, even niced on a busy
// machine. The fuzz target's inputs are held to the same rate.
func TestWorstCaseTime(t *testing.T) {
	const n = 30_000
	data := worstCase(t, n)
	start := time.Now()
	rep, err := Read(bytes.NewReader(data))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	if c := rep.Connections[0]; c.Retransmissions < n {
		t.Errorf("%d retransmissions, want at least %d", c.Retransmissions, n)
	}
	if limit := 3 * time.Second; took > limit {
		t.Errorf("%d packets (%d bytes) took %v, want under %v: quadratic work per packet", 4*n+3, len(data), took, limit)
	}
	t.Logf("%d packets in %v", 4*n+3, took)
}
