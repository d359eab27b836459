package dataplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
)

// Attachments. The programs find every limit on a socket's cgroup path
// themselves, so one attachment serves a whole subtree: they are attached
// (with a pinned link) to the topmost limited groups only. A limited group
// inside an attached one has no link of its own; when the outer limit goes,
// the inner groups get theirs before the outer link is removed, and when an
// outer limit comes, its link is made before the inner ones go. Either way a
// packet may briefly be charged twice, never not at all.
//
// A topmost limited group's configuration carries HBM_F_TOP: no group above
// it is limited in that direction, so the programs stop walking a socket's
// cgroup path there instead of looking up every level to the root (the
// lookups of unlimited levels were most of a packet's cost on a pod's
// path). A group loses the flag before a limit above it is written
// (untopBelow) and gets it when the limit above goes (uncover): a
// configuration without it is only walked past, as before, so every step
// in between is safe to kill.

func (m *Manager) linkPath(id uint64, d Direction) string {
	return filepath.Join(m.dir, linksDir, fmt.Sprintf("%d-%s", id, d))
}

func (m *Manager) hasLink(id uint64, d Direction) bool {
	return pinExists(m.linkPath(id, d))
}

func pinExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// dirID is the cgroup id of the group at dir (0 if it cannot be read).
func dirID(dir string) uint64 { return inode(dir) }

// hasAssistLink reports whether (id, d)'s assist (sockops) link is pinned.
func (m *Manager) hasAssistLink(id uint64, d Direction) bool {
	return pinExists(m.linkPath(id, d) + "-sockops")
}

// coveredBy returns the id of the group whose attachment serves g's
// direction d: g's own, or its nearest attached ancestor's; 0 if none.
func (m *Manager) coveredBy(g cgroup.Group, d Direction) uint64 {
	for dir := g.Dir; ; dir = filepath.Dir(dir) {
		if id := dirID(dir); id != 0 && m.hasLink(id, d) {
			return id
		}
		if dir == m.mount || dir == "/" || dir == "." {
			return 0
		}
	}
}

// servedBy returns the groups whose links run direction d's programs for
// g's sockets: police, the nearest of g and its ancestors with the policing
// (cgroup_skb) link, and assist, the nearest with the assist's (sockops)
// link; 0 where none. The kernel runs an ancestor's programs for every group
// below it, and the programs find the limits on the socket's path themselves.
func (m *Manager) servedBy(g cgroup.Group, d Direction) (police, assist uint64) {
	for dir := g.Dir; ; dir = filepath.Dir(dir) {
		if id := dirID(dir); id != 0 {
			if police == 0 && m.hasLink(id, d) {
				police = id
			}
			if assist == 0 && m.hasAssistLink(id, d) {
				assist = id
			}
			if police != 0 && assist != 0 {
				return police, assist
			}
		}
		if dir == m.mount || dir == "/" || dir == "." {
			return police, assist
		}
	}
}

// served reports whether every program limit c of g on direction d needs
// runs for g's sockets: the policing program, and its assist (egress pacing,
// ingress window clamp) unless the limit has none (--no-pace).
func (m *Manager) served(g cgroup.Group, d Direction, c hbmHbmConfig) bool {
	police, assist := m.servedBy(g, d)
	return police != 0 && (c.Flags&hbmHbmFlagsHBM_F_PACE == 0 || assist != 0)
}

// attach attaches direction d's program and assist to g, with links pinned
// at linkPath(g.ID, d) and -sockops. Either link already there is kept.
func (m *Manager) attach(g cgroup.Group, d Direction) error {
	p, err := m.programs()
	if err != nil {
		return err
	}
	prog, assist, hook := p.HbmEgress, p.HbmPaceOps, ebpf.AttachCGroupInetEgress
	if d == Ingress {
		prog, assist, hook = p.HbmIngress, p.HbmRxwinOps, ebpf.AttachCGroupInetIngress
	}
	lp := m.linkPath(g.ID, d)
	if pinExists(lp) && pinExists(lp+"-sockops") {
		return nil
	}
	// Attached through a descriptor of the directory proved to be the group
	// g names: the path may name another group by now (removed and made
	// again, a unit restarted), which must not get g's links.
	dir, err := OpenGroup(g)
	if err != nil {
		return fmt.Errorf("attach %v program: %w", d, err)
	}
	defer dir.Close()
	for _, a := range []struct {
		path string
		hook ebpf.AttachType
		prog *ebpf.Program
	}{{lp, hook, prog}, {lp + "-sockops", ebpf.AttachCGroupSockOps, assist}} {
		if _, err := os.Lstat(a.path); err == nil {
			continue
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(dir.Fd()), Attach: a.hook, Program: a.prog})
		if err != nil {
			return fmt.Errorf("attach %v program to %s: %w", d, g.Dir, err)
		}
		err = l.Pin(a.path)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin link for %s at %s: %w", g, a.path, err)
		}
		m.step("attached " + filepath.Base(a.path))
	}
	return nil
}

