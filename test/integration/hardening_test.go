package integration

// The hardening cases of issue 9, one test each, driven through the hbm
// binary in a private pin directory.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// TestHardenRootSpelling: "", "." and "a/.." name the root group (the whole
// host) without saying "/": usage errors (exit 2), nothing changed.
func TestHardenRootSpelling(t *testing.T) {
	l := newKLab(t, "hard-root")
	l.mk("a")
	for _, arg := range []string{"", ".", "a/..", l.top + "/..", "/./"} {
		r := l.run(nil, "set", arg, "--egress", "100mbit")
		if r.killed || r.code != 2 || !strings.Contains(r.errOut, "hbm:") {
			t.Errorf("hbm set %q --egress 100mbit: exit %d, stderr %q; want exit 2 with an error", arg, r.code, r.errOut)
		}
		if dataplane.Pinned(l.pinDir) {
			if keys := l.mapKeys("hbm_limit_map"); len(keys) != 0 {
				t.Errorf("after hbm set %q: limits on cgroup ids %v (root is %d)", arg, keys, l.id("/"))
			}
			if ls := l.links(); len(ls) != 0 {
				t.Errorf("after hbm set %q: links %v", arg, ls)
			}
		}
	}
	if dataplane.Pinned(l.pinDir) {
		if es := l.show(); len(es) != 0 {
			t.Errorf("hbm show lists %+v, want nothing", es)
		}
	}
}

// TestHardenPinDirNotBPFFS: a pin directory that is not on a bpffs is refused
// and hbm mounts nothing, neither on it nor on its parent.
func TestHardenPinDirNotBPFFS(t *testing.T) {
	l := newKLab(t, "hard-pinfs")
	g := l.mk("a")
	base := t.TempDir()
	// A tmpfs of the test's own, so the directory is certainly not a bpffs.
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		// hbm must not have mounted anything; if it did, undo it (bounded).
		for i := 0; i < 5 && unix.Unmount(base, unix.MNT_DETACH) == nil; i++ {
		}
	})
	for _, dir := range []string{filepath.Join(base, "hbm"), filepath.Join(base, "pins", "hbm"), base} {
		if dir != base {
			if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		before := mountinfo(t)
		r := l.run([]string{"HBM_PIN_DIR=" + dir}, "set", g, "--egress", "100mbit")
		after := mountinfo(t)
		if r.killed || r.code == 0 || !strings.Contains(r.errOut, "bpffs") {
			t.Errorf("hbm set with pin dir %s: exit %d, stderr %q; want a failure about bpffs", dir, r.code, r.errOut)
		}
		if before != after {
			t.Errorf("hbm set with pin dir %s changed the mounts:\nbefore:\n%s\nafter:\n%s", dir, before, after)
		}
		var fs unix.Statfs_t
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if unix.Statfs(d, &fs) == nil && fs.Type == unix.BPF_FS_MAGIC {
				t.Errorf("%s is on a bpffs after hbm set", d)
			}
		}
	}
}

// mountinfo returns this process's mount table without the mount ids'
// volatile parts: the lines themselves are what must not change.
func mountinfo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHardenNoDACReadSearch: hbm set run without CAP_DAC_READ_SEARCH (it
// cannot open cgroups by id) neither prunes nor marks removed the limits of
// other groups.
func TestHardenNoDACReadSearch(t *testing.T) {
	testutil.RequireCommand(t, "capsh")
	l := newKLab(t, "hard-nodac")
	a, b, c := l.mk("a"), l.mk("b"), l.mk("c")
	l.must("set", a, "--egress", "100mbit")
	l.must("set", b, "--egress", "200mbit")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The capability dropped from the bounding set: gone after the exec.
	probe, err := exec.CommandContext(ctx, "capsh", "--drop=cap_dac_read_search", "--", "-c", "grep CapEff /proc/self/status").Output()
	if err != nil {
		t.Fatalf("capsh: %v", err)
	}
	eff, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(probe), "CapEff:")), 16, 64)
	if err != nil || eff&(1<<unix.CAP_DAC_READ_SEARCH) != 0 {
		t.Fatalf("capsh did not drop CAP_DAC_READ_SEARCH: %q, %v", probe, err)
	}
	cmd := exec.CommandContext(ctx, "capsh", "--drop=cap_dac_read_search", "--", "-c",
		`exec "$0" set "$1" --egress 300mbit`, l.bin, c)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hbm set %s without CAP_DAC_READ_SEARCH: %v: %s", c, err, out)
	}
	t.Logf("hbm set without CAP_DAC_READ_SEARCH: %s", strings.TrimSpace(string(out)))
	// And a prune without it must keep them too.
	cmd = exec.CommandContext(ctx, "capsh", "--drop=cap_dac_read_search", "--", "-c", `exec "$0" prune`, l.bin)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hbm prune without CAP_DAC_READ_SEARCH: %v: %s", err, out)
	}
	l.checkSettled("after set and prune without CAP_DAC_READ_SEARCH", []string{a, b, c})
	l.checkTruth("after set and prune without CAP_DAC_READ_SEARCH", []string{a, b, c})
}

