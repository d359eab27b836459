package integration

// hbm daemon's guards, end to end with the binary: a scrape never holds a
// writer back; a private bpffs and a second daemon are refused; a limit set
// by hand on a group the daemon limited is the operator's.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/bpffs"
	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// newGuardLab is a dmnLab without a testbed: the daemon in the host's
// network namespace, metrics on 127.0.0.1.
func newGuardLab(t *testing.T, name string) *dmnLab {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: integration test (root, BPF, cgroups)")
	}
	testutil.RequireRoot(t)
	mnt, err := cgroup.Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	l := &dmnLab{t: t, bin: testutil.HBMBinary(t), pinDir: "/sys/fs/bpf/hbm-test-" + name, top: "/hbm-test-" + name, mnt: mnt}
	l.hbm = netlab.HBM{Bin: l.bin, PinDir: l.pinDir}
	l.cfgPath = filepath.Join(t.TempDir(), "hbm.yaml")
	l.reset()
	t.Cleanup(l.reset)
	return l
}

func freeLocalPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (l *dmnLab) startHostDaemon(metrics string, within time.Duration) *testutil.Proc {
	l.t.Helper()
	p := testutil.StartProc(l.t, []string{"HBM_PIN_DIR=" + l.pinDir}, l.bin, "daemon", "--config", l.cfgPath, "--metrics", metrics)
	if !testutil.WaitFor(within, func() bool { return strings.Contains(p.Out.String(), "first pass") || p.Exited() }) || p.Exited() {
		p.Kill(syscall.SIGKILL)
		l.t.Fatalf("daemon: no first pass within %v:\n%s", within, testutil.LastLines(p.Out.String(), 20))
	}
	return p
}

