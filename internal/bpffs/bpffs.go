// Package bpffs is hbm's one helper for the BPF filesystem: whether a
// directory is on one, and mounting one at Root (the only place hbm mounts
// a bpffs itself) when nothing is mounted there. systemd mounts it at boot;
// minimal systems and fresh containers may not.
package bpffs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Root is where pins live and the only place hbm mounts a bpffs.
const Root = "/sys/fs/bpf"

// Mounted reports whether dir is on a BPF filesystem.
func Mounted(dir string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(dir, &fs) == nil && uint32(fs.Type) == unix.BPF_FS_MAGIC
}

// EnsureRoot mounts a bpffs at Root unless one is mounted there.
func EnsureRoot() error {
	if Mounted(Root) {
		return nil
	}
	if err := unix.Mount("bpf", Root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("bpffs not mounted at %s and mounting it failed: %w", Root, err)
	}
	return nil
}
