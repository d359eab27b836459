package analyze

import (
	"fmt"
	"slices"

	"github.com/hbm-dev/hbm/internal/analyze/schema"
)

// Requests: every connection's completed exchanges pooled (schema.Requests).
// A web server answering a new connection per request has one exchange per
// connection, so its clients' wait is a distribution over connections; and
// a server whose handshakes wait (a SYN-ACK queued behind a shaper's
// backlog, or held by HBM's handshake gate) makes them wait before the
// request, where a client that times a request from its write does not
// look.

// timelineBinNs is the width of a request timeline's bins, unless the
// capture is longer than timelineMaxBins of them.
const (
	timelineBinNs   = 100_000_000
	timelineMaxBins = 1000
)

// requests pools the completed exchanges of conns (nil: none).
func requests(conns []*conn) *schema.Requests {
	var (
		all           []turn
		setup, total  []int64
		first, latest int64
		end           int64 // the capture's last packet
	)
	for _, c := range conns {
		end = max(end, c.last)
		e := &c.ex
		if len(e.done) == 0 {
			continue
		}
		all = append(all, e.done...)
		// The connection's first exchange, from its SYN.
		if d := e.done[0]; c.clientKnown && e.requester == c.client && d.start == e.first {
			setup = append(setup, max(d.start-c.synT, 0))
			total = append(total, max(d.start+d.complete-c.synT, 0))
		}
	}
	if len(all) == 0 {
		return nil
	}
	first = all[0].start
	complete := make([]int64, len(all))
	longest := int64(0)
	for i, d := range all {
		complete[i] = d.complete
		first = min(first, d.start)
		longest = max(longest, d.complete)
	}
	// The timeline ends where an exchange as long as the longest seen
	// could have begun and not ended in the capture: the bins after hold
	// only the shorter ones, and would read short.
	latest = first
	for _, d := range all {
		if d.start <= end-longest {
			latest = max(latest, d.start)
		}
	}
	r := &schema.Requests{Count: int64(len(all)), Complete: latency(complete), Opened: int64(len(setup))}
	if len(setup) > 0 {
		s, t := latency(setup), latency(total)
		r.Setup, r.Total = &s, &t
	}
	bin := int64(timelineBinNs)
	if span := latest - first; span/bin >= timelineMaxBins {
		bin = (span/timelineMaxBins + 1_000_000) / 1_000_000 * 1_000_000 // whole ms
	}
	n := (latest-first)/bin + 1
	sum := make([]int64, n)
	bins := make([]schema.RequestBin, n)
	for i := range bins {
		bins[i].TUS = us(int64(i) * bin)
	}
	for _, d := range all {
		i := (d.start - first) / bin
		if d.start > latest || i >= n {
			continue
		}
		b := &bins[i]
		b.Count++
		sum[i] += d.complete
		b.Max = max(b.Max, us(d.complete))
	}
	for i := range bins {
		if bins[i].Count > 0 {
			bins[i].Mean = us(sum[i] / bins[i].Count)
		}
	}
	r.TimelineBinUS, r.Timeline = us(bin), bins
	return r
}

// TimelineRange is the least and the greatest mean of the timeline's bins
// holding at least minCount exchanges, and how many such bins there are.
func TimelineRange(r *schema.Requests, minCount int64) (lo, hi float64, bins int) {
	var means []float64
	for _, b := range r.Timeline {
		if b.Count >= minCount {
			means = append(means, b.Mean)
		}
	}
	if len(means) == 0 {
		return 0, 0, 0
	}
	return slices.Min(means), slices.Max(means), len(means)
}

// RequestsSentence says r in a sentence or two, durations (µs) written by
// dur: what analysis.html and hbm eval's capture note print.
func RequestsSentence(r *schema.Requests, dur func(us float64) string) string {
	s := fmt.Sprintf("%d requests completed, every connection's pooled: request to the response's last byte p50 %s, p90 %s, p99 %s, max %s.",
		r.Count, dur(r.Complete.P50), dur(r.Complete.P90), dur(r.Complete.P99), dur(r.Complete.Max))
	if r.Setup != nil {
		s += fmt.Sprintf(" On the %s whose SYN the capture holds: SYN to the first request p50 %s, p99 %s; SYN to that response's last byte p50 %s, p99 %s.",
			Connections(r.Opened), dur(r.Setup.P50), dur(r.Setup.P99), dur(r.Total.P50), dur(r.Total.P99))
	}
	return s
}

// Connections is "1 connection" or "N connections".
func Connections(n int64) string {
	if n == 1 {
		return "1 connection"
	}
	return fmt.Sprintf("%d connections", n)
}
