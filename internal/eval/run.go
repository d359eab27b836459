package eval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/analyze"
	"github.com/hbm-dev/hbm/internal/analyze/schema"
	"github.com/hbm-dev/hbm/internal/cc"
	"github.com/hbm-dev/hbm/internal/eval/report"
	"github.com/hbm-dev/hbm/internal/eval/result"
	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/workload"
)

// Options configure an eval.
type Options struct {
	// Bin is the hbm binary the eval drives (hbm set/unset/show, workload
	// serve/run, cc install).
	Bin string
	// Quick runs each scenario's quick matrix and durations.
	Quick bool
	// CCs and Limiters, when set, replace every scenario's lists.
	CCs, Limiters []string
	// Duration and Warmup, when set, replace every scenario's.
	Duration, Warmup time.Duration
	// Counts, when set, replaces the list of every scenario's counts flow
	// (scenarios without one are unaffected).
	Counts []int
	// Sizes, when set, replaces the response sizes (bytes) of every
	// scenario's http flow with sizes (scenarios without one are
	// unaffected).
	Sizes []int
	// IPv6 runs every scenario over IPv6 (Scenario.IPv6).
	IPv6 bool
	// Runs repeats every run this many times (0 or 1: once); the results
	// then hold the medians, the spread and every repetition
	// (result.Aggregate).
	Runs int
	// PinDir is the bpffs directory of the eval's HBM state; "" means a
	// private one (netlab.NewPinDir: /sys/fs/bpf/hbm-lab-TOKEN/pins), removed at
	// the end, or by the next eval if this one is killed. A user's limits
	// are never touched.
	PinDir string
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	// Command and Version are recorded in the results' metadata.
	Command []string
	Version string
	// CaptureDir, when set, keeps a capture of each run's measurement
	// window there (see captureRun); WriteFiles charts them per round trip.
	CaptureDir string
}

type runner struct {
	o       Options
	hbm     netlab.HBM
	pin     *netlab.PinDir // the eval's own pin directory, if it made one
	logf    func(string, ...any)
	dctcp   string // "" untried, "ok", or why it is unavailable
	total   int
	done    int
	started time.Time
}

// Run runs every scenario's matrix and returns the results. On cancellation
// it cleans up and returns what it measured so far with ctx's error.
func Run(ctx context.Context, scens []*Scenario, o Options) (*result.Results, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("eval needs root (network namespaces, cgroups, BPF)")
	}
	// Commands run in the hosts through `ip netns exec`; the rest is netlink.
	if _, err := execLookPath("ip"); err != nil {
		return nil, fmt.Errorf("ip not found (install iproute2): %w", err)
	}
	r := &runner{o: o, started: time.Now()}
	r.logf = func(format string, args ...any) { fmt.Fprintf(o.Log, "eval: "+format+"\n", args...) }
	CleanupLeftovers(r.logf)
	if o.PinDir == "" {
		pd, err := netlab.NewPinDir()
		if err != nil {
			return nil, err
		}
		defer pd.Close()
		o.PinDir, r.o.PinDir, r.pin = pd.Path, pd.Path, pd
	}
	r.hbm = netlab.HBM{Bin: o.Bin, PinDir: o.PinDir}
	// BPF run-time statistics for as long as this fd is open: the kernel
	// counts the enablers, so nothing global is left changed, even on a crash.
	var statsNote string
	if st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
		statsNote = fmt.Sprintf("BPF run-time statistics unavailable: %v", err)
		r.logf("%s", statsNote)
	} else {
		defer st.Close()
	}

	res := &result.Results{Version: result.Version, Meta: meta(o)}
	type plan struct {
		s                *Scenario
		ccs, lims        []string
		variants         []Variant
		duration, warmup time.Duration
	}
	var plans []plan
	for _, s := range scens {
		if o.IPv6 && !s.IPv6 {
			c := *s // the caller's scenario unchanged
			c.IPv6 = true
			s = &c
		}
		p := plan{s: s, ccs: s.CCs, lims: s.Limiters, duration: s.DurationD, warmup: s.WarmupD}
		var counts, sizes []int
		if o.Quick && len(s.Quick.Counts) > 0 {
			counts = s.Quick.Counts
		}
		if o.Quick && len(s.Quick.SizesBytes) > 0 {
			sizes = s.Quick.SizesBytes
		}
		if len(o.Counts) > 0 {
			counts = o.Counts
		}
		if len(o.Sizes) > 0 {
			sizes = o.Sizes
		}
		p.variants = s.VariantsWith(counts, sizes)
		if o.Quick {
			p.duration, p.warmup = s.Quick.DurationD, s.Quick.WarmupD
			if len(s.Quick.CCs) > 0 {
				p.ccs = s.Quick.CCs
			} else if slices.Contains(s.CCs, "cubic-ecn") {
				p.ccs = []string{"cubic-ecn"}
			} else {
				p.ccs = s.CCs[:1]
			}
			if len(s.Quick.Limiters) > 0 {
				p.lims = s.Quick.Limiters
			}
		}
		if len(o.CCs) > 0 {
			p.ccs = o.CCs
		}
		if len(o.Limiters) > 0 {
			p.lims = o.Limiters
		}
		if o.Duration > 0 {
			p.duration = o.Duration
		}
		if o.Warmup > 0 {
			p.warmup = o.Warmup
		}
		plans = append(plans, p)
		r.total += len(p.variants) * len(p.ccs) * len(p.lims) * r.reps()
	}
	var runErr error
	for _, p := range plans {
		if ctx.Err() != nil {
			runErr = ctx.Err()
			break
		}
		runs := r.scenario(ctx, p.s, p.variants, p.ccs, p.lims, p.duration, p.warmup)
		for i := range runs {
			runs[i].IPv6 = p.s.IPv6 // failed and skipped runs too
			if statsNote != "" && runs[i].Limiter == "hbm" {
				runs[i].Notes = append(runs[i].Notes, statsNote)
			}
		}
		res.Runs = append(res.Runs, runs...)
	}
	if runErr == nil {
		runErr = ctx.Err()
	}
	if r.dctcp == "installed" {
		if _, err := r.hbm.Run("cc", "remove", "dctcp"); err != nil {
			r.logf("cc remove dctcp: %v", err)
		} else if r.pin != nil {
			r.pin.Unmark(markerDCTCP)
		}
	}
	res.Meta.ElapsedSec = time.Since(r.started).Seconds()
	return res, runErr
}

