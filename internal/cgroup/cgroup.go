// Package cgroup finds the cgroup v2 hierarchy and resolves the paths users
// give hbm into groups with a stable identity (the cgroup id the kernel hands
// BPF programs).
package cgroup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Group is a cgroup v2 group.
type Group struct {
	Dir string // absolute directory, under the cgroup2 mount
	Rel string // path relative to the mount, "/" for the root group
	ID  uint64 // cgroup id (kernfs inode number), as bpf_skb_cgroup_id reports it
}

func (g Group) String() string { return g.Rel }

var (
	mountOnce sync.Once
	mountDir  string
	mountErr  error
)

// Mount returns the mount point of the cgroup v2 hierarchy, read from
// /proc/self/mountinfo (never assumed).
func Mount() (string, error) {
	mountOnce.Do(func() {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			mountErr = fmt.Errorf("read mountinfo: %w", err)
			return
		}
		defer f.Close()
		mountDir, mountErr = parseMountinfo(f)
	})
	return mountDir, mountErr
}

// ErrNoCgroup2 means no cgroup v2 hierarchy is mounted.
var ErrNoCgroup2 = errors.New("no cgroup2 filesystem mounted (see /proc/self/mountinfo)")

// parseMountinfo returns the first cgroup2 mount point in mountinfo format.
func parseMountinfo(r io.Reader) (string, error) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if fields[sep+1] == "cgroup2" {
			return unescapeMountinfo(fields[4]), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	return "", ErrNoCgroup2
}

// unescapeMountinfo undoes the octal escapes (\040 for space...) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrRootSpelling is returned for a path that names the root group in any
// other way than "/": an empty string (an unset shell variable), ".", "a/..",
// the mount point itself. A limit on the root group limits the whole host, so
// only the explicit spelling may ask for it.
var ErrRootSpelling = errors.New(`names the root group (the whole host): write "/" to mean it`)

// ErrRemoved means the group an id named was removed.
var ErrRemoved = errors.New("cgroup removed")

// Resolve turns a user-supplied path into a Group. The path is either an
// absolute path under the cgroup2 mount or a path relative to the mount
// ("/a/b" and "a/b" the same group). Only "/" is the root group.
func Resolve(path string) (Group, error) {
	mnt, err := Mount()
	if err != nil {
		return Group{}, err
	}
	return resolveUser(mnt, path)
}

func resolveUser(mnt, path string) (Group, error) {
	g, err := resolveUnder(mnt, path)
	if err == nil && g.Rel == "/" && path != "/" {
		return Group{}, fmt.Errorf("cgroup path %q %w", path, ErrRootSpelling)
	}
	return g, err
}

func resolveUnder(mnt, path string) (Group, error) {
	if strings.ContainsRune(path, 0) {
		return Group{}, fmt.Errorf("cgroup path %q contains a NUL byte", path)
	}
	clean := filepath.Clean("/" + path)
	var dir string
	if clean == mnt || strings.HasPrefix(clean, mnt+"/") {
		dir = clean
	} else {
		dir = filepath.Join(mnt, clean)
	}
	rel := strings.TrimPrefix(dir, mnt)
	if rel == "" {
		rel = "/"
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return Group{}, fmt.Errorf("%q is not a cgroup v2 group (looked for %s): %w", path, dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Group{}, fmt.Errorf("%q is not a cgroup v2 group: %s is not a directory", path, dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return Group{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return Group{}, fmt.Errorf("%q is not a cgroup v2 group: %s is not on a cgroup2 filesystem", path, dir)
	}
	return Group{Dir: dir, Rel: rel, ID: st.Ino}, nil
}

// fileidKernfs is the file handle type kernfs (and so cgroup2) uses; its
// handle is the 8-byte node id, which is the cgroup id.
const fileidKernfs = 0xfe

// PathOf returns the group whose cgroup id is id, by opening it through its
// file handle: exact even after renames, and an error once the group is gone.
func PathOf(id uint64) (Group, error) {
	mnt, err := Mount()
	if err != nil {
		return Group{}, err
	}
	mfd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Group{}, fmt.Errorf("open %s: %w", mnt, err)
	}
	defer unix.Close(mfd)
	buf := make([]byte, 8)
	binary.NativeEndian.PutUint64(buf, id)
	h := unix.NewFileHandle(fileidKernfs, buf)
	fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return Group{}, fmt.Errorf("cgroup id %d: %w", id, err)
	}
	defer unix.Close(fd)
	dir, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return Group{}, fmt.Errorf("cgroup id %d: %w", id, err)
	}
	if strings.HasSuffix(dir, " (deleted)") {
		return Group{}, fmt.Errorf("cgroup id %d: %w", id, ErrRemoved)
	}
	// A group outside this process's cgroup namespace opens, but its path
	// reads as the namespace's root: only a path that leads back to id is
	// its path.
	g, err := resolveUnder(mnt, dir)
	if err == nil && g.ID != id {
		return Group{}, fmt.Errorf("cgroup id %d: %w (another cgroup namespace's?)", id, ErrNotVisible)
	}
	return g, err
}

// ErrNotVisible means a group exists but has no path under this process's
// cgroup2 mount (it lies outside its cgroup namespace).
var ErrNotVisible = errors.New("cgroup not under this mount")

// Create makes the group rel (relative to the mount) and its parents. It is
// meant for tests and testbeds; hbm itself never creates groups.
func Create(rel string) (Group, error) {
	mnt, err := Mount()
	if err != nil {
		return Group{}, err
	}
	dir := filepath.Join(mnt, filepath.Clean("/"+rel))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Group{}, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return resolveUnder(mnt, dir)
}

// Remove removes the group rel and every group below it, moving no process:
// it fails if processes remain. Missing groups are not an error.
func Remove(rel string) error {
	mnt, err := Mount()
	if err != nil {
		return err
	}
	dir := filepath.Join(mnt, filepath.Clean("/"+rel))
	if dir == mnt {
		return errors.New("refusing to remove the root cgroup")
	}
	return removeTree(dir)
}

// RemoveWait is Remove retried every interval, at most tries times: the
// processes of a group that just exited leave it asynchronously, so its
// removal may fail with EBUSY for a moment. It returns the last error.
func RemoveWait(rel string, tries int, interval time.Duration) error {
	var err error
	for i := 0; i < tries; i++ {
		if err = Remove(rel); err == nil {
			return nil
		}
		time.Sleep(interval)
	}
	return err
}

func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}
