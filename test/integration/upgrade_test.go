package integration

// Upgrades: an hbm of an earlier layout sets the limits, this build takes
// them over. The earlier hbm is built from git (its BPF objects are
// committed: no clang), so the upgrade is from a real previous layout.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/spawn"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

// upgradeFrom is the build the upgrade tests start from: the last commit
// before aa7cc66 renamed hbm_sock's rpc_Bps (so the socket storage maps'
// layout differs, by member name) and before 0fe76d4 grew struct hbm_queue
// from 248 to 256 bytes (the handshake gate's counter): both kinds of
// change the upgrade must carry.
const upgradeFrom = "7e3d1388ddb085a4b2b2d3e06888a8f61cf4dc19"

var (
	oldOnce sync.Once
	oldBin  string
	oldErr  error
)

// oldHBM builds (once, cached in the temp directory by commit) the hbm of
// upgradeFrom: `git archive` of the commit, `go build` with this module
// cache. The repository must hold the commit (.ci/run checks the clone is
// not shallow); where it does not, the test is skipped, or failed under CI.
func oldHBM(t *testing.T) string {
	t.Helper()
	oldOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		repo := filepath.Join(filepath.Dir(file), "..", "..")
		if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", upgradeFrom+"^{commit}").CombinedOutput(); err != nil {
			oldErr = fmt.Errorf("commit %s not in the repository (a shallow clone?): %v: %s", upgradeFrom, err, out)
			return
		}
		dir := filepath.Join(os.TempDir(), "hbm-upgrade-from-"+upgradeFrom[:12])
		bin := filepath.Join(dir, "hbm")
		if _, err := os.Stat(bin); err == nil {
			oldBin = bin
			return
		}
		src, err := os.MkdirTemp("", "hbm-upgrade-src-")
		if err != nil {
			oldErr = err
			return
		}
		defer os.RemoveAll(src)
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, upgradeFrom, src)
		if out, err := archive.CombinedOutput(); err != nil {
			oldErr = fmt.Errorf("git archive %s: %v: %s", upgradeFrom, err, out)
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			oldErr = err
			return
		}
		tmp := bin + ".tmp"
		build := exec.Command("go", "build", "-trimpath", "-o", tmp, "./cmd/hbm")
		build.Dir = src
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			oldErr = fmt.Errorf("build hbm of %s: %v: %s", upgradeFrom, err, out)
			return
		}
		oldErr = os.Rename(tmp, bin)
		oldBin = bin
	})
	if oldErr != nil {
		if strings.Contains(oldErr.Error(), "not in the repository") {
			testutil.Missing(t, "the earlier build's commit", oldErr)
		}
		t.Fatal(oldErr)
	}
	return oldBin
}

// upLab is an upgrade test's world: a kill test's (a private pin
// directory and cgroup tree, removed at the start and at cleanup; removing
// the pins detaches the links) with the earlier build's hbm beside this
// one's.
type upLab struct {
	*kLab
	old string
}

func newUpLab(t *testing.T, name string) *upLab {
	t.Helper()
	l := newKLabAt(t, "/sys/fs/bpf/hbm-upgrade-test-"+name, "/hbm-upg-"+name)
	return &upLab{kLab: l, old: oldHBM(t)}
}

