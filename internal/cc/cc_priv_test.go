package cc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/testutil"
)

// isolate prepares a privileged test: the name dctcp must be free for HBM
// (no native or foreign dctcp), and whatever HBM had installed before the
// test is put back afterwards, also when the test fails. Leftovers of a
// crashed run (a stale pin) are handled by Install itself.
func isolate(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs root, BPF struct_ops and real sockets")
	}
	testutil.RequireRoot(t)
	if _, err := loadTCPOpsLayout(); err != nil {
		testutil.Missing(t, "struct_ops tcp_congestion_ops", err)
	}
	l, err := List()
	if err != nil {
		t.Fatal(err)
	}
	wasInstalled := false
	for _, e := range l.Entries {
		if e.Name != DCTCP {
			continue
		}
		switch {
		case e.Source == SourceHBM && e.Problem == "":
			wasInstalled = true
		case e.Source == SourceHBM:
			// stale pin of a crashed run: Install replaces it
		default:
			testutil.Missing(t, "a dctcp name free for HBM", fmt.Errorf("%s dctcp registered", e.Source))
		}
	}
	t.Cleanup(func() {
		if _, err := Remove(DCTCP, false); err != nil {
			t.Errorf("cleanup: remove: %v", err)
		}
		if wasInstalled {
			if _, err := Install(DCTCP); err != nil {
				t.Errorf("cleanup: reinstall what was there before the test: %v", err)
			}
		}
	})
}

func mustRegistered(t *testing.T, want bool) {
	t.Helper()
	got, err := registered(DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		avail, _ := Available()
		t.Fatalf("dctcp registered = %v, want %v (available: %v)", got, want, avail)
	}
}

func entry(t *testing.T, name string) *Entry {
	t.Helper()
	l, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if l.Partial != "" {
		t.Fatalf("List partial as root: %s", l.Partial)
	}
	for i := range l.Entries {
		if l.Entries[i].Name == name {
			return &l.Entries[i]
		}
	}
	return nil
}

func TestInstallListRemove(t *testing.T) {
	isolate(t)
	if _, err := Remove(DCTCP, false); err != nil {
		t.Fatalf("initial remove: %v", err)
	}
	mustRegistered(t, false)
	if e := entry(t, DCTCP); e != nil {
		t.Fatalf("dctcp listed after remove: %+v", e)
	}

	res, err := Install(DCTCP)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	t.Logf("install: %s: %s", res.Outcome, res.Detail)
	if res.Outcome != Installed || res.LinkID == 0 || res.MapID == 0 || res.Pin != pinPath(DCTCP) {
		t.Fatalf("install result %+v", res)
	}
	// All of this process's handles are closed: only the pin keeps it.
	runtime.GC()
	mustRegistered(t, true)
	if _, err := os.Stat(res.Pin); err != nil {
		t.Fatalf("pin: %v", err)
	}

	e := entry(t, DCTCP)
	if e == nil || e.Source != SourceHBM || !e.Registered || e.LinkID != res.LinkID || e.MapID != res.MapID || e.Problem != "" {
		t.Fatalf("list entry %+v after install %+v", e, res)
	}
	if e := entry(t, "reno"); e == nil || e.Source != SourceKernel {
		t.Errorf("reno listed as %+v", e)
	}

	// Idempotent: same link, nothing new.
	res2, err := Install(DCTCP)
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	if res2.Outcome != AlreadyInstalled || res2.LinkID != res.LinkID || res2.MapID != res.MapID {
		t.Fatalf("second install %+v, first %+v", res2, res)
	}

	rm, err := Remove(DCTCP, false)
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	if !rm.Removed {
		t.Fatalf("remove result %+v", rm)
	}
	mustRegistered(t, false)
	if _, err := os.Stat(res.Pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin still there after remove: %v", err)
	}
	// The link and the map are gone from the kernel.
	if l, err := link.NewFromID(res.LinkID); err == nil {
		l.Close()
		t.Errorf("link %d survives remove", res.LinkID)
	}
	if m, err := ebpf.NewMapFromID(res.MapID); err == nil {
		m.Close()
		t.Errorf("map %d survives remove", res.MapID)
	}

	rm, err = Remove(DCTCP, false)
	if err != nil || rm.Removed {
		t.Fatalf("removing what is not installed: %+v, %v", rm, err)
	}
}

