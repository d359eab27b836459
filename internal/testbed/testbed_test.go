package testbed

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/testutil"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{
		"200mbit": 200e6, "1gbit": 1e9, "1.5gbit": 1.5e9, "100kbit": 100e3, "12345": 12345,
		"10bit": 10, "1mibit": 1 << 20, "100mbps": 800e6, "1MBIT": 1e6,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "1xbit", "-1mbit", "0"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded", in)
		}
	}
	for in, want := range map[uint64]string{200e6: "200mbit", 1e9: "1gbit", 1.5e9: "1.5gbit", 12345: "12345bit", 125000: "125kbit", 7: "7bit"} {
		if got := FormatRate(in); got != want {
			t.Errorf("FormatRate(%d) = %q, want %q", in, got, want)
		}
	}
}

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, name))
	return err == nil
}

func TestTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root and namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	testutil.RequireCommand(t, "tc")

	// A leftover of a "crashed" run is removed by New.
	if out, err := output("ip", "netns", "add", Prefix("tbtest")+"stale"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	tb, err := New("tbtest", Options{})
	if err != nil {
		Cleanup("tbtest")
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	if nsExists(Prefix("tbtest") + "stale") {
		t.Error("New did not clean up the stale namespace")
	}
	if !nsExists(tb.SenderNS) || !nsExists(tb.ReceiverNS) || tb.SenderNS != "hbm-tbtest-snd" {
		t.Fatalf("namespaces %s %s missing", tb.SenderNS, tb.ReceiverNS)
	}
	for _, ns := range []string{tb.SenderNS, tb.ReceiverNS} {
		out, err := output("ip", "-n", ns, "-o", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s:\n%s", ns, out)
		if !strings.Contains(out, "198.18.") || !strings.Contains(out, "fd00:0:") || !strings.Contains(out, "lo ") {
			t.Errorf("%s lacks its addresses", ns)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "fd00:0:") && strings.Contains(line, "tentative") {
				t.Errorf("%s: IPv6 address still tentative (nodad missing): %s", ns, line)
			}
		}
		link, _ := output("ip", "-n", ns, "-o", "link", "show")
		if !strings.Contains(link, "mtu 1500") || strings.Count(link, "state UP")+strings.Count(link, "LOOPBACK,UP") < 2 {
			t.Errorf("%s links: %s", ns, link)
		}
	}

	// Sysctls are per namespace.
	if err := tb.SetECN(true); err != nil {
		t.Fatal(err)
	}
	if v, err := tb.ReadSysctl(tb.SenderNS, "net.ipv4.tcp_ecn"); err != nil || v != "1" {
		t.Errorf("tcp_ecn in sender = %q, %v", v, err)
	}
	if host, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_ecn"); strings.TrimSpace(string(host)) == "1" {
		t.Log("host tcp_ecn is 1 (was it already?)")
	}

	// A command started in a namespace and a cgroup is in both from the start.
	grp := "/hbm-test-testbed"
	cgroup.Remove(grp)
	g, err := cgroup.Create(grp)
	if err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	t.Cleanup(func() { cgroup.Remove(grp) })
	p := tb.Command(tb.SenderNS, g.Dir, "sh", "-c", "cat /proc/self/cgroup; ip -o addr show dev veth-snd; "+
		"for i in 1 2 3; do ip netns exec "+tb.ReceiverNS+" true; done; echo ok")
	var out bytes.Buffer
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &out
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitTimeout(10 * time.Second); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	t.Logf("in namespace and cgroup:\n%s", out.String())
	if !strings.Contains(out.String(), "0::"+grp+"\n") || !strings.Contains(out.String(), tb.SenderIP4.String()) {
		t.Errorf("process not in cgroup %s and namespace %s", grp, tb.SenderNS)
	}

	// A long-running process is killed by Close.
	sleeper := tb.Command(tb.ReceiverNS, "", "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}

	// tc limiters install and go.
	for _, set := range []func() error{
		func() error { return tb.SetHTB(200e6) },
		func() error { return tb.SetTBF(1e9, 0) },
	} {
		if err := set(); err != nil {
			t.Fatal(err)
		}
		st, err := tb.QdiscStats()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("qdisc: %s", firstLines(st, 2))
	}
	if err := tb.ClearQdisc(); err != nil {
		t.Fatal(err)
	}
	if err := tb.ClearQdisc(); err != nil {
		t.Fatalf("second ClearQdisc: %v", err)
	}

	start := time.Now()
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-sleeper.Done():
	default:
		t.Error("Close left a process running")
	}
	t.Logf("Close took %v", time.Since(start))
	if nsExists(tb.SenderNS) || nsExists(tb.ReceiverNS) {
		t.Error("namespaces left after Close")
	}
	if err := sleeper.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return fmt.Sprint(strings.Join(lines, " | "))
}

// TestTestbedLock: a live testbed is never torn down by another New or
// Cleanup of the same name.
func TestTestbedLock(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root and namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	a, err := New("tblock", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	start := time.Now()
	if b, err := New("tblock", Options{LockWait: 300 * time.Millisecond}); err == nil {
		b.Close()
		t.Fatal("second New of a live testbed succeeded")
	} else {
		t.Logf("second New: %v (after %v)", err, time.Since(start))
	}
	if err := Cleanup("tblock"); err == nil {
		t.Fatal("Cleanup of a live testbed succeeded")
	}
	if !nsExists(a.SenderNS) {
		t.Fatal("live testbed torn down")
	}
	a.Close()
	if err := Cleanup("tblock"); err != nil {
		t.Fatalf("Cleanup after Close: %v", err)
	}
	b, err := New("tblock", Options{LockWait: time.Second})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	b.Close()
}
