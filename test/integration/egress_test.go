package integration

// Egress limits end to end: real TCP between two network namespaces, the
// sender in a cgroup limited with the hbm binary (set, unset, show --json).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

const (
	egWarmup   = 1500 * time.Millisecond
	egDuration = 5 * time.Second
	egStreams  = 3
	// Goodput (bulk payload the receiver read) must land within these
	// fractions of the limit, which counts frames; the MTU 1500 ceiling is
	// 1448/1514 = 0.956. The upper bound is issue 9's bar, 1.03 of the
	// limit in frames on the wire, in goodput (x 0.956, with room for the
	// window's edges): a limiter that lets a group escape fails it.
	egLow, egHigh = 0.85, 0.99
)

// egLab is a testbed with a workload server and a test-specific cgroup tree
// /hbm-test-NAME, all removed at cleanup (after hbm unset), also on failure.
type egLab struct {
	t     *testing.T
	tb    *netlab.Pair
	hbm   netlab.HBM
	bin   string
	group string
}

func egSetup(t *testing.T, name string) *egLab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: integration test (root, namespaces, BPF, real traffic)")
	}
	testutil.RequireRoot(t)
	for _, c := range []string{"ip", "tc"} {
		testutil.RequireCommand(t, c)
	}
	bin := testutil.HBMBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "workload", "run", "--help").CombinedOutput(); err != nil {
		t.Fatalf("%s has no workload command: %v: %s", bin, err, out)
	}
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &egLab{t: t, hbm: netlab.HBM{Bin: bin}, bin: bin, group: "/hbm-test-" + name}
	// The lab comes first: a failure to build it leaves no cgroup behind.
	tb := labtest.Pair(t)
	l.tb = tb
	l.removeGroups() // leftovers of a crashed run
	t.Cleanup(l.removeGroups)
	if _, err := tb.StartServer(bin, netlab.ServerPort); err != nil {
		t.Fatal(err)
	}
	return l
}

// removeGroups unsets every group under the test's tree, deepest first, and
// removes the tree (waiting, bounded, for exited processes to leave it).
func (l *egLab) removeGroups() {
	mnt, err := cgroup.Mount()
	if err != nil {
		return
	}
	var rels []string
	filepath.WalkDir(filepath.Join(mnt, l.group), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			rels = append(rels, strings.TrimPrefix(p, mnt))
		}
		return nil
	})
	for i := len(rels) - 1; i >= 0; i-- {
		l.hbm.Unset(rels[i]) // most are not limited: errors expected
	}
	if err := cgroup.RemoveWait(l.group, 50, 100*time.Millisecond); err != nil {
		l.t.Errorf("remove cgroup %s: %v", l.group, err)
	}
}

// cgroup creates (if needed) the group rel under the test's tree and returns
// its path relative to the cgroup2 mount and its directory.
func (l *egLab) cgroup(t *testing.T, rel string) (string, string) {
	t.Helper()
	p := filepath.Join(l.group, rel)
	g, err := cgroup.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, g.Dir
}

// set limits group's egress to rate and checks that show reports it.
func (l *egLab) set(t *testing.T, group, rate string) {
	t.Helper()
	if err := l.hbm.Set(group, rate); err != nil {
		t.Fatalf("hbm set %s --egress %s: %v", group, rate, err)
	}
	want, _ := netlab.ParseRate(rate)
	c, err := l.hbm.Egress(group)
	if err != nil {
		t.Fatalf("hbm show --json: %v", err)
	}
	if c == nil || c.RateBps != want {
		t.Fatalf("hbm show --json after set %s %s: egress %+v, want rate_bps %d", group, rate, c, want)
	}
}

func (l *egLab) unset(t *testing.T, group string) {
	t.Helper()
	if err := l.hbm.Unset(group); err != nil {
		t.Fatalf("hbm unset %s: %v", group, err)
	}
	if c, err := l.hbm.Egress(group); err != nil || c != nil {
		t.Fatalf("hbm show --json after unset %s: egress %+v, %v", group, c, err)
	}
}

