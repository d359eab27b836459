package probe

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Paths the checks read; variables so that tests can point them elsewhere.
var (
	procSelfStatus = "/proc/self/status"
	procMountinfo  = "/proc/self/mountinfo"
	procFilesystem = "/proc/filesystems"
	capLastCapPath = "/proc/sys/kernel/cap_last_cap"
	vmlinuxBTF     = "/sys/kernel/btf/vmlinux"
	bpffsDir       = "/sys/fs/bpf"
	bpfStatsPath   = "/proc/sys/kernel/bpf_stats_enabled"
	tcpCCDir       = "/proc/sys/net/ipv4"
	kernelConfig   = "/proc/config.gz"
)

func checkKernel() (string, string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", "", err
	}
	return fmt.Sprintf("Linux %s %s", unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])), "", nil
}

// Capabilities HBM needs (linux/capability.h).
const (
	capNetAdmin  = 12
	capSysPtrace = 19
	capSysAdmin  = 21
	capBPF       = 39
)

func checkPrivileges() (string, string, error) {
	const hint = "run hbm as root (or with CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)"
	eff, err := effectiveCaps()
	if err != nil {
		return "", hint, err
	}
	lastCap := -1
	if b, err := os.ReadFile(capLastCapPath); err == nil {
		lastCap, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	who := fmt.Sprintf("uid %d", os.Geteuid())
	if os.Geteuid() == 0 {
		who = "root (uid 0)"
	}
	if missing := missingCaps(eff, lastCap); len(missing) > 0 {
		return who, hint, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return who + " with CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN", "", nil
}

// checkSysPtrace: the socket walker enters other processes' network
// namespaces through /proc/PID/ns/net, which takes CAP_SYS_PTRACE unless
// hbm runs with every capability they hold and as their uid.
func checkSysPtrace() (string, string, error) {
	const hint = "add CAP_SYS_PTRACE (deploy/systemd/hbm.service, deploy/kubernetes/daemonset.yaml ship it): without it set and unset warn that they did not reach connections in other network namespaces"
	eff, err := effectiveCaps()
	if err != nil {
		return "", hint, err
	}
	if eff&(1<<capSysPtrace) == 0 {
		return "", hint, errors.New("missing CAP_SYS_PTRACE")
	}
	return "CAP_SYS_PTRACE: the socket walker can enter other processes' network namespaces", "", nil
}

// effectiveCaps is this process's effective capability set.
func effectiveCaps() (uint64, error) {
	status, err := os.ReadFile(procSelfStatus)
	if err != nil {
		return 0, err
	}
	return parseCapEff(string(status))
}

// parseCapEff reads the effective capability set from /proc/<pid>/status.
func parseCapEff(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// missingCaps names the capabilities HBM needs that eff lacks. Kernels that
// predate CAP_BPF (lastCap < 39, Linux < 5.8) gate BPF on CAP_SYS_ADMIN, so
// CAP_BPF is only asked for where it exists; lastCap < 0 means unknown.
func missingCaps(eff uint64, lastCap int) []string {
	var missing []string
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	if !has(capBPF) && (lastCap < 0 || lastCap >= capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(capSysAdmin) {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	return missing
}

func checkCgroup2() (string, string, error) {
	mnt, err := cgroup.Mount()
	if err != nil {
		return "", "mount it: mount -t cgroup2 none /sys/fs/cgroup (or boot with systemd.unified_cgroup_hierarchy)", err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return mnt, "", err
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return mnt, "", fmt.Errorf("not a cgroup2 filesystem (magic %#x)", st.Type)
	}
	return "mounted at " + mnt, "", nil
}

// mountAt describes the topmost mount at a directory, from mountinfo.
type mountAt struct {
	fstype   string
	readOnly bool
}

// findMount returns the topmost mount at dir (the last mountinfo line for it,
// as later mounts cover earlier ones), or false if nothing is mounted there.
func findMount(mountinfo io.Reader, dir string) (mountAt, bool, error) {
	var m mountAt
	found := false
	s := bufio.NewScanner(mountinfo)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(s.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 6 || sep+1 >= len(f) || unescapeOctal(f[4]) != dir {
			continue
		}
		found = true
		m = mountAt{fstype: f[sep+1]}
		for _, o := range strings.Split(f[5], ",") {
			if o == "ro" {
				m.readOnly = true
			}
		}
	}
	return m, found, s.Err()
}

// unescapeOctal undoes mountinfo's \ooo escapes (\040 for a space).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func checkBPFFS() (string, string, error) {
	f, err := os.Open(procMountinfo)
	if err != nil {
		return "", "", err
	}
	m, found, err := findMount(f, bpffsDir)
	f.Close()
	if err != nil {
		return "", "", err
	}
	mountHint := "mount -t bpf bpf " + bpffsDir
	if found {
		if m.fstype != "bpf" {
			return "", "", fmt.Errorf("%s is a %s mount, not bpffs", bpffsDir, m.fstype)
		}
		if m.readOnly {
			return "", "remount it read-write: mount -o remount,rw " + bpffsDir, fmt.Errorf("%s is mounted read-only", bpffsDir)
		}
		// Prove it writable the way pinning needs: make and remove a directory
		// (no dot in the name: bpffs reserves names with dots, EPERM).
		probeDir := filepath.Join(bpffsDir, fmt.Sprintf("hbm-check-%d", os.Getpid()))
		if err := unix.Mkdir(probeDir, 0o700); err != nil {
			return "mounted at " + bpffsDir, "", fmt.Errorf("not writable: %w", err)
		}
		_ = unix.Rmdir(probeDir)
		return "mounted at " + bpffsDir + ", writable", "", nil
	}
	if !filesystemSupported(procFilesystem, "bpf") {
		return "", "the kernel has no bpf filesystem (CONFIG_BPF_SYSCALL)", fmt.Errorf("not mounted at %s and not in %s", bpffsDir, procFilesystem)
	}
	if err := tryMountBPFFS(bpffsDir); err != nil {
		return "not mounted at " + bpffsDir, mountHint, fmt.Errorf("test mount failed: %w", err)
	}
	return "not mounted at " + bpffsDir + "; `hbm set` mounts it (test mount in a private mount namespace worked)", "", nil
}

// filesystemSupported reports whether /proc/filesystems lists fstype.
func filesystemSupported(path, fstype string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == fstype {
			return true
		}
	}
	return false
}

// tryMountBPFFS mounts a bpffs at dir, writes to it and unmounts it, all in a
// private mount namespace of a throwaway thread, so nothing on the host sees
// the mount. The thread stays locked and so dies with the goroutine.
func tryMountBPFFS(dir string) error {
	if st, err := os.Stat(dir); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread's mount namespace is not the process's.
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare mount namespace: %w", err)
			}
			// Keep the test mount from propagating back to the host.
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
				return fmt.Errorf("mount -t bpf: %w", err)
			}
			defer unix.Unmount(dir, unix.MNT_DETACH)
			sub := filepath.Join(dir, "hbm")
			if err := unix.Mkdir(sub, 0o700); err != nil {
				return fmt.Errorf("mkdir on bpffs: %w", err)
			}
			return unix.Rmdir(sub)
		}()
	}()
	return <-errc
}

