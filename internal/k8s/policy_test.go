package k8s

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hbm-dev/hbm/internal/daemon"
	"github.com/hbm-dev/hbm/internal/dataplane"
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
		{"a priority, not allowed by default: the default, both directions", op, map[string]string{EgressAnnotation: "200M", IngressAnnotation: "1G", PriorityAnnotation: "latency"}, 50e6, 80e6, false, "hbm.io/priority: not allowed on this node"},
		{"a priority per direction: the default", op, map[string]string{EgressAnnotation: "200M", "hbm.io/egress-priority": "latency"}, 50e6, 0, false, "write hbm.io/priority"},
	} {
		j := Judge(c.ann, corev1.PodQOSBurstable, c.pol)
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
	if j := Judge(map[string]string{EgressAnnotation: "1G", "hbm.io/egress-guarantee": "300M"}, "", op); j.Egress == nil || j.Egress.Ceil != 1e9 {
		t.Errorf("guarantee 300M under a 1G bandwidth: %+v, want ceiling 1gbit", j.Egress)
	}
	// Allowed by the operator: no-drop and a longer burst pass.
	op.Allowed["no-drop"], op.MaxDuration = true, 2*time.Hour
	if j := Judge(map[string]string{EgressAnnotation: "200M", "hbm.io/egress-no-drop": "true", "hbm.io/egress-burst": "20ms"}, "", op); j.Egress == nil || !j.Egress.NoDrop || len(j.Problems) != 0 {
		t.Errorf("allowed options: %+v %q", j.Egress, j.Problems)
	}
	// Edits not followed: every direction is kept as first applied.
	op.FollowEdits = false
	if j := Judge(map[string]string{EgressAnnotation: "200M"}, "", op); !j.KeepEgress || !j.KeepIngress || j.Egress.Rate != 200e6 {
		t.Errorf("follow_edits false: %+v", j)
	}
}

