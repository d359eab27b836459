// Package testbed builds the two-namespace network HBM's tests, benchmark and
// demo run on: a sender and a receiver network namespace joined by a veth
// pair, with IPv4 and IPv6 addresses, and helpers to run commands inside a
// namespace and a cgroup, set sysctls and install tc qdisc limiters.
//
// Everything a Testbed creates is removed by Close, and Cleanup removes what
// a crashed earlier run with the same name left behind.
package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netnsDir is where `ip netns` keeps named namespaces.
const netnsDir = "/run/netns"

// cmdTimeout bounds every helper command (ip, tc, sysctl) the testbed runs.
const cmdTimeout = 15 * time.Second

// Options configure a Testbed.
type Options struct {
	// Subnet is the third octet of the IPv4 /24 (198.18.Subnet.0/24) and the
	// third group of the IPv6 /64 (fd00:0:Subnet::/64). 0 derives it from the
	// testbed name.
	Subnet int
	// MTU of the veth pair; 0 means 1500.
	MTU int
	// LockWait is how long New waits for another live process's testbed of
	// the same name to close (default 3 minutes).
	LockWait time.Duration
}

// lockDir holds one lock file per testbed name, flock-ed by the process that
// owns the testbed: a crashed owner releases it, so its leftovers can be
// cleaned up, while a live one's are never torn down under it.
const lockDir = "/run/hbm-testbed"

// Testbed is a sender and a receiver network namespace joined by a veth pair.
type Testbed struct {
	Name string // the name given to New

	SenderNS, ReceiverNS   string // named network namespaces (ip netns)
	SenderDev, ReceiverDev string // veth ends, inside their namespace

	SenderIP4, ReceiverIP4 net.IP
	SenderIP6, ReceiverIP6 net.IP

	mu     sync.Mutex
	procs  map[*Proc]struct{}
	closed bool
	lock   *os.File
}

// Prefix is the prefix of every namespace a testbed named name creates.
func Prefix(name string) string { return "hbm-" + name + "-" }

// New builds a testbed. It first removes leftovers of an earlier run with the
// same name. On error nothing is left behind.
func New(name string, opts Options) (*Testbed, error) {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return nil, fmt.Errorf("testbed: bad name %q", name)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("testbed: needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("testbed: %s not found (install iproute2): %w", tool, err)
		}
	}
	if opts.LockWait == 0 {
		opts.LockWait = 3 * time.Minute
	}
	lock, err := acquire(name, opts.LockWait)
	if err != nil {
		return nil, err
	}
	if err := cleanup(name); err != nil {
		lock.Close()
		return nil, err
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	sub := opts.Subnet
	if sub == 0 {
		h := fnv.New32a()
		h.Write([]byte(name))
		sub = int(h.Sum32()%250) + 1
	}
	if sub < 1 || sub > 254 {
		return nil, fmt.Errorf("testbed: subnet %d out of 1..254", sub)
	}
	tb := &Testbed{
		Name:        name,
		SenderNS:    Prefix(name) + "snd",
		ReceiverNS:  Prefix(name) + "rcv",
		SenderDev:   "veth-snd",
		ReceiverDev: "veth-rcv",
		SenderIP4:   net.IPv4(198, 18, byte(sub), 1).To4(),
		ReceiverIP4: net.IPv4(198, 18, byte(sub), 2).To4(),
		SenderIP6:   net.ParseIP(fmt.Sprintf("fd00:0:%x::1", sub)),
		ReceiverIP6: net.ParseIP(fmt.Sprintf("fd00:0:%x::2", sub)),
		procs:       map[*Proc]struct{}{},
		lock:        lock,
	}
	if err := tb.build(opts.MTU); err != nil {
		tb.Close()
		return nil, err
	}
	return tb, nil
}