// TestHardenPruneRemoved: prune removes the limit (and link, queue,
// counters) of a group whose cgroup was removed, and keeps the others.
func TestHardenPruneRemoved(t *testing.T) {
	l := newKLab(t, "hard-prune")
	a, b := l.mk("a"), l.mk("b")
	p, pc := l.mk("p"), l.mk("p/c")
	for _, g := range []string{a, b, p, pc} {
		l.must("set", g, "--egress", "100mbit")
	}
	aid := l.id(a)
	if err := unix.Rmdir(filepath.Join(l.mnt, a)); err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, e := range l.show() {
		if e.CgroupID == aid {
			removed = e.Removed
		}
	}
	if !removed {
		t.Errorf("hbm show does not list removed group %s (id %d) as removed", a, aid)
	}
	out := l.must("prune")
	if !strings.Contains(out, strconv.FormatUint(aid, 10)) {
		t.Errorf("hbm prune printed %q, want it to name cgroup id %d", out, aid)
	}
	l.checkSettled("after prune", []string{b, p, pc})
	// Nothing more to prune; the others stay.
	if out := l.must("prune"); strings.TrimSpace(out) != "" {
		t.Errorf("second hbm prune printed %q, want nothing", out)
	}
	l.checkSettled("after a second prune", []string{b, p, pc})
}

// TestHardenDepth: a group deeper than dataplane.MaxLevel levels is refused
// (exit 2) and nothing changes; one exactly MaxLevel deep is accepted.
func TestHardenDepth(t *testing.T) {
	l := newKLab(t, "hard-depth")
	rel := ""
	for i := 2; i <= dataplane.MaxLevel; i++ { // the tree's top is level 1
		rel = filepath.Join(rel, fmt.Sprintf("l%d", i))
	}
	ok := l.mk(rel)
	deep := l.mk(filepath.Join(rel, "toodeep"))
	r := l.run(nil, "set", deep, "--egress", "100mbit")
	if r.killed || r.code != 2 || !strings.Contains(r.errOut, "levels deep") {
		t.Errorf("hbm set %s (%d levels): exit %d, stderr %q; want exit 2, refused as too deep", deep, dataplane.MaxLevel+1, r.code, r.errOut)
	}
	if dataplane.Pinned(l.pinDir) {
		l.checkSettled("after the refused set", nil)
	}
	l.must("set", ok, "--egress", "100mbit")
	l.checkSettled("after a set at MaxLevel", []string{ok})
	r = l.run(nil, "set", deep, "--egress", "100mbit")
	if r.code != 2 {
		t.Errorf("hbm set %s below a limited group: exit %d, want 2", deep, r.code)
	}
	l.checkSettled("after the second refused set", []string{ok})
}

