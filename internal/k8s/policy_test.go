package k8s

import (
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/rate"
)

// TestJudge: what the pod owner could do to stay unlimited, and
// what each gets under the default policy and under an operator's.
func TestJudge(t *testing.T) {
	def := daemon.DefaultPodPolicy()
	op := daemon.DefaultPodPolicy()
	op.DefaultEgress, op.DefaultIngress = 50e6, 80e6
	keep := op
	keep.OnInvalid = daemon.InvalidKeep
	for _, c := range []struct {
		name    string
		pol     daemon.PodPolicy
		ann     map[string]string
		egress  rate.Rate // 0: none
		ingress rate.Rate
		keepE   bool
		problem string // "" : none
	}{
		{"valid", def, map[string]string{EgressAnnotation: "200M"}, 200e6, 0, false, ""},
		{"4k is below hbm's range: clamped, not unlimited", def, map[string]string{EgressAnnotation: "4k"}, rate.Min, 0, false, "below the lowest rate"},
		{"2P is above kubelet's range: the default", op, map[string]string{EgressAnnotation: "2P"}, 50e6, 0, false, "unreasonably large"},
		{"unparsable: the default", op, map[string]string{EgressAnnotation: "10mbit", IngressAnnotation: "1G"}, 50e6, 1e9, false, "regular expression"},
		{"no default configured: hbm's minimum", def, map[string]string{EgressAnnotation: "lots"}, rate.Min, 0, false, "8kbit"},
		{"unknown hbm.io key", op, map[string]string{EgressAnnotation: "200M", IngressAnnotation: "1G", "hbm.io/unlimited": "yes"}, 50e6, 80e6, false, "unknown annotation"},
		{"unknown option", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-turbo": "true"}, 50e6, 0, false, "unknown option"},
		{"no-drop not allowed by default", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-no-drop": "true"}, 50e6, 0, false, "not allowed"},
		{"a 1h burst", op, map[string]string{IngressAnnotation: "200M", "hbm.io/ingress-burst": "1h"}, 0, 80e6, false, "above the 50ms"},
		{"an allowed option", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-no-pace": "true"}, 200e6, 0, false, ""},
		{"option without a rate: no effect, reported", op, map[string]string{EgressAnnotation: "200M", "hbm.io/ingress-no-drop": "true"}, 200e6, 0, false, "no effect"},
		{"keep: previous limit, else the default", keep, map[string]string{EgressAnnotation: "x"}, 50e6, 0, true, "the egress limit it had"},
		{"a guarantee: the limit's rate", op, map[string]string{EgressAnnotation: "1G", "hbm.io/egress-guarantee": "300M"}, 300e6, 0, false, ""},
		{"a guarantee above the bandwidth: the default", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-guarantee": "300M"}, 50e6, 0, false, "above the bandwidth"},
		{"a guarantee that is no quantity: the default", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-guarantee": "lots"}, 50e6, 0, false, "want a quantity"},
	} {
		j := Judge(c.ann, c.pol)
		gotE, gotI := rate.Rate(0), rate.Rate(0)
		if j.Egress != nil {
			gotE = j.Egress.Rate
		}
		if j.Ingress != nil {
			gotI = j.Ingress.Rate
		}
		msg := strings.Join(j.Problems, "; ")
		if gotE != c.egress || gotI != c.ingress || j.KeepEgress != c.keepE {
			t.Errorf("%s: egress %v ingress %v keep %v, want %v %v %v (%s)", c.name, gotE, gotI, j.KeepEgress, c.egress, c.ingress, c.keepE, msg)
		}
		if (c.problem == "") != (msg == "") || !strings.Contains(msg, c.problem) {
			t.Errorf("%s: problems %q, want one containing %q", c.name, msg, c.problem)
		}
	}
	// The bandwidth annotation is the guarantee's ceiling.
	if j := Judge(map[string]string{EgressAnnotation: "1G", "hbm.io/egress-guarantee": "300M"}, op); j.Egress == nil || j.Egress.Ceil != 1e9 {
		t.Errorf("guarantee 300M under a 1G bandwidth: %+v, want ceiling 1gbit", j.Egress)
	}
	// Allowed by the operator: no-drop and a longer burst pass.
	op.Allowed["no-drop"], op.MaxDuration = true, 2*time.Hour
	if j := Judge(map[string]string{EgressAnnotation: "200M", "hbm.io/egress-no-drop": "true", "hbm.io/egress-burst": "20ms"}, op); j.Egress == nil || !j.Egress.NoDrop || len(j.Problems) != 0 {
		t.Errorf("allowed options: %+v %q", j.Egress, j.Problems)
	}
	// Edits not followed: every direction is kept as first applied.
	op.FollowEdits = false
	if j := Judge(map[string]string{EgressAnnotation: "200M"}, op); !j.KeepEgress || !j.KeepIngress || j.Egress.Rate != 200e6 {
		t.Errorf("follow_edits false: %+v", j)
	}
}
