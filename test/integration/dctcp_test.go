package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/jsonout"
	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/testutil"
	"github.com/hbm-dev/hbm/internal/workload"
)

// ccExec runs the hbm binary bin and returns stdout, stderr and the exit
// code. It does not touch testing.T: tests call it from namespace threads.
func ccExec(bin string, attr *syscall.SysProcAttr, args ...string) (string, string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = attr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String(), stderr.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return "", "", -1, fmt.Errorf("hbm %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), 0, nil
}

// ccRun runs hbm as the test's user or attr's.
func ccRun(t *testing.T, attr *syscall.SysProcAttr, args ...string) (string, string, int) {
	t.Helper()
	out, errOut, code, err := ccExec(testutil.HBMBinary(t), attr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out, errOut, code
}

// ccOK runs hbm and fails the test unless it exits 0.
func ccOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := ccRun(t, nil, args...)
	if code != 0 {
		t.Fatalf("hbm %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func ccAvailable() ([]string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return strings.Fields(string(b)), err
}

func ccMustAvailable(t *testing.T) []string {
	t.Helper()
	a, err := ccAvailable()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type ccEntry struct {
	Name    string `json:"name"`
	Source  string `json:"source"`
	Pin     string `json:"pin"`
	Problem string `json:"problem"`
}

func ccList(t *testing.T) map[string]ccEntry {
	t.Helper()
	var l struct {
		Entries []ccEntry `json:"entries"`
	}
	out := ccOK(t, "cc", "list", "--json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("cc list --json: %v\n%s", err, out)
	}
	m := map[string]ccEntry{}
	for _, e := range l.Entries {
		m[e.Name] = e
	}
	return m
}

// ccIsolate needs the name dctcp free for HBM and puts back afterwards what
// HBM had installed before the test (also on failure).
func ccIsolate(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	e, ok := ccList(t)["dctcp"]
	if ok && e.Source != "hbm" {
		testutil.Missing(t, "a dctcp name free for HBM", fmt.Errorf("%s dctcp registered", e.Source))
	}
	was := ok && e.Problem == ""
	t.Cleanup(func() {
		if _, errOut, code := ccRun(t, nil, "cc", "remove", "dctcp"); code != 0 {
			t.Errorf("cleanup: cc remove: exit %d: %s", code, errOut)
		}
		if was {
			if _, errOut, code := ccRun(t, nil, "cc", "install", "dctcp"); code != 0 {
				t.Errorf("cleanup: reinstall: exit %d: %s", code, errOut)
			}
		}
	})
	ccOK(t, "cc", "remove", "dctcp")
}

// The install / list / remove round trip through the CLI; every hbm run is
// a process of its own, so the registration outliving one is checked too.
func TestCCRoundTrip(t *testing.T) {
	ccIsolate(t)
	if slices.Contains(ccMustAvailable(t), "dctcp") {
		t.Fatal("dctcp available after remove")
	}
	if out := ccOK(t, "cc", "list"); !strings.Contains(out, "installable with hbm cc install: dctcp") {
		t.Errorf("cc list before install:\n%s", out)
	}

	out := ccOK(t, "cc", "install", "dctcp")
	if !strings.HasPrefix(out, "dctcp: installed:") {
		t.Errorf("cc install: %s", out)
	}
	if !slices.Contains(ccMustAvailable(t), "dctcp") {
		t.Fatal("dctcp not available after hbm exited: the pin does not keep it")
	}
	if e := ccList(t)["dctcp"]; e.Source != "hbm" || e.Pin == "" || e.Problem != "" {
		t.Errorf("cc list entry after install: %+v", e)
	}

	if out := ccOK(t, "cc", "install", "dctcp"); !strings.HasPrefix(out, "dctcp: already installed:") {
		t.Errorf("second cc install: %s", out)
	}

	if out := ccOK(t, "cc", "remove", "dctcp"); !strings.Contains(out, "unregistered") {
		t.Errorf("cc remove: %s", out)
	}
	if slices.Contains(ccMustAvailable(t), "dctcp") {
		t.Fatal("dctcp available after remove")
	}
	if _, ok := ccList(t)["dctcp"]; ok {
		t.Error("dctcp listed after remove")
	}
	if out := ccOK(t, "cc", "remove", "dctcp"); !strings.Contains(out, "not installed") {
		t.Errorf("removing twice: %s", out)
	}
}

func TestCCUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"cc", "install"},
		{"cc", "install", "cubic"},
		{"cc", "install", "dctcp", "dctcp"},
		{"cc", "remove"},
		{"cc", "list", "extra"},
		{"cc", "bogus"},
	} {
		_, errOut, code := ccRun(t, nil, args...)
		if code != 2 {
			t.Errorf("hbm %s: exit %d, want 2 (usage): %s", strings.Join(args, " "), code, errOut)
		}
	}
}

// Without root: a clear error, no partial state; list still shows the
// kernel's view.
func TestCCNotRoot(t *testing.T) {
	testutil.RequireRoot(t) // to switch to an unprivileged user
	bin := testutil.HBMBinary(t)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := unix.Faccessat(unix.AT_FDCWD, bin, unix.X_OK, unix.AT_EACCESS); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"cc", "install", "dctcp"}, {"cc", "remove", "dctcp"}, {"cc", "show"}} {
		out, errOut, code := ccRun(t, nobody, args...)
		if code == 126 || strings.Contains(errOut, "permission denied") && !strings.Contains(errOut, "hbm:") {
			t.Skipf("nobody cannot execute %s: %s", bin, errOut)
		}
		if code != 1 || !strings.Contains(errOut, "needs root") {
			t.Errorf("hbm %s as nobody: exit %d, want 1 with \"needs root\": %s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	out, errOut, code := ccRun(t, nobody, "cc", "list")
	if code != 0 || !strings.Contains(out, "reno") || !strings.Contains(out, "needs root") {
		t.Errorf("hbm cc list as nobody: exit %d: %s%s", code, out, errOut)
	}
}

// inNetns runs f on a thread of its own in a new network namespace with
// loopback up; processes it starts inherit the namespace.
func inNetns(t *testing.T, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with f
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func setCC(name string) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		return serr
	}
}

func getCC(c net.Conn) string {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err.Error()
	}
	var name string
	var gerr error
	rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if gerr != nil {
		return gerr.Error()
	}
	return name
}

