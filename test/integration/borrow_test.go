package integration

import (
	"context"
	"testing"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/workload"
)

// TestEgressBorrow: a group with a ceiling above its rate borrows what its
// sibling under a limited parent leaves unused, and gives it back when the
// sibling sends (bpf/include/lend.h). /p at 400mbit; /p/a guaranteed
// 120mbit and /p/b 280mbit, both with a ceiling of 400mbit. A hard cap
// (the data plane before borrowing) holds /p/a alone at 120mbit, which
// the first bound fails; a lender that never takes back fails the second.
func TestEgressBorrow(t *testing.T) {
	l := egSetup(t, "egborrow")
	parent, _ := l.cgroup(t, "p")
	a, adir := l.cgroup(t, "p/a")
	b, bdir := l.cgroup(t, "p/b")
	l.set(t, parent, "400mbit")
	defer l.hbm.Unset(parent)
	for _, g := range []struct{ path, rate string }{{a, "120mbit"}, {b, "280mbit"}} {
		if _, err := l.hbm.Run("set", g.path, "--egress", g.rate, "--egress-ceil", "400mbit"); err != nil {
			t.Fatalf("hbm set %s --egress %s --egress-ceil 400mbit: %v", g.path, g.rate, err)
		}
		defer l.hbm.Unset(g.path)
	}
	if c, err := l.hbm.Egress(a); err != nil || c == nil || c.CeilBps != 400e6 {
		t.Fatalf("hbm show --json: %s egress %+v (%v), want ceil_bps 400000000", a, c, err)
	}

	t.Run("alone", func(t *testing.T) {
		r := l.run(t, adir, "cubic", false, a)
		// All of the parent's rate but what TCP's first packets and
		// the lender's steering cost: well above the 120mbit cap.
		within(t, r, "400mbit", 0.75, egHigh)
		if c, err := l.hbm.Egress(a); err != nil || c == nil || c.InForceBps <= 120e6 {
			t.Errorf("hbm show --json after /p/a alone: %+v (%v), want rate_in_force_bps above its 120mbit", c, err)
		}
	})

	t.Run("both", func(t *testing.T) {
		ga, gb := l.runBoth(t, adir, bdir)
		// Goodput is payload: about 0.956 of the wire rate (frames).
		fa, fb := ga.Goodput/120e6, gb.Goodput/280e6
		t.Logf("/p/a %.1f Mbit/s (%.3f of its 120mbit), /p/b %.1f Mbit/s (%.3f of its 280mbit), together %.3f of 400mbit",
			ga.Goodput/1e6, fa, gb.Goodput/1e6, fb, (ga.Goodput+gb.Goodput)/400e6)
		if fa < 0.70 || fa > 1.20 {
			t.Errorf("/p/a at %.3f of its guarantee with /p/b busy, want [0.70, 1.20]", fa)
		}
		if fb < 0.70 || fb > 1.15 {
			t.Errorf("/p/b at %.3f of its guarantee with /p/a busy, want [0.70, 1.15]", fb)
		}
		if s := (ga.Goodput + gb.Goodput) / 400e6; s > egHigh {
			t.Errorf("together %.3f of the parent's 400mbit, want at most %.2f", s, egHigh)
		}
	})
}

// runBoth runs 3 cubic streams from each of two groups' directories at once
// and returns their results.
func (l *egLab) runBoth(t *testing.T, adir, bdir string) (a, b *workload.Result) {
	t.Helper()
	type res struct {
		r   *workload.Result
		err error
	}
	ra, rb := make(chan res, 1), make(chan res, 1)
	for _, x := range []struct {
		dir string
		ch  chan res
	}{{adir, ra}, {bdir, rb}} {
		go func(dir string, ch chan res) {
			r, err := l.tb.RunClient(context.Background(), l.bin, dir, workload.Config{
				Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: egStreams,
				Warmup: egWarmup, Duration: egDuration, CC: "cubic",
			})
			ch <- res{r, err}
		}(x.dir, x.ch)
	}
	ga, gb := <-ra, <-rb
	if ga.err != nil || gb.err != nil {
		t.Fatalf("clients: %s %v, %s %v", adir, ga.err, bdir, gb.err)
	}
	return ga.r, gb.r
}

// TestEgressBorrowNoLender: a ceiling without a limited group above has
// nothing to borrow from; the group keeps its rate (and set warns).
func TestEgressBorrowNoLender(t *testing.T) {
	l := egSetup(t, "egnolend")
	g, dir := l.cgroup(t, "w")
	out, err := l.hbm.Run("set", g, "--egress", "200mbit", "--egress-ceil", "1gbit")
	if err != nil {
		t.Fatalf("hbm set: %v", err)
	}
	defer l.hbm.Unset(g)
	t.Logf("hbm set: %s", out)
	r := l.run(t, dir, "cubic", false, g)
	within(t, r, "200mbit", egLow, egHigh)
}

