package k8s

import (
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/rate"
)

// kubelet's rules (pkg/util/bandwidth, ExtractPodBandwidthResources and
// validateBandwidthIsReasonable; its own test table is reproduced here):
// a resource.Quantity, integer value (rounded up) within [1k, 1P]; ingress
// read first; any error voids both directions; kubelet's messages.
func TestExtractPodBandwidthResources(t *testing.T) {
	for _, c := range []struct {
		ann             map[string]string
		ingress, egress string // Quantity.String(); "" for nil
		err             string // substring; "" for none
	}{
		{ann: nil},
		{ann: map[string]string{}},
		{ann: map[string]string{"kubernetes.io/ingress-bandwidth": "10M"}, ingress: "10M"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "10M"}, egress: "10M"},
		{ann: map[string]string{"kubernetes.io/ingress-bandwidth": "4M", "kubernetes.io/egress-bandwidth": "20M"}, ingress: "4M", egress: "20M"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "1k"}, egress: "1k"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "1P"}, egress: "1P"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "1Gi"}, egress: "1Gi"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "999"}, err: "resource is unreasonably small (< 1kbit)"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "1001T"}, err: "resource is unreasonably large (> 1Pbit)"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "2P"}, err: "unreasonably large"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "-1M"}, err: "unreasonably small"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": "10mbit"}, err: "quantities must match the regular expression"},
		{ann: map[string]string{"kubernetes.io/egress-bandwidth": ""}, err: "quantities must match the regular expression"},
		// An invalid ingress voids a valid egress (and the other way).
		{ann: map[string]string{"kubernetes.io/ingress-bandwidth": "fast", "kubernetes.io/egress-bandwidth": "10M"}, err: "quantities must match"},
		{ann: map[string]string{"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "1"}, err: "unreasonably small"},
	} {
		in, eg, err := ExtractPodBandwidthResources(c.ann)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.ann, err, c.err)
			}
			if in != nil || eg != nil {
				t.Errorf("%v: %v %v with an error, want nil nil", c.ann, in, eg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.ann, err)
			continue
		}
		str := func(q interface{ String() string }, isNil bool) string {
			if isNil {
				return ""
			}
			return q.String()
		}
		if got := str(in, in == nil); got != c.ingress {
			t.Errorf("%v: ingress %q, want %q", c.ann, got, c.ingress)
		}
		if got := str(eg, eg == nil); got != c.egress {
			t.Errorf("%v: egress %q, want %q", c.ann, got, c.egress)
		}
	}
}

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits(map[string]string{"kubernetes.io/egress-bandwidth": "200M", "kubernetes.io/ingress-bandwidth": "1G",
		"hbm.io/ingress-no-drop": "true", "hbm.io/ingress-mark": "200us", "hbm.io/egress-no-pace": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Egress == nil || l.Egress.Rate != 200e6 || !l.Egress.NoPace || l.Egress.NoDrop {
		t.Errorf("egress %+v", l.Egress)
	}
	if l.Ingress == nil || l.Ingress.Rate != 1e9 || !l.Ingress.NoDrop || l.Ingress.NoPace || l.Ingress.Thresholds.Mark != 200e3 {
		t.Errorf("ingress %+v", l.Ingress)
	}
	// Incast protection (ingress no-drop) has its own mark and burst
	// defaults, as hbm set --ingress --no-drop; a mark given is kept.
	if l, err := ParseLimits(map[string]string{"kubernetes.io/ingress-bandwidth": "1G", "hbm.io/ingress-no-drop": "true"}); err != nil ||
		l.Ingress.Thresholds.Mark != rate.IncastMark || l.Ingress.Thresholds.Burst != rate.IncastBurst {
		t.Errorf("ingress no-drop defaults: %+v %v", l.Ingress, err)
	}
	if l.Ingress.Thresholds.Burst != rate.IncastBurst {
		t.Errorf("ingress no-drop with mark given: burst %v, want %v", l.Ingress.Thresholds.Burst, rate.IncastBurst)
	}
	// Binary suffixes as kubelet reads them: 1Mi is 1048576 bit/s.
	if l, err := ParseLimits(map[string]string{"kubernetes.io/egress-bandwidth": "1Mi"}); err != nil || l.Egress.Rate != 1<<20 || l.Ingress != nil {
		t.Errorf("1Mi: %+v %v", l, err)
	}
	// The same thresholds as hbm set gives at this rate.
	if l, _ := ParseLimits(map[string]string{"kubernetes.io/egress-bandwidth": "10M"}); l.Egress.Thresholds != (rate.Thresholds{Burst: rate.DefaultBurst, Pace: rate.DefaultPace,
		Mark: rate.DefaultMark, DropLarge: rate.DefaultDropLarge, DropSmall: rate.DefaultDropSmall}).Fit(10e6) {
		t.Errorf("thresholds %+v", l.Egress.Thresholds)
	}
	// A guarantee: the limit's rate, the bandwidth its ceiling.
	if l, err := ParseLimits(map[string]string{"kubernetes.io/egress-bandwidth": "1G", "hbm.io/egress-guarantee": "300M"}); err != nil ||
		l.Egress.Rate != 300e6 || l.Egress.Ceil != 1e9 {
		t.Errorf("guarantee: %+v %v", l.Egress, err)
	}
	// A priority: both directions.
	if l, err := ParseLimits(map[string]string{"kubernetes.io/egress-bandwidth": "1G", "kubernetes.io/ingress-bandwidth": "1G",
		"hbm.io/egress-guarantee": "300M", "hbm.io/priority": "batch"}); err != nil ||
		l.Egress.Priority != dataplane.PriorityBatch || l.Ingress.Priority != dataplane.PriorityBatch {
		t.Errorf("priority: %+v %+v %v", l.Egress, l.Ingress, err)
	}
	if l, err := ParseLimits(map[string]string{"other": "x"}); err != nil || !l.Empty() {
		t.Errorf("no annotations: %+v %v", l, err)
	}
	for ann, want := range map[string]string{
		"kubernetes.io/egress-bandwidth=2k":     "outside the range hbm enforces", // kubelet takes it, hbm cannot enforce it
		"kubernetes.io/egress-bandwidth=500G":   "outside the range hbm enforces",
		"kubernetes.io/egress-bandwidth=10mbit": "quantities must match",
		"hbm.io/egress-no-drop=yes":             "hbm.io/egress-no-drop: want \"true\" or \"false\"",
		"hbm.io/egress-nodrop=true":             "unknown option \"nodrop\"",
		"hbm.io/no-drop=true":                   "unknown annotation",
		"hbm.io/ingress-mark=fast":              "want a duration",
		"hbm.io/ingress-mark=-1ms":              "want a duration",
		"hbm.io/ingress-guarantee=2G":           "above the bandwidth",
		"hbm.io/ingress-guarantee=fast":         "want a quantity",
		"hbm.io/priority=urgent":                "want latency, normal or batch",
		"hbm.io/ingress-priority=batch":         "write hbm.io/priority",
	} {
		k, v, _ := strings.Cut(ann, "=")
		m := map[string]string{"kubernetes.io/ingress-bandwidth": "1G", k: v}
		if _, err := ParseLimits(m); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", ann, err, want)
		}
	}
}

