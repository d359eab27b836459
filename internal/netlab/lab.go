package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hbm-dev/hbm/internal/cgroup"
)

// Lab is a built Config: its namespaces, links, bottlenecks and cgroups, and
// the processes started in it. Close removes all of it.
type Lab struct {
	// Token is the random part of every name the lab created.
	Token string
	cfg   Config
	hosts map[string]*Host
	links map[string]*BuiltLink
	// cgRoot is the lab's cgroup, relative to the cgroup2 mount ("" if the
	// lab has no cgroups).
	cgRoot string
	groups map[string]string // cgroup name -> directory

	procs procSet

	mu    sync.Mutex
	holds []*hold // token lock, namespace files, cgroup directory
	done  bool
}

// Host is a built host: its namespace and, per link, its interface and
// addresses.
type Host struct {
	Name string
	NS   string            // the named network namespace (/run/netns/NS)
	Dev  map[string]string // link name -> interface name
	IP4  map[string]net.IP // link name -> IPv4 address
	IP6  map[string]net.IP // link name -> IPv6 address (Config.IPv6)
}

// BuiltLink is a built link: for a bridge, its switch namespace and the
// switch port toward each host.
type BuiltLink struct {
	Name   string
	Switch string            // switch namespace, "" for a veth pair
	Ports  map[string]string // host -> switch port toward it
	index  int
}