// TestHardenPacingReRaised: a socket in a limited group that lifts its own
// pacing cap (SO_MAX_PACING_RATE to ~0) is capped again by the assist while
// it sends.
func TestHardenPacingReRaised(t *testing.T) {
	l := egSetup(t, "hardpace")
	l.hbm.PinDir = "/sys/fs/bpf/hbm-test-hardpace"
	os.RemoveAll(l.hbm.PinDir)
	t.Cleanup(func() { os.RemoveAll(l.hbm.PinDir) }) // before removeGroups (LIFO): unpinning detaches
	group, dir := l.cgroup(t, "w")
	const rate, rateBytes = "200mbit", 200e6 / 8
	if err := l.hbm.Set(group, rate); err != nil {
		t.Fatal(err)
	}
	c, s := tcpPair(t, dir, false, l.tb.ReceiverNS, l.tb.SenderNS, l.tb.ReceiverIP4.String())
	go io.Copy(io.Discard, s)
	send := func(d time.Duration) {
		t.Helper()
		buf := make([]byte, 256<<10)
		for end := time.Now().Add(d); time.Now().Before(end); {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(buf); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
	}
	send(time.Second)
	capped := uint32(sockopt(t, c, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE))
	if capped == paceUnlimited || float64(capped) > 1.5*rateBytes {
		t.Fatalf("sender in the %s group paced at %d bytes/s before lifting it: the assist did not cap it", rate, capped)
	}
	setPacing(t, c, ^uint32(0))
	if got := uint32(sockopt(t, c, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE)); got != paceUnlimited {
		t.Fatalf("setsockopt(SO_MAX_PACING_RATE, ~0) did not lift the cap: reads %d", got)
	}
	send(time.Second)
	got := uint32(sockopt(t, c, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE))
	t.Logf("pacing cap %d bytes/s, lifted to ~0, %d bytes/s after a second of sending", capped, got)
	if got == paceUnlimited || float64(got) > 1.5*rateBytes {
		t.Errorf("after lifting its cap and sending for a second the socket is paced at %d bytes/s, want capped again (<= %.0f)", got, 1.5*rateBytes)
	}
}

func setPacing(t *testing.T, c *net.TCPConn, v uint32) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, int(int32(v)))
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("setsockopt SO_MAX_PACING_RATE: %v", serr)
	}
}

// TestHardenWalkerCgroupNamespace: `hbm set` run as in a container, in a
// cgroup namespace rooted at the container's group with cgroup2 mounted
// there (so the container's "/w" is the host's ".../ctr/w"), reaches the
// sockets the group opened before the limit, as it does on the host. The
// walker matches a socket by the cgroup ids of its path, read in the kernel,
// not by a level computed from a path whose root differs in the namespace.
func TestHardenWalkerCgroupNamespace(t *testing.T) {
	l := egSetup(t, "hardcgns")
	l.hbm.PinDir = "/sys/fs/bpf/hbm-test-hardcgns"
	os.RemoveAll(l.hbm.PinDir)
	t.Cleanup(func() { os.RemoveAll(l.hbm.PinDir) }) // before removeGroups (LIFO): unpinning detaches
	testutil.RequireCommand(t, "ss")
	_, ctr := l.cgroup(t, "ctr")
	_, dir := l.cgroup(t, "ctr/w")
	mnt, err := cgroup.Mount()
	if err != nil {
		t.Fatal(err)
	}
	const rate, rateBps = "200mbit", 200e6

	// Streams from a process in the group, connected before the limit
	// exists: only the walker can give them the per-ACK callback that
	// applies the pacing cap.
	startLoad(t, l, dir, "cubic", egStreams, 0)
	caps := func() []float64 { return pacingCaps(t, l) }
	time.Sleep(time.Second)
	before := caps()
	capped := func(cs []float64) int {
		n := 0
		for _, c := range cs {
			if c > 0 && c <= 1.5*rateBps {
				n++
			}
		}
		return n
	}
	if len(before) < egStreams || capped(before) != 0 {
		t.Fatalf("before any limit: sender connections with pacing caps %v, want >= %d uncapped", before, egStreams)
	}

	// hbm set in new cgroup and mount namespaces rooted at the ctr group,
	// cgroup2 mounted in them where it is on the host.
	f, err := os.Open(ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inNS := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.hbm.PinDir)
		cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWCGROUP | unix.CLONE_NEWNS,
			UseCgroupFD: true, CgroupFD: int(f.Fd())}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v in a cgroup namespace: %v: %s", name, args, err, out)
		}
		return string(out)
	}
	container := func(cmd string) string {
		t.Helper()
		return inNS("sh", "-c", "mount --make-rprivate / && umount -l "+mnt+" && mount -t cgroup2 none "+mnt+" && ("+cmd+")")
	}
	if view := container("cat /proc/self/cgroup; ls " + mnt); !strings.Contains(view, "0::/\n") || !strings.Contains(view, "\nw\n") {
		t.Fatalf("not a container's view (cgroup namespace rooted at ctr, its w under the mount): %q", view)
	}
	container("exec " + l.bin + " set /w --egress " + rate)

	var after []float64
	for i := 0; i < 30; i++ { // bounded: 3 s
		time.Sleep(100 * time.Millisecond)
		if after = caps(); capped(after) >= egStreams {
			break
		}
	}
	t.Logf("pacing caps (bit/s) of the streams connected before hbm set ran in a container's cgroup namespace: %v", after)
	if capped(after) < egStreams {
		t.Errorf("%d of the group's %d streams capped at <= 1.5x %s after hbm set /w in a container whose w is %s (caps %v): the walker missed them",
			capped(after), egStreams, rate, l.group+"/ctr/w", after)
	}
}