// markerDCTCP marks the eval's pin directory while HBM's BPF DCTCP it
// installed is registered: a killed eval's is removed by the next one.
const markerDCTCP = "installed-dctcp"

// CleanupLeftovers removes what killed evals (and labs) left behind: their
// namespaces (killing what runs inside), cgroups and pin directories, and
// HBM's BPF DCTCP if one of them installed it. Those of live ones are left
// alone, whichever PID namespace they run in.
func CleanupLeftovers(log func(string, ...any)) {
	netlab.Sweep(log)
	netlab.SweepPinDirs(log, func(marker string) error {
		if marker != markerDCTCP {
			return nil
		}
		res, err := cc.Remove("dctcp", false)
		if err == nil {
			log("dctcp: %s", res.Detail)
		}
		return err
	})
}

func execLookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/sbin") {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not in PATH", name)
}

// reps is how many times each run is repeated.
func (r *runner) reps() int { return max(r.o.Runs, 1) }

// endpoint is a workload server: the destination of the flows of one source
// group (so each source group has ports of its own, which the tc limiters
// classify on).
//
// An http flow's endpoint is its web server's instead: nginx listening on
// port in src (the flow's server group), answering the load generator on to.
type endpoint struct {
	to, src string // destination and source cgroup-or-host names
	port    int
	http    bool
}

// scenario builds s's topology and runs its matrix.
func (r *runner) scenario(ctx context.Context, s *Scenario, variants []Variant, ccs, lims []string, dur, warm time.Duration) []result.Run {
	var runs []result.Run
	fail := func(err error) []result.Run {
		for _, v := range variants {
			for _, cc := range ccs {
				for _, l := range lims {
					runs = append(runs, result.Run{Scenario: s.Name, Variant: v.Label, CC: cc, Limiter: l, Error: err.Error()})
					r.done += r.reps()
				}
			}
		}
		r.logf("%s: %v", s.Name, err)
		return runs
	}
	if why := missingHTTPTools(s); why != "" {
		for _, v := range variants {
			for _, cc := range ccs {
				for _, l := range lims {
					runs = append(runs, result.Run{Scenario: s.Name, Variant: v.Label, CC: cc, Limiter: l, Skipped: why})
					r.done += r.reps()
				}
			}
		}
		r.logf("%s: skipped: %s", s.Name, why)
		return runs
	}
	r.logf("%s: building %d hosts, %d links (%s)", s.Name, len(s.Hosts), len(s.Links), s.Description)
	t, err := buildTopology(s, r.o.Bin)
	if err != nil {
		return fail(fmt.Errorf("topology: %w", err))
	}
	defer func() {
		if err := t.close(); err != nil {
			r.logf("%s: cleanup: %v", s.Name, err)
		}
	}()
	var eps []*endpoint
	webEP := map[int]*endpoint{} // http flow index -> its web server's endpoint
	for i, fl := range s.Flows {
		if fl.Kind == "http" {
			webEP[i] = &endpoint{to: fl.To, src: fl.From[0], port: firstPort + len(eps), http: true}
			eps = append(eps, webEP[i])
			continue
		}
		for _, src := range fl.From {
			if findEndpoint(eps, fl.To, s.groupOf(src)) == nil {
				eps = append(eps, &endpoint{to: fl.To, src: s.groupOf(src), port: firstPort + len(eps)})
			}
		}
	}
	for _, ep := range eps {
		if ep.http {
			continue
		}
		if err := t.startServer(s.HostOf(ep.to), ep.to, ep.port); err != nil {
			return fail(err)
		}
	}
	for i := range s.Flows {
		if ep := webEP[i]; ep != nil {
			w, err := t.startWeb(&s.Flows[i], ep, httpSizes(s, i, variants))
			if err != nil {
				return fail(err)
			}
			defer w.close()
			t.web = append(t.web, w)
		}
	}
	var notes []string
	for i := range s.Cgroups {
		c := &s.Cgroups[i]
		if !c.EgressAuto {
			continue
		}
		bps, note, err := r.calibrate(ctx, t, eps, c)
		if err != nil {
			return fail(fmt.Errorf("measuring the auto rate of %s: %w", c.Name, err))
		}
		c.EgressBps = bps
		notes = append(notes, note)
		r.logf("%s: %s", s.Name, note)
	}
	// Variants outermost (a count's runs together), then congestion
	// controls; the repetitions of one cc take turns over the limiters, so
	// that drift on the machine spreads over all of them alike.
	for _, v := range variants {
		if v.Flow >= 0 {
			orig, origSize := s.Flows[v.Flow].Count, s.Flows[v.Flow].SizeBytes
			s.Flows[v.Flow].Count = v.Count
			if v.Size > 0 {
				s.Flows[v.Flow].SizeBytes = v.Size
			}
			defer func() { s.Flows[v.Flow].Count, s.Flows[v.Flow].SizeBytes = orig, origSize }()
		}
		for _, cc := range ccs {
			reps := make([][]result.Run, len(lims))
			for k := 0; k < r.reps() && ctx.Err() == nil; k++ {
				for li, lim := range lims {
					if ctx.Err() != nil {
						break
					}
					if k > 0 && reps[li][0].Skipped != "" {
						r.done++ // skipped once, skipped always
						continue
					}
					run := r.runOne(ctx, t, eps, cc, lim, dur, warm)
					run.Variant, run.IPv6 = v.Label, s.IPv6
					run.Notes = append(slices.Clone(notes), run.Notes...)
					report.Diagnose(&run)
					r.done++
					rep := ""
					if r.reps() > 1 {
						rep = fmt.Sprintf(" (repetition %d/%d)", k+1, r.reps())
					}
					r.logf("[%d/%d] %s%s", r.done, r.total, runLine(&run), rep)
					reps[li] = append(reps[li], run)
				}
			}
			for li := range lims {
				if len(reps[li]) == 0 {
					continue
				}
				agg := result.Aggregate(reps[li])
				if len(reps[li]) > 1 {
					report.Diagnose(&agg)
					r.logf("median of %d: %s", len(reps[li]), runLine(&agg))
				}
				runs = append(runs, agg)
			}
			if ctx.Err() != nil {
				return runs
			}
		}
	}
	return runs
}

