package k8s

import (
	"fmt"

	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Limits are what a pod's annotations declare: nil for a direction without
// a bandwidth annotation.
type Limits struct {
	Egress, Ingress *dataplane.Limit
}

// Empty reports whether no direction is limited.
func (l Limits) Empty() bool { return l.Egress == nil && l.Ingress == nil }

// ParseLimits turns a pod's annotations into limits: the standard
// annotations as kubelet reads them, then hbm's range, then the hbm.io/
// options. Any error concerns the pod as a whole (as in kubelet, an invalid
// ingress value also voids a valid egress one): the caller keeps the pod's
// previous limits.
func ParseLimits(annotations map[string]string) (Limits, error) {
	var out Limits
	ingress, egress, err := ExtractPodBandwidthResources(annotations)
	if err != nil {
		return out, err
	}
	eo, io, err := parseOptions(annotations)
	if err != nil {
		return out, err
	}
	if ingress != nil {
		r, err := toRate(ingress)
		if err != nil {
			return Limits{}, fmt.Errorf("%s: %w", IngressAnnotation, err)
		}
		l, err := io.build(r)
		if err != nil {
			return Limits{}, fmt.Errorf("%s %v: %w", IngressAnnotation, r, err)
		}
		out.Ingress = &l
	}
	if egress != nil {
		r, err := toRate(egress)
		if err != nil {
			return Limits{}, fmt.Errorf("%s: %w", EgressAnnotation, err)
		}
		l, err := eo.build(r)
		if err != nil {
			return Limits{}, fmt.Errorf("%s %v: %w", EgressAnnotation, r, err)
		}
		out.Egress = &l
	}
	return out, nil
}