// pacingCapRE finds a socket's pacing cap in ss -i output ("pacing_rate
// RATEbps/CAPbps"; no cap: the rate alone).
var pacingCapRE = regexp.MustCompile(`pacing_rate [0-9.]+bps/([0-9.]+)bps`)

// TestHardenExecOtherPIDNamespace (issue 26): an hbm exec run started in a
// PID namespace of its own (its pid names another process on the host) is
// alive to the host's hbm commands: show only reads and kills nothing, and
// set and prune, which clean up after killed runs, judge it by the lock its
// hbm holds, not by the pid. Once that hbm is killed, the next prune
// removes the run's group and limits. With its own /proc (unshare
// --mount-proc) the run's name reads as the host's init at another start
// time (taken for dead); with the host's /proc, as the host's init itself
// (taken for alive forever).
func TestHardenExecOtherPIDNamespace(t *testing.T) {
	testutil.RequireCommand(t, "unshare")
	for _, mountProc := range []bool{true, false} {
		t.Run(fmt.Sprintf("mount-proc=%v", mountProc), func(t *testing.T) { execOtherPIDNS(t, mountProc) })
	}
}

func execOtherPIDNS(t *testing.T, mountProc bool) {
	l := newExecLab(t)
	other := "/hbm-test-execpidns"
	cgroup.RemoveWait(other, 10, 50*time.Millisecond)
	if _, err := cgroup.Create(other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgroup.RemoveWait(other, 50, 50*time.Millisecond) })

	args := []string{"-pf"}
	if mountProc {
		args = append(args, "--mount-proc")
	}
	args = append(args, l.bin, "exec", "--egress", "10mbit", "--", "sh", "-c", execPrelude+"exec sleep 600")
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	r := bufio.NewReader(out)
	g := l.groupOf(r)
	l.line(r) // the pid, in the namespace: useless on the host
	alive := func(when string) {
		t.Helper()
		procs, err := os.ReadFile(filepath.Join(l.mnt, g, "cgroup.procs"))
		if err != nil || len(strings.Fields(string(procs))) == 0 {
			t.Fatalf("%s: the run's group %s is gone or empty (%q, %v): its command was killed", when, g, procs, err)
		}
		if err := unix.Kill(cmd.Process.Pid, 0); err != nil {
			t.Fatalf("%s: unshare (host pid %d) is gone: %v", when, cmd.Process.Pid, err)
		}
	}
	alive("started")
	if s := l.hbm("show"); !strings.Contains(s, g) || !strings.Contains(s, "10mbit") {
		t.Errorf("hbm show does not list the run's limit:\n%s", s)
	}
	alive("after hbm show")
	l.hbm("set", other, "--egress", "100mbit")
	alive("after hbm set on another group")
	l.hbm("prune")
	alive("after hbm prune")
	if s := l.hbm("show"); !strings.Contains(s, g) {
		t.Errorf("the run's limit is gone while it runs:\n%s", s)
	}

	// Killed (unshare, the namespace's init hbm, and so its command), it
	// is dead to the next command that changes limits.
	unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("hbm exec not dead 10s after SIGKILL")
	}
	var s string
	testutil.WaitFor(5*time.Second, func() bool { // the namespace's processes die asynchronously
		s = l.hbm("prune")
		return l.gone(g)
	})
	if !strings.Contains(s, "removed "+g) || !l.gone(g) {
		t.Errorf("hbm prune after the run's hbm was killed did not remove %s:\n%s", g, s)
	}
}

