package integration

// hbm daemon end to end, with real parts: the daemon on a config file, real
// TCP between two namespaces through the limited group, a real Prometheus
// (Debian's package) scraping the daemon, SIGKILL and adoption, a config
// change, a group removed and re-created, an invalid config refused.
//
// The daemon and Prometheus run in the testbed's sender namespace (entered
// with nsenter --net only: the daemon keeps the host's /sys, so its cgroup2
// and bpffs mounts), so the scrapes stay on that namespace's loopback.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/netlab/labtest"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

const (
	dmnName        = "dmn"
	dmnMetricsPort = 19641
	dmnPromPort    = 19091
)

// nsHTTP is an HTTP client whose connections are made inside network
// namespace ns (a socket stays in the namespace it was created in).
func nsHTTP(t *testing.T, ns string) *http.Client {
	t.Helper()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // the thread is left to die if it cannot go back
			orig, err := netns.Get()
			if err != nil {
				ch <- res{nil, err}
				return
			}
			defer orig.Close()
			target, err := netns.GetFromName(ns)
			if err != nil {
				ch <- res{nil, err}
				return
			}
			defer target.Close()
			if err := netns.Set(target); err != nil {
				ch <- res{nil, err}
				return
			}
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

type dmnLab struct {
	t       *testing.T
	bin     string
	tb      *netlab.Pair
	hbm     netlab.HBM
	pinDir  string
	top     string // the test's cgroup tree (a slice, so units are found in it)
	mnt     string
	cfgPath string
	http    *http.Client
}

func newDmnLab(t *testing.T) *dmnLab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: integration test (root, namespaces, BPF, real traffic, Prometheus)")
	}
	testutil.RequireRoot(t)
	for _, c := range []string{"ip", "tc", "nsenter", "prometheus", "promtool"} {
		testutil.RequireCommand(t, c)
	}
	mnt, err := cgroup.Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	bin := testutil.HBMBinary(t)
	l := &dmnLab{t: t, bin: bin, pinDir: "/sys/fs/bpf/hbm-test-" + dmnName, top: "/hbm-test-" + dmnName + ".slice", mnt: mnt}
	l.hbm = netlab.HBM{Bin: bin, PinDir: l.pinDir}
	tb := labtest.Pair(t)
	l.tb = tb
	l.reset()
	t.Cleanup(l.reset) // runs before the testbed's close: processes first
	if _, err := tb.StartServer(bin, netlab.ServerPort); err != nil {
		t.Fatal(err)
	}
	l.cfgPath = filepath.Join(t.TempDir(), "hbm.yaml")
	l.http = nsHTTP(t, tb.SenderNS)
	return l
}

func (l *dmnLab) reset() {
	if err := os.RemoveAll(l.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.t.Errorf("remove %s: %v", l.pinDir, err)
	}
	if err := cgroup.RemoveWait(l.top, 50, 100*time.Millisecond); err != nil {
		l.t.Errorf("remove cgroup %s: %v", l.top, err)
	}
}

func (l *dmnLab) mk(rel string) (string, string) {
	l.t.Helper()
	g, err := cgroup.Create(filepath.Join(l.top, rel))
	if err != nil {
		l.t.Fatal(err)
	}
	return g.Rel, g.Dir
}

// writeConfig replaces the config file atomically (as an editor would).
func (l *dmnLab) writeConfig(body string) {
	l.t.Helper()
	tmp := l.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(body, "TOP", l.top)), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, l.cfgPath); err != nil {
		l.t.Fatal(err)
	}
}

// startDaemon starts hbm daemon in the sender namespace and waits for its
// first pass.
func (l *dmnLab) startDaemon() *testutil.Proc {
	l.t.Helper()
	p := testutil.StartProc(l.t, []string{"HBM_PIN_DIR=" + l.pinDir}, "nsenter", "--net=/run/netns/"+l.tb.SenderNS, "--",
		l.bin, "daemon", "--config", l.cfgPath, "--metrics", fmt.Sprintf("127.0.0.1:%d", dmnMetricsPort))
	if !testutil.WaitFor(20*time.Second, func() bool { return strings.Contains(p.Out.String(), "first pass") }) {
		p.Kill(syscall.SIGKILL)
		l.t.Fatalf("daemon: no first pass within 20s:\n%s", p.Out.String())
	}
	return p
}

// rates returns "group dir" -> rate_bps from hbm show --json.
func (l *dmnLab) rates() map[string]uint64 {
	l.t.Helper()
	out, err := l.hbm.Rates()
	if err != nil {
		l.t.Fatalf("hbm show: %v", err)
	}
	return out
}

