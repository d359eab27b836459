// Package k8s is the Kubernetes source of `hbm daemon --kubernetes`: it
// watches the pods of one node and declares, for each pod's cgroup, the
// limits its kubernetes.io/egress-bandwidth and ingress-bandwidth
// annotations ask for. The pieces:
//
//   - bandwidth.go: the standard annotations, parsed exactly as kubelet does;
//   - options.go: the optional hbm.io/... annotations (hbm set's options);
//   - podlimits.go: a pod's annotations turned into data plane limits;
//   - qos.go, cgroups.go: a pod's QoS class and its cgroup, for both of
//     kubelet's cgroup drivers, the driver read from the host's tree;
//   - source.go: the informer, the Events, and what the daemon asks for.
package k8s

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hbm-dev/hbm/internal/rate"
)

// The standard annotations (kubelet's and the CNI bandwidth plugin's).
const (
	IngressAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressAnnotation  = "kubernetes.io/egress-bandwidth"
)

// kubelet's bounds (pkg/util/bandwidth: minRsrc 1k, maxRsrc 1P), the lower
// one as the largest value whose rounded-up integer is below 1k.
var (
	belowBandwidth = resource.MustParse("999")
	maxBandwidth   = resource.MustParse("1P")
)

// validateBandwidthIsReasonable is kubelet's check of the same name, with
// its messages: a Quantity's integer value (rounded up) must lie within
// [1k, 1P]. kubelet compares q.Value(), which is the value modulo 2^64
// (resource.Quantity does not saturate there): "-18446744072709551616"
// (-2^64 + 1e9) passes its check as 1G and "18446744073709551616" (2^64)
// fails it as 0. This compares the exact values instead, so every value
// outside the range is refused with the message for its side, and a value
// within it is judged as kubelet judges it: ceil(q) < 1k is q <= 999,
// ceil(q) > 1P is q > 1P.
func validateBandwidthIsReasonable(q *resource.Quantity) error {
	if q.Cmp(belowBandwidth) <= 0 {
		return fmt.Errorf("resource is unreasonably small (< 1kbit)")
	}
	if q.Cmp(maxBandwidth) > 0 {
		return fmt.Errorf("resource is unreasonably large (> 1Pbit)")
	}
	return nil
}

// ExtractPodBandwidthResources reads the two annotations as kubelet's
// function of the same name does (k8s.io/kubernetes pkg/util/bandwidth,
// which containerd copies): each value is a resource.Quantity in bits per
// second ("10M", "1Gi", "500k"); ingress is read first; any error (a value
// that does not parse, or lies outside [1k, 1P]) makes the whole result an
// error, both directions. An annotation that is absent gives nil.
func ExtractPodBandwidthResources(annotations map[string]string) (ingress, egress *resource.Quantity, err error) {
	if annotations == nil {
		return nil, nil, nil
	}
	if s, ok := annotations[IngressAnnotation]; ok {
		v, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, nil, err
		}
		ingress = &v
		if err := validateBandwidthIsReasonable(ingress); err != nil {
			return nil, nil, err
		}
	}
	if s, ok := annotations[EgressAnnotation]; ok {
		v, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, nil, err
		}
		egress = &v
		if err := validateBandwidthIsReasonable(egress); err != nil {
			return nil, nil, err
		}
	}
	return ingress, egress, nil
}

// toRate turns a valid bandwidth Quantity into an hbm rate. kubelet accepts
// 1 kbit/s to 1 Pbit/s; hbm enforces 8 kbit/s to 400 Gbit/s, so a value
// kubelet takes but hbm cannot enforce is an error too (reported the same
// way, never rounded into a different limit).
func toRate(q *resource.Quantity) (rate.Rate, error) {
	if err := validateBandwidthIsReasonable(q); err != nil {
		return 0, err // q.Value() below would wrap
	}
	v := q.Value() // bits per second, rounded up as kubelet rounds; exact within [1k, 1P]
	if v < int64(rate.Min) || v > int64(rate.Max) {
		return 0, fmt.Errorf("%s bit/s is outside the range hbm enforces (%v to %v)", q.String(), rate.Min, rate.Max)
	}
	return rate.Rate(v), nil
}
