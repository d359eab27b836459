// Package report renders `hbm eval` results (internal/eval/result): a
// Markdown report, a self-contained HTML report with SVG charts in the manner
// of the seed slides, a terminal summary, and diagnoses of timer-shaped tail
// latencies.
package report

import (
	"math"
	"strconv"
	"strings"
)

// dash stands for a figure that does not exist (no limit, no latency, no BPF).
const dash = "–"

type unit struct {
	factor float64
	name   string
}

var (
	rateUnits = []unit{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}, {1, "bit/s"}}
	// timeUnits scale microseconds, the unit of result.Latency.
	timeUnits = []unit{{1e6, "s"}, {1e3, "ms"}, {1, "µs"}, {1e-3, "ns"}}
	siUnits   = []unit{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}}
)

// sig3 formats v with three significant digits (two decimals at most).
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 99.95:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 9.995:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// scaled formats v in the largest unit that keeps it at least 1 after
// rounding to three significant digits; sep goes between number and unit.
func scaled(v float64, units []unit, sep string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	if v == 0 {
		return "0" + sep + units[len(units)-1].name
	}
	u := units[len(units)-1]
	for _, c := range units {
		if math.Abs(v) >= c.factor*0.9995 {
			u = c
			break
		}
	}
	return sig3(v/u.factor) + sep + u.name
}

// fmtRate formats bits per second: "960 Mbit/s", "9.41 Gbit/s".
func fmtRate(bps float64) string { return scaled(bps, rateUnits, " ") }

// fmtDur formats microseconds: "850 µs", "41.3 ms", "1.20 s".
func fmtDur(us float64) string { return scaled(us, timeUnits, " ") }

// Duration formats microseconds as the report does, for notes written
// outside this package.
func Duration(us float64) string { return fmtDur(us) }

// fmtSI formats a count compactly for chart axes: "41.7k".
func fmtSI(v float64) string {
	if v != 0 && math.Abs(v) < 1 {
		return sig3(v)
	}
	return scaled(v, siUnits, "")
}

// fmtCount formats an exact count with thousands separators: "41,700".
func fmtCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtPct formats a fraction as a percentage: 0.915 -> "91.5%".
func fmtPct(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dash
	}
	return sig3(100*f) + "%"
}

// fmtFloat formats a plain quantity (cores, ns) with three significant
// digits, or a dash for a missing one.
func fmtFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	if v != 0 && math.Abs(v) < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return sig3(v)
}