// TestJudgePriorityAndClasses: hbm.io/priority, and the operator's defaults
// per QoS class, which a pod's own annotations replace where allowed.
func TestJudgePriorityAndClasses(t *testing.T) {
	pol := daemon.DefaultPodPolicy()
	pol.DefaultEgress, pol.DefaultIngress = 50e6, 80e6
	pol.Allowed["priority"] = true
	type dir struct {
		rate, ceil rate.Rate
		prio       dataplane.Priority
	}
	get := func(l *dataplane.Limit) dir {
		if l == nil {
			return dir{}
		}
		return dir{l.Rate, l.Ceil, l.Priority}
	}
	check := func(name string, j Judged, egress, ingress dir, problem string) {
		t.Helper()
		msg := strings.Join(j.Problems, "; ")
		if get(j.Egress) != egress || get(j.Ingress) != ingress {
			t.Errorf("%s: egress %+v ingress %+v, want %+v %+v (%s)", name, get(j.Egress), get(j.Ingress), egress, ingress, msg)
		}
		if (problem == "") != (msg == "") || !strings.Contains(msg, problem) {
			t.Errorf("%s: problems %q, want one containing %q", name, msg, problem)
		}
	}
	lat, batch, normal := dataplane.PriorityLatency, dataplane.PriorityBatch, dataplane.PriorityNormal
	bu := corev1.PodQOSBurstable

	// The annotation, allowed: both directions, whatever the class.
	check("priority latency", Judge(map[string]string{EgressAnnotation: "1G", IngressAnnotation: "2G", "hbm.io/egress-guarantee": "300M",
		PriorityAnnotation: "latency"}, bu, pol), dir{300e6, 1e9, lat}, dir{2e9, 0, lat}, "")
	for _, bad := range []string{"high", "Latency", "", "1"} {
		check("priority "+bad, Judge(map[string]string{EgressAnnotation: "1G", PriorityAnnotation: bad}, bu, pol),
			dir{50e6, 0, normal}, dir{}, "want latency, normal or batch")
	}
	keep := pol
	keep.OnInvalid = daemon.InvalidKeep
	if j := Judge(map[string]string{EgressAnnotation: "1G", PriorityAnnotation: "urgent"}, bu, keep); !j.KeepEgress || !strings.Contains(strings.Join(j.Problems, ";"), "the egress limit it had") {
		t.Errorf("invalid priority under keep: %+v", j)
	}

	// Classes: Guaranteed latency; Burstable 50% of egress, 25% of ingress;
	// BestEffort batch and 10%.
	pol.Classes = map[string]daemon.ClassDefault{
		"Guaranteed": {Priority: lat, HasPriority: true},
		"Burstable":  {EgressGuarantee: 50, IngressGuarantee: 25},
		"BestEffort": {Priority: batch, HasPriority: true, EgressGuarantee: 10},
	}
	both := map[string]string{EgressAnnotation: "1G", IngressAnnotation: "400M"}
	check("Guaranteed", Judge(both, corev1.PodQOSGuaranteed, pol), dir{1e9, 0, lat}, dir{400e6, 0, lat}, "")
	check("Burstable", Judge(both, bu, pol), dir{500e6, 1e9, normal}, dir{100e6, 400e6, normal}, "")
	check("BestEffort", Judge(both, corev1.PodQOSBestEffort, pol), dir{100e6, 1e9, batch}, dir{400e6, 0, batch}, "")
	check("no class known", Judge(both, "", pol), dir{1e9, 0, normal}, dir{400e6, 0, normal}, "")
	// A share below hbm's minimum rate: the minimum.
	check("BestEffort 10% of 20k", Judge(map[string]string{EgressAnnotation: "20k"}, corev1.PodQOSBestEffort, pol), dir{rate.Min, 20e3, batch}, dir{}, "")
	// No bandwidth annotation: nothing, whatever the class.
	if j := Judge(map[string]string{}, corev1.PodQOSBestEffort, pol); j.Egress != nil || j.Ingress != nil || len(j.Problems) != 0 {
		t.Errorf("no annotations: %+v", j)
	}
	// The pod's own annotations replace the class's, where allowed.
	check("BestEffort, own priority and guarantee", Judge(map[string]string{EgressAnnotation: "1G", PriorityAnnotation: "normal",
		"hbm.io/egress-guarantee": "700M"}, corev1.PodQOSBestEffort, pol), dir{700e6, 1e9, normal}, dir{}, "")
	check("Burstable, own guarantee equal to the bandwidth: a hard cap", Judge(map[string]string{EgressAnnotation: "1G",
		"hbm.io/egress-guarantee": "1G"}, bu, pol), dir{1e9, 0, normal}, dir{}, "")
	// Not allowed: invalid as any option (the default limit), not the class's.
	strict := pol
	strict.Allowed = map[string]bool{}
	check("own priority not allowed", Judge(map[string]string{EgressAnnotation: "1G", PriorityAnnotation: "latency"}, corev1.PodQOSBestEffort, strict),
		dir{50e6, 0, normal}, dir{}, "not allowed on this node")
	check("own guarantee not allowed", Judge(map[string]string{EgressAnnotation: "1G", "hbm.io/egress-guarantee": "900M"}, bu, strict),
		dir{50e6, 0, normal}, dir{}, "not allowed on this node")
	check("class defaults need no allowed option", Judge(map[string]string{EgressAnnotation: "1G"}, corev1.PodQOSBestEffort, strict),
		dir{100e6, 1e9, batch}, dir{}, "")
	// Every class limit is one the data plane takes.
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, bu, corev1.PodQOSBestEffort} {
		j := Judge(both, q, pol)
		for _, l := range []*dataplane.Limit{j.Egress, j.Ingress} {
			if err := l.Validate(); err != nil {
				t.Errorf("%s: %+v: %v", q, l, err)
			}
		}
	}
}
