package integration

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// TestEgressSparseRPC: a group well under its limit sends a 10 KB or 30 KB
// request as fast as without HBM, as under htb, whose class with tokens
// sends a whole packet of any size (bpf/include/pacing.h, xfer_begin).
// sockperf (a real client, from Debian) pings messages 200 times a second
// from a group limited to 100mbit (a sixth and a half of its rate). Before
// an idle socket's next transfer could use its group's credit, TCP sent a
// 10 KB message in two packets paced at the group's rate, 4-5x the round
// trip without a limit (P50 310-370 us against 70-80); while the credit
// was read when the socket went idle, right after its last message was
// charged, a 30 KB message got a third of it unpaced and the rest at the
// group's rate (P50 1.5 ms against 0.1; htb's 1.5 ms). Also fails a
// limiter that lets the group escape its limit at this load (it cannot)
// or one whose caps never reach the socket (then both P50s are alike and
// the bound holds: the other tests catch that).
func TestEgressSparseRPC(t *testing.T) {
	testutil.RequireCommand(t, "sockperf")
	l := egSetup(t, "egsparse")
	group, dir := l.cgroup(t, "w")
	const port = "11211"
	srv := l.tb.Command(netlab.Receiver, "", "sockperf", "server", "--tcp", "-i", "0.0.0.0", "-p", port)
	var out netlab.Buffer
	srv.Cmd.Stdout, srv.Cmd.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	for i := 0; i < 100 && !strings.Contains(out.String(), "listen on"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "listen on") {
		t.Fatalf("sockperf server not ready after 10s: %s", out.String())
	}
	ping := func(what, size string) float64 {
		t.Helper()
		p := l.tb.Command(netlab.Sender, dir, "sockperf", "ping-pong", "--tcp", "-i", l.tb.ReceiverIP4.String(),
			"-p", port, "-m", size, "--mps", "200", "-t", "4", "--full-rtt")
		var b netlab.Buffer
		p.Cmd.Stdout, p.Cmd.Stderr = &b, &b
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		if err := p.WaitTimeout(30 * time.Second); err != nil {
			t.Fatalf("sockperf ping-pong (%s, %s bytes): %v: %s", what, size, err, b.String())
		}
		p50, p99, n := sockperfRTT(b.String())
		if n < 300 {
			t.Fatalf("sockperf ping-pong (%s, %s bytes): %d round trips in its window, want >= 300: %s", what, size, n, b.String())
		}
		t.Logf("%s: %s-byte round trip P50 %.0f us, P99 %.0f us (%d)", what, size, p50, p99, n)
		return p50
	}
	// Without a limit first, then limited: the mean of two each, so a
	// moment of CPU contention on a shared machine moves neither. Both
	// cubic (which TCP paces at the rate it computed on its last ACK) and
	// bbr (its own model), set on the client's route.
	type cell struct{ cc, size string }
	var cells []cell
	for _, cc := range []string{"cubic", "bbr"} {
		for _, size := range []string{"10240", "30720"} {
			cells = append(cells, cell{cc, size})
		}
	}
	none := map[cell]float64{}
	for _, c := range cells {
		if err := l.tb.RouteCC(netlab.Sender, c.cc); err != nil {
			t.Fatal(err)
		}
		none[c] = mean2(ping("no limit, "+c.cc, c.size), ping("no limit, "+c.cc, c.size))
	}
	l.set(t, group, "100mbit")
	defer l.unset(t, group)
	for _, c := range cells {
		if err := l.tb.RouteCC(netlab.Sender, c.cc); err != nil {
			t.Fatal(err)
		}
		with := mean2(ping("100mbit, "+c.cc, c.size), ping("100mbit, "+c.cc, c.size))
		if with > 2*none[c]+50 {
			t.Errorf("%s, %s-byte round trip P50 %.0f us in a 100mbit group well under its rate, %.0f us without a limit: want at most 2x + 50 us",
				c.cc, c.size, with, none[c])
		}
	}
}

// mean2 is the mean of two figures.
func mean2(a, b float64) float64 { return (a + b) / 2 }

var (
	sockperfPercentile = regexp.MustCompile(`percentile (\d+\.\d+) =\s+([0-9.]+)`)
	sockperfObs        = regexp.MustCompile(`Total (\d+) observations`)
)

// sockperfRTT reads sockperf's P50 and P99 (us) and observation count from
// its output.
func sockperfRTT(out string) (p50, p99 float64, n int) {
	for _, m := range sockperfPercentile.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50.000":
			p50 = v
		case "99.000":
			p99 = v
		}
	}
	if m := sockperfObs.FindStringSubmatch(out); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	return p50, p99, n
}
