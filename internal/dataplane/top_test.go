package dataplane

// The top flag (HBM_F_TOP): the topmost limited group of a direction ends
// the programs' walk up a socket's cgroup path. Kept by the Manager as limits
// come and go above and below (TestTopFlag), honoured by the program
// (TestTopEndsWalk), and what it saves per packet (BenchmarkPacketCostDepth).

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// topGroups creates top and the groups rels below it (parents first) and
// removes them at the end (children first), also a crashed run's leftovers.
func topGroups(t testing.TB, top string, rels ...string) map[string]cgroup.Group {
	t.Helper()
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	remove := func() {
		for i := len(rels) - 1; i >= 0; i-- {
			cgroup.Remove(top + "/" + rels[i])
		}
		cgroup.Remove(top)
	}
	remove()
	t.Cleanup(remove)
	gs := map[string]cgroup.Group{}
	for _, rel := range append([]string{""}, rels...) {
		g, err := cgroup.Create(strings.TrimSuffix(top+"/"+rel, "/"))
		if err != nil {
			t.Fatal(err)
		}
		gs[rel] = g
	}
	return gs
}

// enterGroup moves this process into g until the test ends: the test run's
// socket takes the cgroup of the task that runs it.
func enterGroup(t testing.TB, g cgroup.Group) {
	t.Helper()
	mnt, err := cgroup.Mount()
	if err != nil {
		t.Fatalf("cgroup2 mount: %v", err)
	}
	back := testutil.EnterCgroup(t, mnt, g.Dir)
	t.Cleanup(func() {
		if err := back(); err != nil {
			t.Error(err)
		}
	})
}

// TestTopFlag: the topmost limited group of each direction, and no other,
// carries the flag, through sets and unsets above and below it.
func TestTopFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs BPF")
	}
	testutil.RequireRoot(t)
	const pinDir = "/sys/fs/bpf/hbm-test-top"
	os.RemoveAll(pinDir)
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	gs := topGroups(t, "/hbm-test-top", "p", "p/a", "p/a/x", "p/b")
	m, err := Open(pinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.mountIsRoot() {
		t.Skip("the cgroup2 mount is not the root of the cgroup tree (a cgroup namespace): hbm sets no top flag")
	}
	l := Limit{Rate: 100_000_000, Thresholds: rate.Default(100_000_000)}
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// want: group -> top flag on egress ("-": not limited).
	check := func(after string, d Direction, want map[string]string) {
		t.Helper()
		for rel, w := range want {
			var c hbmHbmConfig
			got := "-"
			if m.st.limits.Lookup(key(gs[rel].ID, d), &c) == nil {
				got = strconv.FormatBool(c.Flags&hbmHbmFlagsHBM_F_TOP != 0)
			}
			if got != w {
				t.Errorf("after %s: %s %v top = %s, want %s", after, rel, d, got, w)
			}
		}
	}
	step("set a", m.Set(gs["p/a"], Egress, l))
	check("set a", Egress, map[string]string{"p": "-", "p/a": "true"})
	step("set p", m.Set(gs["p"], Egress, l))
	check("set p", Egress, map[string]string{"p": "true", "p/a": "false"})
	step("set x", m.Set(gs["p/a/x"], Egress, l))
	check("set x", Egress, map[string]string{"p": "true", "p/a": "false", "p/a/x": "false"})
	step("set p again", m.Set(gs["p"], Egress, Limit{Rate: 200_000_000, Thresholds: rate.Default(200_000_000)}))
	check("set p again", Egress, map[string]string{"p": "true", "p/a": "false", "p/a/x": "false"})
	step("unset p", m.Unset(gs["p"], Egress))
	check("unset p", Egress, map[string]string{"p": "-", "p/a": "true", "p/a/x": "false"})
	step("unset a", m.Unset(gs["p/a"], Egress))
	check("unset a", Egress, map[string]string{"p/a": "-", "p/a/x": "true"})
	// Directions apart: p limited on ingress only is no limit above b's egress.
	step("set p ingress", m.Set(gs["p"], Ingress, l))
	step("set b", m.Set(gs["p/b"], Egress, l))
	check("set p ingress, b egress", Egress, map[string]string{"p": "-", "p/b": "true", "p/a/x": "true"})
	check("set p ingress, b egress", Ingress, map[string]string{"p": "true", "p/b": "-"})
	step("set b ingress", m.Set(gs["p/b"], Ingress, l))
	check("set b ingress", Ingress, map[string]string{"p": "true", "p/b": "false"})
	step("set p egress", m.Set(gs["p"], Egress, l))
	check("set p egress", Egress, map[string]string{"p": "true", "p/b": "false", "p/a/x": "false"})
	// The root group has nothing above it.
	root := cgroup.Group{Dir: m.mount, Rel: "/", ID: dirID(m.mount)}
	if !m.top(root, Egress) {
		t.Errorf("the root group is not top")
	}
	for _, g := range []cgroup.Group{gs["p/b"], gs["p/a/x"], gs["p"]} {
		for _, d := range []Direction{Egress, Ingress} {
			if err := m.Unset(g, d); err != nil && !errors.Is(err, ErrNotFound) {
				t.Errorf("unset %s %v: %v", g, d, err)
			}
		}
	}
}

