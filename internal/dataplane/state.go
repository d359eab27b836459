package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hbm-dev/hbm/internal/bpffs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// DefaultPinDir is where HBM pins its state.
const DefaultPinDir = "/sys/fs/bpf/hbm"

// bpffsRoot is the only place hbm mounts a bpffs itself.
const bpffsRoot = bpffs.Root

const (
	linksDir = "links" // one pinned link per attachment: <id>-<dir>, <id>-<dir>-sockops
	progsDir = "progs" // the loaded programs, per build: progs/<hash>/<program>
	txnMap   = "hbm_txn_map"
)

// state is the pinned maps, opened from the pin directory.
type state struct {
	limits, queues, flows, rx, walk *ebpf.Map
	// netns records where the assists changed sockets (maps.h,
	// hbm_netns_map): the namespaces the unset walk visits.
	netns *ebpf.Map
	// txn is the journal of the change under way (one entry): written
	// before a change of several steps, cleared after its last, so the next
	// hbm repairs what a killed one left half done.
	txn *ebpf.Map
	// snap holds the limits and queues, read through a carrier (layout.go),
	// when their pinned layout is not this build's: a read-only open
	// before the upgrade, which only a writer runs.
	snap *snapshot
}

type snapshot struct {
	limits map[hbmHbmKey]hbmHbmConfig
	queues map[hbmHbmKey]hbmHbmQueue
}

// txnPathBytes bounds the group path the journal keeps.
const txnPathBytes = 4080

type txnOp uint32

const (
	txnNone  txnOp = iota
	txnSet         // one direction set (Dir); Rel the group's path
	txnUnset       // one direction removed (Dir); Rel the group's path
	// txnApply: every direction of one Apply, one transaction; Rel holds
	// the plan as JSON (txnPlan): replay completes each of its changes.
	txnApply
)

// txnEntry is the journal's one value. ID is the group's cgroup id, by which
// a replay finds it (the path is what it was when journaled, for messages).
type txnEntry struct {
	Op  txnOp
	Dir uint32
	ID  uint64
	Rel [txnPathBytes]byte
	_   [4]byte
}

// txnPlan is a txnApply's changes: what each direction becomes.
type txnPlan struct {
	Rel     string      `json:"rel,omitempty"`
	Changes []txnChange `json:"changes"`
}

type txnChange struct {
	Dir   Direction `json:"dir"`
	Limit *Limit    `json:"limit,omitempty"` // nil: no limit
}

var txnSpec = ebpf.MapSpec{
	Name:       txnMap,
	Type:       ebpf.Array,
	KeySize:    4,
	ValueSize:  uint32(4 + 4 + 8 + txnPathBytes + 4),
	MaxEntries: 1,
}

func (s *state) all() []*ebpf.Map {
	return []*ebpf.Map{s.limits, s.queues, s.flows, s.rx, s.walk, s.netns, s.txn}
}

func (s *state) close() {
	for _, m := range s.all() {
		if m != nil {
			m.Close()
		}
	}
}

// replacements are the pinned maps a program load uses instead of new ones.
func (s *state) replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		hbmMapHbmLimitMap: s.limits, hbmMapHbmQueueMap: s.queues,
		hbmMapHbmFlowMap: s.flows, hbmMapHbmRxMap: s.rx, hbmMapHbmWalkMap: s.walk,
		hbmMapHbmNetnsMap: s.netns,
	}
}

