// Package top is `hbm top`'s view: from two readings of the data plane's
// counters, each limited group's rate against its limit, marks and drops
// per second, the groups closest to their limit first.
package top

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/safetext"
)

// Sample is one reading of the data plane.
type Sample struct {
	At      time.Time
	Entries []dataplane.Entry
}

// Row is one group and direction over the interval between two samples.
type Row struct {
	Group   string
	Dir     dataplane.Direction
	Limit   rate.Rate // the rate in force: the limit, or more while the group borrows
	Bps     float64   // bits per second passed
	Use     float64   // Bps / Limit
	MarksPS float64   // CE marks and cwr returns per second
	DropsPS float64   // drops per second
	New     bool      // no earlier reading: rates unknown
	// Guarantee, Ceil: the group's limit and ceiling where it may borrow
	// (0: a hard cap, Limit); Priority its borrowing class.
	Guarantee, Ceil rate.Rate
	Priority        dataplane.Priority
}

// Rows compares two samples. Groups with no earlier reading (new limits)
// show as new, with zero rates; removed groups are left out.
func Rows(prev, cur Sample) []Row {
	type key struct {
		id uint64
		d  dataplane.Direction
	}
	old := map[key]dataplane.Entry{}
	for _, e := range prev.Entries {
		old[key{e.CgroupID, e.Dir}] = e
	}
	secs := cur.At.Sub(prev.At).Seconds()
	var rows []Row
	for _, e := range cur.Entries {
		if e.Gone {
			continue
		}
		name := e.Cgroup
		if name == "" {
			name = fmt.Sprintf("(unresolved, id %d)", e.CgroupID)
		}
		// A group that borrows is limited by its rate in force (its rate
		// plus what it borrows now), not by its guarantee.
		r := Row{Group: name, Dir: e.Dir, Limit: e.Limit.Rate, Priority: e.Limit.Priority}
		if e.Limit.Ceil > e.Limit.Rate {
			r.Guarantee, r.Ceil = e.Limit.Rate, e.Limit.Ceil
			if e.Stats.InForce > r.Limit {
				r.Limit = e.Stats.InForce
			}
		}
		o, ok := old[key{e.CgroupID, e.Dir}]
		// A counter that went back: the limit was re-created in between.
		if !ok || secs <= 0 || e.Stats.Bytes < o.Stats.Bytes {
			r.New = true
		} else {
			d := func(a, b uint64) float64 { return float64(a-b) / secs }
			r.Bps = 8 * d(e.Stats.Bytes, o.Stats.Bytes)
			r.MarksPS = d(e.Stats.Marked, o.Stats.Marked) + d(e.Stats.CWR, o.Stats.CWR)
			r.DropsPS = d(e.Stats.Dropped, o.Stats.Dropped)
			if r.Limit > 0 {
				r.Use = r.Bps / float64(r.Limit)
			}
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.Use, a.Use), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Dir, b.Dir))
	})
	return rows
}

// Render writes one frame.
func Render(w io.Writer, rows []Row, at time.Time, interval time.Duration) error {
	fmt.Fprintf(w, "hbm top - %s - %d limits - every %v (Ctrl-C to quit)\n\n", at.Format("15:04:05"), len(rows), interval)
	if len(rows) == 0 {
		fmt.Fprintln(w, "no limits set")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// LIMIT is what holds the group now (its rate in force where it
	// borrows); GUARANTEE and CEIL are a borrower's bounds ("-": a hard
	// cap), PRIO its class.
	fmt.Fprintln(tw, "CGROUP\tDIR\tLIMIT\tRATE\tUSE\t\tMARKS/S\tDROPS/S\tGUARANTEE\tCEIL\tPRIO\t")
	for _, r := range rows {
		guar, ceil := "-", "-"
		if r.Ceil != 0 {
			guar, ceil = r.Guarantee.String(), r.Ceil.String()
		}
		if r.New {
			fmt.Fprintf(tw, "%s\t%v\t%v\t-\t-\t\t-\t-\t%s\t%s\t%v\t\n", safetext.Quote(r.Group), r.Dir, r.Limit, guar, ceil, r.Priority)
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%.0f%%\t%s\t%.0f\t%.0f\t%s\t%s\t%v\t\n", safetext.Quote(r.Group), r.Dir, r.Limit, human(r.Bps), 100*r.Use, bar(r.Use, 20), r.MarksPS, r.DropsPS,
			guar, ceil, r.Priority)
	}
	return tw.Flush()
}

// human formats bits per second with tc's units.
func human(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2fgbit", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.1fmbit", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.1fkbit", bps/1e3)
	}
	return fmt.Sprintf("%.0fbit", bps)
}

// bar draws use (0..1, capped) in n cells.
func bar(use float64, n int) string {
	k := int(use*float64(n) + 0.5)
	k = max(0, min(k, n))
	b := make([]byte, 0, n+2)
	b = append(b, '[')
	for i := 0; i < n; i++ {
		if i < k {
			b = append(b, '#')
		} else {
			b = append(b, ' ')
		}
	}
	return string(append(b, ']'))
}