// run runs 3 bulk streams from group's directory dir and logs the figures
// (and the hbm counters of counted, if not empty).
func (l *egLab) run(t *testing.T, dir, cc string, v6 bool, counted string) *workload.Result {
	t.Helper()
	var before *jsonout.Direction
	if counted != "" {
		before, _ = l.hbm.Egress(counted)
	}
	cfg := workload.Config{
		Addr: l.tb.ReceiverAddr(netlab.ServerPort, v6), Streams: egStreams,
		Warmup: egWarmup, Duration: egDuration, CC: cc,
	}
	r, err := l.tb.RunClient(context.Background(), l.bin, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hbmLine := ""
	if counted != "" {
		if after, err := l.hbm.Egress(counted); err == nil && after != nil && before != nil {
			d := after.Sub(*before)
			secs := (egWarmup + egDuration).Seconds()
			hbmLine = fmt.Sprintf("; hbm %s: %.1f Mbit/s passed, %d pkts, marked %d, cwr %d, dropped %d",
				counted, float64(d.Bytes)*8/secs/1e6, d.Packets, d.Marked, d.CWR, d.Dropped)
		}
	}
	t.Logf("%s cc=%s: goodput %.1f Mbit/s (sender %.1f, streams %s), retrans %d, CE %d, srtt %.0fus max %.0fus, cwnd %.1f%s",
		cfg.Addr, r.CC, r.Goodput/1e6, r.SenderGoodput/1e6, mbits(r.StreamGoodput), r.Retransmits, r.DeliveredCE,
		r.RTT, r.RTTMax, r.Cwnd, hbmLine)
	for _, w := range r.Warnings {
		t.Logf("workload warning: %s", w)
	}
	if cc != "" && r.CC != cc {
		t.Errorf("sockets ran %q, want %q", r.CC, cc)
	}
	return r
}

func mbits(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x/1e6)
	}
	return strings.Join(s, "/")
}

// within checks goodput/limit in [lo, hi].
func within(t *testing.T, r *workload.Result, rate string, lo, hi float64) {
	t.Helper()
	limit, err := netlab.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	ratio := r.Goodput / float64(limit)
	if ratio < lo || ratio > hi {
		t.Errorf("goodput %.1f Mbit/s is %.3f of the %s limit, want [%.2f, %.2f]", r.Goodput/1e6, ratio, rate, lo, hi)
	} else {
		t.Logf("goodput %.3f of %s: ok", ratio, rate)
	}
}

// TestEgressLimit: 3 bulk streams under 200mbit and 1gbit limits land within
// [0.85, 0.99] of the limit, for cubic, cubic with ECN and bbr.
func TestEgressLimit(t *testing.T) {
	l := egSetup(t, "eglim")
	group, dir := l.cgroup(t, "w")
	for _, cc := range []string{"cubic", "cubic+ecn", "bbr"} {
		name, ecn := strings.CutSuffix(cc, "+ecn")
		for _, rate := range []string{"200mbit", "1gbit"} {
			t.Run(cc+"/"+rate, func(t *testing.T) {
				if err := l.tb.SetECN(ecn); err != nil {
					t.Fatal(err)
				}
				l.set(t, group, rate)
				defer l.hbm.Unset(group)
				before := egressCounters(t, l, group)
				r := l.run(t, dir, name, false, group)
				d := egressCounters(t, l, group).Sub(before)
				within(t, r, rate, egLow, egHigh)
				// HBM is the only thing that can set CE here (no qdisc
				// on the veth): echoes need its marks, and ECN. Marks are
				// not required (the pacing assist may keep the flows
				// below the mark threshold, or HBM may use cwr).
				if r.DeliveredCE > 0 && (!ecn || d.Marked == 0) {
					t.Errorf("senders saw %d CE echoes with ECN %v and %d HBM marks: CE from nowhere", r.DeliveredCE, ecn, d.Marked)
				}
			})
		}
	}
}

// TestEgressRateChange: setting a limited group again moves the achieved rate.
func TestEgressRateChange(t *testing.T) {
	l := egSetup(t, "egchg")
	group, dir := l.cgroup(t, "w")
	for _, rate := range []string{"200mbit", "1gbit", "300mbit"} {
		l.set(t, group, rate)
		r := l.run(t, dir, "cubic", false, group)
		within(t, r, rate, egLow, egHigh)
	}
}

// TestEgressUnset: unset restores full speed, well above the old limit.
func TestEgressUnset(t *testing.T) {
	l := egSetup(t, "egunset")
	group, dir := l.cgroup(t, "w")
	l.set(t, group, "200mbit")
	r := l.run(t, dir, "cubic", false, group)
	within(t, r, "200mbit", egLow, egHigh)
	l.unset(t, group)
	r = l.run(t, dir, "cubic", false, "")
	if r.Goodput < 4*200e6 {
		t.Errorf("after unset goodput %.1f Mbit/s, want well above the old 200mbit limit (>= 800)", r.Goodput/1e6)
	}
}

// TestEgressNested: a group's traffic obeys the tightest limit on its path.
func TestEgressNested(t *testing.T) {
	l := egSetup(t, "egnest")
	parent, _ := l.cgroup(t, "p")
	child, dir := l.cgroup(t, "p/c")

	t.Run("parent-200mbit-child-1gbit", func(t *testing.T) {
		l.set(t, parent, "200mbit")
		l.set(t, child, "1gbit")
		defer l.hbm.Unset(child)
		defer l.hbm.Unset(parent)
		r := l.run(t, dir, "cubic", false, parent)
		// Only the upper bound is the contract; the lower one catches a
		// limiter that starves the group.
		within(t, r, "200mbit", 0.5, egHigh)
	})
	t.Run("parent-1gbit-child-200mbit", func(t *testing.T) {
		l.set(t, parent, "1gbit")
		l.set(t, child, "200mbit")
		defer l.hbm.Unset(child)
		defer l.hbm.Unset(parent)
		r := l.run(t, dir, "cubic", false, child)
		within(t, r, "200mbit", egLow, egHigh)
	})
}

