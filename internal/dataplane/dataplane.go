// Package dataplane owns HBM's BPF data plane and every change to it: the
// programs (loaded once per build and pinned), the pinned maps keyed by
// (cgroup id, direction), and the attachments. A Manager is a handle on the
// pin directory, holding its lock; Apply is the transaction the CLI (and an
// agent) calls: it validates, changes, and rolls back on failure.
//
// Every change of several steps is journaled first (state.go, hbm_txn_map),
// so a Manager opened after a killed one finishes or undoes it, and at every
// step a limited group stays limited.
package dataplane

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/rate"
)

// Manager is a handle on HBM's pinned state, holding its lock.
type Manager struct {
	// Warnings collects what went wrong without failing the operation.
	Warnings []string

	dir   string
	mount string // the cgroup2 mount
	lock  *os.File
	st    *state
	progs *hbmPrograms // loaded on first use
	steps int          // change steps done, for the kill tests (step)
	// rootLevel: 0 not yet known, 1 the mount is the whole tree's root,
	// 2 it is not (mountIsRoot).
	rootLevel int
}

// ErrNotFound means no limit is set for that group and direction.
var ErrNotFound = errors.New("no limit set")

// Open opens (creating if needed) the pinned state under dir, takes its lock
// so that concurrent hbm invocations apply one at a time, and repairs what
// a killed hbm left half done: the journaled change, then any policing link
// left without its assist.
func Open(dir string) (*Manager, error) {
	if err := ensureBPFFS(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, linksDir), 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory %s: %w", dir, err)
	}
	m, err := open(dir, unix.LOCK_EX, true)
	if err != nil {
		return nil, err
	}
	if err := m.repair(); err != nil {
		m.Close()
		return nil, fmt.Errorf("finish the change a killed hbm left: %w (it blocks every change until it is finished: run hbm where its group is visible, or give it up with `hbm repair --abandon`)", err)
	}
	m.restoreAssists()
	return m, nil
}

// OpenReadOnly opens existing state for reading, sharing the lock with other
// readers. It returns (nil, nil) when no state was ever pinned. State of
// another build's layout is read through a carrier (layout.go), and a
// warning says an upgrade is pending.
func OpenReadOnly(dir string) (*Manager, error) {
	if !Pinned(dir) {
		return nil, nil
	}
	m, err := open(dir, unix.LOCK_SH, false)
	if err == nil {
		if note := UpgradePending(dir); note != "" {
			m.warn("%s", note) // it never upgrades: a writer does
		}
	}
	return m, err
}

// OpenUnlocked opens existing state for reading without the lock, for
// readers that must never hold a writer back (the daemon's metrics: a
// scrape of 10,000 limits takes a second). What it reads may be in the
// middle of a change (a limit seen before its link is attached, or just
// after it is removed). It returns (nil, nil) when no state was ever pinned.
func OpenUnlocked(dir string) (*Manager, error) {
	if !Pinned(dir) {
		return nil, nil
	}
	return open(dir, 0, false)
}

func open(dir string, how int, create bool) (*Manager, error) {
	mnt, err := cgroup.Mount()
	if err != nil {
		return nil, err
	}
	var lock *os.File
	if how != 0 {
		if lock, err = lockDir(dir, how); err != nil {
			return nil, err
		}
	}
	m := &Manager{dir: dir, mount: mnt, lock: lock}
	if create {
		// A build whose layout differs upgrades the pinned state first
		// (upgrade.go); read-only opens read it through a carrier.
		if err := m.upgrade(); err != nil {
			if lock != nil {
				lock.Close()
			}
			return nil, err
		}
	}
	st, err := openState(dir, create)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	m.st = st
	return m, nil
}

// Close releases the maps, programs and the lock. Pinned state stays.
func (m *Manager) Close() error {
	if m.progs != nil {
		m.progs.Close()
	}
	if m.st != nil {
		m.st.close()
	}
	if m.lock != nil {
		return m.lock.Close()
	}
	return nil
}