// TestHardenAttachReplacedGroup (issue 26): hbm set resolves its group, then
// waits for the pin directory's lock; a group removed and made again at the
// same path meanwhile (a unit restarted) is another group, which must get
// nothing: the set is refused with a clear error, no program is attached to
// the new group, and no limit is left for either.
func TestHardenAttachReplacedGroup(t *testing.T) {
	l := newKLab(t, "hard-replaced")
	x, a := l.mk("x"), l.mk("a")
	l.must("set", x, "--egress", "100mbit") // the state exists: the next set waits for its lock
	oldID := l.id(a)

	lock, err := os.Open(l.pinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.bin, "set", a, "--egress", "100mbit")
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// It has resolved the group once it holds the pin directory open,
	// waiting for the lock.
	waiting := testutil.WaitFor(5*time.Second, func() bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		for _, fd := range fds {
			if p, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); p == l.pinDir {
				return true
			}
		}
		return false
	})
	if !waiting {
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		cmd.Wait()
		t.Fatalf("hbm set never waited for the pin directory's lock: %s", out.String())
	}
	dir := filepath.Join(l.mnt, a)
	if err := unix.Rmdir(dir); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	newID := l.id(a)
	if newID == oldID {
		t.Fatalf("the group made again has the old id %d", oldID)
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	err = cmd.Wait()
	t.Logf("hbm set on a group replaced while it waited: %v: %s", err, strings.TrimSpace(out.String()))
	if err == nil || !strings.Contains(out.String(), "not the group hbm resolved") && !strings.Contains(out.String(), "no longer the group hbm resolved") {
		t.Errorf("hbm set on a group replaced after it was resolved: %v, %q; want it refused as no longer the group resolved", err, out.String())
	}
	for _, at := range []ebpf.AttachType{ebpf.AttachCGroupInetEgress, ebpf.AttachCGroupSockOps} {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: at})
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Programs) != 0 {
			t.Errorf("the new group %s (id %d) has %d %v programs attached, want none", a, newID, len(res.Programs), at)
		}
	}
	l.checkSettled("after the refused set", []string{x})
}

// killUnsetParent sets p and its child c, then kills `hbm unset p` after
// its limit is deleted (step 2), before its child got an attachment of its
// own: the journal holds the unset, c is served by p's link alone.
func killUnsetParent(t *testing.T, l *kLab) (p, c string) {
	t.Helper()
	p, c = l.mk("p"), l.mk("p/c")
	l.must("set", p, "--egress", "200mbit")
	l.must("set", c, "--egress", "100mbit")
	if r := l.run([]string{"HBM_TEST_STOP_AFTER=2"}, "unset", p); !r.killed {
		t.Fatalf("hbm unset %s to be killed after step 2: exit %d: %s", p, r.code, r.errOut)
	}
	if op := l.txnOp(); op == 0 {
		t.Fatal("the killed unset left no journal: the test proves nothing")
	}
	return p, c
}

