package eval

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/testbed"
)

// Everything an eval creates is named after its process id, so that two
// evals never collide and a crashed one's leftovers can be told apart from a
// live one's: network namespaces hbmev<pid>-<host>, cgroups /hbm-ev<pid>/...,
// the pin directory /sys/fs/bpf/hbm-eval-<pid>.
const (
	netnsDir     = "/run/netns"
	nsPrefix     = "hbmev"
	cgroupPrefix = "hbm-ev"
	pinPrefix    = "/sys/fs/bpf/hbm-eval-"
	firstPort    = 5201
	cmdTimeout   = 15 * time.Second
)

// topology is a scenario's hosts, links, switches and cgroups, built.
type topology struct {
	s      *Scenario
	id     string // "hbmev<pid>"
	bin    string
	log    func(format string, args ...any)
	hosts  map[string]*host
	links  []*tlink
	cgRoot string            // "/hbm-ev<pid>"
	groups map[string]string // cgroup or host name -> cgroup directory

	mu    sync.Mutex
	procs map[*proc]struct{}
}

type host struct {
	name string
	ns   string
	dev  map[string]string // link name -> interface
	addr map[string]net.IP // link name -> address
}

type tlink struct {
	name  string
	idx   int
	sw    string            // switch namespace, "" for a veth pair
	ports map[string]string // host -> switch port toward it
}

