package netlab

// Names and leftovers. Everything a lab creates carries its token, a random
// value drawn when the lab is built: namespaces hbl<token>-<host> (and
// hbl<token>-sw-<link> for switches), the cgroup /hbm-lab-<token>, and, for
// callers that ask for one (hbm eval), the pin directory
// /sys/fs/bpf/hbm-lab-<token>. Names never carry a PID: a PID means nothing
// across PID namespaces, and a reused one would make a dead lab look alive.
//
// Liveness is a flock. The owner holds an exclusive flock on each of these
// objects themselves (the namespace file, the cgroup directory, the pin
// directory) for as long as it lives; the kernel drops the locks when it
// dies, however it dies. A sweep removes an object only when it can take that
// lock itself. The lock is on the object's inode, so it is seen from every
// PID and mount namespace that sees the object: an eval in a container never
// removes a live eval's namespaces on the host, nor the other way round.
// A lab also holds /run/hbm-netlab/<token>.lock from before it creates
// anything, which covers the instant between creating an object and locking
// it.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// NetnsPrefix starts every namespace a lab creates.
	NetnsPrefix = "hbl"
	// GroupPrefix starts the cgroup (at the cgroup2 root) and the pin
	// directory (in /sys/fs/bpf) of a lab.
	GroupPrefix = "hbm-lab-"
	netnsDir    = "/run/netns"
	lockDir     = "/run/hbm-netlab"
	bpffsDir    = "/sys/fs/bpf"
)

// newToken returns 8 random hex digits.
func newToken() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("netlab: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// tokenOf returns the token of a name made by this package ("hbl1a2b3c4d-snd",
// "hbm-lab-1a2b3c4d"), or "".
func tokenOf(name string) string {
	var rest string
	var ok bool
	if rest, ok = strings.CutPrefix(name, GroupPrefix); !ok {
		if rest, ok = strings.CutPrefix(name, NetnsPrefix); !ok {
			return ""
		}
	}
	tok, _, _ := strings.Cut(rest, "-")
	if len(tok) != 8 {
		return ""
	}
	if _, err := hex.DecodeString(tok); err != nil {
		return ""
	}
	return tok
}

// A hold is an exclusive flock on a file or directory, held until Release
// (or this process's death).
type hold struct {
	path string
	fd   int
}

// holdPath takes the flock on path without waiting: an error means another
// live process holds it (or path cannot be opened).
func holdPath(path string) (*hold, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &hold{path: path, fd: fd}, nil
}

func (h *hold) release() {
	if h != nil && h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
}

// newOwner draws a token and holds its lock file: what an owner of lab
// objects does first.
func newOwner() (string, *hold, error) {
	tok, err := newToken()
	if err != nil {
		return "", nil, err
	}
	lock, err := tokenLock(tok)
	if err != nil {
		return "", nil, err
	}
	return tok, lock, nil
}

// tokenLock creates and holds /run/hbm-netlab/<token>.lock.
func tokenLock(token string) (*hold, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	path := filepath.Join(lockDir, token+".lock")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("netlab: lock %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlab: lock %s: %w", path, err)
	}
	return &hold{path: path, fd: fd}, nil
}

// tokenLive reports whether a live process holds token's lock file.
func tokenLive(token string) bool {
	h, err := holdPath(filepath.Join(lockDir, token+".lock"))
	if err == nil {
		h.release()
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}

// abandoned takes path's flock if no live owner holds it (and its token's
// lock file is not held either). The caller removes the object, then
// releases the hold.
func abandoned(path string) (*hold, bool) {
	h, err := holdPath(path)
	if err != nil {
		return nil, false
	}
	if tok := tokenOf(filepath.Base(path)); tok != "" && tokenLive(tok) {
		h.release()
		return nil, false
	}
	return h, true
}