func (tb *Testbed) build(mtu int) error {
	for _, ns := range []string{tb.SenderNS, tb.ReceiverNS} {
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	snd, err := netns.GetFromName(tb.SenderNS)
	if err != nil {
		return fmt.Errorf("testbed: open netns %s: %w", tb.SenderNS, err)
	}
	defer snd.Close()
	rcv, err := netns.GetFromName(tb.ReceiverNS)
	if err != nil {
		return fmt.Errorf("testbed: open netns %s: %w", tb.ReceiverNS, err)
	}
	defer rcv.Close()
	hs, err := netlink.NewHandleAt(snd)
	if err != nil {
		return fmt.Errorf("testbed: netlink in %s: %w", tb.SenderNS, err)
	}
	defer hs.Close()
	hr, err := netlink.NewHandleAt(rcv)
	if err != nil {
		return fmt.Errorf("testbed: netlink in %s: %w", tb.ReceiverNS, err)
	}
	defer hr.Close()

	// Created from inside the sender namespace with its peer placed straight
	// into the receiver's: the names never touch the host namespace.
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: tb.SenderDev, MTU: mtu, TxQLen: 1000},
		PeerName:      tb.ReceiverDev,
		PeerNamespace: netlink.NsFd(rcv),
		PeerMTU:       uint32(mtu),
		PeerTxQLen:    1000,
	}
	if err := hs.LinkAdd(veth); err != nil {
		return fmt.Errorf("testbed: create veth pair: %w", err)
	}
	type end struct {
		h        *netlink.Handle
		dev      string
		ip4, ip6 net.IP
	}
	for _, e := range []end{
		{hs, tb.SenderDev, tb.SenderIP4, tb.SenderIP6},
		{hr, tb.ReceiverDev, tb.ReceiverIP4, tb.ReceiverIP6},
	} {
		lo, err := e.h.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("testbed: lo: %w", err)
		}
		if err := e.h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("testbed: lo up: %w", err)
		}
		l, err := e.h.LinkByName(e.dev)
		if err != nil {
			return fmt.Errorf("testbed: %s: %w", e.dev, err)
		}
		a4 := &netlink.Addr{IPNet: &net.IPNet{IP: e.ip4, Mask: net.CIDRMask(24, 32)}}
		if err := e.h.AddrAdd(l, a4); err != nil {
			return fmt.Errorf("testbed: add %s to %s: %w", a4, e.dev, err)
		}
		a6 := &netlink.Addr{IPNet: &net.IPNet{IP: e.ip6, Mask: net.CIDRMask(64, 128)}, Flags: 0x02 /* IFA_F_NODAD */}
		if err := e.h.AddrAdd(l, a6); err != nil {
			return fmt.Errorf("testbed: add %s to %s: %w", a6, e.dev, err)
		}
		if err := e.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("testbed: %s up: %w", e.dev, err)
		}
	}
	// Wait (bounded) for both ends to report carrier.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		ls, err1 := hs.LinkByName(tb.SenderDev)
		lr, err2 := hr.LinkByName(tb.ReceiverDev)
		if err1 == nil && err2 == nil && ls.Attrs().OperState == netlink.OperUp && lr.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) || i > 500 {
			return errors.New("testbed: veth pair did not come up within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close stops the processes the testbed started and removes both
// namespaces (and with them the veth pair). It is safe to call twice.
func (tb *Testbed) Close() error {
	tb.mu.Lock()
	if tb.closed {
		tb.mu.Unlock()
		return nil
	}
	tb.closed = true
	procs := make([]*Proc, 0, len(tb.procs))
	for p := range tb.procs {
		procs = append(procs, p)
	}
	tb.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	err := cleanup(tb.Name)
	tb.lock.Close() // releases the flock
	return err
}

// acquire takes the lock of testbed name, waiting at most wait (bounded
// polling) while another live process holds it.
func acquire(name string, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(lockDir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) || i > 100000 {
			f.Close()
			return nil, fmt.Errorf("testbed: %q is held by a live testbed (lock %s): %w", name, f.Name(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Cleanup removes the namespaces of a testbed named name (what a crashed run
// leaves behind), killing the processes still inside them first. Missing
// namespaces are not an error; a testbed a live process holds is, and is left
// alone. New does this itself.
func Cleanup(name string) error {
	lock, err := acquire(name, 0)
	if err != nil {
		return err
	}
	defer lock.Close()
	return cleanup(name)
}

func cleanup(name string) error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	var errs []error
	for _, e := range entries {
		ns := e.Name()
		suffix, ok := strings.CutPrefix(ns, Prefix(name))
		if !ok || suffix == "" || strings.Contains(suffix, "-") {
			continue // not ours: "hbm-a-b-snd" belongs to testbed "a-b", not "a"
		}
		killNetnsPids(ns)
		if err := run("ip", "netns", "del", ns); err != nil {
			if _, statErr := os.Stat(filepath.Join(netnsDir, ns)); statErr == nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killNetnsPids kills the processes left inside the named namespace ns (which
// only a testbed of ours creates) and waits, bounded, for them to go.
func killNetnsPids(ns string) {
	pids := netnsPids(ns)
	if len(pids) == 0 {
		return
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 100 && len(netnsPids(ns)) > 0; i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

func netnsPids(ns string) []int {
	out, err := output("ip", "netns", "pids", ns)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Sysctl sets key=value (e.g. "net.ipv4.tcp_ecn", "1") inside namespace ns,
// with sysctl(8), or by writing /proc/sys where procps is not installed.
func (tb *Testbed) Sysctl(ns, key, value string) error {
	if _, err := exec.LookPath("sysctl"); err == nil {
		return run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", key+"="+value)
	}
	return run("ip", "netns", "exec", ns, "sh", "-c", `printf '%s\n' "$1" > "$2"`, "sh", value, procSysPath(key))
}

func procSysPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// SysctlBoth sets key=value in the sender and the receiver namespace.
func (tb *Testbed) SysctlBoth(key, value string) error {
	for _, ns := range []string{tb.SenderNS, tb.ReceiverNS} {
		if err := tb.Sysctl(ns, key, value); err != nil {
			return err
		}
	}
	return nil
}

// ReadSysctl reads key inside namespace ns.
func (tb *Testbed) ReadSysctl(ns, key string) (string, error) {
	out, err := output("ip", "netns", "exec", ns, "cat", procSysPath(key))
	return strings.TrimSpace(out), err
}

// ReceiverAddr returns the receiver's address and port as host:port, IPv6
// when v6 is set.
func (tb *Testbed) ReceiverAddr(port int, v6 bool) string {
	ip := tb.ReceiverIP4
	if v6 {
		ip = tb.ReceiverIP6
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}

// run runs a helper command, bounded in time, and reports its stderr on
// failure.
func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func output(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	return outputCtx(ctx, name, args...)
}

func outputCtx(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// SenderTxBytes is the sender veth's tx_bytes: whole frames (Ethernet header
// included), everything the sender namespace transmitted.
func (tb *Testbed) SenderTxBytes() (uint64, error) {
	out, err := output("ip", "netns", "exec", tb.SenderNS, "cat", "/sys/class/net/"+tb.SenderDev+"/statistics/tx_bytes")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(out), 10, 64)
}
