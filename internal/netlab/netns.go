package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread inside the named network namespace ns and
// returns its error.
func InNetns(ns string, fn func() error) error {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("netlab: open netns %s: %w", ns, err)
	}
	defer target.Close()
	return onThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("netlab: enter netns %s: %w", ns, err)
		}
		return fn()
	})
}

// onThread runs fn on a locked OS thread that fn may move to another
// network namespace; the thread goes back to its own afterwards. If it
// cannot, it stays locked and dies with its goroutine, never reused in the
// wrong namespace.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("netlab: current netns: %w", err)
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("netlab: back to the thread's netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// handle returns a netlink handle inside namespace ns.
func handle(ns string) (*netlink.Handle, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("netlab: open netns %s: %w", ns, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlab: netlink in %s: %w", ns, err)
	}
	return nh, nil
}

// withLink calls fn with a netlink handle inside namespace ns and dev,
// looked up there.
func withLink(ns, dev string, fn func(*netlink.Handle, netlink.Link) error) error {
	nh, err := handle(ns)
	if err != nil {
		return err
	}
	defer nh.Close()
	lk, err := nh.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("netlab: %s in %s: %w", dev, ns, err)
	}
	return fn(nh, lk)
}

// createNetns creates the named namespace ns (as `ip netns add` does:
// bind-mounted at /run/netns/ns).
func createNetns(ns string) error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("netlab: %w", err)
	}
	return onThread(func() error {
		h, err := netns.NewNamed(ns) // moves the thread into it
		if err != nil {
			return fmt.Errorf("netlab: create netns %s: %w", ns, err)
		}
		return h.Close()
	})
}

// deleteNetns kills the processes this PID namespace sees in ns, then
// unmounts and removes it. A missing namespace is not an error.
func deleteNetns(ns string) error {
	path := filepath.Join(netnsDir, ns)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for i := 0; i < 50; i++ {
		pids := netnsPids(path)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netlab: unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netlab: remove %s: %w", path, err)
	}
	return nil
}

// netnsPids lists the processes (that this PID namespace sees) whose network
// namespace is the one bound at path, as `ip netns pids` does.
func netnsPids(path string) []int {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procSysPath is key's file under /proc/sys ("net.ipv4.tcp_ecn" ->
// /proc/sys/net/ipv4/tcp_ecn).
func procSysPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// nsSysctl sets key=value inside namespace ns (net.* keys are per namespace:
// the file is opened from inside it).
func nsSysctl(ns, key, value string) error {
	return InNetns(ns, func() error {
		if err := os.WriteFile(procSysPath(key), []byte(value+"\n"), 0); err != nil {
			return fmt.Errorf("netlab: sysctl %s=%s in %s: %w", key, value, ns, err)
		}
		return nil
	})
}

// nsReadSysctl reads key inside namespace ns.
func nsReadSysctl(ns, key string) (string, error) {
	var v string
	err := InNetns(ns, func() error {
		b, err := os.ReadFile(procSysPath(key))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}
