package report

import (
	"html/template"
	"io"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// Per-run charts (hbm eval --capture) appear under their scenario, labelled
// with their run, and only for the runs that have them.
func TestHTMLPerRun(t *testing.T) {
	r := fixture(t)
	want := findRun(t, r, "egress-200m", "cubic-ecn", "hbm")
	page := render(t, func(w io.Writer, r *result.Results) error {
		return WriteHTMLPerRun(w, r, func(run *result.Run) ([]template.HTML, string) {
			if run != want {
				return nil, ""
			}
			return []template.HTML{`<svg class="chart" width="10" height="10"><title>per-rtt test chart</title></svg>`}, "from a test capture"
		})
	}, r)
	if n := wellFormed(t, page); n != 13 {
		t.Errorf("%d charts, want the 12 of TestHTML and the run's", n)
	}
	i := strings.Index(page, "<h3>Per round trip: cubic-ecn / hbm</h3>\n<p>from a test capture</p>")
	if i < 0 || !strings.Contains(page[i:], "per-rtt test chart") {
		t.Errorf("report.html lacks the run's charts")
	}
	if strings.Count(page, "Per round trip:") != 1 {
		t.Errorf("charts for runs that have none")
	}
	if i > strings.Index(page, "<h2>incast</h2>") {
		t.Errorf("the run's charts are not under its scenario")
	}
	if plain := render(t, WriteHTML, r); strings.Contains(plain, "Per round trip") {
		t.Errorf("WriteHTML draws per-run charts")
	}
}
