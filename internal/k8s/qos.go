package k8s

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QOSClass is the pod's QoS class, which decides where kubelet puts its
// cgroup: status.qosClass (the API server sets it when the pod is created,
// and it never changes), else computed from the spec as kubelet's
// ComputePodQOS does (pkg/apis/core/v1/helper/qos) for container-level
// resources:
//   - no cpu or memory request or limit in any container (init containers
//     included): BestEffort;
//   - every container has cpu and memory limits, and the pod's summed
//     requests equal its summed limits for every resource: Guaranteed;
//   - otherwise Burstable.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return computeQOS(pod)
}

func computeQOS(pod *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	add := func(sum corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		d := q.DeepCopy()
		if prev, ok := sum[name]; ok {
			d.Add(prev)
		}
		sum[name] = d
	}
	qosResource := func(n corev1.ResourceName) bool { return n == corev1.ResourceCPU || n == corev1.ResourceMemory }
	containers := append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, c := range containers {
		for name, q := range c.Resources.Requests {
			if qosResource(name) && q.Sign() > 0 {
				add(requests, name, q)
			}
		}
		found := map[corev1.ResourceName]bool{}
		for name, q := range c.Resources.Limits {
			if qosResource(name) && q.Sign() > 0 {
				found[name] = true
				add(limits, name, q)
			}
		}
		if !found[corev1.ResourceCPU] || !found[corev1.ResourceMemory] {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}