func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func output(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// CleanupLeftovers removes what crashed evals left behind: their
// namespaces (killing what runs inside), cgroups and pin directories. Those
// of live evals are left alone.
func CleanupLeftovers(log func(string, ...any)) {
	dead := func(name, prefix string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return false
		}
		num := rest
		if i := strings.IndexByte(rest, '-'); i >= 0 {
			num = rest[:i]
		}
		pid, err := strconv.Atoi(num)
		return err == nil && pid != os.Getpid() && !alive(pid)
	}
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			if dead(e.Name(), nsPrefix) {
				log("removing leftover namespace %s", e.Name())
				deleteNetns(e.Name())
			}
		}
	}
	if mnt, err := cgroup.Mount(); err == nil {
		if entries, err := os.ReadDir(mnt); err == nil {
			for _, e := range entries {
				if e.IsDir() && dead(e.Name(), cgroupPrefix) {
					log("removing leftover cgroup /%s", e.Name())
					removeCgroup("/" + e.Name())
				}
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Dir(pinPrefix)); err == nil {
		for _, e := range entries {
			if dead(e.Name(), filepath.Base(pinPrefix)) {
				log("removing leftover pin directory %s", filepath.Join(filepath.Dir(pinPrefix), e.Name()))
				os.RemoveAll(filepath.Join(filepath.Dir(pinPrefix), e.Name()))
			}
		}
	}
}

// deleteNetns kills the processes in namespace ns and deletes it.
func deleteNetns(ns string) error {
	for i := 0; i < 50; i++ {
		out, _ := output("ip", "netns", "pids", ns)
		pids := strings.Fields(out)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	err := run("ip", "netns", "del", ns)
	if _, serr := os.Stat(filepath.Join(netnsDir, ns)); serr != nil {
		return nil
	}
	return err
}

// removeCgroup kills what is left in the tree rel (cgroup.kill) and removes
// it, retrying while exited processes leave it.
func removeCgroup(rel string) error {
	mnt, err := cgroup.Mount()
	if err != nil {
		return err
	}
	dir := filepath.Join(mnt, rel)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for i := 0; ; i++ {
		err = cgroup.Remove(rel)
		if err == nil || i >= 50 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// linkSubnet is the /24 of link idx, allocated from 198.18.0.0/15.
func linkAddr(idx, hostIdx int) net.IP {
	return net.IPv4(198, byte(18+idx/256), byte(idx%256), byte(hostIdx+1)).To4()
}

// buildTopology creates the namespaces, links, bottlenecks and cgroups of s.
// On error what was built is removed.
func buildTopology(s *Scenario, bin string, log func(string, ...any)) (*topology, error) {
	id := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	t := &topology{
		s: s, id: id, bin: bin, log: log,
		hosts:  map[string]*host{},
		cgRoot: fmt.Sprintf("/%s%d", cgroupPrefix, os.Getpid()),
		groups: map[string]string{},
		procs:  map[*proc]struct{}{},
	}
	if err := t.build(); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *topology) build() error {
	for _, h := range t.s.Hosts {
		ns := t.id + "-" + h
		deleteNetns(ns)
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		t.hosts[h] = &host{name: h, ns: ns, dev: map[string]string{}, addr: map[string]net.IP{}}
		for k, v := range map[string]string{
			"net.ipv4.tcp_no_metrics_save":       "1", // no cached ssthresh from one run to the next
			"net.ipv6.conf.all.disable_ipv6":     "1", // no IPv6 chatter (DAD, MLD) on the links
			"net.ipv6.conf.default.disable_ipv6": "1",
		} {
			if err := nsSysctl(ns, k, v); err != nil {
				return err
			}
		}
		if err := run("ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	for li, l := range t.s.Links {
		tl := &tlink{name: l.Name, idx: li, ports: map[string]string{}}
		needSwitch := len(l.Hosts) > 2
		for _, b := range t.s.Bottlenecks {
			if b.Link == l.Name {
				needSwitch = true
			}
		}
		if needSwitch {
			tl.sw = t.id + "-sw-" + l.Name
			if err := t.buildSwitch(tl, l); err != nil {
				return err
			}
		} else if err := t.buildPair(tl, l); err != nil {
			return err
		}
		t.links = append(t.links, tl)
	}
	for _, b := range t.s.Bottlenecks {
		tl := t.link(b.Link)
		dev := tl.ports[b.To]
		if err := run("tc", "-n", tl.sw, "qdisc", "replace", "dev", dev, "root", "tbf",
			"rate", strconv.FormatUint(b.RateBps, 10)+"bit", "burst", strconv.Itoa(tbfBurst(b.RateBps)),
			"limit", strconv.Itoa(b.BufferBytes)); err != nil {
			return fmt.Errorf("bottleneck on %s toward %s: %w", b.Link, b.To, err)
		}
	}
	// Cgroups: one per scenario cgroup, one per host for its other processes.
	removeCgroup(t.cgRoot)
	for _, name := range append(append([]string{}, t.s.Hosts...), cgroupNames(t.s)...) {
		g, err := cgroup.Create(t.cgRoot + "/" + name)
		if err != nil {
			return err
		}
		t.groups[name] = g.Dir
	}
	return nil
}

func cgroupNames(s *Scenario) []string {
	var out []string
	for _, c := range s.Cgroups {
		out = append(out, c.Name)
	}
	return out
}

// tbfBurst is a tbf bucket: 2 ms at the rate, at least 64 KB so a full GSO
// packet fits (as testbed.TBFBurst).
func tbfBurst(bps uint64) int { return max(int(bps/8*2/1000), 64<<10) }

func (t *topology) link(name string) *tlink {
	for _, l := range t.links {
		if l.name == name {
			return l
		}
	}
	return nil
}

func nsHandle(ns string) (*netlink.Handle, netns.NsHandle, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, 0, fmt.Errorf("open netns %s: %w", ns, err)
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		h.Close()
		return nil, 0, fmt.Errorf("netlink in %s: %w", ns, err)
	}
	return nh, h, nil
}

// veth creates a veth pair: devA in nsA, devB in nsB.
func veth(nsA, devA, nsB, devB string) error {
	ha, fa, err := nsHandle(nsA)
	if err != nil {
		return err
	}
	defer fa.Close()
	defer ha.Close()
	_, fb, err := nsHandle(nsB)
	if err != nil {
		return err
	}
	defer fb.Close()
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: devA, MTU: 1500, TxQLen: 1000},
		PeerName:      devB,
		PeerNamespace: netlink.NsFd(fb),
		PeerMTU:       1500,
		PeerTxQLen:    1000,
	}
	if err := ha.LinkAdd(v); err != nil {
		return fmt.Errorf("create veth %s/%s - %s/%s: %w", nsA, devA, nsB, devB, err)
	}
	return nil
}

func (t *topology) addHostEnd(tl *tlink, hostName string, j int) error {
	h := t.hosts[hostName]
	dev := h.dev[tl.name]
	ip := linkAddr(tl.idx, j)
	h.addr[tl.name] = ip
	if err := run("ip", "-n", h.ns, "addr", "add", ip.String()+"/24", "dev", dev); err != nil {
		return err
	}
	return run("ip", "-n", h.ns, "link", "set", dev, "up")
}

func (t *topology) buildPair(tl *tlink, l Link) error {
	a, b := t.hosts[l.Hosts[0]], t.hosts[l.Hosts[1]]
	a.dev[l.Name] = fmt.Sprintf("ev%d-0", tl.idx)
	b.dev[l.Name] = fmt.Sprintf("ev%d-1", tl.idx)
	if err := veth(a.ns, a.dev[l.Name], b.ns, b.dev[l.Name]); err != nil {
		return err
	}
	for j, hn := range l.Hosts {
		if err := t.addHostEnd(tl, hn, j); err != nil {
			return err
		}
	}
	return nil
}

func (t *topology) buildSwitch(tl *tlink, l Link) error {
	deleteNetns(tl.sw)
	if err := run("ip", "netns", "add", tl.sw); err != nil {
		return err
	}
	if err := run("ip", "-n", tl.sw, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := run("ip", "-n", tl.sw, "link", "set", "br0", "up"); err != nil {
		return err
	}
	for j, hn := range l.Hosts {
		h := t.hosts[hn]
		h.dev[l.Name] = fmt.Sprintf("ev%d-%d", tl.idx, j)
		port := fmt.Sprintf("evs%d-%d", tl.idx, j)
		tl.ports[hn] = port
		if err := veth(h.ns, h.dev[l.Name], tl.sw, port); err != nil {
			return err
		}
		if err := run("ip", "-n", tl.sw, "link", "set", port, "master", "br0", "up"); err != nil {
			return err
		}
		if err := t.addHostEnd(tl, hn, j); err != nil {
			return err
		}
	}
	return nil
}

// nsSysctl sets key=value inside namespace ns.
func nsSysctl(ns, key, value string) error {
	return run("ip", "netns", "exec", ns, "sh", "-c", `printf '%s\n' "$1" > "$2"`, "sh", value,
		"/proc/sys/"+strings.ReplaceAll(key, ".", "/"))
}

// setAll sets a sysctl in every host namespace.
func (t *topology) setAll(key, value string) error {
	for _, h := range t.hosts {
		if err := nsSysctl(h.ns, key, value); err != nil {
			return err
		}
	}
	return nil
}

// routeCC sets the congestion control of every host's routes (congctl;
// "" clears it). DCTCP needs it at the receiving end too: a listener
// negotiates ECN with a DCTCP sender only if its own congestion control needs
// ECN, and a child namespace may not make HBM's BPF dctcp its default.
func (t *topology) routeCC(cc string) error {
	for _, h := range t.hosts {
		for _, dev := range h.dev {
			if err := testbed.SetRouteCC(h.ns, dev, cc); err != nil {
				return err
			}
		}
	}
	return nil
}

// close stops every process and removes namespaces and cgroups.
func (t *topology) close() {
	t.mu.Lock()
	procs := make([]*proc, 0, len(t.procs))
	for p := range t.procs {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	for _, h := range t.hosts {
		if err := deleteNetns(h.ns); err != nil {
			t.log("cleanup: %v", err)
		}
	}
	for _, l := range t.links {
		if l.sw != "" {
			if err := deleteNetns(l.sw); err != nil {
				t.log("cleanup: %v", err)
			}
		}
	}
	if err := removeCgroup(t.cgRoot); err != nil {
		t.log("cleanup: %v", err)
	}
}

// proc is a command running in a host's namespace and a cgroup.
type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	stderr *syncBuffer
	t      *topology
}

// start runs bin args in host's namespace, cloned straight into the cgroup
// of group (a cgroup or host name).
func (t *topology) start(hostName, group string, stdin io.Reader, stdout io.Writer, args ...string) (*proc, error) {
	h := t.hosts[hostName]
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns, t.bin}, args...)...)
	fd, err := unix.Open(t.groups[group], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", t.groups[group], err)
	}
	defer unix.Close(fd)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, UseCgroupFD: true, CgroupFD: fd}
	cmd.Stdin, cmd.Stdout = stdin, stdout
	p := &proc{cmd: cmd, done: make(chan struct{}), stderr: &syncBuffer{}, t: t}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %v: %w", cmd.Args, err)
	}
	t.mu.Lock()
	t.procs[p] = struct{}{}
	t.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		t.mu.Lock()
		delete(t.procs, p)
		t.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

func (p *proc) waitTimeout(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.kill()
		return fmt.Errorf("%v still running after %v: killed", p.cmd.Args[3:], d)
	}
}

// startServer starts a workload server on host in group, listening on port,
// and waits (at most 10s) until it listens.
func (t *topology) startServer(hostName, group string, port int) (*proc, error) {
	pr, pw := io.Pipe()
	p, err := t.start(hostName, group, nil, pw, "workload", "serve", "--listen", "0.0.0.0:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			if !once && strings.HasPrefix(sc.Text(), "listening") {
				once = true
				close(seen)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() { <-p.done; pw.Close() }()
	select {
	case <-seen:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("workload server on %s exited: %v: %s", hostName, p.err, strings.TrimSpace(p.stderr.String()))
	case <-time.After(10 * time.Second):
		p.kill()
		return nil, fmt.Errorf("workload server on %s not listening after 10s", hostName)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
