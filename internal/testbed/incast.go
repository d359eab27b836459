package testbed

// The incast testbed: N sender hosts and one receiver, each a network
// namespace with one veth into a Linux bridge that lives in a namespace of
// its own. The bridge port towards the receiver is the bottleneck: a tbf
// qdisc at Rate with a Buffer-byte queue, the switch buffer in front of the
// receiver that incast overflows.
//
//	hbm-NAME-s0 ─┐
//	hbm-NAME-s1 ─┤  hbm-NAME-br: br0 ── p-rcv (tbf) ── hbm-NAME-rcv
//	   ...      ─┤
//	hbm-NAME-sN ─┘
//
// Addresses: 198.18.SUB.1..N for the senders, 198.18.SUB.100 for the
// receiver (a /24 of 198.18.0.0/15).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/hbm-dev/hbm/internal/workload"
)

// IncastOptions configure an incast testbed.
type IncastOptions struct {
	Senders int    // sender hosts (default 4)
	Rate    uint64 // bottleneck rate, bits/s (default 2 Gbit/s)
	Buffer  int    // bottleneck queue, bytes (default 128 KB)
	// Burst is the tbf bucket in bytes (default 32 KB). GSO packets larger
	// than it are segmented by tbf, so the queue drops single packets, as a
	// switch does.
	Burst    int
	Subnet   int           // third octet of 198.18.SUB.0/24; 0 derives it from the name
	MTU      int           // default 1500
	LockWait time.Duration // as Options.LockWait
}

// Incast is a built incast testbed.
type Incast struct {
	Name       string
	SenderNS   []string // one namespace per sender host
	ReceiverNS string
	BridgeNS   string
	Bottleneck string // the bridge port towards the receiver (in BridgeNS)
	HostDev    string // every host's interface name
	SenderIP   []net.IP
	ReceiverIP net.IP
	Opts       IncastOptions

	tb *Testbed // process bookkeeping and the name lock
}

