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
	"regexp"
	"slices"
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
	// removed by Close; processes can be started inside them.
	Cgroups []string
	// MTU of every link (default 1500).
	MTU int
	// IPv6 gives every host end an fd00::/8 address too; without it IPv6 is
	// turned off in the hosts (no DAD or MLD chatter on the links).
	IPv6 bool
	// Sysctls are set in every host namespace after it is created.
	Sysctls map[string]string
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
	for _, g := range c.Cgroups {
		if !nameRe.MatchString(g) {
			return fmt.Errorf("netlab: bad cgroup name %q", g)
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
	if len(l.Hosts) > 2 {
		return true
	}
	for _, b := range c.Bottlenecks {
		if b.Link == l.Name {
			return true
		}
	}
	return false
}