// limitMapsServing returns, for group rel and direction d (0 egress, 1
// ingress), how many hbm programs run for its sockets on the direction's
// hook (the kernel's effective list: its own and its ancestors' links),
// and how many of them find the group's limit in the limit map they use:
// the kernel's truth of "enforced", whatever build's programs and maps.
func (l *upLab) limitMapsServing(rel string, d uint32) (progs, withLimit int) {
	l.t.Helper()
	fd, err := unix.Open(filepath.Join(l.mnt, rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.t.Fatalf("open cgroup %s: %v", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		l.t.Fatal(err)
	}
	at, name := ebpf.AttachCGroupInetEgress, "hbm_egress"
	if d == 1 {
		at, name = ebpf.AttachCGroupInetIngress, "hbm_ingress"
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: at, QueryFlags: unix.BPF_F_QUERY_EFFECTIVE})
	if err != nil {
		l.t.Fatalf("query programs of %s: %v", rel, err)
	}
	key := make([]byte, 16)
	binary.NativeEndian.PutUint64(key, st.Ino)
	binary.NativeEndian.PutUint32(key[8:], d)
	for _, p := range res.Programs {
		prog, err := ebpf.NewProgramFromID(p.ID)
		if err != nil {
			continue
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil || info.Name != name {
			continue
		}
		progs++
		ids, _ := info.MapIDs()
		for _, id := range ids {
			mp, err := ebpf.NewMapFromID(id)
			if err != nil {
				continue
			}
			mi, err := mp.Info()
			if err == nil && mi.Name == "hbm_limit_map" {
				v := make([]byte, mp.ValueSize())
				if mp.Lookup(key, &v) == nil {
					withLimit++
				}
			}
			mp.Close()
		}
	}
	return progs, withLimit
}

// checkEnforced fails unless each of groups (rel -> directions) is served
// by exactly one hbm program per direction, which finds its limit.
func (l *upLab) checkEnforced(when string, groups map[string][]uint32) {
	l.t.Helper()
	for g, dirs := range groups {
		for _, d := range dirs {
			if progs, with := l.limitMapsServing(g, d); progs != 1 || with != 1 {
				l.t.Errorf("%s: %s direction %d: %d hbm programs run for it, %d of them with its limit; want 1 and 1", when, g, d, progs, with)
			}
		}
	}
}

// checkUpgraded asserts the state is wholly this build's: show lists want
// (group direction -> rate) enforced, with no upgrade pending, no upgrade
// directory, one build's programs.
func (l *upLab) checkUpgraded(when string, want map[string]uint64) {
	l.t.Helper()
	r := l.mustBin(l.bin, "show", "--json")
	if strings.Contains(r.errOut, "another hbm build") || strings.Contains(r.errOut, "under way") {
		l.t.Errorf("%s: show still says: %s", when, r.errOut)
	}
	got := map[string]uint64{}
	for _, g := range parseShow(l.t, r.out) {
		for d, c := range map[string]*jsonout.Direction{"egress": g.Egress, "ingress": g.Ingress} {
			if c == nil {
				continue
			}
			got[g.Cgroup+" "+d] = c.RateBps
			if !c.Enforced {
				l.t.Errorf("%s: show says %s %s not enforced", when, g.Cgroup, d)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		l.t.Errorf("%s: show lists %v, want %v", when, got, want)
	}
	if pinExists(filepath.Join(l.pinDir, "upgrade")) {
		l.t.Errorf("%s: %s/upgrade still there", when, l.pinDir)
	}
	if ps, _ := filepath.Glob(filepath.Join(l.pinDir, "progs", "*")); len(ps) != 1 {
		l.t.Errorf("%s: programs of %d builds pinned (%v), want 1", when, len(ps), ps)
	}
	pinned := map[ebpf.ProgramID]bool{}
	ps, _ := filepath.Glob(filepath.Join(l.pinDir, "progs", "*", "*"))
	for _, p := range ps {
		if prog, err := ebpf.LoadPinnedProgram(p, nil); err == nil {
			if info, err := prog.Info(); err == nil {
				id, _ := info.ID()
				pinned[id] = true
			}
			prog.Close()
		}
	}
	links, _ := filepath.Glob(filepath.Join(l.pinDir, "links", "*"))
	for _, p := range links {
		lk, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			l.t.Errorf("%s: link %s: %v", when, p, err)
			continue
		}
		info, err := lk.Info()
		lk.Close()
		if err != nil || !pinned[info.Program] {
			l.t.Errorf("%s: link %s runs program %v, not one of this build's pinned programs (%v)", when, filepath.Base(p), info.Program, err)
		}
	}
}

func pinExists(p string) bool { _, err := os.Lstat(p); return err == nil }

func parseShow(t *testing.T, out string) []jsonout.Group {
	t.Helper()
	var es []jsonout.Group
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("hbm show --json: %v: %q", err, out)
	}
	return es
}

// upgradeKillSetup makes the earlier build's state for TestUpgradeKill:
// groups a (both directions), p and its child c (nested), and b (this
// build's set, which upgrades first). It returns the limited groups and
// the limits show must list once b is set.
func (l *upLab) upgradeKillSetup() (b string, limited map[string][]uint32, want map[string]uint64) {
	l.reset()
	a := l.mk("a")
	p := l.mk("p")
	c := l.mk("p/c")
	b = l.mk("b")
	l.mustBin(l.old, "set", a, "--egress", "100mbit", "--ingress", "200mbit")
	l.mustBin(l.old, "set", p, "--egress", "300mbit")
	l.mustBin(l.old, "set", c, "--egress", "50mbit")
	limited = map[string][]uint32{a: {0, 1}, p: {0}, c: {0}}
	l.checkEnforced("set by the earlier build", limited)
	want = map[string]uint64{a + " egress": 100e6, a + " ingress": 200e6, p + " egress": 300e6, c + " egress": 50e6, b + " egress": 100e6}
	return b, limited, want
}

// TestUpgradeKill kills this build's first command on an earlier build's
// state (`set`, which upgrades it first) after steps of the upgrade: the
// first step of each kind (staging, each map replaced, links switched,
// socket state carried, programs replaced, done) and the last link switch;
// every step with HBM_UPGRADE_KILL_ALL=1. After every kill each limit is
// still enforced by the kernel (a program of one build or the other, with
// the limit in its map: never none, never two); then the earlier build,
// run again (a rolled-back DaemonSet), either works (the upgrade was not
// committed: its change is carried by the next upgrade) or refuses with a
// clear error and changes nothing; show (read only) changes nothing; and
// the next command of this build finishes the upgrade.
func TestUpgradeKill(t *testing.T) {
	l := newUpLab(t, "kill")
	// The steps, from an upgrade that runs to its end.
	b, limited, want := l.upgradeKillSetup()
	r := l.runBin([]string{"HBM_TEST_STEPS=1"}, l.bin, "set", b, "--egress", "100mbit")
	if r.code != 0 || !strings.Contains(r.errOut, "upgraded the pinned state") {
		t.Fatalf("the first set of this build on the earlier build's state: exit %d, want it to say it upgraded it: %s", r.code, r.errOut)
	}
	limited[b] = []uint32{0}
	l.checkEnforced("upgrade completed", limited)
	l.checkUpgraded("upgrade completed", want)
	var steps []string
	for _, line := range strings.Split(r.errOut, "\n") {
		if _, what, ok := strings.Cut(line, "HBM_TEST_STEPS: step "); ok {
			_, name, _ := strings.Cut(what, ": ")
			steps = append(steps, name)
			if name == "upgrade done" {
				break
			}
		}
	}
	kind := func(s string) string { // the staging steps, then by their verb
		if k, _, _ := strings.Cut(s, " "); k != "staged" {
			return k
		}
		return s
	}
	var points []int
	for i, s := range steps {
		first := i == 0 || kind(steps[i-1]) != kind(s)
		lastSwitch := kind(s) == "switched" && (i+1 == len(steps) || kind(steps[i+1]) != "switched")
		if first || lastSwitch || os.Getenv("HBM_UPGRADE_KILL_ALL") == "1" {
			points = append(points, i+1)
		}
	}
	t.Logf("upgrade steps: %q; killing after %v", steps, points)
	has := func(prefix string) bool {
		return slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, prefix) })
	}
	if !has("replaced hbm_queue_map") || !has("switched ") || !has("carried hbm_flow_map") || !has("upgrade done") {
		t.Errorf("the upgrade from %s took steps %q: want maps replaced, links switched and the socket state carried", upgradeFrom[:7], steps)
	}
	for _, n := range points {
		b, limited, want := l.upgradeKillSetup()
		r := l.runBin([]string{fmt.Sprintf("HBM_TEST_STOP_AFTER=%d", n)}, l.bin, "set", b, "--egress", "100mbit")
		if !r.killed {
			t.Fatalf("set to be killed after step %d (%s): exit %d: %s", n, steps[n-1], r.code, r.errOut)
		}
		when := fmt.Sprintf("set killed after step %d (%s)", n, steps[n-1])
		l.checkEnforced(when, limited)
		upDir := pinExists(filepath.Join(l.pinDir, "upgrade"))
		// show only reads.
		sr := l.mustBin(l.bin, "show", "--json")
		if pinExists(filepath.Join(l.pinDir, "upgrade")) != upDir {
			t.Errorf("%s: show changed the upgrade under way", when)
		}
		if got := len(parseShow(t, sr.out)); got != 3 {
			t.Errorf("%s: show lists %d groups, want 3: %s", when, got, sr.out)
		}
		// The earlier build, rolled back to: works or refuses cleanly.
		a := filepath.Join(l.top, "a")
		or := l.runBin(nil, l.old, "set", a, "--egress", "120mbit")
		switch {
		case or.code == 0:
			want[a+" egress"] = 120e6
		case strings.Contains(or.errOut, "incompatible hbm version"):
		default:
			t.Errorf("%s: the earlier build's set: exit %d: %s", when, or.code, or.errOut)
		}
		l.checkEnforced(when+", then the earlier build's set", limited)
		// This build's next command finishes (or redoes) the upgrade.
		l.mustBin(l.bin, "set", b, "--egress", "100mbit")
		limited[b] = []uint32{0}
		l.checkEnforced(when+", then set again", limited)
		l.checkUpgraded(when+", then set again", want)
		if t.Failed() {
			return
		}
	}
}