// TestIngressBorrow: borrowing is the same policer on ingress. The
// receiver's group /r at 1gbit lends to /r/a (300mbit) and /r/b (700mbit),
// both with a ceiling of 1gbit, each with its own server; rates are the
// groups' own counters (wire bytes passed) over the run.
func TestIngressBorrow(t *testing.T) {
	l := inSetup(t, "ingborrow", netlab.IncastOptions{Senders: 1, Rate: 20_000_000_000, Buffer: 1 << 20, Burst: 256 << 10})
	ports := map[string]int{"a": inPort + 1, "b": inPort + 2}
	groups := map[string]string{}
	for _, n := range []string{"a", "b"} {
		g, err := cgroup.Create(l.group + "/" + n)
		if err != nil {
			t.Fatal(err)
		}
		groups[n] = l.group + "/" + n
		if _, err := l.in.StartServer(l.bin, g.Dir, ports[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.hbm.SetIngress(l.group, "1gbit"); err != nil {
		t.Fatal(err)
	}
	defer l.hbm.Unset(l.group)
	for n, r := range map[string]string{"a": "300mbit", "b": "700mbit"} {
		if err := l.hbm.SetIngress(groups[n], r, "--ingress-ceil", "1gbit"); err != nil {
			t.Fatalf("hbm set %s --ingress %s --ingress-ceil 1gbit: %v", groups[n], r, err)
		}
		defer l.hbm.Unset(groups[n])
	}
	cc := l.ccSetup(t, "cubic")
	cfg := workload.Config{Streams: 3, Warmup: inWarmup, Duration: inDuration, CC: cc}
	secs := (inWarmup + inDuration).Seconds()
	// rates runs jobs and returns each group's rate (bits/s) from its counters.
	rates := func(label string, names ...string) map[string]float64 {
		before := map[string]uint64{}
		for _, n := range names {
			d, err := l.hbm.Ingress(groups[n])
			if err != nil || d == nil {
				t.Fatalf("hbm show --json: %s ingress %+v (%v)", groups[n], d, err)
			}
			before[n] = d.Bytes
		}
		var jobs []netlab.IncastJob
		for _, n := range names {
			jobs = append(jobs, netlab.IncastJob{Cfg: cfg, Port: ports[n]})
		}
		l.runJobs(t, label, jobs)
		out := map[string]float64{}
		for _, n := range names {
			d, err := l.hbm.Ingress(groups[n])
			if err != nil || d == nil {
				t.Fatalf("hbm show --json: %s ingress %+v (%v)", groups[n], d, err)
			}
			out[n] = float64(d.Bytes-before[n]) * 8 / secs
		}
		return out
	}
	alone := rates("/r/a alone", "a")
	t.Logf("/r/a alone: %.1f Mbit/s (%.3f of 1gbit)", alone["a"]/1e6, alone["a"]/1e9)
	// The warm-up's ramp is in the figure: the bound only separates
	// borrowing from a 300mbit cap.
	if f := alone["a"] / 1e9; f < 0.6 || f > 1.05 {
		t.Errorf("/r/a alone at %.3f of the 1gbit it may borrow up to, want [0.60, 1.05] (a hard cap: 0.3)", f)
	}
	both := rates("/r/a and /r/b", "a", "b")
	fa, fb := both["a"]/300e6, both["b"]/700e6
	t.Logf("/r/a %.1f Mbit/s (%.3f of 300mbit), /r/b %.1f Mbit/s (%.3f of 700mbit)", both["a"]/1e6, fa, both["b"]/1e6, fb)
	if fa < 0.6 || fa > 1.3 {
		t.Errorf("/r/a at %.3f of its guarantee with /r/b busy, want [0.60, 1.30]", fa)
	}
	if fb < 0.6 || fb > 1.2 {
		t.Errorf("/r/b at %.3f of its guarantee with /r/a busy, want [0.60, 1.20]", fb)
	}
}

// TestEgressBorrowPriority: what a lender leaves goes to a latency group
// before a batch group; each keeps its guarantee. /p 400mbit; /p/a latency
// and /p/b batch, both 100mbit up to 400mbit, both busy: /p/a takes what
// /p/b's guarantee leaves (about 300 Mbit/s), /p/b keeps its 100. Without
// priorities they share it equally (200 each), which both bounds fail.
func TestEgressBorrowPriority(t *testing.T) {
	l := egSetup(t, "egprio")
	parent, _ := l.cgroup(t, "p")
	a, adir := l.cgroup(t, "p/a")
	b, bdir := l.cgroup(t, "p/b")
	l.set(t, parent, "400mbit")
	defer l.hbm.Unset(parent)
	for _, g := range []struct{ path, prio string }{{a, "latency"}, {b, "batch"}} {
		if _, err := l.hbm.Run("set", g.path, "--egress", "100mbit", "--egress-ceil", "400mbit", "--priority", g.prio); err != nil {
			t.Fatalf("hbm set %s --priority %s: %v", g.path, g.prio, err)
		}
		defer l.hbm.Unset(g.path)
	}
	if c, err := l.hbm.Egress(b); err != nil || c == nil || c.Priority != "batch" {
		t.Fatalf("hbm show --json: %s egress %+v (%v), want priority batch", b, c, err)
	}
	ga, gb := l.runBoth(t, adir, bdir)
	fa, fb := ga.Goodput/300e6, gb.Goodput/100e6
	t.Logf("/p/a (latency) %.1f Mbit/s (%.3f of the 300 left), /p/b (batch) %.1f Mbit/s (%.3f of its 100mbit)",
		ga.Goodput/1e6, fa, gb.Goodput/1e6, fb)
	if fa < 0.80 || fa > 1.10 {
		t.Errorf("/p/a (latency) at %.3f of the 300 Mbit/s /p/b's guarantee leaves, want [0.80, 1.10]", fa)
	}
	if fb < 0.70 || fb > 1.30 {
		t.Errorf("/p/b (batch) at %.3f of its 100mbit guarantee, want [0.70, 1.30]", fb)
	}
}