func (l *dmnLab) expectRates(what string, want map[string]uint64, within time.Duration) {
	l.t.Helper()
	var got map[string]uint64
	ok := testutil.WaitFor(within, func() bool {
		got = l.rates()
		if len(got) != len(want) {
			return false
		}
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	})
	if !ok {
		l.t.Fatalf("%s: limits %v, want %v (within %v)", what, got, want, within)
	}
}

func (l *dmnLab) get(path string) (string, error) {
	resp, err := l.http.Get("http://127.0.0.1:" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

func (l *dmnLab) scrape() string {
	l.t.Helper()
	out, err := l.get(fmt.Sprintf("%d/metrics", dmnMetricsPort))
	if err != nil {
		l.t.Fatalf("scrape: %v", err)
	}
	return out
}

// promQuery runs an instant query against the Prometheus server and returns
// the value of its single series (ok false if it has none).
func (l *dmnLab) promQuery(q string) (float64, bool) {
	out, err := l.get(fmt.Sprintf("%d/api/v1/query?query=%s", dmnPromPort, url.QueryEscape(q)))
	if err != nil {
		return 0, false
	}
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if json.Unmarshal([]byte(out), &r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

const dmnConfig = `limits:
  - cgroup: TOP/w
    egress: 200mbit
  - unit: hbmtest-web.service
    egress: 300mbit
    ingress: 1gbit
  - glob: TOP/jobs/job-*
    egress: 100mbit
  - cgroup: TOP/hand
    egress: 50mbit
`

// TestDaemon walks the daemon through its life; each step depends on the
// one before.
func TestDaemon(t *testing.T) {
	l := newDmnLab(t)
	w, wDir := l.mk("w")
	web, _ := l.mk("hbmtest-web.service")
	job1, _ := l.mk("jobs/job-1")
	hand, _ := l.mk("hand")
	l.mk("jobs/other")
	if err := l.hbm.Set(hand, "1gbit"); err != nil { // by hand: the daemon must never touch it
		t.Fatal(err)
	}
	l.writeConfig(dmnConfig)
	d := l.startDaemon()
	want := map[string]uint64{
		w + " egress": 200e6, web + " egress": 300e6, web + " ingress": 1e9,
		job1 + " egress": 100e6, hand + " egress": 1e9,
	}
	l.expectRates("first pass", want, 5*time.Second)
	if out := d.Out.String(); !strings.Contains(out, "conflict: "+hand+" egress") {
		t.Errorf("daemon did not report the hand-set limit on %s as a conflict:\n%s", hand, out)
	}

	// Metrics: promtool passes; the unit label where a unit declared it.
	m := l.scrape()
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(m)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v: %s", err, out)
	}
	for _, s := range []string{
		fmt.Sprintf(`hbm_group_limit_bytes_per_second{direction="egress",group=%q,namespace="",pod="",unit=""} 2.5e+07`, w),
		fmt.Sprintf(`hbm_group_bytes_total{direction="ingress",group=%q,namespace="",pod="",unit="hbmtest-web.service"}`, web),
		"hbm_daemon_owned_limits 4",
		"hbm_daemon_conflicting_limits 1",
	} {
		if !strings.Contains(m, s) {
			t.Errorf("metrics lack %s", s)
		}
	}

	// A real Prometheus scraping the daemon every second.
	promDir := t.TempDir()
	promCfg := filepath.Join(promDir, "prometheus.yml")
	os.WriteFile(promCfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: hbm
    static_configs:
      - targets: ['127.0.0.1:%d']
`, dmnMetricsPort)), 0o644)
	prom := testutil.StartProc(t, nil, "nsenter", "--net=/run/netns/"+l.tb.SenderNS, "--", "prometheus",
		"--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(promDir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", dmnPromPort))
	q := fmt.Sprintf(`hbm_group_bytes_total{group=%q,direction="egress"}`, w)
	var before float64
	if !testutil.WaitFor(30*time.Second, func() (ok bool) { before, ok = l.promQuery(q); return ok }) {
		t.Fatalf("prometheus has no %s after 30s:\n%s", q, testutil.LastLines(prom.Out.String(), 20))
	}

	// The limit holds on real traffic, and Prometheus sees the bytes rise.
	cfg := workload.Config{Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: 3, Duration: 120 * time.Second, CC: "cubic"}
	c, err := l.tb.StartScriptClient(l.bin, wDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	window := func(name, rate string) {
		t.Helper()
		r, err := c.Window(context.Background(), name, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: goodput %.1f Mbit/s, retrans %d", name, r.Goodput/1e6, r.Retransmits)
		within(t, r, rate, egLow, egHigh)
	}
	time.Sleep(time.Second)
	window("daemon", "200mbit")

	// hbm top, under the same traffic: the group near 100% of its limit,
	// first in the list.
	topOut, err := l.hbm.Run("top", "-n", "1", "--interval", "1s")
	if err != nil {
		t.Fatalf("hbm top: %v", err)
	}
	t.Logf("hbm top:\n%s", topOut)
	var first []string
	for _, line := range strings.Split(topOut, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(f[0], "/") {
			first = f
			break
		}
	}
	if len(first) < 5 || first[0] != w || first[1] != "egress" {
		t.Errorf("hbm top: first row %q, want %s egress", first, w)
	} else if use, err := strconv.ParseFloat(strings.TrimSuffix(first[4], "%"), 64); err != nil || use < 85 || use > 105 {
		t.Errorf("hbm top: %s at %s of its limit, want 85-105%%", w, first[4])
	}
	var after float64
	if !testutil.WaitFor(10*time.Second, func() bool { v, ok := l.promQuery(q); after = v; return ok && v > before+20e6 }) {
		t.Errorf("prometheus: %s went from %.0f to %.0f, want a rise of > 20 MB", q, before, after)
	} else {
		t.Logf("prometheus: %s rose from %.0f to %.0f", q, before, after)
	}

	// SIGKILL: the limit stays in force; a new daemon adopts it without a
	// gap (no change made, counters carried on: the limit was never
	// re-created) and no burst.
	if err := d.Kill(syscall.SIGKILL); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("daemon after SIGKILL: %v", err)
	}
	window("daemon killed", "200mbit")
	stBefore, _ := l.hbm.Egress(w)
	d = l.startDaemon()
	stAfter, _ := l.hbm.Egress(w)
	if stBefore == nil || stAfter == nil || stAfter.Bytes < stBefore.Bytes || stAfter.RateBps != 200e6 {
		t.Errorf("adopt: counters %+v then %+v, want the same limit carrying on", stBefore, stAfter)
	}
	if out := d.Out.String(); !strings.Contains(out, "0 applied or changed, 0 removed, 4 kept") {
		t.Errorf("restarted daemon did not adopt the 4 limits as they were:\n%s", out)
	}
	window("daemon restarted", "200mbit")
	l.expectRates("after restart", want, time.Second)

	// A config change: w's rate, the unit dropped. The hand limit stays.
	l.writeConfig(strings.Replace(strings.Replace(dmnConfig, "200mbit", "400mbit", 1),
		"  - unit: hbmtest-web.service\n    egress: 300mbit\n    ingress: 1gbit\n", "", 1))
	delete(want, web+" egress")
	delete(want, web+" ingress")
	want[w+" egress"] = 400e6
	l.expectRates("config changed", want, 5*time.Second)
	time.Sleep(500 * time.Millisecond)
	window("400mbit", "400mbit")

	// A group removed and re-created gets its limit back (from the
	// notification), and the removed one leaves nothing behind.
	if err := cgroup.Remove(job1); err != nil {
		t.Fatal(err)
	}
	delete(want, job1+" egress")
	l.expectRates("job-1 removed", want, 2*time.Second)
	start := time.Now()
	l.mk("jobs/job-1")
	want[job1+" egress"] = 100e6
	l.expectRates("job-1 re-created", want, time.Second)
	t.Logf("re-created group limited after %v", time.Since(start).Round(time.Millisecond))
	job2, _ := l.mk("jobs/job-2")
	want[job2+" egress"] = 100e6
	l.expectRates("job-2 created", want, time.Second)

	// An invalid config is refused with file:line and the state kept, on
	// a file change and on SIGHUP.
	l.writeConfig(dmnConfig + "  - cgroup: TOP/x\n    egress: fast\n")
	if !testutil.WaitFor(5*time.Second, func() bool { return strings.Contains(d.Out.String(), l.cfgPath+":12: egress") }) {
		t.Errorf("invalid config not refused with file:line:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	syscall.Kill(d.Cmd.Process.Pid, syscall.SIGHUP)
	if !testutil.WaitFor(5*time.Second, func() bool { return strings.Count(d.Out.String(), "refused, keeping") >= 2 }) {
		t.Errorf("SIGHUP with an invalid config not refused:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	l.expectRates("invalid config", want, 0)
	if m := l.scrape(); !strings.Contains(m, "hbm_daemon_config_last_reload_successful 0") {
		t.Errorf("metrics do not say the reload failed")
	}
	window("invalid config", "400mbit")

	// Stopped (SIGTERM), the daemon exits 0 and its limits stay; a daemon
	// whose file declares nothing removes its own, never the hand-set one.
	if err := d.Kill(syscall.SIGTERM); err != nil {
		t.Errorf("daemon after SIGTERM: %v\n%s", err, testutil.LastLines(d.Out.String(), 10))
	}
	l.expectRates("daemon stopped", want, 0)
	l.writeConfig("limits: []\n")
	d = l.startDaemon()
	l.expectRates("nothing declared", map[string]uint64{hand + " egress": 1e9}, 5*time.Second)
	d.Kill(syscall.SIGTERM)
	prom.Kill(syscall.SIGTERM)
}

// TestDaemonKilledMidPass: a daemon SIGKILLed after each step of its first
// pass (through the data plane's test hook HBM_TEST_STOP_AFTER) leaves a
// state the next daemon finishes: every declared limit in force and owned
// (a config that declares nothing then removes them all, and only them).
func TestDaemonKilledMidPass(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: integration test (root, BPF, cgroups)")
	}
	testutil.RequireRoot(t)
	mnt, err := cgroup.Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &dmnLab{t: t, bin: testutil.HBMBinary(t), pinDir: "/sys/fs/bpf/hbm-test-dmnkill", top: "/hbm-test-dmnkill", mnt: mnt}
	l.hbm = netlab.HBM{Bin: l.bin, PinDir: l.pinDir}
	l.cfgPath = filepath.Join(t.TempDir(), "hbm.yaml")
	l.reset()
	t.Cleanup(l.reset)
	a, _ := l.mk("a")
	b, _ := l.mk("a/b")
	c, _ := l.mk("c")
	hand, _ := l.mk("hand")
	l.writeConfig("limits:\n  - cgroup: TOP/a\n    egress: 200mbit\n    ingress: 300mbit\n  - cgroup: TOP/a/b\n    egress: 100mbit\n  - cgroup: TOP/c\n    egress: 1gbit\n")
	want := map[string]uint64{a + " egress": 200e6, a + " ingress": 300e6, b + " egress": 100e6, c + " egress": 1e9, hand + " egress": 50e6}
	run := func(env ...string) *testutil.Proc {
		return testutil.StartProc(t, append(env, "HBM_PIN_DIR="+l.pinDir), l.bin, "daemon", "--config", l.cfgPath, "--metrics", "")
	}
	killedAt := 0
	for n := 1; n <= 40; n++ {
		os.RemoveAll(l.pinDir)
		if err := l.hbm.Set(hand, "50mbit"); err != nil {
			t.Fatal(err)
		}
		p := run(fmt.Sprintf("HBM_TEST_STOP_AFTER=%d", n))
		if !testutil.WaitFor(20*time.Second, func() bool {
			select {
			case <-p.Done():
				return true
			default:
				return strings.Contains(p.Out.String(), "first pass")
			}
		}) {
			t.Fatalf("step %d: daemon neither killed nor done within 20s", n)
		}
		if strings.Contains(p.Out.String(), "first pass") {
			p.Kill(syscall.SIGTERM)
			break // the pass has fewer steps than n: all covered
		}
		killedAt = n
		p = run()
		if !testutil.WaitFor(20*time.Second, func() bool { return strings.Contains(p.Out.String(), "first pass") }) {
			t.Fatalf("step %d: restarted daemon made no first pass:\n%s", n, p.Out.String())
		}
		l.expectRates(fmt.Sprintf("killed after step %d, restarted", n), want, 5*time.Second)
		l.writeConfig("limits: []\n")
		l.expectRates(fmt.Sprintf("killed after step %d, nothing declared", n), map[string]uint64{hand + " egress": 50e6}, 5*time.Second)
		if err := p.Kill(syscall.SIGTERM); err != nil {
			t.Errorf("step %d: daemon after SIGTERM: %v", n, err)
		}
		l.writeConfig("limits:\n  - cgroup: TOP/a\n    egress: 200mbit\n    ingress: 300mbit\n  - cgroup: TOP/a/b\n    egress: 100mbit\n  - cgroup: TOP/c\n    egress: 1gbit\n")
	}
	if killedAt < 5 {
		t.Errorf("the first pass was killed after at most %d steps: the hook did not work", killedAt)
	}
	t.Logf("daemon killed after each of the %d steps of its first pass, repaired each time", killedAt)
}