// stopAfterEnv names the test-only variable that kills hbm (SIGKILL) after
// its Nth change step, for the kill tests.
const stopAfterEnv = "HBM_TEST_STOP_AFTER"

// stepsEnv names the test-only variable that makes hbm print each change
// step, for the kill tests to choose where to kill.
const stepsEnv = "HBM_TEST_STEPS"

// step marks the end of one change step.
func (m *Manager) step(what string) {
	m.steps++
	if os.Getenv(stepsEnv) != "" {
		fmt.Fprintf(os.Stderr, "hbm: %s: step %d: %s\n", stepsEnv, m.steps, what)
	}
	if n, err := strconv.Atoi(os.Getenv(stopAfterEnv)); err == nil && n == m.steps {
		fmt.Fprintf(os.Stderr, "hbm: %s=%d: killed after step %d (%s)\n", stopAfterEnv, n, n, what)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// Change is one direction of what Apply makes of a group: a limit, or none.
type Change struct {
	Dir   Direction
	Limit *Limit // nil: remove the limit
}

// ErrTooDeep means a group lies deeper in the cgroup tree than the data
// plane follows a socket's path (MaxLevel).
var ErrTooDeep = fmt.Errorf("hbm limits groups at most %d levels deep", MaxLevel)

// CheckDepth is CheckGroup's check by path alone (no privilege needed): a
// group deeper than MaxLevel below the mount is deeper still from the root.
func CheckDepth(g cgroup.Group) error {
	if depth := strings.Count(strings.Trim(g.Rel, "/"), "/") + 1; g.Rel != "/" && depth > MaxLevel {
		return fmt.Errorf("%s is %d levels deep: %w", g, depth, ErrTooDeep)
	}
	return nil
}

// CheckGroup refuses groups a limit cannot be set on: deeper than MaxLevel
// levels. The programs count levels from the real root of the cgroup tree
// (bpf_skb_ancestor_cgroup_id), so the level is the kernel's (cgroup.Level),
// not the depth below the mount, which under a cgroup namespace starts
// lower: a group that passed on its path could never be policed.
func CheckGroup(g cgroup.Group) error {
	if err := CheckDepth(g); err != nil || g.Rel == "/" || g.Dir == "" {
		return err
	}
	depth := strings.Count(strings.Trim(g.Rel, "/"), "/") + 1
	lvl, err := cgroup.Level(g)
	if err != nil {
		return fmt.Errorf("%s: cannot tell how deep it lies in the cgroup tree (hbm limits groups at most %d levels deep): %w", g, MaxLevel, err)
	}
	if lvl > MaxLevel {
		return fmt.Errorf("%s is %d levels deep in the whole cgroup tree (%d below this cgroup namespace's root): %w", g, lvl, depth, ErrTooDeep)
	}
	return nil
}

// Apply makes each direction named in changes of group g as asked, all or
// nothing: if one fails, the ones done are put back as they were. A removal
// of a direction that has no limit is ErrNotFound, checked before anything
// changes.
func (m *Manager) Apply(g cgroup.Group, changes []Change) error {
	sets := slices.ContainsFunc(changes, func(c Change) bool { return c.Limit != nil })
	if g.Dir != "" {
		// Resolved before the lock was taken (up to 10 s ago): the path
		// may name another group by now. A limit is refused; a removal
		// goes on with g's state alone (as prune does): the path's group
		// is not g's subtree. attach checks again, on the descriptor it
		// attaches through.
		f, err := OpenGroup(g)
		if err == nil {
			f.Close()
		}
		switch {
		case errors.Is(err, ErrReplaced) && !sets:
			g.Dir = ""
		case err != nil:
			return err
		}
	}
	check := CheckDepth // a removal needs no level: no limit was set deeper
	if sets {
		check = CheckGroup
	}
	if err := check(g); err != nil {
		return err
	}
	before := map[Direction]*Limit{}
	for _, c := range changes {
		if c.Dir != Egress && c.Dir != Ingress {
			return fmt.Errorf("unknown direction %v", c.Dir)
		}
		if c.Limit != nil {
			if err := c.Limit.Validate(); err != nil {
				return fmt.Errorf("%v: %w", c.Dir, err)
			}
		}
		var cur hbmHbmConfig
		k := key(g.ID, c.Dir)
		if err := m.st.limits.Lookup(&k, &cur); err == nil {
			l := limitOf(cur)
			before[c.Dir] = &l
		} else if c.Limit == nil && !m.hasLink(g.ID, c.Dir) {
			return fmt.Errorf("%s %v: %w", g, c.Dir, ErrNotFound)
		}
	}
	if len(changes) > 1 {
		return m.applyAll(g, changes, before)
	}
	c := changes[0]
	if c.Limit != nil {
		return m.set(g, c.Dir, *c.Limit)
	}
	return m.unset(g, c.Dir)
}

// applyAll makes several directions of g as asked in one transaction: the
// whole plan is journaled first, so a killed hbm's change is completed as
// a whole by the next (repair), never left with one direction done. On a
// failure the directions are put back as they were (before), journaled
// the same way.
func (m *Manager) applyAll(g cgroup.Group, changes []Change, before map[Direction]*Limit) error {
	plan := make([]txnChange, len(changes))
	back := make([]txnChange, len(changes))
	for i, c := range changes {
		plan[i] = txnChange{Dir: c.Dir, Limit: c.Limit}
		back[i] = txnChange{Dir: c.Dir, Limit: before[c.Dir]}
	}
	if err := m.beginPlan(g, plan); err != nil {
		return err
	}
	err := m.runPlan(g, plan)
	if err == nil {
		return m.end()
	}
	if jerr := m.beginPlan(g, back); jerr != nil {
		m.warn("%s: could not journal putting back its limits: %v", g, jerr)
		return err
	}
	if rerr := m.runPlan(g, back); rerr != nil {
		m.warn("%s: putting back its limits failed (the next hbm command that changes limits tries again): %v", g, rerr)
		return err
	}
	m.end()
	return err
}

// runPlan makes each direction of g what plan says: every step may be
// repeated (a replay runs a plan partly done).
func (m *Manager) runPlan(g cgroup.Group, plan []txnChange) error {
	for _, c := range plan {
		if c.Limit != nil {
			if g.Dir == "" { // the group is gone: nothing to limit
				if err := m.remove(g, c.Dir); err != nil {
					return err
				}
				continue
			}
			if err := m.setSteps(g, c.Dir, *c.Limit); err != nil {
				return err
			}
			continue
		}
		if !m.limited(g.ID, c.Dir) && !m.hasLink(g.ID, c.Dir) && !m.hasAssistLink(g.ID, c.Dir) {
			continue
		}
		if err := m.remove(g, c.Dir); err != nil {
			return err
		}
	}
	return nil
}

// setSteps limits direction d of g, in place when it is limited and served
// already, else creating its state and attachment (set's steps, without
// the journal).
func (m *Manager) setSteps(g cgroup.Group, d Direction, l Limit) error {
	cfg, err := config(l)
	if err != nil {
		return err
	}
	m.warnCeil(g, d, l)
	k := key(g.ID, d)
	var cur hbmHbmConfig
	if m.st.limits.Lookup(&k, &cur) == nil && m.coveredBy(g, d) != 0 {
		cfg = m.withTop(g, d, cfg)
		if err := m.st.limits.Update(&k, &cfg, ebpf.UpdateExist); err != nil {
			return fmt.Errorf("update limit of %s: %w", g, err)
		}
		m.step("updated limit")
		return nil
	}
	if err := m.create(g, d, cfg); err != nil {
		return err
	}
	if err := m.cover(g, d); err != nil {
		return err
	}
	if !l.NoPace {
		if _, _, err := m.walkSockets(g, d, false); err != nil {
			m.warn("existing connections of %s %v not assisted: %v", g, d, err)
		}
		m.step("walked sockets")
	}
	return nil
}

// Set limits direction d of group g (Apply with one change).
func (m *Manager) Set(g cgroup.Group, d Direction, l Limit) error {
	return m.Apply(g, []Change{{Dir: d, Limit: &l}})
}

// Unset removes the limit on direction d of g (Apply with one change).
func (m *Manager) Unset(g cgroup.Group, d Direction) error {
	return m.Apply(g, []Change{{Dir: d}})
}

// set limits direction d of g. On a group already limited it changes the
// configuration in place: one map update; the queue and counters carry on.
// On a new group the configuration is written before the program serves
// it, so no packet passes unlimited.
func (m *Manager) set(g cgroup.Group, d Direction, l Limit) error {
	cfg, err := config(l)
	if err != nil {
		return err
	}
	m.warnCeil(g, d, l)
	k := key(g.ID, d)
	var cur hbmHbmConfig
	if m.st.limits.Lookup(&k, &cur) == nil && m.coveredBy(g, d) != 0 {
		cfg = m.withTop(g, d, cfg)
		if err := m.st.limits.Update(&k, &cfg, ebpf.UpdateExist); err != nil {
			return fmt.Errorf("update limit of %s: %w", g, err)
		}
		return nil
	}
	if err := m.begin(txnSet, g, d); err != nil {
		return err
	}
	if err := m.create(g, d, cfg); err != nil {
		m.remove(g, d)
		m.end()
		return err
	}
	if err := m.cover(g, d); err != nil {
		m.remove(g, d)
		m.end()
		return err
	}
	if !l.NoPace {
		// Connections opened before the limit get the assist too. Without
		// it they are still limited, by marks and drops only: not fatal.
		if _, _, err := m.walkSockets(g, d, false); err != nil {
			m.warn("existing connections of %s %v not assisted: %v", g, d, err)
		}
		m.step("walked sockets")
	}
	return m.end()
}

// warnCeil warns where a ceiling above the rate cannot be used: no group
// above g is limited in d, so there is nothing to borrow from (the group
// keeps its rate).
func (m *Manager) warnCeil(g cgroup.Group, d Direction, l Limit) {
	if l.Ceil > l.Rate && m.top(g, d) {
		m.warn("%s %v: no limited group above it to borrow from: it keeps its rate %v (limit a parent, or the root group at the link's rate, to lend)", g, d, l.Rate)
	}
}

// create writes the counters, queue and configuration of (g, d), the
// configuration last: a packet that finds it finds the rest.
func (m *Manager) create(g cgroup.Group, d Direction, cfg hbmHbmConfig) error {
	k := key(g.ID, d)
	if err := m.untopBelow(g, d); err != nil {
		return err
	}
	cfg = m.withTop(g, d, cfg)
	if err := m.st.queues.Update(&k, &hbmHbmQueue{}, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("create queue for %s: %w", g, err)
	}
	if err := m.st.limits.Update(&k, &cfg, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("write limit for %s: hbm holds at most %d limits: %w", g, m.st.limits.MaxEntries(), err)
		}
		return fmt.Errorf("write limit for %s: %w", g, err)
	}
	m.step("wrote limit")
	return nil
}

// unset removes the limit on direction d of g and everything it pinned.
func (m *Manager) unset(g cgroup.Group, d Direction) error {
	if err := m.begin(txnUnset, g, d); err != nil {
		return err
	}
	if err := m.remove(g, d); err != nil {
		return err
	}
	return m.end()
}

// remove takes (g, d)'s limit away in the order that keeps every other limit
// served: the configuration first (the programs stop applying it), then, if
// g's attachment served groups below it, theirs are made; then g's links go;
// then the assist's marks on g's sockets are lifted (idle ones included);
// then the queue and counters. Every step may be repeated.
func (m *Manager) remove(g cgroup.Group, d Direction) error {
	k := key(g.ID, d)
	if err := m.st.limits.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete limit of %s %v: %w", g, d, err)
	}
	m.step("deleted limit")
	if g.Dir != "" && m.hasLink(g.ID, d) {
		if err := m.uncover(g, d); err != nil {
			return err
		}
	}
	if err := m.detach(g.ID, d); err != nil {
		return err
	}
	if g.Dir != "" {
		if _, _, err := m.walkSockets(g, d, true); err != nil {
			m.warn("%v assists of %s not all lifted: %v", d, g, err)
		}
		m.step("released sockets")
	}
	if err := m.st.queues.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete state of %s %v: %w", g, d, err)
	}
	m.step("deleted queue")
	return nil
}

