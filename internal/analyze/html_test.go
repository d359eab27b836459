package analyze

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// TestHTMLChartsTheLargest: a capture of more connections than the page
// charts (a web server's: thousands) charts the maxChartedConns that carried
// the most data, lists every one in its table, and says so; one of fewer
// charts them all.
func TestHTMLChartsTheLargest(t *testing.T) {
	conns := func(n int) *schema.Report {
		rep := &schema.Report{}
		for i := range n {
			rep.Connections = append(rep.Connections, schema.Connection{
				Src: fmt.Sprintf("198.18.7.1:%d", 40000+i), Dst: "198.18.7.2:80",
				Bytes:  int64(1000 + i), // the last ones carried the most
				Rounds: []schema.Round{{TUS: 0, RTT: 50, SentBytes: int64(1000 + i), AckedBytes: int64(1000 + i)}, {TUS: 50, RTT: 50}},
			})
		}
		return rep
	}
	render := func(rep *schema.Report) string {
		var b bytes.Buffer
		if err := WriteHTML(&b, rep, "x.pcap"); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	n := maxChartedConns + 50
	page := render(conns(n))
	if got, want := strings.Count(page, "<svg"), 3*maxChartedConns; got != want {
		t.Errorf("%d connections: %d charts, want %d (3 for each of the %d charted)", n, got, want, maxChartedConns)
	}
	if got := strings.Count(page, "Not charted"); got != n-maxChartedConns {
		t.Errorf("%d connections: %d marked not charted, want %d", n, got, n-maxChartedConns)
	}
	for _, want := range []string{
		fmt.Sprintf("Of the %d connections, the %d that carried the most data are charted", n, maxChartedConns),
		fmt.Sprintf("rate per round (Mbit/s): 198.18.7.1:%d", 40000+n-1), // the largest
		`href="#c0"`, // the smallest, in the table
	} {
		if !strings.Contains(page, want) {
			t.Errorf("%d connections: the page lacks %q", n, want)
		}
	}
	if strings.Contains(page, "rate per round (Mbit/s): 198.18.7.1:40000 ") {
		t.Errorf("%d connections: the smallest is charted", n)
	}
	page = render(conns(3))
	if got := strings.Count(page, "<svg"); got != 9 || strings.Contains(page, "Not charted") || strings.Contains(page, "are charted") {
		t.Errorf("3 connections: %d charts (want 9), or a note of some not charted", got)
	}
}