func pctl(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// TestDaemonScrapeDoesNotHoldBackSet: with 10,000 limits, Prometheus
// scrapes in a loop must not hold back hbm set (a writer, which takes the
// pin directory's exclusive lock).
func TestDaemonScrapeDoesNotHoldBackSet(t *testing.T) {
	l := newGuardLab(t, "dmnscrape")
	const n = 10000
	if _, err := cgroup.Create(l.top + "/g"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		if err := os.Mkdir(filepath.Join(l.mnt, l.top, "g", fmt.Sprintf("c%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probe, _ := l.mk("probe")
	t.Logf("%d groups made in %v", n, time.Since(start).Round(time.Millisecond))
	l.writeConfig(fmt.Sprintf("limits:\n  - glob: TOP/g/*\n    egress: 100mbit\n    max_groups: %d\n", n))
	port := freeLocalPort(t)
	start = time.Now()
	d := l.startHostDaemon(fmt.Sprintf("127.0.0.1:%d", port), 5*time.Minute)
	defer d.Kill(syscall.SIGTERM)
	t.Logf("daemon's first pass with %d limits: %v", n, time.Since(start).Round(time.Millisecond))

	set := func() time.Duration {
		s := time.Now()
		if err := l.hbm.Set(probe, "10mbit"); err != nil {
			t.Fatalf("hbm set: %v", err)
		}
		return time.Since(s)
	}
	const rounds = 8
	var quiet, busy []time.Duration
	set() // the first attaches the probe's programs: not what is measured
	for range rounds {
		quiet = append(quiet, set())
	}
	client := &http.Client{Timeout: 60 * time.Second}
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		scrapes atomic.Int64
		scrapeT atomic.Int64
	)
	for range 2 { // two scrapers back to back: there is always one running
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000 && !stop.Load(); i++ {
				s := time.Now()
				resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				scrapes.Add(1)
				scrapeT.Add(int64(time.Since(s)))
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	// The pin directory's exclusive lock, tried every 5 ms while the
	// scrapes run: the longest it was unavailable is how long a scrape
	// held writers back (independent of how busy the CPUs are).
	var (
		heldMax time.Duration
		probes  int
	)
	func() {
		f, err := os.Open(l.pinDir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var since time.Time
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			probes++
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = time.Now()
			}
			heldMax = max(heldMax, time.Since(since))
		}
	}()
	for range rounds {
		busy = append(busy, set())
	}
	stop.Store(true)
	wg.Wait()
	sc := max(scrapes.Load(), 1)
	t.Logf("hbm set with %d limits: quiet P50 %v max %v; scraping (%d scrapes, mean %v): P50 %v max %v",
		n, pctl(quiet, 50).Round(time.Millisecond), pctl(quiet, 100).Round(time.Millisecond),
		scrapes.Load(), (time.Duration(scrapeT.Load()) / time.Duration(sc)).Round(time.Millisecond),
		pctl(busy, 50).Round(time.Millisecond), pctl(busy, 100).Round(time.Millisecond))
	t.Logf("while scraping, the pin directory's lock was unavailable for at most %v (%d tries, every 5 ms for 5 s)", heldMax.Round(time.Millisecond), probes)
	if scrapes.Load() < 2 {
		t.Fatalf("%d scrapes: the loop did not run", scrapes.Load())
	}
	// Scrapes take no lock (nothing else writes meanwhile). Under the
	// shared lock, scrapes back to back held writers back for seconds.
	if heldMax > 20*time.Millisecond {
		t.Errorf("while scraping, writers were held back for %v (the lock unavailable), want at most 20ms", heldMax)
	}
	// The sets themselves: generous (the scrapes and the machine's other
	// work take CPU), logged above.
	if bound := pctl(quiet, 50)*4 + 5*time.Second; pctl(busy, 50) > bound {
		t.Errorf("hbm set while scraping: median %v, above %v", pctl(busy, 50), bound)
	}
}

// TestDaemonRefusesPrivateBPFFS: where the pin directory's parent is not a
// bpffs (a pod whose /sys/fs/bpf is not the host's), the daemon refuses
// instead of mounting a private one whose pins would die with it.
func TestDaemonRefusesPrivateBPFFS(t *testing.T) {
	l := newGuardLab(t, "dmnbpffs")
	testutil.RequireCommand(t, "unshare")
	l.writeConfig("limits: []\n")
	// A mount namespace of its own whose /sys/fs/bpf is a tmpfs (as a
	// container sees the host's sysfs directory when the host has no bpffs).
	p := testutil.StartProc(t, []string{"HBM_PIN_DIR=" + l.pinDir}, "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount -t tmpfs none `+bpffs.Root+` && exec "$0" "$@"`, l.bin, "daemon", "--config", l.cfgPath, "--metrics", "")
	if !testutil.WaitFor(20*time.Second, func() bool { return p.Exited() || strings.Contains(p.Out.String(), "first pass") }) {
		p.Kill(syscall.SIGKILL)
		t.Fatal("daemon neither refused nor ran within 20s")
	}
	if !p.Exited() {
		p.Kill(syscall.SIGKILL)
		t.Fatalf("daemon ran on a bpffs of its own:\n%s", p.Out.String())
	}
	if out := p.Out.String(); !strings.Contains(out, "is not on a bpffs, and the daemon does not mount one") {
		t.Errorf("daemon's error:\n%s", out)
	}
}

// TestDaemonSecondRefused: a second daemon on the same pin directory exits
// with a clear error, and the first keeps its limits.
func TestDaemonSecondRefused(t *testing.T) {
	l := newGuardLab(t, "dmntwo")
	a, _ := l.mk("a")
	l.writeConfig("limits:\n  - cgroup: TOP/a\n    egress: 100mbit\n")
	first := l.startHostDaemon("", 20*time.Second)
	defer first.Kill(syscall.SIGTERM)
	// The second's file declares nothing: had it run, it would have removed
	// the first's limit.
	other := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(other, []byte("limits: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := testutil.StartProc(t, []string{"HBM_PIN_DIR=" + l.pinDir}, l.bin, "daemon", "--config", other, "--metrics", "")
	if !testutil.WaitFor(20*time.Second, second.Exited) {
		second.Kill(syscall.SIGKILL)
		t.Fatalf("second daemon still runs:\n%s", second.Out.String())
	}
	if out := second.Out.String(); !strings.Contains(out, "another hbm daemon runs on pin directory "+l.pinDir) {
		t.Errorf("second daemon's error:\n%s", out)
	}
	l.expectRates("first daemon's limit", map[string]uint64{a + " egress": 100e6}, 0)
	if first.Exited() {
		t.Errorf("first daemon exited:\n%s", first.Out.String())
	}
}

// TestDaemonHandSetOnOwnedGroup: a limit the daemon applied, then set by
// hand with hbm set, is the operator's: the daemon does not revert it,
// and does not remove it when its file stops declaring the group.
func TestDaemonHandSetOnOwnedGroup(t *testing.T) {
	l := newGuardLab(t, "dmnhand")
	a, _ := l.mk("a")
	b, _ := l.mk("b")
	l.writeConfig("limits:\n  - cgroup: TOP/a\n    egress: 100mbit\n  - cgroup: TOP/b\n    egress: 100mbit\n")
	d := l.startHostDaemon("", 20*time.Second)
	defer d.Kill(syscall.SIGTERM)
	l.expectRates("declared", map[string]uint64{a + " egress": 100e6, b + " egress": 100e6}, 5*time.Second)
	if err := l.hbm.Set(a, "50mbit"); err != nil {
		t.Fatal(err)
	}
	// A pass (cgroups changed) must leave the hand-set limit.
	l.mk("poke")
	time.Sleep(500 * time.Millisecond)
	l.expectRates("set by hand", map[string]uint64{a + " egress": 50e6, b + " egress": 100e6}, 0)
	if !testutil.WaitFor(5*time.Second, func() bool { return strings.Contains(d.Out.String(), "taken over by hand") }) {
		t.Errorf("daemon did not log the take-over:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	// No longer declared: the daemon removes its own (b), not the operator's (a).
	l.writeConfig("limits: []\n")
	l.expectRates("undeclared", map[string]uint64{a + " egress": 50e6}, 5*time.Second)
}

// TestDaemonGlobCap: a glob over a subtree others can write limits at most
// max_groups groups, the oldest first; the rest are logged and counted, and
// a limit elsewhere still applies.
func TestDaemonGlobCap(t *testing.T) {
	l := newGuardLab(t, "dmnglob")
	var users []string
	for i := range 3 {
		rel, _ := l.mk(fmt.Sprintf("users/u%d", i))
		users = append(users, rel)
	}
	other, _ := l.mk("other")
	l.writeConfig("limits:\n  - glob: TOP/users/*\n    egress: 10mbit\n    max_groups: 3\n  - cgroup: TOP/other\n    egress: 20mbit\n")
	port := freeLocalPort(t)
	d := l.startHostDaemon(fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second)
	defer d.Kill(syscall.SIGTERM)
	want := map[string]uint64{other + " egress": 20e6}
	for _, u := range users {
		want[u+" egress"] = 10e6
	}
	l.expectRates("within the cap", want, 5*time.Second)
	// A user makes 20 more directories: none is limited, the first three
	// keep theirs, and the other limit is untouched.
	for i := 3; i < 23; i++ {
		l.mk(fmt.Sprintf("users/u%d", i))
	}
	if !testutil.WaitFor(10*time.Second, func() bool {
		return strings.Contains(d.Out.String(), "matches 23 groups, more than its max_groups 3: the 20 created last are not limited")
	}) {
		t.Errorf("no warning about the cap:\n%s", testutil.LastLines(d.Out.String(), 10))
	}
	l.expectRates("over the cap", want, 0)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "hbm_daemon_glob_groups_over_cap 20") {
		t.Errorf("metrics lack hbm_daemon_glob_groups_over_cap 20")
	}
}
