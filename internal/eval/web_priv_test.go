package eval

// Issue 23's bar as a test: a web server in a limited group holds its limit
// with a new connection per request and with keep-alive connections, and a
// group's 1 MB request loop is not starved by its 10 KB loop. Generous
// bounds (single 4 s runs); the benchmark (`hbm eval web-new-200m ...
// --runs 3`) reports the figures. Data plane v2 failed every cell: 0.38-0.69
// of the limit with 100 KB responses, 1.3-4x with 10-30 KB ones, the 1 MB
// loop at 12 of 200 Mbit/s.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/analyze"
	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// evalPrereqs skips under -short and returns the hbm binary once the test has
// what a privileged eval needs (root, ip, cgroup2, and the tools named):
// missing, a skip outside CI and a failure under CI=true.
func evalPrereqs(t *testing.T, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs root, namespaces and BPF")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	for _, tool := range tools {
		if _, err := execLookPath(tool); err != nil {
			testutil.Missing(t, tool, err)
		}
	}
	bin := testutil.HBMBinary(t)
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	return bin
}

func TestWebServerHoldsLimit(t *testing.T) {
	bin := evalPrereqs(t, "nginx", "wrk", "ab")
	for _, c := range []struct {
		scen    string
		size    int
		clients int
		lo, hi  float64
		tail    float64  // most request P99 / P50 (0: not checked)
		args    []string // more hbm set options for the group
		rate    string   // the group's limit instead of the scenario's
	}{
		// New connections: responses of 10 and 30 KB leave in TCP's
		// unpaced first flight, held only by the handshake gate
		// (bpf/include/gate.h); without it 10 KB escaped 4-5x, 30 KB 1.3x.
		{"web-new-200m", 10 << 10, 32, 0.80, 1.15, 0, nil, ""},
		{"web-new-200m", 30 << 10, 32, 0.85, 1.15, 0, nil, ""},
		{"web-new-200m", 100 << 10, 32, 0.85, 1.15, 0, nil, ""},
		// 128 clients of 3 KB at 50mbit: every connection held, a round
		// of them twice what the queue's bound holds; a gate that waited
		// out the bounded backlog let the rest go unwaited for: 1.8x the
		// limit (bpf/include/gateq.h).
		{scen: "web-new-200m", size: 3 << 10, clients: 128, lo: 0.80, hi: 1.15, rate: "50mbit"},
		// 256 clients of 20 KB at 100mbit: a round takes 440 ms, each
		// connection admitted whole once it has waited. A gate that asked
		// for at most 100 ms let the rest go (128 clients: 2.03x the
		// limit; GATE_MAX_NS), and one that forgot its queue whenever the
		// group's drained, while the connections it held were still
		// waiting, answered the next ones short waits: 1.77x
		// (gate_until_ns, bpf/include/gateq.h).
		{scen: "web-new-200m", size: 20 << 10, clients: 256, lo: 0.80, hi: 1.15, rate: "100mbit"},
		// Every response paced at the share's floor, each packet with
		// fewer than two out (so never refused): the floor gives way
		// while the queue stands above the mark (share.h,
		// floor_steer); without that 1.23.
		// The same 64 clients starting together: their group admits
		// them at the gate rather than pace them (share.h,
		// admit_steer); paced, the count and every cap swung with the
		// crowd, and the P99 was 1.27-1.36x the median (htb 1.05).
		{"web-new-200m", 30 << 10, 64, 0.85, 1.10, 1.2, nil, ""},
		{"web-keepalive-200m", 100 << 10, 64, 0.85, 1.10, 0, nil, ""},
		// Keep-alive connections take up a new cap a response later: a
		// loop that drained its backlog within one control interval swung
		// every cap 0.5-1.5x and the P99 was 2.1-2.2x the median (htb
		// 1.1); draining over four intervals, 1.2-1.3.
		{"web-keepalive-200m", 10 << 10, 64, 0.85, 1.15, 1.7, nil, ""},
		// Responses longer than a transfer's first second (32 clients of
		// 1 MB: about 1.3 s each): a flow whose last transfer was long
		// stays a transfer through its next (share.h, xfer_time_next).
		// With one second for all, each response went bulk mid-way
		// behind those in their first second: P99 1.27-1.45x the median
		// in 5 runs (1.07-1.12 since).
		{"web-keepalive-200m", 1 << 20, 32, 0.85, 1.10, 1.2, nil, ""},
		// The same on new connections: the first transfer takes its
		// listener's last connection's length (pacing.h). P99 1.24-1.34x
		// the median in 5 runs before, 1.01 since.
		{"web-new-200m", 1 << 20, 32, 0.85, 1.10, 1.15, nil, ""},
		// Without the pacing assist the policer alone holds a keep-alive
		// server whose responses never have two packets out: such packets
		// pass up to the queue's bound (bpf/include/policy.h,
		// protection). Before, every one was protected and the excess
		// forgotten at the bound: 12x the limit.
		{"web-keepalive-200m", 10 << 10, 64, 0.50, 1.10, 0, []string{"--no-pace"}, ""},
	} {
		scens, err := Load([]string{c.scen})
		if err != nil {
			t.Fatal(err)
		}
		scens[0].Cgroups[0].HBMArgs = c.args
		name := strings.Join(append([]string{c.scen}, c.args...), " ")
		if c.rate != "" {
			scens[0].Cgroups[0].Egress = c.rate
			name += " at " + c.rate
		}
		// Responses of a second or more: every connection's first
		// response ends in the warm-up, and the window holds about 150.
		dur, warm := 4*time.Second, time.Second
		if c.size >= 1<<20 {
			dur, warm = 8*time.Second, 3*time.Second
		}
		run := func() *result.Run {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var log strings.Builder
			res, err := Run(ctx, scens, Options{Bin: bin, Limiters: []string{"hbm"}, CCs: []string{"cubic"},
				Duration: dur, Warmup: warm, Counts: []int{c.clients}, Sizes: []int{c.size}, Log: &log})
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, log.String())
			}
			if len(res.Runs) != 1 || res.Runs[0].Skipped != "" || res.Runs[0].Error != "" || len(res.Runs[0].Groups) != 1 {
				t.Fatalf("%s: runs %+v\n%s", name, res.Runs, log.String())
			}
			return &res.Runs[0]
		}
		r := run()
		g := r.Groups[0]
		t.Logf("%s %d B x %d: wire share %.3f", name, c.size, c.clients, g.Share)
		// The handshake gate holds a first SYN-ACK, never a connection:
		// no request may fail.
		for _, cl := range r.Classes {
			if cl.HTTPErrors != 0 {
				t.Errorf("%s, %d B responses to %d clients: %d failed requests (%s)", name, c.size, c.clients, cl.HTTPErrors, cl.HTTPClient)
			}
		}
		// A tail over the bound is measured once more: a single run's
		// tail moves by 2-4x on this machine (once 1.83x the median where
		// this build's runs read 1.3x), while the defects the bounds
		// catch were over them in every run.
		for try := 0; c.tail > 0 && try < 2; try++ {
			lat := r.Classes[0].Latency
			if lat == nil || lat.P50 <= 0 {
				t.Errorf("%s, %d B responses to %d clients: no request latency", name, c.size, c.clients)
				break
			}
			t.Logf("%s %d B x %d: P50 %.1f ms, P99 %.1f ms", name, c.size, c.clients, lat.P50/1e3, lat.P99/1e3)
			if lat.P99 <= c.tail*lat.P50 {
				break
			}
			if try == 1 {
				t.Errorf("%s, %d B responses to %d clients: request P99 %.1f ms is %.2fx the median %.1f ms in two runs, want at most %.2gx",
					name, c.size, c.clients, lat.P99/1e3, lat.P99/lat.P50, lat.P50/1e3, c.tail)
				break
			}
			r = run()
		}
		if g.Share < c.lo || g.Share > c.hi {
			t.Errorf("%s, %d B responses to %d clients: wire share %.3f of the limit, want [%.2f, %.2f]",
				name, c.size, c.clients, g.Share, c.lo, c.hi)
		}
	}
}

