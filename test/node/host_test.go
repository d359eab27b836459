package node

// The host side effects of a real kubelet and containerd, and their undoing:
// the sysctls the kubelet sets, its shared bind mount of --root-dir and the
// pods' volumes under it, the pods' network namespaces under /run/netns, the
// CNI bridge, the "kubepods" cgroups in every hierarchy, the runtime's shims
// and containers (which are no children of the test: a shim daemonizes), the
// test's bpffs instance, the directories the kubelet and containerd make
// outside their configured roots. What was there before is written to
// stateFile before anything changes, so a run killed half way is cleaned up
// by the next one.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	varDir    = "/var/lib/hbm-node-test" // containerd's root, the kubelet's root, images, the bpffs
	runDir    = "/run/hbm-node-test"     // sockets, containerd's state, runc's root
	stateFile = "/run/hbm-node-test.state"
	lockFile  = "/run/hbm-node-test.lock"
	netnsDir  = "/run/netns"

	bridgeName = "hbmnode0" // the CNI bridge; it also holds svcIP
)

// kubeletSysctls are the sysctls the kubelet sets at start when
// protectKernelDefaults is false (pkg/kubelet/cm: setupKernelTunables), and
// the kubelet refuses to start with it true where they differ.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	// Not the kubelet's: the test adds trafficCC here (allowTrafficCC).
	"net/ipv4/tcp_allowed_congestion_control",
}

// hostState is what the host had before the test changed it.
type hostState struct {
	Sysctls          map[string]string
	NetnsBefore      []string // entries of /run/netns
	HadRunContainerd bool     // containerd's shims put sockets in /run/containerd whatever its state dir
	HadVarLibKubelet bool     // the kubelet makes /var/lib/kubelet/device-plugins whatever its root dir
	HadIPTables      []string // "table chain" of the kubelet's chain names that existed
}

// kubeletChains are the iptables chains the kubelet makes when
// makeIPTablesUtilChains is true (it is false here; removed if they appear).
var kubeletChains = []string{"filter KUBE-FIREWALL", "filter KUBE-KUBELET-CANARY", "mangle KUBE-KUBELET-CANARY",
	"nat KUBE-KUBELET-CANARY", "mangle KUBE-IPTABLES-HINT", "nat KUBE-MARK-DROP", "nat KUBE-MARK-MASQ", "nat KUBE-POSTROUTING"}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	return strings.TrimSpace(string(b)), err
}

func iptablesChains() []string {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil
	}
	var have []string
	for _, tc := range kubeletChains {
		f := strings.Fields(tc)
		if exec.Command("iptables", "-w", "5", "-t", f[0], "-n", "-L", f[1]).Run() == nil {
			have = append(have, tc)
		}
	}
	return have
}

// saveHostState records the host as it is and writes it to stateFile.
func saveHostState() (*hostState, error) {
	st := &hostState{Sysctls: map[string]string{}, HadRunContainerd: exists("/run/containerd"),
		HadVarLibKubelet: exists("/var/lib/kubelet"), HadIPTables: iptablesChains()}
	for _, s := range kubeletSysctls {
		v, err := readSysctl(s)
		if err != nil {
			return nil, err
		}
		st.Sysctls[s] = v
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		st.NetnsBefore = append(st.NetnsBefore, e.Name())
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(stateFile+".tmp", b, 0o600); err != nil {
		return nil, err
	}
	return st, os.Rename(stateFile+".tmp", stateFile)
}

// loadHostState reads a crashed run's stateFile (nil if there is none).
func loadHostState() (*hostState, error) {
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st := &hostState{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("%s: %w", stateFile, err)
	}
	return st, nil
}

// mount is one line of /proc/self/mountinfo.
type mount struct{ point, fstype string }

func mounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescape(fields[4]), fstype: fields[sep+1]})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// cgroupMounts are the mount points of every cgroup v1 hierarchy and of
// cgroup2.
func cgroupMounts() []string {
	var out []string
	for _, m := range mounts() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out
}

