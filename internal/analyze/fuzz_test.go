package analyze

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

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
		rep, err := Read(bytes.NewReader(data))
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
