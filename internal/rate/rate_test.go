package rate

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := []struct {
		in   string
		want Rate
	}{
		{"8kbit", 8_000},
		{"200mbit", 200_000_000},
		{"200MBit", 200_000_000},
		{"1gbit", 1_000_000_000},
		{"1.5gbit", 1_500_000_000},
		{"400gbit", 400_000_000_000},
		{"125mbps", 1_000_000_000}, // bytes per second, as in tc
		{"1kbps", 8_000},
		{"10000bit", 10_000},
		{"10000", 10_000},
		{"1mibit", 1 << 20},
		{"0.4tbit", 400_000_000_000},
		{" 1gbit ", 1_000_000_000},
	}
	for _, c := range good {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, why string }{
		{"", "want a number"},
		{"mbit", "want a number"},
		{"7999bit", "out of range"},
		{"401gbit", "out of range"},
		{"1tbit", "out of range"},
		{"0", "out of range"},
		{"-1mbit", "want a number"},
		{"1.2.3mbit", "bad number"},
		{"10 furlongs", "unknown unit"},
		{"10mb", "unknown unit"},
		{"1e9bit", "unknown unit"},
		{"99999999999999999999999999gbit", "out of range"},
		// Integers past 2^63 and 2^64 never wrap into the range.
		{"9223372036854775807bit", "out of range"},
		{"9223372036854775808bit", "out of range"},
		{"18446744073709551616bit", "out of range"},
		{"18446744074709551616bit", "out of range"},
		{"-18446744072709551616bit", "want a number"},
		{"400000000000.6bit", "out of range"},
		{"1" + strings.Repeat("0", 400) + "bit", "bad number"},
	}
	for _, c := range bad {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("Parse(%q) err = %v; want it to say %q", c.in, err, c.why)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{{8_000, "8kbit"}, {200_000_000, "200mbit"}, {1_000_000_000, "1gbit"}, {1_500_000_000, "1.5gbit"}, {400_000_000_000, "400gbit"}, {10_001, "10.001kbit"}, {123_456_789, "123.456789mbit"}} {
		got := c.r.String()
		if got != c.want {
			t.Errorf("%d.String() = %q, want %q", c.r, got, c.want)
		}
	}
	for _, r := range []Rate{Min, 8_001, 999_999, 1_000_000, 123_456_789, 999_999_999_999 / 3, Max} {
		back, err := Parse(r.String())
		if err != nil {
			t.Errorf("Parse(%d.String()=%q): %v", r, r.String(), err)
			continue
		}
		if back != r {
			t.Errorf("round trip %d -> %q -> %d", r, r.String(), back)
		}
	}
}

// The fixed-point per-byte cost must be exact enough at both ends of the
// range: 400 Gbit/s is 0.02 ns per byte, 8 kbit/s 1 ms per byte.
func TestNsPerByte(t *testing.T) {
	w, f := Min.NsPerByte()
	if w != 1_000_000 || f != 0 {
		t.Fatalf("Min: %d + %d/2^32 ns, want 1e6 exactly", w, f)
	}
	w, f = Max.NsPerByte()
	if w != 0 || f == 0 {
		t.Fatalf("Max: %d + %d/2^32 ns, want 0.02", w, f)
	}
	for _, r := range []Rate{Min, 8_001, 200_000_000, 1_000_000_000, 9_999_999_937, Max} {
		for _, n := range []uint64{1, 64, 1500, 65536, 1 << 20, 1 << 30} {
			got, want := r.Cost(n), r.CostExact(n)
			// Error bound: n bytes times half a 2^-32 ns step, plus float rounding.
			if diff := math.Abs(got - want); diff > float64(n)/(1<<33)+want*1e-12+1e-9 {
				t.Errorf("rate %v, %d bytes: cost %f ns, exact %f (diff %g)", r, n, got, want, diff)
			}
		}
	}
}

// The data plane computes bytes*whole + (bytes*frac + carry) >> 32 in 64 bits;
// check the largest operands it can see stay below 2^64.
func TestCostOverflow(t *testing.T) {
	const maxWireBytes = (1 << 20) + 65535*120 // MAX_PKT_BYTES plus GSO headers
	w, _ := Min.NsPerByte()
	if hi, _ := mulHi(maxWireBytes, w); hi != 0 {
		t.Fatalf("bytes*whole overflows at Min")
	}
	if hi, _ := mulHi(maxWireBytes, math.MaxUint32); hi != 0 {
		t.Fatalf("bytes*frac overflows")
	}
}

func mulHi(a, b uint64) (uint64, uint64) {
	const mask = 1<<32 - 1
	// Only used as an overflow check: the high word of a*b.
	aH, aL, bH, bL := a>>32, a&mask, b>>32, b&mask
	mid := aH*bL + aL*bH + (aL*bL)>>32
	return aH*bH + mid>>32, a * b
}

func TestThresholds(t *testing.T) {
	// At 1 Gbit/s the time defaults stand.
	th := Default(1_000_000_000)
	if th.Mark != DefaultMark || th.Pace != DefaultPace || th.DropLarge != DefaultDropLarge || th.DropSmall != DefaultDropSmall || th.Burst != DefaultBurst {
		t.Fatalf("1gbit thresholds %+v, want the time defaults", th)
	}
	if err := th.Validate(); err != nil {
		t.Fatal(err)
	}
	// At 8 kbit/s one 1500-byte packet takes 1.5 s: floors take over.
	th = Default(Min)
	if th.Mark < 6*time.Second || th.Burst < 3*time.Second {
		t.Fatalf("8kbit thresholds %+v: below the packet floors", th)
	}
	if !(th.Mark < th.DropLarge && th.DropLarge < th.DropSmall && th.DropSmall <= th.MaxBacklog) {
		t.Fatalf("8kbit thresholds out of order: %+v", th)
	}
	if err := th.Validate(); err != nil {
		t.Fatal(err)
	}
	// A mark threshold set above the drop defaults drags them along.
	th = Thresholds{Burst: time.Millisecond, Mark: 50 * time.Millisecond, DropLarge: 10 * time.Millisecond, DropSmall: 20 * time.Millisecond}.Fit(1_000_000_000)
	if th.DropLarge <= th.Mark || th.DropSmall <= th.DropLarge {
		t.Fatalf("Fit did not order %+v", th)
	}
	if err := (Thresholds{Mark: 2 * time.Hour, DropLarge: 3 * time.Hour, DropSmall: 4 * time.Hour, MaxBacklog: 5 * time.Hour}).Validate(); err == nil {
		t.Fatal("hours-long thresholds accepted")
	}
	if err := (Thresholds{Mark: 5, DropLarge: 4, DropSmall: 6, MaxBacklog: 7}).Validate(); err == nil {
		t.Fatal("mark above drop-large accepted")
	}
}

func TestIncastDefaults(t *testing.T) {
	d := Thresholds{Burst: DefaultBurst, Pace: DefaultPace, Mark: DefaultMark, DropLarge: DefaultDropLarge, DropSmall: DefaultDropSmall}
	if got := d.Incast(false, false); got.Mark != IncastMark || got.Burst != IncastBurst || got.DropLarge != DefaultDropLarge {
		t.Errorf("no thresholds given: %+v", got)
	}
	if got := d.Incast(true, false); got.Mark != DefaultMark || got.Burst != IncastBurst {
		t.Errorf("mark given: %+v", got)
	}
	if got := d.Incast(false, true); got.Mark != IncastMark || got.Burst != DefaultBurst {
		t.Errorf("burst given: %+v", got)
	}
}
