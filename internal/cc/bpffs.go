package cc

import (
	"fmt"
	"github.com/hbm-dev/hbm/internal/bpffs"
	"os"

	"golang.org/x/sys/unix"
)

// isBPFFS reports whether dir is a mounted BPF filesystem.
func isBPFFS(dir string) (bool, error) {
	if _, err := os.Stat(dir); err != nil {
		return false, err
	}
	return bpffs.Mounted(dir), nil
}

// ensureBPFFS mounts the BPF filesystem at BPFFS unless it is mounted: pins
// live there (systemd mounts it at boot; minimal systems may not).
func ensureBPFFS() error {
	if ok, err := isBPFFS(BPFFS); err == nil && ok {
		return nil
	}
	if err := os.MkdirAll(BPFFS, 0o700); err != nil {
		return fmt.Errorf("bpffs: create %s: %w", BPFFS, err)
	}
	if BPFFS == bpffs.Root {
		return bpffs.EnsureRoot()
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("bpffs: mount at %s: %w", BPFFS, err)
	}
	return nil
}

// lockDir takes an exclusive flock on dir, serialising concurrent hbm cc
// commands; the returned function releases it.
func lockDir(dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil
}