// TestSizesShare: the demo's group (a 10 KB loop, a 1 MB loop and a stream
// at 200mbit): the 1 MB loop gets a real part of the group (v2: 12 of 200
// Mbit/s, its P99 7x htb's) and the 10 KB loop stays fast.
func TestSizesShare(t *testing.T) {
	bin := evalPrereqs(t)
	scens, err := Load([]string{"egress-200m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var log strings.Builder
	res, err := Run(ctx, scens, Options{Bin: bin, Quick: true, Limiters: []string{"hbm"}, CCs: []string{"cubic"}, Log: &log})
	if err != nil || len(res.Runs) != 1 || res.Runs[0].Error != "" || res.Runs[0].Skipped != "" {
		t.Fatalf("eval: %v %+v\n%s", err, res, log.String())
	}
	var small, large float64
	var smallP99 float64
	for _, c := range res.Runs[0].Classes {
		t.Logf("class %s %d B: %.1f Mbit/s", c.Kind, c.SizeBytes, c.GoodputBps/1e6)
		if c.Kind == "rpc" && c.SizeBytes == 10<<10 {
			small = c.GoodputBps
			if c.Latency != nil {
				smallP99 = c.Latency.P99
			}
		}
		if c.Kind == "rpc" && c.SizeBytes == 1<<20 {
			large = c.GoodputBps
		}
	}
	if large < 0.25*200e6 {
		t.Errorf("the 1 MB loop got %.1f Mbit/s of the group's 200, want at least 50 (the 10 KB loop got %.1f)", large/1e6, small/1e6)
	}
	if smallP99 <= 0 || smallP99 > 5000 {
		t.Errorf("10 KB P99 %.0f us, want (0, 5 ms] (htb's is about 16 ms)", smallP99)
	}
}

// TestWebOverIPv6: hbm eval --ipv6 runs a scenario's flows over the hosts'
// fd00::/8 addresses (the capture of the window shows them), and both
// limiters hold the group there as over IPv4: hbm's policer and assists
// read IPv6 as IPv4, and htb classifies IPv6 too. The benchmark (hbm eval
// web-keepalive-200m --ipv6 --runs 3, against IPv4) reports the figures.
func TestWebOverIPv6(t *testing.T) {
	bin := evalPrereqs(t, "nginx", "wrk")
	scens, err := Load([]string{"web-keepalive-200m"})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	res, err := Run(ctx, scens, Options{Bin: bin, Limiters: []string{"hbm", "htb"}, CCs: []string{"cubic"},
		Duration: 4 * time.Second, Warmup: time.Second, Counts: []int{64}, Sizes: []int{10 << 10},
		IPv6: true, CaptureDir: filepath.Join(out, "captures"), Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if scens[0].IPv6 {
		t.Error("--ipv6 changed the caller's scenario")
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want 2\n%s", len(res.Runs), log.String())
	}
	for i := range res.Runs {
		r := &res.Runs[i]
		if r.Skipped != "" || r.Error != "" || len(r.Groups) != 1 || len(r.Classes) == 0 {
			t.Fatalf("%s: %+v\n%s", r.Limiter, r, log.String())
		}
		if !r.IPv6 || r.ScenarioLabel() != "web-keepalive-200m (IPv6)" {
			t.Errorf("%s: run ipv6 %v, label %q", r.Limiter, r.IPv6, r.ScenarioLabel())
		}
		if r.Capture == nil || r.Capture.Error != "" {
			t.Fatalf("%s: capture %+v", r.Limiter, r.Capture)
		}
		rep, err := analyze.File(filepath.Join(out, r.Capture.File))
		if err != nil {
			t.Fatalf("%s: %v", r.Limiter, err)
		}
		v6 := 0
		for _, c := range rep.Connections {
			if strings.HasPrefix(c.Src, "[fd00:") && strings.HasPrefix(c.Dst, "[fd00:") {
				v6++
			} else {
				t.Errorf("%s: connection %s -> %s in the capture, want fd00::/8 addresses only", r.Limiter, c.Src, c.Dst)
			}
		}
		if v6 == 0 {
			t.Errorf("%s: no connection in the capture", r.Limiter)
		}
		if cl := r.Classes[0]; cl.HTTPErrors != 0 || cl.Latency == nil || cl.Latency.P50 <= 0 {
			t.Errorf("%s: %d failed requests, latency %+v", r.Limiter, cl.HTTPErrors, cl.Latency)
		} else if q := rep.Requests; q == nil || q.Count < 100 || q.Complete.P50 < cl.Latency.P50/2 || q.Complete.P50 > cl.Latency.P50*3/2 {
			// The server's view of the same requests (hbm analyze's
			// pooled exchanges): as many as wrk's few seconds hold,
			// their median near wrk's (which adds the path, microseconds).
			t.Errorf("%s: the capture's requests %+v, want over 100 with a median near wrk's %.0f us", r.Limiter, q, cl.Latency.P50)
		}
		g := r.Groups[0]
		t.Logf("%s over IPv6: wire share %.3f, %d connections in the capture", r.Limiter, g.Share, v6)
		if g.Share < 0.85 || g.Share > 1.10 {
			t.Errorf("%s over IPv6: wire share %.3f of the limit, want [0.85, 1.10]", r.Limiter, g.Share)
		}
	}
}
