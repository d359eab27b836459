package testbed

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRate parses a rate in tc units into bits per second: a bare number or
// "bit" is bits/s, k/m/g/t-bit are powers of 1000, ki/mi/gi/ti-bit powers of
// 1024, and "bps" with the same prefixes is bytes per second (as in tc(8)).
func ParseRate(s string) (uint64, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], in[i:]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	mult := 1.0
	switch {
	case strings.HasSuffix(unit, "bit"):
		unit = strings.TrimSuffix(unit, "bit")
	case strings.HasSuffix(unit, "bps"):
		unit = strings.TrimSuffix(unit, "bps")
		mult = 8
	case unit == "":
	default:
		return 0, fmt.Errorf("bad rate unit in %q (want bit, kbit, mbit, gbit, tbit, or bps forms)", s)
	}
	switch unit {
	case "":
	case "k":
		mult *= 1e3
	case "m":
		mult *= 1e6
	case "g":
		mult *= 1e9
	case "t":
		mult *= 1e12
	case "ki":
		mult *= 1 << 10
	case "mi":
		mult *= 1 << 20
	case "gi":
		mult *= 1 << 30
	case "ti":
		mult *= 1 << 40
	default:
		return 0, fmt.Errorf("bad rate unit in %q", s)
	}
	r := v * mult
	if r < 1 || r > math.MaxUint64/2 {
		return 0, fmt.Errorf("rate %q out of range", s)
	}
	return uint64(math.Round(r)), nil
}

// FormatRate prints bits per second in the largest tc unit that divides it
// evenly enough (200000000 -> "200mbit").
func FormatRate(bps uint64) string {
	switch {
	case bps >= 1e9 && bps%1e7 == 0:
		return strconv.FormatFloat(float64(bps)/1e9, 'f', -1, 64) + "gbit"
	case bps >= 1e6 && bps%1e4 == 0:
		return strconv.FormatFloat(float64(bps)/1e6, 'f', -1, 64) + "mbit"
	case bps >= 1e3 && bps%10 == 0:
		return strconv.FormatFloat(float64(bps)/1e3, 'f', -1, 64) + "kbit"
	}
	return strconv.FormatUint(bps, 10) + "bit"
}

// TBFBurst is the bucket size SetTBF uses when given 0: 2 ms at the rate and
// at least 64 KB, so one full GSO packet fits (a smaller bucket makes tbf
// segment every GSO packet in software, and bursts of back-to-back segments
// then overflow it).
func TBFBurst(rateBps uint64) int {
	b := int(rateBps / 8 * 2 / 1000)
	if b < 64*1024 {
		b = 64 * 1024
	}
	return b
}

// SetHTB installs an htb limiter at rateBps on the sender's veth:
// one class 1:1 with rate = ceil = rateBps, the default for all traffic.
func (tb *Testbed) SetHTB(rateBps uint64) error {
	tb.ClearQdisc()
	r := strconv.FormatUint(rateBps, 10) + "bit"
	if err := tb.tc("qdisc", "add", "dev", tb.SenderDev, "root", "handle", "1:", "htb", "default", "1"); err != nil {
		return err
	}
	return tb.tc("class", "add", "dev", tb.SenderDev, "parent", "1:", "classid", "1:1", "htb", "rate", r, "ceil", r)
}

// SetTBF installs a tbf limiter at rateBps on the sender's veth, with a
// bucket of burst bytes (0: TBFBurst) and 10 ms of queue.
func (tb *Testbed) SetTBF(rateBps uint64, burst int) error {
	tb.ClearQdisc()
	if burst <= 0 {
		burst = TBFBurst(rateBps)
	}
	return tb.tc("qdisc", "add", "dev", tb.SenderDev, "root", "tbf",
		"rate", strconv.FormatUint(rateBps, 10)+"bit", "burst", strconv.Itoa(burst), "latency", "10ms")
}

// ClearQdisc removes any root qdisc from the sender's veth (back to the
// default noqueue). No qdisc is not an error.
func (tb *Testbed) ClearQdisc() error {
	err := tb.tc("qdisc", "del", "dev", tb.SenderDev, "root")
	if err != nil && (strings.Contains(err.Error(), "Cannot delete qdisc with handle of zero") ||
		strings.Contains(err.Error(), "No such file") || strings.Contains(err.Error(), "Invalid handle")) {
		return nil
	}
	return err
}

// QdiscStats returns `tc -s qdisc show` for the sender's veth.
func (tb *Testbed) QdiscStats() (string, error) {
	return output("tc", "-n", tb.SenderNS, "-s", "qdisc", "show", "dev", tb.SenderDev)
}

func (tb *Testbed) tc(args ...string) error {
	return run("tc", append([]string{"-n", tb.SenderNS}, args...)...)
}
