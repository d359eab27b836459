package analyze

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
	"github.com/hbm-dev/hbm/internal/svgplot"
)

// The HTML page of --out: self-contained like eval's report (inline SVG and
// CSS, no scripts, fonts or links) and well-formed XML, so tests can parse it.

var page = template.Must(template.New("analysis").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>hbm analyze: {{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 100em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; white-space: nowrap; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
{{.CSS}}
</style>
</head>
<body>
<h1>hbm analyze: {{.Title}}</h1>
<p>Per connection, its data sender's round trips: a round starts when a segment is sent while none is open and ends
when the ACK covering it arrives. Rate is the bytes acknowledged from a round's start to the next round's, over that
time; the window is what was in flight when the round ended; marks are the CE-marked segments sent and the ECE echoes received in it.
{{if .Bucketed}}Connections with more rounds than a chart has points show averages over consecutive rounds.{{end}}
{{if .Uncharted}}Of the {{len .Conns}} connections, the {{.Charted}} that carried the most data are charted; every one is in the table and in analysis.json.{{end}}</p>
{{with .Requests}}<h2 id="requests">Requests</h2>
<p>{{.}}</p>
{{end}}{{with .RequestsChart}}<div class="charts">{{.}}</div>
{{end}}
<table>
<tr><th>connection</th><th>bytes</th><th>duration</th><th>rounds</th><th>retransmissions (spurious)</th><th>RTT min / p50 / p99</th><th>CE</th><th>ECE</th></tr>
{{range .Conns}}<tr><td><a href="#c{{.Index}}">{{.C.Src}} → {{.C.Dst}}</a></td><td class="num">{{.C.Bytes}}</td><td class="num">{{.Duration}}</td><td class="num">{{len .C.Rounds}}</td><td class="num">{{.C.Retransmissions}} ({{.C.SpuriousRetransmissions}})</td><td class="num">{{.RTT}}</td><td class="num">{{.C.CE}}</td><td class="num">{{.C.ECE}}</td></tr>
{{end}}</table>
{{range .Conns}}<h2 id="c{{.Index}}">{{.C.Src}} → {{.C.Dst}}</h2>
{{with .Exchanges}}<p>{{.}}</p>
{{end}}{{if .Charts}}<div class="charts">
{{range .Charts}}{{.}}
{{end}}</div>
{{else if .Uncharted}}<p>Not charted: the page charts the {{$.Charted}} connections that carried the most data.</p>
{{else}}<p>No round trips: this connection carried no data.</p>
{{end}}{{end}}
</body>
</html>
`))

type htmlConn struct {
	Index    int
	C        *schema.Connection
	Duration string
	RTT      string
	// Exchanges is the request split in one sentence; "" if none.
	Exchanges string
	Charts    []template.HTML
	Uncharted bool // past maxChartedConns: not charted
}

// maxPoints is the most points a chart draws; more rounds are averaged.
const maxPoints = 600

// maxChartedConns is the most connections the page charts, those that
// carried the most data: a web server's capture holds thousands (64 clients
// on a new connection per request, 7,700 in 10 s, drew an 84 MB page), and
// the rest are in its table and in analysis.json.
const maxChartedConns = 100

// WriteHTML writes the report as one self-contained HTML page; title names
// the capture.
func WriteHTML(w io.Writer, rep *schema.Report, title string) error {
	data := struct {
		Title     string
		CSS       template.CSS
		Bucketed  bool
		Conns     []htmlConn
		Charted   int  // connections charted
		Uncharted bool // some are not
		// Requests: every connection's exchanges pooled, in a sentence,
		// and their times by when they began; "" and nil if none.
		Requests      string
		RequestsChart template.HTML
	}{Title: title, CSS: template.CSS(svgplot.CSS)}
	if r := rep.Requests; r != nil {
		data.Requests = RequestsSentence(r, fmtUS)
		data.RequestsChart = TimelineChart(r)
	}
	charted := chartedConns(rep.Connections)
	data.Charted, data.Uncharted = maxChartedConns, len(rep.Connections) > maxChartedConns
	for i := range rep.Connections {
		c := &rep.Connections[i]
		hc := htmlConn{
			Index:     i,
			C:         c,
			Duration:  fmtUS(c.DurationUS),
			RTT:       fmt.Sprintf("%s / %s / %s", fmtUS(c.RTT.Min), fmtUS(c.RTT.P50), fmtUS(c.RTT.P99)),
			Uncharted: !charted[i],
		}
		if charted[i] {
			hc.Charts = Charts(c)
			data.Bucketed = data.Bucketed || len(c.Rounds) > maxPoints
		}
		if e := c.Exchanges; e != nil {
			hc.Exchanges = fmt.Sprintf("%d requests from %s. Response p50 %s, p90 %s, p99 %s; network (sent to ACKed) p50 %s, p99 %s; peer (ACKed to response) p50 %s, p99 %s.",
				e.Count, e.Requester, fmtUS(e.Response.P50), fmtUS(e.Response.P90), fmtUS(e.Response.P99), fmtUS(e.Network.P50), fmtUS(e.Network.P99), fmtUS(e.Peer.P50), fmtUS(e.Peer.P99))
		}
		data.Conns = append(data.Conns, hc)
	}
	return page.Execute(w, data)
}

// chartedConns marks the connections the page charts: every one, or past
// maxChartedConns those that carried the most data (the first of equals).
func chartedConns(conns []schema.Connection) []bool {
	charted := make([]bool, len(conns))
	order := make([]int, len(conns))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(conns[b].Bytes, conns[a].Bytes) })
	for _, i := range order[:min(len(order), maxChartedConns)] {
		charted[i] = true
	}
	return charted
}

// TimelineChart charts the requests' times by when they began (the mean
// and the longest per bin of the timeline); "" for a timeline of one bin.
func TimelineChart(r *schema.Requests) template.HTML {
	if len(r.Timeline) < 2 {
		return ""
	}
	mean := make([]float64, len(r.Timeline))
	most := make([]float64, len(r.Timeline))
	for i, b := range r.Timeline {
		mean[i], most[i] = math.NaN(), math.NaN()
		if b.Count > 0 {
			mean[i], most[i] = b.Mean/1e3, b.Max/1e3
		}
	}
	return lineChart{
		Title:  fmt.Sprintf("request to the response's last byte (ms), by when it began (%s bins)", fmtUS(r.TimelineBinUS)),
		Series: []line{{"mean", mean}, {"longest", most}},
		Format: num("ms"),
		XLabel: "bin",
	}.svg()
}

// Charts returns a connection's per-round charts (rate, window, marks) as
// inline SVG elements; none for a connection without rounds.
func Charts(c *schema.Connection) []template.HTML {
	rs := c.Rounds
	if len(rs) == 0 {
		return nil
	}
	rate := make([]float64, len(rs))
	win := make([]float64, len(rs))
	ce := make([]float64, len(rs))
	ece := make([]float64, len(rs))
	rtx := make([]float64, len(rs))
	for i, r := range rs {
		// Rounds and the gaps after them partition the connection's time,
		// and a round's acked bytes include those of its gap: over that span
		// they are the delivery rate, and the chart's area is the bytes.
		span := r.RTT
		if i+1 < len(rs) {
			span = rs[i+1].TUS - r.TUS
		}
		rate[i] = math.NaN()
		if span > 0 {
			rate[i] = float64(r.AckedBytes) * 8 / span // bit/µs = Mbit/s
		}
		win[i] = float64(r.InflightBytes) / 1e3
		ce[i], ece[i], rtx[i] = float64(r.CE), float64(r.ECE), float64(r.Retransmissions)
	}
	name := c.Src + " → " + c.Dst
	unit, hi := "Mbit/s", 0.0
	for _, v := range rate {
		if !math.IsNaN(v) {
			hi = max(hi, v)
		}
	}
	if hi >= 2000 {
		unit = "Gbit/s"
		for i := range rate {
			rate[i] /= 1000
		}
	}
	return []template.HTML{
		lineChart{Title: "rate per round (" + unit + "): " + name, Series: []line{{"rate", rate}}, Format: num(unit)}.svg(),
		lineChart{Title: "window: in flight at round end (KB)", Series: []line{{"in flight", win}}, Format: num("KB")}.svg(),
		lineChart{Title: "marks and retransmissions per round", Series: []line{{"CE sent", ce}, {"ECE received", ece}, {"retransmissions", rtx}}, Format: num("")}.svg(),
	}
}

func num(unit string) func(float64) string {
	return func(v float64) string {
		s := fmt.Sprintf("%.3g", v)
		if math.Abs(v) >= 1000 {
			s = fmt.Sprintf("%.0f", v)
		}
		if unit != "" {
			s += " " + unit
		}
		return s
	}
}

func fmtUS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3g s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3g ms", v/1e3)
	default:
		return fmt.Sprintf("%.3g µs", v)
	}
}

type line struct {
	Name   string
	Values []float64 // one per round; NaN: none
}

// lineChart draws series over round numbers (or XLabel's), in eval's
// report style.
type lineChart struct {
	Title  string
	Series []line
	Format func(float64) string
	XLabel string // what a point is ("": a round)
}

func (c lineChart) xLabel() string {
	if c.XLabel == "" {
		return "round"
	}
	return c.XLabel
}

const (
	padLeft  = 48
	padRight = 16
	padTop   = 30
	plotH    = 160
	plotW    = 520
	charW    = 7
)

// bucket averages values into at most maxPoints points (NaNs skipped); it
// returns the points and the first round number of each.
func bucket(v []float64) ([]float64, []int) {
	per := (len(v) + maxPoints - 1) / maxPoints
	var pts []float64
	var at []int
	for i := 0; i < len(v); i += per {
		sum, n := 0.0, 0
		for _, x := range v[i:min(i+per, len(v))] {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				sum += x
				n++
			}
		}
		p := math.NaN()
		if n > 0 {
			p = sum / float64(n)
		}
		pts, at = append(pts, p), append(at, i+1)
	}
	return pts, at
}

func (c lineChart) svg() template.HTML {
	esc := svgplot.Esc
	hi, rounds := 0.0, 0
	pts := make([][]float64, len(c.Series))
	var at []int
	for i, s := range c.Series {
		pts[i], at = bucket(s.Values)
		rounds = max(rounds, len(s.Values))
		for _, v := range pts[i] {
			if !math.IsNaN(v) {
				hi = max(hi, v)
			}
		}
	}
	ticks := svgplot.LinearTicks(hi)
	top := ticks[len(ticks)-1]
	labels := make([]string, len(ticks))
	left := padLeft
	for i, t := range ticks {
		labels[i] = svgplot.TickLabel(c.Format(t))
		left = max(left, 10+charW*len([]rune(labels[i])))
	}
	right := left + plotW
	bottom := float64(padTop + plotH)
	y := func(v float64) float64 { return bottom - max(v, 0)/top*plotH }
	x := func(r int) float64 { // round r (1-based) over the plot's width
		if rounds <= 1 {
			return float64(left) + plotW/2
		}
		return float64(left) + float64(r-1)/float64(rounds-1)*plotW
	}
	legendTop := padTop + plotH + 34
	height := legendTop + 10

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, right+padRight, height, right+padRight, height, esc(c.Title))
	p(`<title>%s</title>`, esc(c.Title))
	p(`<text class="title" x="%d" y="18">%s</text>`, left, esc(c.Title))
	for i, t := range ticks {
		p(`<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, left, right, y(t), y(t))
		p(`<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, left-4, y(t)+4, esc(labels[i]))
	}
	for _, r := range svgplot.LinearTicks(float64(max(rounds, 1))) {
		if r < 1 || int(r) > rounds {
			continue
		}
		p(`<text class="label" x="%.1f" y="%.0f" text-anchor="middle">%d</text>`, x(int(r)), bottom+14, int(r))
	}
	p(`<text class="label" x="%d" y="%.0f" text-anchor="end">%s</text>`, right, bottom+26, esc(c.xLabel()))
	for si, s := range c.Series {
		color := svgplot.Palette[si%len(svgplot.Palette)]
		var path strings.Builder
		pen := false
		for i, v := range pts[si] {
			if math.IsNaN(v) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(at[i]), y(v))
			pen = true
		}
		if path.Len() > 0 {
			p(`<path d="%s" fill="none" stroke="%s" stroke-width="1.5"><title>%s</title></path>`, strings.TrimSpace(path.String()), color, esc(s.Name))
		}
		if len(pts[si]) <= 60 { // few rounds: a dot per round, with its value
			for i, v := range pts[si] {
				if !math.IsNaN(v) {
					p(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s %d · %s: %s</title></circle>`, x(at[i]), y(v), color, esc(c.xLabel()), at[i], esc(s.Name), esc(c.Format(v)))
				}
			}
		}
		lx := left + si*150
		p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`, lx, legendTop-10, color)
		p(`<text class="legend" x="%d" y="%d">%s</text>`, lx+16, legendTop, esc(s.Name))
	}
	p(`<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, left, left, padTop, padTop+plotH)
	p(`<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, left, right, padTop+plotH, padTop+plotH)
	p(`</svg>`)
	return template.HTML(b.String()) // every string above went through esc
}