// TestHardenReplayNamespacePath (issue 26): a journaled unset of a parent,
// replayed by hbm in a container whose cgroup namespace is rooted above it
// (the group visible, under another path than the one journaled), is
// finished on the group itself, found by its id: its limited child gets an
// attachment of its own before the parent's goes, and stays policed.
// (cgroup2 refuses renames, EPERM, so a path changes only with the view.)
func TestHardenReplayNamespacePath(t *testing.T) {
	l := newKLab(t, "hard-replay-view")
	p, c := killUnsetParent(t, l)
	r := l.inCgroupNS(l.top, "prune")
	t.Logf("hbm prune in a container rooted at %s: exit %d: %s", l.top, r.code, strings.TrimSpace(r.errOut))
	if r.code != 0 {
		t.Fatalf("hbm prune in a container rooted at %s: exit %d: %s", l.top, r.code, r.errOut)
	}
	l.checkTruth("after the replay in a container", []string{c})
	l.checkSettled("after the replay in a container", []string{c})
	_ = p
}

// inCgroupNS runs hbm as in a container: in new cgroup and mount namespaces
// rooted at group ctr, with cgroup2 mounted there where it is on the host.
func (l *kLab) inCgroupNS(ctr string, args ...string) hbmResult {
	l.t.Helper()
	f, err := os.Open(filepath.Join(l.mnt, ctr))
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	script := "mount --make-rprivate / && umount -l " + l.mnt + " && mount -t cgroup2 none " + l.mnt + " && exec " + l.bin + " " + strings.Join(q, " ")
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWCGROUP | unix.CLONE_NEWNS, UseCgroupFD: true, CgroupFD: int(f.Fd())}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := hbmResult{out: stdout.String(), errOut: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		l.t.Fatalf("hbm %v in a cgroup namespace: %v", args, err)
	}
	return r
}

// TestHardenReplayOtherNamespace (issue 26): a journaled change whose group
// is not visible from a container (another cgroup namespace) is not
// replayed there with a group without its subtree (which would drop the
// limited child's attachment): every change is refused with a message
// that names `hbm repair --abandon`; that gives the change up and changes
// can go on; the host then finishes the parent's unset by hand.
func TestHardenReplayOtherNamespace(t *testing.T) {
	l := newKLab(t, "hard-replay-ns")
	p, c := killUnsetParent(t, l)
	ctr := l.mk("ctr")
	w := l.mk("ctr/w")
	for _, args := range [][]string{{"set", "/w", "--egress", "100mbit"}, {"prune"}} {
		r := l.inCgroupNS(ctr, args...)
		t.Logf("hbm %v in a container while a change of %s is journaled: exit %d: %s", args, p, r.code, strings.TrimSpace(r.errOut))
		if r.code != 1 || !strings.Contains(r.errOut, "hbm repair --abandon") {
			t.Errorf("hbm %v in a container, the journaled group not visible there: exit %d, %q; want exit 1 naming hbm repair --abandon", args, r.code, r.errOut)
		}
		l.checkTruth(fmt.Sprintf("after hbm %v in a container", args), []string{c})
		if op := l.txnOp(); op == 0 {
			t.Errorf("after hbm %v in a container: the journal was cleared", args)
		}
	}
	r := l.inCgroupNS(ctr, "repair", "--abandon")
	if r.code != 0 || !strings.Contains(r.out, "abandoned") || !strings.Contains(r.out, strconv.FormatUint(l.id(p), 10)) {
		t.Fatalf("hbm repair --abandon: exit %d, %q %q; want it to say what it abandoned", r.code, r.out, r.errOut)
	}
	if op := l.txnOp(); op != 0 {
		t.Errorf("after hbm repair --abandon the journal holds op %d", op)
	}
	if r := l.inCgroupNS(ctr, "set", "/w", "--egress", "100mbit"); r.code != 0 {
		t.Errorf("hbm set in the container after --abandon: exit %d: %s", r.code, r.errOut)
	}
	l.checkTruth("after --abandon", []string{c, w})
	l.must("unset", p)
	l.checkSettled("after the host's unset of the parent", []string{c, w})
	if r := l.run(nil, "repair", "--abandon"); r.code != 0 || !strings.Contains(r.out, "nothing to abandon") {
		t.Errorf("hbm repair --abandon with nothing journaled: exit %d, %q", r.code, r.out)
	}
}

