// Package rate parses and formats bandwidths in tc's units and turns a rate
// into the fixed-point costs and time thresholds the data plane uses.
package rate

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
)

// Rate is a bandwidth in bits per second, counted in frames as tc counts
// them: every packet (every GSO segment) its IP length plus an Ethernet
// header (bpf/include/pkt.h).
type Rate uint64

// LinkHdrBytes is the link-layer header every packet (every GSO segment)
// is charged on top of its IP length: Ethernet's, as tc counts frames. It
// is bpf/include/pkt.h's LINK_HDR_BYTES, which the data plane charges.
const LinkHdrBytes = 14

// The range hbm accepts: from one 1000-byte packet a second to 400 Gbit/s.
const (
	Min Rate = 8_000
	Max Rate = 400_000_000_000
)

// units maps tc's suffixes to bits per second. As in tc, "bps" means bytes
// per second and "bit" bits; the IEC forms (kibit, ...) are powers of 1024.
var units = map[string]float64{
	"":      1,
	"bit":   1,
	"kbit":  1e3,
	"mbit":  1e6,
	"gbit":  1e9,
	"tbit":  1e12,
	"kibit": 1 << 10,
	"mibit": 1 << 20,
	"gibit": 1 << 30,
	"tibit": 1 << 40,
	"bps":   8,
	"kbps":  8e3,
	"mbps":  8e6,
	"gbps":  8e9,
	"tbps":  8e12,
	"kibps": 8 << 10,
	"mibps": 8 << 20,
	"gibps": 8 << 30,
	"tibps": 8 << 40,
}

// Parse reads a rate in tc's syntax ("200mbit", "1.5gbit", "125mbps") and
// checks it lies within [Min, Max]. A bare number is bits per second.
func Parse(s string) (Rate, error) {
	in := strings.TrimSpace(s)
	lower := strings.ToLower(in)
	i := 0
	for i < len(lower) && (lower[i] >= '0' && lower[i] <= '9' || lower[i] == '.') {
		i++
	}
	num, unit := lower[:i], lower[i:]
	if num == "" {
		return 0, fmt.Errorf("invalid rate %q: want a number and a unit, e.g. 200mbit or 1gbit", s)
	}
	mult, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("invalid rate %q: unknown unit %q (use bit, kbit, mbit, gbit, tbit, or bps, kbps, mbps, gbps for bytes per second)", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid rate %q: bad number %q", s, num)
	}
	bps := math.Round(v * mult)
	if bps < float64(Min) || bps > float64(Max) {
		return 0, fmt.Errorf("rate %q out of range: hbm accepts %v to %v", s, Min, Max)
	}
	return Rate(bps), nil
}

// String formats r with the largest decimal bit unit it reaches ("200mbit",
// "1.5gbit", "123.456789mbit"); Parse(r.String()) == r.
func (r Rate) String() string {
	type u struct {
		name string
		div  uint64
	}
	for _, x := range []u{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if uint64(r) < x.div {
			continue
		}
		return strconv.FormatFloat(float64(r)/float64(x.div), 'f', -1, 64) + x.name
	}
	return strconv.FormatUint(uint64(r), 10) + "bit"
}

// Set and Type make Rate a pflag/flag value.
func (r *Rate) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Type names the flag value type in help output.
func (r *Rate) Type() string { return "rate" }

// BytesPerSecond is r in bytes per second.
func (r Rate) BytesPerSecond() float64 { return float64(r) / 8 }

// NsPerByte is the time one byte takes at r as 32.32 fixed point: whole
// nanoseconds and a fraction in units of 2^-32 ns, rounded to nearest.
// At Min it is 1e6 ns exactly; at Max 0.02 ns, exact to 1e-8 relative.
func (r Rate) NsPerByte() (whole uint64, frac uint32) {
	if r == 0 {
		return 0, 0
	}
	// (8e9 << 32) / r, in 128 bits: 8e9 << 32 does not fit 64.
	hi, lo := bits.Mul64(8_000_000_000, 1<<32)
	q, rem := bits.Div64(hi, lo, uint64(r))
	if rem >= (uint64(r)+1)/2 {
		q++
	}
	return q >> 32, uint32(q)
}

// Cost returns the time, in ns, that n bytes take at r, with the 32.32
// arithmetic of the data plane (exact reference in tests: CostExact).
func (r Rate) Cost(n uint64) float64 {
	w, f := r.NsPerByte()
	return float64(n*w) + float64(n)*float64(f)/(1<<32)
}

// CostExact is n bytes' time at r in ns, computed with arbitrary precision.
func (r Rate) CostExact(n uint64) float64 {
	v := new(big.Rat).SetFrac(new(big.Int).SetUint64(n*8_000_000_000), new(big.Int).SetUint64(uint64(r)))
	f, _ := v.Float64()
	return f
}