// NewIncast builds an incast testbed named name, first removing leftovers of
// an earlier run with the same name. On error nothing is left behind.
func NewIncast(name string, opts IncastOptions) (*Incast, error) {
	if name == "" || strings.ContainsAny(name, "/ \t\n-") {
		return nil, fmt.Errorf("testbed: bad incast name %q (no '-', '/', spaces)", name)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("testbed: needs root (network namespaces)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("testbed: %s not found (install iproute2): %w", tool, err)
		}
	}
	if opts.Senders == 0 {
		opts.Senders = 4
	}
	if opts.Senders < 1 || opts.Senders > 64 {
		return nil, fmt.Errorf("testbed: %d senders, want 1..64", opts.Senders)
	}
	if opts.Rate == 0 {
		opts.Rate = 2_000_000_000
	}
	if opts.Buffer == 0 {
		opts.Buffer = 128 << 10
	}
	if opts.Burst == 0 {
		opts.Burst = 32 << 10
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if opts.LockWait == 0 {
		opts.LockWait = 3 * time.Minute
	}
	sub := opts.Subnet
	if sub == 0 {
		h := fnv.New32a()
		h.Write([]byte("incast/" + name))
		sub = int(h.Sum32()%250) + 1
	}
	if sub < 1 || sub > 254 {
		return nil, fmt.Errorf("testbed: subnet %d out of 1..254", sub)
	}
	lock, err := acquire(name, opts.LockWait)
	if err != nil {
		return nil, err
	}
	if err := cleanup(name); err != nil {
		lock.Close()
		return nil, err
	}
	in := &Incast{
		Name:       name,
		ReceiverNS: Prefix(name) + "rcv",
		BridgeNS:   Prefix(name) + "br",
		Bottleneck: "p-rcv",
		HostDev:    "eth0",
		ReceiverIP: net.IPv4(198, 18, byte(sub), 100).To4(),
		Opts:       opts,
		tb:         &Testbed{Name: name, procs: map[*Proc]struct{}{}, lock: lock},
	}
	for i := 0; i < opts.Senders; i++ {
		in.SenderNS = append(in.SenderNS, fmt.Sprintf("%ss%d", Prefix(name), i))
		in.SenderIP = append(in.SenderIP, net.IPv4(198, 18, byte(sub), byte(i+1)).To4())
	}
	if err := in.build(); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

func (in *Incast) build() error {
	for _, ns := range append([]string{in.BridgeNS, in.ReceiverNS}, in.SenderNS...) {
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	brNS, err := netns.GetFromName(in.BridgeNS)
	if err != nil {
		return fmt.Errorf("testbed: open netns %s: %w", in.BridgeNS, err)
	}
	defer brNS.Close()
	hb, err := netlink.NewHandleAt(brNS)
	if err != nil {
		return fmt.Errorf("testbed: netlink in %s: %w", in.BridgeNS, err)
	}
	defer hb.Close()
	if lo, err := hb.LinkByName("lo"); err == nil {
		hb.LinkSetUp(lo)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: in.Opts.MTU}}
	if err := hb.LinkAdd(br); err != nil {
		return fmt.Errorf("testbed: create bridge: %w", err)
	}
	if err := hb.LinkSetUp(br); err != nil {
		return fmt.Errorf("testbed: bridge up: %w", err)
	}

	type host struct {
		ns, port string
		ip       net.IP
	}
	hosts := []host{{in.ReceiverNS, in.Bottleneck, in.ReceiverIP}}
	for i, ns := range in.SenderNS {
		hosts = append(hosts, host{ns, fmt.Sprintf("p-s%d", i), in.SenderIP[i]})
	}
	for _, h := range hosts {
		if err := in.addHost(hb, brNS, br, h.ns, h.port, h.ip); err != nil {
			return err
		}
	}
	// The bottleneck: tbf on the bridge's port towards the receiver.
	if err := in.SetBottleneck(in.Opts.Rate, in.Opts.Buffer, in.Opts.Burst); err != nil {
		return err
	}
	// Wait (bounded) for every port to forward.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		up := 0
		for _, h := range hosts {
			if l, err := hb.LinkByName(h.port); err == nil && l.Attrs().OperState == netlink.OperUp {
				up++
			}
		}
		if up == len(hosts) {
			break
		}
		if time.Now().After(deadline) || i > 500 {
			return errors.New("testbed: bridge ports did not come up within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// addHost creates the veth pair of one host: HostDev with ip in namespace
// ns, its peer port in the bridge namespace, enslaved to br.
func (in *Incast) addHost(hb *netlink.Handle, brNS netns.NsHandle, br *netlink.Bridge, ns, port string, ip net.IP) error {
	hn, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("testbed: open netns %s: %w", ns, err)
	}
	defer hn.Close()
	hh, err := netlink.NewHandleAt(hn)
	if err != nil {
		return fmt.Errorf("testbed: netlink in %s: %w", ns, err)
	}
	defer hh.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: in.HostDev, MTU: in.Opts.MTU, TxQLen: 1000},
		PeerName:      port,
		PeerNamespace: netlink.NsFd(brNS),
		PeerMTU:       uint32(in.Opts.MTU),
		PeerTxQLen:    1000,
	}
	if err := hh.LinkAdd(veth); err != nil {
		return fmt.Errorf("testbed: create veth for %s: %w", ns, err)
	}
	p, err := hb.LinkByName(port)
	if err != nil {
		return fmt.Errorf("testbed: %s: %w", port, err)
	}
	if err := hb.LinkSetMaster(p, br); err != nil {
		return fmt.Errorf("testbed: enslave %s: %w", port, err)
	}
	if err := hb.LinkSetUp(p); err != nil {
		return fmt.Errorf("testbed: %s up: %w", port, err)
	}
	lo, err := hh.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("testbed: lo: %w", err)
	}
	if err := hh.LinkSetUp(lo); err != nil {
		return fmt.Errorf("testbed: lo up: %w", err)
	}
	l, err := hh.LinkByName(in.HostDev)
	if err != nil {
		return fmt.Errorf("testbed: %s: %w", in.HostDev, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}
	if err := hh.AddrAdd(l, a); err != nil {
		return fmt.Errorf("testbed: add %s in %s: %w", a, ns, err)
	}
	if err := hh.LinkSetUp(l); err != nil {
		return fmt.Errorf("testbed: %s up in %s: %w", in.HostDev, ns, err)
	}
	return nil
}

// SetBottleneck (re)installs the bottleneck: tbf at rateBps with a queue of
// buffer bytes and a bucket of burst bytes.
func (in *Incast) SetBottleneck(rateBps uint64, buffer, burst int) error {
	tc := func(args ...string) error {
		return run("tc", append([]string{"-n", in.BridgeNS}, args...)...)
	}
	tc("qdisc", "del", "dev", in.Bottleneck, "root") // none yet: not an error
	return tc("qdisc", "add", "dev", in.Bottleneck, "root", "tbf",
		"rate", strconv.FormatUint(rateBps, 10)+"bit", "burst", strconv.Itoa(burst), "limit", strconv.Itoa(buffer))
}

var qdiscDroppedRe = regexp.MustCompile(`dropped (\d+)`)

// BottleneckDrops returns the packets the bottleneck queue has dropped.
func (in *Incast) BottleneckDrops() (uint64, error) {
	out, err := output("tc", "-n", in.BridgeNS, "-s", "qdisc", "show", "dev", in.Bottleneck)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, m := range qdiscDroppedRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseUint(m[1], 10, 64)
		n += v
	}
	return n, nil
}

// ReceiverRxBytes returns the bytes the receiver's interface has received:
// whole frames, Ethernet header included (a limit held exactly on IP bytes
// reads about 1.01 of it at MTU 1500).
func (in *Incast) ReceiverRxBytes() (uint64, error) {
	h, err := netns.GetFromName(in.ReceiverNS)
	if err != nil {
		return 0, fmt.Errorf("testbed: open netns %s: %w", in.ReceiverNS, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return 0, fmt.Errorf("testbed: netlink in %s: %w", in.ReceiverNS, err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(in.HostDev)
	if err != nil {
		return 0, fmt.Errorf("testbed: %s in %s: %w", in.HostDev, in.ReceiverNS, err)
	}
	if l.Attrs().Statistics == nil {
		return 0, fmt.Errorf("testbed: no statistics for %s", in.HostDev)
	}
	return l.Attrs().Statistics.RxBytes, nil
}

// Sysctl sets key=value in every host namespace (senders and receiver).
func (in *Incast) Sysctl(key, value string) error {
	for _, ns := range append([]string{in.ReceiverNS}, in.SenderNS...) {
		if err := in.tb.Sysctl(ns, key, value); err != nil {
			return err
		}
	}
	return nil
}

// SetECN turns ECN on (tcp_ecn=1) or back to the default (2) on every host.
func (in *Incast) SetECN(on bool) error {
	v := "2"
	if on {
		v = "1"
	}
	return in.Sysctl("net.ipv4.tcp_ecn", v)
}

// SetReceiverCC makes the receiver's sockets towards the senders use cc
// ("" for the namespace default), with a per-route congctl: DCTCP needs it
// at both ends, and the workload server sets none itself.
func (in *Incast) SetReceiverCC(cc string) error {
	sub := &net.IPNet{IP: in.ReceiverIP.Mask(net.CIDRMask(24, 32)), Mask: net.CIDRMask(24, 32)}
	args := []string{"-n", in.ReceiverNS, "route", "replace", sub.String(), "dev", in.HostDev, "proto", "kernel",
		"scope", "link", "src", in.ReceiverIP.String()}
	if cc != "" {
		args = append(args, "congctl", cc)
	}
	return run("ip", args...)
}

// ReceiverAddr returns the receiver's address and port as host:port.
func (in *Incast) ReceiverAddr(port int) string {
	return net.JoinHostPort(in.ReceiverIP.String(), strconv.Itoa(port))
}

// StartServer starts `bin workload serve` in the receiver namespace inside
// the cgroup at cgroupDir ("" for none) and waits at most 10s for it.
func (in *Incast) StartServer(bin, cgroupDir string, port int) (*Proc, error) {
	p := in.tb.Command(in.ReceiverNS, cgroupDir, bin, "workload", "serve", "--listen", net.JoinHostPort(in.ReceiverIP.String(), strconv.Itoa(port)))
	w := &lineWatcher{prefix: "listening", seen: make(chan struct{})}
	var stderr syncBuffer
	p.Cmd.Stdout, p.Cmd.Stderr = w, &stderr
	if err := p.Start(); err != nil {
		return nil, err
	}
	select {
	case <-w.seen:
		return p, nil
	case <-p.Done():
		return nil, fmt.Errorf("testbed: workload server exited: %v: %s", p.Wait(), strings.TrimSpace(stderr.String()))
	case <-time.After(10 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("testbed: workload server not listening after 10s: %s", strings.TrimSpace(stderr.String()))
	}
}

// IncastResult is one run of every sender at once.
type IncastResult struct {
	Senders []*workload.Result
	// Sums and extremes over the senders.
	Goodput     float64 // bulk bits/s the receiver read, all senders
	Retransmits uint64
	DeliveredCE uint64
	RPCP50      float64 // median over senders of their RPC P50, us
	RPCP99      float64 // worst sender's RPC P99, us
	RPCCount    int64
	// Drops are the bottleneck queue's drops from the end of the warm-up
	// (as the senders reach it, within a few hundred ms) to the end of the
	// run, the window the retransmissions are counted in; DropsRun over the
	// whole run, connection set-up and slow start included.
	Drops    uint64
	DropsRun uint64
	// RxBps is what the receiver's interface received in the measurement
	// window (frames, Ethernet headers included), bits/s.
	RxBps float64
}

// Run runs `bin workload run` with cfg (Addr is filled in) in every sender
// namespace at once and sums the results. Bounded by cfg's warm-up and
// duration plus 30s.
func (in *Incast) Run(ctx context.Context, bin string, cfg workload.Config, port int) (*IncastResult, error) {
	return in.RunJobs(ctx, bin, []IncastJob{{cfg, port}})
}

// IncastJob is one client configuration and the receiver's port it talks to.
type IncastJob struct {
	Cfg  workload.Config
	Port int
}

// RunJobs runs every job from every sender at once (one client process per
// sender and job: with the receiver's servers on separate ports, bulk and
// RPC traffic are served by separate processes, as netperf does in the
// seed), and sums the results. The jobs share the warm-up and duration of
// the first.
func (in *Incast) RunJobs(ctx context.Context, bin string, jobs []IncastJob) (*IncastResult, error) {
	if len(jobs) == 0 {
		return nil, errors.New("testbed: no incast job")
	}
	cfg := jobs[0].Cfg
	drops0, err := in.BottleneckDrops()
	if err != nil {
		return nil, err
	}
	n := len(in.SenderNS) * len(jobs)
	res := make([]*workload.Result, n)
	errs := make([]error, n)
	// The clients connect (~100 ms: exec, connect), warm up, then measure.
	dropsW := make(chan uint64, 1)
	type rxAt struct {
		b  uint64
		at time.Time
	}
	rxW, rxE := make(chan rxAt, 1), make(chan rxAt, 1)
	warm := time.AfterFunc(cfg.Warmup+200*time.Millisecond, func() {
		if b, err := in.ReceiverRxBytes(); err == nil {
			rxW <- rxAt{b, time.Now()}
		}
		n, err := in.BottleneckDrops()
		if err != nil {
			n = drops0
		}
		dropsW <- n
	})
	defer warm.Stop()
	// The window's end, a little before the clients stop (they connect
	// about 100 ms after the start).
	end := time.AfterFunc(cfg.Warmup+cfg.Duration, func() {
		if b, err := in.ReceiverRxBytes(); err == nil {
			rxE <- rxAt{b, time.Now()}
		}
	})
	defer end.Stop()
	var wg sync.WaitGroup
	for j, job := range jobs {
		c := job.Cfg
		c.Addr = in.ReceiverAddr(job.Port)
		c.Warmup, c.Duration = cfg.Warmup, cfg.Duration
		for i, ns := range in.SenderNS {
			k := j*len(in.SenderNS) + i
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[k], errs[k] = in.tb.runClient(ctx, ns, "", bin, c)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	drops1, err := in.BottleneckDrops()
	if err != nil {
		return nil, err
	}
	r := &IncastResult{Senders: res, DropsRun: drops1 - drops0, Drops: drops1 - drops0}
	select {
	case w := <-dropsW:
		r.Drops = drops1 - w
	default: // the run ended before its warm-up did: count the whole run
	}
	select {
	case a := <-rxW:
		select {
		case b := <-rxE:
			if secs := b.at.Sub(a.at).Seconds(); secs > 0 {
				r.RxBps = float64(b.b-a.b) * 8 / secs
			}
		default:
		}
	default:
	}
	var p50s []float64
	for k, s := range res {
		r.Goodput += s.Goodput
		r.Retransmits += s.Retransmits
		r.DeliveredCE += s.DeliveredCE
		if jobs[k/len(in.SenderNS)].Cfg.RPCs == 0 {
			continue
		}
		r.RPCCount += s.RPC.Count
		r.RPCP99 = max(r.RPCP99, s.RPC.P99)
		p50s = append(p50s, s.RPC.P50)
	}
	if n := len(p50s); n > 0 {
		for i := 1; i < n; i++ { // insertion sort: a handful of senders
			for j := i; j > 0 && p50s[j] < p50s[j-1]; j-- {
				p50s[j], p50s[j-1] = p50s[j-1], p50s[j]
			}
		}
		r.RPCP50 = (p50s[(n-1)/2] + p50s[n/2]) / 2
	}
	return r, nil
}

// Close stops the processes the testbed started and removes its
// namespaces (and with them every veth and the bridge). Safe to call twice.
func (in *Incast) Close() error { return in.tb.Close() }

// CleanupIncast removes what a crashed incast testbed named name left.
func CleanupIncast(name string) error { return Cleanup(name) }
