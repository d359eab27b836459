// Package report renders an eval's results. PLACEHOLDER: the report branch
// replaces this file with the real renderers (tables, SVG charts, timer
// diagnosis); these trivial versions only let the runner build and run.
package report

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"text/tabwriter"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// WriteMarkdown writes a minimal markdown report.
func WriteMarkdown(w io.Writer, r *result.Results) error {
	fmt.Fprintf(w, "# hbm eval\n\n```\n")
	if err := WriteSummary(w, r); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "```\n")
	return err
}

// WriteHTML writes a minimal HTML report.
func WriteHTML(w io.Writer, r *result.Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "<!doctype html><meta charset=utf-8><title>hbm eval</title><pre>%s</pre>\n", html.EscapeString(string(b)))
	return err
}

// WriteSummary writes one line per run and class.
func WriteSummary(w io.Writer, r *result.Results) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCC\tLIMITER\tGROUP\tCLASS\tGOODPUT Mbit/s\tP50\tP99\tRETRANS")
	for _, run := range r.Runs {
		if run.Skipped != "" || run.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s%s\t\t\t\n", run.Scenario, run.CC, run.Limiter, run.Skipped, run.Error)
			continue
		}
		for _, c := range run.Classes {
			p50, p99 := "-", "-"
			if c.Latency != nil {
				p50, p99 = fmt.Sprintf("%.0fus", c.Latency.P50), fmt.Sprintf("%.0fus", c.Latency.P99)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%d\n", run.Scenario, run.CC, run.Limiter, c.Group, c.Name,
				math.Round(c.GoodputBps/1e5)/10, p50, p99, c.Retransmits)
		}
	}
	return tw.Flush()
}

// Diagnose does nothing in the placeholder.
func Diagnose(run *result.Run) {}
