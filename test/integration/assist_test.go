package integration

// What the assists (egress pacing, ingress receive window) leave on sockets,
// read back from the sockets themselves: the test owns both ends of a TCP
// connection, created while the test process sat in the limited group.

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/testutil"
)

// inCgroup runs fn with the test process in the cgroup directory dir, so the
// sockets fn creates belong to it (a socket keeps the cgroup it was created
// in; an accepted socket, its listener's). The process goes back to its own
// cgroup before inCgroup returns.
func inCgroup(t *testing.T, dir string, fn func()) {
	t.Helper()
	m, err := cgroup.Mount()
	if err != nil {
		t.Fatalf("cgroup2 mount: %v", err)
	}
	back := testutil.EnterCgroup(t, m, dir)
	defer func() {
		if err := back(); err != nil {
			t.Fatal(err)
		}
	}()
	fn()
}

// inNamedNetns runs fn on a locked OS thread in the named network namespace ("":
// the current one).
func inNamedNetns(t *testing.T, name string, fn func() error) {
	t.Helper()
	if name == "" {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		return
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies with its netns
		h, err := netns.GetFromName(name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
}

// tcpPair connects a client in clientNS to a listener in serverNS at addr
// (host:0), the listener created inside the cgroup directory dir when
// listenIn, else the client (neither when dir is ""). It returns the client and the accepted socket.
func tcpPair(t *testing.T, dir string, listenIn bool, serverNS, clientNS, host string) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	var ln net.Listener
	listen := func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
		return err
	}
	var c net.Conn
	dial := func() error {
		var err error
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}
	if dir == "" {
		inNamedNetns(t, serverNS, listen)
		inNamedNetns(t, clientNS, dial)
	} else if listenIn {
		inCgroup(t, dir, func() { inNamedNetns(t, serverNS, listen) })
		inNamedNetns(t, clientNS, dial)
	} else {
		inNamedNetns(t, serverNS, listen)
		inCgroup(t, dir, func() { inNamedNetns(t, clientNS, dial) })
	}
	defer ln.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// ping sends a few segments from w to r and reads them.
func ping(t *testing.T, w, r *net.TCPConn) {
	t.Helper()
	buf := make([]byte, 4<<10)
	for i := 0; i < 4; i++ {
		w.SetWriteDeadline(time.Now().Add(5 * time.Second))
		r.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	}
}

func sockopt(t *testing.T, c *net.TCPConn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("getsockopt %d/%d: %v", level, opt, serr)
	}
	return v
}

const paceUnlimited = 0xffffffff // SO_MAX_PACING_RATE: no cap

// TestLoopbackNotAssisted: connections that stay on the host (exempt from
// policing unless --loopback) are neither paced nor window-clamped.
func TestLoopbackNotAssisted(t *testing.T) {
	l := egSetup(t, "lonot")
	group, dir := l.cgroup(t, "w")
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			// One pair with the receiver in the group, one with the sender,
			// and a control pair outside it.
			c, s := tcpPair(t, dir, true, "", "", host)
			c2, s2 := tcpPair(t, dir, false, "", "", host)
			c3, s3 := tcpPair(t, "", false, "", "", host)
			if err := l.hbm.Set(group, "200mbit"); err != nil {
				t.Fatal(err)
			}
			if err := l.hbm.SetIngress(group, "200mbit"); err != nil {
				t.Fatal(err)
			}
			defer l.hbm.Unset(group)
			// A few segments: the assists act on every ACK and segment.
			for _, p := range [][2]*net.TCPConn{{c, s}, {c2, s2}, {c3, s3}} {
				ping(t, p[0], p[1])
			}
			if got := sockopt(t, c2, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE); uint32(got) != paceUnlimited {
				t.Errorf("loopback sender in the group paced at %d bytes/s", got)
			}
			got := sockopt(t, s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
			want := sockopt(t, s3, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
			if got != want {
				t.Errorf("loopback receiver in the group has window clamp %d, one outside it %d", got, want)
			}
		})
	}
}

// bulk streams from w to r for d (w written from a goroutine, r read here).
func bulk(t *testing.T, w, r *net.TCPConn, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			w.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 256<<10)
	end := time.Now().Add(d + time.Second)
	for time.Now().Before(end) {
		select {
		case <-done:
			return
		default:
		}
		r.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	<-done
}

