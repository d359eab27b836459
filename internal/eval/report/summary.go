package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// WriteSummary writes the terminal table printed at the end of `hbm eval`:
// one line per run, then the runs that did not happen and why.
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
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) {
		for i, c := range cells {
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		fmt.Fprintf(tw, "%s\n", strings.Join(cells, "\t"))
	}
	row("SCENARIO", "CC", "LIMITER", "GOODPUT", "OF LIMIT", strings.ToUpper(p99)+" P99", "RETRANS", "HBM DROPS", "QDISC DROPS", "DIAGNOSES")
	var notDone []string
	for i := range r.Runs {
		run := &r.Runs[i]
		if !done(run) {
			why := "skipped"
			if run.Skipped == "" {
				why = "failed"
			}
			row(run.Scenario, run.CC, run.Limiter, why, dash, dash, dash, dash, dash, dash)
			notDone = append(notDone, fmt.Sprintf("%s %s: %s: %s", run.Scenario, runLabel(run), why, run.Skipped+run.Error))
			continue
		}
		n := count(run)
		row(run.Scenario, run.CC, run.Limiter, fmtRate(goodput(run)), fmtPct(ofLimit(goodput(run), limit(run))),
			lat(smallestRPC(run), func(l *result.Latency) float64 { return l.P99 }),
			fmtCount(n.Retrans), fmtCount(n.HBMDrops), fmtCount(n.QdiscDrops), fmt.Sprint(len(run.Diagnoses)))
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