// openState opens (create: creating) the pinned maps under dir.
func openState(dir string, create bool) (*state, error) {
	spec, err := loadHbm()
	if err != nil {
		return nil, fmt.Errorf("load embedded BPF object: %w", err)
	}
	s := &state{}
	dsts := map[string]**ebpf.Map{
		hbmMapHbmLimitMap: &s.limits, hbmMapHbmQueueMap: &s.queues,
		hbmMapHbmFlowMap: &s.flows, hbmMapHbmRxMap: &s.rx, hbmMapHbmWalkMap: &s.walk,
		hbmMapHbmNetnsMap: &s.netns,
	}
	specs := map[string]*ebpf.MapSpec{txnMap: &txnSpec}
	for name := range dsts {
		specs[name] = spec.Maps[name]
	}
	dsts[txnMap] = &s.txn
	for name, ms := range specs {
		mp, err := openMap(dir, name, ms, create)
		if err != nil {
			s.close()
			return nil, err
		}
		*dsts[name] = mp
	}
	if !create {
		if err := s.readThrough(spec); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// readThrough snapshots the limits and queues, carried to this build's
// layout, when either is pinned in another.
func (s *state) readThrough(spec *ebpf.CollectionSpec) error {
	sameL, _, err1 := sameLayout(s.limits, spec.Maps[hbmMapHbmLimitMap])
	sameQ, _, err2 := sameLayout(s.queues, spec.Maps[hbmMapHbmQueueMap])
	if err := errors.Join(err1, err2); err != nil || sameL && sameQ {
		return err
	}
	s.snap = &snapshot{limits: map[hbmHbmKey]hbmHbmConfig{}, queues: map[hbmHbmKey]hbmHbmQueue{}}
	if err := readCarried(s.limits, spec.Maps[hbmMapHbmLimitMap], s.snap.limits); err != nil {
		return err
	}
	return readCarried(s.queues, spec.Maps[hbmMapHbmQueueMap], s.snap.queues)
}

func readCarried[V any](m *ebpf.Map, ms *ebpf.MapSpec, into map[hbmHbmKey]V) error {
	c, err := newCarrier(m, ms)
	if err != nil {
		return fmt.Errorf("read %s: %w", ms.Name, err)
	}
	return c.each(m, func(kb, vb []byte) error {
		var k hbmHbmKey
		var v V
		if _, err := binary.Decode(kb, binary.NativeEndian, &k); err != nil {
			return err
		}
		if _, err := binary.Decode(vb, binary.NativeEndian, &v); err != nil {
			return err
		}
		into[k] = v
		return nil
	})
}

func openMap(dir, name string, ms *ebpf.MapSpec, create bool) (*ebpf.Map, error) {
	if !create {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) && (name == txnMap || name == hbmMapHbmNetnsMap) {
			return nil, nil // state of an older hbm without it: nothing to read
		}
		if err != nil {
			return nil, fmt.Errorf("open map %s in %s: %w", name, dir, err)
		}
		return mp, nil
	}
	ms = ms.Copy()
	ms.Pinning = ebpf.PinByName
	mp, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: dir})
	if errors.Is(err, ebpf.ErrMapIncompatible) && noLimits(dir) {
		// Left by another hbm version with no limit set: nothing depends
		// on it, so replace it.
		os.Remove(filepath.Join(dir, name))
		mp, err = ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: dir})
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("map %s pinned in %s is from an incompatible hbm version: %w (remove the old limits with that version first)", name, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open map %s in %s: %w", name, dir, err)
	}
	return mp, nil
}

// noLimits reports whether no limit is attached under dir.
func noLimits(dir string) bool {
	links, err := os.ReadDir(filepath.Join(dir, linksDir))
	return err == nil && len(links) == 0 || errors.Is(err, os.ErrNotExist)
}

// Pinned reports whether HBM state was ever pinned under dir.
func Pinned(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, hbmMapHbmLimitMap))
	return err == nil
}

// lockDir takes the pin directory's lock, waiting at most 10 s for another
// hbm to finish.
func lockDir(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open pin directory: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: another hbm has held it for 10s", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ensureBPFFS makes sure dir lives on a bpffs. hbm mounts one only at
// /sys/fs/bpf (when nothing is mounted there); any other directory must
// already be on a bpffs, or hbm refuses, so it never mounts over a directory
// it was not made for.
func ensureBPFFS(dir string) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("pin directory %q: must be an absolute path", dir)
	}
	if dir == bpffsRoot || strings.HasPrefix(dir, bpffsRoot+"/") {
		if err := bpffs.EnsureRoot(); err != nil {
			return err
		}
	}
	// The nearest existing directory must be on a bpffs.
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			if !isBPFFS(d) {
				return fmt.Errorf("pin directory %s is not on a bpffs (%s is not; hbm mounts one only at %s)", dir, d, bpffsRoot)
			}
			break
		}
		if d == "/" {
			return fmt.Errorf("pin directory %s: no parent exists", dir)
		}
	}
	return nil
}

func isBPFFS(dir string) bool { return bpffs.Mounted(dir) }