// procSample is one reading of the lab's counters.
type procSample struct {
	at            time.Duration // since the sampler started
	txBytes       uint64        // the sender's veth: frames sent
	tcpSegs, udps uint64        // the receiver's TCP segments and UDP datagrams
}

// sample reads, about every millisecond until stop is closed, the bytes
// the sender's veth dev sent (in netns senderNS: right after the policer,
// no queue between: noqueue) and what the receiver (process pid) got.
func sample(senderNS, dev string, pid int, stop <-chan struct{}) ([]procSample, error) {
	type res struct {
		ss  []procSample
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies in the netns
		h, err := netns.GetFromName(senderNS)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		if err != nil {
			rc <- res{nil, err}
			return
		}
		var out []procSample
		start := time.Now()
		sn := fmt.Sprintf("/proc/%d/net/snmp", pid)
		for {
			select {
			case <-stop:
				rc <- res{out, nil}
				return
			default:
			}
			s := procSample{at: time.Since(start)}
			b, err := os.ReadFile("/proc/thread-self/net/dev")
			if err != nil {
				rc <- res{out, err}
				return
			}
			for _, line := range strings.Split(string(b), "\n") {
				if name, rest, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name == dev {
					if f := strings.Fields(rest); len(f) > 8 {
						s.txBytes, _ = strconv.ParseUint(f[8], 10, 64)
					}
				}
			}
			if b, err = os.ReadFile(sn); err != nil {
				rc <- res{out, err}
				return
			}
			s.tcpSegs, s.udps = snmpField(b, "Tcp:", "InSegs"), snmpField(b, "Udp:", "InDatagrams")
			out = append(out, s)
			time.Sleep(time.Millisecond)
		}
	}()
	r := <-rc
	return r.ss, r.err
}