// TestHardenDepthCgroupNamespace (issue 26): in a container whose cgroup
// namespace is rooted 10 levels down, a group 22 levels below its root
// (32 from the real root, where the programs count) passes a check by
// path but could never be policed: it is refused (exit 2, nothing
// changed); one 21 levels below (31 from the root) is accepted.
func TestHardenDepthCgroupNamespace(t *testing.T) {
	l := newKLab(t, "hard-depthns")
	ctr := "" // the container's root: level 10 (the test's top is level 1)
	for i := 2; i <= 10; i++ {
		ctr = filepath.Join(ctr, fmt.Sprintf("c%d", i))
	}
	inside := "" // 21 levels below it: level 31
	for i := 1; i <= dataplane.MaxLevel-10; i++ {
		inside = filepath.Join(inside, fmt.Sprintf("l%d", i))
	}
	ok := l.mk(filepath.Join(ctr, inside))
	l.mk(filepath.Join(ctr, inside, "deep"))
	ctrRel := filepath.Join(l.top, ctr)
	r := l.inCgroupNS(ctrRel, "set", "/"+inside+"/deep", "--egress", "100mbit")
	t.Logf("hbm set of a group %d levels below a container's root, %d from the real root: exit %d: %s",
		dataplane.MaxLevel-10+1, dataplane.MaxLevel+1, r.code, strings.TrimSpace(r.errOut))
	if r.code != 2 || !strings.Contains(r.errOut, "levels deep") {
		t.Errorf("hbm set of a group %d levels deep from the real root, in a container: exit %d, %q; want exit 2, refused as too deep",
			dataplane.MaxLevel+1, r.code, r.errOut)
	}
	if dataplane.Pinned(l.pinDir) {
		l.checkSettled("after the refused set", nil)
	}
	if r := l.inCgroupNS(ctrRel, "set", "/"+inside, "--egress", "100mbit"); r.code != 0 {
		t.Fatalf("hbm set of a group %d levels deep from the real root, in a container: exit %d: %s", dataplane.MaxLevel, r.code, r.errOut)
	}
	l.checkSettled("after a set at MaxLevel from the real root", []string{ok})
}