// New builds cfg. It first removes what labs whose owner died left behind
// (Sweep). On error nothing it built is left.
func New(cfg Config) (*Lab, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("netlab: needs root (network namespaces)")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("netlab: ip not found (install iproute2; commands run through ip netns exec): %w", err)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if len(cfg.CPUs) > 0 {
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, fmt.Errorf("netlab: cpus: taskset not found (install util-linux): %w", err)
		}
		cpus := map[string][]int{}
		for k, v := range cfg.CPUs {
			cpus[k] = slices.Clone(v)
		}
		cfg.CPUs = cpus
	}
	Sweep(nil)
	tok, lock, err := newOwner()
	if err != nil {
		return nil, err
	}
	l := &Lab{Token: tok, cfg: cfg, hosts: map[string]*Host{}, links: map[string]*BuiltLink{},
		groups: map[string]string{}, holds: []*hold{lock}}
	if err := l.build(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// nsName is the namespace of host (or switch) name.
func (l *Lab) nsName(name string) string { return NetnsPrefix + l.Token + "-" + name }

// addNetns creates namespace ns and holds its flock.
func (l *Lab) addNetns(ns string) error {
	if err := createNetns(ns); err != nil {
		return err
	}
	// Held at once; a sweep that took it in between sees the token lock.
	var h *hold
	var err error
	for i := 0; i < 50; i++ {
		if h, err = holdPath(filepath.Join(netnsDir, ns)); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		deleteNetns(ns)
		return fmt.Errorf("netlab: lock netns %s: %w", ns, err)
	}
	l.mu.Lock()
	l.holds = append(l.holds, h)
	l.mu.Unlock()
	return nil
}

func (l *Lab) build() error {
	sysctls := map[string]string{"net.ipv4.tcp_no_metrics_save": "1"} // no cached ssthresh from one run to the next
	if !l.cfg.IPv6 {
		sysctls["net.ipv6.conf.all.disable_ipv6"] = "1"
		sysctls["net.ipv6.conf.default.disable_ipv6"] = "1"
	}
	for k, v := range l.cfg.Sysctls {
		sysctls[k] = v
	}
	for _, name := range l.cfg.Hosts {
		h := &Host{Name: name, NS: l.nsName(name), Dev: map[string]string{}, IP4: map[string]net.IP{}, IP6: map[string]net.IP{}}
		if err := l.addNetns(h.NS); err != nil {
			return err
		}
		l.hosts[name] = h
		for k, v := range sysctls {
			if err := nsSysctl(h.NS, k, v); err != nil {
				return err
			}
		}
		if err := linkUp(h.NS, "lo"); err != nil {
			return err
		}
	}
	for i := range l.cfg.Links {
		cl := &l.cfg.Links[i]
		bl := &BuiltLink{Name: cl.Name, Ports: map[string]string{}, index: i}
		l.links[cl.Name] = bl
		var err error
		if l.cfg.switched(cl) {
			err = l.buildSwitch(bl, cl)
		} else {
			err = l.buildPair(bl, cl)
		}
		if err != nil {
			return err
		}
	}
	for _, b := range l.cfg.Bottlenecks {
		bl := l.links[b.Link]
		burst := b.Burst
		if burst == 0 {
			burst = 32 << 10
		}
		if err := SetQdisc(bl.Switch, bl.Ports[b.To], TBF{Rate: b.Rate, Burst: burst, Limit: b.Buffer}); err != nil {
			return fmt.Errorf("netlab: bottleneck on %s toward %s: %w", b.Link, b.To, err)
		}
	}
	if err := l.pinCPUs(); err != nil {
		return err
	}
	if err := l.waitUp(5 * time.Second); err != nil {
		return err
	}
	if len(l.cfg.Cgroups) > 0 {
		return l.buildCgroups()
	}
	return nil
}

// buildCgroups creates /hbm-lab-TOKEN (held) and one group per name in it.
func (l *Lab) buildCgroups() error {
	root := "/" + GroupPrefix + l.Token
	g, err := cgroup.Create(root)
	if err != nil {
		return err
	}
	l.cgRoot = root
	h, err := holdPath(g.Dir)
	if err != nil {
		return fmt.Errorf("netlab: lock cgroup %s: %w", g.Dir, err)
	}
	l.mu.Lock()
	l.holds = append(l.holds, h)
	l.mu.Unlock()
	for _, name := range l.cfg.Cgroups {
		c, err := cgroup.Create(root + "/" + name)
		if err != nil {
			return err
		}
		l.groups[name] = c.Dir
	}
	return nil
}

// linkAddr4 is host j's IPv4 address on link i: 198.18.0.0/15, a /24 per
// link.
func linkAddr4(i, j int) net.IP {
	return net.IPv4(198, byte(18+i/256), byte(i%256), byte(j+1)).To4()
}

// linkAddr6 is host j's IPv6 address on link i: fd00:0:I::J/64.
func linkAddr6(i, j int) net.IP {
	return net.ParseIP(fmt.Sprintf("fd00:0:%x::%x", i+1, j+1))
}

// devName is host j's interface on link cl: the link's name.
func devName(cl *Link) string { return cl.Name }

// portName is the switch port toward host j.
func portName(cl *Link, j int) string {
	if n := "p-" + cl.Hosts[j]; len(n) <= 15 {
		return n
	}
	return fmt.Sprintf("p%d", j)
}

func (l *Lab) buildPair(bl *BuiltLink, cl *Link) error {
	a, b := l.hosts[cl.Hosts[0]], l.hosts[cl.Hosts[1]]
	dev := devName(cl)
	if err := veth(a.NS, dev, b.NS, dev, l.cfg.MTU); err != nil {
		return err
	}
	for j, hn := range cl.Hosts {
		if err := l.addHostEnd(bl, cl, l.hosts[hn], dev, j); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) buildSwitch(bl *BuiltLink, cl *Link) error {
	bl.Switch = l.nsName("sw-" + cl.Name)
	if err := l.addNetns(bl.Switch); err != nil {
		return err
	}
	nh, err := handle(bl.Switch)
	if err != nil {
		return err
	}
	defer nh.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: l.cfg.MTU}}
	if err := nh.LinkAdd(br); err != nil {
		return fmt.Errorf("netlab: bridge in %s: %w", bl.Switch, err)
	}
	if err := nh.LinkSetUp(br); err != nil {
		return fmt.Errorf("netlab: bridge up: %w", err)
	}
	for j, hn := range cl.Hosts {
		h := l.hosts[hn]
		dev, port := devName(cl), portName(cl, j)
		bl.Ports[hn] = port
		if err := veth(h.NS, dev, bl.Switch, port, l.cfg.MTU); err != nil {
			return err
		}
		p, err := nh.LinkByName(port)
		if err != nil {
			return fmt.Errorf("netlab: %s: %w", port, err)
		}
		if err := nh.LinkSetMaster(p, br); err != nil {
			return fmt.Errorf("netlab: enslave %s: %w", port, err)
		}
		if err := nh.LinkSetUp(p); err != nil {
			return fmt.Errorf("netlab: %s up: %w", port, err)
		}
		if err := l.addHostEnd(bl, cl, h, dev, j); err != nil {
			return err
		}
	}
	return nil
}

