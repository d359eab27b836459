package netlab

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/spawn"
	"github.com/hbm-dev/hbm/internal/testutil"
)

func TestConfigValidate(t *testing.T) {
	good := Config{Hosts: []string{"a", "b", "c"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b", "c"}}},
		Bottlenecks: []Bottleneck{{Link: "l", To: "c", Rate: 1e9, Buffer: 1 << 16}}, Cgroups: []string{"g", "g/c"}}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	good.CPUs = map[string][]int{"a": {0}, "l": {0}}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"no hosts":          {},
		"repeated host":     {Hosts: []string{"a", "a"}},
		"bad host":          {Hosts: []string{"A-b"}},
		"long host":         {Hosts: []string{"abcdefghijklmnopq"}},
		"unknown host":      {Hosts: []string{"a"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b"}}}},
		"one-host link":     {Hosts: []string{"a"}, Links: []Link{{Name: "l", Hosts: []string{"a"}}}},
		"bad bottleneck":    {Hosts: []string{"a", "b"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b"}}}, Bottlenecks: []Bottleneck{{Link: "l", To: "x", Rate: 1, Buffer: 1}}},
		"no rate":           {Hosts: []string{"a", "b"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b"}}}, Bottlenecks: []Bottleneck{{Link: "l", To: "b", Buffer: 1}}},
		"bad cgroup name":   {Hosts: []string{"a"}, Cgroups: []string{"../x"}},
		"orphan cgroup":     {Hosts: []string{"a"}, Cgroups: []string{"p/x", "p"}},
		"empty cgroup part": {Hosts: []string{"a"}, Cgroups: []string{"p", "p//x"}},
		"cpus of nothing":   {Hosts: []string{"a"}, CPUs: map[string][]int{"x": {0}}},
		"cpus of a pair":    {Hosts: []string{"a", "b"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b"}}}, CPUs: map[string][]int{"l": {0}}},
		"cpus ambiguous":    {Hosts: []string{"a", "b", "l"}, Links: []Link{{Name: "l", Hosts: []string{"a", "b", "l"}}}, CPUs: map[string][]int{"l": {0}}},
		"no cpus":           {Hosts: []string{"a"}, CPUs: map[string][]int{"a": {}}},
		"negative cpu":      {Hosts: []string{"a"}, CPUs: map[string][]int{"a": {-1}}},
		"cpu out of range":  {Hosts: []string{"a"}, CPUs: map[string][]int{"a": {maxCPU}}},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTokenOf(t *testing.T) {
	for in, want := range map[string]string{
		"hbl0123abcd-snd": "0123abcd", "hbl0123abcd-sw-wire": "0123abcd", "hbm-lab-89abcdef": "89abcdef",
		"hbl0123abc-snd": "", "hblxyzxyzxy-snd": "", "hbm-0123abcd-snd": "", "hbmev123-snd": "", "other": "",
	} {
		if got := tokenOf(in); got != want {
			t.Errorf("tokenOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBufferCap(t *testing.T) {
	var b Buffer
	chunk := strings.Repeat("x", 1000)
	for i := 0; i < 2*maxBuffer/1000; i++ {
		b.Write([]byte(chunk))
	}
	if n := len(b.Bytes()); n != maxBuffer {
		t.Fatalf("kept %d bytes, want %d", n, maxBuffer)
	}
	if !strings.HasSuffix(b.String(), "bytes dropped]") {
		t.Errorf("no note of the dropped bytes: %q", b.String()[len(b.String())-40:])
	}
}

func requirePriv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs root and namespaces")
	}
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	if _, err := cgroup.Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
}

// reach connects from host from to a listener on ip in host to, and
// sends a byte through.
func reach(lab *Lab, from, to string, ip net.IP) error {
	var ln net.Listener
	if err := InNetns(lab.Host(to).NS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		got <- err
	}()
	if err := InNetns(lab.Host(from).NS, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte{1})
		return err
	}); err != nil {
		return err
	}
	select {
	case err := <-got:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("nothing received")
	}
}

// output runs p (at most 15s) and returns what it printed, failing the test
// if it does not exit cleanly.
func output(t *testing.T, p *Proc) string {
	t.Helper()
	var out Buffer
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &out
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitTimeout(15 * time.Second); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return out.String()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestLab(t *testing.T) {
	requirePriv(t)
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	allowed := cpusOf(&set)
	firstCPU, lastCPU := allowed[0], allowed[len(allowed)-1]
	hostECN, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_ecn")
	lab, err := New(Config{
		Hosts:       []string{"a", "b", "c"},
		Links:       []Link{{Name: "ab", Hosts: []string{"a", "b"}}, {Name: "star", Hosts: []string{"a", "b", "c"}}},
		Bottlenecks: []Bottleneck{{Link: "star", To: "c", Rate: 1e9, Buffer: 64 << 10}},
		Cgroups:     []string{"work"},
		IPv6:        true,
		// Host a on the last CPU this test may use (CPU 0 on a machine of
		// one), the star's switch on the first.
		CPUs: map[string][]int{"a": {lastCPU}, "star": {firstCPU}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	objs := []string{filepath.Join(netnsDir, lab.Host("a").NS), filepath.Join(netnsDir, lab.Link("star").Switch), lab.Cgroup("work")}
	for _, o := range objs {
		if !exists(o) {
			t.Fatalf("%s missing", o)
		}
	}
	if lab.Link("ab").Switch != "" || lab.Link("star").Switch == "" {
		t.Errorf("switches: ab %q star %q; want a veth pair and a bridge", lab.Link("ab").Switch, lab.Link("star").Switch)
	}
	if st, err := ReadQdisc(lab.Link("star").Switch, lab.Link("star").Ports["c"]); err != nil || st.Kind != "tbf" {
		t.Errorf("bottleneck qdisc: %+v, %v", st, err)
	}

	// Addresses and carrier, from inside a namespace and a cgroup.
	a, c := lab.Host("a"), lab.Host("c")
	// At a nice of 7 (Proc.Nice): field 19 of /proc/self/stat.
	// On host a's CPU (Config.CPUs): Cpus_allowed_list, and the RPS CPUs
	// of a's interfaces.
	p := lab.Command("a", lab.Cgroup("work"), "sh", "-c", "echo nice=$(cut -d' ' -f19 /proc/self/stat); cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status; "+
		"for d in ab star; do echo rps-$d=$(cat /sys/class/net/$d/queues/rx-0/rps_cpus); done; ip -o addr show").Nice(7)
	out := output(t, p)
	t.Logf("in a:\n%s", out)
	for _, want := range []string{"nice=7\n", lab.CgroupPath("work") + "\n", "Cpus_allowed_list:\t" + cpuList([]int{lastCPU}) + "\n", a.IP4["ab"].String() + "/24", a.IP4["star"].String() + "/24", a.IP6["ab"].String() + "/64"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	swOut := output(t, lab.Command(lab.Link("star").Switch, "", "cat", "/sys/class/net/"+lab.Link("star").Ports["c"]+"/queues/rx-0/rps_cpus"))
	masks := map[string]string{"ab": "", "star": "", "switch": "rps-switch=" + strings.TrimSpace(swOut)}
	for _, line := range append(strings.Split(out, "\n"), masks["switch"]) {
		for name := range masks {
			if v, ok := strings.CutPrefix(line, "rps-"+name+"="); ok {
				masks[name] = v
			}
		}
	}
	for name, cpu := range map[string]int{"ab": lastCPU, "star": lastCPU, "switch": firstCPU} {
		if got, err := parseMask(masks[name]); err != nil || !slices.Equal(got, []int{cpu}) {
			t.Errorf("RPS CPUs of %s: %q (%v, %v), want [%d]", name, masks[name], got, err, cpu)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "fd00:") && strings.Contains(line, "tentative") {
			t.Errorf("the lab's IPv6 address is still tentative (nodad missing): %s", line)
		}
	}

	// Reachability: a over the veth pair to b, and over the bridge (through
	// the bottleneck) to c, over IPv4 and IPv6.
	for _, to := range []struct{ host, link string }{{"b", "ab"}, {"c", "star"}} {
		for _, ip := range []net.IP{lab.Host(to.host).IP4[to.link], lab.Host(to.host).IP6[to.link]} {
			if err := reach(lab, "a", to.host, ip); err != nil {
				t.Errorf("a to %s (%s): %v", to.host, ip, err)
			}
		}
	}

	// Sysctls are the namespace's: the host's own value does not move.
	if err := lab.SetECN(true); err != nil {
		t.Fatal(err)
	}
	if v, err := lab.ReadSysctl("c", "net.ipv4.tcp_ecn"); err != nil || v != "1" {
		t.Errorf("tcp_ecn in c = %q, %v", v, err)
	}
	if now, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_ecn"); string(now) != string(hostECN) {
		t.Errorf("host tcp_ecn changed from %q to %q", hostECN, now)
	}

	// Qdiscs install, replace each other, and go.
	for _, q := range []Qdisc{TBF{Rate: 200e6}, HTB{Classes: []HTBClass{{Rate: 200e6}}},
		HTB{Classes: []HTBClass{{Rate: 1e8, Ports: []int{5201}}, {Rate: 2e8, Ports: []int{5202}, Leaf: &TBF{Rate: 2e8}}}}} {
		if err := lab.SetQdisc("a", "ab", q); err != nil {
			t.Fatalf("%T: %v", q, err)
		}
		st, err := ReadQdisc(a.NS, a.Dev["ab"])
		if err != nil || (st.Kind != "tbf" && st.Kind != "htb") {
			t.Errorf("%T: root qdisc %+v, %v", q, st, err)
		}
		// Classes by port classify IPv4 and IPv6 alike (hbm eval
		// --ipv6): one u32 filter per port and family.
		if h, ok := q.(HTB); ok && len(h.Classes) == 2 {
			out, err := exec.Command("tc", "-n", a.NS, "filter", "show", "dev", a.Dev["ab"]).CombinedOutput()
			if err != nil {
				t.Fatalf("tc filter show: %v: %s", err, out)
			}
			for _, fam := range []string{"protocol ip ", "protocol ipv6 "} {
				n := 0
				for _, line := range strings.Split(string(out), "\n") {
					if strings.Contains(line, fam) && strings.Contains(line, "flowid") {
						n++
					}
				}
				if n != 2 {
					t.Errorf("%d port filters of %q, want 2:\n%s", n, fam, out)
				}
			}
		}
	}
	for i := 0; i < 2; i++ {
		if err := lab.SetQdisc("a", "ab", NoQdisc{}); err != nil {
			t.Fatalf("NoQdisc #%d: %v", i+1, err)
		}
	}
	if st, _ := ReadQdisc(a.NS, a.Dev["ab"]); st.Kind == "tbf" || st.Kind == "htb" {
		t.Errorf("qdisc %s left after NoQdisc", st.Kind)
	}

	// Per-route congestion control, set and cleared.
	routes := func() string {
		out, _ := exec.Command("ip", "-n", c.NS, "route", "show").CombinedOutput()
		return string(out)
	}
	if err := lab.RouteCC("c", "reno"); err != nil {
		t.Fatal(err)
	}
	if r := routes(); !strings.Contains(r, "congctl reno") {
		t.Errorf("routes without congctl reno:\n%s", r)
	}
	if err := lab.RouteCC("c", ""); err != nil {
		t.Fatal(err)
	}
	if r := routes(); strings.Contains(r, "congctl") {
		t.Errorf("congctl left:\n%s", r)
	}

	// Close kills what runs (its whole process group) and removes everything.
	sleeper := lab.Command("b", "", "sh", "-c", "sleep 600 & sleep 600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
	select {
	case <-sleeper.Done():
	default:
		t.Error("Close left a process running")
	}
	for _, o := range objs {
		if exists(o) {
			t.Errorf("%s left after Close", o)
		}
	}
	if exists(filepath.Join(lockDir, lab.Token+".lock")) {
		t.Error("token lock file left after Close")
	}
	if err := lab.Command("a", "", "true").Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// The helper process: builds a lab (NETLAB_HELPER=build) and waits to be
// killed, or sweeps (NETLAB_HELPER=sweep) and exits.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("NETLAB_HELPER") {
	case "build":
		lab, err := New(Config{Hosts: []string{"a", "b"}, Links: []Link{{Name: "ab", Hosts: []string{"a", "b"}}}, Cgroups: []string{"g"}})
		if err != nil {
			t.Fatal(err)
		}
		pd, err := NewPinDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := pd.Mark("test"); err != nil {
			t.Fatal(err)
		}
		sleeper := lab.Command("a", lab.Cgroup("g"), "sleep", "600")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("built " + filepath.Join(netnsDir, lab.Host("a").NS) + " " + lab.Cgroup("g") + " " + pd.Path + "\n")
		time.Sleep(60 * time.Second)
		os.Exit(3) // never reached in the test: killed first
	case "sweep":
		Sweep(func(f string, a ...any) { t.Logf(f, a...) })
		SweepPinDirs(nil, func(string) error { return nil })
	default:
		t.Skip("helper process only")
	}
}

func helper(t *testing.T, mode string, wrap ...string) *exec.Cmd {
	args := append(wrap, os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "NETLAB_HELPER="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// TestLeftovers: a killed owner's lab (namespaces, cgroup, processes, pin
// directory) is removed by the next sweep; a live one is never, not even by
// a sweep running in another PID namespace (where the owner's PID means
// nothing).
func TestLeftovers(t *testing.T) {
	requirePriv(t)
	testutil.RequireCommand(t, "unshare")

	// A live lab survives a sweep here and one from a new PID namespace.
	live, err := New(Config{Hosts: []string{"a"}, Cgroups: []string{"g"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	livePin, err := NewPinDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { livePin.Close() })
	liveObjs := []string{filepath.Join(netnsDir, live.Host("a").NS), live.Cgroup("g"), livePin.Path}
	Sweep(nil)
	SweepPinDirs(nil, nil)
	sweep := helper(t, "sweep", "unshare", "--pid", "--fork", "--mount-proc")
	var out bytes.Buffer
	sweep.Stdout, sweep.Stderr = &out, &out
	if err := spawn.Run(sweep); err != nil {
		t.Fatalf("sweep in a new PID namespace: %v\n%s", err, out.String())
	}
	for _, o := range liveObjs {
		if !exists(o) {
			t.Fatalf("a sweep removed %s of a live lab", o)
		}
	}

	// A killed owner's lab goes at the next sweep, marker undone.
	cmd := helper(t, "build")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := spawn.Start(cmd); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "built ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	var objs []string
	select {
	case l, ok := <-lines:
		if !ok {
			cmd.Wait()
			t.Fatal("helper ended before building")
		}
		objs = strings.Fields(l)[1:]
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("helper did not build within 30s")
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, o := range objs {
		if !exists(o) {
			t.Fatalf("%s gone before the sweep", o)
		}
	}
	Sweep(t.Logf)
	var undone []string
	// The live pin directory holds undo back; release it first.
	livePin.Close()
	SweepPinDirs(t.Logf, func(m string) error { undone = append(undone, m); return nil })
	for _, o := range objs {
		if exists(o) {
			t.Errorf("%s of a killed owner left after the sweep", o)
		}
	}
	// Other dead owners' markers may be undone too (a killed run's).
	if !slices.Contains(undone, "test") {
		t.Errorf("markers undone: %v, want the killed helper's \"test\"", undone)
	}
	for _, o := range liveObjs[:2] {
		if !exists(o) {
			t.Errorf("live %s removed", o)
		}
	}
}

// Proc.Nice runs the command under nice(1) inside the namespace, and leaves
// it alone at 0.
func TestProcNice(t *testing.T) {
	l := &Lab{hosts: map[string]*Host{}}
	p := l.commandNS("ns1", "", "/bin/hbm", "workload", "serve").Nice(-20)
	if got, want := strings.Join(p.Cmd.Args, " "), "ip netns exec ns1 nice -n -20 /bin/hbm workload serve"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	p = l.commandNS("ns1", "", "/bin/hbm", "workload", "serve").Nice(0).Pin(nil)
	if got, want := strings.Join(p.Cmd.Args, " "), "ip netns exec ns1 /bin/hbm workload serve"; got != want {
		t.Errorf("nice 0: args %q, want %q", got, want)
	}
	p = l.commandNS("ns1", "", "/bin/hbm", "workload", "serve").Pin([]int{3, 0, 1}).Nice(5)
	if got, want := strings.Join(p.Cmd.Args, " "), "ip netns exec ns1 nice -n 5 taskset -c 0-1,3 /bin/hbm workload serve"; got != want {
		t.Errorf("pinned: args %q, want %q", got, want)
	}
}

// parseMask reads a sysfs CPU bitmap ("3", "00000001,00000002").
func parseMask(s string) ([]int, error) {
	words := strings.Split(strings.TrimSpace(s), ",")
	var cpus []int
	for i := range words {
		w, err := strconv.ParseUint(words[len(words)-1-i], 16, 32)
		if err != nil {
			return nil, err
		}
		for b := 0; b < 32; b++ {
			if w&(1<<b) != 0 {
				cpus = append(cpus, 32*i+b)
			}
		}
	}
	return cpus, nil
}

func TestCPUFormats(t *testing.T) {
	for _, c := range []struct {
		cpus       []int
		list, mask string
	}{
		{[]int{0}, "0", "1"},
		{[]int{1}, "1", "2"},
		{[]int{0, 1, 2, 3, 5}, "0-3,5", "2f"},
		{[]int{35, 1}, "1,35", "8,00000002"},
		{[]int{2, 2, 3}, "2-3", "c"},
	} {
		if got := cpuList(c.cpus); got != c.list {
			t.Errorf("cpuList(%v) = %q, want %q", c.cpus, got, c.list)
		}
		if got := cpuMask(c.cpus); got != c.mask {
			t.Errorf("cpuMask(%v) = %q, want %q", c.cpus, got, c.mask)
		}
	}
}
