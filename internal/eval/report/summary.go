package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// WriteSummary writes the terminal table printed at the end of `hbm eval`:
// one line per run, then the runs that did not happen and why. A run of
// several repetitions shows medians with their min–max. The variant, wire
// share and UDP send error columns appear when some run has them.
func WriteSummary(w io.Writer, r *result.Results) error {
	// The latency column is the smallest RPC class's, named after it when
	// every run agrees on the name (rpc-10KB in the built-in scenarios).
	p99 := ""
	for i := range r.Runs {
		if c := smallestRPC(&r.Runs[i]); c != nil && done(&r.Runs[i]) {
			if p99 == "" {
				p99 = c.Name
			} else if p99 != c.Name {
				p99 = "smallest RPC"
				break
			}
		}
	}
	if p99 == "" {
		p99 = "RPC"
	}
	var variants, wired, udp, web bool
	for i := range r.Runs {
		run := &r.Runs[i]
		variants = variants || run.Variant != ""
		wired = wired || !math.IsNaN(share(run))
		for _, c := range run.Classes {
			udp = udp || c.Kind == "udp"
			web = web || c.Kind == "http"
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) {
		for i, c := range cells {
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		fmt.Fprintf(tw, "%s\n", strings.Join(cells, "\t"))
	}
	// Columns: lead, figures, counters.
	lead := func(run *result.Run) []string {
		if variants {
			v := run.Variant
			if v == "" {
				v = dash
			}
			return []string{run.ScenarioLabel(), v, run.CC, run.Limiter}
		}
		return []string{run.ScenarioLabel(), run.CC, run.Limiter}
	}
	head := []string{"SCENARIO", "CC", "LIMITER"}
	if variants {
		head = []string{"SCENARIO", "VARIANT", "CC", "LIMITER"}
	}
	head = append(head, "GOODPUT", "OF LIMIT")
	if wired {
		head = append(head, "WIRE SHARE")
	}
	if web {
		head = append(head, "REQ/S")
	}
	head = append(head, strings.ToUpper(p99)+" P50", strings.ToUpper(p99)+" P99")
	if udp {
		head = append(head, "UDP SEND ERRORS")
	}
	head = append(head, "RETRANS", "HBM DROPS", "QDISC DROPS", "DIAGNOSES")
	row(head...)
	var notDone []string
	for i := range r.Runs {
		run := &r.Runs[i]
		cells := lead(run)
		if !done(run) {
			why := "skipped"
			if run.Skipped == "" {
				why = "failed"
			}
			cells = append(cells, why)
			for len(cells) < len(head) {
				cells = append(cells, dash)
			}
			row(cells...)
			notDone = append(notDone, fmt.Sprintf("%s %s: %s: %s", run.ScenarioLabel(), runLabel(run), why, run.Skipped+run.Error))
			continue
		}
		n := count(run)
		small := func(f func(*result.Latency) float64) func(*result.Run) float64 {
			return func(r *result.Run) float64 {
				if c := smallestRPC(r); c != nil && c.Latency != nil && c.Latency.Count > 0 {
					return f(c.Latency)
				}
				return math.NaN()
			}
		}
		cells = append(cells, cell(run, goodput, fmtRate),
			cell(run, func(r *result.Run) float64 { return ofLimit(goodput(r), limit(r)) }, fmtPct))
		if wired {
			cells = append(cells, cell(run, share, fmtShare))
		}
		if web {
			cells = append(cells, cell(run, reqPerSec, fmtFloat))
		}
		cells = append(cells, cell(run, small(func(l *result.Latency) float64 { return l.P50 }), fmtDur),
			cell(run, small(func(l *result.Latency) float64 { return l.P99 }), fmtDur))
		if udp {
			cells = append(cells, cell(run, udpErrors, func(v float64) string {
				if math.IsNaN(v) {
					return dash
				}
				return fmtCount(uint64(math.Round(v)))
			}))
		}
		cells = append(cells, fmtCount(n.Retrans), fmtCount(n.HBMDrops), fmtCount(n.QdiscDrops), fmt.Sprint(len(run.Diagnoses)))
		row(cells...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range notDone {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

// reqPerSec is the run's HTTP requests per second, NaN without http classes.
func reqPerSec(run *result.Run) float64 {
	sum, any := 0.0, false
	for _, c := range run.Classes {
		if c.Kind == "http" {
			sum += c.ReqPerSec
			any = true
		}
	}
	if !any {
		return math.NaN()
	}
	return sum
}

// udpErrors is the run's failed UDP sends, NaN without UDP classes.
func udpErrors(run *result.Run) float64 {
	sum, any := 0.0, false
	for _, c := range run.Classes {
		if c.Kind == "udp" {
			sum += float64(c.SendErrors)
			any = true
		}
	}
	if !any {
		return math.NaN()
	}
	return sum
}