func findEndpoint(eps []*endpoint, to, src string) *endpoint {
	for _, e := range eps {
		if e.to == to && e.src == src && !e.http {
			return e
		}
	}
	return nil
}

// groupOf is the cgroup a source name runs in: itself (cgroups and hosts
// both have one).
func (s *Scenario) groupOf(name string) string { return name }

// ccBase splits a run's congestion control into the kernel's name and
// whether ECN is on (cubic-ecn; dctcp always).
func ccBase(cc string) (string, bool) {
	base, ecn := strings.CutSuffix(cc, "-ecn")
	return base, ecn || base == "dctcp"
}

// ccAvailable returns why congestion control base cannot run ("" if it can),
// installing HBM's BPF DCTCP when the kernel has none.
func (r *runner) ccAvailable(base string) string {
	avail := func() []string {
		b, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
		return strings.Fields(string(b))
	}
	if slices.Contains(avail(), base) {
		return ""
	}
	if base == "dctcp" {
		if r.dctcp == "" {
			r.logf("dctcp: not in the kernel, installing HBM's BPF DCTCP (hbm cc install dctcp)")
			// Marked first: if this eval is killed, the next one removes it.
			if r.pin != nil {
				if err := r.pin.Mark(markerDCTCP); err != nil {
					r.logf("dctcp: %v", err)
				}
			}
			if _, err := r.hbm.Run("cc", "install", "dctcp"); err != nil {
				r.dctcp = fmt.Sprintf("dctcp not installable: %v", err)
				if r.pin != nil {
					r.pin.Unmark(markerDCTCP)
				}
			} else {
				r.dctcp = "installed"
			}
		}
		if slices.Contains(avail(), base) {
			return ""
		}
		if r.dctcp != "installed" {
			return r.dctcp
		}
	}
	if _, err := os.Stat("/lib/modules"); err == nil {
		// A module may load on first use (setsockopt does it for root).
		if exec.Command("modprobe", "-q", "tcp_"+base).Run() == nil && slices.Contains(avail(), base) {
			return ""
		}
	}
	return fmt.Sprintf("congestion control %s not available (kernel offers: %s)", base, strings.Join(avail(), " "))
}

// client is one `hbm workload run --script` process: flow fl from src.
type client struct {
	fl  *Flow
	src string
	sc  *netlab.ScriptClient
}

func (t *topology) startClient(ctx context.Context, fl *Flow, src string, ep *endpoint, cc string, life time.Duration) (*client, error) {
	s := t.s
	srcHost, dstHost := s.HostOf(src), s.HostOf(fl.To)
	addr := net.JoinHostPort(t.addr(srcHost, dstHost).String(), strconv.Itoa(ep.port))
	args := []string{"workload", "run", "--connect", addr, "--duration", life.String(), "--hist", "--warmup", "0s"}
	switch fl.Kind {
	case "stream":
		args = append(args, "--streams", strconv.Itoa(fl.Count), "--rpc", "0")
	case "udp":
		args = append(args, "--streams", "0", "--rpc", "0", "--udp", strconv.Itoa(fl.Count),
			"--udp-rate", strconv.FormatUint(fl.RateBps, 10)+"bit", "--udp-size", strconv.Itoa(fl.udpSize(s.IPv6)))
	default:
		args = append(args, "--streams", "0", "--rpc", strconv.Itoa(fl.Count),
			"--rpc-size", strconv.Itoa(fl.SizeBytes), "--reply-size", strconv.Itoa(fl.ReplyBytes))
		if fl.PerSecond > 0 {
			args = append(args, "--rpc-rate", strconv.FormatFloat(fl.PerSecond, 'g', -1, 64))
		}
	}
	if cc != "" {
		args = append(args, "--cc", cc)
	}
	sc, err := t.lab.StartScriptClientNice(ctx, t.bin, srcHost, t.cgroup(src), args, true, fl.Nice)
	if err != nil {
		return nil, err
	}
	return &client{fl: fl, src: src, sc: sc}, nil
}

func (c *client) next(ctx context.Context, timeout time.Duration) (string, error) {
	line, err := c.sc.Next(ctx, timeout)
	if err != nil {
		return "", fmt.Errorf("flow %s from %s: %w", c.fl.Name, c.src, err)
	}
	return line, nil
}

func (c *client) send(cmd string) error { return c.sc.Send(cmd) }

func (c *client) stop() { c.sc.Close() }

