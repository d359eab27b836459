package k8s

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"

// kubelet's names for the pod's group, both drivers, all QoS classes, with
// the default --cgroup-root and another one.
func TestPodCgroup(t *testing.T) {
	for _, c := range []struct {
		root string
		d    Driver
		q    corev1.PodQOSClass
		want string
	}{
		{"/", DriverSystemd, corev1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"},
		{"/", DriverSystemd, corev1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"},
		{"/", DriverSystemd, corev1.PodQOSGuaranteed, "/kubepods.slice/kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"},
		{"/", DriverCgroupfs, corev1.PodQOSBurstable, "/kubepods/burstable/pod" + uid},
		{"/", DriverCgroupfs, corev1.PodQOSBestEffort, "/kubepods/besteffort/pod" + uid},
		{"/", DriverCgroupfs, corev1.PodQOSGuaranteed, "/kubepods/pod" + uid},
		{"", DriverCgroupfs, corev1.PodQOSGuaranteed, "/kubepods/pod" + uid},
		{"/k8s/nodes", DriverCgroupfs, corev1.PodQOSBurstable, "/k8s/nodes/kubepods/burstable/pod" + uid},
		// systemd: --cgroup-root /k8s.slice: its components, then kubepods.
		{"/k8s.slice", DriverSystemd, corev1.PodQOSGuaranteed, "/k8s.slice/k8s-kubepods.slice/k8s-kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"},
		{"/a.slice/a-b.slice", DriverSystemd, corev1.PodQOSBestEffort, "/a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-besteffort.slice/a-b-kubepods-besteffort-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"},
		{"/", DriverUnknown, corev1.PodQOSBurstable, ""},
	} {
		if got := (Layout{Root: c.root, Driver: c.d}).PodCgroup(c.q, uid); got != c.want {
			t.Errorf("%s %v %s: %s, want %s", c.root, c.d, c.q, got, c.want)
		}
	}
}

func TestDetectLayout(t *testing.T) {
	mnt := t.TempDir()
	if l := DetectLayout(mnt, "/"); l.Driver != DriverUnknown {
		t.Errorf("empty tree: %v", l.Driver)
	}
	os.MkdirAll(filepath.Join(mnt, "kubepods", "burstable"), 0o755)
	if l := DetectLayout(mnt, "/"); l.Driver != DriverCgroupfs {
		t.Errorf("kubepods: %v", l.Driver)
	}
	os.MkdirAll(filepath.Join(mnt, "kubepods.slice"), 0o755)
	if l := DetectLayout(mnt, "/"); l.Driver != DriverSystemd {
		t.Errorf("kubepods.slice: %v", l.Driver)
	}
	os.MkdirAll(filepath.Join(mnt, "r.slice", "r-kubepods.slice"), 0o755)
	if l := DetectLayout(mnt, "/r.slice"); l.Driver != DriverSystemd || l.Root != "/r.slice" {
		t.Errorf("root /r.slice: %+v", l)
	}
	want := []string{"/", "/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice", "/kubepods.slice/kubepods-besteffort.slice",
		"/kubepods", "/kubepods/burstable", "/kubepods/besteffort"}
	got := (Layout{Root: "/"}).Parents()
	if len(got) != len(want) {
		t.Fatalf("parents %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parents %v, want %v", got, want)
		}
	}
}

func res(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

func TestQOSClass(t *testing.T) {
	pod := func(init []corev1.ResourceRequirements, cs ...corev1.ResourceRequirements) *corev1.Pod {
		p := &corev1.Pod{}
		for _, r := range cs {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: r})
		}
		for _, r := range init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Resources: r})
		}
		return p
	}
	rr := func(req, lim corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: req, Limits: lim}
	}
	for name, c := range map[string]struct {
		p    *corev1.Pod
		want corev1.PodQOSClass
	}{
		"nothing":              {pod(nil, rr(nil, nil)), corev1.PodQOSBestEffort},
		"zero requests":        {pod(nil, rr(res("0", "0"), nil)), corev1.PodQOSBestEffort},
		"equal":                {pod(nil, rr(res("1", "1Gi"), res("1", "1Gi"))), corev1.PodQOSGuaranteed},
		"equal, two":           {pod(nil, rr(res("1", "1Gi"), res("1", "1Gi")), rr(res("2", "1G"), res("2", "1G"))), corev1.PodQOSGuaranteed},
		"cpu limit only":       {pod(nil, rr(res("1", ""), res("1", ""))), corev1.PodQOSBurstable},
		"lower request":        {pod(nil, rr(res("500m", "1Gi"), res("1", "1Gi"))), corev1.PodQOSBurstable},
		"one container free":   {pod(nil, rr(res("1", "1Gi"), res("1", "1Gi")), rr(nil, nil)), corev1.PodQOSBurstable},
		"request only":         {pod(nil, rr(res("1", ""), nil)), corev1.PodQOSBurstable},
		"init container burst": {pod([]corev1.ResourceRequirements{rr(res("1", ""), nil)}, rr(res("1", "1Gi"), res("1", "1Gi"))), corev1.PodQOSBurstable},
	} {
		if got := QOSClass(c.p); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	p := pod(nil, rr(nil, nil))
	p.Status.QOSClass = corev1.PodQOSGuaranteed // the API server's word wins
	if got := QOSClass(p); got != corev1.PodQOSGuaranteed {
		t.Errorf("status.qosClass ignored: %s", got)
	}
}
