// Package netlab builds the network-namespace labs HBM's tests, benchmarks
// and `hbm eval` run on, from a declarative Config (hosts, links,
// bottlenecks, cgroups), and gives the built Lab its runtime operations:
// commands inside a host and a cgroup, sysctls, qdiscs, per-route congestion
// control, workload servers and clients, Close. Namespaces, links, addresses,
// routes and qdiscs are set up over netlink; processes are started in their
// own process group and killed as a group; leftovers of a lab whose owner
// died are removed by the next lab (see owner.go for the naming and liveness
// scheme, which holds across PID namespaces).
//
// The configuration types (this file) are plain data; the runtime types
// (Lab, Host, Proc) are what New returns.
package netlab

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Config is a lab to build.
type Config struct {
	// Hosts are the lab's hosts, one network namespace each.
	Hosts []string
	// Links join hosts: a link of two hosts without a bottleneck is a veth
	// pair; any other is a Linux bridge in a switch namespace of its own
	// with one veth per host.
	Links []Link
	// Bottlenecks are tbf queues on switch ports.
	Bottlenecks []Bottleneck
	// Cgroups are created under the lab's cgroup (/hbm-lab-TOKEN/NAME) and
	// removed by Close; processes can be started inside them. A nested
	// group is named by its path, "parent/child", after its parent.
	Cgroups []string
	// MTU of every link (default 1500).
	MTU int
	// IPv6 gives every host end an fd00::/8 address too; without it IPv6 is
	// turned off in the hosts (no DAD or MLD chatter on the links).
	IPv6 bool
	// Sysctls are set in every host namespace after it is created.
	Sysctls map[string]string
	// CPUs pins hosts and switches to CPUs, so that one machine models
	// separate ones: a host's processes (Command) run on its CPUs and the
	// packets it receives are processed there (RPS on its interfaces); a
	// switch processes the packets entering it on its link's CPUs (RPS on
	// its ports). Keys are host names and names of switched links; what is
	// not listed runs on any CPU. Without it a receiver's latency includes
	// its senders' and the switch's CPU time (docs/design.md, "The
	// testbed").
	CPUs map[string][]int
}

// Link is a segment joining hosts.
type Link struct {
	Name  string
	Hosts []string
}

// Bottleneck is a tbf qdisc on the switch port of link Link toward host To:
// Rate in bits/s, a queue of Buffer bytes, a bucket of Burst bytes (default
// 32 KB: GSO packets larger than it are segmented by tbf, so the queue
// drops single packets, as a switch does).
type Bottleneck struct {
	Link, To string
	Rate     uint64
	Buffer   int
	Burst    int
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,15}$`)

// validate checks names and references.
func (c *Config) validate() error {
	if len(c.Hosts) == 0 {
		return fmt.Errorf("netlab: no hosts")
	}
	seen := map[string]bool{}
	for _, h := range c.Hosts {
		if !nameRe.MatchString(h) || seen[h] {
			return fmt.Errorf("netlab: bad or repeated host name %q (lower case letters, digits, _; at most 16)", h)
		}
		seen[h] = true
	}
	links := map[string]bool{}
	for _, l := range c.Links {
		if !nameRe.MatchString(l.Name) || links[l.Name] {
			return fmt.Errorf("netlab: bad or repeated link name %q", l.Name)
		}
		links[l.Name] = true
		if len(l.Hosts) < 2 {
			return fmt.Errorf("netlab: link %s joins %d hosts, want at least 2", l.Name, len(l.Hosts))
		}
		for _, h := range l.Hosts {
			if !seen[h] {
				return fmt.Errorf("netlab: link %s: unknown host %q", l.Name, h)
			}
		}
	}
	for _, b := range c.Bottlenecks {
		l := c.link(b.Link)
		if l == nil || !slices.Contains(l.Hosts, b.To) {
			return fmt.Errorf("netlab: bottleneck on %s toward %s: no such link or host on it", b.Link, b.To)
		}
		if b.Rate == 0 || b.Buffer <= 0 {
			return fmt.Errorf("netlab: bottleneck on %s: rate and buffer needed", b.Link)
		}
	}
	for i, g := range c.Cgroups {
		// A nested group is "parent/child", its parent listed before it.
		parts := strings.Split(g, "/")
		for _, p := range parts {
			if !nameRe.MatchString(p) {
				return fmt.Errorf("netlab: bad cgroup name %q", g)
			}
		}
		if len(parts) > 1 && !slices.Contains(c.Cgroups[:i], strings.Join(parts[:len(parts)-1], "/")) {
			return fmt.Errorf("netlab: cgroup %q: its parent is not listed before it", g)
		}
	}
	return c.validateCPUs()
}

// validateCPUs checks that CPUs names hosts and switches and CPUs this
// process may run on.
func (c *Config) validateCPUs() error {
	if len(c.CPUs) == 0 {
		return nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("netlab: cpus: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.CPUs)) {
		if l := c.link(name); l != nil && slices.Contains(c.Hosts, name) {
			return fmt.Errorf("netlab: cpus: %s is both a host and a link", name)
		} else if l != nil && !c.switched(l) {
			return fmt.Errorf("netlab: cpus: link %s is a veth pair, not a switch: pin its hosts instead", name)
		} else if l == nil && !slices.Contains(c.Hosts, name) {
			return fmt.Errorf("netlab: cpus: %q is neither a host nor a link", name)
		}
		cpus := c.CPUs[name]
		if len(cpus) == 0 {
			return fmt.Errorf("netlab: cpus of %s: empty list", name)
		}
		for _, cpu := range cpus {
			if cpu < 0 || cpu >= maxCPU || !set.IsSet(cpu) {
				return fmt.Errorf("netlab: cpus of %s: CPU %d is not one this process may use (%s)", name, cpu, cpuList(cpusOf(&set)))
			}
		}
	}
	return nil
}

func (c *Config) link(name string) *Link {
	for i := range c.Links {
		if c.Links[i].Name == name {
			return &c.Links[i]
		}
	}
	return nil
}

// switched reports whether link l is built as a bridge.
func (c *Config) switched(l *Link) bool {
	return Switched(len(l.Hosts), slices.ContainsFunc(c.Bottlenecks, func(b Bottleneck) bool { return b.Link == l.Name }))
}

// Switched reports whether a link of hosts hosts, with a bottleneck on it
// or not, is built as a bridge in a switch namespace (and so may be pinned
// to CPUs) rather than as a veth pair. Scenario files are checked with it.
func Switched(hosts int, bottleneck bool) bool {
	return hosts > 2 || bottleneck
}