func checkBTF() (string, string, error) {
	const hint = "HBM needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
	st, err := os.Stat(vmlinuxBTF)
	if err != nil {
		return "", hint, err
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return vmlinuxBTF, hint, err
	}
	return fmt.Sprintf("%s (%d KiB)", vmlinuxBTF, st.Size()/1024), "", nil
}

// retProgram is a cgroup_skb program of the given attach type returning ret.
func retProgram(attach ebpf.AttachType, ret int32) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Name:       "hbm_check",
		Type:       ebpf.CGroupSKB,
		AttachType: attach,
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, ret),
			asm.Return(),
		},
	}
}

func loadAndClose(spec *ebpf.ProgramSpec) error {
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		return err
	}
	return p.Close()
}

func checkCgroupSKB() (string, string, error) {
	if err := features.HaveProgramType(ebpf.CGroupSKB); err != nil {
		return "", "needs CONFIG_CGROUP_BPF=y", err
	}
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetEgress, 1)); err != nil {
		return "", "", fmt.Errorf("load egress program: %w", err)
	}
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetIngress, 1)); err != nil {
		return "", "", fmt.Errorf("load ingress program: %w", err)
	}
	return "egress and ingress programs load", "", nil
}

func checkEgressCongestion() (string, string, error) {
	// Before Linux 5.3 the verifier rejects cgroup_skb return values > 1;
	// since then an egress program may return 2|1 to pass the packet and
	// make TCP enter CWR.
	if err := loadAndClose(retProgram(ebpf.AttachCGroupInetEgress, 3)); err != nil {
		return "", "needs Linux >= 5.3; without it hbm cannot tell TCP to slow down without dropping", fmt.Errorf("egress program returning 3 rejected: %w", err)
	}
	return "egress program may return 0..3 (bit 1: congestion, tcp_enter_cwr)", "", nil
}