// startClients starts one client per flow and source and waits until all
// are connected.
func (t *topology) startClients(ctx context.Context, eps []*endpoint, cc func(*Flow) string, life time.Duration, only func(*Flow, string) bool) ([]*client, error) {
	var cs []*client
	for i := range t.s.Flows {
		fl := &t.s.Flows[i]
		for _, src := range fl.From {
			if only != nil && !only(fl, src) {
				continue
			}
			c, err := t.startClient(ctx, fl, src, findEndpoint(eps, fl.To, src), cc(fl), life)
			if err != nil {
				stopAll(cs)
				return nil, err
			}
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		line, err := c.next(ctx, 15*time.Second)
		if err == nil && line != "ready" {
			err = fmt.Errorf("workload client said %q, want ready", line)
		}
		if err != nil {
			stopAll(cs)
			return nil, err
		}
	}
	return cs, nil
}

func stopAll(cs []*client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop() }()
	}
	wg.Wait()
}

// window opens a measurement window on every client, waits d and collects
// each client's result.
// atBegin and atEnd (if not nil) run just before the window opens and just
// after it closes, for counters read on the same interval.
func window(ctx context.Context, cs []*client, d time.Duration, atBegin, atEnd func()) ([]*workload.Result, error) {
	if atBegin != nil {
		atBegin()
	}
	for _, c := range cs {
		if err := c.send("begin w"); err != nil {
			return nil, err
		}
	}
	werr := workload.SleepCtx(ctx, d)
	for _, c := range cs {
		c.send("end")
	}
	if atEnd != nil {
		atEnd()
	}
	if werr != nil {
		return nil, werr
	}
	out := make([]*workload.Result, len(cs))
	for i, c := range cs {
		line, err := c.next(ctx, 15*time.Second)
		if err != nil {
			return nil, err
		}
		var wr workload.Result
		if err := json.Unmarshal([]byte(line), &wr); err != nil {
			return nil, fmt.Errorf("workload client %s: %w: %.200q", c.fl.Name, err, line)
		}
		out[i] = &wr
	}
	return out, nil
}

