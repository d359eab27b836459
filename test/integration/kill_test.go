package integration

// Kill tests: hbm set, unset and prune killed (SIGKILL, through the test-only
// HBM_TEST_STOP_AFTER=N) after each of their change steps, and hbm set
// killed at each of its bpf() calls (under ptrace). After every
// kill the kernel is read directly (the programs attached to each cgroup, the
// pinned maps, the links directory) and compared with what `hbm show --json`
// says; then the next command (prune, which opens the state for writing)
// must leave the state as it was before the killed command or as asked.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/spawn"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// kLab is one test's private world: a pin directory under /sys/fs/bpf and a
// cgroup tree, both removed at the start (a crashed run's leftovers) and at
// cleanup, also on failure.
type kLab struct {
	t      *testing.T
	bin    string
	pinDir string
	top    string // cgroup tree, relative to the cgroup2 mount
	mnt    string
}

func newKLab(t *testing.T, name string) *kLab {
	t.Helper()
	return newKLabAt(t, "/sys/fs/bpf/hbm-test-"+name, "/hbm-test-"+name)
}

// newKLabAt is newKLab with the pin directory and cgroup tree named.
func newKLabAt(t *testing.T, pinDir, top string) *kLab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: integration test (root, BPF, cgroups)")
	}
	testutil.RequireRoot(t)
	mnt, err := cgroup.Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &kLab{t: t, bin: testutil.HBMBinary(t), pinDir: pinDir, top: top, mnt: mnt}
	l.reset()
	t.Cleanup(l.reset)
	return l
}

// reset removes the pin directory (unpinning the links detaches them: the
// test holds no other reference) and the cgroup tree.
func (l *kLab) reset() {
	if err := os.RemoveAll(l.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.t.Errorf("remove %s: %v", l.pinDir, err)
	}
	if err := cgroup.RemoveWait(l.top, 50, 100*time.Millisecond); err != nil {
		l.t.Errorf("remove cgroup %s: %v", l.top, err)
	}
}

// mk creates group rel (under the test's tree) and returns its path relative
// to the mount.
func (l *kLab) mk(rel string) string {
	l.t.Helper()
	p := filepath.Join(l.top, rel)
	if _, err := cgroup.Create(p); err != nil {
		l.t.Fatal(err)
	}
	return p
}

func (l *kLab) id(rel string) uint64 {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(l.mnt, rel), &st) != nil {
		return 0
	}
	return st.Ino
}

// hbmResult is how one hbm run ended.
type hbmResult struct {
	out, errOut string
	code        int  // exit status (-1 when killed by a signal)
	killed      bool // killed by SIGKILL
}

// run runs hbm with args in the test's pin directory, with extra environment
// (e.g. HBM_TEST_STOP_AFTER=N).
func (l *kLab) run(env []string, args ...string) hbmResult {
	l.t.Helper()
	return l.runBin(env, l.bin, args...)
}

// runBin runs the hbm binary bin (another build's, for the upgrade tests)
// like run, bounded to 60 s (a program load on a loaded machine).
func (l *kLab) runBin(env []string, bin string, args ...string) hbmResult {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), "HBM_PIN_DIR="+l.pinDir), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := spawn.Run(cmd)
	r := hbmResult{out: stdout.String(), errOut: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	default:
		l.t.Fatalf("%s %v: %v", bin, args, err)
	}
	if ctx.Err() != nil {
		l.t.Fatalf("%s %v: timed out: %s", bin, args, r.errOut)
	}
	return r
}

// must runs hbm and fails the test unless it exits 0.
func (l *kLab) must(args ...string) string {
	l.t.Helper()
	return l.mustBin(l.bin, args...).out
}

// mustBin runs the hbm binary bin and fails the test unless it exits 0.
func (l *kLab) mustBin(bin string, args ...string) hbmResult {
	l.t.Helper()
	r := l.runBin(nil, bin, args...)
	if r.killed || r.code != 0 {
		l.t.Fatalf("%s %s: exit %d (killed %v): %s", bin, strings.Join(args, " "), r.code, r.killed, r.errOut)
	}
	return r
}

func (l *kLab) show() []jsonout.Group {
	l.t.Helper()
	out := l.must("show", "--json")
	var es []jsonout.Group
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		l.t.Fatalf("hbm show --json: %v: %q", err, out)
	}
	return es
}

