package daemon

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Observed is one limit found in the data plane (from Manager.List).
type Observed struct {
	Key
	Rel   string // path relative to the mount; "" when unresolved
	Gone  bool   // the group was removed
	Limit dataplane.Limit
}

// ObservedOf turns the data plane's entries into observations.
func ObservedOf(es []dataplane.Entry) []Observed {
	out := make([]Observed, len(es))
	for i, e := range es {
		out[i] = Observed{Key: Key{e.CgroupID, e.Dir}, Rel: e.Cgroup, Gone: e.Gone, Limit: e.Limit}
	}
	return out
}

// Op is one transaction on one group: Apply(Group, Changes). Own lists the
// records to write before it runs (the limits it creates or changes, with
// what they become); Disown the records to drop after it succeeded (the
// limits it removes).
type Op struct {
	Group   cgroup.Group
	Changes []dataplane.Change
	Own     []Owning
	Disown  []Key
}

// Owning is a record to write: the limit k is the daemon's, as r says.
type Owning struct {
	Key
	Record Record
}

// Plan is what a reconcile pass does.
type Plan struct {
	Ops []Op
	// Forget: ownership records of limits that no longer exist (removed
	// by hand, or the daemon was killed between recording and applying),
	// or that were changed by hand since the daemon applied them.
	Forget []Key
	// TakenOver: the limits among Forget changed by hand (hbm set): they
	// are the operator's from now on.
	TakenOver []string
	// Conflicts: declared limits left alone because a limit set by hand
	// (not by the daemon) holds that group and direction.
	Conflicts []string
	// Kept: owned limits already as declared (after a restart: adopted).
	Kept int
}

// Reconcile compares what is declared (desired) with what the data plane
// holds (actual) and what the daemon owns, and returns the plan that makes
// the owned limits exactly the declared ones:
//
//   - declared, absent: create it (and own it);
//   - declared, owned, different: change it in place;
//   - declared, held by a limit the daemon does not own (hbm set by hand):
//     leave it, report a conflict;
//   - owned, not declared (or its group removed): remove it;
//   - owned, absent: forget the record;
//   - owned, but the limit is not the one the record says the daemon
//     applied (changed by hand with hbm set): forget the record; from then
//     on it is a hand-set limit (left alone; a conflict if declared);
//   - declared Keep (a pod's invalid annotation under the "keep" policy, or
//     an edit not followed): leave what is there, owned or not; where
//     there is nothing, create the target's Limit if it has one.
//
// Limits the daemon does not own are never changed. Ops are sorted by group
// path, creations and changes before removals: a limit moving between
// nested groups is briefly applied twice, never not at all. mnt is the
// cgroup2 mount (to rebuild a group's directory from its path).
func Reconcile(mnt string, desired map[Key]Target, actual []Observed, records map[Key]Record) Plan {
	var p Plan
	have := map[Key]Observed{}
	for _, o := range actual {
		have[o.Key] = o
	}
	owned := map[Key]bool{}
	for k, r := range records {
		if o, ok := have[k]; ok && !r.Matches(o.Limit) {
			p.Forget = append(p.Forget, k)
			rel := o.Rel
			if rel == "" {
				rel = fmt.Sprintf("(id %d)", k.ID)
			}
			p.TakenOver = append(p.TakenOver, fmt.Sprintf("%s %v: changed by hand to %v; the operator's from now on", rel, k.Dir, o.Limit.Rate))
			continue
		}
		owned[k] = true
	}
	sets := map[uint64]*Op{}
	for k, t := range desired {
		o, exists := have[k]
		switch {
		case t.Keep && (exists || t.Limit.Rate == 0):
			if exists && owned[k] {
				p.Kept++
			}
			continue
		case exists && !owned[k]:
			p.Conflicts = append(p.Conflicts, fmt.Sprintf("%s %v: declared (%s) but limited by hand (hbm set) to %v; left as it is",
				t.Group.Rel, k.Dir, t.Origin(), o.Limit.Rate))
			continue
		case exists && o.Limit == t.Limit:
			p.Kept++
			continue
		}
		op := sets[k.ID]
		if op == nil {
			op = &Op{Group: t.Group}
			sets[k.ID] = op
		}
		l := t.Limit
		op.Changes = append(op.Changes, dataplane.Change{Dir: k.Dir, Limit: &l})
		var prev *dataplane.Limit
		if exists {
			prev = &o.Limit
		}
		op.Own = append(op.Own, Owning{k, RecordOf(prev, l)})
	}
	unsets := map[uint64]*Op{}
	for k := range owned {
		if _, ok := desired[k]; ok {
			continue
		}
		o, exists := have[k]
		if !exists {
			p.Forget = append(p.Forget, k)
			continue
		}
		var g cgroup.Group
		switch {
		case o.Gone:
			g = cgroup.Group{ID: k.ID, Rel: fmt.Sprintf("(removed, id %d)", k.ID)}
		case o.Rel == "":
			continue // unresolved: it may live on; keep it and the record
		default:
			g = cgroup.Group{Dir: filepath.Join(mnt, o.Rel), Rel: o.Rel, ID: k.ID}
		}
		op := unsets[k.ID]
		if op == nil {
			op = &Op{Group: g}
			unsets[k.ID] = op
		}
		op.Changes = append(op.Changes, dataplane.Change{Dir: k.Dir})
		op.Disown = append(op.Disown, k)
	}
	p.Ops = append(sortedOps(sets), sortedOps(unsets)...)
	slices.Sort(p.Conflicts)
	slices.Sort(p.TakenOver)
	slices.SortFunc(p.Forget, compareKeys)
	return p
}

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Dir, b.Dir))
}

func sortedOps(m map[uint64]*Op) []Op {
	out := make([]Op, 0, len(m))
	for _, op := range m {
		slices.SortFunc(op.Changes, func(a, b dataplane.Change) int { return cmp.Compare(a.Dir, b.Dir) })
		slices.SortFunc(op.Own, func(a, b Owning) int { return compareKeys(a.Key, b.Key) })
		slices.SortFunc(op.Disown, compareKeys)
		out = append(out, *op)
	}
	slices.SortFunc(out, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Group.Rel, b.Group.Rel), cmp.Compare(a.Group.ID, b.Group.ID))
	})
	return out
}