// addHostEnd addresses host h's end dev of link bl (host j on it) and
// brings it up.
func (l *Lab) addHostEnd(bl *BuiltLink, cl *Link, h *Host, dev string, j int) error {
	nh, err := handle(h.NS)
	if err != nil {
		return err
	}
	defer nh.Close()
	lk, err := nh.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("netlab: %s in %s: %w", dev, h.NS, err)
	}
	h.Dev[cl.Name] = dev
	h.IP4[cl.Name] = linkAddr4(bl.index, j)
	a4 := &netlink.Addr{IPNet: &net.IPNet{IP: h.IP4[cl.Name], Mask: net.CIDRMask(24, 32)}}
	if err := nh.AddrAdd(lk, a4); err != nil {
		return fmt.Errorf("netlab: add %s to %s in %s: %w", a4, dev, h.NS, err)
	}
	if l.cfg.IPv6 {
		h.IP6[cl.Name] = linkAddr6(bl.index, j)
		a6 := &netlink.Addr{IPNet: &net.IPNet{IP: h.IP6[cl.Name], Mask: net.CIDRMask(64, 128)}, Flags: 0x02 /* IFA_F_NODAD */}
		if err := nh.AddrAdd(lk, a6); err != nil {
			return fmt.Errorf("netlab: add %s to %s in %s: %w", a6, dev, h.NS, err)
		}
	}
	if err := nh.LinkSetUp(lk); err != nil {
		return fmt.Errorf("netlab: %s up in %s: %w", dev, h.NS, err)
	}
	return nil
}

// veth creates a veth pair from inside nsA with its peer placed straight
// into nsB: the names never touch the caller's namespace.
func veth(nsA, devA, nsB, devB string, mtu int) error {
	ha, err := handle(nsA)
	if err != nil {
		return err
	}
	defer ha.Close()
	fb, err := nsFd(nsB)
	if err != nil {
		return err
	}
	defer fb.Close()
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: devA, MTU: mtu, TxQLen: 1000},
		PeerName:      devB,
		PeerNamespace: netlink.NsFd(fb.Fd()),
		PeerMTU:       uint32(mtu),
		PeerTxQLen:    1000,
	}
	if err := ha.LinkAdd(v); err != nil {
		return fmt.Errorf("netlab: veth %s/%s - %s/%s: %w", nsA, devA, nsB, devB, err)
	}
	return nil
}

func nsFd(ns string) (*os.File, error) {
	f, err := os.Open(filepath.Join(netnsDir, ns))
	if err != nil {
		return nil, fmt.Errorf("netlab: open netns %s: %w", ns, err)
	}
	return f, nil
}

func linkUp(ns, dev string) error {
	return withLink(ns, dev, func(nh *netlink.Handle, lk netlink.Link) error {
		if err := nh.LinkSetUp(lk); err != nil {
			return fmt.Errorf("netlab: %s up in %s: %w", dev, ns, err)
		}
		return nil
	})
}

