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
		path := t.lab.CgroupPath(c.Name)
		var extra []string
		if c.MarkOnly {
			extra = append(extra, "--no-drop")
		}
		extra = append(extra, c.HBMArgs...)
		set := false
		if c.EgressBps > 0 {
			if _, err := h.hbm.Run(append([]string{"set", path, "--egress", rate.Rate(c.EgressBps).String()}, extra...)...); err != nil {
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
	var order []devKey
	for _, c := range s.Cgroups {
		if c.IngressBps > 0 {
			return nil, undo, fmt.Sprintf("%s cannot limit ingress (no ifb here): only hbm limits %s's ingress", q.kind, c.Name), nil
		}
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
				perDev[k] = &netlab.HTBClass{Rate: c.EgressBps}
				if _, ok := devs[k]; !ok {
					order = append(order, k)
				}
				devs[k] = append(devs[k], perDev[k])
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
			sum += c.Rate
		}
		qs = append(qs, &shaped{name: q.kind + "@" + k.host, ns: k.ns, dev: k.dev, kind: q.kind, rate: sum})
	}
	return qs, undo, "", nil
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
