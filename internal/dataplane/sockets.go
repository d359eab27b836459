package dataplane

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/cgroup"
)

// walkSockets runs the socket walker (bpf/include/sockets.h) over the TCP
// sockets of group g and its descendants in every network namespace their
// processes use, plus hbm's own. With release false it turns on the sockops
// callback direction d's assist needs for sockets connected before the
// limit; with release true it lifts what the assist set (egress: the pacing
// cap; ingress: the window clamp), and also walks every namespace in which
// an assist changed a socket of g or below (hbm_netns_map): a socket stays
// in its namespace when the process that made it leaves, or never was
// there (an fd passed on, a thread that switched namespaces), and after
// unset no sockops program is attached to lift it on its next segment. It
// returns how many sockets of g it saw and changed.
func (m *Manager) walkSockets(g cgroup.Group, d Direction, release bool) (seen, changed uint64, err error) {
	p, err := m.programs()
	if err != nil {
		return 0, 0, err
	}
	w := hbmHbmWalk{CgroupId: g.ID, Dir: hbmHbmDir(d)}
	if release {
		w.Release = 1
	}
	zero := uint32(0)
	if err := m.st.walk.Put(&zero, &w); err != nil {
		return 0, 0, fmt.Errorf("socket walker parameters: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.HbmSockets})
	if err != nil {
		return 0, 0, fmt.Errorf("attach socket iterator: %w", err)
	}
	defer it.Close()

	var errs []error
	var assisted []string
	var unreached []string
	if release {
		// The namespaces where the assists changed sockets of g or below:
		// no process of g may be left there (measured: a receiver's clamp
		// outlived the unset because the walk never entered its namespace).
		assisted, unreached = m.assistedNetns(g)
	}
	paths, blind := netnsOf(g, assisted)
	unreached = append(unreached, blind...)
	for _, ns := range paths {
		if err := inNetns(ns, func() error { return drain(it) }); err != nil {
			errs = append(errs, fmt.Errorf("netns %s: %w", ns, err))
		}
	}
	if len(unreached) > 0 {
		// Never silent: sockets in these namespaces were not walked.
		errs = append(errs, unreachedError(unreached))
	}
	if err := m.st.walk.Lookup(&zero, &w); err != nil {
		errs = append(errs, fmt.Errorf("socket walker results: %w", err))
	}
	return w.Seen, w.Changed, errors.Join(errs...)
}

// drain runs the iterator to its end in the calling thread's netns.
func drain(it *link.Iter) error {
	r, err := it.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// netnsOf lists the network namespaces (as /proc/PID/ns/net paths, one per
// namespace) of the processes in g and below, with hbm's own first, then
// those of also not already listed. It also returns the processes whose
// namespace it could not read (not those that exited meanwhile): reading
// another process's /proc/PID/ns/net takes ptrace read access, refused
// without CAP_SYS_PTRACE to a process whose uid differs or whose
// capabilities hbm lacks (every container process); and a process outside
// hbm's PID namespace shows as pid 0 in cgroup.procs.
func netnsOf(g cgroup.Group, also []string) (paths, unreached []string) {
	seen := map[uint64]bool{}
	add := func(path string) {
		ino, err := inodeErr(path)
		if err != nil {
			if !gone(err) {
				unreached = append(unreached, err.Error())
			}
			return
		}
		if seen[ino] {
			return
		}
		seen[ino] = true
		paths = append(paths, path)
	}
	add("/proc/self/ns/net")
	const maxProcs = 100000 // bound the walk on huge groups
	n := 0
	filepath.WalkDir(g.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || n >= maxProcs {
			return nil
		}
		f, err := os.Open(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() && n < maxProcs {
			pid, err := strconv.Atoi(strings.TrimSpace(s.Text()))
			switch {
			case err != nil:
			case pid == 0:
				unreached = append(unreached, fmt.Sprintf("a process of %s outside hbm's PID namespace", p))
			default:
				add(fmt.Sprintf("/proc/%d/ns/net", pid))
			}
			n++
		}
		return nil
	})
	for _, p := range also {
		add(p)
	}
	return paths, unreached
}

// gone reports whether err says the process (or thread) is no longer there.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// unreachedError says which namespaces the walk could not enter, and what
// hbm needs to enter them.
func unreachedError(what []string) error {
	const show = 3
	more := ""
	if len(what) > show {
		more = fmt.Sprintf(" and %d more", len(what)-show)
		what = what[:show]
	}
	return fmt.Errorf("%w: %s%s (hbm needs CAP_SYS_PTRACE to read another process's network namespace, and the host's PID namespace: hostPID in Kubernetes)",
		ErrSocketsUnreached, strings.Join(what, "; "), more)
}

// ErrSocketsUnreached: the socket walker could not enter some network
// namespace a group's sockets may be in; their connections were not
// assisted (set) or keep the assist's pacing cap or window clamp (unset).
var ErrSocketsUnreached = errors.New("network namespaces not walked")

// inNetns runs fn on a thread switched into the network namespace at path,
// and switches back. If switching back fails the thread is left locked, so
// the runtime discards it rather than reuse a thread in the wrong namespace.
func inNetns(path string, fn func() error) error {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back: %w", err) // thread stays locked: discarded at exit
	}
	runtime.UnlockOSThread()
	return ferr
}

// inode is the inode number of the file at path (0 if it cannot be read):
// a network namespace's identity, and a cgroup2 directory's id.
func inode(path string) uint64 {
	ino, _ := inodeErr(path)
	return ino
}

// inodeErr is inode with the reason it could not be read.
func inodeErr(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Ino, nil
}

// assistedNetns returns a path for each network namespace in which an
// assist changed a socket of g or a group below it (hbm_netns_map), found
// among the named namespaces (/run/netns) and those of every process and
// thread. Namespaces no longer found are gone, and their sockets with them,
// unless the search could not read some process's namespace: then each one
// not found is returned in unreached.
func (m *Manager) assistedNetns(g cgroup.Group) (paths, unreached []string) {
	if m.st.netns == nil {
		return nil, nil
	}
	ids := map[uint64]bool{g.ID: true}
	filepath.WalkDir(g.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if id := dirID(p); id != 0 {
				ids[id] = true
			}
		}
		return nil
	})
	want := map[uint64]bool{}
	var k hbmHbmNetnsKey
	var v uint64
	it := m.st.netns.Iterate()
	for it.Next(&k, &v) {
		if ids[k.CgroupId] {
			want[uint64(k.NetnsIno)] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	paths, denied := findNetns(want)
	if denied != nil {
		for ino := range want {
			unreached = append(unreached, fmt.Sprintf("network namespace %d, where sockets of %s were assisted, not found (%v)", ino, g, denied))
		}
	}
	return paths, unreached
}

// findNetns returns one path per namespace inode in want that it finds
// (removing it from want): bind mounts under /run/netns first, then
// /proc/PID/ns/net, then /proc/PID/task/TID/ns/net (a thread may sit in a
// namespace its process left). denied is the first error (other than a
// process that exited) that kept it from reading a namespace.
func findNetns(want map[uint64]bool) (out []string, denied error) {
	try := func(p string) {
		ino, err := inodeErr(p)
		if err != nil {
			if denied == nil && !gone(err) {
				denied = err
			}
			return
		}
		if want[ino] {
			delete(want, ino)
			out = append(out, p)
		}
	}
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			try(filepath.Join(dir, e.Name()))
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if len(want) == 0 {
			return out, nil
		}
		if _, err := strconv.Atoi(e.Name()); err == nil {
			try(filepath.Join("/proc", e.Name(), "ns/net"))
		}
	}
	for _, e := range procs {
		if len(want) == 0 {
			return out, nil
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		for _, t := range tasks {
			try(filepath.Join("/proc", e.Name(), "task", t.Name(), "ns/net"))
		}
	}
	if len(want) == 0 {
		denied = nil
	}
	return out, denied
}