// podProcesses returns the PIDs in every group under kubepods, in every
// hierarchy (a container's processes, however the runtime left them).
func podProcesses() []int {
	seen := map[int]bool{}
	for _, root := range cgroupMounts() {
		filepath.WalkDir(filepath.Join(root, "kubepods"), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var out []int
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}

// shimProcesses returns the PIDs of containerd shims serving this test's
// containerd (their -address is under runDir).
func shimProcesses() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "containerd-shim-runc-v2") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && under(args[i+1], runDir) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// cleanupHost undoes everything the test may have done to the host, from
// this run or a crashed one; st is what the host had before (nil: only
// what can be undone without it). It returns what it could not undo.
func cleanupHost(st *hostState, logf func(string, ...any)) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// Processes: the containers (in kubepods), then the shims. The test's
	// own children (etcd, apiserver, containerd, kubelet) are killed by
	// their process groups in the test's cleanups, before this runs.
	for round := 0; round < 50; round++ {
		pids := append(podProcesses(), shimProcesses()...)
		if len(pids) == 0 {
			break
		}
		if round == 0 {
			logf("cleanup: killing %d leftover container and shim processes", len(pids))
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
		if round == 49 {
			fail("processes still running after SIGKILL for 5s: %v", pids)
		}
	}

	// Mounts: everything under the test's directories (the kubelet's shared
	// bind mount of its root dir, pods' volumes, containers' rootfs, the
	// bpffs), and the network namespaces the runtime pinned under
	// /run/netns that were not there before. /run/netns itself is never
	// unmounted (it may be the host's shared mount, as here).
	before := map[string]bool{}
	if st != nil {
		for _, n := range st.NetnsBefore {
			before[n] = true
		}
	}
	var netns []string
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			// Only the runtime's own names (cni-UUID) that were not there
			// before: other users of /run/netns (ip netns, other tests)
			// come and go meanwhile.
			if strings.HasPrefix(e.Name(), "cni-") && !before[e.Name()] {
				netns = append(netns, filepath.Join(netnsDir, e.Name()))
			}
		}
	}
	for round := 0; round < 5; round++ {
		var points []string
		for _, m := range mounts() {
			p := m.point
			keep := !under(p, varDir) && !under(p, runDir)
			for _, n := range netns {
				if p == n {
					keep = false
				}
			}
			if !keep {
				points = append(points, p)
			}
		}
		if len(points) == 0 {
			break
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) }) // deepest first
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && round == 4 {
				fail("unmount %s: %v", p, err)
			}
		}
	}
	for _, n := range netns {
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			fail("remove %s: %v", n, err)
		}
	}

	// Links: the CNI bridge (the pods' veths went with their namespaces).
	for _, l := range []string{bridgeName} {
		if exec.Command("ip", "link", "show", "dev", l).Run() == nil {
			if out, err := exec.Command("ip", "link", "del", "dev", l).CombinedOutput(); err != nil {
				fail("ip link del %s: %v: %s", l, err, out)
			}
		}
	}

	// iptables chains the kubelet may have made (none with
	// makeIPTablesUtilChains: false; checked all the same).
	if st != nil {
		had := map[string]bool{}
		for _, c := range st.HadIPTables {
			had[c] = true
		}
		for _, tc := range iptablesChains() {
			if had[tc] {
				continue
			}
			f := strings.Fields(tc)
			// Jumps to it first (the kubelet adds INPUT/OUTPUT jumps to KUBE-FIREWALL).
			for _, base := range []string{"INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"} {
				for i := 0; i < 10 && exec.Command("iptables", "-w", "5", "-t", f[0], "-D", base, "-j", f[1]).Run() == nil; i++ {
				}
			}
			exec.Command("iptables", "-w", "5", "-t", f[0], "-F", f[1]).Run()
			if out, err := exec.Command("iptables", "-w", "5", "-t", f[0], "-X", f[1]).CombinedOutput(); err != nil {
				fail("iptables -t %s -X %s: %v: %s", f[0], f[1], err, out)
			}
		}
	}

	// cgroups: kubepods (and ctr's k8s.io) in every hierarchy, deepest first.
	for _, root := range cgroupMounts() {
		for _, top := range []string{"kubepods", "k8s.io"} {
			var dirs []string
			filepath.WalkDir(filepath.Join(root, top), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, d := range dirs {
				var err error
				for i := 0; i < 50; i++ {
					if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
						err = nil
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					fail("rmdir %s: %v", d, err)
				}
			}
		}
	}

	// sysctls
	if st != nil {
		for name, v := range st.Sysctls {
			if cur, _ := readSysctl(name); cur != v {
				if err := os.WriteFile("/proc/sys/"+name, []byte(v), 0o644); err != nil {
					fail("restore sysctl %s=%s: %v", name, v, err)
				} else {
					logf("cleanup: restored %s %s -> %s", strings.ReplaceAll(name, "/", "."), cur, v)
				}
			}
		}
	}

	// Directories, once nothing is mounted under them (else RemoveAll
	// would walk into a bind mount of the host's files).
	dirs := []string{varDir, runDir}
	if st != nil && !st.HadRunContainerd {
		dirs = append(dirs, "/run/containerd")
	}
	if st != nil && !st.HadVarLibKubelet {
		dirs = append(dirs, "/var/lib/kubelet")
	}
	ms := mounts()
	for _, d := range dirs {
		busy := false
		for _, m := range ms {
			if under(m.point, d) {
				busy = true
				fail("not removing %s: %s is still mounted", d, m.point)
				break
			}
		}
		if !busy {
			if err := os.RemoveAll(d); err != nil {
				fail("remove %s: %v", d, err)
			}
		}
	}
	if len(errs) == 0 {
		os.Remove(stateFile)
	}
	return errs
}