func (m *Manager) warn(format string, args ...any) {
	m.Warnings = append(m.Warnings, fmt.Sprintf(format, args...))
}

// begin journals a change of (g, d) before its first step.
func (m *Manager) begin(op txnOp, g cgroup.Group, d Direction) error {
	e := txnEntry{Op: op, Dir: uint32(d), ID: g.ID}
	copy(e.Rel[:], g.Rel)
	zero := uint32(0)
	if err := m.st.txn.Put(&zero, &e); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	m.step("journaled")
	return nil
}

// beginPlan journals a whole Apply (txnApply) before its first step.
func (m *Manager) beginPlan(g cgroup.Group, plan []txnChange) error {
	p := txnPlan{Rel: g.Rel, Changes: plan}
	b, err := json.Marshal(p)
	if err == nil && len(b) > txnPathBytes {
		p.Rel = "" // the path is for messages only: the id finds the group
		b, err = json.Marshal(p)
	}
	if err == nil && len(b) > txnPathBytes {
		err = fmt.Errorf("plan of %d bytes", len(b))
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	e := txnEntry{Op: txnApply, ID: g.ID}
	copy(e.Rel[:], b)
	zero := uint32(0)
	if err := m.st.txn.Put(&zero, &e); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	m.step("journaled")
	return nil
}

// end clears the journal after a change's last step.
func (m *Manager) end() error {
	zero := uint32(0)
	if err := m.st.txn.Put(&zero, &txnEntry{}); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	m.step("done")
	return nil
}

// journaled reads the journal; ok false when no change is under way.
func (m *Manager) journaled() (e txnEntry, rel string, plan []txnChange, ok bool, err error) {
	zero := uint32(0)
	if m.st.txn == nil || m.st.txn.Lookup(&zero, &e) != nil || e.Op == txnNone {
		return e, "", nil, false, nil
	}
	rel = string(e.Rel[:])
	if i := strings.IndexByte(rel, 0); i >= 0 {
		rel = rel[:i]
	}
	if e.Op == txnApply {
		var p txnPlan
		if err := json.Unmarshal([]byte(rel), &p); err != nil {
			return e, "", nil, true, fmt.Errorf("journal of cgroup id %d unreadable: %w", e.ID, err)
		}
		rel, plan = p.Rel, p.Changes
	}
	return e, rel, plan, true, nil
}

// describe says what a journal entry was doing, for messages.
func describe(e txnEntry, rel string, plan []txnChange) string {
	what := map[txnOp]string{txnSet: "set", txnUnset: "unset", txnApply: "change"}[e.Op]
	if what == "" {
		what = fmt.Sprintf("operation %d", e.Op)
	}
	var dirs []string
	switch e.Op {
	case txnApply:
		for _, c := range plan {
			if c.Limit != nil {
				dirs = append(dirs, fmt.Sprintf("%v %v", c.Dir, c.Limit.Rate))
			} else {
				dirs = append(dirs, fmt.Sprintf("%v removed", c.Dir))
			}
		}
	default:
		dirs = append(dirs, Direction(e.Dir).String())
	}
	if rel == "" {
		rel = "?"
	}
	return fmt.Sprintf("%s of cgroup id %d (%s when journaled): %s", what, e.ID, rel, strings.Join(dirs, ", "))
}

// ErrCannotReplay means the journaled change is on a group this hbm cannot
// find: it exists, but not where this process sees the cgroup tree.
var ErrCannotReplay = errors.New("cannot finish the change a killed hbm left")

// journaledGroup finds the group of a journaled change by its cgroup id:
// where it is now (renamed or not), or removed (proved by the kernel), or
// an error when it is neither (another cgroup namespace, no permission):
// then nothing may be done, as a group seen without its subtree would lose
// the attachments its nested limits need.
func (m *Manager) journaledGroup(id uint64, rel string) (cgroup.Group, error) {
	g, err := cgroup.PathOf(id)
	if err == nil {
		return g, nil
	}
	if errors.Is(err, unix.ESTALE) || errors.Is(err, cgroup.ErrRemoved) {
		return cgroup.Group{ID: id, Rel: fmt.Sprintf("(removed, id %d)", id)}, nil // gone: only its state is left
	}
	// Without CAP_DAC_READ_SEARCH the handle cannot be opened: the tree
	// may still hold it.
	if p, ok := cgroupPaths(m.mount)[id]; ok {
		return cgroup.Group{Dir: filepath.Join(m.mount, p), Rel: p, ID: id}, nil
	}
	for _, d := range Directions {
		if m.linkGone(id, d) {
			return cgroup.Group{ID: id, Rel: fmt.Sprintf("(removed, id %d)", id)}, nil
		}
	}
	return cgroup.Group{}, fmt.Errorf("%w: its group (cgroup id %d, %s when journaled) is not found from here: %v", ErrCannotReplay, id, rel, err)
}

// repair finishes or undoes the change a killed hbm journaled: a set whose
// limit was written is finished (attached); one whose limit was not is
// undone; an unset is finished; a whole Apply (txnApply) is completed, or
// undone entirely if its group was removed. The group is found by its id.
func (m *Manager) repair() error {
	e, rel, plan, ok, err := m.journaled()
	if !ok {
		return nil
	}
	if err != nil {
		return err
	}
	if e.Op > txnApply {
		// A newer build's change (this one rolled back to): replaying it
		// as something else could remove a limit.
		return fmt.Errorf("the journal holds operation %d of cgroup id %d, which this hbm build does not know (a newer build's): run that build, or give it up with `hbm repair --abandon`", e.Op, e.ID)
	}
	g, err := m.journaledGroup(e.ID, rel)
	if err != nil {
		return err
	}
	if e.Op == txnApply {
		if err := m.runPlan(g, plan); err != nil {
			return err
		}
		m.warn("finished the %s that an earlier hbm left half done (now %s)", describe(e, rel, plan), g)
		return m.end()
	}
	d := Direction(e.Dir)
	switch {
	case e.Op == txnSet && g.Dir != "" && m.limited(g.ID, d):
		if err := m.cover(g, d); err != nil {
			return err
		}
		var c hbmHbmConfig
		k := key(g.ID, d)
		if m.st.limits.Lookup(&k, &c) == nil && c.Flags&hbmHbmFlagsHBM_F_PACE != 0 {
			if _, _, err := m.walkSockets(g, d, false); err != nil {
				m.warn("existing connections of %s %v not assisted: %v", g, d, err)
			}
		}
	default:
		if err := m.remove(g, d); err != nil {
			return err
		}
	}
	m.warn("finished the %s of %s %v that an earlier hbm left half done", map[txnOp]string{txnSet: "set", txnUnset: "unset"}[e.Op], g, d)
	return m.end()
}

// Abandon gives up the change a killed hbm journaled, without finishing or
// undoing it: the journal is cleared and the state left as it is (a limit
// without its attachment shows as not enforced; `hbm unset` or `hbm set` on
// the group, where it is visible, makes it whole). It returns what was
// abandoned, "" if nothing was journaled.
func Abandon(dir string) (string, error) {
	if !Pinned(dir) {
		return "", nil
	}
	m, err := open(dir, unix.LOCK_EX, true)
	if err != nil {
		return "", err
	}
	defer m.Close()
	e, rel, plan, ok, err := m.journaled()
	if !ok {
		return "", nil
	}
	what := fmt.Sprintf("journal entry %d of cgroup id %d", e.Op, e.ID)
	if err == nil {
		what = describe(e, rel, plan)
	}
	m.steps = 0
	if err := m.end(); err != nil {
		return "", err
	}
	return what, nil
}

// Repair opens the state for writing, which finishes what a killed hbm left
// (Open), and returns the Manager's warnings: what it did.
func Repair(dir string) ([]string, error) {
	if !Pinned(dir) {
		return nil, nil
	}
	m, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.Warnings, nil
}

// Entry is one limit as found in the pinned state.
type Entry struct {
	CgroupID uint64
	Cgroup   string // path relative to the cgroup2 mount; "" if not known
	// Gone: the group was removed (proved by its link, or by the kernel
	// refusing its id as stale), so Prune may remove the limit.
	Gone bool
	// Enforced: the limit has its queue and every program it needs runs
	// for its group, attached to the group or an ancestor: the policing
	// program, and its assist (sockops) unless the limit has none
	// (NoPace). False after a failure hbm could not repair, or after a
	// killed hbm until the next command that opens the state for writing
	// (not show) repairs it; hbm show says so.
	Enforced bool
	Dir      Direction
	Limit    Limit
	Stats    Stats
}

// List returns every limit, sorted by cgroup path then direction. Groups are
// found by walking the cgroup2 tree (no capability beyond reading it), then,
// for ids not found there, through their file handles.
func (m *Manager) List() ([]Entry, error) { return m.list(true) }

// ListCounters is List without Enforced (left false): what the metrics
// need, at a fraction of the cost (Enforced looks up each group's links).
func (m *Manager) ListCounters() ([]Entry, error) { return m.list(false) }

func (m *Manager) list(enforced bool) ([]Entry, error) {
	var (
		k   hbmHbmKey
		c   hbmHbmConfig
		out []Entry
	)
	paths := cgroupPaths(m.mount)
	it := m.eachLimit()
	for it.Next(&k, &c) {
		st, err := m.readStats(k, c)
		if err != nil {
			return nil, err
		}
		e := Entry{CgroupID: k.CgroupId, Dir: Direction(k.Dir), Limit: limitOf(c), Stats: st}
		e.Cgroup, e.Gone = m.resolve(k.CgroupId, e.Dir, paths)
		if enforced && e.Cgroup != "" {
			var q hbmHbmQueue
			g := cgroup.Group{Dir: filepath.Join(m.mount, e.Cgroup), Rel: e.Cgroup, ID: k.CgroupId}
			e.Enforced = m.lookupQueue(k, &q) == nil && m.served(g, e.Dir, c)
		}
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	sortEntries(out)
	return out, nil
}

// limitIter iterates the limits: the map's, or the snapshot's.
type limitIter interface {
	Next(key, value any) bool
	Err() error
}

type snapIter struct {
	keys []hbmHbmKey
	snap map[hbmHbmKey]hbmHbmConfig
}

func (it *snapIter) Next(key, value any) bool {
	if len(it.keys) == 0 {
		return false
	}
	*key.(*hbmHbmKey), *value.(*hbmHbmConfig) = it.keys[0], it.snap[it.keys[0]]
	it.keys = it.keys[1:]
	return true
}

func (it *snapIter) Err() error { return nil }

func (m *Manager) eachLimit() limitIter {
	if m.st.snap == nil {
		return m.st.limits.Iterate()
	}
	it := &snapIter{snap: m.st.snap.limits}
	for k := range it.snap {
		it.keys = append(it.keys, k)
	}
	return it
}

// lookupConfig and lookupQueue read a limit's configuration and queue: the
// maps', or the snapshot's.
func (m *Manager) lookupConfig(k hbmHbmKey, c *hbmHbmConfig) error {
	return lookupIn(m.st.limits, m.st.snap != nil, func() map[hbmHbmKey]hbmHbmConfig { return m.st.snap.limits }, k, c)
}

func (m *Manager) lookupQueue(k hbmHbmKey, q *hbmHbmQueue) error {
	return lookupIn(m.st.queues, m.st.snap != nil, func() map[hbmHbmKey]hbmHbmQueue { return m.st.snap.queues }, k, q)
}

func lookupIn[V any](mp *ebpf.Map, snapped bool, snap func() map[hbmHbmKey]V, k hbmHbmKey, v *V) error {
	if !snapped {
		return mp.Lookup(&k, v)
	}
	got, ok := snap()[k]
	if !ok {
		return ebpf.ErrKeyNotExist
	}
	*v = got
	return nil
}

// resolve finds the path of group id, and whether it is certainly gone.
func (m *Manager) resolve(id uint64, d Direction, paths map[uint64]string) (rel string, gone bool) {
	if rel, ok := paths[id]; ok {
		return rel, false
	}
	if m.linkGone(id, d) {
		return "", true
	}
	g, err := cgroup.PathOf(id)
	if err == nil {
		return g.Rel, false
	}
	return "", errors.Is(err, unix.ESTALE) || errors.Is(err, cgroup.ErrRemoved)
}

// cgroupPaths maps the id of every group under the cgroup2 mount to its path.
func cgroupPaths(mnt string) map[uint64]string {
	out := map[uint64]string{}
	root := cgroup.Group{Dir: mnt, Rel: "/", ID: dirID(mnt)}
	out[root.ID] = "/"
	(&Manager{}).walkBelow(root, func(g cgroup.Group) (bool, error) {
		out[g.ID] = g.Rel
		return false, nil
	})
	return out
}

func (m *Manager) readStats(k hbmHbmKey, c hbmHbmConfig) (Stats, error) {
	var q hbmHbmQueue
	if err := m.lookupQueue(k, &q); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Stats{InForce: rate.Rate(c.RateBps)}, nil
		}
		return Stats{}, fmt.Errorf("read counters of cgroup id %d: %w", k.CgroupId, err)
	}
	p := q.St
	st := Stats{Bytes: p.Bytes, Packets: p.Packets, Marked: p.Marked, CWR: p.Cwr,
		Dropped: p.Dropped, DroppedBytes: p.DroppedBytes, Gated: p.Gated}
	if q.EffBps != 0 && q.EffBaseBps == c.RateBps {
		st.InForce = rate.Rate(q.EffBps)
	} else {
		st.InForce = rate.Rate(c.RateBps) // not yet written for this rate (vqueue.h, rate_sync)
	}
	return st, nil
}

// Prune removes the limits of groups that certainly no longer exist, and
// returns them. A group hbm cannot resolve is kept.
func (m *Manager) Prune() ([]Entry, error) {
	entries, err := m.List()
	if err != nil {
		return nil, err
	}
	var gone []Entry
	for _, e := range entries {
		if !e.Gone {
			continue
		}
		g := cgroup.Group{ID: e.CgroupID, Rel: fmt.Sprintf("(removed, id %d)", e.CgroupID)}
		if err := m.unset(g, e.Dir); err != nil {
			return gone, err
		}
		gone = append(gone, e)
	}
	return gone, nil
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		// Groups without a known path sort last.
		return cmp.Or(
			compareBool(a.Cgroup == "", b.Cgroup == ""),
			strings.Compare(a.Cgroup, b.Cgroup),
			cmp.Compare(a.CgroupID, b.CgroupID),
			cmp.Compare(a.Dir, b.Dir))
	})
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Limited reports whether direction d of g has a limit (or the remains of
// one: an attachment without it).
func (m *Manager) Limited(g cgroup.Group, d Direction) bool {
	return m.limited(g.ID, d) || m.hasLink(g.ID, d)
}
