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
	if release {
		// The namespaces where the assists changed sockets of g or below:
		// no process of g may be left there (measured: a receiver's clamp
		// outlived the unset because the walk never entered its namespace).
		assisted = m.assistedNetns(g)
	}
	for _, ns := range netnsOf(g, assisted) {
		if err := inNetns(ns, func() error { return drain(it) }); err != nil {
			errs = append(errs, fmt.Errorf("netns %s: %w", ns, err))
		}
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
// those of also not already listed.
func netnsOf(g cgroup.Group, also []string) []string {
	seen := map[uint64]bool{}
	out := []string{}
	add := func(path string) {
		ino := inode(path)
		if ino == 0 || seen[ino] {
			return
		}
		seen[ino] = true
		out = append(out, path)
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
			if pid, err := strconv.Atoi(strings.TrimSpace(s.Text())); err == nil {
				add(fmt.Sprintf("/proc/%d/ns/net", pid))
				n++
			}
		}
		return nil
	})
	for _, p := range also {
		add(p)
	}
	return out
}

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
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// assistedNetns returns a path for each network namespace in which an
// assist changed a socket of g or a group below it (hbm_netns_map), found
// among the named namespaces (/run/netns) and those of every process and
// thread. Namespaces no longer found are gone, and their sockets with them.
func (m *Manager) assistedNetns(g cgroup.Group) []string {
	if m.st.netns == nil {
		return nil
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
		return nil
	}
	return findNetns(want)
}

// findNetns returns one path per namespace inode in want that it finds:
// bind mounts under /run/netns first, then /proc/PID/ns/net, then
// /proc/PID/task/TID/ns/net (a thread may sit in a namespace its process
// left).
func findNetns(want map[uint64]bool) []string {
	var out []string
	try := func(p string) {
		if ino := inode(p); want[ino] {
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
			return out
		}
		if _, err := strconv.Atoi(e.Name()); err == nil {
			try(filepath.Join("/proc", e.Name(), "ns/net"))
		}
	}
	for _, e := range procs {
		if len(want) == 0 {
			return out
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		for _, t := range tasks {
			try(filepath.Join("/proc", e.Name(), "task", t.Name(), "ns/net"))
		}
	}
	return out
}
