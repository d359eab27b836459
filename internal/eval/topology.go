package eval

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/workload"
)

const firstPort = 5201

// topology is a scenario's lab: its hosts, links, switches and cgroups
// (one per scenario cgroup and one per host for the host's other
// processes), built by netlab.
type topology struct {
	s   *Scenario
	lab *netlab.Lab
	bin string
	web []*webServer // the http flows' servers, started with the scenario's
}

// labConfig is the netlab configuration of scenario s.
func labConfig(s *Scenario) netlab.Config {
	cfg := netlab.Config{Hosts: s.Hosts, Cgroups: append(append([]string{}, s.Hosts...), cgroupNames(s)...), CPUs: s.CPUs, IPv6: s.IPv6}
	for _, l := range s.Links {
		cfg.Links = append(cfg.Links, netlab.Link{Name: l.Name, Hosts: l.Hosts})
	}
	for _, b := range s.Bottlenecks {
		cfg.Bottlenecks = append(cfg.Bottlenecks, netlab.Bottleneck{Link: b.Link, To: b.To, Rate: b.RateBps,
			Buffer: b.BufferBytes, Burst: netlab.TBFBurst(b.RateBps)})
	}
	return cfg
}

// buildTopology builds s's lab. On error nothing is left.
func buildTopology(s *Scenario, bin string) (*topology, error) {
	lab, err := netlab.New(labConfig(s))
	if err != nil {
		return nil, err
	}
	return &topology{s: s, lab: lab, bin: bin}, nil
}

func cgroupNames(s *Scenario) []string {
	var out []string
	for _, c := range s.Cgroups {
		out = append(out, s.labPath(c.Name))
	}
	return out
}

// cgroup is the directory of a scenario cgroup or host's group.
func (t *topology) cgroup(name string) string { return t.lab.Cgroup(t.s.labPath(name)) }

// cgroupPath is a scenario cgroup's path under the cgroup2 mount (what hbm
// set takes).
func (t *topology) cgroupPath(name string) string { return t.lab.CgroupPath(t.s.labPath(name)) }

func (t *topology) close() error { return t.lab.Close() }

// dev is host's interface toward host to (its end of the link between them).
func (t *topology) dev(host, to string) devKey {
	l := t.s.linkBetween(host, to)
	h := t.lab.Host(host)
	if l == nil || h == nil {
		return devKey{}
	}
	return devKey{host: host, ns: h.NS, dev: h.Dev[l.Name]}
}

// addr is host to's address on the link between from and to: IPv6 in a
// scenario run over IPv6, else IPv4.
func (t *topology) addr(from, to string) net.IP {
	l := t.s.linkBetween(from, to)
	if t.s.IPv6 {
		return t.lab.Host(to).IP6[l.Name]
	}
	return t.lab.Host(to).IP4[l.Name]
}

// wildcard is the address a server listens on: every address of the
// scenario's family.
func (t *topology) wildcard(port int) string {
	if t.s.IPv6 {
		return net.JoinHostPort("::", strconv.Itoa(port))
	}
	return net.JoinHostPort("0.0.0.0", strconv.Itoa(port))
}

// devKey is one host interface.
type devKey struct{ host, ns, dev string }

// routeCC sets the congestion control of every host's routes (congctl;
// "" clears it): see netlab.Lab.RouteCC.
func (t *topology) routeCC(cc string) error {
	for _, h := range t.s.Hosts {
		if err := t.lab.RouteCC(h, cc); err != nil {
			return err
		}
	}
	return nil
}

// startServer starts a workload server on host in group (at the group's
// nice, if it is a scenario cgroup), listening on port, and waits (at most
// 10s) until it listens.
func (t *topology) startServer(host, group string, port int) error {
	nice := 0
	if c := t.s.Cgroup(group); c != nil {
		nice = c.Nice
	}
	_, err := t.lab.StartServerNice(t.bin, host, t.cgroup(group), t.wildcard(port), nice)
	return err
}

// settleLimit bounds how long a run waits for the last one's sockets.
const settleLimit = 15 * time.Second

// settle waits until no TCP socket on any host still holds data to send (at
// most settleLimit) and returns what is left, in bytes. A run's clients are
// killed at its end with their sockets' queues full; the kernel sends them
// on, from the same cgroups, so without the wait they drained through the
// next run's limit: 128 bbr streams under htb left 100 MB, and the hbm run
// after it measured 0.65 of its limit as goodput (the queues' bytes on the
// wire, not read by its own clients' server connections). Called before
// the next run's limiter is applied, so they drain unlimited.
func (t *topology) settle(ctx context.Context) (int64, error) {
	deadline := time.Now().Add(settleLimit)
	for {
		var left int64
		for _, h := range t.s.Hosts {
			n, err := t.lab.UnsentBytes(h)
			if err != nil {
				return 0, err
			}
			left += n
		}
		if left == 0 || time.Now().After(deadline) {
			return left, nil
		}
		if err := workload.SleepCtx(ctx, 50*time.Millisecond); err != nil {
			return left, err
		}
	}
}
