package integration

// Ingress limits end to end: an incast lab (internal/netlab/incast.go)
// of sender namespaces into one receiver through a bridge whose port to the
// receiver is the bottleneck, with the receiver's server in a cgroup limited
// with the hbm binary.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

const (
	inWarmup   = 2 * time.Second
	inDuration = 5 * time.Second
	inPort     = netlab.ServerPort
)

// inLab is an incast testbed with a workload server in the test's cgroup
// /hbm-test-NAME/r, all removed at cleanup (after hbm unset), also on failure.
type inLab struct {
	in    *netlab.Incast
	hbm   netlab.HBM
	bin   string
	group string // the receiver's group, relative to the cgroup2 mount
	dir   string // ... its directory
}

func inSetup(t *testing.T, name string, opts netlab.IncastOptions) *inLab {
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
	if out, err := exec.CommandContext(ctx, bin, "set", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--ingress") {
		t.Fatalf("%s has no `set --ingress`: %v: %s", bin, err, out)
	}
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &inLab{hbm: netlab.HBM{Bin: bin}, bin: bin, group: "/hbm-test-" + name + "/r"}
	// The lab first (it also removes a killed run's namespaces).
	in := labtest.Incast(t, opts)
	l.in = in
	top := "/hbm-test-" + name
	removeGroup := func() {
		l.hbm.Unset(l.group) // not limited at all: error expected
		if err := cgroup.RemoveWait(top, 50, 100*time.Millisecond); err != nil {
			t.Errorf("remove cgroup %s: %v", top, err)
		}
	}
	removeGroup() // leftovers of a crashed run
	g, err := cgroup.Create(l.group)
	if err != nil {
		t.Fatal(err)
	}
	l.dir = g.Dir
	// Registered after the testbed's: runs first, but the server still lives
	// in the group then, so close the testbed first inside it.
	t.Cleanup(func() {
		in.Close()
		removeGroup()
	})
	if _, err := in.StartServer(bin, g.Dir, inPort); err != nil {
		t.Fatal(err)
	}
	return l
}

// ccECN reports whether the senders of ccName (as ccSetup takes it) use
// ECN: DCTCP, and any cc with "+ecn".
func ccECN(ccName string) bool {
	cc, ecn := strings.CutSuffix(ccName, "+ecn")
	return ecn || cc == "dctcp"
}