// rxClampMax is the largest window clamp a receiver in a group limited to
// 100mbit may have: 100 Mbit/s x 1 ms is 12.5 KB, and the RTT here is far
// less.
const rxClampMax = 16 << 10

// rxSetup makes a pair lab with a receiving group "r" limited to
// `--ingress 100mbit` plus args, and returns the group (as hbm takes it),
// its directory and the receiver's address.
func rxSetup(t *testing.T, name string, args ...string) (l *egLab, group, dir, host string) {
	t.Helper()
	l = egSetup(t, name)
	group, dir = l.cgroup(t, "r")
	host, _, err := net.SplitHostPort(l.tb.ReceiverAddr(1, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.hbm.SetIngress(group, "100mbit", args...); err != nil {
		t.Fatal(err)
	}
	return l, group, dir, host
}

// TestRxWindowClamped: a receiver in a group with an ingress limit, fed a
// bulk stream in order over veth (the receive fast path), has its window
// clamped to about the group's rate x RTT (at 100 Mbit/s and tens of
// microseconds, the 2-segment floor); the same stream into a receiver outside
// the group keeps its autotuned clamp; unset lifts the clamp at once, with
// no process of the group left in the receiver's network namespace (the
// unset walk finds it in hbm_netns_map), and it stays lifted.
func TestRxWindowClamped(t *testing.T) {
	l, group, dir, host := rxSetup(t, "rxclamp")
	c, s := tcpPair(t, dir, true, l.tb.ReceiverNS, l.tb.SenderNS, host)
	c3, s3 := tcpPair(t, "", false, l.tb.ReceiverNS, l.tb.SenderNS, host)
	bulk(t, c, s, time.Second)
	bulk(t, c3, s3, time.Second)
	got := sockopt(t, s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
	free := sockopt(t, s3, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
	t.Logf("window clamp: %d bytes in the group, %d outside", got, free)
	if got > rxClampMax {
		t.Errorf("receiver in a group limited to 100mbit has window clamp %d bytes, want <= %d", got, rxClampMax)
	}
	if free <= rxClampMax {
		t.Errorf("receiver outside the group has window clamp %d bytes: the test cannot tell clamped from not", free)
	}
	if err := l.hbm.Unset(group); err != nil {
		t.Fatal(err)
	}
	// The unset walk lifted it before any further segment (no sockops
	// program is attached any more to do it later); traffic keeps it so.
	if after := sockopt(t, s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP); after <= rxClampMax {
		t.Errorf("right after unset the receiver's window clamp is still %d bytes", after)
	}
	ping(t, c, s)
	if after := sockopt(t, s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP); after <= rxClampMax {
		t.Errorf("after unset and more segments the receiver's window clamp is %d bytes", after)
	}
}

// TestRxWindowMarkOnlyECN: a mark-only ingress limit (--no-drop, incast
// protection) clamps the window of a flow that sends ECN-capable data and
// leaves a flow without ECN exactly as without HBM: it cannot be marked, and
// a clamped window cost such flows their tail (docs/design.md).
func TestRxWindowMarkOnlyECN(t *testing.T) {
	l, _, dir, host := rxSetup(t, "rxecn", "--no-drop")
	t.Cleanup(func() { l.tb.SetECN(false) })
	clampOf := func(ecn bool) int {
		if err := l.tb.SetECN(ecn); err != nil {
			t.Fatal(err)
		}
		c, s := tcpPair(t, dir, true, l.tb.ReceiverNS, l.tb.SenderNS, host)
		bulk(t, c, s, time.Second)
		return sockopt(t, s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP)
	}
	plain, ecn := clampOf(false), clampOf(true)
	t.Logf("window clamp under a mark-only 100mbit limit: %d bytes without ECN, %d with", plain, ecn)
	if plain <= rxClampMax {
		t.Errorf("a flow without ECN has window clamp %d bytes under a mark-only limit: want it left alone (> %d)", plain, rxClampMax)
	}
	if ecn > rxClampMax {
		t.Errorf("an ECN flow has window clamp %d bytes under a mark-only 100mbit limit, want <= %d", ecn, rxClampMax)
	}
}
