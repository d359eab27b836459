package k8s

import (
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Driver is kubelet's cgroup driver: how it names the groups it makes.
type Driver int

const (
	DriverUnknown  Driver = iota // no kubepods group yet
	DriverSystemd                // /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice
	DriverCgroupfs               // /kubepods/burstable/pod<uid>
)

func (d Driver) String() string { return [...]string{"unknown", "systemd", "cgroupfs"}[d] }

// Layout is where kubelet keeps its pods' groups: its --cgroup-root (a
// path relative to the cgroup2 mount, "/" by default) and its driver.
type Layout struct {
	Root   string
	Driver Driver
}

// nodeAllocatable is kubelet's name for the group of all pods ("kubepods").
const nodeAllocatable = "kubepods"

// rootName is the cgroup root as kubelet's CgroupName (its components):
// for cgroupfs the path's segments; for systemd the last slice's name split
// at "-" (ParseSystemdToCgroupName: "/a.slice/a-b.slice" is [a b]).
func rootName(root string, d Driver) []string {
	root = path.Clean("/" + root)
	if root == "/" {
		return nil
	}
	if d == DriverSystemd {
		base := strings.TrimSuffix(path.Base(root), ".slice")
		var out []string
		for _, p := range strings.Split(base, "-") {
			out = append(out, strings.ReplaceAll(p, "_", "-"))
		}
		return out
	}
	return strings.Split(strings.Trim(root, "/"), "/")
}

// toPath is kubelet's CgroupName.ToCgroupfs or ToSystemd: for systemd each
// component becomes a slice nested in the one before, named by every
// component so far joined with "-", with "-" inside a component written "_"
// (kubepods, burstable, pod1-2 -> /kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod1_2.slice).
func toPath(name []string, d Driver) string {
	if d != DriverSystemd {
		return "/" + strings.Join(name, "/")
	}
	var (
		b      strings.Builder
		prefix string
	)
	for _, c := range name {
		c = strings.ReplaceAll(c, "-", "_")
		if prefix == "" {
			prefix = c
		} else {
			prefix += "-" + c
		}
		b.WriteString("/" + prefix + ".slice")
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// qosName is the QoS level's component: Guaranteed pods sit directly in
// kubepods, the others in a group of their class.
func qosName(q corev1.PodQOSClass) []string {
	switch q {
	case corev1.PodQOSBurstable:
		return []string{"burstable"}
	case corev1.PodQOSBestEffort:
		return []string{"besteffort"}
	}
	return nil
}

func (l Layout) name(parts ...string) []string {
	return append(append(rootName(l.Root, l.Driver), nodeAllocatable), parts...)
}

// PodCgroup is the pod's group, relative to the cgroup2 mount, as kubelet
// names it ("" while the driver is unknown).
func (l Layout) PodCgroup(q corev1.PodQOSClass, uid types.UID) string {
	if l.Driver == DriverUnknown {
		return ""
	}
	return toPath(l.name(append(qosName(q), "pod"+string(uid))...), l.Driver)
}

// Parents are the groups in which pods' groups appear (kubepods and its
// QoS groups, both drivers' names) and the root, relative to the mount:
// the directories to watch.
func (l Layout) Parents() []string {
	out := []string{path.Clean("/" + l.Root)}
	for _, d := range []Driver{DriverSystemd, DriverCgroupfs} {
		ll := Layout{Root: l.Root, Driver: d}
		out = append(out, toPath(ll.name(), d), toPath(ll.name("burstable"), d), toPath(ll.name("besteffort"), d))
	}
	return out
}

// DetectLayout finds kubelet's driver from the tree mounted at mnt: the
// systemd driver makes <root>/kubepods.slice, cgroupfs <root>/kubepods
// (kubelet creates it at start, before any pod). Unknown while neither
// exists; systemd if both do.
func DetectLayout(mnt, root string) Layout {
	for _, d := range []Driver{DriverSystemd, DriverCgroupfs} {
		l := Layout{Root: root, Driver: d}
		if isDir(filepath.Join(mnt, toPath(l.name(), d))) {
			return l
		}
	}
	return Layout{Root: root}
}

func isDir(p string) bool {
	var st unix.Stat_t
	return unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}