// ccSetup prepares every host for cc ("cubic+ecn", "dctcp", ...): ECN, and
// the receiver's route congctl (the tools tests set the senders' too). It skips the (sub)test when dctcp
// is neither registered nor installable with `hbm cc install`; HBM's dctcp
// installed here is removed at cleanup, one found installed is left alone.
func (l *inLab) ccSetup(t *testing.T, ccName string) string {
	t.Helper()
	cc, _ := strings.CutSuffix(ccName, "+ecn")
	// Every host's routes name cc, so that tools which pick none (iperf3,
	// sockperf) run cc and not the machine's default, which a namespace
	// inherits (bbr on the test machines: the tools benchmark once measured
	// bbr under the name cubic). Routes, not the namespace's default: a
	// namespace other than the first may only pick an allowed one.
	ecn, rcc := ccECN(ccName), cc
	if cc == "dctcp" {
		if !ccHas("dctcp") {
			out, err := exec.Command(l.bin, "cc", "install", "dctcp").CombinedOutput()
			if err != nil || !ccHas("dctcp") {
				t.Skipf("dctcp not registered and hbm cc install dctcp failed: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command(l.bin, "cc", "remove", "dctcp").Run() })
		}
	}
	if err := l.in.SetECN(ecn); err != nil {
		t.Fatal(err)
	}
	err := l.in.SetReceiverCC(rcc)
	if err != nil && rcc == "dctcp" && !ccHas("dctcp") {
		// HBM's dctcp is machine-wide: another test may have just removed
		// it. Install it again (idempotent) and retry once.
		exec.Command(l.bin, "cc", "install", "dctcp").Run()
		err = l.in.SetReceiverCC(rcc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func ccHas(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return err == nil && slices.Contains(strings.Fields(string(b)), name)
}

// run runs the workload from every sender and logs what it measured, with
// the ingress counters of the receiver's group when limited.
func (l *inLab) run(t *testing.T, label string, cfg workload.Config) (*netlab.IncastResult, *jsonout.Direction) {
	t.Helper()
	return l.runJobs(t, label, []netlab.IncastJob{{Cfg: cfg, Port: inPort}})
}

// runJobs is run with several client configurations at once, each to its
// own server port.
func (l *inLab) runJobs(t *testing.T, label string, jobs []netlab.IncastJob) (*netlab.IncastResult, *jsonout.Direction) {
	t.Helper()
	cfg := jobs[0].Cfg
	before, _ := l.hbm.Ingress(l.group)
	r, err := l.in.RunJobs(context.Background(), l.bin, jobs)
	if err != nil {
		t.Fatal(err)
	}
	var d *jsonout.Direction
	hbmLine := ""
	if after, err := l.hbm.Ingress(l.group); err == nil && after != nil && before != nil {
		x := after.Sub(*before)
		d = &x
		secs := (cfg.Warmup + cfg.Duration).Seconds()
		hbmLine = fmt.Sprintf("; hbm: %.1f Mbit/s passed, marked %d, dropped %d", float64(x.Bytes)*8/secs/1e6, x.Marked, x.Dropped)
	}
	rtt := 0.0
	for _, s := range r.Senders {
		rtt += s.RTT / float64(len(r.Senders))
		if s.RPCs > 0 {
			t.Logf("  %s rpc: n %d p50 %.0f p90 %.0f p99 %.0f p999 %.0f max %.0f us, rpc retrans %d, srtt %.0f us", label, s.RPC.Count, s.RPC.P50, s.RPC.P90, s.RPC.P99, s.RPC.P999, s.RPC.Max, s.RPCRetrans, s.RTT)
		}
	}
	t.Logf("%s cc=%s: goodput %.1f Mbit/s, retrans %d, bottleneck drops %d (run %d), CE echoed %d, srtt %.0fus, rpc %d p50 %.0fus p99 %.0fus%s",
		label, cfg.CC+fmt.Sprintf(" (%d jobs)", len(jobs)), r.Goodput/1e6, r.Retransmits, r.Drops, r.DropsRun, r.DeliveredCE, rtt, r.RPCCount, r.RPCP50, r.RPCP99, hbmLine)
	return r, d
}

// pinnedIncast puts opts' receiver on a CPU of its own and the senders and
// the switch on another (netlab.SplitCPUs), unless HBM_INCAST_SHARED is set
// (shared reports that). A machine with one CPU is a missing capability.
func pinnedIncast(t *testing.T, opts netlab.IncastOptions) (_ netlab.IncastOptions, shared bool) {
	t.Helper()
	if os.Getenv("HBM_INCAST_SHARED") != "" {
		return opts, true
	}
	return ownReceiverCPU(t, opts), false
}

// ownReceiverCPU puts opts' receiver on a CPU of its own and the senders
// and the switch on another (HBM_INCAST_OTHERS=all: on every CPU). A
// machine with one CPU is a missing capability.
func ownReceiverCPU(t *testing.T, opts netlab.IncastOptions) netlab.IncastOptions {
	t.Helper()
	rcv, others, ok := netlab.SplitCPUs()
	if !ok {
		testutil.Missing(t, "a second CPU (the receiver's)", errors.New("this process may use one CPU"))
	}
	opts.ReceiverCPUs, opts.OtherCPUs = rcv, others
	if os.Getenv("HBM_INCAST_OTHERS") == "all" {
		// The receiver's CPU is its own, the others' are every CPU.
		opts.OtherCPUs = append(slices.Clone(others), rcv...)
	}
	return opts
}

// nonECNTail is how much longer the worst sender's 10 KB P99 of senders
// without ECN may be with a mark-only ingress limit than without HBM: such a
// limit leaves them alone, and their tail varies from run to run; the
// window clamp it once gave them doubled it (18 ms against 9.4).
const nonECNTail = 1.5

// span formats a benchmark figure: the median of v with its min-max.
func span(v []float64) string {
	return fmt.Sprintf("%.4g (%.4g-%.4g)", result.Median(v), slices.Min(v), slices.Max(v))
}

// incastRuns is HBM_INCAST_RUNS, at least 1 (default 1).
func incastRuns() int {
	runs := 1
	if v := os.Getenv("HBM_INCAST_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	return max(runs, 1)
}

// incastGoodputMin bounds TestIngressIncast's goodput, bulk and RPC bytes
// over the bottleneck's rate (see the check).
const incastGoodputMin = 0.65

// TestIngressIncast: 4 senders x (2 bulk streams + a 10 KB RPC loop) into
// one receiver through a 2 Gbit/s bottleneck with a 128 KB buffer, the
// receiver's group limited with the incast protection defaults (`--ingress
// 1.8gbit --no-drop`, nothing tuned). The receiver runs on a CPU of its own,
// the senders and the switch on another, as on separate machines
// (netlab.SplitCPUs; on shared CPUs the receiver's server waits for a CPU
// behind the senders' softirq work, and that wait is the RPC tail:
// docs/design.md, "The testbed"). Against the same run without HBM, for
// ECN senders (cubic+ECN, DCTCP): at least 10x fewer bottleneck drops
// (target: none), at least 10x fewer retransmissions (target 100x), at
// least 4x fewer retransmissions on the RPC connections themselves, goodput
// at least incastGoodputMin of the bottleneck (target 0.85), and the worst sender's 10
// KB P99 at least 2x lower (target 3x; medians of 3 measured 4.2-7.0x,
// single runs 2.7-7.9x). Bounds a loaded CI machine passes and a limiter
// that does nothing fails. Senders without ECN (cubic, bbr): left as
// without HBM, the same drops (within 2x, +1,500) and tail (within 1.5x;
// one more pair when a single one misses it).
// Goodput counts bulk and RPC bytes.
//
// HBM_INCAST_RUNS=3 makes it the benchmark (medians of 3, min-max logged);
// HBM_INCAST_SHARED=1 runs it on shared CPUs, where the tail is only
// asserted within 4x of no HBM.
func TestIngressIncast(t *testing.T) {
	// HBM_INCAST_PORT (bits/s) changes the bottleneck port's rate, and
	// HBM_INCAST_RATE the limit with it (experiments: CPU on two cores).
	bottleneck := 2_000_000_000.0
	if v := os.Getenv("HBM_INCAST_PORT"); v != "" {
		fmt.Sscan(v, &bottleneck)
	}
	// The receiver on a CPU of its own, the senders and the switch on
	// another, as on separate machines (HBM_INCAST_SHARED=1: all on every
	// CPU, where the receiver's server waits for a CPU behind the senders'
	// softirq work; docs/design.md, "The testbed").
	opts, shared := pinnedIncast(t, netlab.IncastOptions{Senders: 4, Rate: uint64(bottleneck), Buffer: 128 << 10})
	l := inSetup(t, "ingincast", opts)
	runs := incastRuns()
	// Experiments: HBM_INCAST_ARGS adds `hbm set` flags, HBM_INCAST_CCS
	// picks the congestion controls.
	args := append([]string{"1.8gbit", "--no-drop"}, strings.Fields(os.Getenv("HBM_INCAST_ARGS"))...)
	if v := os.Getenv("HBM_INCAST_RATE"); v != "" {
		args[0] = v
	}
	ccs := []string{"cubic+ecn", "dctcp", "cubic"}
	if v := os.Getenv("HBM_INCAST_CCS"); v != "" {
		ccs = strings.Split(v, ",")
	}
	// HBM_INCAST_SPLIT=1 serves the bulk streams and the RPC loops from
	// separate processes (netperf in the seed runs one per flow). Measured:
	// it does not shorten the tail with HBM (so the tail is not the Go
	// runtime of one server process), and costs goodput on two cores.
	oneProc := os.Getenv("HBM_INCAST_SPLIT") == ""
	if !oneProc {
		if _, err := l.in.StartServer(l.bin, l.dir, inPort+1); err != nil {
			t.Fatal(err)
		}
	}
	type stats struct{ drops, retrans, rpcRetrans, p99, p50, good, total, cpu, softirq, pkt, backlogDrops, squeezed []float64 }
	add := func(st *stats, r *netlab.IncastResult) {
		st.drops = append(st.drops, float64(r.Drops))
		st.retrans = append(st.retrans, float64(r.Retransmits))
		st.rpcRetrans = append(st.rpcRetrans, float64(r.RPCRetrans))
		st.p99 = append(st.p99, r.RPCP99)
		st.p50 = append(st.p50, r.RPCP50)
		st.good = append(st.good, r.Goodput/bottleneck)
		st.total = append(st.total, r.TotalGoodput/bottleneck)
		st.cpu = append(st.cpu, r.CPU.BusyCores)
		st.softirq = append(st.softirq, r.CPU.SoftirqCores)
		st.pkt = append(st.pkt, r.RxPktBytes)
		st.backlogDrops = append(st.backlogDrops, float64(r.Softnet.Dropped))
		st.squeezed = append(st.squeezed, float64(r.Softnet.Squeezed))
	}
	med := result.Median
	var table []string
	for _, ccName := range ccs {
		t.Run(ccName, func(t *testing.T) {
			cc := l.ccSetup(t, ccName)
			cfg := workload.Config{Streams: 2, RPCs: 1, RPCSize: 10 << 10, Warmup: inWarmup, Duration: inDuration, CC: cc}
			jobs := []netlab.IncastJob{{Cfg: cfg, Port: inPort}}
			if !oneProc {
				bulk, rpc := cfg, cfg
				bulk.RPCs, rpc.Streams = 0, 0
				jobs = []netlab.IncastJob{{Cfg: bulk, Port: inPort}, {Cfg: rpc, Port: inPort + 1}}
			}
			var none, with stats
			var marked, dropped uint64
			pair := func() {
				r, _ := l.runJobs(t, "no hbm", jobs)
				add(&none, r)
				if err := l.hbm.SetIngress(l.group, args[0], args[1:]...); err != nil {
					t.Fatalf("hbm set --ingress: %v", err)
				}
				r, c := l.runJobs(t, "hbm --ingress "+strings.Join(args, " "), jobs)
				if err := l.hbm.Unset(l.group); err != nil {
					t.Fatal(err)
				}
				if c == nil {
					t.Fatal("hbm show --json lists no ingress limit for the receiver's group")
				}
				add(&with, r)
				marked += c.Marked
				dropped += c.Dropped
			}
			for i := 0; i < runs; i++ {
				pair()
			}
			// The tail of senders without ECN varies from run to run more
			// than its bound below allows, now and then: a clean-clone CI
			// run measured cubic at 16.5 ms with HBM against 10.3 without
			// (every sender 1.3-1.6x, no mark, no clamp) where sets of 3
			// measured 0.9-1.1x. So one more pair, and the medians of all,
			// before calling it worse; a clamp that doubles the tail fails
			// both.
			if !ccECN(ccName) && med(with.p99) > nonECNTail*med(none.p99) {
				t.Logf("%s: worst 10 KB P99 %.0f us with HBM, %.0f us without: one more pair", ccName, med(with.p99), med(none.p99))
				pair()
			}
			for _, x := range []struct {
				name string
				st   stats
			}{{"none", none}, {"hbm", with}} {
				line := fmt.Sprintf("%-9s %-4s drops %s  retrans %s (rpc %s)  10KB p50 %s us  worst p99 %s us  goodput/port %s (bulk %s)  cpu %s (softirq %s) cores  rx packet %s B  backlog drops %s  squeezed %s",
					ccName, x.name, span(x.st.drops), span(x.st.retrans), span(x.st.rpcRetrans), span(x.st.p50), span(x.st.p99), span(x.st.total), span(x.st.good),
					span(x.st.cpu), span(x.st.softirq), span(x.st.pkt), span(x.st.backlogDrops), span(x.st.squeezed))
				table = append(table, line)
				t.Log(line)
			}
			t.Logf("%s: hbm marked %d packets in %d run(s) (ECN flows the window assist holds at their floor are not marked)", ccName, marked, len(with.p99))
			if dropped != 0 {
				t.Errorf("--no-drop limit dropped %d packets", dropped)
			}
			if shared && med(with.p99) > 4*med(none.p99) {
				t.Errorf("worst sender's 10 KB P99 %.0f us with HBM, %.0f us without: more than 4x worse", med(with.p99), med(none.p99))
			}
			if !ccECN(ccName) {
				// A mark-only limit leaves senders without ECN as without
				// HBM (no marks possible, no window clamp): the same drops
				// and tail, within run-to-run noise. Before, the clamp
				// doubled the tail (18 ms against 9.4). The drops vary
				// from run to run more than that: with HBM leaving the
				// flows alone (no marks, no clamp), single runs measured
				// cubic 6,069 against 4,283, and bbr, which makes almost
				// no incast here, 437-1,338 against 73-535 (medians of 3:
				// 454-585 against 187-198). So the bound is 2x (+1,500);
				// a clamp shows in the tail below.
				if med(with.drops) > 2*med(none.drops)+1500 {
					t.Errorf("non-ECN: bottleneck drops %.0f with HBM, %.0f without: worse", med(with.drops), med(none.drops))
				}
				if med(with.p99) > nonECNTail*med(none.p99) {
					t.Errorf("non-ECN: worst 10 KB P99 %.0f us with HBM, %.0f us without: worse", med(with.p99), med(none.p99))
				}
				return
			}
			// (bbr, which paces, makes almost none on separate CPUs: 0-333
			// drops without HBM. It is only compared above.)
			if med(none.retrans) < 100 || med(none.drops) < 100 {
				t.Fatalf("without HBM only %.0f retransmissions and %.0f bottleneck drops: the testbed made no incast", med(none.retrans), med(none.drops))
			}
			// Target 0 drops and 100x fewer retransmissions; on a quiet
			// machine 0-18 drops against 6,400 and 77-138x; with another
			// job running 180-260 against 3,400-7,700 and 24x.
			if med(with.drops)*10 > med(none.drops) {
				t.Errorf("bottleneck drops %.0f with HBM (median), %.0f without: want at least 10x fewer", med(with.drops), med(none.drops))
			}
			if med(with.retrans)*10 > med(none.retrans) {
				t.Errorf("retransmissions %.0f with HBM, %.0f without: want at least 10x fewer", med(with.retrans), med(none.retrans))
			}
			// The RPC connections' own losses: without HBM 2,900-4,400
			// retransmissions in a window (4 connections), each a loss
			// probe's 8 ms in a request's time; with HBM 0-260 in 3-run
			// benchmarks, 500 in one clean-clone CI run (no drops: timers
			// firing on a loaded machine). 4x catches a limiter that lets
			// the RPCs lose as without HBM.
			if med(none.rpcRetrans) >= 100 && med(with.rpcRetrans)*4 > med(none.rpcRetrans) {
				t.Errorf("RPC connections' retransmissions %.0f with HBM, %.0f without: want at least 4x fewer", med(with.rpcRetrans), med(none.rpcRetrans))
			}
			// The tail: target 3x lower than without HBM; single runs on
			// separate CPUs measured 4.7-7.7x. 2x fails a limiter that
			// leaves the RPCs' losses (about 1x) and the design that marked
			// every flow (2.7x higher).
			if !shared && med(with.p99)*2 > med(none.p99) {
				t.Errorf("worst sender's 10 KB P99 %.0f us with HBM, %.0f us without: want at least 2x lower", med(with.p99), med(none.p99))
			}
			// Goodput: target 0.85. On this two-core machine it moves
			// between sessions: single runs read 0.76-0.87 alone and
			// 0.71-0.73 in two of five CI runs of one session, medians
			// of 3 read 0.94 in another (2026-11-28), on the same data
			// plane: the bound is what a loaded CI machine passes.
			// Eight streams held at the window's 2-segment floor over a
			// 250 us RTT would carry 0.37 (arithmetic).
			if g := med(with.total); g < incastGoodputMin {
				t.Errorf("goodput with HBM is %.3f of the bottleneck, want >= %.2f", g, incastGoodputMin)
			}
		})
	}
	cpus := fmt.Sprintf("receiver on CPU %v, senders and switch on %v", opts.ReceiverCPUs, opts.OtherCPUs)
	if shared {
		cpus = "all sharing every CPU"
	}
	t.Logf("incast (%d run(s), 4 senders x (2 streams + 10 KB loop), 2 Gbit/s 128 KB port, hbm --ingress 1.8gbit --no-drop, %s):\n%s", runs, cpus, strings.Join(table, "\n"))
}

// TestIngressLimit: a plain ingress limit on the receiver's group holds 3
// bulk streams of ECN senders within [0.80, 0.97] of the limit. The path is
// not the bottleneck (20 Gbit/s). The limit is 2 Gbit/s: on this testbed's
// RTT (tens of microseconds) no receiver-side mechanism holds a TCP flow
// below about two segments per RTT, about 1 Gbit/s per flow (docs/design.md).
func TestIngressLimit(t *testing.T) {
	l := inSetup(t, "inglim", netlab.IncastOptions{Senders: 1, Rate: 20_000_000_000, Buffer: 1 << 20, Burst: 256 << 10})
	const rate = "2gbit"
	for _, ccName := range []string{"cubic+ecn", "dctcp"} {
		t.Run(ccName, func(t *testing.T) {
			cc := l.ccSetup(t, ccName)
			if err := l.hbm.SetIngress(l.group, rate); err != nil {
				t.Fatalf("hbm set --ingress %s: %v", rate, err)
			}
			defer l.hbm.Unset(l.group)
			cfg := workload.Config{Streams: 3, Warmup: inWarmup, Duration: inDuration, CC: cc}
			r, c := l.run(t, "hbm --ingress "+rate, cfg)
			if c == nil {
				t.Fatal("hbm show --json lists no ingress limit for the receiver's group")
			}
			limit, _ := netlab.ParseRate(rate)
			if ratio := r.Goodput / float64(limit); ratio < 0.80 || ratio > 0.97 {
				t.Errorf("goodput %.1f Mbit/s is %.3f of the %s limit, want [0.80, 0.97]", r.Goodput/1e6, ratio, rate)
			} else {
				t.Logf("goodput %.3f of %s: ok", ratio, rate)
			}
		})
	}
}

// TestIngressUnclampedHolds: an ingress limit holds senders whose windows
// the assist does not clamp (`--no-pace`, the shape of a clamp stuck above
// its share): 16 cubic+ECN streams into 500mbit deliver at most the limit.
// Each drop's hole passes the rest of its flow's window (rx_protected), and
// before those packets were refused at the virtual queue's bound the group
// received 2.3-2.6x its limit as goodput in every run, as in the drop storm
// a CI run once met (docs/design.md, "Drop storms"). Held, it delivers
// 0.88-0.94 (the drops cost retransmission timeouts); the bound here only
// catches an escape.
func TestIngressUnclampedHolds(t *testing.T) {
	l := inSetup(t, "ingunc", netlab.IncastOptions{Senders: 1, Rate: 20_000_000_000, Buffer: 1 << 20, Burst: 256 << 10})
	const rate = "500mbit"
	limit, _ := netlab.ParseRate(rate)
	cc := l.ccSetup(t, "cubic+ecn")
	if err := l.hbm.SetIngress(l.group, rate, "--no-pace"); err != nil {
		t.Fatalf("hbm set --ingress %s --no-pace: %v", rate, err)
	}
	defer l.hbm.Unset(l.group)
	for i := 0; i < 2; i++ {
		cfg := workload.Config{Streams: 16, Warmup: inWarmup, Duration: inDuration, CC: cc}
		r, _ := l.run(t, "hbm --ingress "+rate+" --no-pace x 16", cfg)
		if ratio := r.Goodput / float64(limit); ratio > 1.05 || ratio < 0.5 {
			t.Errorf("run %d: goodput %.1f Mbit/s is %.3f of the %s limit, want [0.50, 1.05]", i, r.Goodput/1e6, ratio, rate)
		}
	}
}

// TestIngressCLI: egress and ingress limits of one group are independent
// (set together or apart, shown together, unset one or both), and bad input
// changes nothing.
func TestIngressCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root, cgroups, BPF")
	}
	testutil.RequireRoot(t)
	bin := testutil.HBMBinary(t)
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	h := netlab.HBM{Bin: bin}
	const top, group = "/hbm-test-ingcli", "/hbm-test-ingcli/g"
	h.Unset(group)
	cgroup.Remove(top)
	if _, err := cgroup.Create(group); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Unset(group)
		if err := cgroup.Remove(top); err != nil {
			t.Errorf("remove %s: %v", top, err)
		}
	})
	hbm := func(args ...string) (string, int) {
		t.Helper()
		out, errOut, code, err := ccExec(bin, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out + errOut, code
	}
	type dirs struct{ eg, in uint64 }
	show := func() dirs {
		t.Helper()
		out, code := hbm("show", "--json")
		if code != 0 {
			t.Fatalf("show --json: exit %d: %s", code, out)
		}
		var st []jsonout.Group
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("show --json: %v: %s", err, out)
		}
		var d dirs
		for _, g := range st {
			if g.Cgroup == group {
				if g.Egress != nil {
					d.eg = g.Egress.RateBps
				}
				if g.Ingress != nil {
					d.in = g.Ingress.RateBps
				}
			}
		}
		return d
	}
	expect := func(step string, want dirs) {
		t.Helper()
		if got := show(); got != want {
			t.Fatalf("%s: show has egress %d ingress %d, want %d %d", step, got.eg, got.in, want.eg, want.in)
		}
	}
	ok := func(args ...string) {
		t.Helper()
		if out, code := hbm(args...); code != 0 {
			t.Fatalf("hbm %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
	}

	ok("set", group, "--egress", "200mbit", "--ingress", "1gbit")
	expect("set both", dirs{200e6, 1e9})
	ok("set", group, "--ingress", "500mbit", "--no-drop")
	expect("change ingress only", dirs{200e6, 500e6})
	if out, _ := hbm("show"); !strings.Contains(out, "ingress") || !strings.Contains(out, "egress") {
		t.Fatalf("show table lacks a direction:\n%s", out)
	}
	// Bad input: usage errors (exit 2), nothing changed.
	for _, args := range [][]string{
		{"set", group},
		{"set", group, "--ingress", "0bit"},
		{"set", group, "--ingress", "fast"},
		{"set", group, "--egress", "1gbit", "--ingress", "1tbit"},
		{"set", group + "-missing", "--ingress", "1gbit"},
	} {
		if out, code := hbm(args...); code != 2 {
			t.Errorf("hbm %s: exit %d, want 2 (usage): %s", strings.Join(args, " "), code, out)
		}
	}
	expect("after bad input", dirs{200e6, 500e6})
	ok("unset", group, "--ingress")
	expect("unset ingress", dirs{200e6, 0})
	if out, code := hbm("unset", group, "--ingress"); code != 1 || !strings.Contains(out, "no limit") {
		t.Errorf("unset --ingress again: exit %d, want 1 with \"no limit\": %s", code, out)
	}
	expect("after failed unset", dirs{200e6, 0})
	ok("set", group, "--ingress", "2gbit")
	ok("unset", group, "--egress")
	expect("unset egress", dirs{0, 2e9})
	ok("set", group, "--egress", "300mbit")
	ok("unset", group)
	expect("unset both", dirs{0, 0})
	if out, code := hbm("unset", group); code != 1 {
		t.Errorf("unset with nothing set: exit %d, want 1: %s", code, out)
	}
}

// TestIngressLimitSweep: a plain ingress limit holds N bulk streams of ECN
// senders (cubic+ECN, DCTCP) within [0.80, 1.08] of the limit (2gbit:
// [0.70, 1.08]), frames counted on the receiver's interface (Ethernet
// headers included, as the limit counts them since pkt.h's LINK_HDR_BYTES), for
// N = 1, 4, 16 at 500mbit, 1gbit and 2gbit. The path is not the bottleneck (20 Gbit/s). Bounds wider
// than the design target [0.85, 1.05] so that a loaded CI machine passes,
// narrow enough to catch a limiter that starves (the receive-window assist
// once held groups at 0.25-0.5) or lets the senders through.
//
// Each cell is the median of 3 runs (1 s warm-up, 2 s windows);
// HBM_INGRESS_SWEEP_RUNS=N makes it the benchmark (medians of N, 2 s
// warm-up, 4 s windows, min-max logged); HBM_INGRESS_SWEEP_ARGS adds `hbm
// set` flags (e.g. --no-pace) and HBM_INGRESS_SWEEP_CELLS=rate/cc/N,...
// runs only those cells (e.g. 2gbit/dctcp/1), HBM_INGRESS_SWEEP_RATES=
// 50mbit,... other limits than the three (bounds as for 500mbit).
func TestIngressLimitSweep(t *testing.T) {
	l := inSetup(t, "ingsweep", netlab.IncastOptions{Senders: 1, Rate: 20_000_000_000, Buffer: 1 << 20, Burst: 256 << 10})
	// Medians of 3 short runs, and a bound on each run (below). Before
	// verdict_learn (policy.h) about one run in ten at 1gbit read 1.2-1.4
	// on the interface, a storm of drops behind clamps that dropped
	// packets had lifted (docs/design.md, "Drop storms"): with one run per
	// cell it failed two of three CI runs, and once it took two runs of
	// three in a cell.
	runs, warm, dur := 3, time.Second, 2*time.Second
	if v := os.Getenv("HBM_INGRESS_SWEEP_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
		warm, dur = 2*time.Second, 4*time.Second
	}
	extra := strings.Fields(os.Getenv("HBM_INGRESS_SWEEP_ARGS"))
	only := map[string]bool{}
	for _, c := range strings.Split(os.Getenv("HBM_INGRESS_SWEEP_CELLS"), ",") {
		if c != "" {
			only[c] = true
		}
	}
	rates := []string{"500mbit", "1gbit", "2gbit"}
	if v := os.Getenv("HBM_INGRESS_SWEEP_RATES"); v != "" {
		rates = strings.Split(v, ",")
	}
	var table []string
	for _, ccName := range []string{"cubic+ecn", "dctcp"} {
		t.Run(ccName, func(t *testing.T) {
			cc := l.ccSetup(t, ccName)
			for _, rate := range rates {
				limit, err := netlab.ParseRate(rate)
				if err != nil {
					t.Fatalf("HBM_INGRESS_SWEEP_RATES: %v", err)
				}
				for _, n := range []int{1, 4, 16} {
					cell := fmt.Sprintf("%s/%s/%d", rate, ccName, n)
					if len(only) > 0 && !only[cell] {
						continue
					}
					if err := l.hbm.SetIngress(l.group, rate, extra...); err != nil {
						t.Fatalf("hbm set --ingress %s: %v", rate, err)
					}
					var shares, goods []float64
					var retrans, marked, dropped uint64
					for i := 0; i < runs; i++ {
						cfg := workload.Config{Streams: n, Warmup: warm, Duration: dur, CC: cc}
						r, c := l.run(t, fmt.Sprintf("%s x %d", rate, n), cfg)
						shares = append(shares, r.RxBps/float64(limit))
						goods = append(goods, r.Goodput/float64(limit))
						retrans += r.Retransmits
						if c != nil {
							marked += c.Marked
							dropped += c.Dropped
						}
					}
					if err := l.hbm.Unset(l.group); err != nil {
						t.Fatal(err)
					}
					med := result.Median(shares)
					line := fmt.Sprintf("%-8s %-10s %3d  rx/limit %.3f (%.3f-%.3f)  goodput/limit %.3f  retrans %d  marked %d  dropped %d (all runs)",
						rate, ccName, n, med, slices.Min(shares), slices.Max(shares), result.Median(goods), retrans, marked, dropped)
					table = append(table, line)
					t.Log(line)
					// At 2gbit the receiver's CPU decides: 16 DCTCP
					// streams read 0.74-0.84 in some sessions (two CI
					// runs: 0.781, 0.790) and 1.02 in others, on the
					// same build (docs/design.md, Known shortfalls).
					lo := 0.80
					if rate == "2gbit" {
						lo = 0.70
					}
					if med < lo || med > 1.08 {
						t.Errorf("%s: %d %s streams received at %.3f of the limit (frames on the receiver's interface), want [%.2f, 1.08]", rate, n, ccName, med, lo)
					}
					// Any one run: a drop storm (senders' windows opened
					// into the limit's drops) read 1.2-1.4 in about one
					// run in ten before verdict_learn; since, every run
					// of 2026-11-28 (about 230) read at most 1.063.
					if hi := slices.Max(shares); hi > 1.15 {
						t.Errorf("%s: %d %s streams: one run received %.3f of the limit (runs %.3f), want at most 1.15: a drop storm?", rate, n, ccName, hi, shares)
					}
				}
			}
		})
	}
	t.Logf("sweep (%d run(s) per cell, %v warm-up, %v window, extra %q):\n%s", runs, warm, dur, extra, strings.Join(table, "\n"))
}