// Helpers HBM's cgroup_skb programs (the policers) call, each with what it
// is for and since when cgroup_skb programs may call it: a kernel without one
// refuses the programs. bpf_spin_lock and bpf_spin_unlock are the spin_lock
// check's (TestHelpersCoverPolicers keeps the list whole).
var helpers = []struct {
	fn   asm.BuiltinFunc
	name string
	why  string
}{
	{asm.FnSkbAncestorCgroupId, "bpf_skb_ancestor_cgroup_id", "the policers find the limits on a packet's cgroup path with it; cgroup_skb programs have it since Linux 5.8"},
	{asm.FnSkbEcnSetCe, "bpf_skb_ecn_set_ce", "CE marks; Linux >= 5.1"},
	{asm.FnTcpSock, "bpf_tcp_sock", "the flow's TCP state; Linux >= 5.1"},
	{asm.FnSkFullsock, "bpf_sk_fullsock", "the packet's socket; Linux >= 5.1"},
	{asm.FnSkStorageGet, "bpf_sk_storage_get", "per-socket state; cgroup_skb programs have it since Linux 5.2"},
	{asm.FnSkbLoadBytes, "bpf_skb_load_bytes", "packet headers"},
	{asm.FnMapLookupElem, "bpf_map_lookup_elem", "the limits and queues"},
	{asm.FnKtimeGetNs, "bpf_ktime_get_ns", "the virtual queues' clock"},
	{asm.FnGetPrandomU32, "bpf_get_prandom_u32", "the congestion code's ramp"},
	// The handshake gate (bpf/include/gate.h) finds a SYN-ACK's request
	// socket and learns its listener's groups.
	{asm.FnSkcLookupTcp, "bpf_skc_lookup_tcp", "the handshake gate finds a SYN-ACK's request socket; cgroup_skb programs have it since Linux 5.2"},
	{asm.FnSkRelease, "bpf_sk_release", "releases what bpf_skc_lookup_tcp found"},
	{asm.FnSkcToTcpRequestSock, "bpf_skc_to_tcp_request_sock", "the handshake gate reads the request's timeout; Linux >= 5.9"},
	{asm.FnProbeReadKernel, "bpf_probe_read_kernel", "CO-RE reads of kernel structures (BPF_CORE_READ); Linux >= 5.5"},
	{asm.FnJiffies64, "bpf_jiffies64", "the handshake gate measures the kernel's tick; Linux >= 5.5"},
	{asm.FnMapUpdateElem, "bpf_map_update_elem", "the handshake gate's listener map"},
}

// haveHelper probes whether a program of type pt may call fn; a variable so
// that tests can take a helper away.
var haveHelper = features.HaveProgramHelper

func checkHelpers() (string, string, error) {
	var have, missing, hints []string
	var firstErr error
	for _, h := range helpers {
		err := haveHelper(ebpf.CGroupSKB, h.fn)
		if err == nil {
			have = append(have, h.name)
			continue
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			missing = append(missing, h.name)
		} else {
			missing = append(missing, h.name+" (probe failed)")
		}
		hints = append(hints, h.name+": "+h.why)
		if firstErr == nil {
			firstErr = err
		}
	}
	if len(missing) > 0 {
		return "", "cgroup_skb programs cannot call what HBM's policers need (" + strings.Join(hints, "; ") + ")",
			fmt.Errorf("missing %s: %w", strings.Join(missing, ", "), firstErr)
	}
	return strings.Join(have, " "), "", nil
}

