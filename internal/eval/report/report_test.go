package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

func fixture(t *testing.T) *result.Results {
	t.Helper()
	b, err := os.ReadFile("testdata/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var r result.Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	DiagnoseAll(&r)
	return &r
}

func findRun(t *testing.T, r *result.Results, scenario, cc, limiter string) *result.Run {
	t.Helper()
	for i := range r.Runs {
		if run := &r.Runs[i]; run.Scenario == scenario && run.CC == cc && run.Limiter == limiter {
			return run
		}
	}
	t.Fatalf("no run %s %s %s", scenario, cc, limiter)
	return nil
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fmtRate(0), "0 bit/s"},
		{fmtRate(950), "950 bit/s"},
		{fmtRate(12345), "12.3 kbit/s"},
		{fmtRate(960e6), "960 Mbit/s"},
		{fmtRate(999.96e6), "1.00 Gbit/s"},
		{fmtRate(9.412e9), "9.41 Gbit/s"},
		{fmtRate(2.5e13), "25.0 Tbit/s"},
		{fmtRate(math.NaN()), dash},
		{fmtDur(0.5), "500 ns"},
		{fmtDur(7.25), "7.25 µs"},
		{fmtDur(850), "850 µs"},
		{fmtDur(999.9), "1.00 ms"},
		{fmtDur(41300), "41.3 ms"},
		{fmtDur(1.2e6), "1.20 s"},
		{fmtDur(3.6e9), "3600 s"},
		{fmtSI(41700), "41.7k"},
		{fmtSI(0), "0"},
		{fmtCount(0), "0"},
		{fmtCount(999), "999"},
		{fmtCount(41700), "41,700"},
		{fmtCount(1234567), "1,234,567"},
		{fmtPct(0.915), "91.5%"},
		{fmtPct(1.0), "100%"},
		{fmtPct(math.NaN()), dash},
		{fmtFloat(0.00184), "0.00184"},
		{fmtFloat(118.4), "118"},
		{tickLabel("1.00 ms"), "1 ms"},
		{tickLabel("2.50 Gbit/s"), "2.5 Gbit/s"},
		{tickLabel("100 µs"), "100 µs"},
		{tickLabel("41.7k"), "41.7k"},
		{tickLabel("20.0k"), "20k"},
		{tickLabel("0"), "0"},
		{tickLabel("0 bit/s"), "0"},
		{tickLabel("0.00 bit/s"), "0"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{10, 10e6, []float64{10, 100, 1e3, 1e4, 1e5, 1e6, 1e7}}, // 10 µs .. 10 s
		{41, 41300, []float64{10, 100, 1e3, 1e4, 1e5}},
		{100, 100, []float64{100, 1000}}, // at least a decade
		{0.5, 3, []float64{0.1, 1, 10}},
		{0, 0, []float64{1, 10}},            // nothing positive
		{math.Inf(1), 0, []float64{1, 10}},  // no values at all
		{1000, 999, []float64{1000, 10000}}, // hi below lo
		{999, 1000, []float64{100, 1000}},
		{999.9999999, 1000, []float64{1000, 10000}},           // float noise
		{1000.0000001, 10000.0000001, []float64{1000, 10000}}, // float noise
	} {
		got := logTicks(c.lo, c.hi)
		if len(got) != len(c.want) {
			t.Errorf("logTicks(%g, %g) = %v, want %v", c.lo, c.hi, got, c.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9*c.want[i] {
				t.Errorf("logTicks(%g, %g) = %v, want %v", c.lo, c.hi, got, c.want)
				break
			}
		}
	}
}

func TestLinearTicks(t *testing.T) {
	for _, c := range []struct {
		hi   float64
		want []float64
	}{
		{0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{100, []float64{0, 20, 40, 60, 80, 100}},
		{41700, []float64{0, 10000, 20000, 30000, 40000, 50000}},
		{7.91e9, []float64{0, 2e9, 4e9, 6e9, 8e9}},
	} {
		got := linearTicks(c.hi)
		if len(got) != len(c.want) {
			t.Errorf("linearTicks(%g) = %v, want %v", c.hi, got, c.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9*max(1, c.want[i]) {
				t.Errorf("linearTicks(%g) = %v, want %v", c.hi, got, c.want)
				break
			}
		}
	}
}

// rpcRun is a completed run with one 10 KB RPC class of the given latency.
func rpcRun(p50, p99, p999, maxUs float64, retrans uint64) *result.Run {
	return &result.Run{
		Scenario: "s", CC: "cubic", Limiter: "hbm", DurationSec: 10,
		Groups: []result.Group{{Name: "g", LimitBps: 1e9, GoodputBps: 0.9e9}},
		Classes: []result.Class{{Name: "rpc-10KB", Group: "g", Kind: "rpc", SizeBytes: 10240, Flows: 1, RPCs: 1000,
			Latency:     &result.Latency{Count: 1000, P50: p50, P90: p50, P99: p99, P999: p999, Max: maxUs},
			Retransmits: retrans, RTTUs: 100}},
	}
}

func hasDiag(run *result.Run, parts ...string) bool {
	for _, d := range run.Diagnoses {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(d, p)
		}
		if ok {
			return true
		}
	}
	return false
}

func TestDiagnose(t *testing.T) {
	// A 40 ms P99 over a sub-millisecond median: the delayed-ACK timer.
	run := rpcRun(300, 41300, 42000, 43000, 0)
	Diagnose(run)
	if !hasDiag(run, "rpc-10KB", "P99 41.3 ms", "40 ms delayed-ACK", "likely a delayed ACK") {
		t.Errorf("40 ms tail not flagged: %q", run.Diagnoses)
	}
	if len(run.Diagnoses) != 1 {
		t.Errorf("want one diagnosis (P99, P99.9 and max together), got %q", run.Diagnoses)
	}
	// Idempotent.
	Diagnose(run)
	if len(run.Diagnoses) != 1 {
		t.Errorf("second Diagnose duplicated: %q", run.Diagnoses)
	}

	// A 1.2 ms tail is just a tail.
	run = rpcRun(300, 1200, 1500, 1900, 0)
	Diagnose(run)
	if len(run.Diagnoses) != 0 {
		t.Errorf("1.2 ms tail flagged: %q", run.Diagnoses)
	}

	// 210 ms: the minimum RTO, likely with retransmits, possibly without.
	run = rpcRun(300, 900, 1500, 210000, 4)
	Diagnose(run)
	if !hasDiag(run, "max 210 ms", "200 ms minimum RTO", "likely a retransmission timeout") {
		t.Errorf("210 ms tail not flagged as RTO: %q", run.Diagnoses)
	}
	run = rpcRun(300, 900, 1500, 210000, 0)
	Diagnose(run)
	if !hasDiag(run, "200 ms minimum RTO", "possibly") {
		t.Errorf("210 ms tail without retransmits: %q", run.Diagnoses)
	}

	// Backed-off RTOs.
	run = rpcRun(300, 900, 410000, 820000, 7)
	Diagnose(run)
	if !hasDiag(run, "P99.9 410 ms", "400 ms RTO") || !hasDiag(run, "max 820 ms", "800 ms RTO", "3 consecutive") {
		t.Errorf("backed-off RTOs: %q", run.Diagnoses)
	}

	// A slow median is not a timer: 1 MB at 200 Mbit/s takes ~42 ms.
	run = rpcRun(39000, 42000, 45000, 47000, 0)
	Diagnose(run)
	if len(run.Diagnoses) != 0 {
		t.Errorf("slow median flagged: %q", run.Diagnoses)
	}

	// Just outside the bands.
	run = rpcRun(300, 37000, 300+46000+100, 300+230000+100, 5)
	Diagnose(run)
	if len(run.Diagnoses) != 0 {
		t.Errorf("tails outside the bands flagged: %q", run.Diagnoses)
	}

	// The tail-loss probe (2*SRTT + 2 ms = 2.2 ms here) only with retransmits.
	run = rpcRun(100, 2300, 2400, 2500, 0)
	Diagnose(run)
	if len(run.Diagnoses) != 0 {
		t.Errorf("probe blamed without retransmits: %q", run.Diagnoses)
	}
	run = rpcRun(100, 2300, 2400, 2500, 2)
	Diagnose(run)
	if !hasDiag(run, "tail-loss probe") {
		t.Errorf("probe not flagged: %q", run.Diagnoses)
	}
}

func TestDiagnoseLimitAndZero(t *testing.T) {
	run := rpcRun(300, 900, 1000, 1100, 0)
	run.Groups[0].GoodputBps = 1.08e9
	run.Classes = append(run.Classes, result.Class{Name: "rpc-1MB", Group: "g", Kind: "rpc", SizeBytes: 1 << 20})
	Diagnose(run)
	if !hasDiag(run, "g goodput 1.08 Gbit/s is 108% of its 1.00 Gbit/s limit", "hbm limit does not hold") {
		t.Errorf("goodput above the limit not flagged: %q", run.Diagnoses)
	}
	if !hasDiag(run, "rpc-1MB completed no RPCs in 10.0 s") {
		t.Errorf("zero RPCs not flagged: %q", run.Diagnoses)
	}
	n := len(run.Diagnoses)
	Diagnose(run)
	if len(run.Diagnoses) != n {
		t.Errorf("not idempotent: %q", run.Diagnoses)
	}

	// Within 5%, or without a limiter that should hold it: no diagnosis.
	for _, c := range []struct {
		limiter string
		goodput float64
	}{{"hbm", 1.04e9}, {"none", 3e9}} {
		run := rpcRun(300, 900, 1000, 1100, 0)
		run.Limiter, run.Groups[0].GoodputBps = c.limiter, c.goodput
		Diagnose(run)
		if len(run.Diagnoses) != 0 {
			t.Errorf("%s at %g flagged: %q", c.limiter, c.goodput, run.Diagnoses)
		}
	}

	// Skipped runs and runs without latency are left alone.
	skipped := &result.Run{Skipped: "dctcp not installable", Classes: []result.Class{{Name: "rpc-10KB", Kind: "rpc"}}}
	Diagnose(skipped)
	noLat := rpcRun(0, 0, 0, 0, 0)
	noLat.Classes[0].Latency = nil
	Diagnose(noLat)
	if len(skipped.Diagnoses)+len(noLat.Diagnoses) != 0 {
		t.Errorf("skipped %q, no latency %q", skipped.Diagnoses, noLat.Diagnoses)
	}
}

func TestDiagnoseFixture(t *testing.T) {
	r := fixture(t)
	hbm := findRun(t, r, "egress-200m", "cubic-ecn", "hbm")
	if !hasDiag(hbm, "rpc-10KB P99.9 41.3 ms sits near the 40 ms delayed-ACK") || !hasDiag(hbm, "rpc-10KB max 212 ms", "RTO") {
		t.Errorf("hbm: %q", hbm.Diagnoses)
	}
	// htb's 10 KB median of 12 ms is queueing, and incast hbm's 8 MB RPCs
	// take ~200 ms by size: neither is a timer.
	for _, run := range []*result.Run{findRun(t, r, "egress-200m", "cubic-ecn", "htb"), findRun(t, r, "incast", "cubic-ecn", "hbm")} {
		if len(run.Diagnoses) != 0 {
			t.Errorf("%s: %q", runLabel(run), run.Diagnoses)
		}
	}
}

func render(t *testing.T, f func(io.Writer, *result.Results) error, r *result.Results) string {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMarkdown(t *testing.T) {
	md := render(t, WriteMarkdown, fixture(t))
	for _, want := range []string{
		"| kernel | 6.18.0-hbm |",
		"| CPUs | 2 |",
		"| elapsed | 412 s |",
		"| net.ipv4.tcp_ecn | 1 |",
		"## egress-200m",
		"## incast",
		"| cc | limiter | goodput | of limit | rpc-10KB | rpc-1MB | stream |",
		"| cubic-ecn | hbm | 189 Mbit/s | 94.7% | 18.4 Mbit/s | 120 Mbit/s | 50.5 Mbit/s |",
		"| cubic-ecn | none | 7.91 Gbit/s | – |",
		"| cc | limiter | rpc-10KB RPCs | rpc-10KB P50 | rpc-10KB P99 | rpc-10KB P99.9 | rpc-1MB RPCs |",
		"| cubic-ecn | hbm | 4,491 | 850 µs | 3.90 ms | 41.3 ms | 287 | 160 ms |",
		"| cubic-ecn | htb | 757 | 12.0 ms | 26.0 ms | 31.0 ms |",
		"rpc-8MB P99.9",
		// retrans, marks, cwr, HBM drops, qdisc drops, busy, softirq, BPF
		"| cubic-ecn | hbm | 14 | 15,234 | 0 | 12 | 0 | 0.62 | 0.21 | 118 | 0.00184 | 0.0095 | 10gbit: 0.095, 100gbit: 0.95 |",
		"| cubic | none | 41,700 | 0 | 0 | 0 | 8,000 | 1.41 | 0.73 | – | – | – | – |",
		"- dctcp / hbm: skipped: dctcp not installable: BPF struct_ops unavailable",
		"- bbr / hbm: failed: receiver: rpc server exited",
		"- cubic-ecn / hbm: rpc-10KB P99.9 41.3 ms sits near the 40 ms delayed-ACK timer",
		"|---|---|---:|---:|",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestMarkdownEscapes(t *testing.T) {
	r := fixture(t)
	r.Runs[0].Scenario = "a|b\n<script>"
	md := render(t, WriteMarkdown, r)
	if strings.Contains(md, "<script>") || !strings.Contains(md, `## a\|b &lt;script&gt;`) {
		t.Errorf("scenario name not escaped:\n%s", md)
	}
}

// wellFormed parses doc as XML, strictly, and returns its <svg> elements.
func wellFormed(t *testing.T, doc string) int {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	svgs := 0
	var stack []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			stack = append(stack, e.Name.Local)
			if e.Name.Local == "svg" {
				svgs++
			}
			for _, a := range e.Attr {
				if a.Name.Local == "href" || a.Name.Local == "src" {
					t.Errorf("external reference %s=%q in <%s>", a.Name.Local, a.Value, e.Name.Local)
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Errorf("unclosed elements %v", stack)
	}
	return svgs
}

func TestHTML(t *testing.T) {
	r := fixture(t)
	page := render(t, WriteHTML, r)
	// egress-200m: goodput of the limited runs, their goodput / limit,
	// goodput of the unlimited ones, P99, retransmits, drops; incast the
	// same; the scenario with a skipped run still has completed ones.
	if n := wellFormed(t, page); n != 12 {
		t.Errorf("%d charts, want 12", n)
	}
	// The unlimited runs (tens of Gbit/s) are not on the limited runs'
	// goodput chart, which would flatten their bars.
	i := strings.Index(page, ">Goodput per class, limited runs<")
	j := strings.Index(page[max(i, 0):], "</svg>")
	if i < 0 || j < 0 {
		t.Fatal("no goodput chart of the limited runs")
	}
	if lim := page[i : i+j]; strings.Contains(lim, " none · ") || !strings.Contains(lim, " hbm · ") {
		t.Errorf("limited goodput chart: unlimited runs on it, or hbm's missing")
	}
	for _, bad := range []string{"http://", "https://", "<script", "<link", "<img", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("report.html contains %q", bad)
		}
	}
	for _, want := range []string{
		"<h2>egress-200m</h2>",
		"Goodput per class, limited runs", "Goodput per class, no limiter", "Goodput / limit per group", ">limit<",
		"RPC P99 latency (log scale)", "Retransmissions", "Drops",
		">40 ms delayed ACK<", ">200 ms min RTO<", ">limit 200 Mbit/s<",
		"<title>cubic-ecn hbm · rpc-10KB: 3.90 ms</title>",
		">10 ms<", ">100 ms<", ">1 s<", // log ticks
		`<td class="num">189 Mbit/s</td>`,
		"dctcp / hbm: skipped: dctcp not installable",
		"rpc-10KB P99.9 41.3 ms sits near the 40 ms delayed-ACK timer",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}

func TestHTMLEscapes(t *testing.T) {
	r := fixture(t)
	for i := range r.Runs {
		if r.Runs[i].Scenario == "incast" {
			r.Runs[i].Scenario = `<script>alert("x")</script>`
		}
	}
	r.Runs[0].Classes[0].Name = `<b onload="x">`
	r.Meta.Hostname = "</td></table><script>"
	page := render(t, WriteHTML, r)
	if strings.Contains(page, "<script") || strings.Contains(page, "<b ") {
		t.Error("hostile names reached the page unescaped")
	}
	if !strings.Contains(page, "<h2>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</h2>") {
		t.Error("scenario name not escaped in its heading")
	}
	wellFormed(t, page)
}

func TestSVGChart(t *testing.T) {
	c := barChart{Title: `a<b & "c"`, Groups: []string{"cubic\nhbm", "cubic\nnone"}, Log: true, Format: fmtDur,
		Series: []series{{"rpc-10KB", []float64{850, 41300}}, {"rpc-1MB", []float64{math.NaN(), 0}}},
		Refs:   []ref{{delackMinUs, "40 ms"}}}
	svg := string(c.svg())
	if n := wellFormed(t, svg); n != 1 {
		t.Fatalf("%d svg elements", n)
	}
	// Two bars (NaN and 0 are not drawn on a log axis), two legend swatches.
	if n := strings.Count(svg, "<rect"); n != 4 {
		t.Errorf("%d rects, want 4", n)
	}
	// Decades from 100 µs to 100 ms with their labels.
	for _, tick := range []string{">100 µs<", ">1 ms<", ">10 ms<", ">100 ms<"} {
		if !strings.Contains(svg, tick) {
			t.Errorf("no tick %s", tick)
		}
	}
	if strings.Contains(svg, ">10 µs<") || strings.Contains(svg, ">1 s<") {
		t.Error("axis wider than the data")
	}
	// The 41.3 ms bar is taller than the 850 µs one, on a log scale: the
	// heights are in the ratio of the logs' distances from the axis floor.
	re := regexp.MustCompile(`<rect x="\d+" y="[\d.]+" width="\d+" height="([\d.]+)"`)
	var h []float64
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		var v float64
		if err := json.Unmarshal([]byte(m[1]), &v); err != nil {
			t.Fatal(err)
		}
		h = append(h, v)
	}
	want := []float64{plotH * math.Log10(8.5) / 3, plotH * math.Log10(413) / 3}
	if len(h) < 2 || math.Abs(h[0]-want[0]) > 0.1 || math.Abs(h[1]-want[1]) > 0.1 {
		t.Errorf("bar heights %v, want %v", h, want)
	}
	if !strings.Contains(svg, "a&lt;b &amp; &#34;c&#34;") {
		t.Error("title not escaped")
	}
}

func TestSummary(t *testing.T) {
	s := render(t, WriteSummary, fixture(t))
	lines := strings.Split(strings.TrimSpace(s), "\n")
	// Header, 7 runs, 2 reasons.
	if len(lines) != 10 {
		t.Fatalf("%d lines:\n%s", len(lines), s)
	}
	fields := strings.Fields(lines[0])
	if !slices.Equal(fields, []string{"SCENARIO", "CC", "LIMITER", "GOODPUT", "OF", "LIMIT", "RPC-10KB", "P50", "RPC-10KB", "P99", "RETRANS", "HBM", "DROPS", "QDISC", "DROPS", "DIAGNOSES"}) {
		t.Errorf("header %q", fields)
	}
	for _, want := range [][]string{
		{"egress-200m", "cubic-ecn", "hbm", "189", "Mbit/s", "94.7%", "850", "µs", "3.90", "ms", "14", "12", "0", "2"},
		{"incast", "cubic", "none", "1.93", "Gbit/s", "–", "900", "µs", "4.10", "ms", "41,700", "0", "8,000", "0"},
		{"incast", "dctcp", "hbm", "skipped", "–", "–", "–", "–", "–", "–", "–"},
	} {
		found := false
		for _, l := range lines {
			found = found || slices.Equal(strings.Fields(l), want)
		}
		if !found {
			t.Errorf("no line %q in\n%s", want, s)
		}
	}
	if !strings.Contains(s, "incast bbr / hbm: failed: receiver: rpc server exited") {
		t.Errorf("failure reason missing:\n%s", s)
	}
	// Columns line up: every line's "hbm"/"htb"/"none" limiter starts at the same offset.
	col := strings.Index(lines[0], "LIMITER")
	for _, l := range lines[1:8] {
		if !regexp.MustCompile(`^(hbm|htb|none)`).MatchString(l[col:]) {
			t.Errorf("misaligned: %q", l)
		}
	}
}

func TestEmptyAndSparse(t *testing.T) {
	empty := &result.Results{}
	for name, f := range map[string]func(io.Writer, *result.Results) error{"md": WriteMarkdown, "html": WriteHTML, "summary": WriteSummary} {
		out := render(t, f, empty)
		if name == "html" {
			wellFormed(t, out)
		}
		if name != "summary" && !strings.Contains(out, "No runs.") {
			t.Errorf("%s: no 'No runs.'", name)
		}
	}
	// A scenario whose only run was skipped, and a run with nothing in it.
	sparse := &result.Results{Runs: []result.Run{
		{Scenario: "only-skipped", CC: "dctcp", Limiter: "hbm", Skipped: "no dctcp"},
		{Scenario: "bare", CC: "cubic", Limiter: "none"},
		{Scenario: "bare", CC: "cubic", Limiter: "hbm", Groups: []result.Group{{Name: "g", LimitBps: 0, GoodputBps: 0}},
			Classes: []result.Class{{Name: "rpc-10KB", Kind: "rpc", Latency: &result.Latency{}}}},
	}}
	DiagnoseAll(sparse)
	page := render(t, WriteHTML, sparse)
	wellFormed(t, page)
	md := render(t, WriteMarkdown, sparse)
	if !strings.Contains(md, "## only-skipped\n\nNo completed runs.") || !strings.Contains(md, "rpc-10KB completed no RPCs") {
		t.Errorf("sparse report:\n%s", md)
	}
	if strings.Contains(md+page, "NaN") || strings.Contains(md+page, "Inf") {
		t.Errorf("NaN or Inf rendered:\n%s", md)
	}
	render(t, WriteSummary, sparse)
}

// TestWriteFiles writes the fixture's reports where a reader can open them:
// $HBM_REPORT_OUT if set, else a temporary directory.
func TestWriteFiles(t *testing.T) {
	dir := os.Getenv("HBM_REPORT_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	r := fixture(t)
	for name, f := range map[string]func(io.Writer, *result.Results) error{
		"report.md": WriteMarkdown, "report.html": WriteHTML, "summary.txt": WriteSummary,
	} {
		path := filepath.Join(dir, name)
		fh, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f(fh, r); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, empty", path, err)
		}
	}
	t.Logf("reports in %s", dir)
}

// repRun is one repetition of a many-flows run: 16 streams and a 10 KB RPC
// loop in group work, limited to 200 Mbit/s, and a UDP class.
func repRun(limiter string, goodput, share, p50, p99 float64, udpErrs uint64) result.Run {
	r := result.Run{
		Scenario: "many-flows-200m", Variant: "stream=16", CC: "cubic", Limiter: limiter, DurationSec: 2,
		Groups: []result.Group{{Name: "work", Dir: "egress", LimitBps: 200e6, GoodputBps: goodput, TxBps: share * 200e6, Share: share}},
		Classes: []result.Class{
			{Name: "stream", Group: "work", Kind: "stream", Flows: 16, GoodputBps: goodput - 10e6},
			{Name: "rpc-10KB", Group: "work", Kind: "rpc", SizeBytes: 10240, Flows: 1, GoodputBps: 2e6, RPCs: 1000,
				Latency: &result.Latency{Count: 1000, P50: p50, P90: p50, P99: p99, P999: p99, Max: p99}},
			{Name: "udp", Group: "work", Kind: "udp", SizeBytes: 1472, Flows: 1, GoodputBps: 8e6,
				OfferedBps: 2e9, SentBps: 1e7, SendErrors: udpErrs},
		},
	}
	if udpErrs > 0 {
		r.Classes[2].SendError = "operation not permitted"
	}
	return r
}

// TestRepetitions renders runs of three repetitions: every figure as its
// median with the min–max, in report.md, the summary and results.json.
func TestRepetitions(t *testing.T) {
	r := &result.Results{Version: result.Version, Runs: []result.Run{
		result.Aggregate([]result.Run{
			repRun("hbm", 500e6, 2.59, 2000, 9000, 100),
			repRun("hbm", 520e6, 2.70, 1500, 30000, 300),
			repRun("hbm", 480e6, 2.40, 4000, 12000, 200),
		}),
		result.Aggregate([]result.Run{
			repRun("htb", 190e6, 1.00, 20000, 40000, 0),
			repRun("htb", 188e6, 0.98, 21000, 45000, 0),
			{Scenario: "many-flows-200m", Variant: "stream=16", CC: "cubic", Limiter: "htb", Error: "client silent"},
		}),
		{Scenario: "many-flows-200m", Variant: "stream=64", CC: "cubic", Limiter: "htb", Skipped: "no reason"},
	}}
	DiagnoseAll(r)
	md := render(t, WriteMarkdown, r)
	for _, want := range []string{
		"| variant | cc | limiter | goodput | of limit | wire | wire share | stream | rpc-10KB | udp |",
		// goodput, of limit, wire, wire share: medians and min–max
		"| stream=16 | cubic | hbm | 500 Mbit/s (480–520 Mbit/s) | 250% (240%–260%) | 518 Mbit/s (480–540 Mbit/s) | 2.59 (2.40–2.70) |",
		// two completed of three: the median is their mean
		"| stream=16 | cubic | htb | 189 Mbit/s (188–190 Mbit/s) | 94.5% (94.0%–95.0%) | 198 Mbit/s (196–200 Mbit/s) | 0.99 (0.98–1.00) |",
		"| stream=16 | cubic | hbm | 1,000 | 2.00 ms (1.50–4.00 ms) | 12.0 ms (9.00–30.0 ms) |",
		"| stream=16 | cubic | htb | 1,000 | 20.5 ms (20.0–21.0 ms) | 42.5 ms (40.0–45.0 ms) |",
		"| variant | cc | limiter | udp offered | udp sent | udp received | udp received of limit | udp send errors | udp first error |",
		"| stream=16 | cubic | hbm | 2.00 Gbit/s (2.00–2.00 Gbit/s) | 10.0 Mbit/s (10.0–10.0 Mbit/s) | 8.00 Mbit/s (8.00–8.00 Mbit/s) | 0.04 (0.04–0.04) | 200 (100–300) | operation not permitted |",
		"| stream=16 | cubic | htb | 2.00 Gbit/s (2.00–2.00 Gbit/s) | 10.0 Mbit/s (10.0–10.0 Mbit/s) | 8.00 Mbit/s (8.00–8.00 Mbit/s) | 0.04 (0.04–0.04) | 0 (0–0) | – |",
		"- stream=16 cubic / hbm: work goodput 500 Mbit/s is 250% of its 200 Mbit/s limit: the hbm limit does not hold",
		"- stream=64 cubic / htb: skipped: no reason",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
	sum := render(t, WriteSummary, r)
	lines := strings.Split(strings.TrimSpace(sum), "\n")
	if h := strings.Join(strings.Fields(lines[0]), " "); h != "SCENARIO VARIANT CC LIMITER GOODPUT OF LIMIT WIRE SHARE RPC-10KB P50 RPC-10KB P99 UDP SEND ERRORS RETRANS HBM DROPS QDISC DROPS DIAGNOSES" {
		t.Errorf("summary header %q", h)
	}
	for _, want := range []string{
		"many-flows-200m stream=16 cubic hbm 500 Mbit/s (480–520 Mbit/s) 250% (240%–260%) 2.59 (2.40–2.70) 2.00 ms (1.50–4.00 ms) 12.0 ms (9.00–30.0 ms) 200 (100–300) 0 0 0 1",
		"many-flows-200m stream=16 cubic htb 189 Mbit/s (188–190 Mbit/s) 94.5% (94.0%–95.0%) 0.99 (0.98–1.00) 20.5 ms (20.0–21.0 ms) 42.5 ms (40.0–45.0 ms) 0 (0–0) 0 0 0 0",
		"many-flows-200m stream=64 cubic htb skipped – – – – – – – – –",
	} {
		found := false
		for _, l := range lines {
			found = found || strings.Join(strings.Fields(l), " ") == want
		}
		if !found {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	page := render(t, WriteHTML, r)
	wellFormed(t, page)
	if !strings.Contains(page, "2.59 (2.40–2.70)") {
		t.Error("report.html lacks the share's spread")
	}
	// results.json: the medians, the spread and the repetitions.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back result.Results
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	hbm := back.Runs[0]
	if hbm.Groups[0].Share != 2.59 || len(hbm.Repetitions) != 3 || hbm.Repetitions[2].Groups[0].Share != 2.40 {
		t.Errorf("results.json run %+v", hbm)
	}
	if s := hbm.Stat("groups/work/share"); s == nil || s.Min != 2.40 || s.Max != 2.70 || s.Median != 2.59 {
		t.Errorf("spread of the share %+v", s)
	}
	if s := hbm.Stat("classes/work/udp/send_errors"); s == nil || s.Median != 200 || s.Min != 100 || s.Max != 300 {
		t.Errorf("spread of the UDP send errors %+v", s)
	}
	if back.Version != 2 {
		t.Errorf("schema version %d", back.Version)
	}
}

// TestIPv6Sections: a scenario run over IPv4 and IPv6 (hbm eval --ipv6)
// gets a section and summary rows of each, the IPv6 one named so.
func TestIPv6Sections(t *testing.T) {
	v4 := repRun("hbm", 190e6, 0.98, 1000, 2000, 0)
	v6 := repRun("hbm", 189e6, 0.97, 1100, 2100, 0)
	v6.IPv6 = true
	r := &result.Results{Version: result.Version, Runs: []result.Run{v4, v6}}
	var md, sum strings.Builder
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteSummary(&sum, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(md.String(), "\n## many-flows-200m\n"); n != 1 {
		t.Errorf("report.md has %d IPv4 sections, want 1:\n%s", n, md.String())
	}
	if n := strings.Count(md.String(), "\n## many-flows-200m (IPv6)\n"); n != 1 {
		t.Errorf("report.md has %d IPv6 sections, want 1:\n%s", n, md.String())
	}
	if n := strings.Count(sum.String(), "many-flows-200m (IPv6)"); n != 1 {
		t.Errorf("summary names the IPv6 run %d times, want once:\n%s", n, sum.String())
	}
}
