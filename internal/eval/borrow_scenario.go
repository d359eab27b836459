package eval

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file validates and resolves what scenarios of borrowing add:
// nested groups (parent), guarantees with ceilings and priorities
// (egress_ceil, priority), flows active in intervals of the window
// (active), and the timeline of per-group rates.

// validateNesting checks cgroups[i]'s parent, egress_ceil and priority
// (the groups before it are validated; cgByName holds them).
func (s *Scenario) validateNesting(i int, cgByName map[string]*Cgroup) error {
	c := &s.Cgroups[i]
	f := fmt.Sprintf("cgroups[%d]", i)
	var parent *Cgroup
	if c.Parent != "" {
		parent = cgByName[c.Parent]
		switch {
		case c.Parent == c.Name:
			return ferr(f+".parent", "a group cannot be its own parent")
		case parent == nil:
			return ferr(f+".parent", "unknown group %q: a parent is a cgroup listed before its children", c.Parent)
		case parent.Host != c.Host:
			return ferr(f+".parent", "%q is on host %q, %q on %q: a group nests in a group of its own host", c.Parent, parent.Host, c.Name, c.Host)
		case strings.Count(s.labPath(c.Parent), "/") >= 3:
			return ferr(f+".parent", "groups nest at most 4 deep")
		}
	}
	if c.EgressCeil != "" {
		r, err := parseRate(c.EgressCeil)
		if err != nil {
			return ferr(f+".egress_ceil", "%v", err)
		}
		c.EgressCeilBps = r
		switch {
		case c.EgressBps == 0:
			return ferr(f+".egress_ceil", "a ceiling needs a guarantee: give egress a rate (not auto)")
		case parent == nil || parent.EgressBps == 0:
			return ferr(f+".egress_ceil", "a ceiling borrows from the parent's egress limit (the lender): give the group a parent with egress")
		case r < c.EgressBps:
			return ferr(f+".egress_ceil", "%s below the guarantee %s", c.EgressCeil, c.Egress)
		}
	}
	if c.Priority != "" {
		if !slices.Contains(Priorities, c.Priority) {
			return ferr(f+".priority", "unknown priority %q (%s)", c.Priority, strings.Join(Priorities, ", "))
		}
		if c.EgressCeil == "" {
			return ferr(f+".priority", "a priority orders borrowing: it needs egress_ceil")
		}
	}
	if parent != nil && parent.EgressAuto {
		return ferr(f+".parent", "%q has egress auto: a lender needs a rate", c.Parent)
	}
	return nil
}

// hasChildren reports whether some cgroup has name as its parent.
func (s *Scenario) hasChildren(name string) bool {
	return slices.ContainsFunc(s.Cgroups, func(c Cgroup) bool { return c.Parent == name })
}

// labPath is a cgroup's path in the lab: its ancestors' names and its own,
// "p/a" (a host's group is its name).
func (s *Scenario) labPath(name string) string {
	path := name
	for c, n := s.Cgroup(name), 0; c != nil && c.Parent != "" && n < 8; c, n = s.Cgroup(c.Parent), n+1 {
		path = c.Parent + "/" + path
	}
	return path
}

// lender is a group's lender: its parent, when the group has a ceiling.
func (s *Scenario) lender(c *Cgroup) *Cgroup {
	if c.EgressCeilBps == 0 {
		return nil
	}
	return s.Cgroup(c.Parent)
}

// priorityOf is a group's borrowing class (0 latency, 1 normal, 2 batch).
func priorityOf(c *Cgroup) int {
	if i := slices.Index(Priorities, c.Priority); i >= 0 {
		return i
	}
	return 1
}

// htbPrio is htb's class prio of a priority (as scripts/bench-borrow.sh
// sets it up).
func htbPrio(c *Cgroup) int { return []int{0, 3, 7}[priorityOf(c)] }

func (s *Scenario) validateTimeline() error {
	tl := s.Timeline
	if tl == nil {
		return nil
	}
	var err error
	if tl.WindowD, err = parseDuration("timeline.window", tl.Window, 10*time.Millisecond); err != nil {
		return err
	}
	if tl.WindowD < time.Millisecond || tl.WindowD > time.Second {
		return ferr("timeline.window", "%v out of range 1ms..1s", tl.WindowD)
	}
	if tl.SettleD, err = parseDuration("timeline.settle", tl.Settle, time.Second); err != nil {
		return err
	}
	if tl.SettleD < 0 || tl.SettleD > time.Minute {
		return ferr("timeline.settle", "%v out of range 0..1m", tl.SettleD)
	}
	if tl.FairWindowD, err = parseDuration("timeline.fair_window", tl.FairWindow, 0); err != nil {
		return err
	}
	if tl.FairWindowD != 0 && (tl.FairWindowD < tl.WindowD || tl.FairWindowD%tl.WindowD != 0) {
		return ferr("timeline.fair_window", "%v: a multiple of the window (%v)", tl.FairWindowD, tl.WindowD)
	}
	return nil
}

// validateActive parses a flow's active intervals: in order, apart, within
// the window of the full and the quick run.
func (s *Scenario) validateActive(f string, fl *Flow) error {
	if len(fl.Active) == 0 {
		return nil
	}
	if fl.Kind != "stream" {
		return ferr(f+".active", "only a stream flow has active intervals")
	}
	fl.ActiveD = nil
	for j, v := range fl.Active {
		ff := fmt.Sprintf("%s.active[%d]", f, j)
		a, b, ok := strings.Cut(v, "-")
		if !ok {
			return ferr(ff, "%q: want START-END from the window's start, e.g. 3s-6s", v)
		}
		start, err1 := time.ParseDuration(strings.TrimSpace(a))
		end, err2 := time.ParseDuration(strings.TrimSpace(b))
		if err1 != nil || err2 != nil {
			return ferr(ff, "%q: want START-END from the window's start, e.g. 3s-6s", v)
		}
		if start < 0 || end-start < 100*time.Millisecond {
			return ferr(ff, "%q: an interval starts at 0 or later and lasts at least 100ms", v)
		}
		if j > 0 && start < fl.ActiveD[j-1].End {
			return ferr(ff, "%q starts before the interval before it ends", v)
		}
		if end > s.DurationD {
			return ferr(ff, "%q ends after the window (duration %v)", v, s.DurationD)
		}
		if end > s.Quick.DurationD {
			return ferr(ff, "%q ends after the quick run's window (quick.duration %v)", v, s.Quick.DurationD)
		}
		fl.ActiveD = append(fl.ActiveD, Interval{start, end})
	}
	return nil
}