func checkSpinLock() (string, string, error) {
	var objs spinlockObjects
	if err := loadSpinlockObjects(&objs, nil); err != nil {
		return "", "bpf_spin_lock in map values needs Linux >= 5.1 with BTF", err
	}
	defer objs.Close()
	// Exercise the lock from user space too (BPF_F_LOCK, as hbm's control
	// plane may update a group's queue under the lock).
	key := uint32(0)
	val := spinlockProbeVq{Credit: 1}
	if err := objs.ProbeVqs.Update(key, val, ebpf.UpdateAny|ebpf.UpdateLock); err != nil {
		return "", "", fmt.Errorf("update with BPF_F_LOCK: %w", err)
	}
	// Run the program once (BPF_PROG_TEST_RUN) to see the lock taken and the
	// value updated; kernels without test runs for cgroup_skb skip this.
	ret, err := objs.ProbeSpinLock.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if errors.Is(err, ebpf.ErrNotSupported) {
		return "hash map value with bpf_spin_lock, cgroup_skb program loads", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("test run: %w", err)
	}
	var got spinlockProbeVq
	if err := objs.ProbeVqs.LookupWithFlags(key, &got, ebpf.LookupLock); err != nil {
		return "", "", fmt.Errorf("lookup with BPF_F_LOCK: %w", err)
	}
	if ret != 1 || got.Credit <= 1 {
		return "", "", fmt.Errorf("test run returned %d, credit %d: the program did not update the value", ret, got.Credit)
	}
	return "hash map value with bpf_spin_lock, taken by a cgroup_skb program", "", nil
}

// checkCgroupLevel reads the cgroup mount's root level with the BPF cgroup
// iterator `hbm set` uses to check a group's depth from the real root (no
// per-CPU maps are used any more: the check they had is gone).
func checkCgroupLevel() (string, string, error) {
	const hint = "hbm set reads a group's level with a BPF cgroup iterator: Linux >= 6.1"
	g, err := cgroup.Resolve("/")
	if err != nil {
		return "", "", err
	}
	lvl, err := cgroup.Level(g)
	if err != nil {
		return "", hint, err
	}
	return fmt.Sprintf("the cgroup mount's root is at level %d", lvl), "", nil
}

// checkPrograms loads HBM's own programs (private maps, nothing pinned or
// attached) and reports the verifier's verdict: the checks above probe
// features one at a time, and a kernel can have each and still refuse the
// whole (an older verifier's limits, a helper in a program type).
func checkPrograms() (string, string, error) {
	const hint = "the kernel's verifier refuses HBM's programs: hbm set would fail the same way (the error has the verifier's log)"
	vs, err := dataplane.Verify()
	if err != nil {
		return "", hint, err
	}
	var parts []string
	for _, v := range vs {
		if v.Instructions == 0 {
			parts = append(parts, v.Name+" loaded")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d%%", v.Name, (uint64(v.Instructions)*100+dataplane.VerifierLimit-1)/dataplane.VerifierLimit))
	}
	return "verified (share of the verifier's limit): " + strings.Join(parts, ", "), "", nil
}

func checkCgroupLink() (string, string, error) {
	const hint = "BPF links for cgroups need Linux >= 5.7"
	if _, err := cgroup.Mount(); err != nil {
		return "", "", fmt.Errorf("needs cgroup v2: %w", err)
	}
	g, err := cgroup.Create(fmt.Sprintf("hbm-check-%d", os.Getpid()))
	if err != nil {
		return "", "", err
	}
	defer cgroup.Remove(g.Rel)
	dir, err := os.Open(g.Dir)
	if err != nil {
		return "", "", err
	}
	defer dir.Close()
	for _, attach := range []ebpf.AttachType{ebpf.AttachCGroupInetEgress, ebpf.AttachCGroupInetIngress} {
		prog, err := ebpf.NewProgram(retProgram(attach, 1))
		if err != nil {
			return "", "", fmt.Errorf("load %s program: %w", attach, err)
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(dir.Fd()), Program: prog, Attach: attach})
		prog.Close()
		if err != nil {
			return "", hint, fmt.Errorf("link %s to a cgroup: %w", attach, err)
		}
		l.Close()
	}
	return "egress and ingress links attach to a cgroup", "", nil
}

