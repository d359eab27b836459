package integration

// Issue 9's promise end to end: a group's limit holds however many
// connections it opens and whatever their congestion control, and a small
// RPC loop in the group is not queued behind its own bulk streams. Shares are
// read on the sender's veth (whole frames), so whatever escapes HBM's
// accounting shows too.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/workload"
)

const (
	// flowsHigh bounds frames on the wire / limit. A limit held exactly
	// reads ~1.01 (Ethernet headers); before data plane v2, 16-64 streams
	// read 2.6-6.3.
	flowsHigh = 1.06
	flowsLow  = 0.85
	// rpcP99Max bounds the 10 KB RPC's P99 beside 16 bulk streams in its own
	// group at 200mbit. htb queues it behind the streams (P99 10-14 ms);
	// before the RPC class, HBM paced it at 1/17 of the rate (P99 ~7 ms).
	// The benchmark's median is 1.6 ms (many-flows-200m, 16 streams,
	// medians of 3); one CI window read 2.3 ms, so the bound is 4 ms,
	// which both of those designs still fail.
	rpcP99Max = 4 * time.Millisecond
)

// wireWindow runs one measurement window of client c and returns its result
// and the frames the sender transmitted during it, as a share of rate.
func wireWindow(t *testing.T, l *egLab, c *netlab.ScriptClient, name, rate string, d time.Duration) (*workload.Result, float64) {
	t.Helper()
	limit, err := netlab.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	tx0, err := l.tb.SenderTxBytes()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r, err := c.Window(context.Background(), name, d)
	if err != nil {
		t.Fatal(err)
	}
	tx1, err := l.tb.SenderTxBytes()
	if err != nil {
		t.Fatal(err)
	}
	share := float64(tx1-tx0) * 8 / time.Since(t0).Seconds() / float64(limit)
	t.Logf("%s: wire %.3f of %s, bulk goodput %.1f Mbit/s (%d streams), rpc %d done P50 %.0fus P99 %.0fus, retrans %d",
		name, share, rate, r.Goodput/1e6, len(r.StreamGoodput), r.RPC.Count, r.RPC.P50, r.RPC.P99, r.Retransmits)
	return r, share
}

// startLoad starts a script client of streams bulk streams and rpcs 10 KB
// RPC loops in dir, stopped at cleanup.
func startLoad(t *testing.T, l *egLab, dir, cc string, streams, rpcs int) *netlab.ScriptClient {
	t.Helper()
	cfg := workload.Config{
		Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: streams, RPCs: rpcs,
		Duration: 60 * time.Second, CC: cc,
	}
	c, err := l.tb.StartScriptClient(l.bin, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEgressManyFlows: a group opening many connections is held to its
// limit, for loss-based and model-based congestion control.
func TestEgressManyFlows(t *testing.T) {
	l := egSetup(t, "egflows")
	for _, tc := range []struct {
		cc      string
		streams int
		rate    string
	}{
		{"cubic", 64, "200mbit"},
		{"bbr", 16, "200mbit"},
		{"bbr", 32, "1gbit"},
		// 64 KB TSO packets at 1.5 Mbit/s each: one per flow per ~300 ms
		// (1.24 before the share followed a flow's sending gap).
		{"bbr", 128, "200mbit"},
	} {
		name := fmt.Sprintf("%s-%d-%s", tc.cc, tc.streams, tc.rate)
		t.Run(name, func(t *testing.T) {
			group, dir := l.cgroup(t, name)
			l.set(t, group, tc.rate)
			defer l.unset(t, group)
			c := startLoad(t, l, dir, tc.cc, tc.streams, 0)
			time.Sleep(2 * time.Second)
			before, _ := l.hbm.Egress(group)
			r, share := wireWindow(t, l, c, name, tc.rate, 4*time.Second)
			if share > flowsHigh {
				t.Errorf("%d %s streams sent %.3f of the %s limit on the wire, want <= %.2f",
					tc.streams, tc.cc, share, tc.rate, flowsHigh)
			}
			if share >= flowsLow {
				return
			}
			// Now and then a window of many bbr flows falls short, more
			// often with CPU load beside them (README, limits; cause not
			// found): say what the group did, and measure once more. A
			// limiter that starves the group fails both windows.
			logShortWindow(t, l, group, before, r, tc.rate)
			_, again := wireWindow(t, l, c, name+" (again)", tc.rate, 4*time.Second)
			if again < flowsLow || again > flowsHigh {
				t.Errorf("%d %s streams sent %.3f, then %.3f of the %s limit on the wire, want [%.2f, %.2f]",
					tc.streams, tc.cc, share, again, tc.rate, flowsLow, flowsHigh)
			}
		})
	}
}

// logShortWindow logs what a group that sent less than its limit did in
// the window: HBM's counters (did it signal or drop?) and how its streams
// shared what they sent (did some stall, or all slow down?).
func logShortWindow(t *testing.T, l *egLab, group string, before *jsonout.Direction, r *workload.Result, rate string) {
	t.Helper()
	if after, err := l.hbm.Egress(group); err == nil && after != nil && before != nil {
		d := after.Sub(*before)
		t.Logf("short window: hbm passed %d packets, marked %d, congestion code %d, dropped %d", d.Packets, d.Marked, d.CWR, d.Dropped)
	}
	limit, err := netlab.ParseRate(rate)
	if err != nil || len(r.StreamGoodput) == 0 {
		return
	}
	fair := float64(limit) / float64(len(r.StreamGoodput))
	g := slices.Clone(r.StreamGoodput)
	slices.Sort(g)
	stalled := 0
	for _, v := range g {
		if v < fair/10 {
			stalled++
		}
	}
	t.Logf("short window: per-stream goodput min %.2f, median %.2f, max %.2f Mbit/s (fair share %.2f); %d of %d below a tenth of it; retrans %d",
		g[0]/1e6, g[len(g)/2]/1e6, g[len(g)-1]/1e6, fair/1e6, stalled, len(g), r.Retransmits)
}

// TestEgressRPCBesideBulk: a back-to-back 10 KB RPC loop sharing its group
// with 16 bulk streams keeps a short tail (the RPC class, policy.h), and the
// group as a whole stays within its limit.
func TestEgressRPCBesideBulk(t *testing.T) {
	l := egSetup(t, "egrpc")
	const rate = "200mbit"
	group, dir := l.cgroup(t, "w")
	l.set(t, group, rate)
	c := startLoad(t, l, dir, "cubic", 16, 1)
	time.Sleep(2 * time.Second)
	r, share := wireWindow(t, l, c, "16 streams + rpc", rate, 4*time.Second)
	if share > flowsHigh {
		t.Errorf("group sent %.3f of its %s limit on the wire, want <= %.2f", share, rate, flowsHigh)
	}
	if r.RPC.Count < 100 {
		t.Fatalf("only %d RPCs completed in the window", r.RPC.Count)
	}
	if p99 := time.Duration(r.RPC.P99 * float64(time.Microsecond)); p99 > rpcP99Max {
		t.Errorf("10 KB RPC P99 %v beside 16 streams, want <= %v", p99, rpcP99Max)
	}
	if r.Goodput < 0.05*200e6 {
		t.Errorf("bulk streams starved: goodput %.1f Mbit/s, want >= 10 (an eighth of the rate is theirs)", r.Goodput/1e6)
	}
}
