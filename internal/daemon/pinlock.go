package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/bpffs"
)

// DaemonLockName is the directory in the pin directory whose lock (flock)
// a daemon holds for as long as it runs: one daemon per pin directory. Two
// would each remove the other's limits as "not declared" (their ownership
// record is shared, their declarations are not). A directory, because a
// bpffs holds no regular files; the lock is on the inode, so it holds across
// mount namespaces (pods) that see the same bpffs. (A bpffs refuses names with
// a dot.)
const DaemonLockName = "daemon-lock"

// checkPinDir refuses a pin directory that is not on a bpffs already
// mounted. hbm's commands mount one at /sys/fs/bpf when there is none; the
// daemon must not: it runs in a mount namespace of its own (a pod; a
// systemd unit with ProtectSystem), where a bpffs it mounted would be
// private, and its pins (every limit) would die with it.
func checkPinDir(dir string) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("pin directory %q: must be an absolute path", dir)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			if !bpffs.Mounted(d) {
				return fmt.Errorf("pin directory %s: %s is not on a bpffs, and the daemon does not mount one: "+
					"one mounted in its own mount namespace (a pod, a systemd unit with ProtectSystem) would be private "+
					"and every limit would die with the daemon. Mount the host's (mount -t bpf bpf %s, or run any hbm command as root on the host; "+
					"systemd does it at boot) and, in Kubernetes, give the pod the host's %s (hostPath, as deploy/kubernetes does)",
					dir, d, bpffs.Root, bpffs.Root)
			}
			return nil
		}
		if d == "/" {
			return fmt.Errorf("pin directory %s: no parent exists", dir)
		}
	}
}

// lockPinDir takes the daemon's lock in dir (created if needed), or
// refuses if another daemon holds it. The lock goes with the process
// (SIGKILL included).
func lockPinDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, DaemonLockName)
	if err := os.MkdirAll(p, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another hbm daemon runs on pin directory %s (it holds %s): one daemon per pin directory "+
				"(two would remove each other's limits); stop it first, or give this one another HBM_PIN_DIR", dir, p)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return f, nil
}