func checkStructOps() (string, string, error) {
	const hint = "`hbm cc` (BPF DCTCP) is unavailable; hbm works with the kernel's congestion controls"
	if err := features.HaveProgramType(ebpf.StructOps); err != nil {
		return "", hint, fmt.Errorf("struct_ops programs: %w", err)
	}
	if err := features.HaveMapType(ebpf.StructOpsMap); err != nil {
		return "", hint, fmt.Errorf("struct_ops maps: %w", err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return "", hint, fmt.Errorf("kernel BTF: %w", err)
	}
	for _, name := range []string{"tcp_congestion_ops", "bpf_struct_ops_tcp_congestion_ops"} {
		var s *btf.Struct
		if err := spec.TypeByName(name, &s); err != nil {
			return "", hint, fmt.Errorf("no struct %s in kernel BTF (CONFIG_BPF_JIT, CONFIG_INET?): %w", name, err)
		}
	}
	return "struct_ops programs and maps, tcp_congestion_ops in BTF", "", nil
}

func checkBPFStats() (string, string, error) {
	b, err := os.ReadFile(bpfStatsPath)
	if err != nil {
		return "", "per-program run time (hbm's CPU cost) cannot be measured; needs Linux >= 5.1", err
	}
	state := "off"
	if strings.TrimSpace(string(b)) != "0" {
		state = "on"
	}
	return fmt.Sprintf("kernel.bpf_stats_enabled available (currently %s)", state), "", nil
}

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(tcpCCDir, name))
	return strings.TrimSpace(string(b)), err
}

func checkTCPCC() (string, string, error) {
	avail, err := readSysctl("tcp_available_congestion_control")
	if err != nil {
		return "", "", err
	}
	cur, _ := readSysctl("tcp_congestion_control")
	_, pinErr := os.Stat(hbmDCTCPPin)
	return describeCC(strings.Fields(avail), cur, kernelConfigValue(kernelConfig, "CONFIG_TCP_CONG_DCTCP"), pinErr == nil), "", nil
}

// hbmDCTCPPin is where `hbm cc install dctcp` pins its BPF DCTCP.
const hbmDCTCPPin = "/sys/fs/bpf/hbm/cc/dctcp"

// describeCC summarises the congestion controls: the list, the default and
// whether dctcp is native (cfg is CONFIG_TCP_CONG_DCTCP: "y", "m" or ""), or
// the BPF one of `hbm cc` (hbmInstalled): both appear in the kernel's list.
func describeCC(avail []string, cur, cfg string, hbmInstalled bool) string {
	s := strings.Join(avail, " ")
	if cur != "" {
		s += " (default " + cur + ")"
	}
	native := false
	for _, cc := range avail {
		if cc == "dctcp" {
			native = true
		}
	}
	switch {
	case native && hbmInstalled:
		s += "; dctcp is HBM's BPF one (hbm cc)"
	case native && cfg == "":
		s += "; dctcp registered, not native (a BPF one)"
	case native:
		s += "; dctcp native"
	case cfg == "m":
		s += "; dctcp is a module not loaded (modprobe tcp_dctcp), else `hbm cc`"
	default:
		s += "; no native dctcp: `hbm cc` provides a BPF one"
	}
	return s
}

// kernelConfigValue returns the value of a CONFIG_ option from
// /proc/config.gz, or "" if unknown.
func kernelConfigValue(path, option string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return ""
	}
	prefix := []byte(option + "=")
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, prefix); ok {
			return string(v)
		}
	}
	return ""
}

func checkTCPECN() (string, string, error) {
	v, err := readSysctl("tcp_ecn")
	if err != nil {
		return "", "", err
	}
	return describeECN(v), "", nil
}

func describeECN(v string) string {
	switch v {
	case "0":
		return "net.ipv4.tcp_ecn=0: ECN off (dctcp still negotiates it); hbm signals congestion by return code or drop"
	case "1":
		return "net.ipv4.tcp_ecn=1: ECN requested and accepted; hbm can mark CE"
	case "2":
		return "net.ipv4.tcp_ecn=2: ECN accepted, not requested on outgoing connections (sysctl -w net.ipv4.tcp_ecn=1 to have hbm mark CE)"
	default:
		return "net.ipv4.tcp_ecn=" + v
	}
}