// detach removes the links of (id, d): the sockops assist's last, so a
// socket sees its want go to zero before its assist goes.
func (m *Manager) detach(id uint64, d Direction) error {
	lp := m.linkPath(id, d)
	for _, path := range []string{lp, lp + "-sockops"} {
		if err := unpinLink(path); err != nil {
			return err
		}
		m.step("detached " + filepath.Base(path))
	}
	return nil
}

// ErrReplaced means a group's path names another group than the one hbm
// resolved: it was removed, and maybe made again.
var ErrReplaced = errors.New("no longer the group hbm resolved")

// OpenGroup opens g's directory and checks that it is the group g names
// (its cgroup id, read from the open descriptor, is g.ID): what is done
// through the descriptor is done to g, whatever the path names later.
func OpenGroup(g cgroup.Group) (*os.File, error) {
	f, err := os.OpenFile(g.Dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s (cgroup id %d) was removed: %w", g, g.ID, ErrReplaced)
	}
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", g.Dir, err)
	}
	var st unix.Stat_t
	var fs unix.Statfs_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat cgroup %s: %w", g.Dir, err)
	}
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		f.Close()
		return nil, fmt.Errorf("statfs cgroup %s: %w", g.Dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC || st.Ino != g.ID {
		f.Close()
		return nil, fmt.Errorf("%s is cgroup id %d, not %d: %w (removed and made again since it was resolved?); nothing done to it", g, st.Ino, g.ID, ErrReplaced)
	}
	return f, nil
}

func unpinLink(path string) error {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = l.Unpin()
		l.Close()
	} else {
		err = os.Remove(path) // not a link we can load: still ours to remove
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove link %s: %w", path, err)
	}
	return nil
}

// linkGone reports whether the pinned link of (id, d) is attached to a group
// that was removed: the link's own cgroup id reads 0. Only that proves a group
// gone; failing to resolve an id (no CAP_DAC_READ_SEARCH, a cgroup
// namespace) proves nothing.
func (m *Manager) linkGone(id uint64, d Direction) bool {
	l, err := link.LoadPinnedLink(m.linkPath(id, d), nil)
	if err != nil {
		return false
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return false
	}
	cg := info.Cgroup()
	return cg != nil && cg.CgroupId == 0
}

// cover makes sure g's limit on d is served: attached at g unless an
// ancestor's attachment serves it, and then no attachment below g left to
// run the programs a second time.
func (m *Manager) cover(g cgroup.Group, d Direction) error {
	// g's own link may be one of two (a killed attach): finish it.
	if c := m.coveredBy(g, d); c != 0 && c != g.ID {
		return nil
	}
	if err := m.attach(g, d); err != nil {
		return err
	}
	return m.walkBelow(g, func(sub cgroup.Group) (bool, error) {
		// Either link: a killed detach may have left the sockops one alone.
		if m.hasLink(sub.ID, d) || m.hasAssistLink(sub.ID, d) {
			return true, m.detach(sub.ID, d)
		}
		return false, nil
	})
}

// uncover prepares g's attachment on d to go: every limited group below g
// that it served gets an attachment of its own (the topmost ones), and the
// top flag once attached (g's configuration is gone by then).
func (m *Manager) uncover(g cgroup.Group, d Direction) error {
	return m.walkBelow(g, func(sub cgroup.Group) (bool, error) {
		if m.hasLink(sub.ID, d) {
			if !m.limited(sub.ID, d) {
				return true, nil
			}
			// Serves its own subtree already; a killed attach may have
			// left its assist out: attach keeps what is there.
			if err := m.attach(sub, d); err != nil {
				return true, err
			}
			return true, m.retop(sub, d)
		}
		if !m.limited(sub.ID, d) {
			return false, nil
		}
		if err := m.attach(sub, d); err != nil {
			return true, err
		}
		return true, m.retop(sub, d)
	})
}

// withTop returns cfg, the configuration of g's direction d, with
// HBM_F_TOP set if no group above g is limited in d (top).
func (m *Manager) withTop(g cgroup.Group, d Direction, cfg hbmHbmConfig) hbmHbmConfig {
	cfg.Flags &^= hbmHbmFlagsHBM_F_TOP
	if m.top(g, d) {
		cfg.Flags |= hbmHbmFlagsHBM_F_TOP
	}
	return cfg
}

// top reports whether no group above g is limited in direction d, as far
// as hbm can see: false when the cgroup2 mount is not the root of the whole
// tree (a cgroup namespace: the groups above it are out of sight) or a
// group on the way cannot be read.
func (m *Manager) top(g cgroup.Group, d Direction) bool {
	if g.Dir == "" || !m.mountIsRoot() {
		return false
	}
	for dir := g.Dir; dir != m.mount; {
		if dir == "/" || dir == "." {
			return false // not below the mount
		}
		dir = filepath.Dir(dir)
		if id := dirID(dir); id == 0 || m.limited(id, d) {
			return false
		}
	}
	return true
}

