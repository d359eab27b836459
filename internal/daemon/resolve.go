package daemon

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
	"github.com/hbm-dev/hbm/internal/dataplane"
)

// Key names one limit: a group (by cgroup id) and a direction.
type Key struct {
	ID  uint64
	Dir dataplane.Direction
}

// Target is one limit the configuration declares on a group that exists.
type Target struct {
	Group cgroup.Group
	Dir   dataplane.Direction
	Limit dataplane.Limit
	Unit  string // the unit the group was resolved from, if any
	Line  int    // the rule's line in the file (0: declared by a pod)
	// Namespace and Pod name the Kubernetes pod that declared the limit.
	Namespace, Pod string
	// Keep: leave the limit the daemon applied as it is; where there is
	// none, create Limit if it is set (Rate > 0), else nothing.
	Keep bool
}

// Origin says who declared the target, for logs.
func (t Target) Origin() string {
	if t.Pod != "" {
		return fmt.Sprintf("pod %s/%s", t.Namespace, t.Pod)
	}
	return fmt.Sprintf("line %d", t.Line)
}

// Resolution is the configuration applied to the cgroup tree as it is now.
type Resolution struct {
	Targets map[Key]Target
	// Watch lists the directories whose children decide what the rules
	// match: a group created or removed in one of them may change Targets.
	Watch    []string
	Warnings []string
	// Capped: one line per glob rule that matched more groups than its
	// max_groups (the groups created first, by cgroup id, are limited; the
	// others are not); OverCap: how many groups were left out in all.
	Capped  []string
	OverCap int
}

// maxSliceDepth bounds the walk through systemd slices for units.
const maxSliceDepth = 16

// Resolve matches cfg's rules against the cgroup tree mounted at mnt. A rule
// whose groups do not exist (yet) matches nothing. When two rules name the
// same group and direction, the first in the file wins.
func Resolve(mnt string, cfg *Config) Resolution {
	res := Resolution{Targets: map[Key]Target{}}
	watch := map[string]bool{}
	var units map[string][]cgroup.Group // built on the first unit rule
	for _, r := range cfg.Rules {
		var groups []cgroup.Group
		switch r.Kind {
		case KindCgroup:
			groups = resolveLiteral(mnt, r.Value, watch)
		case KindGlob:
			groups = resolveGlob(mnt, r.Value, watch)
			if max := r.MaxGroups; max > 0 && len(groups) > max {
				// The oldest groups keep their limits: a burst of new
				// directories cannot push out the ones limited before.
				sort.Slice(groups, func(i, j int) bool { return groups[i].ID < groups[j].ID })
				res.Capped = append(res.Capped, fmt.Sprintf("line %d: glob %s matches %d groups, more than its max_groups %d: the %d created last are not limited",
					r.Line, r.Value, len(groups), max, len(groups)-max))
				res.OverCap += len(groups) - max
				groups = groups[:max]
			}
		case KindUnit:
			if units == nil {
				units = unitIndex(mnt, watch)
			}
			groups = units[r.Value]
			if len(groups) > 1 {
				res.Warnings = append(res.Warnings, fmt.Sprintf("line %d: unit %s found in %d places (%s, %s...): using the first",
					r.Line, r.Value, len(groups), groups[0].Rel, groups[1].Rel))
				groups = groups[:1]
			}
		}
		for _, g := range groups {
			for _, d := range []struct {
				dir dataplane.Direction
				l   *dataplane.Limit
			}{{dataplane.Egress, r.Egress}, {dataplane.Ingress, r.Ingress}} {
				if d.l == nil {
					continue
				}
				k := Key{g.ID, d.dir}
				if prev, ok := res.Targets[k]; ok {
					if prev.Line != r.Line {
						res.Warnings = append(res.Warnings, fmt.Sprintf("line %d: %s %v already declared by line %d, which wins",
							r.Line, g.Rel, d.dir, prev.Line))
					}
					continue
				}
				t := Target{Group: g, Dir: d.dir, Limit: *d.l, Line: r.Line}
				if r.Kind == KindUnit {
					t.Unit = r.Value
				}
				res.Targets[k] = t
			}
		}
	}
	for d := range watch {
		res.Watch = append(res.Watch, d)
	}
	sort.Strings(res.Watch)
	return res
}

// group returns the group at absolute directory dir under mnt.
func group(mnt, dir string) (cgroup.Group, bool) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return cgroup.Group{}, false
	}
	rel := strings.TrimPrefix(dir, mnt)
	if rel == "" {
		rel = "/"
	}
	return cgroup.Group{Dir: dir, Rel: rel, ID: st.Ino}, true
}

func segments(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// resolveLiteral: the group at rel, and its existing ancestors to watch.
func resolveLiteral(mnt, rel string, watch map[string]bool) []cgroup.Group {
	dir := mnt
	for _, seg := range segments(rel) {
		if _, ok := group(mnt, dir); !ok {
			return nil
		}
		watch[dir] = true
		dir = filepath.Join(dir, seg)
	}
	if g, ok := group(mnt, dir); ok {
		return []cgroup.Group{g}
	}
	return nil
}

// resolveGlob: every group matching pattern, one segment at a time; the
// directories matched by each proper prefix of the pattern are watched.
func resolveGlob(mnt, pattern string, watch map[string]bool) []cgroup.Group {
	level := []string{mnt}
	for _, seg := range segments(pattern) {
		var next []string
		for _, dir := range level {
			watch[dir] = true
			if !strings.ContainsAny(seg, `*?[\`) {
				if _, ok := group(mnt, filepath.Join(dir, seg)); ok {
					next = append(next, filepath.Join(dir, seg))
				}
				continue
			}
			for _, name := range subdirs(dir) {
				if ok, _ := path.Match(seg, name); ok {
					next = append(next, filepath.Join(dir, name))
				}
			}
		}
		level = next
	}
	var out []cgroup.Group
	for _, dir := range level {
		if g, ok := group(mnt, dir); ok {
			out = append(out, g)
		}
	}
	return out
}

// unitIndex finds the cgroups of systemd units: the system manager puts a
// unit in a directory named after it, in the directory of its slice, and a
// slice foo-bar.slice lives in /foo.slice/foo-bar.slice. So a unit is a
// child of the root or of a directory reached through *.slice directories
// only (the units of user managers, under user@UID.service, are not
// considered). It returns every such directory by name, and watches every
// slice directory: a unit that starts or restarts gets its directory created
// in one of them.
func unitIndex(mnt string, watch map[string]bool) map[string][]cgroup.Group {
	out := map[string][]cgroup.Group{}
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		watch[dir] = true
		for _, name := range subdirs(dir) {
			if !unitName.MatchString(name) {
				continue
			}
			if g, ok := group(mnt, filepath.Join(dir, name)); ok {
				out[name] = append(out[name], g)
			}
			if strings.HasSuffix(name, ".slice") && depth < maxSliceDepth {
				walk(filepath.Join(dir, name), depth+1)
			}
		}
	}
	walk(mnt, 0)
	return out
}

// subdirs lists the directory names in dir, sorted (none if unreadable).
func subdirs(dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
