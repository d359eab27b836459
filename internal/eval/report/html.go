package report

import (
	"fmt"
	"html/template"
	"io"
	"math"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// The page is also well-formed XML (void elements closed, no named
// entities) so that tests can parse it with encoding/xml, and it refers to
// nothing outside itself: no scripts, fonts, images or links.
var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>hbm eval report</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 100em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; white-space: nowrap; }
th { background: #f3f3f3; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
svg.chart { font-size: 11px; background: #fff; border: 1px solid #eee; }
svg .title { font-size: 13px; font-weight: bold; fill: #222; }
svg .tick, svg .label, svg .legend { fill: #333; }
svg .reflabel { fill: #a00; font-size: 10px; }
svg .grid { stroke: #ddd; } svg .minor { stroke: #f2f2f2; } svg .axis { stroke: #333; }
svg .ref { stroke: #a00; stroke-dasharray: 4 3; }
.diag li { color: #7a4b00; } .skip li { color: #666; }
</style>
</head>
<body>
<h1>hbm eval report</h1>
<p>Charts: one cluster of bars per run (congestion control over limiter); hover over a bar for its value.
Dashed lines mark limits and, on the latency chart, the 40 ms delayed-ACK and 200 ms minimum-RTO timers.</p>
<table>
{{range .Meta}}<tr><th>{{.K}}</th><td>{{.V}}</td></tr>
{{end}}</table>
{{if .Sysctls}}<details><summary>sysctls ({{len .Sysctls}})</summary>
<table>
{{range .Sysctls}}<tr><th>{{.K}}</th><td>{{.V}}</td></tr>
{{end}}</table>
</details>
{{end}}
{{if not .Scenarios}}<p>No runs.</p>
{{end}}
{{range .Scenarios}}<h2>{{.Name}}</h2>
{{if .Charts}}<div class="charts">
{{range .Charts}}{{.}}
{{end}}</div>
{{else}}<p>No completed runs.</p>
{{end}}
{{range .Tables}}{{$t := .}}<h3>{{.Title}}</h3>
<table>
<tr>{{range $i, $h := .Header}}<th{{if $t.IsNum $i}} class="num"{{end}}>{{$h}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range $i, $c := .}}<td{{if $t.IsNum $i}} class="num"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
{{range .RunCharts}}<h3>{{.Title}}</h3>
{{if .Note}}<p>{{.Note}}</p>
{{end}}<div class="charts">
{{range .Charts}}{{.}}
{{end}}</div>
{{end}}
{{if .NotDone}}<h3>Skipped and failed runs</h3>
<ul class="skip">
{{range .NotDone}}<li>{{.}}</li>
{{end}}</ul>
{{end}}
{{if .Diagnoses}}<h3>Diagnoses</h3>
<ul class="diag">
{{range .Diagnoses}}<li>{{.}}</li>
{{end}}</ul>
{{end}}
{{end}}
</body>
</html>
`))

type htmlScenario struct {
	Name      string
	Charts    []template.HTML
	Tables    []table
	RunCharts []runCharts
	NotDone   []string
	Diagnoses []string
}

type runCharts struct {
	Title, Note string
	Charts      []template.HTML
}

// PerRun gives a run's own charts and a line about them (hbm eval
// --capture: the per-round-trip charts of its capture); nil charts and ""
// draw nothing for the run.
type PerRun func(*result.Run) (charts []template.HTML, note string)

// WriteHTML writes report.html: the Markdown report's tables and, per
// scenario, charts like the seed slides' (goodput per class, RPC P99 on a
// log scale, retransmissions, drops), in one file that needs no network and
// no JavaScript.
func WriteHTML(w io.Writer, r *result.Results) error { return WriteHTMLPerRun(w, r, nil) }

// WriteHTMLPerRun is WriteHTML with each completed run's own charts (nil:
// none) under its scenario's.
func WriteHTMLPerRun(w io.Writer, r *result.Results, perRun PerRun) error {
	data := struct {
		Meta, Sysctls []kv
		Scenarios     []htmlScenario
	}{Meta: metaRows(&r.Meta), Sysctls: sysctlRows(&r.Meta)}
	for _, s := range scenarios(r) {
		hs := htmlScenario{
			Name: s.Name, Charts: s.charts(), Tables: s.tables(), NotDone: s.notDone(), Diagnoses: s.diagnoses(),
		}
		for _, run := range s.Done {
			if run.Timeline == nil {
				continue
			}
			note := "Dotted lines: the phases' starts. " + run.Timeline.Source + "."
			if len(run.Repetitions) > 1 {
				note = "The first completed repetition. " + note
			}
			hs.RunCharts = append(hs.RunCharts, runCharts{Title: "Rate over time: " + runLabel(run), Note: note,
				Charts: []template.HTML{TimelineSVG(run, false)}})
		}
		for _, run := range s.Done {
			if perRun == nil {
				break
			}
			if charts, note := perRun(run); len(charts) > 0 || note != "" {
				hs.RunCharts = append(hs.RunCharts, runCharts{Title: "Per round trip: " + runLabel(run), Note: note, Charts: charts})
			}
		}
		data.Scenarios = append(data.Scenarios, hs)
	}
	return page.Execute(w, data)
}

// runLabels are the x labels of runs: congestion control over limiter.
func runLabels(runs []*result.Run) []string {
	var labels []string
	for _, run := range runs {
		labels = append(labels, run.CC+"\n"+run.Limiter)
	}
	return labels
}

// goodputChart is the goodput of runs, all classes and each.
func (s *scenario) goodputChart(title string, runs []*result.Run) barChart {
	all := series{Name: "all"}
	for _, run := range runs {
		all.Values = append(all.Values, goodput(run))
	}
	c := barChart{Title: title, Groups: runLabels(runs), Format: fmtRate, Series: []series{all}}
	for _, k := range s.Classes {
		sr := series{Name: k}
		for _, run := range runs {
			v := math.NaN()
			if cl := s.class(run, k); cl != nil {
				v = cl.GoodputBps
			}
			sr.Values = append(sr.Values, v)
		}
		c.Series = append(c.Series, sr)
	}
	return c
}

// shareChart is each limited group's goodput over its limit (nil when no
// group of runs has a limit).
func (s *scenario) shareChart(runs []*result.Run) *barChart {
	c := &barChart{Title: "Goodput / limit per group", Groups: runLabels(runs), Format: fmtRatio,
		Refs: []ref{{1, "limit"}}}
	any := false
	for _, g := range s.Groups {
		sr := series{Name: g}
		for _, run := range runs {
			v := math.NaN()
			for _, rg := range run.Groups {
				if rg.Name == g && rg.LimitBps > 0 {
					v = rg.GoodputBps / float64(rg.LimitBps)
					any = true
				}
			}
			sr.Values = append(sr.Values, v)
		}
		c.Series = append(c.Series, sr)
	}
	if !any {
		return nil
	}
	return c
}

// fmtRatio prints a share of a limit.
func fmtRatio(v float64) string { return fmt.Sprintf("%.2f", v) }

// charts draws a scenario's completed runs, one cluster of bars per run.
func (s *scenario) charts() []template.HTML {
	if len(s.Done) == 0 {
		return nil
	}
	var labels []string
	for _, run := range s.Done {
		labels = append(labels, run.CC+"\n"+run.Limiter)
	}
	perRun := func(name string, f func(*result.Run) float64) series {
		sr := series{Name: name}
		for _, run := range s.Done {
			sr.Values = append(sr.Values, f(run))
		}
		return sr
	}
	perClass := func(keys []string, f func(*result.Class) float64) []series {
		var out []series
		for _, k := range keys {
			out = append(out, perRun(k, func(run *result.Run) float64 {
				if c := s.class(run, k); c != nil {
					return f(c)
				}
				return math.NaN()
			}))
		}
		return out
	}

	// Goodput: an unlimited run (tens of Gbit/s) would flatten every limited
	// bar, so limited runs get their own chart, with their limits, and a
	// chart of each group's goodput over its limit; unlimited runs one of
	// their own.
	var limited, unlimited []*result.Run
	for _, run := range s.Done {
		if run.Limiter == "none" {
			unlimited = append(unlimited, run)
		} else {
			limited = append(limited, run)
		}
	}
	var out []template.HTML
	if len(limited) > 0 {
		rate := s.goodputChart("Goodput per class, limited runs", limited)
		seen := map[uint64]bool{}
		for _, run := range limited {
			for _, g := range run.Groups {
				if g.LimitBps > 0 && !seen[g.LimitBps] {
					seen[g.LimitBps] = true
					rate.Refs = append(rate.Refs, ref{float64(g.LimitBps), "limit " + fmtRate(float64(g.LimitBps))})
				}
			}
		}
		out = append(out, rate.svg())
		if share := s.shareChart(limited); share != nil {
			out = append(out, share.svg())
		}
	}
	if len(unlimited) > 0 {
		rate := s.goodputChart("Goodput per class, no limiter", unlimited)
		out = append(out, rate.svg())
	}

	if len(s.RPCClasses) > 0 {
		p99 := barChart{Title: "RPC P99 latency (log scale)", Groups: labels, Log: true, Format: fmtDur,
			Series: perClass(s.RPCClasses, func(c *result.Class) float64 {
				if c.Latency == nil || c.Latency.Count == 0 {
					return math.NaN()
				}
				return c.Latency.P99
			}),
			Refs: []ref{{delackMinUs, "40 ms delayed ACK"}, {rtoMinUs, "200 ms min RTO"}}}
		out = append(out, p99.svg())
	}

	retx := barChart{Title: "Retransmissions", Groups: labels, Format: fmtSI,
		Series: perClass(s.Classes, func(c *result.Class) float64 { return float64(c.Retransmits) })}
	drops := barChart{Title: "Drops", Groups: labels, Format: fmtSI, Series: []series{
		perRun("HBM drops", func(run *result.Run) float64 { return float64(count(run).HBMDrops) }),
		perRun("qdisc drops", func(run *result.Run) float64 { return float64(count(run).QdiscDrops) }),
	}}
	return append(out, retx.svg(), drops.svg())
}