// mountIsRoot reports (once per Manager) whether the cgroup2 mount is the
// root of the whole cgroup tree, level 0 as the programs count.
func (m *Manager) mountIsRoot() bool {
	if m.rootLevel == 0 {
		m.rootLevel = 2
		if lvl, err := cgroup.Level(cgroup.Group{Dir: m.mount, Rel: "/"}); err == nil && lvl == 0 {
			m.rootLevel = 1
		}
	}
	return m.rootLevel == 1
}

// retop sets or clears g's top flag on d as withTop would.
func (m *Manager) retop(g cgroup.Group, d Direction) error {
	return m.setTop(g, d, m.top(g, d))
}

// untopBelow clears the top flag of every limited group below g on d:
// before g's own limit is written, so that no packet of theirs stops short
// of it.
func (m *Manager) untopBelow(g cgroup.Group, d Direction) error {
	if g.Dir == "" {
		return nil
	}
	return m.walkBelow(g, func(sub cgroup.Group) (bool, error) {
		return false, m.setTop(sub, d, false)
	})
}

// setTop sets (on) or clears g's top flag on d, if g is limited there.
func (m *Manager) setTop(g cgroup.Group, d Direction, on bool) error {
	k := key(g.ID, d)
	var cur hbmHbmConfig
	if m.st.limits.Lookup(&k, &cur) != nil {
		return nil
	}
	cfg := cur
	cfg.Flags &^= hbmHbmFlagsHBM_F_TOP
	if on {
		cfg.Flags |= hbmHbmFlagsHBM_F_TOP
	}
	if cfg == cur {
		return nil
	}
	if err := m.st.limits.Update(&k, &cfg, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("update limit of %s %v: %w", g, d, err)
	}
	return nil
}

func (m *Manager) limited(id uint64, d Direction) bool {
	var c hbmHbmConfig
	return m.lookupConfig(key(id, d), &c) == nil
}

// walkBelow calls fn on every group below g, parents before children; fn's
// true skips the group's subtree.
func (m *Manager) walkBelow(g cgroup.Group, fn func(cgroup.Group) (bool, error)) error {
	const maxGroups = 1 << 20 // bound the walk
	n := 0
	return filepath.WalkDir(g.Dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p == g.Dir {
				return err
			}
			return nil // a group removed under us
		}
		if !de.IsDir() || p == g.Dir {
			return nil
		}
		if n++; n > maxGroups {
			return fmt.Errorf("more than %d groups below %s", maxGroups, g)
		}
		rel := g.Rel + p[len(g.Dir):]
		if g.Rel == "/" {
			rel = p[len(g.Dir):]
		}
		sub := cgroup.Group{Dir: p, Rel: rel, ID: dirID(p)}
		if sub.ID == 0 {
			return fs.SkipDir
		}
		skip, err := fn(sub)
		if err != nil {
			return err
		}
		if skip {
			return fs.SkipDir
		}
		return nil
	})
}

// restoreAssists attaches the assist (sockops) link wherever a policing link
// stands alone. attach makes the two in that order and detach removes the
// policing one first, so once the journal is repaired a lone policing link
// is a defect (a killed attach, a link unpinned by hand): every limit it
// serves would be policed without its assist. Each failure is a warning, not
// an error: the groups stay policed, and the next hbm command tries again.
func (m *Manager) restoreAssists() {
	dir := filepath.Join(m.dir, linksDir)
	es, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.warn("look for policing links without their assist: %v", err)
		}
		return
	}
	names := make(map[string]bool, len(es))
	for _, e := range es {
		names[e.Name()] = true
	}
	for _, e := range es {
		id, d, ok := parsePolicingLink(e.Name())
		if !ok || names[e.Name()+"-sockops"] || m.linkGone(id, d) {
			continue // an assist link, a pair, or a removed group's (prune's)
		}
		g, err := cgroup.PathOf(id)
		if err == nil {
			err = m.attach(g, d)
		}
		if err != nil {
			m.warn("cgroup id %d %v is policed without its assist, which hbm could not attach: %v", id, d, err)
			continue
		}
		m.warn("attached the %v assist of %s, missing beside its policing program (an earlier hbm was killed, or its link was removed)", d, g)
	}
}

// parsePolicingLink reads a policing link's name, <id>-<direction>.
func parsePolicingLink(name string) (uint64, Direction, bool) {
	i := strings.IndexByte(name, '-')
	if i < 0 {
		return 0, 0, false
	}
	id, err := strconv.ParseUint(name[:i], 10, 64)
	if err != nil || id == 0 {
		return 0, 0, false
	}
	for _, d := range Directions {
		if name[i+1:] == d.String() {
			return id, d, true
		}
	}
	return 0, 0, false
}
