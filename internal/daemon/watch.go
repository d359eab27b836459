package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Watcher follows cgroup directories and the configuration file with
// inotify: a group created or removed in a watched directory (mkdir and rmdir
// on cgroup2 raise IN_CREATE and IN_DELETE like on any filesystem) signals
// Cgroups; the file written or replaced signals Config. Signals coalesce:
// each channel holds at most one.
type Watcher struct {
	Cgroups chan struct{}
	Config  chan struct{}

	f          *os.File
	fd         int // f's descriptor (f.Fd() would make it blocking)
	mu         sync.Mutex
	byPath     map[string]int
	byWD       map[int]string
	configWD   int
	configName string
	done       chan struct{}
}

// configMapData is the link kubelet renames over in a ConfigMap volume.
const configMapData = "..data"

const cgroupMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR
const configMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_ATTRIB

// NewWatcher starts watching; configPath ("" for none) is followed through
// its directory, so an editor's write-and-rename is seen as well, and so is
// the swap of the ..data link by which kubelet updates a file mounted from a
// ConfigMap (not with subPath: kubelet never updates those).
func NewWatcher(configPath string) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{
		Cgroups:  make(chan struct{}, 1),
		Config:   make(chan struct{}, 1),
		f:        os.NewFile(uintptr(fd), "inotify"), // non-blocking: Read parks in the poller, Close ends it
		fd:       fd,
		byPath:   map[string]int{},
		byWD:     map[int]string{},
		configWD: -1,
		done:     make(chan struct{}),
	}
	if configPath != "" {
		abs, err := filepath.Abs(configPath)
		if err != nil {
			w.Close()
			return nil, err
		}
		wd, err := unix.InotifyAddWatch(fd, filepath.Dir(abs), configMask|unix.IN_ONLYDIR)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", filepath.Dir(abs), err)
		}
		w.configWD, w.configName = wd, filepath.Base(abs)
	}
	go w.read()
	return w, nil
}

// Close stops watching.
func (w *Watcher) Close() error {
	err := w.f.Close()
	<-w.done
	return err
}

// Set makes the watched cgroup directories exactly dirs and returns how many
// it started watching (a directory that vanished in between is skipped: its
// parent's watch reports it).
func (w *Watcher) Set(dirs []string) (added int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
	}
	for p, wd := range w.byPath {
		if !want[p] {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.byPath, p)
			delete(w.byWD, wd)
		}
	}
	for _, d := range dirs {
		if _, ok := w.byPath[d]; ok {
			continue
		}
		wd, e := unix.InotifyAddWatch(w.fd, d, cgroupMask)
		if e != nil {
			if !errors.Is(e, unix.ENOENT) && !errors.Is(e, unix.ENOTDIR) && err == nil {
				err = fmt.Errorf("watch %s: %w", d, e)
			}
			continue
		}
		w.byPath[d] = wd
		w.byWD[wd] = d
		added++
	}
	return added, err
}

// Watched returns how many cgroup directories are watched.
func (w *Watcher) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPath)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			off += unix.SizeofInotifyEvent + nameLen
			w.event(wd, mask, string(name))
		}
	}
}

func (w *Watcher) event(wd int, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		signal(w.Cgroups)
		signal(w.Config)
		return
	}
	if wd == w.configWD {
		// ..data: a Kubernetes ConfigMap or Secret volume, where the file
		// is a link through ..data, which kubelet swaps (a rename) on
		// every update.
		if name == w.configName || name == configMapData {
			signal(w.Config)
		}
		return
	}
	if mask&unix.IN_IGNORED != 0 { // the directory went away: its parent reports it
		w.mu.Lock()
		if p, ok := w.byWD[wd]; ok {
			delete(w.byWD, wd)
			delete(w.byPath, p)
		}
		w.mu.Unlock()
		return
	}
	if mask&unix.IN_ISDIR != 0 {
		signal(w.Cgroups)
	}
}