// progIDs returns the ids of this pin directory's programs named name (all
// builds' pins, scratch included), read from the pins themselves.
func (l *kLab) progIDs(name string) map[ebpf.ProgramID]bool {
	out := map[ebpf.ProgramID]bool{}
	paths, _ := filepath.Glob(filepath.Join(l.pinDir, "progs", "*", name))
	for _, p := range paths {
		prog, err := ebpf.LoadPinnedProgram(p, nil)
		if err != nil {
			l.t.Fatalf("load pinned program %s: %v", p, err)
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			l.t.Fatal(err)
		}
		if id, ok := info.ID(); ok {
			out[id] = true
		}
	}
	return out
}

// kernelCount returns how many times one of ids runs for sockets of group rel
// on hook at: the kernel's effective program list of the cgroup (its own and
// its ancestors' attachments).
func (l *kLab) kernelCount(rel string, at ebpf.AttachType, ids map[ebpf.ProgramID]bool) int {
	l.t.Helper()
	fd, err := unix.Open(filepath.Join(l.mnt, rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.t.Fatalf("open cgroup %s: %v", rel, err)
	}
	defer unix.Close(fd)
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: at, QueryFlags: unix.BPF_F_QUERY_EFFECTIVE})
	if err != nil {
		l.t.Fatalf("query %v programs of %s: %v", at, rel, err)
	}
	n := 0
	for _, p := range res.Programs {
		if ids[p.ID] {
			n++
		}
	}
	return n
}

// mapKeys returns the egress cgroup ids keyed in pinned map name.
func (l *kLab) mapKeys(name string) []uint64 {
	l.t.Helper()
	mp, err := ebpf.LoadPinnedMap(filepath.Join(l.pinDir, name), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		l.t.Fatalf("open %s: %v", name, err)
	}
	defer mp.Close()
	var out []uint64
	var key, next [16]byte
	var prev any // nil: first key
	for i := 0; i < 1<<20; i++ {
		if err := mp.NextKey(prev, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			l.t.Fatalf("iterate %s: %v", name, err)
		}
		if dir := uint32(next[8]) | uint32(next[9])<<8; dir == 0 { // egress
			out = append(out, uint64(next[0])|uint64(next[1])<<8|uint64(next[2])<<16|uint64(next[3])<<24|
				uint64(next[4])<<32|uint64(next[5])<<40|uint64(next[6])<<48|uint64(next[7])<<56)
		}
		key = next
		prev = &key
	}
	slices.Sort(out)
	return out
}