// calibrate measures the unlimited stream goodput of cgroup c toward its
// first destination and returns half of it (at most 9gbit, rounded down to
// 100mbit): the "auto" limit standing in for the seed's 9G.
func (r *runner) calibrate(ctx context.Context, t *topology, eps []*endpoint, c *Cgroup) (uint64, string, error) {
	var fl *Flow
	for i := range t.s.Flows {
		if slices.Contains(t.s.Flows[i].From, c.Name) {
			fl = &t.s.Flows[i]
			break
		}
	}
	if fl == nil {
		return 0, "", errors.New("no flow from it")
	}
	probe := Flow{Name: "calibrate", Kind: "stream", Count: 3, From: StringSet{c.Name}, To: fl.To}
	t.lab.SysctlAll("net.ipv4.tcp_ecn", "2")
	cl, err := t.startClient(ctx, &probe, c.Name, findEndpoint(eps, fl.To, c.Name), "cubic", 30*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer cl.stop()
	if line, err := cl.next(ctx, 15*time.Second); err != nil || line != "ready" {
		return 0, "", fmt.Errorf("calibration client: %q %v", line, err)
	}
	workload.SleepCtx(ctx, time.Second)
	rs, err := window(ctx, []*client{cl}, 2*time.Second, nil, nil)
	if err != nil {
		return 0, "", err
	}
	g := rs[0].TotalGoodput
	bps := uint64(math.Floor(g*0.5/1e8)) * 1e8
	bps = min(max(bps, 1e8), 9e9)
	return bps, fmt.Sprintf("egress auto for %s: %v (3 unlimited cubic streams reached %.2f Gbit/s; half of it, at most 9gbit)",
		c.Name, rate.Rate(bps), g/1e9), nil
}

// runOne runs the scenario once under congestion control cc and limiter lim.
func (r *runner) runOne(ctx context.Context, t *topology, eps []*endpoint, cc, lim string, dur, warm time.Duration) (run result.Run) {
	s := t.s
	run = result.Run{Scenario: s.Name, CC: cc, Limiter: lim}
	base, ecn := ccBase(cc)
	for _, name := range ccNames(s, base) {
		if why := r.ccAvailable(name); why != "" {
			run.Skipped = why
			return run
		}
	}
	ecnVal := "2"
	if ecn {
		ecnVal = "1"
	}
	if err := t.lab.SysctlAll("net.ipv4.tcp_ecn", ecnVal); err != nil {
		run.Error = err.Error()
		return run
	}
	routeCC := ""
	if base == "dctcp" {
		routeCC = base
	}
	if err := t.routeCC(routeCC); err != nil {
		run.Error = err.Error()
		return run
	}
	// A web server sends with its routes' congestion control (nginx sets
	// none, and a child namespace may make only the allowed ones its
	// default); wrk and ab take whole seconds.
	for _, w := range t.web {
		if err := t.lab.RouteCC(w.host, base); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	if len(t.web) > 0 {
		d, wu := time.Duration(httpSeconds(dur))*time.Second, time.Duration(0)
		if warm > 0 {
			wu = time.Duration(httpSeconds(warm)) * time.Second
		}
		if d != dur || wu != warm {
			run.Notes = append(run.Notes, fmt.Sprintf("http clients take whole seconds: window %v, warm-up %v", d, wu))
		}
		dur, warm = d, wu
	}
	limr, err := r.limiterFor(lim)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	if left, err := t.settle(ctx); err != nil {
		run.Error = err.Error()
		return run
	} else if left > 0 {
		run.Notes = append(run.Notes, fmt.Sprintf("the last run's sockets still held %d bytes to send after %v", left, settleLimit))
	}
	shapedQ, undo, skip, err := limr.apply(t, eps)
	defer undo()
	if skip != "" || err != nil {
		run.Skipped = skip
		if err != nil {
			run.Error = err.Error()
		}
		return run
	}
	for _, b := range s.Bottlenecks {
		bl := t.lab.Link(b.Link)
		shapedQ = append(shapedQ, &shaped{name: fmt.Sprintf("bottleneck %s->%s", b.Link, b.To), ns: bl.Switch, dev: bl.Ports[b.To], kind: "tbf", rate: b.RateBps})
	}
	ccOf := func(fl *Flow) string {
		if fl.CC != "" {
			b, _ := ccBase(fl.CC)
			return b
		}
		return base
	}
	life := warm + dur + 60*time.Second
	cs, err := t.startClients(ctx, eps, ccOf, life, func(fl *Flow, _ string) bool { return fl.Kind != "http" && len(fl.ActiveD) == 0 })
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer stopAll(cs)
	// The http clients warm up in a run of their own (wrk and ab measure
	// from their start), then measure in another, over the window.
	var warmHTTP, hcs []*httpClient
	defer func() { stopHTTP(warmHTTP); stopHTTP(hcs) }()
	if warm > 0 {
		for _, w := range t.web {
			c, err := t.startHTTPClient(w, httpSeconds(warm))
			if err != nil {
				run.Error = err.Error()
				return run
			}
			warmHTTP = append(warmHTTP, c)
		}
	}
	if err := workload.SleepCtx(ctx, warm); err != nil {
		run.Error = err.Error()
		return run
	}
	for _, c := range warmHTTP {
		if _, err := c.wait(ctx); err != nil {
			run.Error = "warm-up: " + err.Error()
			return run
		}
	}

	// Before the window.
	var hbm0 map[string]jsonout.Direction
	if lim == "hbm" {
		if hbm0, err = hbmCounters(r.hbm); err != nil {
			run.Error = "hbm show: " + err.Error()
			return run
		}
	}
	for _, q := range shapedQ {
		q.before, _ = readQdisc(q.ns, q.dev)
	}
	prog0 := readProgStats(r.o.PinDir)
	cpu0 := netlab.ReadCPU()
	stopSampling := sampleBacklog(shapedQ)
	stopCapture := r.captureRun(t, &run, cc, lim)
	defer stopCapture()
	t0 := time.Now()

	txDevs := senderDevs(t, eps)
	tx0, tx1 := map[devKey][2]uint64{}, map[devKey][2]uint64{} // bytes, packets
	var tx0At, tx1At time.Time
	readTx := func(into map[devKey][2]uint64, at *time.Time) func() {
		return func() {
			for _, ds := range txDevs {
				for _, k := range ds {
					if b, n, err := netlab.TxCounters(k.ns, k.dev); err == nil {
						into[k] = [2]uint64{b, n}
					}
				}
			}
			*at = time.Now()
		}
	}
	// The web servers' hosts' retransmissions (nstat's TcpRetransSegs).
	rtx0, rtx1 := map[string]uint64{}, map[string]uint64{}
	readRetrans := func(into map[string]uint64) {
		for _, w := range t.web {
			if n, err := retransSegs(t.lab.Host(w.host).NS); err == nil {
				into[w.host] = n
			}
		}
	}
	var herr error
	// The timeline's count and the flows with active intervals start with
	// the window.
	var tcount *timelineCount
	var active *activeRun
	var origin time.Time
	defer func() {
		if tcount != nil {
			tcount.stop()
		}
	}()
	begin := func() {
		origin = time.Now()
		if s.Timeline != nil {
			if tcount, herr = t.startTimeline(eps, origin); herr != nil {
				return
			}
		}
		active = t.startActive(ctx, eps, ccOf, origin, dur)
		readTx(tx0, &tx0At)()
		readRetrans(rtx0)
		for _, w := range t.web {
			c, err := t.startHTTPClient(w, httpSeconds(dur))
			if err != nil {
				herr = err
				break
			}
			hcs = append(hcs, c)
		}
	}
	end := func() {
		readTx(tx1, &tx1At)()
		readRetrans(rtx1)
	}
	results, err := window(ctx, cs, dur, begin, end)
	var activeRes map[*Flow]map[string]*workload.Result
	if active != nil {
		var aerr error
		if activeRes, aerr = active.wait(dur.Seconds()); err == nil {
			err = aerr
		}
	}
	if tcount != nil && err == nil && herr == nil {
		bytes, first, dropped, cerr := tcount.stop()
		src := tcount.source()
		tcount = nil
		if cerr != nil {
			err = fmt.Errorf("timeline: %w", cerr)
		} else {
			run.Timeline = buildTimeline(s, dur, bytes, first, origin)
			run.Timeline.Source, run.Timeline.Dropped = src, dropped
		}
	}
	stopCapture()
	t1 := time.Now()
	cpu1 := netlab.ReadCPU()
	prog1 := readProgStats(r.o.PinDir)
	stopSampling()
	// The http clients end on their own a few ms after the window.
	httpRes := map[*Flow]*httpResult{}
	if err == nil {
		err = herr
	}
	for _, c := range hcs {
		if err != nil {
			break
		}
		var hr *httpResult
		if hr, err = c.wait(ctx); err == nil {
			httpRes[c.w.fl] = hr
		}
	}
	if err != nil {
		run.Error = err.Error()
		return run
	}
	wall := t1.Sub(t0).Seconds()
	if len(results) > 0 {
		run.DurationSec = results[0].Duration
	} else {
		run.DurationSec = tx1At.Sub(tx0At).Seconds()
		for _, hr := range httpRes {
			run.DurationSec = hr.Seconds
			break
		}
	}
	run.CPU = cpuBetween(cpu0, cpu1)
	for _, q := range shapedQ {
		after, err := readQdisc(q.ns, q.dev)
		if err != nil {
			run.Notes = append(run.Notes, fmt.Sprintf("%s: %v", q.name, err))
			continue
		}
		run.Links = append(run.Links, result.Link{
			Name: q.name, Qdisc: q.kind, RateBps: q.rate,
			Drops: after.Drops - q.before.Drops, Overlimits: after.Overlimits - q.before.Overlimits,
			BacklogMax: max(q.maxBacklog, after.Backlog),
		})
	}
	var hbm1 map[string]jsonout.Direction
	if lim == "hbm" {
		if hbm1, err = hbmCounters(r.hbm); err != nil {
			run.Error = "hbm show: " + err.Error()
			return run
		}
	}

	// Classes: one per flow, its sources merged.
	bySrc := map[*Flow][]*workload.Result{}
	for i, c := range cs {
		bySrc[c.fl] = append(bySrc[c.fl], results[i])
		for _, w := range results[i].Warnings {
			if len(run.Notes) < 20 {
				run.Notes = append(run.Notes, fmt.Sprintf("%s from %s: %s", c.fl.Name, c.src, w))
			}
		}
	}
	for i := range s.Flows {
		fl := &s.Flows[i]
		for _, src := range fl.From {
			if wr := activeRes[fl][src]; wr != nil {
				bySrc[fl] = append(bySrc[fl], wr)
				for _, w := range wr.Warnings {
					if len(run.Notes) < 20 {
						run.Notes = append(run.Notes, fmt.Sprintf("%s from %s: %s", fl.Name, src, w))
					}
				}
			}
		}
	}
	var groupOrder []string
	for i := range s.Flows {
		fl := &s.Flows[i]
		if fl.Kind == "http" {
			host := s.HostOf(fl.From[0])
			hr := httpRes[fl]
			if hr == nil {
				run.Error = fl.Name + ": no report from its client"
				return run
			}
			a, okA := rtx0[host]
			b, okB := rtx1[host]
			var retrans uint64
			if okA && okB {
				retrans = b - a
			} else {
				run.Notes = append(run.Notes, fmt.Sprintf("%s: retransmissions of %s unreadable", fl.Name, host))
			}
			cl := httpClass(s, fl, hr, retrans)
			if cl.HTTPErrors > 0 && len(run.Notes) < 20 {
				run.Notes = append(run.Notes, fmt.Sprintf("%s: %d failed requests or responses other than 2xx (%s)", fl.Name, cl.HTTPErrors, cl.HTTPClient))
			}
			run.Classes = append(run.Classes, cl)
			if !slices.Contains(groupOrder, cl.Group) {
				groupOrder = append(groupOrder, cl.Group)
			}
			continue
		}
		rs := bySrc[fl]
		cl := result.Class{Name: fl.Name, Group: s.ClassGroup(fl), Kind: fl.Kind, Flows: fl.Count * len(fl.From)}
		switch fl.Kind {
		case "rpc":
			cl.SizeBytes = fl.SizeBytes
		case "udp":
			cl.SizeBytes = fl.udpSize(s.IPv6)
		}
		var rtt float64
		for _, wr := range rs {
			if fl.Kind == "udp" {
				cl.OfferedBps += wr.UDPOffered
				cl.SentBps += wr.UDPSent
				cl.SendErrors += wr.UDPSendErrors
				cl.Datagrams += wr.UDPDatagrams
				if cl.SendError == "" {
					cl.SendError = wr.UDPSendError
				}
			}
			cl.GoodputBps += wr.TotalGoodput
			cl.RPCs += wr.RPC.Count
			cl.Retransmits += wr.Retransmits
			cl.DeliveredCE += wr.DeliveredCE
			rtt += wr.RTT
			cl.RTTMaxUs = max(cl.RTTMaxUs, wr.RTTMax)
		}
		cl.RTTUs = rtt / float64(max(len(rs), 1))
		if fl.Kind == "rpc" {
			l, ok := workload.MergeLatency(rs)
			if !ok && len(rs) == 1 {
				l, ok = rs[0].RPC, true
			}
			if ok {
				cl.Latency = &result.Latency{Count: l.Count, P50: l.P50, P90: l.P90, P99: l.P99, P999: l.P999, Max: l.Max}
				cl.InFlightMaxUs = l.InFlightMax
			}
		}
		run.Classes = append(run.Classes, cl)
		if !slices.Contains(groupOrder, cl.Group) {
			groupOrder = append(groupOrder, cl.Group)
		}
	}
	var wireBps float64
	for _, g := range groupOrder {
		grp := result.Group{Name: g, Dir: "egress"}
		for _, fl := range s.Flows {
			if s.ClassGroup(&fl) == g && fl.To == g {
				grp.Dir = "ingress"
			}
		}
		for _, cl := range run.Classes {
			if cl.Group == g {
				grp.GoodputBps += cl.GoodputBps
			}
		}
		if c := s.Cgroup(g); c != nil && lim != "none" {
			if grp.Dir == "egress" {
				grp.LimitBps = c.EgressBps
				if c.EgressCeilBps > 0 { // a borrower: the most it may take (its guarantee is in the timeline)
					grp.LimitBps = c.EgressCeilBps
				}
			} else {
				grp.LimitBps = c.IngressBps
			}
		}
		if ds, ok := txDevs[g]; ok && grp.Dir == "egress" {
			var sum, pkts uint64
			all := true
			for _, k := range ds {
				a, okA := tx0[k]
				b, okB := tx1[k]
				all = all && okA && okB
				sum += b[0] - a[0]
				pkts += b[1] - a[1]
			}
			if secs := tx1At.Sub(tx0At).Seconds(); all && secs > 0 {
				grp.TxBps = float64(sum) * 8 / secs
				if pkts > 0 {
					grp.TxPacketBytes = float64(sum) / float64(pkts)
				}
				if grp.LimitBps > 0 {
					grp.Share = grp.TxBps / float64(grp.LimitBps)
				}
			} else {
				run.Notes = append(run.Notes, fmt.Sprintf("%s: interface counters unreadable, no share of the limit", g))
			}
		}
		if lim == "hbm" {
			k := t.cgroupPath(g) + "/" + grp.Dir
			if a, ok := hbm1[k]; ok {
				d := a.Sub(hbm0[k])
				grp.WireBps = float64(d.Bytes) * 8 / wall
				grp.Marked, grp.CWR, grp.Dropped = d.Marked, d.CWR, d.Dropped
				wireBps += grp.WireBps
			}
		}
		run.Groups = append(run.Groups, grp)
	}
	if lim == "hbm" {
		run.BPF = bpfCost(prog0, prog1, wall, wireBps)
	}
	return run
}

// senderDevs maps each cgroup with an egress limit to the interfaces its
// flows leave through, if it is the only group sending through them (so
// their tx_bytes are its traffic: a share of its limit can be read there).
func senderDevs(t *topology, eps []*endpoint) map[string][]devKey {
	s := t.s
	out := map[string][]devKey{}
	for _, c := range s.Cgroups {
		if c.EgressBps == 0 {
			continue
		}
		var ports []int
		var devs []devKey
		for _, ep := range eps {
			if ep.src != c.Name {
				continue
			}
			ports = append(ports, ep.port)
			if k := t.dev(c.Host, s.HostOf(ep.to)); !slices.Contains(devs, k) {
				devs = append(devs, k)
			}
		}
		exclusive := len(devs) > 0
		for _, k := range devs {
			exclusive = exclusive && onlySender(t, eps, k, ports)
		}
		if exclusive {
			out[c.Name] = devs
		}
	}
	return out
}

// Captures are headers only and bounded: a run at tens of Gbit/s would
// otherwise write gigabytes.
const (
	captureSnap = 128
	captureMax  = 64 << 20
)

// captureRun starts capturing the run's measurement window on the first
// flow's first sender, its interface toward the receiver, when the eval
// keeps captures, and returns what stops it (safe to call twice). The
// sender's side, because round trips are the sender's: there its data leaves
// and the ACKs come back a round trip later (on the receiver, a "round" is
// its own ACK delay). A capture that fails is noted in the run, not fatal.
func (r *runner) captureRun(t *topology, run *result.Run, cc, lim string) (stop func()) {
	s := t.s
	if r.o.CaptureDir == "" || len(s.Flows) == 0 || len(s.Flows[0].From) == 0 {
		return func() {}
	}
	fl := &s.Flows[0]
	src := s.HostOf(fl.From[0])
	k := t.dev(src, s.HostOf(fl.To))
	if k.dev == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(fmt.Sprintf("%03d-%s-%s-%s.pcap", r.done+1, s.Name, cc, lim)) // r.done+1: the run's number, unique over variants and repetitions
	run.Capture = &result.Capture{File: filepath.Join(filepath.Base(r.o.CaptureDir), name), Host: src, Interface: k.dev}
	if err := mkdirNoFollow(r.o.CaptureDir); err != nil {
		run.Capture.Error = err.Error()
		return func() {}
	}
	c, err := analyze.StartCapture(k.ns, k.dev, filepath.Join(r.o.CaptureDir, name), captureSnap, captureMax)
	if err != nil {
		run.Capture.Error = err.Error()
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			st, err := c.Stop()
			run.Capture.Packets, run.Capture.Dropped, run.Capture.Full = st.Packets, st.Dropped, st.Full
			if err != nil {
				run.Capture.Error = err.Error()
			}
		})
	}
}