// TestEgressIPv6: limits hold for IPv6 traffic.
func TestEgressIPv6(t *testing.T) {
	l := egSetup(t, "egv6")
	group, dir := l.cgroup(t, "w")
	l.set(t, group, "200mbit")
	r := l.run(t, dir, "cubic", true, group)
	within(t, r, "200mbit", egLow, egHigh)
	if !strings.HasPrefix(r.Addr, "[fd00:") {
		t.Errorf("ran over %s, want IPv6", r.Addr)
	}
}

// TestEgressLiveFlows: limits set, changed and removed under flows that are
// already running (grown windows, tiny veth RTT) take hold as they do for
// new connections.
func TestEgressLiveFlows(t *testing.T) {
	l := egSetup(t, "eglive")
	group, dir := l.cgroup(t, "w")
	cfg := workload.Config{
		Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: egStreams, Duration: 60 * time.Second, CC: "cubic",
	}
	c, err := l.tb.StartScriptClient(l.bin, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	window := func(name string, d time.Duration) *workload.Result {
		t.Helper()
		r, err := c.Window(ctx, name, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: goodput %.1f Mbit/s (streams %s), retrans %d, srtt %.0fus, cwnd %.1f",
			name, r.Goodput/1e6, mbits(r.StreamGoodput), r.Retransmits, r.RTT, r.Cwnd)
		return r
	}
	time.Sleep(egWarmup)
	free := window("unlimited", 2*time.Second)
	for _, rate := range []string{"200mbit", "1gbit"} {
		l.set(t, group, rate)
		time.Sleep(egWarmup)
		within(t, window(rate, 4*time.Second), rate, egLow, egHigh)
	}
	l.unset(t, group)
	time.Sleep(time.Second)
	if r := window("unset", 2*time.Second); r.Goodput < 4e9 {
		t.Errorf("after unset goodput %.1f Mbit/s, want well above the old 1gbit limit (>= 4000; unlimited ran %.1f)",
			r.Goodput/1e6, free.Goodput/1e6)
	}
}

// TestEgressNestedChildFlood: a child's limit is reachable inside its
// parent's, and only packets that leave are charged. /p at 1gbit, /p/a at
// 100mbit flooding UDP (offered 1 Gbit/s), /p/b with TCP streams and no
// limit of its own: /p/a delivers its own 100 Mbit/s (data plane v2 policed
// root first, so /p dropped the flood before /p/a's limit saw it: 19 of
// 100 Mbit/s), and /p/b keeps about the rest of /p's.
func TestEgressNestedChildFlood(t *testing.T) {
	l := egSetup(t, "egflood")
	parent, _ := l.cgroup(t, "p")
	child, adir := l.cgroup(t, "p/a")
	_, bdir := l.cgroup(t, "p/b")
	l.set(t, parent, "1gbit")
	l.set(t, child, "100mbit")
	defer l.hbm.Unset(parent)
	defer l.hbm.Unset(child)

	type res struct {
		r   *workload.Result
		err error
	}
	udp, tcp := make(chan res, 1), make(chan res, 1)
	go func() {
		r, err := l.tb.RunClient(context.Background(), l.bin, adir, workload.Config{
			Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), UDP: 1, UDPRate: 1e9,
			Warmup: egWarmup, Duration: egDuration,
		})
		udp <- res{r, err}
	}()
	go func() {
		r, err := l.tb.RunClient(context.Background(), l.bin, bdir, workload.Config{
			Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: egStreams,
			Warmup: egWarmup, Duration: egDuration, CC: "cubic",
		})
		tcp <- res{r, err}
	}()
	u, c := <-udp, <-tcp
	if u.err != nil || c.err != nil {
		t.Fatalf("clients: udp %v, tcp %v", u.err, c.err)
	}
	// UDP goodput is payload: a 1472-byte datagram is a 1514-byte frame.
	a := u.r.UDPGoodput / 100e6
	b := c.r.Goodput / 900e6
	t.Logf("/p/a UDP %.1f Mbit/s (%.3f of 100mbit), offered %.0f; /p/b TCP %.1f Mbit/s (%.3f of the 900 left)",
		u.r.UDPGoodput/1e6, a, u.r.UDPOffered/1e6, c.r.Goodput/1e6, b)
	if a < 0.80 || a > 1.03 {
		t.Errorf("/p/a delivered %.3f of its 100mbit limit, want [0.80, 1.03]", a)
	}
	if b < 0.70 || b > 1.03 {
		t.Errorf("/p/b delivered %.3f of the 900 Mbit/s its parent leaves, want [0.70, 1.03]", b)
	}
}