// snmpField reads field of proto's line pair in /proc/net/snmp.
func snmpField(b []byte, proto, field string) uint64 {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != proto {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, field); i > 0 && i < len(f) {
			v, _ := strconv.ParseUint(f[i], 10, 64)
			return v
		}
	}
	return 0
}

// windows returns, over samples in [from, to): the largest excess of the
// bytes sent in any span of at least w between two samples over
// rate x the span, as a time at rate (how far ahead of its rate the group
// ran); the largest rate of such a span over rate; and the longest time
// the counter flow did not move.
func windows(ss []procSample, from, to, w time.Duration, rate float64, flow func(procSample) uint64) (excess time.Duration, ratio float64, stall time.Duration) {
	j, last := 0, -1
	for i := range ss {
		if ss[i].at < from || ss[i].at >= to {
			continue
		}
		if last >= 0 && flow(ss[i]) == flow(ss[last]) {
			stall = max(stall, ss[i].at-ss[last].at)
		} else {
			last = i
		}
		j = max(j, i)
		for j < len(ss) && ss[j].at-ss[i].at < w {
			j++
		}
		if j == len(ss) || ss[j].at >= to {
			continue
		}
		span := (ss[j].at - ss[i].at).Seconds()
		bits := float64(ss[j].txBytes-ss[i].txBytes) * 8
		ratio = max(ratio, bits/span/rate)
		excess = max(excess, time.Duration((bits/rate-span)*1e9))
	}
	return excess, ratio, stall
}

