// Package svgplot holds the pieces of HBM's inline SVG charts that the eval
// report and the capture analysis share: axis ticks, tick labels, colours
// and the charts' CSS.
package svgplot

import (
	"html/template"
	"math"
	"strings"
)

// Palette is the Okabe–Ito colours: distinguishable with the common
// colour-vision deficiencies.
var Palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// CSS styles the charts' classes (chart, title, tick, label, legend, grid,
// minor, axis, ref, reflabel) in a page's <style>.
const CSS = `svg.chart { font-size: 11px; background: #fff; border: 1px solid #eee; }
svg .title { font-size: 13px; font-weight: bold; fill: #222; }
svg .tick, svg .label, svg .legend { fill: #333; }
svg .reflabel { fill: #a00; font-size: 10px; }
svg .grid { stroke: #ddd; } svg .minor { stroke: #f2f2f2; } svg .axis { stroke: #333; }
svg .ref { stroke: #a00; stroke-dasharray: 4 3; }`

// LinearTicks returns 0, step, ..., a multiple of step at or above hi, with
// step 1, 2 or 5 times a power of ten and about five ticks.
func LinearTicks(hi float64) []float64 {
	if !(hi > 0) || math.IsInf(hi, 0) {
		hi = 1
	}
	raw := hi / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	n := int(math.Ceil(hi/step - 1e-9))
	ticks := make([]float64, n+1)
	for i := range ticks {
		ticks[i] = float64(i) * step
	}
	return ticks
}

// LogTicks returns the powers of ten from the one at or below lo to the one
// at or above hi, at least one decade apart (lo > 0).
func LogTicks(lo, hi float64) []float64 {
	if !(lo > 0) || math.IsInf(lo, 0) {
		lo = 1
	}
	if !(hi >= lo) || math.IsInf(hi, 0) {
		hi = lo
	}
	a := math.Floor(math.Log10(lo) + 1e-9)
	b := math.Ceil(math.Log10(hi) - 1e-9)
	if b <= a {
		b = a + 1
	}
	var ticks []float64
	for e := a; e <= b; e++ {
		ticks = append(ticks, math.Pow(10, e))
	}
	return ticks
}

// TickLabel drops the trailing zeros of a formatted tick: "1.00 ms" -> "1 ms".
func TickLabel(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' })
	if i < 0 {
		i = len(s)
	}
	num := s[:i]
	if strings.Contains(num, ".") {
		num = strings.TrimSuffix(strings.TrimRight(num, "0"), ".")
	}
	if num == "0" { // zero needs no unit
		return num
	}
	return num + s[i:]
}

// Esc escapes s for HTML text and attributes.
func Esc(s string) string { return template.HTMLEscapeString(s) }