// topHarness is the egress program with private maps and a limit on each
// of gs (rate r).
func topHarness(t testing.TB, r rate.Rate, gs ...cgroup.Group) (*hbmObjects, []hbmHbmKey) {
	t.Helper()
	var objs hbmObjects
	if err := loadHbmObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	cfg, err := config(Limit{Rate: r, Thresholds: rate.Default(r)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []hbmHbmKey
	for _, g := range gs {
		k := key(g.ID, Egress)
		must(t, objs.HbmQueueMap.Put(&k, &hbmHbmQueue{}))
		must(t, objs.HbmLimitMap.Put(&k, &cfg))
		keys = append(keys, k)
	}
	return &objs, keys
}

func setTop(t testing.TB, objs *hbmObjects, k hbmHbmKey, top bool) {
	t.Helper()
	var c hbmHbmConfig
	must(t, objs.HbmLimitMap.Lookup(&k, &c))
	c.Flags &^= hbmHbmFlagsHBM_F_TOP
	if top {
		c.Flags |= hbmHbmFlagsHBM_F_TOP
	}
	must(t, objs.HbmLimitMap.Put(&k, &c))
}

// nonLoopbackIfindex is a real device for the test run's skb->dev (the
// loopback exemption must not apply).
func nonLoopbackIfindex(t testing.TB) uint32 {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && i.Index > 1 {
			return uint32(i.Index)
		}
	}
	testutil.Missing(t, "a non-loopback network device for the test run", errors.New("none found"))
	return 0
}

// TestTopEndsWalk: a packet of p/a is charged to a and to p while a has no
// top flag, to a alone once it has (the flag says nothing above a is
// limited; here p is, to show that the walk stopped).
func TestTopEndsWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs BPF")
	}
	testutil.RequireRoot(t)
	gs := topGroups(t, "/hbm-test-topwalk", "p", "p/a")
	objs, keys := topHarness(t, 40_000_000_000, gs["p"], gs["p/a"])
	enterGroup(t, gs["p/a"])
	ifidx := nonLoopbackIfindex(t)
	pkt := frame(ipv4(unix.IPPROTO_UDP, ecnNotECT, udpDgram(100)))
	packets := func() (p, a uint64) {
		var qp, qa hbmHbmQueue
		must(t, objs.HbmQueueMap.Lookup(&keys[0], &qp))
		must(t, objs.HbmQueueMap.Lookup(&keys[1], &qa))
		return qp.St.Packets, qa.St.Packets
	}
	run := func(n uint32) {
		t.Helper()
		ret, err := objs.HbmEgress.Run(&ebpf.RunOptions{Data: pkt, Context: skbCtx(ifidx, 0, 0), Repeat: n})
		if err != nil || ret != retPass {
			t.Fatalf("test run: %d, %v", ret, err)
		}
	}
	run(10)
	if p, a := packets(); p != 10 || a != 10 {
		t.Fatalf("without the top flag: p charged %d packets, a %d; want 10 and 10", p, a)
	}
	setTop(t, objs, keys[1], true)
	run(10)
	if p, a := packets(); p != 10 || a != 20 {
		t.Fatalf("a with the top flag: p charged %d packets, a %d; want 10 (the walk ends at a) and 20", p, a)
	}
}

// BenchmarkPacketCostDepth reports the egress program's ns per packet
// (bpf_stats) for a socket 4 levels down (a pod's container on a
// Kubernetes node: kubepods/qos/pod/container) with the limit on the pod
// (level 3), the walk ending there (top) or going on to the root (no top,
// as before the flag): go test -run - -bench PacketCostDepth ./internal/dataplane/
func BenchmarkPacketCostDepth(b *testing.B) {
	testutil.RequireRoot(b)
	enableStats(b)
	gs := topGroups(b, "/hbm-test-depth", "qos", "qos/pod", "qos/pod/ctr")
	objs, keys := topHarness(b, 40_000_000_000, gs["qos/pod"])
	enterGroup(b, gs["qos/pod/ctr"])
	ifidx := nonLoopbackIfindex(b)
	for _, top := range []bool{false, true} {
		b.Run(fmt.Sprintf("top=%v", top), func(b *testing.B) {
			setTop(b, objs, keys[0], top)
			h := &harness{t: b, prog: objs.HbmEgress, ifidx: ifidx}
			b.ResetTimer()
			b.ReportMetric(h.nsPerRun(uint32(max(b.N, 1))), "bpf-ns/pkt")
		})
	}
}
