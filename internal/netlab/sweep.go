package netlab

import (
	"fmt"
	"github.com/hbm-dev/hbm/internal/bpffs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hbm-dev/hbm/internal/cgroup"
)

// Sweep removes what labs whose owner died left behind: their namespaces
// (killing what this PID namespace sees running inside), and their cgroups
// (cgroup.kill first). What a live lab holds is never touched, whichever
// PID namespace it runs in (owner.go). log, if not nil, hears what is
// removed. New sweeps before it builds.
func Sweep(log func(format string, args ...any)) {
	if log == nil {
		log = func(string, ...any) {}
	}
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), NetnsPrefix) || tokenOf(e.Name()) == "" {
				continue
			}
			if h, ok := abandoned(filepath.Join(netnsDir, e.Name())); ok {
				log("removing leftover namespace %s", e.Name())
				if err := deleteNetns(e.Name()); err != nil {
					log("%v", err)
				}
				h.release()
			}
		}
	}
	if mnt, err := cgroup.Mount(); err == nil {
		if entries, err := os.ReadDir(mnt); err == nil {
			for _, e := range entries {
				if !e.IsDir() || tokenOf(e.Name()) == "" || !strings.HasPrefix(e.Name(), GroupPrefix) {
					continue
				}
				if h, ok := abandoned(filepath.Join(mnt, e.Name())); ok {
					log("removing leftover cgroup /%s", e.Name())
					if err := removeCgroupTree("/" + e.Name()); err != nil {
						log("%v", err)
					}
					h.release()
				}
			}
		}
	}
	sweepLocks()
}

// sweepLocks removes token lock files nobody holds (a killed owner's).
func sweepLocks() {
	entries, err := os.ReadDir(lockDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		tok, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || len(tok) != 8 {
			continue
		}
		path := filepath.Join(lockDir, e.Name())
		// A fresh one may be its creator's, between create and flock.
		if st, err := os.Lstat(path); err != nil || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		if h, err := holdPath(path); err == nil {
			os.Remove(path)
			h.release()
		}
	}
}

// PinDir is a private bpffs directory for HBM's state (hbm --pin-dir):
// Path is /sys/fs/bpf/hbm-lab-TOKEN/pins. The directory above it is held
// like a lab's objects (hbm flocks Path itself for its own use), so
// SweepPinDirs removes it only once its owner is gone. Markers (empty
// directories beside Path) record what the owner changed outside it, for
// the sweep to undo.
type PinDir struct {
	Path string
	root string
	lock *hold // the token lock
	dir  *hold // root
}

// NewPinDir creates and holds a private pin directory.
func NewPinDir() (*PinDir, error) {
	tok, lock, err := newOwner()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(bpffsDir, GroupPrefix+tok)
	if err := bpffs.EnsureRoot(); err != nil {
		os.Remove(lock.path)
		lock.release()
		return nil, fmt.Errorf("netlab: pin directory: %w", err)
	}
	fail := func(err error) (*PinDir, error) {
		os.RemoveAll(root)
		os.Remove(lock.path)
		lock.release()
		return nil, fmt.Errorf("netlab: pin directory: %w", err)
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return fail(err)
	}
	dir, err := holdPath(root)
	if err != nil {
		return fail(err)
	}
	p := &PinDir{Path: filepath.Join(root, "pins"), root: root, lock: lock, dir: dir}
	if err := os.Mkdir(p.Path, 0o700); err != nil {
		dir.release()
		return fail(err)
	}
	return p, nil
}

// Mark records marker (for example "installed-dctcp").
func (p *PinDir) Mark(marker string) error {
	return os.Mkdir(filepath.Join(p.root, "marker-"+marker), 0o700)
}

// Unmark removes marker.
func (p *PinDir) Unmark(marker string) error {
	return os.Remove(filepath.Join(p.root, "marker-"+marker))
}

// Close removes the directory and everything pinned in it, and releases it.
func (p *PinDir) Close() error {
	err := os.RemoveAll(p.root)
	os.Remove(p.lock.path)
	p.dir.release()
	p.lock.release()
	return err
}

// SweepPinDirs removes the pin directories of owners that died, first
// calling undo for each marker in them (what the owner changed elsewhere,
// e.g. a congestion control it installed). Markers are undone only while no
// live owner has a pin directory (a live one may be using what the dead one
// installed), and a directory whose undo fails is kept: both wait for a
// later sweep.
func SweepPinDirs(log func(format string, args ...any), undo func(marker string) error) {
	if log == nil {
		log = func(string, ...any) {}
	}
	entries, err := os.ReadDir(bpffsDir)
	if err != nil {
		return
	}
	type dead struct {
		path string
		h    *hold
	}
	var deads []dead
	live := 0
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), GroupPrefix) || tokenOf(e.Name()) == "" {
			continue
		}
		path := filepath.Join(bpffsDir, e.Name())
		if h, ok := abandoned(path); ok {
			deads = append(deads, dead{path, h})
		} else {
			live++
		}
	}
	for _, d := range deads {
		keep := false
		if subs, err := os.ReadDir(d.path); err == nil {
			for _, s := range subs {
				m, ok := strings.CutPrefix(s.Name(), "marker-")
				if !ok {
					continue
				}
				switch {
				case live > 0:
					log("%s: keeping %s of a dead owner while %d live one(s) may use it", d.path, m, live)
					keep = true
				case undo != nil:
					log("undoing %s of a dead owner (%s)", m, d.path)
					if err := undo(m); err != nil {
						log("%s: %v (kept for the next run)", m, err)
						keep = true
					}
				}
			}
		}
		if !keep {
			log("removing leftover pin directory %s", d.path)
			if err := os.RemoveAll(d.path); err != nil {
				log("%v", err)
			}
		}
		d.h.release()
	}
}

// Objects lists every lab object on the machine, live or left behind:
// namespace files, cgroup directories and pin directories (for tests that
// check what a run left).
func Objects() []string {
	var out []string
	add := func(dir, prefix string) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) && tokenOf(e.Name()) != "" {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	add(netnsDir, NetnsPrefix)
	if mnt, err := cgroup.Mount(); err == nil {
		add(mnt, GroupPrefix)
	}
	add(bpffsDir, GroupPrefix)
	return out
}