// ccNames are the kernel congestion controls a run under base needs.
func ccNames(s *Scenario, base string) []string {
	out := []string{base}
	for _, fl := range s.Flows {
		if fl.CC != "" {
			b, _ := ccBase(fl.CC)
			if !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	return out
}

// sampleBacklog polls the qdiscs' backlog every 200 ms until stopped.
func sampleBacklog(qs []*shaped) (stop func()) {
	if len(qs) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			for _, q := range qs {
				if st, err := readQdisc(q.ns, q.dev); err == nil {
					q.maxBacklog = max(q.maxBacklog, st.Backlog)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// runLine is a run's progress line.
func runLine(run *result.Run) string {
	head := fmt.Sprintf("%s %s %s", run.ScenarioLabel(), run.CC, run.Limiter)
	if run.Variant != "" {
		head = fmt.Sprintf("%s %s %s %s", run.ScenarioLabel(), run.Variant, run.CC, run.Limiter)
	}
	switch {
	case run.Skipped != "":
		return head + ": skipped: " + run.Skipped
	case run.Error != "":
		return head + ": error: " + run.Error
	}
	var parts []string
	for _, g := range run.Groups {
		p := fmt.Sprintf("%s %s", g.Name, fmtBps(g.GoodputBps))
		if g.LimitBps > 0 {
			p += fmt.Sprintf(" (%.2f of %v)", g.GoodputBps/float64(g.LimitBps), rate.Rate(g.LimitBps))
		}
		if g.Share > 0 {
			p += fmt.Sprintf(" wire share %.2f", g.Share)
		} else if g.TxBps > 0 {
			p += " wire " + fmtBps(g.TxBps)
		}
		if g.TxPacketBytes > 0 {
			p += fmt.Sprintf(" in %.1f KB packets", g.TxPacketBytes/1000)
		}
		parts = append(parts, p)
	}
	for _, c := range run.Classes {
		if c.Kind == "rpc" && c.Latency != nil && c.SizeBytes <= 16<<10 {
			parts = append(parts, fmt.Sprintf("%s %s P50 %s P99 %s", c.Group, c.Name, fmtUs(c.Latency.P50), fmtUs(c.Latency.P99)))
		}
		if c.Kind == "http" {
			p := fmt.Sprintf("%s %s %s %.0f req/s", c.Group, c.Name, c.HTTPClient, c.ReqPerSec)
			if c.Latency != nil {
				p += fmt.Sprintf(" P50 %s P99 %s", fmtUs(c.Latency.P50), fmtUs(c.Latency.P99))
			}
			if c.HTTPErrors > 0 {
				p += fmt.Sprintf(" errors %d", c.HTTPErrors)
			}
			parts = append(parts, p)
		}
		if c.Kind == "udp" {
			p := fmt.Sprintf("%s %s offered %s sent %s received %s, %d send errors", c.Group, c.Name, fmtBps(c.OfferedBps), fmtBps(c.SentBps), fmtBps(c.GoodputBps), c.SendErrors)
			if c.SendError != "" {
				p += " (" + c.SendError + ")"
			}
			parts = append(parts, p)
		}
	}
	parts = append(parts, timelineLine(run.Timeline)...)
	var retrans uint64
	for _, c := range run.Classes {
		retrans += c.Retransmits
	}
	parts = append(parts, fmt.Sprintf("retrans %d", retrans))
	return head + ": " + strings.Join(parts, ", ")
}

func fmtBps(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f Mbit/s", bps/1e6)
}

func fmtUs(us float64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%.0fus", us)
	case us < 100000:
		return fmt.Sprintf("%.2fms", us/1000)
	}
	return fmt.Sprintf("%.0fms", us/1000)
}

func meta(o Options) result.Meta {
	m := result.Meta{
		Started: time.Now().UTC(), Command: o.Command, Quick: o.Quick, CPUs: runtime.NumCPU(),
		HBMVersion: o.Version, GoVersion: runtime.Version(), Sysctls: map[string]string{},
	}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	for _, k := range []string{
		"net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
		"net.core.rmem_max", "net.core.wmem_max", "net.core.default_qdisc", "net.ipv4.tcp_no_metrics_save",
		"kernel.bpf_stats_enabled", "net.core.netdev_max_backlog",
	} {
		if b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(k, ".", "/")); err == nil {
			m.Sysctls[k] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	m.Sysctls["eval.netns"] = "tcp_no_metrics_save=1, ipv6 off unless the run's ipv6 is true, tcp_ecn=1 for -ecn and dctcp runs else 2, routes congctl dctcp in dctcp runs"
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control"); err == nil {
		m.CCAvailable = strings.Fields(string(b))
	}
	return m
}

// WriteFiles writes dir/results.json, dir/report.md and dir/report.html
// (dir is created if missing), and each run's timeline chart, if it has
// one, as dir/charts/SCENARIO-CC-LIMITER.svg. Each file is written through a temporary
// one renamed over it: a symbolic link placed in dir is replaced, never
// followed.
func WriteFiles(dir string, res *result.Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileNoFollow(dir, "results.json", func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return err
	}
	if err := writeTimelineCharts(dir, res); err != nil {
		return err
	}
	perRun := captureCharts(dir)
	if err := writeFileNoFollow(dir, "report.md", func(w io.Writer) error { return report.WriteMarkdown(w, res) }); err != nil {
		return err
	}
	return writeFileNoFollow(dir, "report.html", func(w io.Writer) error { return report.WriteHTMLPerRun(w, res, perRun) })
}

// captureCharts draws the per-round-trip charts of a run's capture (hbm
// eval --capture) for the report: those of its connections that carried the
// most data, at most three.
func captureCharts(dir string) report.PerRun {
	return func(run *result.Run) ([]template.HTML, string) {
		c := run.Capture
		if c == nil {
			return nil, ""
		}
		if c.Error != "" {
			return nil, "capture: " + c.Error
		}
		rep, err := analyze.File(filepath.Join(dir, c.File))
		if err != nil {
			return nil, "capture: " + err.Error()
		}
		conns := rep.Connections
		// Request/response connections first, as their own lines: where a
		// request's time went (the path, or the server's application).
		var rpcNote string
		for _, c := range conns {
			if e := c.Exchanges; e != nil && e.Count >= 10 {
				rpcNote += fmt.Sprintf(" Requests from %s: %d, response p50 %s p99 %s; network p50 %s p99 %s; server p50 %s p99 %s.",
					e.Requester, e.Count, report.Duration(e.Response.P50), report.Duration(e.Response.P99), report.Duration(e.Network.P50), report.Duration(e.Network.P99), report.Duration(e.Peer.P50), report.Duration(e.Peer.P99))
			}
		}
		// Every connection's requests pooled, as the server saw them: a
		// web server's clients on a connection each, the handshake's wait
		// included (which a client timing a request from its write, as
		// wrk does, does not see), and their times by when they began.
		var timeline template.HTML
		if r := rep.Requests; r != nil && r.Count >= 10 {
			rpcNote += " " + analyze.RequestsSentence(r, report.Duration)
			timeline = analyze.TimelineChart(r)
		}
		slices.SortStableFunc(conns, func(a, b schema.Connection) int { return cmp.Compare(b.Bytes, a.Bytes) })
		conns = conns[:min(len(conns), 3)]
		note := fmt.Sprintf("From %s (%d packets on %s of %s, headers only", c.File, c.Packets, c.Interface, c.Host)
		if c.Full {
			note += fmt.Sprintf("; the %d MB bound ended it early", captureMax>>20)
		}
		if c.Dropped > 0 {
			note += fmt.Sprintf("; %d packets lost by the capture", c.Dropped)
		}
		note += fmt.Sprintf("): the %d of %d connections that carried the most data.", len(conns), len(rep.Connections)) + rpcNote
		var charts []template.HTML
		if timeline != "" {
			charts = append(charts, timeline)
		}
		for i := range conns {
			if conns[i].Bytes > 0 {
				charts = append(charts, analyze.Charts(&conns[i])...)
			}
		}
		return charts, note
	}
}