// ipv4UDP builds an IPv4 UDP datagram from src to dst:9 (discard) with n
// bytes of payload, header checksum filled in.
func ipv4UDP(src, dst net.IP, n int) []byte {
	p := make([]byte, 20+8+n)
	p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
	p[2], p[3] = byte(len(p)>>8), byte(len(p))
	copy(p[12:16], src.To4())
	copy(p[16:20], dst.To4())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(p[i])<<8 | uint32(p[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	p[10], p[11] = byte(^sum>>8), byte(^sum)
	u := p[20:]
	u[0], u[1], u[2], u[3] = 0x30, 0x39, 0, 9 // 12345 -> 9
	u[4], u[5] = byte((8+n)>>8), byte(8+n)
	return p
}

// TestKnownLimitsUnseen (issue 26, "what HBM cannot see"): HBM polices a
// socket by the cgroup it was created in, on the cgroup skb hook of the IP
// output path. This test measures, from a limited group's egress packet
// counter, which traffic of a process in that group HBM sees, so a change in
// any of it is noticed (README, "What HBM cannot see"):
//   - seen: a UDP socket and a raw IP socket (IPPROTO_RAW, needs
//     CAP_NET_RAW) created in the group;
//   - unseen: an AF_PACKET socket created in the group (it bypasses the IP
//     output path; pods have CAP_NET_RAW by default), a socket created
//     outside the group and used from inside (passed with SCM_RIGHTS, or
//     made before the process moved), and a connection accepted inside the
//     group from a listener made outside it (socket activation: accepted
//     sockets belong to the listener's group, the .socket unit's).
func TestKnownLimitsUnseen(t *testing.T) {
	l := egSetup(t, "unseen")
	l.hbm.PinDir = "/sys/fs/bpf/hbm-test-unseen"
	os.RemoveAll(l.hbm.PinDir)
	t.Cleanup(func() { os.RemoveAll(l.hbm.PinDir) }) // before removeGroups (LIFO): unpinning detaches
	group, dir := l.cgroup(t, "w")
	l.set(t, group, "1gbit") // far above what is sent: nothing dropped
	const n = 20
	src, dst := l.tb.SenderIP4, l.tb.ReceiverIP4
	pkt := ipv4UDP(src, dst, 100)
	counted := func(name string, send func() error, inGroup bool) uint64 {
		t.Helper()
		before := egressCounters(t, l, group).Packets
		do := func() { inNamedNetns(t, l.tb.SenderNS, send) }
		if inGroup {
			inCgroup(t, dir, do)
		} else {
			do()
		}
		time.Sleep(200 * time.Millisecond)
		d := egressCounters(t, l, group).Packets - before
		t.Logf("%s: %d packets counted by the group's limit", name, d)
		return d
	}
	sendUDP := func(fd int) error {
		sa := &unix.SockaddrInet4{Port: 9}
		copy(sa.Addr[:], dst.To4())
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, make([]byte, 100), 0, sa); err != nil {
				return fmt.Errorf("sendto: %w", err)
			}
		}
		return nil
	}
	socket := func(domain, typ, proto int) (int, error) {
		fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return -1, fmt.Errorf("socket(%d, %d, %d): %w", domain, typ, proto, err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd, nil
	}

	// Control: a UDP socket made in the group is seen.
	if d := counted("20 datagrams from a UDP socket made in the group", func() error {
		fd, err := socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		return sendUDP(fd)
	}, true); d < n {
		t.Fatalf("the control (UDP from the group) counted %d of %d packets: the test cannot tell seen from unseen", d, n)
	}
	// A raw IP socket goes through the IP output path: seen.
	if d := counted("20 packets from a raw IP socket (IPPROTO_RAW) made in the group", func() error {
		fd, err := socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		sa := &unix.SockaddrInet4{}
		copy(sa.Addr[:], dst.To4())
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
				return fmt.Errorf("sendto: %w", err)
			}
		}
		return nil
	}, true); d < n {
		t.Errorf("raw IP socket in the limited group: %d of %d packets counted, want all (documented as seen)", d, n)
	}
	// AF_PACKET hands frames to the device: unseen.
	if d := counted("20 packets from an AF_PACKET socket made in the group", func() error {
		ifi, err := net.InterfaceByName(l.tb.SenderDev)
		if err != nil {
			return err
		}
		const ethPIP = 0x0800
		fd, err := socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(ethPIP)))
		if err != nil {
			return err
		}
		sa := &unix.SockaddrLinklayer{Protocol: htons(ethPIP), Ifindex: ifi.Index, Halen: 6,
			Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
				return fmt.Errorf("sendto: %w", err)
			}
		}
		return nil
	}, true); d != 0 {
		t.Errorf("AF_PACKET socket in the limited group: %d of %d packets counted, want none (documented as unseen)", d, n)
	}
	// A socket made outside the group (passed in with SCM_RIGHTS, or made
	// before the process moved) keeps its group: unseen.
	var outside int
	inNamedNetns(t, l.tb.SenderNS, func() error {
		var err error
		outside, err = socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		return err
	})
	if d := counted("20 datagrams from a UDP socket made outside the group, used from inside", func() error { return sendUDP(outside) }, true); d != 0 {
		t.Errorf("socket made outside the limited group, used by a process in it: %d of %d packets counted, want none (documented as unseen)", d, n)
	}
	// Socket activation: the listener is made outside (the .socket unit's
	// group), the connection accepted and served inside.
	c, s := tcpPair(t, "", false, l.tb.SenderNS, l.tb.ReceiverNS, src.String())
	go io.Copy(io.Discard, c)
	if d := counted("64 KB on a connection accepted in the group from a listener made outside", func() error {
		s.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, err := s.Write(make([]byte, 64<<10))
		return err
	}, true); d != 0 {
		t.Errorf("connection accepted from a listener made outside the limited group: %d packets counted, want none (documented as unseen)", d)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