// links returns the names in the pin directory's links/.
func (l *kLab) links() []string {
	es, _ := os.ReadDir(filepath.Join(l.pinDir, "links"))
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// txnOp reads the journal's operation (0: no change under way).
func (l *kLab) txnOp() uint32 {
	l.t.Helper()
	mp, err := ebpf.LoadPinnedMap(filepath.Join(l.pinDir, "hbm_txn_map"), nil)
	if err != nil {
		l.t.Fatalf("open journal: %v", err)
	}
	defer mp.Close()
	v := make([]byte, mp.ValueSize())
	if err := mp.Lookup(uint32(0), &v); err != nil {
		l.t.Fatalf("read journal: %v", err)
	}
	return uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24
}

// checkTruth asserts (a): every limit `hbm show --json` lists with a path is
// "enforced" exactly when the kernel runs, for its group, both programs of
// this pin directory it needs: the egress program and the pacing assist
// (every limit of these tests has the assist: none is --no-pace); and (b):
// every group of mustServe is served (policed, at least).
func (l *kLab) checkTruth(when string, mustServe []string) {
	l.t.Helper()
	egress, pace := l.progIDs("hbm_egress"), l.progIDs("hbm_pace_ops")
	for _, e := range l.show() {
		if e.Egress == nil || e.Cgroup == "" || e.Removed {
			continue
		}
		policed := l.kernelCount(e.Cgroup, ebpf.AttachCGroupInetEgress, egress) > 0
		paced := l.kernelCount(e.Cgroup, ebpf.AttachCGroupSockOps, pace) > 0
		if served := policed && paced; served != e.Egress.Enforced {
			l.t.Errorf("%s: hbm show says %s enforced=%v, the kernel runs hbm's egress program for it: %v, its pacing assist: %v",
				when, e.Cgroup, e.Egress.Enforced, policed, paced)
		}
	}
	for _, g := range mustServe {
		if l.kernelCount(g, ebpf.AttachCGroupInetEgress, egress) == 0 {
			l.t.Errorf("%s: %s was limited before and stays limited, but no hbm egress program serves it", when, g)
		}
	}
}

// checkSettled asserts that the state is exactly "limited" (the set of
// limited groups): limits, queues and counters keyed by exactly those
// groups; links (egress and its sockops assist) at exactly the topmost of
// them; every one served exactly once by each program; the journal empty;
// show listing each, enforced.
func (l *kLab) checkSettled(when string, limited []string) {
	l.t.Helper()
	var ids []uint64
	var wantLinks []string
	for _, g := range limited {
		id := l.id(g)
		ids = append(ids, id)
		top := true
		for _, o := range limited {
			if o != g && strings.HasPrefix(g, o+"/") {
				top = false
			}
		}
		if top {
			wantLinks = append(wantLinks, fmt.Sprintf("%d-egress", id), fmt.Sprintf("%d-egress-sockops", id))
		}
	}
	slices.Sort(ids)
	sort.Strings(wantLinks)
	for _, name := range []string{"hbm_limit_map", "hbm_queue_map"} { // counters live in the queue
		if got := l.mapKeys(name); !slices.Equal(got, ids) {
			l.t.Errorf("%s: %s holds egress keys %v, want %v (groups %v)", when, name, got, ids, limited)
		}
	}
	if got := l.links(); !slices.Equal(got, wantLinks) {
		l.t.Errorf("%s: links/ holds %v, want %v (topmost of %v)", when, got, wantLinks, limited)
	}
	if op := l.txnOp(); op != 0 {
		l.t.Errorf("%s: journal still holds op %d", when, op)
	}
	egress, pace := l.progIDs("hbm_egress"), l.progIDs("hbm_pace_ops")
	for _, g := range limited {
		if n := l.kernelCount(g, ebpf.AttachCGroupInetEgress, egress); n != 1 {
			l.t.Errorf("%s: hbm's egress program runs %d times for %s, want 1 (2: packets charged twice)", when, n, g)
		}
		if n := l.kernelCount(g, ebpf.AttachCGroupSockOps, pace); n != 1 {
			l.t.Errorf("%s: hbm's pacing assist runs %d times for %s, want 1", when, n, g)
		}
	}
	shown := map[string]bool{}
	for _, e := range l.show() {
		if e.Egress == nil {
			continue
		}
		if e.Removed || e.Cgroup == "" || !e.Egress.Enforced {
			l.t.Errorf("%s: hbm show lists %+v (egress %+v), want a live enforced group", when, e, *e.Egress)
		}
		shown[e.Cgroup] = true
	}
	for _, g := range limited {
		if !shown[g] {
			l.t.Errorf("%s: hbm show does not list %s", when, g)
		}
	}
	if len(shown) != len(limited) {
		l.t.Errorf("%s: hbm show lists %v, want %v", when, shown, limited)
	}
}

// limitedNow returns which of candidates have an egress limit in the map.
func (l *kLab) limitedNow(candidates []string) []string {
	keys := l.mapKeys("hbm_limit_map")
	var out []string
	for _, g := range candidates {
		if id := l.id(g); id != 0 && slices.Contains(keys, id) {
			out = append(out, g)
		}
	}
	return out
}

// killCase is one command killed after each of its steps.
type killCase struct {
	name string
	// setup builds the state before the command (with plain hbm runs) and
	// returns the groups limited before and after the command (live groups
	// only) and the command.
	setup func(l *kLab) (before, after []string, cmd []string)
}

// killCases are the commands TestKill kills after each step.
func killCases() []killCase {
	const rate = "100mbit"
	return []killCase{
		{"setnew", func(l *kLab) ([]string, []string, []string) {
			s, a := l.mk("s"), l.mk("a")
			l.must("set", s, "--egress", rate)
			return []string{s}, []string{a, s}, []string{"set", a, "--egress", rate}
		}},
		// Issue 23: a set after a set and unset of the same group (its
		// programs pinned: no load) killed between its two attachments
		// left policing without pacing, shown as enforced.
		{"setagain", setAgain},
		{"setparent", func(l *kLab) ([]string, []string, []string) {
			p := l.mk("p")
			c := l.mk("p/c")
			l.must("set", c, "--egress", rate)
			return []string{c}, []string{p, c}, []string{"set", p, "--egress", "200mbit"}
		}},
		{"unsetparent", func(l *kLab) ([]string, []string, []string) {
			p := l.mk("p")
			c := l.mk("p/c")
			l.must("set", p, "--egress", "200mbit")
			l.must("set", c, "--egress", rate)
			return []string{p, c}, []string{c}, []string{"unset", p}
		}},
		{"unsetplain", func(l *kLab) ([]string, []string, []string) {
			s, a := l.mk("s"), l.mk("a")
			l.must("set", s, "--egress", rate)
			l.must("set", a, "--egress", rate)
			return []string{a, s}, []string{s}, []string{"unset", a}
		}},
		{"prune", func(l *kLab) ([]string, []string, []string) {
			s, a := l.mk("s"), l.mk("a")
			l.must("set", s, "--egress", rate)
			l.must("set", a, "--egress", rate)
			l.checkSettled("before rmdir", []string{a, s})
			if err := unix.Rmdir(filepath.Join(l.mnt, a)); err != nil {
				l.t.Fatal(err)
			}
			return []string{s}, []string{s}, []string{"prune"}
		}},
	}
}

// setAgain: group g set and unset, then set again.
func setAgain(l *kLab) ([]string, []string, []string) {
	g := l.mk("g")
	l.must("set", g, "--egress", "100mbit")
	l.must("unset", g)
	return nil, []string{g}, []string{"set", g, "--egress", "100mbit"}
}

func TestKill(t *testing.T) {
	for _, c := range killCases() {
		t.Run(c.name, func(t *testing.T) {
			l := newKLab(t, "kill-"+c.name)
			killAt(t, l, c, "after step", 40, func(n int, cmd []string) hbmResult {
				return l.run([]string{fmt.Sprintf("HBM_TEST_STOP_AFTER=%d", n)}, cmd...)
			})
		})
	}
}

// TestKillAtBPFCall kills hbm set at each of its bpf() calls in turn (the
// call not made), the finest grain a kill can have for the data plane: it
// also falls between a link's creation and its pin, and inside the
// programs' and maps' opening, where no change step ends.
func TestKillAtBPFCall(t *testing.T) {
	for _, c := range []killCase{{"setagain", setAgain}} {
		t.Run(c.name, func(t *testing.T) {
			l := newKLab(t, "killbpf-"+c.name)
			killAt(t, l, c, "at bpf() call", 200, func(n int, cmd []string) hbmResult {
				env := append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
				r, err := runKilledAtBPFCall(append([]string{l.bin}, cmd...), env, n)
				if err != nil {
					t.Fatalf("hbm %v killed at bpf() call %d: %v", cmd, n, err)
				}
				return r
			})
		})
	}
}

// killAt runs c's command killed at kill point n = 1, 2, ... (run kills it
// there; point names the points) until it completes, at most maxPoints:
// after each kill show must tell the kernel's truth, and the next command
// (prune) must finish or undo the killed one.
func killAt(t *testing.T, l *kLab, c killCase, point string, maxPoints int, run func(n int, cmd []string) hbmResult) {
	for n := 1; n <= maxPoints; n++ {
		l.reset()
		if err := os.MkdirAll(filepath.Join(l.mnt, l.top), 0o755); err != nil {
			t.Fatal(err)
		}
		before, after, cmd := c.setup(l)
		if c.name != "prune" { // its removed group's remains are checked before the rmdir
			l.checkSettled(fmt.Sprintf("before %v", cmd), before)
		}
		if t.Failed() {
			return
		}
		// Groups limited both before and after must stay served.
		var stay []string
		for _, g := range before {
			if slices.Contains(after, g) {
				stay = append(stay, g)
			}
		}
		r := run(n, cmd)
		when := fmt.Sprintf("%v killed %s %d", cmd, point, n)
		if !r.killed {
			if r.code != 0 {
				t.Fatalf("%v to be killed %s %d: exit %d: %s", cmd, point, n, r.code, r.errOut)
			}
			l.checkSettled(fmt.Sprintf("%v completed (no %s %d)", cmd, point, n), after)
			t.Logf("%v: killed %s each of 1..%d", cmd, point, n-1)
			return
		}
		l.checkTruth(when, stay)
		// The next command repairs; show first must not change a thing
		// (it only reads), then prune opens the state for writing.
		l.checkTruth(when+", then show", stay)
		l.must("prune")
		when += ", then prune"
		l.checkTruth(when, stay)
		got := l.limitedNow(append(slices.Clone(before), after...))
		slices.Sort(got)
		got = slices.Compact(got)
		b, a := slices.Sorted(slices.Values(before)), slices.Sorted(slices.Values(after))
		switch {
		case slices.Equal(got, a):
			l.checkSettled(when+" (finished)", after)
		case slices.Equal(got, b):
			l.checkSettled(when+" (undone)", before)
		default:
			t.Errorf("%s: limited groups %v, want as before %v or as asked %v", when, got, b, a)
		}
		if t.Failed() {
			return
		}
	}
	t.Fatalf("%v still killed %s %d", c.name, point, maxPoints)
}

// TestAssistRestored: a policing link left without its assist by anything
// but a journaled change (here its sockops link unpinned by hand, which
// detaches it) makes show say NO for a limit with the assist, yes for a
// --no-pace one, and the next command that opens the state for writing
// attaches the assist again.
func TestAssistRestored(t *testing.T) {
	l := newKLab(t, "assist")
	if err := os.MkdirAll(filepath.Join(l.mnt, l.top), 0o755); err != nil {
		t.Fatal(err)
	}
	paced, unpaced := l.mk("paced"), l.mk("unpaced")
	l.must("set", paced, "--egress", "100mbit")
	l.must("set", unpaced, "--egress", "100mbit", "--no-pace")
	l.checkSettled("set", []string{paced, unpaced})
	for _, g := range []string{paced, unpaced} {
		path := filepath.Join(l.pinDir, "links", fmt.Sprintf("%d-egress-sockops", l.id(g)))
		lk, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = lk.Unpin()
		lk.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	pace := l.progIDs("hbm_pace_ops")
	enforced := map[string]bool{}
	for _, e := range l.show() {
		if e.Egress != nil {
			enforced[e.Cgroup] = e.Egress.Enforced
		}
		if n := l.kernelCount(e.Cgroup, ebpf.AttachCGroupSockOps, pace); n != 0 {
			t.Fatalf("%s: the pacing assist still runs %d times after its link was unpinned", e.Cgroup, n)
		}
	}
	if want := map[string]bool{paced: false, unpaced: true}; !maps.Equal(enforced, want) {
		t.Errorf("without the assist's links, hbm show says enforced %v, want %v (the assist is needed unless --no-pace)", enforced, want)
	}
	r := l.run(nil, "prune")
	if r.killed || r.code != 0 {
		t.Fatalf("hbm prune: exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.errOut, "attached the egress assist of "+paced) {
		t.Errorf("hbm prune does not say it attached the assist of %s again: %q", paced, r.errOut)
	}
	l.checkSettled("after prune", []string{paced, unpaced})
}

// bothState is a group's two directions as the kernel and the pinned state
// hold them after a kill and the next command: "both", "neither", or what
// is wrong.
func (l *kLab) bothState(g string, eRate, iRate uint64) string {
	l.t.Helper()
	id := l.id(g)
	var ls []string
	for _, n := range l.links() {
		if strings.HasPrefix(n, fmt.Sprintf("%d-", id)) {
			ls = append(ls, n)
		}
	}
	if op := l.txnOp(); op != 0 {
		return fmt.Sprintf("journal holds op %d", op)
	}
	var e *jsonout.Group
	for _, s := range l.show() {
		if s.CgroupID == id {
			e = &s
		}
	}
	egress := l.kernelCount(g, ebpf.AttachCGroupInetEgress, l.progIDs("hbm_egress"))
	ingress := l.kernelCount(g, ebpf.AttachCGroupInetIngress, l.progIDs("hbm_ingress"))
	pace := l.kernelCount(g, ebpf.AttachCGroupSockOps, l.progIDs("hbm_pace_ops"))
	rxwin := l.kernelCount(g, ebpf.AttachCGroupSockOps, l.progIDs("hbm_rxwin_ops"))
	switch {
	case e == nil && len(ls) == 0 && egress+ingress+pace+rxwin == 0:
		return "neither"
	case e != nil && e.Egress != nil && e.Ingress != nil &&
		e.Egress.RateBps == eRate && e.Ingress.RateBps == iRate && e.Egress.Enforced && e.Ingress.Enforced &&
		len(ls) == 4 && egress == 1 && ingress == 1 && pace == 1 && rxwin == 1:
		return "both"
	}
	desc := fmt.Sprintf("links %v, programs run: egress %d pace %d ingress %d rxwin %d", ls, egress, pace, ingress, rxwin)
	if e != nil {
		if e.Egress != nil {
			desc += fmt.Sprintf(", egress limit %d enforced %v", e.Egress.RateBps, e.Egress.Enforced)
		}
		if e.Ingress != nil {
			desc += fmt.Sprintf(", ingress limit %d enforced %v", e.Ingress.RateBps, e.Ingress.Enforced)
		}
	}
	return desc
}

// killBoth kills `hbm set G --egress A --ingress B` at kill point n = 1, 2,
// ... until it completes (at most maxPoints): after each kill the next
// command that changes limits (prune) must leave both directions applied
// or neither (issue 26: a multi-direction Apply is one transaction).
func killBoth(t *testing.T, l *kLab, point string, maxPoints int, run func(n int, cmd []string) hbmResult) {
	const eRate, iRate = 100e6, 200e6
	l.reset()
	g := l.mk("g")
	cmd := []string{"set", g, "--egress", "100mbit", "--ingress", "200mbit"}
	// Set and unset first, as setAgain: the programs are pinned, so the
	// killed command's steps are the change's, not the programs' load
	// (which a prune would redo, for seconds, after each kill).
	l.must(cmd...)
	l.must("unset", g)
	for n := 1; n <= maxPoints; n++ {
		r := run(n, cmd)
		if !r.killed {
			if r.code != 0 {
				t.Fatalf("%v to be killed %s %d: exit %d: %s", cmd, point, n, r.code, r.errOut)
			}
			if s := l.bothState(g, eRate, iRate); s != "both" {
				t.Errorf("%v completed: %s, want both directions applied", cmd, s)
			}
			t.Logf("%v: killed %s each of 1..%d", cmd, point, n-1)
			return
		}
		if pr := l.run(nil, "prune"); pr.killed || pr.code != 0 {
			t.Fatalf("%v killed %s %d, then prune: exit %d: %s", cmd, point, n, pr.code, pr.errOut)
		}
		s := l.bothState(g, eRate, iRate)
		if s != "both" && s != "neither" {
			t.Errorf("%v killed %s %d, then prune: %s; want both directions applied or neither", cmd, point, n, s)
		}
		if t.Failed() {
			return
		}
		if s == "both" { // back to no limit for the next kill
			l.must("unset", g)
			if s := l.bothState(g, eRate, iRate); s != "neither" {
				t.Fatalf("after unset: %s", s)
			}
		}
	}
	t.Fatalf("still killed %s %d", point, maxPoints)
}

// TestKillBothDirections: hbm set with --egress and --ingress killed after
// each change step.
func TestKillBothDirections(t *testing.T) {
	l := newKLab(t, "kill-both")
	killBoth(t, l, "after step", 40, func(n int, cmd []string) hbmResult {
		return l.run([]string{fmt.Sprintf("HBM_TEST_STOP_AFTER=%d", n)}, cmd...)
	})
}

// TestKillBothDirectionsAtBPFCall: the same, killed at each bpf() call.
func TestKillBothDirectionsAtBPFCall(t *testing.T) {
	l := newKLab(t, "killbpf-both")
	killBoth(t, l, "at bpf() call", 300, func(n int, cmd []string) hbmResult {
		env := append(os.Environ(), "HBM_PIN_DIR="+l.pinDir)
		r, err := runKilledAtBPFCall(append([]string{l.bin}, cmd...), env, n)
		if err != nil {
			t.Fatalf("hbm %v killed at bpf() call %d: %v", cmd, n, err)
		}
		return r
	})
}