// waitUp waits (bounded) until every host interface and switch port
// reports carrier.
func (l *Lab) waitUp(limit time.Duration) error {
	type end struct{ ns, dev string }
	var ends []end
	for _, h := range l.hosts {
		for _, d := range h.Dev {
			ends = append(ends, end{h.NS, d})
		}
	}
	for _, bl := range l.links {
		for _, p := range bl.Ports {
			ends = append(ends, end{bl.Switch, p})
		}
	}
	deadline := time.Now().Add(limit)
	for i := 0; i < 1000; i++ {
		down := ""
		for _, e := range ends {
			nh, err := handle(e.ns)
			if err != nil {
				return err
			}
			lk, err := nh.LinkByName(e.dev)
			nh.Close()
			if err != nil || lk.Attrs().OperState != netlink.OperUp {
				down = e.ns + "/" + e.dev
				break
			}
		}
		if down == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netlab: %s not up after %v", down, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("netlab: links not up")
}

// Host returns the built host name (nil if there is none).
func (l *Lab) Host(name string) *Host { return l.hosts[name] }

// Link returns the built link name (nil if there is none).
func (l *Lab) Link(name string) *BuiltLink { return l.links[name] }

// Cgroup returns the directory of the lab's cgroup name ("" if there is
// none).
func (l *Lab) Cgroup(name string) string { return l.groups[name] }

// CgroupPath returns cgroup name's path relative to the cgroup2 mount
// (what `hbm set` takes).
func (l *Lab) CgroupPath(name string) string { return l.cgRoot + "/" + name }

// Sysctl sets key=value inside host's namespace.
func (l *Lab) Sysctl(host, key, value string) error {
	h := l.hosts[host]
	if h == nil {
		return fmt.Errorf("netlab: no host %q", host)
	}
	return nsSysctl(h.NS, key, value)
}

// SysctlAll sets key=value in every host.
func (l *Lab) SysctlAll(key, value string) error {
	for _, name := range l.cfg.Hosts {
		if err := l.Sysctl(name, key, value); err != nil {
			return err
		}
	}
	return nil
}

// ReadSysctl reads key inside host's namespace.
func (l *Lab) ReadSysctl(host, key string) (string, error) {
	h := l.hosts[host]
	if h == nil {
		return "", fmt.Errorf("netlab: no host %q", host)
	}
	return nsReadSysctl(h.NS, key)
}

// SetECN turns ECN on (tcp_ecn=1: request and accept) or back to the
// kernel default (2: accept only) in every host.
func (l *Lab) SetECN(on bool) error {
	v := "2"
	if on {
		v = "1"
	}
	return l.SysctlAll("net.ipv4.tcp_ecn", v)
}

// TxBytes is the tx_bytes counter of host's interface on link (for a veth:
// whole frames, Ethernet header included).
func (l *Lab) TxBytes(host, link string) (uint64, error) {
	h := l.hosts[host]
	if h == nil || h.Dev[link] == "" {
		return 0, fmt.Errorf("netlab: no host %q on link %q", host, link)
	}
	return TxBytes(h.NS, h.Dev[link])
}

// RxCounters reads the rx_bytes and rx_packets counters of host's
// interface on link, in one read. A veth counts each packet its peer sent
// once, a TSO or GRO packet too, so bytes / packets is the size of the
// packets the receiver's stack handles; bytes are whole frames, Ethernet
// header included.
func (l *Lab) RxCounters(host, link string) (bytes, packets uint64, err error) {
	h := l.hosts[host]
	if h == nil || h.Dev[link] == "" {
		return 0, 0, fmt.Errorf("netlab: no host %q on link %q", host, link)
	}
	st, err := linkStatistics(h.NS, h.Dev[link])
	if err != nil {
		return 0, 0, err
	}
	return st.RxBytes, st.RxPackets, nil
}

// TxBytes is the tx_bytes counter of dev in namespace ns.
func TxBytes(ns, dev string) (uint64, error) {
	return linkStats(ns, dev, func(st *netlink.LinkStatistics) uint64 { return st.TxBytes })
}

// TxCounters reads the tx_bytes and tx_packets counters of dev in
// namespace ns, in one read. A veth counts a TSO packet once, so bytes /
// packets is the size of the packets the sender's stack handled.
func TxCounters(ns, dev string) (bytes, packets uint64, err error) {
	st, err := linkStatistics(ns, dev)
	if err != nil {
		return 0, 0, err
	}
	return st.TxBytes, st.TxPackets, nil
}

// linkStats reads one counter of dev's statistics in namespace ns.
func linkStats(ns, dev string, get func(*netlink.LinkStatistics) uint64) (uint64, error) {
	st, err := linkStatistics(ns, dev)
	if err != nil {
		return 0, err
	}
	return get(st), nil
}

// linkStatistics reads dev's statistics in namespace ns.
func linkStatistics(ns, dev string) (*netlink.LinkStatistics, error) {
	var st *netlink.LinkStatistics
	err := withLink(ns, dev, func(_ *netlink.Handle, lk netlink.Link) error {
		st = lk.Attrs().Statistics
		if st == nil {
			return fmt.Errorf("netlab: %s in %s: no statistics", dev, ns)
		}
		return nil
	})
	return st, err
}

// Close stops every process the lab started and removes its namespaces
// (and with them every link) and cgroups. Safe to call twice.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	l.mu.Unlock()
	l.procs.killAll()
	var errs []error
	for _, h := range l.hosts {
		errs = append(errs, deleteNetns(h.NS))
	}
	for _, bl := range l.links {
		if bl.Switch != "" {
			errs = append(errs, deleteNetns(bl.Switch))
		}
	}
	if l.cgRoot != "" {
		errs = append(errs, removeCgroupTree(l.cgRoot))
	}
	l.mu.Lock()
	for i := len(l.holds) - 1; i >= 0; i-- {
		if i == 0 {
			os.Remove(l.holds[0].path) // the token lock file, while still held
		}
		l.holds[i].release()
	}
	l.holds = nil
	l.mu.Unlock()
	return errors.Join(errs...)
}

// removeCgroupTree kills what is left in the tree rel (cgroup.kill) and
// removes it, retrying while exited processes leave it.
func removeCgroupTree(rel string) error {
	mnt, err := cgroup.Mount()
	if err != nil {
		return err
	}
	dir := filepath.Join(mnt, rel)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	return cgroup.RemoveWait(rel, 50, 100*time.Millisecond)
}