func exchange(c, s net.Conn, n, rounds int) error {
	buf := make([]byte, n)
	for i := 0; i < rounds; i++ {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		s.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			return err
		}
	}
	return nil
}

// Removing dctcp while sockets use it succeeds; the sockets keep running
// the removed dctcp and keep working; new sockets cannot select it.
func TestCCRemoveWhileInUse(t *testing.T) {
	ccIsolate(t)
	ccOK(t, "cc", "install", "dctcp")
	bin := testutil.HBMBinary(t)
	inNetns(t, func() error {
		lc := net.ListenConfig{Control: setCC("dctcp")}
		ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		d := net.Dialer{Control: setCC("dctcp")}
		c, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		defer s.Close()
		if err := exchange(c, s, 64<<10, 10); err != nil {
			return err
		}

		// hbm started from this thread runs in this namespace.
		out, errOut, code, err := ccExec(bin, nil, "cc", "show", "--json")
		if err != nil {
			return err
		}
		var socks []struct {
			Local string  `json:"local"`
			State string  `json:"state"`
			Alpha float64 `json:"alpha"`
			ECN   bool    `json:"ecn"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &socks) != nil {
			return fmt.Errorf("cc show --json: exit %d: %s%s", code, out, errOut)
		}
		if len(socks) != 3 {
			return fmt.Errorf("cc show lists %d sockets, want 3 (listener, client, server): %s", len(socks), out)
		}

		out, errOut, code, err = ccExec(bin, nil, "cc", "remove", "dctcp")
		if err != nil || code != 0 || !strings.Contains(out, "3 socket(s) here still use it") {
			return fmt.Errorf("cc remove with sockets in use: exit %d: %s%s", code, out, errOut)
		}
		if avail, err := ccAvailable(); err != nil || slices.Contains(avail, "dctcp") {
			return fmt.Errorf("dctcp still available after remove: %v %v", avail, err)
		}
		if err := exchange(c, s, 64<<10, 10); err != nil {
			return fmt.Errorf("sockets stopped working after remove: %w", err)
		}
		if a, b := getCC(c), getCC(s); a != "dctcp" || b != "dctcp" {
			return fmt.Errorf("after remove sockets run %q / %q, want dctcp", a, b)
		}
		if _, err := d.Dial("tcp4", ln.Addr().String()); !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("new socket selecting the removed dctcp: %v, want ENOENT", err)
		}
		if out, errOut, code, err := ccExec(bin, nil, "cc", "show"); err != nil || code != 0 || !strings.Contains(out, "ESTAB") {
			return fmt.Errorf("cc show after remove: exit %d %v:\n%s%s", code, err, out, errOut)
		}
		return nil
	})
}

// Real flows: DCTCP between the testbed's namespaces through HBM egress
// limits (the egLab helpers of egress_test.go).

// dctcpLab is an egress lab with HBM's dctcp installed and the receiver's
// sockets towards the sender running dctcp too: DCTCP needs it at both
// ends, and a Linux listener accepts ECN on a DCTCP (ECT-marked) SYN only
// if its own congestion control needs ECN. The workload server sets no
// congestion control, so the receiver's route to the sender carries
// `congctl dctcp` (netlab.RouteCC).
func dctcpLab(t *testing.T, name string) *egLab {
	t.Helper()
	ccIsolate(t)
	ccOK(t, "cc", "install", "dctcp")
	l := egSetup(t, name)
	if err := l.tb.RouteCC(netlab.Receiver, "dctcp"); err != nil {
		t.Fatal(err)
	}
	return l
}

// egressCounters returns group's egress counters (zero if none).
func egressCounters(t *testing.T, l *egLab, group string) jsonout.Direction {
	t.Helper()
	c, err := l.hbm.Egress(group)
	if err != nil {
		t.Fatalf("hbm show --json: %v", err)
	}
	if c == nil {
		return jsonout.Direction{}
	}
	return *c
}

// TestDCTCPEgressLimit: 3 DCTCP streams under 200mbit and 1gbit reach at
// least 0.90 of the limit with zero HBM drops and zero retransmissions.
func TestDCTCPEgressLimit(t *testing.T) {
	l := dctcpLab(t, "dclim")
	group, dir := l.cgroup(t, "w")
	for _, rate := range []string{"200mbit", "1gbit"} {
		t.Run(rate, func(t *testing.T) {
			l.set(t, group, rate)
			defer l.hbm.Unset(group)
			before := egressCounters(t, l, group)
			r := l.run(t, dir, "dctcp", false, group)
			d := egressCounters(t, l, group).Sub(before)
			within(t, r, rate, 0.90, egHigh)
			if d.Dropped != 0 {
				t.Errorf("hbm dropped %d packets, want 0", d.Dropped)
			}
			// tcpi_total_retrans also counts tail-loss probes, which the
			// probe timer sends now and then on a 25 us RTT with paced
			// flows even when nothing was lost (HBM dropped nothing).
			// Allow those, at most 1 in 10,000 packets; a loss-driven
			// recovery retransmits far more.
			if r.Retransmits*10000 > d.Packets {
				t.Errorf("%d retransmissions in %d packets, want at most 1 in 10,000", r.Retransmits, d.Packets)
			}
			// Marks are not required: HBM's pacing assist may hold the
			// flows below the mark threshold on its own. But HBM is the
			// only thing that can set CE here: echoes need its marks.
			t.Logf("hbm marked %d packets, senders saw %d CE echoes", d.Marked, r.DeliveredCE)
			if r.DeliveredCE > 0 && d.Marked == 0 {
				t.Errorf("senders saw %d CE echoes but HBM marked nothing: CE from nowhere", r.DeliveredCE)
			}
		})
	}
}

type dctcpSock struct {
	Cookie      uint64  `json:"cookie"`
	Remote      string  `json:"remote"`
	State       string  `json:"state"`
	CA          string  `json:"ca_state"`
	Alpha       float64 `json:"alpha"`
	Cwnd        uint32  `json:"cwnd"`
	Delivered   uint32  `json:"delivered"`
	DeliveredCE uint32  `json:"delivered_ce"`
}

// senderSockets runs `hbm cc show --json` in the sender namespace.
func senderSockets(l *egLab) ([]dctcpSock, error) {
	p := l.tb.Command(l.tb.SenderNS, "", l.bin, "cc", "show", "--json")
	var out, errOut bytes.Buffer
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &errOut
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := p.WaitTimeout(30 * time.Second); err != nil {
		return nil, fmt.Errorf("hbm cc show: %w: %s", err, errOut.String())
	}
	var socks []dctcpSock
	if err := json.Unmarshal(out.Bytes(), &socks); err != nil {
		return nil, fmt.Errorf("hbm cc show --json: %w: %s", err, out.String())
	}
	return socks, nil
}

// TestDCTCPAlphaUnderHBM: under an HBM limit the bulk streams' alpha rises
// (marks arrive); once the limit is removed mid-run it decays.
func TestDCTCPAlphaUnderHBM(t *testing.T) {
	l := dctcpLab(t, "dcalpha")
	group, dir := l.cgroup(t, "w")
	// Police only: the pacing assist keeps the queue so low that marks, and
	// so alpha, stay near zero; this test is about DCTCP's response to marks.
	if err := l.hbm.Set(group, "200mbit", "--no-pace"); err != nil {
		t.Fatal(err)
	}
	defer l.hbm.Unset(group)

	cfg := workload.Config{
		Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: egStreams,
		Warmup: time.Second, Duration: 7 * time.Second, CC: "dctcp",
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.tb.RunClient(context.Background(), l.bin, dir, cfg)
		done <- err
	}()

	time.Sleep(3 * time.Second)
	limited, err := senderSockets(l)
	if err != nil {
		t.Fatal(err)
	}
	alphaOf := map[uint64]float64{}
	for _, s := range limited {
		if s.State == "ESTAB" && s.DeliveredCE > 0 && s.Delivered > 1000 { // bulk streams, not the control connection
			alphaOf[s.Cookie] = s.Alpha
		}
	}
	t.Logf("limited to 200mbit: %+v", limited)
	if err := l.hbm.Unset(group); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	free, err := senderSockets(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unlimited: %+v", free)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if len(alphaOf) == 0 {
		t.Fatal("no sender socket had seen CE marks under the limit")
	}
	rose := 0
	for _, a := range alphaOf {
		if a > 0.01 {
			rose++
		}
	}
	if rose == 0 {
		t.Errorf("alpha of the marked streams %v: none above 0.01 under the limit", alphaOf)
	}
	for _, s := range free {
		a, ok := alphaOf[s.Cookie]
		if !ok {
			continue
		}
		if s.Alpha > 0.01 && s.Alpha >= a {
			t.Errorf("socket %d: alpha %.3f under the limit, %.3f two seconds after it was removed: no decay", s.Cookie, a, s.Alpha)
		}
	}
}

// TestDCTCPCubicShare: a DCTCP and a cubic client (3 streams each) in one
// limited cgroup: neither class gets less than a third of its fair share.
func TestDCTCPCubicShare(t *testing.T) {
	l := dctcpLab(t, "dcshare")
	group, dir := l.cgroup(t, "w")
	for _, rate := range []string{"200mbit", "1gbit"} {
		t.Run(rate, func(t *testing.T) {
			l.set(t, group, rate)
			defer l.hbm.Unset(group)
			limit, _ := netlab.ParseRate(rate)
			type res struct {
				r   *workload.Result
				err error
			}
			results := map[string]chan res{"dctcp": make(chan res, 1), "cubic": make(chan res, 1)}
			for cc, ch := range results {
				cfg := workload.Config{
					Addr: l.tb.ReceiverAddr(netlab.ServerPort, false), Streams: egStreams,
					Warmup: egWarmup, Duration: egDuration, CC: cc,
				}
				go func() {
					r, err := l.tb.RunClient(context.Background(), l.bin, dir, cfg)
					ch <- res{r, err}
				}()
			}
			total := 0.0
			goodput := map[string]float64{}
			for cc, ch := range results {
				x := <-ch
				if x.err != nil {
					t.Fatalf("%s client: %v", cc, x.err)
				}
				if x.r.CC != cc {
					t.Errorf("%s client's sockets ran %q", cc, x.r.CC)
				}
				goodput[cc] = x.r.Goodput
				total += x.r.Goodput
				t.Logf("%s: goodput %.1f Mbit/s (streams %s), retrans %d, CE %d, srtt %.0fus",
					cc, x.r.Goodput/1e6, mbits(x.r.StreamGoodput), x.r.Retransmits, x.r.DeliveredCE, x.r.RTT)
			}
			fair := float64(limit) / 2
			for cc, g := range goodput {
				if g < fair/3 {
					t.Errorf("%s got %.1f Mbit/s, less than a third of its fair share %.1f Mbit/s", cc, g/1e6, fair/1e6)
				}
			}
			t.Logf("total %.3f of %s", total/float64(limit), rate)
		})
	}
}
