package eval

import (
	"fmt"
	"slices"

	"github.com/hbm-dev/hbm/internal/netlab"
	"github.com/hbm-dev/hbm/internal/rate"
)

// Limiters are the limiters a run can use, in their usual order.
var Limiters = []string{"hbm", "htb", "tbf", "none"}

// limiter puts a scenario's cgroup limits in force one way: hbm, a tc
// qdisc (htb, tbf), or not at all (none). apply returns the qdiscs it
// installed (their counters are the run's link figures), an undo function
// (always callable), and a reason to skip the run or an error.
type limiter interface {
	apply(t *topology, eps []*endpoint) (qs []*shaped, undo func(), skip string, err error)
}

// limiterFor returns limiter name (one of Limiters).
func (r *runner) limiterFor(name string) (limiter, error) {
	switch name {
	case "none":
		return noLimit{}, nil
	case "hbm":
		return hbmLimit{r.hbm}, nil
	case "htb", "tbf":
		return qdiscLimit{kind: name}, nil
	}
	return nil, fmt.Errorf("unknown limiter %q", name)
}

type noLimit struct{}

func (noLimit) apply(*topology, []*endpoint) ([]*shaped, func(), string, error) {
	return nil, func() {}, "", nil
}

// hbmLimit sets each cgroup's limits with hbm set (in the eval's own pin
// directory).
type hbmLimit struct{ hbm netlab.HBM }

func (h hbmLimit) apply(t *topology, _ []*endpoint) (qs []*shaped, undo func(), skip string, err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	for _, c := range t.s.Cgroups {
		path := t.cgroupPath(c.Name)
		var extra []string
		if c.MarkOnly {
			extra = append(extra, "--no-drop")
		}
		extra = append(extra, c.HBMArgs...)
		set := false
		if c.EgressBps > 0 {
			args := []string{"set", path, "--egress", rate.Rate(c.EgressBps).String()}
			if c.EgressCeilBps > 0 {
				args = append(args, "--egress-ceil", rate.Rate(c.EgressCeilBps).String(), "--priority", Priorities[priorityOf(&c)])
			}
			if _, err := h.hbm.Run(append(args, extra...)...); err != nil {
				return nil, undo, "", fmt.Errorf("hbm set --egress: %w", err)
			}
			set = true
			undos = append(undos, func() { h.hbm.Unset(path) })
		}
		if c.IngressBps > 0 {
			if _, err := h.hbm.Run(append([]string{"set", path, "--ingress", rate.Rate(c.IngressBps).String()}, extra...)...); err != nil {
				return nil, undo, fmt.Sprintf("hbm set --ingress failed (ingress limits not available in this hbm?): %v", err), nil
			}
			if !set {
				undos = append(undos, func() { h.hbm.Unset(path) })
			}
		}
	}
	return nil, undo, "", nil
}

// qdiscLimit installs htb or tbf on the interface each limited group sends
// through. A group alone on its interface gets the qdisc at the root, as
// an administrator would set it up; groups sharing one get an htb class
// each, classified by the destination ports of their servers (for tbf, a
// tbf under an unlimited class).
type qdiscLimit struct{ kind string }