// The default congestion control is not removed without force.
func TestRemoveDefaultNeedsForce(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	// Stand-in for net.ipv4.tcp_congestion_control = dctcp: only the
	// initial namespace may make a restricted algorithm its default, and
	// the test must not change the host's.
	def := filepath.Join(t.TempDir(), "tcp_congestion_control")
	if err := os.WriteFile(def, []byte("dctcp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := procDefault
	procDefault = def
	t.Cleanup(func() { procDefault = old })

	if _, err := Remove(DCTCP, false); !errors.Is(err, ErrIsDefault) {
		t.Fatalf("remove of the default: %v, want ErrIsDefault", err)
	}
	mustRegistered(t, true)
	if e := entry(t, DCTCP); e == nil || !e.Default || e.Source != SourceHBM {
		t.Errorf("listed as %+v", e)
	}
	if rm, err := Remove(DCTCP, true); err != nil || !rm.Removed {
		t.Fatalf("forced remove: %+v, %v", rm, err)
	}
	mustRegistered(t, false)
}

// A pin whose link someone detached is stale: remove drops it, install
// replaces it.
func TestDetachedLinkPin(t *testing.T) {
	isolate(t)
	res, err := Install(DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	l, err := link.LoadPinnedLink(res.Pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Detach()
	l.Close()
	if err != nil {
		t.Fatalf("detach: %v", err)
	}
	mustRegistered(t, false)
	if e := entry(t, DCTCP); e == nil || e.Problem == "" {
		t.Errorf("detached link listed as %+v", e)
	}
	again, err := Install(DCTCP)
	if err != nil || again.Outcome != Installed {
		t.Fatalf("install over a detached link: %+v, %v", again, err)
	}
	mustRegistered(t, true)

	l, err = link.LoadPinnedLink(again.Pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Detach()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	rm, err := Remove(DCTCP, false)
	if err != nil || !rm.Removed {
		t.Fatalf("remove of a detached link: %+v, %v", rm, err)
	}
	if _, err := os.Stat(again.Pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin of a detached link survives remove: %v", err)
	}
}

// A dctcp registered by someone else is not HBM's to take over or remove.
func TestNameTaken(t *testing.T) {
	isolate(t)
	if _, err := Remove(DCTCP, false); err != nil {
		t.Fatal(err)
	}
	foreign, _, err := load(DCTCP) // registered, not pinned
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	mustRegistered(t, true)

	_, err = Install(DCTCP)
	if !errors.Is(err, ErrNameTaken) {
		t.Fatalf("install over a foreign dctcp: %v, want ErrNameTaken", err)
	}
	t.Logf("install: %v", err)
	if _, err := Remove(DCTCP, false); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("remove of a foreign dctcp: %v, want ErrNotOurs", err)
	}
	if e := entry(t, DCTCP); e == nil || e.Source != SourceBPF || e.MapID == 0 {
		t.Errorf("foreign dctcp listed as %+v", e)
	}
	mustRegistered(t, true)

	foreign.Close()
	if err := waitRegistered(DCTCP, false, true); err != nil {
		t.Fatal(err)
	}
}

// A pin left by a crash or tampering that registers nothing is replaced.
func TestStalePinReplaced(t *testing.T) {
	isolate(t)
	if _, err := Remove(DCTCP, false); err != nil {
		t.Fatal(err)
	}
	if err := ensureBPFFS(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(PinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(pinPath(DCTCP)); err != nil {
		t.Fatal(err)
	}
	// Remove the fake pin only while it is still the fake (Install failed):
	// once Install replaced it, isolate's cleanup removes HBM's dctcp.
	// Unlinking the live pin here instead let its struct_ops unregister
	// asynchronously, and the cleanup's Remove then found a dctcp it could
	// not call HBM's (a CI flake).
	fake, err := os.Stat(pinPath(DCTCP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if now, err := os.Stat(pinPath(DCTCP)); err == nil && os.SameFile(now, fake) {
			os.Remove(pinPath(DCTCP))
		}
	})

	if e := entry(t, DCTCP); e == nil || e.Problem == "" {
		t.Errorf("stale pin listed as %+v", e)
	}
	res, err := Install(DCTCP)
	if err != nil {
		t.Fatalf("install over a stale pin: %v", err)
	}
	if res.Outcome != Installed {
		t.Fatalf("install over a stale pin: %+v", res)
	}
	mustRegistered(t, true)
	if e := entry(t, DCTCP); e == nil || e.Source != SourceHBM || e.Problem != "" {
		t.Errorf("after repair listed as %+v", e)
	}
}

// inNetns runs f on a thread of its own in a new network namespace with
// loopback up. The thread is never unlocked, so it dies with f: nothing
// else runs in that namespace. f must not start goroutines that create
// sockets (they would run elsewhere).
func inNetns(t *testing.T, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			errc <- fmt.Errorf("loopback up: %w", err)
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func withCC(name string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// pair is a connected loopback TCP pair with the given congestion controls.
type pair struct {
	ln             net.Listener
	client, server *net.TCPConn
}

func newPair(serverCC, clientCC string) (*pair, error) {
	lc := net.ListenConfig{Control: withCC(serverCC)}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen with %s: %w", serverCC, err)
	}
	d := net.Dialer{Control: withCC(clientCC), Timeout: 5 * time.Second}
	c, err := d.Dial("tcp4", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("dial with %s: %w", clientCC, err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		ln.Close()
		return nil, err
	}
	return &pair{ln: ln, client: c.(*net.TCPConn), server: s.(*net.TCPConn)}, nil
}

func (p *pair) Close() {
	p.client.Close()
	p.server.Close()
	p.ln.Close()
}

// transfer sends n bytes client to server, rounds times.
func (p *pair) transfer(n, rounds int) error {
	buf := make([]byte, n)
	for i := 0; i < rounds; i++ {
		if err := p.client.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return err
		}
		if _, err := p.client.Write(buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := p.server.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return err
		}
		if _, err := io.ReadFull(p.server, buf); err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	return nil
}

func sockOpt(c *net.TCPConn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func ccOf(c *net.TCPConn) string {
	var name string
	err := sockOpt(c, func(fd int) error {
		var err error
		name, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		return err
	})
	if err != nil {
		return "error: " + err.Error()
	}
	return name
}

func cookieOf(c *net.TCPConn) uint64 {
	var cookie uint64
	_ = sockOpt(c, func(fd int) error {
		var err error
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	return cookie
}

// ecnBits is the ECN field the socket puts on its packets (ECT(0) = 2).
func ecnBits(c *net.TCPConn) int {
	var tos int
	_ = sockOpt(c, func(fd int) error {
		var err error
		tos, err = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS)
		return err
	})
	return tos & 3
}

func findSocket(socks []Socket, cookie uint64) *Socket {
	for i := range socks {
		if socks[i].Cookie == cookie {
			return &socks[i]
		}
	}
	return nil
}

// DCTCP on both ends negotiates ECN, sends ECT(0), and the iterator finds
// both sockets with alpha decaying from 1 while nothing is marked.
func TestSocketsAlpha(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		p, err := newPair(DCTCP, DCTCP)
		if err != nil {
			return err
		}
		defer p.Close()
		if c, s := ccOf(p.client), ccOf(p.server); c != DCTCP || s != DCTCP {
			return fmt.Errorf("congestion controls client %q server %q, want dctcp", c, s)
		}
		if b := ecnBits(p.client); b != 2 {
			return fmt.Errorf("client ECN bits %d, want ECT(0)", b)
		}
		if err := p.transfer(64<<10, 200); err != nil {
			return err
		}
		socks, err := Sockets()
		if err != nil {
			return err
		}
		for _, s := range socks {
			t.Logf("%+v", s)
		}
		if len(socks) != 3 {
			return fmt.Errorf("%d dctcp sockets, want 3 (listener, client, server)", len(socks))
		}
		cs := findSocket(socks, cookieOf(p.client))
		ss := findSocket(socks, cookieOf(p.server))
		if cs == nil || ss == nil {
			return fmt.Errorf("client (%d) or server (%d) socket not found by cookie", cookieOf(p.client), cookieOf(p.server))
		}
		if cs.Local.Port() != uint16(p.client.LocalAddr().(*net.TCPAddr).Port) || cs.Remote != ss.Local {
			return fmt.Errorf("addresses: client %s->%s, server %s->%s", cs.Local, cs.Remote, ss.Local, ss.Remote)
		}
		if !cs.ECN || !ss.ECN || cs.State != "ESTAB" {
			return fmt.Errorf("client %+v / server %+v: want ESTAB with ECN", cs, ss)
		}
		// Nothing marks on loopback: alpha decays from its initial 1
		// (by 1/16 per window of data).
		if cs.Alpha < 0 || cs.Alpha >= 0.5 {
			return fmt.Errorf("client alpha %.3f after 200 unmarked windows, want < 0.5", cs.Alpha)
		}
		if cs.DeliveredCE != 0 || cs.Delivered == 0 {
			return fmt.Errorf("client delivered %d, CE %d", cs.Delivered, cs.DeliveredCE)
		}
		return nil
	})
}

// Without negotiated ECN a dctcp socket becomes reno (and stops sending
// ECT), on the active and on the passive side.
func TestRenoFallbackWithoutECN(t *testing.T) {
	isolate(t)
	if _, err := Install(DCTCP); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		// Neither end asks for ECN unless its congestion control needs it.
		if err := os.WriteFile("/proc/sys/net/ipv4/tcp_ecn", []byte("0"), 0o644); err != nil {
			return err
		}
		p, err := newPair("cubic", DCTCP)
		if err != nil {
			return err
		}
		defer p.Close()
		if err := p.transfer(1000, 1); err != nil {
			return err
		}
		if c := ccOf(p.client); c != "reno" {
			return fmt.Errorf("active dctcp towards a non-ECN peer runs %q, want reno", c)
		}
		if b := ecnBits(p.client); b != 0 {
			return fmt.Errorf("active side still sends ECN bits %d after the fallback", b)
		}

		q, err := newPair(DCTCP, "cubic")
		if err != nil {
			return err
		}
		defer q.Close()
		if err := q.transfer(1000, 1); err != nil {
			return err
		}
		if s := ccOf(q.server); s != "reno" {
			return fmt.Errorf("passive dctcp for a non-ECN peer runs %q, want reno", s)
		}
		if b := ecnBits(q.server); b != 0 {
			return fmt.Errorf("passive side still sends ECN bits %d after the fallback", b)
		}
		return nil
	})
}

// Removing dctcp while sockets use it: the name goes at once (new sockets
// cannot select it), the sockets keep the BPF program, which the kernel
// keeps alive until they close, and go on working; reinstalling meanwhile
// registers a fresh copy.
func TestRemoveWhileSocketsUseIt(t *testing.T) {
	isolate(t)
	first, err := Install(DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	inNetns(t, func() error {
		p, err := newPair(DCTCP, DCTCP)
		if err != nil {
			return err
		}
		defer p.Close()
		if err := p.transfer(64<<10, 20); err != nil {
			return err
		}

		rm, err := Remove(DCTCP, false)
		if err != nil {
			return fmt.Errorf("remove with sockets in use: %w", err)
		}
		t.Logf("remove: %s", rm.Detail)
		if !rm.Removed || rm.Sockets != 3 {
			return fmt.Errorf("remove result %+v, want removed with 3 sockets in use", rm)
		}
		if avail, _ := Available(); slices.Contains(avail, DCTCP) {
			return fmt.Errorf("dctcp still available after remove: %v", avail)
		}
		// The struct_ops map lives on, held by the sockets, unlinked.
		if m, err := ebpf.NewMapFromID(first.MapID); err != nil {
			return fmt.Errorf("map %d of the removed dctcp is gone while sockets use it: %w", first.MapID, err)
		} else {
			m.Close()
		}

		if err := p.transfer(64<<10, 20); err != nil {
			return fmt.Errorf("transfer after remove: %w", err)
		}
		if c, s := ccOf(p.client), ccOf(p.server); c != DCTCP || s != DCTCP {
			return fmt.Errorf("after remove the sockets run %q / %q, want dctcp", c, s)
		}
		socks, err := Sockets()
		if err != nil {
			return err
		}
		if cs := findSocket(socks, cookieOf(p.client)); cs == nil || cs.Alpha < 0 {
			return fmt.Errorf("client socket not readable after remove: %+v", cs)
		}
		if _, err := newPair(DCTCP, DCTCP); !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("new socket selecting removed dctcp: %v, want ENOENT", err)
		}

		second, err := Install(DCTCP)
		if err != nil {
			return fmt.Errorf("reinstall while old sockets live: %w", err)
		}
		if second.Outcome != Installed || second.MapID == first.MapID {
			return fmt.Errorf("reinstall %+v (first %+v)", second, first)
		}
		q, err := newPair(DCTCP, DCTCP)
		if err != nil {
			return fmt.Errorf("new pair after reinstall: %w", err)
		}
		defer q.Close()
		if err := q.transfer(64<<10, 5); err != nil {
			return err
		}
		if err := p.transfer(64<<10, 5); err != nil {
			return fmt.Errorf("old pair after reinstall: %w", err)
		}
		return nil
	})
	// Once the sockets closed, the old map is freed (asynchronously).
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := ebpf.NewMapFromID(first.MapID)
		if err != nil {
			break
		}
		m.Close()
		if time.Now().After(deadline) {
			t.Errorf("map %d of the removed dctcp still exists after its sockets closed", first.MapID)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