// timedRun runs bin like upLab.run, and returns when each line of its
// standard error came (since t0).
func (l *upLab) timedRun(t0 time.Time, env []string, bin string, args ...string) (code int, lines []string, at []time.Duration) {
	l.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "HBM_PIN_DIR="+l.pinDir), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, err := cmd.StderrPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := spawn.Start(cmd); err != nil {
		l.t.Fatal(err)
	}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		lines, at = append(lines, sc.Text()), append(at, time.Since(t0))
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), lines, at
	}
	if err != nil {
		l.t.Fatal(err)
	}
	return 0, lines, at
}

// TestUpgradeTraffic upgrades an earlier build's limit with traffic
// running: a UDP flood at 4x the limit (held by the policer alone: any
// moment without a program shows at once) and a TCP stream (paced), from
// a group limited to 100mbit by the earlier build. This build then runs
// set (the upgrade), show, a daemon pass and unset. From the hand-over
// (the first map replaced) to a second after the upgrade, the bytes the
// receiver got in any span of 10 or 100 ms may exceed the limit times the
// span by at most what the policer allows anyone (its burst and maximum
// backlog, set to 1 + 8 ms at the limit, one TSO packet, and 2 ms for the
// frames' Ethernet headers and sampling: 17 ms; a gap of g ms under the
// flood adds up to 3g), and neither the group's traffic nor its TCP stream
// may stop for more than 50 ms; the same figures before the upgrade are logged for
// comparison (UDP alone may wait out TCP's backlog for tens of ms, as
// before), and HBM_UPGRADE_MEASURE=1 marks the lines to quote. A TCP
// connection capped by the earlier build's assist has its cap lifted by
// this build's unset (its socket state carried). Then the earlier build
// refuses the upgraded state with a clear error, until `hbm downgrade --to`
// carries it back: the earlier build then sets and shows limits, and this
// build upgrades them again.
func TestUpgradeTraffic(t *testing.T) {
	l := newUpLab(t, "traffic")
	for _, c := range []string{"ip", "tc"} {
		testutil.RequireCommand(t, c)
	}
	tb := labtest.Pair(t)
	srv, err := tb.StartServer(l.bin, netlab.ServerPort)
	if err != nil {
		t.Fatal(err)
	}
	group := l.mk("w")
	dir := filepath.Join(l.mnt, group)
	other := l.mk("d")
	const limit = 100e6
	// Tight thresholds: the policer lets a group run at most burst + max
	// backlog (2 x drop-small) ahead of its rate, 9 ms here, so a gap
	// shows sooner.
	setArgs := []string{"set", group, "--egress", "100mbit", "--burst", "1ms", "--pace", "1ms", "--mark", "2ms", "--drop-large", "3ms", "--drop-small", "4ms"}
	l.mustBin(l.old, setArgs...)

	// A connection the earlier build's assist caps.
	host, _, _ := net.SplitHostPort(tb.ReceiverAddr(1, false))
	cc, cs := tcpPair(t, dir, false, tb.ReceiverNS, tb.SenderNS, host)
	bulk(t, cc, cs, 500*time.Millisecond)
	if cap := sockopt(t, cc, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE); uint32(cap) == paceUnlimited {
		t.Fatalf("the earlier build's assist left no pacing cap on a sender of its group: the test cannot tell a cap lifted from none")
	}

	stop := make(chan struct{})
	type sres struct {
		ss  []procSample
		err error
	}
	sc := make(chan sres, 1)
	t0 := time.Now()
	go func() {
		ss, err := sample(tb.SenderNS, tb.SenderDev, srv.Cmd.Process.Pid, stop)
		sc <- sres{ss, err}
	}()
	type cres struct {
		r   *workload.Result
		err error
	}
	cl := make(chan cres, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Stopped (cancel) once the upgrade is measured: it takes as
		// long as the program load does on this machine.
		r, err := tb.RunClient(ctx, l.bin, dir, workload.Config{
			Addr: tb.ReceiverAddr(netlab.ServerPort, false), Streams: 1, UDP: 1, UDPRate: 4 * limit,
			Duration: 5 * time.Minute, CC: "cubic",
		})
		cl <- cres{r, err}
	}()
	time.Sleep(3 * time.Second)

	upFrom := time.Since(t0)
	code, lines, at := l.timedRun(t0, []string{"HBM_TEST_STEPS=1"}, l.bin, setArgs...)
	upTo := time.Since(t0)
	var handover, done time.Duration // the first map replaced, the upgrade's end
	var warns []string
	for i, line := range lines {
		switch {
		case strings.Contains(line, ": replaced hbm_") && handover == 0:
			handover = at[i]
		case strings.HasSuffix(line, ": upgrade done"):
			done = at[i]
		case !strings.Contains(line, "HBM_TEST_STEPS"):
			warns = append(warns, line)
		}
	}
	t.Logf("upgrade (set): %v, staging %v, hand-over %v: %s", (upTo - upFrom).Round(time.Millisecond),
		(handover - upFrom).Round(time.Millisecond), (done - handover).Round(time.Millisecond), strings.Join(warns, "\n"))
	if code != 0 || handover == 0 || done == 0 || !strings.Contains(strings.Join(warns, "\n"), "upgraded the pinned state") {
		t.Fatalf("set on the earlier build's state: exit %d, want the upgrade's steps and its warning:\n%s", code, strings.Join(lines, "\n"))
	}
	l.checkUpgraded("after the upgrade", map[string]uint64{group + " egress": 100e6})
	// A daemon pass (a second group declared) works on the upgraded state.
	cfg := filepath.Join(t.TempDir(), "hbm.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("limits:\n  - cgroup: %s\n    egress: 50mbit\n", other)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := testutil.StartProc(t, []string{"HBM_PIN_DIR=" + l.pinDir}, l.bin, "daemon", "--config", cfg, "--metrics", "")
	if !testutil.WaitFor(20*time.Second, func() bool { return strings.Contains(d.Out.String(), "first pass") }) {
		t.Fatalf("daemon: no first pass on the upgraded state within 20s:\n%s", d.Out.String())
	}
	if err := d.Kill(syscall.SIGTERM); err != nil {
		t.Errorf("daemon: %v\n%s", err, d.Out.String())
	}
	l.checkUpgraded("after a daemon pass", map[string]uint64{group + " egress": 100e6, other + " egress": 50e6})

	time.Sleep(time.Until(t0.Add(done + 3*time.Second)))
	end := time.Since(t0)
	cancel()
	close(stop)
	s := <-sc
	if c := <-cl; c.err != context.Canceled || s.err != nil {
		server := "running"
		select {
		case <-srv.Done():
			server = fmt.Sprintf("exited (%v)", srv.Wait())
		default:
		}
		t.Fatalf("client: %v (want it running until canceled); sampler: %v; server: %s", c.err, s.err, server)
	}
	t.Logf("%d samples over %v", len(s.ss), s.ss[len(s.ss)-1].at.Round(time.Millisecond))
	type span struct {
		name     string
		from, to time.Duration
	}
	spans := []span{{"before", time.Second, upFrom}, {"staging", upFrom, handover}, {"hand-over+1s", handover, done + time.Second},
		{"after", done + time.Second, end}}
	// The policer's envelope (9 ms), one 64 KB TSO packet at the limit
	// (5.2 ms) and 2 ms for the frames' Ethernet headers and sampling.
	const allowed = 17 * time.Millisecond
	for _, sp := range spans {
		all := func(p procSample) uint64 { return p.txBytes }
		ex10, r10, stAll := windows(s.ss, sp.from, sp.to, 10*time.Millisecond, limit, all)
		ex100, _, _ := windows(s.ss, sp.from, sp.to, 100*time.Millisecond, limit, all)
		_, _, stTCP := windows(s.ss, sp.from, sp.to, 10*time.Millisecond, limit, func(p procSample) uint64 { return p.tcpSegs })
		_, _, stUDP := windows(s.ss, sp.from, sp.to, 10*time.Millisecond, limit, func(p procSample) uint64 { return p.udps })
		line := fmt.Sprintf("%s (%v): largest 10 ms window %.2f x the limit; most ahead of the limit %v (10 ms spans), %v (100 ms); longest stall: the group %v, TCP %v, UDP %v",
			sp.name, (sp.to - sp.from).Round(time.Millisecond), r10, ex10.Round(100*time.Microsecond), ex100.Round(100*time.Microsecond),
			stAll.Round(time.Millisecond), stTCP.Round(time.Millisecond), stUDP.Round(time.Millisecond))
		if os.Getenv("HBM_UPGRADE_MEASURE") == "1" {
			line = "UPGRADE-MEASURE " + line
		}
		t.Log(line)
		if sp.name != "hand-over+1s" {
			continue
		}
		if max(ex10, ex100) > allowed {
			t.Errorf("during the hand-over the group ran %v ahead of its limit, want <= %v (what its policer allows anyone)", max(ex10, ex100), allowed)
		}
		// UDP alone may wait out a TCP backlog above its drop threshold
		// for tens of ms, before and after alike (logged): the group's
		// traffic and the paced TCP stream may not stop.
		for what, st := range map[string]time.Duration{"the group's traffic": stAll, "TCP": stTCP} {
			if st > 50*time.Millisecond {
				t.Errorf("during the hand-over %s stalled for %v, want <= 50ms", what, st)
			}
		}
	}

	// This build's unset lifts the cap the earlier build's assist set.
	l.mustBin(l.bin, "unset", group)
	if cap := sockopt(t, cc, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE); uint32(cap) != paceUnlimited {
		t.Errorf("after unset by this build the socket capped by the earlier build keeps a pacing cap of %d bytes/s", cap)
	}
	// The earlier build, rolled back to, refuses with a clear error...
	or := l.runBin(nil, l.old, "set", group, "--egress", "100mbit")
	if or.code == 0 || !strings.Contains(or.errOut, "incompatible hbm version") {
		t.Errorf("the earlier build's set on the upgraded state: exit %d: %s", or.code, or.errOut)
	}
	l.checkUpgraded("after the earlier build's refusal", map[string]uint64{other + " egress": 50e6})
	// ... until this build carries the state back to its layout.
	dr := l.mustBin(l.bin, "downgrade", "--to", l.old)
	t.Logf("downgrade: %s", strings.TrimSpace(dr.out))
	l.mustBin(l.old, "set", group, "--egress", "100mbit")
	l.checkEnforced("the earlier build's set after downgrade", map[string][]uint32{group: {0}, other: {0}})
	if r := l.mustBin(l.old, "show", "--json"); len(parseShow(t, r.out)) != 2 {
		t.Errorf("the earlier build's show after downgrade: %s", r.out)
	}
	// And back up again.
	l.mustBin(l.bin, "set", other, "--egress", "60mbit")
	l.checkUpgraded("upgraded again", map[string]uint64{group + " egress": 100e6, other + " egress": 60e6})
}