func (q qdiscLimit) apply(t *topology, eps []*endpoint) (qs []*shaped, undo func(), skip string, err error) {
	s := t.s
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	devs := map[devKey][]*netlab.HTBClass{}
	idx := map[classKey]int{}
	var order []devKey
	nested := false
	for _, c := range s.Cgroups {
		if c.IngressBps > 0 {
			return nil, undo, fmt.Sprintf("%s cannot limit ingress (no ifb here): only hbm limits %s's ingress", q.kind, c.Name), nil
		}
		if c.Parent != "" && c.EgressBps > 0 && s.Cgroup(c.Parent).EgressBps > 0 {
			nested = true
		}
	}
	if nested && q.kind == "tbf" {
		return nil, undo, "tbf has no class tree: nested limits and borrowing take htb", nil
	}
	for _, c := range s.Cgroups {
		if c.EgressBps == 0 {
			continue
		}
		perDev := map[devKey]*netlab.HTBClass{}
		for _, ep := range eps {
			if ep.src != c.Name {
				continue
			}
			k := t.dev(c.Host, s.HostOf(ep.to))
			if perDev[k] == nil {
				if _, ok := devs[k]; !ok {
					order = append(order, k)
				}
				// The limited groups above it first, as its parent classes
				// (htb's rate and ceil, as scripts/bench-borrow.sh sets them).
				parent := 0
				for _, a := range s.limitedAncestors(&c) {
					parent = addClass(devs, idx, k, a, parent)
				}
				cl := &netlab.HTBClass{Rate: c.EgressBps, Parent: parent}
				if c.EgressCeilBps > 0 {
					cl.Ceil, cl.Prio = c.EgressCeilBps, htbPrio(&c)
				}
				perDev[k] = cl
				devs[k] = append(devs[k], cl)
			}
			perDev[k].Ports = append(perDev[k].Ports, ep.port)
		}
	}
	for _, k := range order {
		classes := devs[k]
		undos = append(undos, func() { netlab.SetQdisc(k.ns, k.dev, netlab.NoQdisc{}) })
		var qd netlab.Qdisc
		switch single := len(classes) == 1 && onlySender(t, eps, k, classes[0].Ports); {
		case single && q.kind == "tbf":
			qd = netlab.TBF{Rate: classes[0].Rate}
		case single:
			qd = netlab.HTB{Classes: []netlab.HTBClass{{Rate: classes[0].Rate}}}
		default:
			h := netlab.HTB{}
			for _, c := range classes {
				if q.kind == "tbf" {
					c.Leaf = &netlab.TBF{Rate: c.Rate}
				}
				h.Classes = append(h.Classes, *c)
			}
			qd = h
		}
		if err := netlab.SetQdisc(k.ns, k.dev, qd); err != nil {
			return nil, undo, "", fmt.Errorf("install %s: %w", q.kind, err)
		}
		var sum uint64
		for _, c := range classes {
			if c.Parent == 0 {
				sum += c.Rate
			}
		}
		qs = append(qs, &shaped{name: q.kind + "@" + k.host, ns: k.ns, dev: k.dev, kind: q.kind, rate: sum})
	}
	return qs, undo, "", nil
}

// limitedAncestors are the groups above c with an egress limit, outermost
// first.
func (s *Scenario) limitedAncestors(c *Cgroup) []*Cgroup {
	var out []*Cgroup
	for p := s.Cgroup(c.Parent); p != nil; p = s.Cgroup(p.Parent) {
		if p.EgressBps > 0 {
			out = append([]*Cgroup{p}, out...)
		}
	}
	return out
}

// classKey is a group's class on one interface.
type classKey struct {
	dev   devKey
	group string
}

// addClass returns the class number (index+1) of group g's port-less class
// (a lender's) on interface k under class parent, adding it if idx does not
// have it yet.
func addClass(devs map[devKey][]*netlab.HTBClass, idx map[classKey]int, k devKey, g *Cgroup, parent int) int {
	key := classKey{k, g.Name}
	if i, ok := idx[key]; ok {
		return i + 1
	}
	cl := &netlab.HTBClass{Rate: g.EgressBps, Parent: parent}
	if g.EgressCeilBps > 0 {
		cl.Ceil, cl.Prio = g.EgressCeilBps, htbPrio(g)
	}
	devs[k] = append(devs[k], cl)
	idx[key] = len(devs[k]) - 1
	return len(devs[k])
}

// onlySender reports whether every endpoint reached through interface k is
// one of ports (no other group's traffic leaves through it).
func onlySender(t *topology, eps []*endpoint, k devKey, ports []int) bool {
	for _, ep := range eps {
		srcHost := t.s.HostOf(ep.src)
		if t.dev(srcHost, t.s.HostOf(ep.to)) == k && !slices.Contains(ports, ep.port) {
			return false
		}
	}
	return true
}