// A Quantity's Value() is its integer value modulo 2^64: kubelet's own check
// compares Value(), so "-18446744072709551616" (-2^64 + 1e9) would pass it
// as 1 Gbit/s and "18446744073709551616" (2^64) read as 0. hbm compares the
// exact value: whatever lies outside [1k, 1P] is refused, however large,
// and an in-range fraction is rounded up as kubelet rounds it.
func TestBandwidthQuantityEdges(t *testing.T) {
	const small, large = "resource is unreasonably small (< 1kbit)", "resource is unreasonably large (> 1Pbit)"
	for _, c := range []struct {
		v    string
		err  string    // exact message; "" for none
		rate rate.Rate // ParseLimits' rate when err is ""
	}{
		{v: "9223372036854775807", err: large},   // 2^63-1
		{v: "9223372036854775808", err: large},   // 2^63: Value() is -2^63
		{v: "18446744073709551615", err: large},  // 2^64-1: Value() is -1
		{v: "18446744073709551616", err: large},  // 2^64: Value() is 0
		{v: "18446744074709551616", err: large},  // 2^64+1e9: Value() is 1e9
		{v: "36893488147419103232", err: large},  // 2^65
		{v: "-18446744072709551616", err: small}, // -2^64+1e9: Value() is 1e9
		{v: "-9223372036854775808", err: small},  // -2^63
		{v: "-9223372036854775809", err: small},  // -2^63-1: Value() wraps to 2^63-1
		{v: "-1", err: small},
		{v: "0", err: small},
		{v: "1e20", err: large}, // Value() is 0
		{v: "1E", err: large},
		{v: "1e308", err: large},
		{v: "100000000000000000000000000000000001000000000", err: large}, // Value() is 8.0e16
		{v: "8Ei", err: large},
		{v: "-8Ei", err: small},
		{v: "-1e308", err: small},
		{v: "1e-300", err: small},
		{v: "1n", err: small}, // Value() rounds up to 1
		{v: "999", err: small},
		{v: "999.0001"}, // kubelet rounds up to 1000: valid for kubelet, too low for hbm
		{v: "1000.5"},   // kubelet: 1001
		{v: "1P"},
		{v: "1000000000000000.1", err: large}, // rounds up past 1P
		{v: "1.5M", rate: 1_500_000},
		{v: "400G", rate: 400e9},
		{v: "8k", rate: 8000},
		{v: "8000.5", rate: 8001}, // fractional bits round up, as kubelet
		{v: "10Mi", rate: 10 << 20},
	} {
		_, eg, err := ExtractPodBandwidthResources(map[string]string{EgressAnnotation: c.v})
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: err %v (value %v), want %q", c.v, err, eg, c.err)
			}
		} else if err != nil {
			t.Errorf("%s: %v, want valid", c.v, err)
		}
		l, err := ParseLimits(map[string]string{EgressAnnotation: c.v})
		switch {
		case c.rate == 0 && err == nil:
			t.Errorf("%s: ParseLimits gives %v, want an error", c.v, l.Egress.Rate)
		case c.rate != 0 && err != nil:
			t.Errorf("%s: ParseLimits: %v, want %v", c.v, err, c.rate)
		case c.rate != 0 && l.Egress.Rate != c.rate:
			t.Errorf("%s: ParseLimits gives %v, want %v", c.v, l.Egress.Rate, c.rate)
		}
	}
}
